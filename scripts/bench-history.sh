#!/usr/bin/env bash
# Peak RSS and time of the history tools (history_search / history_read, issue 27) over a
# 64 MiB and a 1 GiB messages.jsonl: the memory must not grow with the history.
# Usage: scripts/bench-history.sh [MIB...]   (default: 64 1024; needs ~1.1 GiB free per size)
# Builds the example in the dev profile (BENCH_PROFILE=bench for an optimised build).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${BENCH_PROFILE:-dev}"
target="${CARGO_TARGET_DIR:-target}"
cargo build -q -p ctxhost --example bench_history --profile "$profile"
dir_name=$([ "$profile" = dev ] && echo debug || echo "$profile")
bin="$target/$dir_name/examples/bench_history"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(64 1024)
for mib in "${sizes[@]}"; do
  "$bin" build --mib "$mib" --dir "$work/h$mib"
  /usr/bin/time -v "$bin" query --dir "$work/h$mib" 2> "$work/time$mib.txt"
  echo "peak RSS over ${mib} MiB: $(grep 'Maximum resident' "$work/time$mib.txt" | awk '{print $NF}') KiB;" \
    "wall $(grep 'Elapsed (wall' "$work/time$mib.txt" | awk '{print $NF}')"
  rm -rf "$work/h$mib"
done
