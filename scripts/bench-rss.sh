#!/usr/bin/env bash
# bench-rss.sh — peak memory of a real ctxhost task process vs an in-memory agent (issue 3).
#
# What it measures, for each history size (default: 1 MiB and 256 MiB of current.jsonl):
#   1. ctxhost: peak RSS (/usr/bin/time -v, "Maximum resident set size") of the real task
#      process `ctxhost task-exec UUID`, continuing a task whose directory holds a synthetic
#      messages.jsonl + current.jsonl of that size. The process opens the message store
#      (builtin:jsonl-store streams both files), builds request.json from current.jsonl through
#      the format component (builtin:openai-chat, streaming), POSTs it (streamed from the file)
#      to a fake OpenAI server, reads the reply ("Done.", no tool calls) and completes the task.
#      Compression is off (plugins.compressor: none) and llm.context_length is huge, so the
#      whole history is sent in that one call.
#   2. in-memory baseline: peak RSS of `inmem_request` (host/examples/inmem_request.rs), which
#      does what an agent holding its conversation in memory does: read every line of the same
#      current.jsonl into a Vec<serde_json::Value>, build the request Value, serialise it,
#      write it out.
#   It prints both, their ratio, wall times, and checks that the fake server received a body
#   of the size the format component reported.
#   3. resume: the task process's time from its start to its first POST arriving at the fake
#      server (request line and headers read), next to the in-memory baseline's wall time
#      (process start to request body written): issue 14's resume target.
#
# How the task is set up (the same path as a resumed task, DESIGN §3): `ctxhost submit` queues
# a row; the synthetic history is written into contexts/paused/UUID/ (what a paused task leaves
# behind: with BENCH_CHECKPOINT=1, the default, the history is also opened once by the message
# store and counted by the host, `bench_context gen --checkpoint`, which leaves the checkpoints
# an earlier run leaves; BENCH_CHECKPOINT=0 measures a history without them, read whole);
# `ctxhost task-exec UUID` claims the row, moves the directory to running/, continues
# from current.jsonl (no system prompt or prompt re-added), and ends in completed/.
# One untimed warm-up task (1 MiB) runs first, so the measured runs load the components from
# the compiled-component cache (contexts/.cache), as every task after the first on a machine.
#
# Run (from anywhere in the repository):
#   scripts/bench-rss.sh                 # sizes 1 and 256 MiB, median of 3 runs each
#   scripts/bench-rss.sh 1 64 256        # sizes in MiB
#   BENCH_RUNS=1 scripts/bench-rss.sh    # one run per size (quicker)
#   BENCH_PROFILE=bench scripts/bench-rss.sh   # optimised build, shared with `cargo bench` (~10 min to build)
#   BENCH_KEEP=1 RUST_LOG=ctxhost=debug scripts/bench-rss.sh 64   # keep the work dir (logs:
#                                        # task.SIZE.RUN.err, time.*, itime.*)
#   BENCH_CALL_TIMEOUT_SECS=30 scripts/bench-rss.sh 256  # runtime.call_timeout_secs (default
#                                        # here 600; ctxhost's own default is 30)
#   BENCH_INMEM_MAX_MIB=256 (default): sizes above it skip the in-memory baseline (it needs
#                                        # ~3 x the history in RAM); its columns show "-".
# Needs: cargo, python3 (the fake OpenAI server), GNU time at /usr/bin/time
# (Debian/Ubuntu: apt-get install -y time), ~3.5 x the largest size of free space in $TMPDIR.
# Takes about 1.5 min per 256 MiB run with the debug build on 2 cores.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=bench-rss
source "$ROOT/scripts/bench_lib.sh"
RUNS=${BENCH_RUNS:-3}
CALL_TIMEOUT=${BENCH_CALL_TIMEOUT_SECS:-600}
INMEM_MAX=${BENCH_INMEM_MAX_MIB:-256}
CHECKPOINT=${BENCH_CHECKPOINT:-1}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(1 256)

