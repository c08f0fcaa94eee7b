#!/usr/bin/env bash
# stream-rss.sh — peak RSS of a task process whose reply is streamed: a tiny reply vs a big one
# (issue 26: a 20 MB streamed reply must not raise the task process's peak RSS by more than
# 1 MiB).
#
# For each reply size (default: 5 bytes — "Done." — and 20,000,000 bytes of text), BENCH_RUNS
# times (default 3): `ctxhost submit` a task, then run its task process `ctxhost task-exec UUID`
# under GNU time (`/usr/bin/time -v`, "Maximum resident set size"). The task makes one LLM call
# to bench/stream_llm.py, which streams server-sent events adding up to that many bytes of text
# (the size is passed as the model name `stream-bytes-N`); builtin:openai-chat folds the stream
# (`reply.stream`) into the assistant message, the message store appends it to messages.jsonl
# and current.jsonl, and the task completes. `llm.stream` is left to its default (on);
# compression is off and the context window huge, so nothing but the reply differs between the
# runs. It checks that the task completed and that messages.jsonl holds the whole reply, then
# prints the medians side by side and the difference.
#
# Run (from anywhere in the repository):
#   bench/stream-rss.sh                     # 5 B vs 20,000,000 B, median of 3 runs each
#   BENCH_RUNS=5 bench/stream-rss.sh 5 1000000 20000000
#   BENCH_PROFILE=release bench/stream-rss.sh   # optimised build (~10-25 min to build on 2 cores)
#   BENCH_NO_BUILD=1 ...                    # measure what is built
#   BENCH_KEEP=1 ...                        # keep the work directory (time.*, task.*.err)
#   BENCH_TWO_STEP=1 ...                    # the reply also calls a tool: the task makes a
#                                           # second request (history holding the reply),
#                                           # answered "Done." (the next step's readers)
#   BENCH_FORMAT=builtin:anthropic-messages ... # the request format (plugins.request_format:
#                                           # builtin:openai-chat by default,
#                                           # builtin:anthropic-messages, builtin:openai-responses,
#                                           # or a .wasm path, e.g. another build of one); the
#                                           # fake answers in the stream of the path posted to
#   BENCH_PROVIDER=anthropic ...            # llm.provider (default: anthropic when the format's
#                                           # name holds "anthropic", else openai)
# Needs: cargo, python3, GNU time at /usr/bin/time (Debian/Ubuntu: apt-get install -y time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=stream-rss
source "$ROOT/scripts/bench_lib.sh"
RUNS=${BENCH_RUNS:-3}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(5 20000000)

die() { bench_die "$@"; }
[[ -x /usr/bin/time ]] || die "GNU time is needed at /usr/bin/time (apt-get install -y time)"
command -v python3 >/dev/null || die "python3 is needed for the fake OpenAI server"
bench_positive "$RUNS" BENCH_RUNS
for s in "${SIZES[@]}"; do
  [[ $s =~ ^[1-9][0-9]*$ ]] || die "sizes are whole bytes ≥ 1, got '$s'"
done
bench_profile
bench_build --bin ctxhost
CTXHOST="$OUT/ctxhost"
[[ -x $CTXHOST ]] || die "no ctxhost at $CTXHOST"

bench_workdir

: >"$WORK/llm.log"
bench_server "$WORK/port" python3 "$ROOT/bench/stream_llm.py" "$WORK/port" "$WORK/llm.log"
PORT=$(cat "$WORK/port")

SUFFIX=
[[ ${BENCH_TWO_STEP:-0} == 1 ]] && SUFFIX=-tool
FORMAT=${BENCH_FORMAT:-builtin:openai-chat}
case $FORMAT in
  *anthropic*) PROVIDER=${BENCH_PROVIDER:-anthropic} ;;
  *) PROVIDER=${BENCH_PROVIDER:-openai} ;;
