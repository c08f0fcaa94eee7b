#!/usr/bin/env bash
# Retention benchmark (issue 27): share of facts planted early in a task (a file path, an error
# line, a user constraint, a measured number) answered correctly after three compressions, with
# the summaries only (context_storage.recall: false) and with the history tools (recall: true).
# The model is scripted (the tests' fake LLM; host/examples/bench_retention.rs); needs node.
# Usage: scripts/bench-retention.sh [TASKS]   (default 5 tasks per mode)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build -q -p ctxhost --bin ctxhost --example bench_retention
"$target/debug/examples/bench_retention" --ctxhost "$target/debug/ctxhost" --tasks "${1:-5}"
