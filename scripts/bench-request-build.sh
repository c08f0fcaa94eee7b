#!/usr/bin/env bash
# bench-request-build.sh — request build throughput through the format component vs `cp` (issue 3).
#
# What it measures, over a synthetic current.jsonl of SIZE MiB (default 256):
#   - write-request of builtin:openai-chat: current.jsonl -> request.json, streamed by the
#     component inside the wasmtime sandbox, called in-process through ctxhost::runtime exactly
#     as a task process calls it (host/examples/bench_context.rs, `build`). The component is
#     loaded and instantiated once before timing; its guest memory peak is printed too;
#   - std::fs::copy of the same file (the floor), in the same process;
#   - the in-memory baseline (parse every line into a Vec<serde_json::Value>, build the body,
#     serialise, write: host/examples/bench_support/inmem.rs), in the same process;
#   - `cp --reflink=never` of the same file as a separate process, timed by hyperfine (a public
#     cross-check of the copy figure).
#   Each: one warm-up, then BENCH_RUNS timed runs (default 3); medians, MB/s = 10^6 bytes of
#   current.jsonl per second, and ratios. The file is in the page cache for every run.
#
# Run (from anywhere in the repository):
#   scripts/bench-request-build.sh              # 256 MiB
#   scripts/bench-request-build.sh 64           # 64 MiB
#   BENCH_RUNS=5 scripts/bench-request-build.sh
#   BENCH_PROFILE=bench scripts/bench-request-build.sh   # optimised build, shared with `cargo bench` (~10 min to build)
#   BENCH_NO_BUILD=1 scripts/bench-request-build.sh      # measure the bench_context already built (no cargo)
# Needs: cargo, python3, hyperfine (installed with apt-get when missing and run as root;
# otherwise: apt-get install -y hyperfine, or cargo install hyperfine), ~2.2 x SIZE free in
# $TMPDIR. Takes about 2.5 min at 256 MiB with the debug build on 2 cores.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=bench-request-build
source "$ROOT/scripts/bench_lib.sh"
RUNS=${BENCH_RUNS:-3}
MIB=${1:-256}

die() { bench_die "$@"; }
[[ $MIB =~ ^[1-9][0-9]*$ ]] || die "SIZE is whole MiB ≥ 1, got '$MIB'"
bench_positive "$RUNS" BENCH_RUNS
command -v python3 >/dev/null || die "python3 is needed to read hyperfine's JSON"
if ! command -v hyperfine >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "installing hyperfine (apt-get)..." >&2
    apt-get install -y -q hyperfine >/dev/null ||
      { apt-get update -q >/dev/null && apt-get install -y -q hyperfine >/dev/null; } ||
      die "could not install hyperfine with apt-get"
  else
    die "hyperfine is needed: apt-get install -y hyperfine (or cargo install hyperfine)"
  fi
fi

bench_profile
BENCH="$OUT/examples/bench_context"
bench_build --example bench_context
[[ -x $BENCH ]] || die "$BENCH is not built (build it, or run without BENCH_NO_BUILD)"

bench_workdir

echo "generating a $MIB MiB history..." >&2
"$BENCH" gen "$WORK/task" --mib "$MIB" >&2
echo "timing write-request, fs::copy and the in-memory build ($RUNS runs each)..." >&2
"$BENCH" build "$WORK/task" --runs "$RUNS" --cache "$WORK/cache" | tee "$WORK/build.out"

echo "timing cp with hyperfine..." >&2
hyperfine --style basic --warmup 1 --runs "$RUNS" --export-json "$WORK/cp.json" \
  "cp --reflink=never '$WORK/task/current.jsonl' '$WORK/copy.jsonl'" >&2
python3 - "$WORK/cp.json" "$WORK/task/current.jsonl" "$WORK/build.out" <<'PY'
import json, os, re, statistics, sys
cp = json.load(open(sys.argv[1]))["results"][0]
size = os.path.getsize(sys.argv[2])
median = statistics.median(cp["times"])
line = next(l for l in open(sys.argv[3]) if "write-request (builtin" in l)
component = float(re.search(r"\)\s*:\s*([0-9.]+) s", line).group(1))
print(f"  cp --reflink=never (hyperfine):       {median:8.3f} s  {size / 1e6 / median:8.1f} MB/s"
      f"  (process incl. exec; min {min(cp['times']):.3f} s)")
print(f"  write-request / cp (hyperfine) time ratio: {component / median:.1f}x")
PY