esac
MAX=$(printf '%s\n' "${SIZES[@]}" | sort -n | tail -n 1)
RESP_MIB=$((MAX * 3 / 2 / 1048576 + 4))
# config MODEL: the config of a task whose one reply is streamed by the fake as MODEL says.
config() {
  cat <<YAML
llm:
  provider: $PROVIDER
  base_url: http://127.0.0.1:$PORT
  model: $1
  api_key_env: ""
  context_length: 4000000000
  max_output_tokens: 1024
  max_retries: 0
  # The stream of a 20 MB reply is ~21.5 MB (its JSON events): past the 16 MiB default.
  max_response_mib: $RESP_MIB
plugins:
  compressor: none
  request_format: $FORMAT
runtime:
  call_timeout_secs: 600
YAML
}
CTX="$WORK/contexts"

field() { grep -F "$1" "$2" | sed 's/.*: //'; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# measure BYTES TAG: prints "peak_rss_kib wall_s" of one task whose reply is BYTES of text.
measure() {
  local bytes=$1 tag=$2 cfg uuid dir got
  cfg="$WORK/config.$bytes.yaml"
  config "stream-bytes-$bytes$SUFFIX" >"$cfg"
  uuid=$("$CTXHOST" --config "$cfg" --contexts "$CTX" submit "bench: answer" 2>"$WORK/submit.err") ||
    die "submit failed: $(cat "$WORK/submit.err")"
  local start end
  start=$(date +%s.%N)
  if ! /usr/bin/time -v -o "$WORK/time.$tag" "$CTXHOST" --config "$cfg" --contexts "$CTX" \
    task-exec "$uuid" 2>"$WORK/task.$tag.err"; then
    cat "$WORK/task.$tag.err" >&2
    die "task-exec $uuid ($bytes bytes) failed"
  fi
  end=$(date +%s.%N)
  dir="$CTX/completed/$uuid"
  [[ -d $dir ]] || die "task $uuid did not end in completed/: $("$CTXHOST" --config "$cfg" --contexts "$CTX" show "$uuid")"
  # The whole reply is in messages.jsonl: its assistant line's content has BYTES characters.
  got=$(python3 -c 'import json,sys
n=0
steps=0
for l in open(sys.argv[1]):
    m=json.loads(l)
    if m["role"]=="assistant": n=max(n,len(m["content"] or "")); steps+=1
print(n, steps)' "$dir/messages.jsonl")
  [[ ${got% *} -eq $bytes ]] || die "task $uuid: the reply in messages.jsonl has ${got% *} characters, expected $bytes"
  [[ -z $SUFFIX || ${got#* } -eq 2 ]] || die "task $uuid: ${got#* } assistant message(s), expected 2 (two-step mode)"
  rm -rf "${CTX:?}/completed/$uuid"
  echo "$(field "Maximum resident set size" "$WORK/time.$tag") $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')"
}

echo "warm-up task (fills the compiled-component cache)..." >&2
measure 5 warmup >/dev/null
for b in "${SIZES[@]}"; do
  : >"$WORK/runs.$b"
  for r in $(seq "$RUNS"); do
    echo "reply $b bytes, run $r/$RUNS..." >&2
    measure "$b" "$b.$r" >>"$WORK/runs.$b"
  done
done

BASE=
printf '\n%-12s %-16s %-16s %-14s %s\n' "reply" "peak RSS MiB" "vs the first" "task wall s" "runs (KiB)"
for b in "${SIZES[@]}"; do
  rss=$(awk '{ print $1 }' "$WORK/runs.$b" | median)
  wall=$(awk '{ print $2 }' "$WORK/runs.$b" | median)
  [[ -n $BASE ]] || BASE=$rss
  printf '%-12s %-16s %-16s %-14s %s\n' "$b B" "$(awk -v k="$rss" 'BEGIN { printf "%.1f", k / 1024 }')" \
    "$(awk -v k="$rss" -v b="$BASE" 'BEGIN { printf "%+.1f", (k - b) / 1024 }')" "$wall" \
    "$(awk '{ printf "%s ", $1 }' "$WORK/runs.$b")"
done
echo "($PROFILE build, $FORMAT, medians of $RUNS run(s); load average $(cut -d' ' -f1-3 /proc/loadavg))"
