#!/usr/bin/env bash
# bench-runtime.sh — plugin runtime costs (issue 2), divan benchmark host/benches/runtime.rs.
#
# Measures: cold Cranelift compile of builtin:jsonl-store, a cached load from the compiled-
# component cache, a new sandboxed instance, and one add-message call through the component
# boundary (medians per iteration, printed by divan).
#
# Run:
#   scripts/bench-runtime.sh            # `cargo bench` profile (release-based): representative
#                                       # figures, but the first build takes ~10 min on 2 cores
#   BENCH_PROFILE=dev scripts/bench-runtime.sh   # debug build: quick to build, slower figures
# It refuses to start when the 1-minute load average is ≥ 1.5 (timings on a busy machine
# mislead); BENCH_FORCE=1 runs anyway.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
load=$(cut -d' ' -f1 /proc/loadavg)
if [[ ${BENCH_FORCE:-0} != 1 ]] && awk -v l="$load" 'BEGIN { exit !(l >= 1.5) }'; then
  echo "bench-runtime: load average is $load (≥ 1.5): the machine is busy; rerun later or set BENCH_FORCE=1" >&2
  exit 1
fi
if [[ ${BENCH_PROFILE:-bench} == dev ]]; then
  exec cargo bench -p ctxhost --profile dev --bench runtime
fi
exec cargo bench -p ctxhost --bench runtime