die() { bench_die "$@"; }
[[ -x /usr/bin/time ]] || die "GNU time is needed at /usr/bin/time (apt-get install -y time)"
command -v python3 >/dev/null || die "python3 is needed for the fake OpenAI server"
bench_positive "$RUNS" BENCH_RUNS
bench_positive "$CALL_TIMEOUT" BENCH_CALL_TIMEOUT_SECS
for s in "${SIZES[@]}"; do
  [[ $s =~ ^[1-9][0-9]*$ ]] || die "sizes are whole MiB ≥ 1, got '$s'"
done

bench_profile
bench_build --bin ctxhost --example inmem_request --example bench_context
BIN="$OUT"
CTXHOST="$BIN/ctxhost"
INMEM="$BIN/examples/inmem_request"
GEN="$BIN/examples/bench_context"

bench_workdir

# --- fake OpenAI server (scripts/sink_llm.py): reads and discards each body, answers "Done." ----
: >"$WORK/llm.log"
bench_server "$WORK/port" python3 "$ROOT/scripts/sink_llm.py" "$WORK/port" "$WORK/llm.log"
PORT=$(cat "$WORK/port")

MAX_MIB=$(printf '%s\n' "${SIZES[@]}" | sort -n | tail -n 1)
DIR_BUDGET_MIB=$((4 * MAX_MIB + 1024))
cat >"$WORK/config.yaml" <<YAML
llm:
  provider: openai
  base_url: http://127.0.0.1:$PORT
  model: bench-model
  api_key_env: ""
  context_length: 4000000000
  max_output_tokens: 1024
  timeout_secs: 600
  max_retries: 0
  # The whole history is one request: past the default 32 MiB it would not be sent.
  max_request_mib: $DIR_BUDGET_MIB
plugins:
  compressor: none
context_storage:
  # The task directory holds the history twice (messages.jsonl, current.jsonl) and the
  # request: the default budget of 1 GiB stops a 1 GiB run.
  max_task_dir_mib: $DIR_BUDGET_MIB
agent:
  # The synthetic history's assistant messages count as earlier steps of the task.
  max_steps: 4000000000
runtime:
  # Streaming a 256 MiB history through a component can take longer than the 30 s default
  # in a debug build; the limit is not what is measured here.
  call_timeout_secs: $CALL_TIMEOUT
YAML
CTX="$WORK/contexts"
ctx() { "$CTXHOST" --config "$WORK/config.yaml" --contexts "$CTX" "$@"; }

