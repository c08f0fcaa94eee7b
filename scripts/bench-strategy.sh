#!/usr/bin/env bash
# bench-strategy.sh — what the agent strategy component costs per task (issue 12).
#
# Runs BENCH_RUNS (10) one-step tasks per strategy (builtin:react, builtin:plan-execute) against
# the fake OpenAI server (`host/examples/fake_llm.rs`), one task process at a time, after a
# warm-up task (components come from the compiled-component cache). The fake server answers every
# request with one JSON text that reads as a one-step plan, as the step's answer and as a passed
# verification, so a plan-execute task makes its planning call, one step and its verification.
#
# Reports per task (medians): the strategy instance's creation (sandbox + instantiate), hook
# calls, side calls (LLM calls the strategy made), time inside the component (side calls
# excluded), LLM calls in all, and the task's wall time (started_at → completed_at). The
# component figures come from the task process's log line "strategy cost in this process".
#
# Run:  scripts/bench-strategy.sh            (dev build: `cargo build --workspace --all-targets`)
#       BENCH_PROFILE=release scripts/bench-strategy.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${BENCH_RUNS:-10}
PROFILE=${BENCH_PROFILE:-dev}
if [[ $PROFILE == dev ]]; then
  cargo build --workspace --all-targets >&2
  OUT=target/debug
else
  cargo build --profile "$PROFILE" -p ctxhost --bins --examples >&2
  OUT=target/$PROFILE
fi
BIN=$ROOT/$OUT/ctxhost
WORK=$(mktemp -d)
trap 'kill "${FAKE_PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
REPLY='{"goal": "Say done", "steps": [{"id": 1, "description": "Say done"}], "passed": true, "problems": ""}'
"$ROOT/$OUT/examples/fake_llm" --reply "$REPLY" > "$WORK/url" 2>/dev/null &
FAKE_PID=$!
for _ in $(seq 100); do [[ -s $WORK/url ]] && break; sleep 0.1; done
URL=$(cat "$WORK/url")

for strategy in react plan-execute; do
  dir=$WORK/$strategy
  mkdir -p "$dir"
  cat > "$dir/config.yaml" <<YAML
context_storage:
  base_dir: ./contexts
llm:
  provider: openai
  base_url: "$URL"
  model: fake-model
  api_key_env: ""
plugins:
  strategy: builtin:$strategy
worker:
  max_parallel_tasks: 1
YAML
  (
    cd "$dir"
    "$BIN" init >/dev/null
    "$BIN" submit "warm-up" >/dev/null
    "$BIN" run --once >/dev/null 2>&1
    for i in $(seq "$RUNS"); do "$BIN" submit "task $i" >/dev/null; done
    RUST_LOG=ctxhost=info NO_COLOR=1 "$BIN" run --once 2> "$dir/run.log" >/dev/null
    "$BIN" tasks --json --limit "$RUNS" > "$dir/tasks.json"
  )
done

python3 - "$WORK" "$RUNS" <<'PY'
import json, re, statistics, sys, datetime
work, runs = sys.argv[1], int(sys.argv[2])
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
rows = []
for strategy in ("react", "plan-execute"):
    log = open(f"{work}/{strategy}/run.log").read()
    costs = [dict(re.findall(r"(\w+)=([0-9.]+)", l)) for l in log.splitlines()
             if "strategy cost in this process" in l]
    tasks = json.load(open(f"{work}/{strategy}/tasks.json"))
    assert len(costs) == runs and all(t["status"] == "completed" for t in tasks), (strategy, len(costs))
    med = lambda xs: statistics.median(xs)
    rows.append((f"builtin:{strategy}",
        med(float(c["instantiate_ms"]) for c in costs),
        med(int(c["hooks"]) for c in costs),
        med(int(c["side_calls"]) for c in costs),
        med(float(c["component_ms"]) for c in costs),
        med(t["llm_call_count"] for t in tasks),
        med((ts(t["completed_at"]) - ts(t["started_at"])).total_seconds() * 1000 for t in tasks)))
print(f"{runs} one-step tasks per strategy, medians per task:")
print("| strategy | instance (ms) | hooks | side calls | in component (ms) | LLM calls | task wall (ms) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]:.2f} | {r[2]} | {r[3]} | {r[4]:.2f} | {r[5]} | {r[6]:.0f} |")
PY
