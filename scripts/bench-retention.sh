#!/usr/bin/env bash
# Retention benchmark (issue 27): share of facts planted early in a task (a file path, an error
# line, a user constraint, a measured number) answered correctly after three compressions, with
# the summaries only (context_storage.recall: false) and with the history tools (recall: true).
# The model is scripted (the tests' fake LLM; host/examples/bench_retention.rs); needs node.
# With --local, the local Qwen2.5-Coder-0.5B (scripts/local-llm.sh; CTXHOST_LLM_CACHE as there)
# writes the summaries and answers the questions (the reading phase stays scripted, tool calls
# through builtin:prompted-tools); the server is started for the run and stopped after it.
# Usage: scripts/bench-retention.sh [TASKS] [--local]   (default 5 tasks per mode)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
tasks=5
local=0
for arg in "$@"; do
  case "$arg" in
    --local) local=1 ;;
    *) tasks="$arg" ;;
  esac
done
cargo build -q -p ctxhost --bin ctxhost --example bench_retention
extra=()
if [ "$local" = 1 ]; then
  url="$(scripts/local-llm.sh start)"
  trap 'scripts/local-llm.sh stop >/dev/null 2>&1 || true' EXIT
  extra=(--llm-url "$url")
fi
"$target/debug/examples/bench_retention" --ctxhost "$target/debug/ctxhost" --tasks "$tasks" "${extra[@]}"
