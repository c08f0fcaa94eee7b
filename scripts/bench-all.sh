#!/usr/bin/env bash
# bench-all.sh — every benchmark of issue 14 that exists, from one optimised build, and ONE
# table of figure vs target (P1..P6, resume). bench/README.md's figures come from it.
#
# What it runs (all on the `bench` profile, the optimised build `cargo bench` uses):
#   P2      host/examples/bench_context.rs: a synthetic current.jsonl of BENCH_MIB MiB (default
#           256); write-request of builtin:openai-chat, builtin:ollama-chat and
#           builtin:prompted-tools, std::fs::copy of the same file and the in-memory build,
#           interleaved, BENCH_RUNS rounds (default 3), medians of wall and process CPU time.
#   P3      host/benches/runtime.rs (divan), benchmark add_message: one add-message through the
#           component boundary, both appends included (median of 200 samples of 20 calls).
#   P5      host/examples/bench_store.rs: N = 500, 2000, 8000 messages of 1 KB appended
#           through builtin:jsonl-store, then one compression (builtin:llm-summarizer, fake
#           LLM): time per append, peak RSS, compression time.
#   P1      scripts/bench-rss.sh 1 BENCH_MIB 1024: peak RSS of a real task process (`ctxhost
#           task-exec`) resuming a paused task with that history (with the checkpoints its
#           earlier run left), next to the in-memory agent (not at 1 GiB: BENCH_INMEM_MAX_MIB).
#   resume  the same runs: time from the task process's start to its first POST arriving at
#           the fake server, against the in-memory agent's whole run over the same history.
#           P1 and resume are skipped with BENCH_SKIP_RSS=1 (they take ~15 min).
#   P4      scripts/bench_tasks.py p4: task process start to its first request arriving at a
#           fake LLM, fresh task, components cached (median of 10).
#   P6      scripts/bench_tasks.py p6: 64 tasks at once (`ctxhost run --max-parallel 64`) on this
#           machine against a fake LLM: peak sum of the task processes' PSS, database errors,
#           exact counters, time per task. Skipped with BENCH_SKIP_TASKS=1.
#
# Run (from anywhere in the repository):
#   scripts/bench-all.sh                   # ~25 min once built; the first build ~10-25 min
#   BENCH_RUNS=5 BENCH_MIB=64 scripts/bench-all.sh
#   BENCH_SKIP_RSS=1 scripts/bench-all.sh  # P2..P6 without P1/resume (~5 min)
#   BENCH_NO_BUILD=1 scripts/bench-all.sh  # measure the bench-profile binaries already built
# Needs what the scripts it calls need: cargo, python3, GNU time at /usr/bin/time,
# ~3.5 x BENCH_MIB of free space in $TMPDIR. Figures are medians; the machine's load average
# is printed with them (a busy machine slows everything, the ratios less than the times).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${BENCH_RUNS:-3}
MIB=${BENCH_MIB:-256}
die() { echo "bench-all: $*" >&2; exit 1; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer, got '$RUNS'"
[[ $MIB =~ ^[1-9][0-9]*$ ]] || die "BENCH_MIB is whole MiB ≥ 1, got '$MIB'"
command -v python3 >/dev/null || die "python3 is needed to assemble the table"

cd "$ROOT"
BIN="$ROOT/target/release"
if [[ ${BENCH_NO_BUILD:-0} == 1 ]]; then
  echo "BENCH_NO_BUILD=1: measuring the binaries already in $BIN" >&2
else
  echo "building the bench profile (ctxhost, examples, benches)..." >&2
  cargo build -q --profile bench -p ctxhost --bins --examples --benches
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ctxhost-bench-all.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

echo "P2: generating a $MIB MiB history, timing write-request ($RUNS rounds)..." >&2
"$BIN/examples/bench_context" gen "$WORK/task" --mib "$MIB" >"$WORK/gen.out"
"$BIN/examples/bench_context" build "$WORK/task" --runs "$RUNS" --cache "$WORK/cache" \
  | tee "$WORK/p2.out" >&2
rm -rf "$WORK/task"

echo "P3: add-message (divan)..." >&2
if [[ ${BENCH_NO_BUILD:-0} == 1 ]]; then
  # The newest build of host/benches/runtime.rs (what `cargo bench` would run).
  RUNTIME_BENCH=$(find "$BIN/deps" -maxdepth 1 -type f -executable -name 'runtime-*' -printf '%T@ %p\n' |
    sort -n | tail -n 1 | cut -d' ' -f2)
  [[ -n $RUNTIME_BENCH ]] || die "no built runtime bench in $BIN/deps (run without BENCH_NO_BUILD)"
  "$RUNTIME_BENCH" --bench add_message 2>&1 | tee "$WORK/p3.out" >&2
else
  cargo bench -q --profile bench -p ctxhost --bench runtime -- add_message 2>&1 \
    | tee "$WORK/p3.out" >&2
fi

echo "P5: message store harness..." >&2
"$BIN/examples/bench_store" --n 500,2000,8000 --cache "$WORK/cache" | tee "$WORK/p5.out" >&2

if [[ ${BENCH_SKIP_TASKS:-0} != 1 ]]; then
  echo "P4: task start to first request (scripts/bench_tasks.py p4)..." >&2
  python3 "$ROOT/scripts/bench_tasks.py" p4 "$BIN/ctxhost" --runs 10 | tee "$WORK/p4.out" >&2
  echo "P6: 64 tasks at once (scripts/bench_tasks.py p6)..." >&2
  python3 "$ROOT/scripts/bench_tasks.py" p6 "$BIN/ctxhost" --tasks 64 | tee "$WORK/p6.out" >&2
else
  : >"$WORK/p4.out"
  : >"$WORK/p6.out"
fi

if [[ ${BENCH_SKIP_RSS:-0} != 1 ]]; then
  SIZES=(1 "$MIB")
  [[ $MIB == 1024 ]] || SIZES+=(1024)
  echo "P1 / resume: task process peak RSS, time to first POST (scripts/bench-rss.sh ${SIZES[*]})..." >&2
  BENCH_PROFILE=bench BENCH_RUNS="$RUNS" "$ROOT/scripts/bench-rss.sh" "${SIZES[@]}" \
    | tee "$WORK/p1.out" >&2
else
  : >"$WORK/p1.out"
fi
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$WORK" "$MIB" "$RUNS" "$LOAD_START" "$LOAD_END" <<'PY'
import re, sys
work, mib, runs, load_start, load_end = sys.argv[1:6]
read = lambda name: open(f"{work}/{name}").read()
rows = []  # (figure, target, measured, verdict)

def verdict(ok):
    return "met" if ok else "MISSED"

# P1 and resume from bench-rss.sh's table:
# "MiB task_rss inmem_rss ratio task_wall inmem_wall first_post posted / inmem_bytes" ("-": skipped)
rss = {}
num = lambda x: None if x == "-" else float(x.rstrip("x"))
for line in read("p1.out").splitlines():
    f = line.split()
    if len(f) >= 7 and f[0].isdigit() and re.match(r"^[\d.]+$", f[1]):
        rss[f[0]] = [num(x) for x in f[1:7]]
# P1's target is a peak flat with the history: at each larger size no more than P1_FLAT_MIB
# above the 1 MiB figure (the tool-call ids' hashes, 8 bytes a call, are the only part that grows).
P1_FLAT_MIB = 2.0
base_rss = rss["1"][0] if "1" in rss else None
for size in ["1", mib, "1024"]:
    if size == "1024" and mib == "1024":
        continue
    label = "1 GiB" if size == "1024" else f"{size} MiB"
    target = "the baseline" if size == "1" else f"<= 1 MiB's + {P1_FLAT_MIB:.0f} MiB (flat)"
    if size in rss:
        task, inmem = rss[size][0], rss[size][1]
        base = f" (in-memory agent {inmem:.1f} MiB)" if inmem is not None else ""
        if size == "1":
            ok = "-"
        elif base_rss is None:
            ok = "-"
        else:
            ok = verdict(task <= base_rss + P1_FLAT_MIB)
            base += f", {task - base_rss:+.1f} MiB over 1 MiB's"
        rows.append((f"P1 task peak RSS, {label} context", target, f"{task:.1f} MiB{base}", ok))
    else:
        rows.append((f"P1 task peak RSS, {label} context", target,
                     "not run (BENCH_SKIP_RSS=1)", "-"))

# P2 from bench_context build.
p2 = read("p2.out")
copy = re.search(r"std::fs::copy \(cp\):\s+([\d.]+) s\s+([\d.]+)\s+([\d.]+) %\s+([\d.]+) s", p2)
for name in ["openai-chat", "ollama-chat", "prompted-tools"]:
    m = re.search(r"write-request \(builtin:" + name +
                  r"\):\s+([\d.]+) s\s+([\d.]+)\s+([\d.]+) %\s+([\d.]+) s\s+([\d.]+) %", p2)
    wall, mbs, pct, cpu, cpu_pct = (float(x) for x in m.groups())
    rows.append((f"P2 write-request {name}, {mib} MiB", ">= 50 % of fs::copy",
                 f"{pct:.1f} % ({mbs:.0f} MB/s vs {float(copy.group(2)):.0f} MB/s; "
                 f"CPU time {cpu_pct:.1f} %)", verdict(pct >= 50)))
m = re.search(r"native copy_chat_array \(OpenAI shape, no component\):\s+([\d.]+) s\s+([\d.]+)\s+([\d.]+) %"
              r"\s+([\d.]+) s\s+([\d.]+) %", p2)
if m:
    wall, mbs, pct, cpu, cpu_pct = (float(x) for x in m.groups())
    rows.append((f"P2 the same build natively (no component), {mib} MiB", "what the boundary costs",
                 f"{pct:.1f} % ({mbs:.0f} MB/s; CPU time {cpu_pct:.1f} %)", "-"))
inmem = re.search(r"in-memory baseline \(Vec<Value>\):\s+([\d.]+) s\s+([\d.]+)", p2)

# P3 from divan: "├─ add_message  fastest │ slowest │ median │ mean │ samples │ iters".
m = re.search(r"add_message\s+([\d.]+ \S+)\s+│\s+([\d.]+ \S+)\s+│\s+([\d.]+) (\S+)\s+│", read("p3.out"))
if m:
    median = float(m.group(3)) * {"ns": 1e-3, "µs": 1, "us": 1, "ms": 1e3}[m.group(4)]
    rows.append(("P3 add-message (both appends), median", "<= 40 µs", f"{median:.1f} µs",
                 verdict(median <= 40)))
else:
    rows.append(("P3 add-message (both appends), median", "<= 40 µs", "no divan output", "-"))

m = re.search(r"P4 median_ms=([\d.]+) min_ms=([\d.]+) max_ms=([\d.]+) runs=(\d+)", read("p4.out"))
if m:
    p4 = float(m.group(1))
    rows.append(("P4 task start to first request", "<= 50 ms",
                 f"{p4:.1f} ms (min {m.group(2)}, max {m.group(3)}, {m.group(4)} tasks)",
                 verdict(p4 <= 50)))
else:
    rows.append(("P4 task start to first request", "<= 50 ms", "not run (BENCH_SKIP_TASKS=1)", "-"))

# P5 rows of bench_store.
for line in read("p5.out").splitlines():
    m = re.match(r"^\s*(\d+)\s+([\d.]+) µs\s+([\d.]+) µs\s+([\d.]+) µs\s+([\d.]+) s\s+([\d.]+) MiB"
                 r"\s+([\d.]+) ms\s+([\d.]+) ms", line)
    if m:
        n, p50, p99, mean, _, peak, comp, comp_nollm = m.groups()
        rows.append((f"P5 store harness, N = {n} x 1 KB", "harness (no target)",
                     f"append p50 {p50} µs, p99 {p99} µs; peak RSS {peak} MiB; "
                     f"compress {comp_nollm} ms", "-"))

m = dict(re.findall(r"(\w+)=([\w.-]+)", read("p6.out")))
if "pss_sum_peak_mib" in m:
    pss = float(m["pss_sum_peak_mib"])
    ok = pss <= 1024 and m["db_errors"] == "0" and m["counter_errors"] == "0" and m["exit"] == "0"
    rows.append((f"P6 {m['tasks']} tasks at once, fake LLM", "PSS sum <= 1 GiB, 0 DB errors, exact counters",
                 f"PSS sum peak {pss:.0f} MiB ({m['alive_peak']} alive; per task max "
                 f"{m['pss_per_task_peak_mib']} MiB); {m['db_errors']} DB errors; "
                 f"{m['counter_errors']} counter errors; {m['per_task_ms']} ms per task "
                 f"({m['wall_s']} s for all, {m['host_ms_per_task']} ms without the LLM's "
                 f"2 x {m['delay_ms']} ms)", verdict(ok)))
else:
    rows.append(("P6 64 tasks at once, fake LLM", "PSS sum <= 1 GiB, 0 DB errors, exact counters",
                 "not run (BENCH_SKIP_TASKS=1)", "-"))

if mib in rss and rss[mib][5] is not None and rss[mib][4] is not None:
    task_wall, inmem_wall, first_post = rss[mib][3], rss[mib][4], rss[mib][5]
    ratio = first_post / inmem_wall if inmem_wall else float("inf")
    rows.append((f"Resume, {mib} MiB history: time to first POST", "<= 1.5 x in-memory",
                 f"{first_post:.2f} s vs in-memory build {inmem_wall:.1f} s = {ratio:.2f} x "
                 f"(whole task {task_wall:.1f} s)", verdict(ratio <= 1.5)))
else:
    rows.append((f"Resume, {mib} MiB history: time to first POST", "<= 1.5 x in-memory",
                 "not run (BENCH_SKIP_RSS=1)", "-"))

w = [max(len(r[i]) for r in rows + [("figure", "target", "measured", "verdict")]) for i in range(4)]
line = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print()
print(f"Issue 14 benchmarks: bench profile, medians of {runs} run(s); load average {load_start} "
      f"at the start, {load_end} at the end")
print(line(("figure", "target", "measured", "verdict")))
print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in rows:
    print(line(r))
if inmem:
    print(f"\nIn-memory request build of the same {mib} MiB: {inmem.group(1)} s ({inmem.group(2)} MB/s).")
PY
