#!/usr/bin/env bash
# The drain of issue 30's "done when": three hosts with local contexts/ trees of their own drain
# N tasks (default 200) through PostgreSQL and SeaweedFS, while the object store restarts and one
# host is killed (kill -9 of its worker and task processes) with tasks in flight. It runs the
# test remote_hosts::postgres::three_hosts_drain_the_queue_while_the_object_store_restarts_and_a_host_is_killed
# with CTXHOST_DRAIN_TASKS=N (CI runs it with 30), which checks: every task completed; each run
# once (the fake LLM's request log: two requests per task, a task of the killed host at most one
# more, the step it was in); its history one uninterrupted run's; its row's counters equal to its
# files (llm_calls.jsonl, tools.jsonl); the killed host's tasks finished by the others; `ctxhost
# fsck` clean (bucket, rows and trees agree). It prints the test's figures: time, tasks per host,
# tasks taken over, steps asked again.
#
# Usage: scripts/drain-remote.sh [N]
#
# Uses the servers CTXHOST_TEST_DATABASE_URL and CTXHOST_TEST_S3_URL name when set; else starts
# them (scripts/test-postgres.sh, scripts/test-s3.sh) and stops them at the end. The test itself
# restarts a SeaweedFS of its own. Builds the test binary (debug) with cargo; CARGO_TARGET_DIR
# is honoured.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-200}"
TEST=remote_hosts::postgres::three_hosts_drain_the_queue_while_the_object_store_restarts_and_a_host_is_killed

die() { echo "drain-remote: $*" >&2; exit 2; }
[[ "$N" =~ ^[0-9]+$ ]] && (( N >= 15 )) || die "N must be a number of tasks, at least 15 (got '$N')"
cd "$REPO_ROOT"

started=()
cleanup() {
    for s in "${started[@]}"; do "scripts/$s" stop >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
if [[ -z "${CTXHOST_TEST_DATABASE_URL:-}" ]]; then
    CTXHOST_TEST_DATABASE_URL="$(scripts/test-postgres.sh start)"
    export CTXHOST_TEST_DATABASE_URL
    started+=(test-postgres.sh)
fi
if [[ -z "${CTXHOST_TEST_S3_URL:-}" ]]; then
    CTXHOST_TEST_S3_URL="$(scripts/test-s3.sh start)"
    export CTXHOST_TEST_S3_URL
    started+=(test-s3.sh)
fi

export CTXHOST_DRAIN_TASKS="$N"
log="$(mktemp "${TMPDIR:-/tmp}/drain-remote.XXXXXX")"
echo "drain-remote: $N tasks, 3 hosts (log: $log)" >&2
status=0
cargo test -p ctxhost --test all -- --exact "$TEST" --nocapture >"$log" 2>&1 || status=$?
grep -E '^drain:|^test .* \.\.\. |test result:' "$log" || true
if (( status != 0 )); then
    tail -n 60 "$log" >&2
    die "the drain failed (exit $status); the whole log is in $log"
fi