# field NAME FILE: a value from /usr/bin/time -v output.
field() { grep -F "$1" "$2" | sed 's/.*: //'; }
# wall FILE: elapsed wall clock in seconds.
wall() {
  field "Elapsed (wall clock)" "$1" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.1f", s }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# measure MIB TAG: a fresh task with a synthetic history of MIB MiB; runs the in-memory
# baseline over its current.jsonl (not above BENCH_INMEM_MAX_MIB), then the real task process.
# Prints "task_rss_kib task_wall_s inmem_rss_kib inmem_wall_s posted_bytes inmem_bytes
# first_post_s" ("-" for the in-memory figures when skipped).
measure() {
  local mib=$1 tag=$2 uuid dir before posted inmem_bytes start first gen_flags=()
  uuid=$(ctx submit "bench: continue the task" 2>"$WORK/submit.err") ||
    die "submit failed: $(cat "$WORK/submit.err")"
  dir="$CTX/paused/$uuid"
  [[ $CHECKPOINT == 1 ]] && gen_flags=(--checkpoint --cache "$CTX/.cache")
  "$GEN" gen "$dir" --mib "$mib" "${gen_flags[@]}" >"$WORK/gen.$tag.out"

  local irss=- iwall=- inmem_bytes=-
  if [[ $mib -le $INMEM_MAX ]]; then
    /usr/bin/time -v -o "$WORK/itime.$tag" "$INMEM" "$dir/current.jsonl" "$WORK/inmem.json" \
      --model bench-model --max-tokens 1024 >"$WORK/inmem.$tag.out" ||
      die "inmem_request failed on $dir/current.jsonl"
    inmem_bytes=$(stat -c %s "$WORK/inmem.json")
    rm -f "$WORK/inmem.json"
    irss=$(field "Maximum resident set size" "$WORK/itime.$tag")
    iwall=$(wall "$WORK/itime.$tag")
  fi

  before=$(wc -l <"$WORK/llm.log")
  start=$(date +%s.%N)
  if ! /usr/bin/time -v -o "$WORK/time.$tag" "$CTXHOST" --config "$WORK/config.yaml" \
    --contexts "$CTX" task-exec "$uuid" 2>"$WORK/task.$tag.err"; then
    cat "$WORK/task.$tag.err" >&2
    ctx show "$uuid" >&2 || true
    die "task-exec $uuid ($mib MiB) failed"
  fi
  [[ -d $CTX/completed/$uuid ]] || die "task $uuid did not end in completed/"
  ctx show "$uuid" --json >"$WORK/show.json"
  grep -q '"status": *"completed"' "$WORK/show.json" ||
    die "task $uuid is not completed: $(ctx show "$uuid")"
  posted=$(tail -n +"$((before + 1))" "$WORK/llm.log" | awk '{ s += $2 } END { print s + 0 }')
  first=$(tail -n +"$((before + 1))" "$WORK/llm.log" | head -n 1 |
    awk -v s="$start" '{ printf "%.2f", $3 - s }')
  # The body is current.jsonl re-serialised (tool_name -> name, no newlines): about its size.
  [[ $posted -ge $((mib * 1024 * 1024 * 9 / 10)) ]] ||
    die "the fake server received $posted bytes for a $mib MiB history"
  rm -rf "${CTX:?}/completed/$uuid"
  echo "$(field "Maximum resident set size" "$WORK/time.$tag") $(wall "$WORK/time.$tag")" \
    "$irss $iwall $posted $inmem_bytes $first"
}

echo "warm-up task (fills the compiled-component cache)..." >&2
measure 1 warmup >/dev/null

for mib in "${SIZES[@]}"; do
  : >"$WORK/runs.$mib"
  for r in $(seq "$RUNS"); do
    echo "size $mib MiB, run $r/$RUNS..." >&2
    measure "$mib" "$mib.$r" >>"$WORK/runs.$mib"
  done
done

mib_of() { if [[ $1 == - ]]; then echo -; else awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; fi; }
col_median() { awk -v c="$1" '$c != "-" { print $c }' "$2" | median; }
printf '\n%-9s %-14s %-14s %-9s %-10s %-11s %-13s %s\n' "history" "ctxhost task" "in-memory" "ratio" \
  "task wall" "inmem wall" "first POST" "request body bytes"
printf '%-9s %-14s %-14s %-9s %-10s %-11s %-13s %s\n' "MiB" "peak RSS MiB" "peak RSS MiB" "mem/ctx" \
  "s" "s" "s" "(ctxhost / in-memory)"
for mib in "${SIZES[@]}"; do
  task_rss=$(col_median 1 "$WORK/runs.$mib")
  task_wall=$(col_median 2 "$WORK/runs.$mib")
  inmem_rss=$(col_median 3 "$WORK/runs.$mib")
  inmem_wall=$(col_median 4 "$WORK/runs.$mib")
  first_post=$(col_median 7 "$WORK/runs.$mib")
  [[ -n $inmem_rss ]] || inmem_rss=-
  [[ -n $inmem_wall ]] || inmem_wall=-
  read -r _ _ _ _ posted inmem_bytes _ < <(tail -n 1 "$WORK/runs.$mib")
  ratio=-
  [[ $inmem_rss != - ]] && ratio=$(awk -v a="$inmem_rss" -v b="$task_rss" 'BEGIN { printf "%.1fx", a / b }')
  printf '%-9s %-14s %-14s %-9s %-10s %-11s %-13s %s\n' "$mib" "$(mib_of "$task_rss")" \
    "$(mib_of "$inmem_rss")" "$ratio" "$task_wall" "$inmem_wall" "$first_post" "$posted / $inmem_bytes"
done
echo
echo "Medians of $RUNS run(s), $PROFILE build. Peak RSS: /usr/bin/time -v (Maximum resident set size)."
echo "history = size of current.jsonl; messages.jsonl holds the same messages again (both are read)."
echo "ratio = in-memory peak RSS / ctxhost task peak RSS. first POST = task process start to its"
echo "first request arriving at the fake server (headers read); inmem wall = the in-memory"
echo "baseline's whole run (start to request body written). Checkpoints: BENCH_CHECKPOINT=$CHECKPOINT."
