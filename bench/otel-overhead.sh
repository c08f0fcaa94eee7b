#!/usr/bin/env bash
# otel-overhead.sh — what OpenTelemetry traces cost a task (issue 32: a collector that is down
# must not slow a task): the wall time of one task process (`ctxhost task-exec UUID`, from its
# start to its exit, the flush of its last spans included) with
#   off      no OTEL_* variable (traces off),
#   live     OTEL_EXPORTER_OTLP_ENDPOINT at a receiver that answers every export with 200,
#   refused  ... at a closed port (connection refused),
#   silent   ... at a collector that accepts connections and never answers,
# side by side, medians of BENCH_RUNS runs (default 7) each, the modes interleaved run by run so
# a change of machine load hits them alike.
#
# The task: against bench/otel_servers.py's fake OpenAI server, BENCH_TOOL_CALLS (default 4)
# tool calls of `read_text_file` (no server offers it: each fails at once, a tool call span all
# the same), then "Done."; each answer BENCH_LLM_DELAY_MS (default 300) after its request, a
# model's latency; compression off. Each run checks that the task completed; the live
# receiver's export count is printed, and the silent and refused runs' logs must say how many
# spans were lost.
#
# Run (from anywhere in the repository):
#   bench/otel-overhead.sh                   # debug build, 7 runs per mode
#   BENCH_RUNS=11 BENCH_TOOL_CALLS=8 bench/otel-overhead.sh
#   BENCH_LLM_DELAY_MS=0 bench/otel-overhead.sh   # tasks shorter than the probe (1 s)
#   BENCH_PROFILE=release bench/otel-overhead.sh   # optimised build (~10-25 min to build on 2 cores)
#   BENCH_NO_BUILD=1 ...                     # measure what is built
#   BENCH_KEEP=1 ...                         # keep the work directory (task logs)
# Needs: cargo, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=otel-overhead
source "$ROOT/scripts/bench_lib.sh"
RUNS=${BENCH_RUNS:-7}
TOOL_CALLS=${BENCH_TOOL_CALLS:-4}
LLM_DELAY_MS=${BENCH_LLM_DELAY_MS:-300}
MODES=(off live refused silent)

die() { bench_die "$@"; }
command -v python3 >/dev/null || die "python3 is needed for the fake servers"
bench_positive "$RUNS" BENCH_RUNS
bench_whole "$TOOL_CALLS" BENCH_TOOL_CALLS
bench_whole "$LLM_DELAY_MS" BENCH_LLM_DELAY_MS
bench_profile
bench_build --bin ctxhost
CTXHOST="$OUT/ctxhost"
[[ -x $CTXHOST ]] || die "no ctxhost at $CTXHOST"

bench_workdir

bench_server "$WORK/ports" python3 "$ROOT/bench/otel_servers.py" "$WORK/ports" "$WORK/exports" "$TOOL_CALLS" "$LLM_DELAY_MS"
read -r LLM_PORT LIVE_PORT SILENT_PORT <"$WORK/ports"
# A port nothing listens on: bound, then released.
REFUSED_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

CFG="$WORK/config.yaml"
cat >"$CFG" <<YAML
llm:
  provider: openai
  base_url: http://127.0.0.1:$LLM_PORT
  model: bench-model
  api_key_env: ""
  stream: false
  context_length: 100000
  max_output_tokens: 256
  max_retries: 0
plugins:
  compressor: none
YAML
CTX="$WORK/contexts"

# endpoint MODE: the OTLP endpoint of MODE (empty: traces off).
endpoint() {
  case $1 in
    off) echo "" ;;
    live) echo "http://127.0.0.1:$LIVE_PORT" ;;
    refused) echo "http://127.0.0.1:$REFUSED_PORT" ;;
    silent) echo "http://127.0.0.1:$SILENT_PORT" ;;
  esac
}

# measure MODE TAG: prints the wall seconds of one task process in MODE.
measure() {
  local mode=$1 tag=$2 uuid ep start end
  uuid=$("$CTXHOST" --config "$CFG" --contexts "$CTX" submit "bench: read the files" 2>"$WORK/submit.err") ||
    die "submit failed: $(cat "$WORK/submit.err")"
  ep=$(endpoint "$mode")
  start=$(date +%s.%N)
  if [[ -z $ep ]]; then
    env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT \
      "$CTXHOST" --config "$CFG" --contexts "$CTX" task-exec "$uuid" 2>"$WORK/task.$tag.err" ||
      { cat "$WORK/task.$tag.err" >&2; die "task-exec $uuid ($mode) failed"; }
  else
    OTEL_EXPORTER_OTLP_ENDPOINT=$ep OTEL_SERVICE_NAME=ctxhost-bench \
      "$CTXHOST" --config "$CFG" --contexts "$CTX" task-exec "$uuid" 2>"$WORK/task.$tag.err" ||
      { cat "$WORK/task.$tag.err" >&2; die "task-exec $uuid ($mode) failed"; }
  fi
  end=$(date +%s.%N)
  [[ -d $CTX/completed/$uuid ]] ||
    die "task $uuid ($mode) did not complete: $("$CTXHOST" --config "$CFG" --contexts "$CTX" show "$uuid")"
  case $mode in
    refused | silent)
      grep -q "spans were not exported" "$WORK/task.$tag.err" ||
        die "task $uuid ($mode): no count of the lost spans in its log (task.$tag.err)" ;;
  esac
  rm -rf "${CTX:?}/completed/$uuid"
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

echo "warm-up task (fills the compiled-component cache)..." >&2
measure off warmup >/dev/null
for m in "${MODES[@]}"; do : >"$WORK/runs.$m"; done
for r in $(seq "$RUNS"); do
  for m in "${MODES[@]}"; do
    echo "run $r/$RUNS: $m..." >&2
    measure "$m" "$m.$r" >>"$WORK/runs.$m"
  done
done

BASE=$(median <"$WORK/runs.off")
printf '\n%-9s %-14s %-12s %s\n' "traces" "median wall s" "vs off" "runs (s)"
for m in "${MODES[@]}"; do
  med=$(median <"$WORK/runs.$m")
  printf '%-9s %-14s %-12s %s\n' "$m" "$med" "$(awk -v a="$med" -v b="$BASE" 'BEGIN { printf "%+.3f", a - b }')" \
    "$(tr '\n' ' ' <"$WORK/runs.$m")"
done
echo "(live receiver: $(cut -d' ' -f1 "$WORK/exports" 2>/dev/null || echo 0) exports, $(cut -d' ' -f2 "$WORK/exports" 2>/dev/null || echo 0) bytes;" \
  "$PROFILE build, $TOOL_CALLS tool calls per task, LLM answers after $LLM_DELAY_MS ms, medians of $RUNS run(s); load average $(cut -d' ' -f1-3 /proc/loadavg))"
