#!/usr/bin/env bash
# bench-store.sh — the task store under 1, 2 and 3 workers, SQLite and PostgreSQL (issue 18):
# claim latency (the claim statement alone, 1-3 concurrent claimers) and tasks per second (real
# `ctxhost run` workers on distinct host names against a fake OpenAI server answering at once).
# host/benches/task_store.rs says exactly what is measured.
#
# Run:
#   scripts/bench-store.sh                 # starts the throwaway PostgreSQL of the tests
#                                          # (scripts/test-postgres.sh) if it is not running
#   BENCH_RUNS=5 scripts/bench-store.sh    # runs per figure (medians; default 3)
#   BENCH_PROFILE=bench scripts/bench-store.sh   # release-based build (first build ~10 min)
# It refuses to start when the 1-minute load average is ≥ 1.5 (timings on a busy machine
# mislead); BENCH_FORCE=1 runs anyway.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
load=$(cut -d' ' -f1 /proc/loadavg)
if [[ ${BENCH_FORCE:-0} != 1 ]] && awk -v l="$load" 'BEGIN { exit !(l >= 1.5) }'; then
  echo "bench-store: load average is $load (≥ 1.5): the machine is busy; rerun later or set BENCH_FORCE=1" >&2
  exit 1
fi
if [[ -z "${CTXHOST_BENCH_DATABASE_URL:-}" ]]; then
  CTXHOST_BENCH_DATABASE_URL="$("$ROOT/scripts/test-postgres.sh" start)"
  export CTXHOST_BENCH_DATABASE_URL
fi
if [[ ${BENCH_PROFILE:-dev} == dev ]]; then
  exec cargo bench -p ctxhost --profile dev --bench task_store
fi
exec cargo bench -p ctxhost --bench task_store
