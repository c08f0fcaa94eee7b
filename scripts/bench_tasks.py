#!/usr/bin/env python3
"""bench_tasks.py — task-process benchmarks of issue 14 (P4 and P6), against a fake LLM.

The fake OpenAI server runs in this process (a thread), so a task process's start and the
arrival of its first request are read from one clock (time.perf_counter).

  bench_tasks.py p4 CTXHOST [--runs N]
      P4: time from the start of a task process (`ctxhost task-exec UUID`, a fresh task: no
      history) to its first request arriving at the server (request line and headers read),
      with the components already in the compiled-component cache (one untimed warm-up task
      fills it). Tasks run one after another; each gets "Done." at once. Prints every run and
      `P4 median_ms=... min_ms=... max_ms=... runs=N task_wall_median_ms=...`.

  bench_tasks.py p6 CTXHOST [--tasks 64] [--delay-ms 500]
      P6: TASKS tasks queued, then `ctxhost run --once --max-parallel TASKS` (one worker, one
      process per task, all at once on this machine's cores). Each task makes two LLM calls:
      the first reply (after --delay-ms, so every process is alive at the same time) asks for
      a tool call (no tools are configured: the host answers it with an error result, counted
      as a tool call), the second reply is the final answer. While it runs, the PSS of every
      live task process is read from /proc/PID/smaps_rollup every 50 ms. Checks afterwards: every
      task `completed`, its row's counters exact (2 LLM calls, 1 tool call, 24 tokens from the
      provider's usage, no compression, no resume, no crash, no error), the server got exactly
      2 x TASKS requests, and no database error in the worker's output. Prints
      `P6 tasks=.. pss_sum_peak_mib=.. pss_per_task_peak_mib=.. alive_peak=.. db_errors=..
      counter_errors=.. wall_s=.. per_task_ms=.. host_ms_per_task=..`.
      With --breakdown, also what one task process's memory is made of when the PSS sum peaks
      (its /proc/PID/smaps summed by mapping kind: Rss, Pss, private and shared KiB; issue 42
      item 3).

  bench_tasks.py steps CTXHOST [--steps 200] [--runs 3]
      Issue 37 item 12: the host's CPU time per agent step, from step 1 to step STEPS, in one
      task. Every reply but the last calls a tool the task does not offer (the host answers it
      with an error result: no tool process, nothing but the host's own work); the STEPS-th is
      the final answer. When each request arrives (its headers read: the task process is then
      waiting for the reply), the server reads the task process's CPU time: the sum of
      `/proc/PID/task/*/schedstat` (nanoseconds on a CPU, every live thread) — a step's host CPU
      is the difference between two consecutive requests' readings (folding the reply,
      answering the tool call, appending both messages, checking the context, building and
      sending the next request). Step 1 is the process's start to its first request. Prints,
      per run, the medians of steps 2–11, the middle ten and the last ten, the largest step and
      the least-squares slope (µs per step), then the medians over the runs, and the whole
      process's CPU (`/proc/PID/stat` utime + stime, which counts exited threads too, at 10 ms
      resolution) divided by the steps as a cross-check.

Needs python3 (standard library only) and a built `ctxhost`. Leaves nothing behind (a
temporary directory under $TMPDIR, deleted at the end).
"""

import argparse
import http.server
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def reply_body(kind, n):
    """An OpenAI chat completion: a final answer or a tool call; usage 10 + 2 tokens."""
    if kind == "tool":
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "bench_tool", "arguments": "{}"},
            }],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "Done."}
        finish = "stop"
    return json.dumps({
        "id": f"chatcmpl-bench-{n}", "object": "chat.completion", "created": 0,
        "model": "bench-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }).encode()


class FakeLlm:
    """Threaded fake OpenAI server. `mode` "done": always the final answer; "tool-then-done":
    a tool call unless the request already holds a tool result. Records each request's arrival
    (perf_counter, when its headers are read) and size."""

    def __init__(self, mode, delay_ms=0, steps=0):
        self.mode, self.delay = mode, delay_ms / 1000.0
        # Mode "steps": a tool call for the first `steps` - 1 requests of the task whose
        # process is `pid`, then the final answer; each request records that process's CPU.
        self.steps, self.step, self.pid = steps, 0, None
        self.lock = threading.Lock()
        self.requests = []  # (arrival, bytes, kind, task CPU ns or None)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                arrival = time.perf_counter()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                kind = "done"
                if outer.mode == "tool-then-done" and b'"role":"tool"' not in body:
                    kind = "tool"
                cpu = None
                with outer.lock:
                    if outer.mode == "steps":
                        cpu = process_cpu_ns(outer.pid) if outer.pid else None
                        outer.step += 1
                        kind = "tool" if outer.step < outer.steps else "done"
                    outer.requests.append((arrival, len(body), kind, cpu))
                    n = len(outer.requests)
                if outer.delay:
                    time.sleep(outer.delay)
                data = reply_body(kind, n)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def snapshot(self):
        with self.lock:
            return list(self.requests)

    def stop(self):
        self.server.shutdown()


class Env:
    """A contexts tree and a config for the fake server, in a temporary directory."""

    def __init__(self, ctxhost, llm, work, parallel=2):
        self.ctxhost, self.work = ctxhost, work
        self.contexts = os.path.join(work, "contexts")
        self.config = os.path.join(work, "config.yaml")
        with open(self.config, "w") as f:
            f.write(f"""llm:
  provider: openai
  base_url: {llm.url}
  model: bench-model
  api_key_env: ""
  context_length: 32000
  max_output_tokens: 256
  timeout_secs: 120
  max_retries: 0
plugins:
  compressor: none
worker:
  max_parallel_tasks: {parallel}
  poll_interval_ms: 50
runtime:
  call_timeout_secs: 120
""")

    def cmd(self, *args):
        return [self.ctxhost, "--config", self.config, "--contexts", self.contexts, *args]

    def submit(self, prompt):
        out = subprocess.run(self.cmd("submit", prompt), capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"bench_tasks: submit failed: {out.stderr.strip()}")
        return out.stdout.strip().split()[-1]

    def task_exec(self, uuid):
        """Runs one task process; returns (start perf_counter, wall seconds)."""
        with open(os.path.join(self.work, "task.err"), "w") as err:
            t0 = time.perf_counter()
            rc = subprocess.call(self.cmd("task-exec", uuid), stdout=subprocess.DEVNULL,
                                 stderr=err)
            wall = time.perf_counter() - t0
        if rc != 0:
            sys.exit(f"bench_tasks: task-exec {uuid} exited {rc}: "
                     f"{open(os.path.join(self.work, 'task.err')).read()}")
        return t0, wall

    def rows(self):
        db = sqlite3.connect(f"file:{os.path.join(self.contexts, 'tasks.db')}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute("SELECT * FROM tasks")]
        finally:
            db.close()


def p4(args):
    llm = FakeLlm("done")
    work = tempfile.mkdtemp(prefix="ctxhost-bench-p4.")
    try:
        env = Env(args.ctxhost, llm, work)
        env.task_exec(env.submit("warm-up: fills the compiled-component cache"))
        times, walls = [], []
        for r in range(args.runs):
            uuid = env.submit(f"bench: say done ({r})")
            seen = len(llm.snapshot())
            t0, wall = env.task_exec(uuid)
            new = llm.snapshot()[seen:]
            if not new:
                sys.exit(f"bench_tasks: task {uuid} sent no request")
            ms = (new[0][0] - t0) * 1000
            times.append(ms)
            walls.append(wall * 1000)
            print(f"run {r + 1}/{args.runs}: first request after {ms:.1f} ms, "
                  f"task process {wall * 1000:.1f} ms", file=sys.stderr)
        bad = [r for r in env.rows() if r["status"] != "completed"]
        if bad:
            sys.exit(f"bench_tasks: {len(bad)} task(s) did not complete: {bad[0]}")
        print(f"P4 median_ms={statistics.median(times):.1f} min_ms={min(times):.1f} "
              f"max_ms={max(times):.1f} runs={args.runs} "
              f"task_wall_median_ms={statistics.median(walls):.1f}")
    finally:
        llm.stop()
        shutil.rmtree(work, ignore_errors=True)


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def smaps_kinds(pid):
    """/proc/PID/smaps summed by mapping kind: {kind: {Rss, Pss, Private, Shared}} in KiB."""
    kinds = {}
    cur = None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    perms = head[1]
                    name = " ".join(head[5:]) if len(head) > 5 else ""
                    if name.endswith(".cwasm"):
                        kind = f"compiled components (.cwasm files) {perms}"
                    elif name.startswith("/memfd:"):
                        kind = f"memfd ({name.split()[0]}) {perms}"
                    elif "/ctxhost" in name and ".so" not in name:
                        kind = f"ctxhost binary {perms}"
                    elif ".so" in name:
                        kind = "shared libraries"
                    elif name in ("[heap]", "[stack]"):
                        kind = name
                    elif name == "":
                        kind = f"anonymous {perms}"
                    else:
                        kind = name if name.startswith("[") else "other files"
                    cur = kinds.setdefault(kind, {"Rss": 0, "Pss": 0, "Private": 0, "Shared": 0,
                                                  "maps": 0})
                    cur["maps"] += 1
                elif cur is not None and len(head) >= 2 and head[0].endswith(":"):
                    key = head[0][:-1]
                    if key in ("Rss", "Pss"):
                        cur[key] += int(head[1])
                    elif key in ("Private_Clean", "Private_Dirty"):
                        cur["Private"] += int(head[1])
                    elif key in ("Shared_Clean", "Shared_Dirty"):
                        cur["Shared"] += int(head[1])
    except OSError:
        return None
    return kinds


def print_kinds(kinds, pid):
    total = {k: sum(v[k] for v in kinds.values()) for k in ("Rss", "Pss", "Private", "Shared")}
    print(f"breakdown of task process {pid} at the PSS sum's peak (KiB):")
    print(f"  {'mapping kind':44s} {'maps':>5s} {'Rss':>8s} {'Pss':>8s} {'Private':>8s} {'Shared':>8s}")
    for kind, v in sorted(kinds.items(), key=lambda kv: -kv[1]["Pss"]):
        if v["Rss"] == 0:
            continue
        print(f"  {kind:44s} {v['maps']:5d} {v['Rss']:8d} {v['Pss']:8d} {v['Private']:8d} "
              f"{v['Shared']:8d}")
    print(f"  {'total':44s} {'':5s} {total['Rss']:8d} {total['Pss']:8d} {total['Private']:8d} "
          f"{total['Shared']:8d}")


def task_pids(contexts):
    """PIDs of live `ctxhost ... task-exec` processes of this contexts tree."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"task-exec" in argv and contexts.encode() in argv:
            pids.append(int(name))
    return pids


def p6(args):
    llm = FakeLlm("tool-then-done", args.delay_ms)
    work = tempfile.mkdtemp(prefix="ctxhost-bench-p6.")
    try:
        env = Env(args.ctxhost, llm, work, parallel=args.tasks)
        # Fill the component cache first (what `ctxhost run`'s preflight also does).
        env.task_exec(env.submit("warm-up"))
        warm = {r["uuid"] for r in env.rows()}
        uuids = [env.submit(f"bench: task {i}") for i in range(args.tasks)]
        seen = len(llm.snapshot())
        stop = threading.Event()
        samples = {"sum_peak": 0, "alive_peak": 0, "per_pid": {}, "kinds": None}

        def sample():
            while not stop.is_set():
                total, alive, live = 0, 0, []
                for pid in task_pids(env.contexts):
                    kib = pss_kib(pid)
                    if kib is None:
                        continue
                    total += kib
                    alive += 1
                    live.append(pid)
                    per = samples["per_pid"]
                    per[pid] = max(per.get(pid, 0), kib)
                if total > samples["sum_peak"]:
                    samples["sum_peak"] = total
                    if args.breakdown and alive:
                        pid = live[len(live) // 2]
                        kinds = smaps_kinds(pid)
                        if kinds:
                            samples["kinds"] = (pid, kinds)
                samples["alive_peak"] = max(samples["alive_peak"], alive)
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        log = os.path.join(work, "worker.err")
        t0 = time.perf_counter()
        with open(log, "w") as err:
            rc = subprocess.call(env.cmd("run", "--once", "--max-parallel", str(args.tasks)),
                                 stdout=subprocess.DEVNULL, stderr=err)
        wall = time.perf_counter() - t0
        stop.set()
        sampler.join()
        text = open(log, errors="replace").read()
        db_errors = len(re.findall(r"database is locked|database is busy|SQLITE_BUSY|"
                                   r"database error|disk I/O error", text, re.I))
        rows = [r for r in env.rows() if r["uuid"] not in warm]
        want = {"status": "completed", "llm_call_count": 2, "tool_call_count": 1,
                "total_tokens": 24, "compression_count": 0, "resume_count": 0,
                "crash_count": 0, "error_message": None}
        counter_errors = []
        for r in rows:
            for k, v in want.items():
                if r[k] != v:
                    counter_errors.append(f"{r['uuid']}: {k} = {r[k]!r}, expected {v!r}")
        if len(rows) != len(uuids):
            counter_errors.append(f"{len(rows)} rows for {len(uuids)} tasks")
        requests = llm.snapshot()[seen:]
        if len(requests) != 2 * args.tasks:
            counter_errors.append(f"the server got {len(requests)} requests, "
                                  f"expected {2 * args.tasks}")
        for e in counter_errors[:10]:
            print(f"bench_tasks: {e}", file=sys.stderr)
        if rc != 0:
            print(f"bench_tasks: `ctxhost run --once` exited {rc}; its output:\n{text[-4000:]}",
                  file=sys.stderr)
        per_pid = samples["per_pid"].values()
        # Time per task on this machine: the batch's wall time over the tasks (they ran at
        # once), and the same without the fake LLM's two delays.
        per_task_ms = wall * 1000 / args.tasks
        host_ms = (wall - 2 * args.delay_ms / 1000) * 1000 / args.tasks
        print(f"P6 tasks={args.tasks} pss_sum_peak_mib={samples['sum_peak'] / 1024:.1f} "
              f"pss_per_task_peak_mib={max(per_pid, default=0) / 1024:.1f} "
              f"pss_per_task_median_mib={statistics.median(per_pid) / 1024 if per_pid else 0:.1f} "
              f"alive_peak={samples['alive_peak']} db_errors={db_errors} "
              f"counter_errors={len(counter_errors)} wall_s={wall:.2f} "
              f"per_task_ms={per_task_ms:.1f} host_ms_per_task={host_ms:.1f} "
              f"delay_ms={args.delay_ms} exit={rc}")
        if samples["kinds"]:
            print_kinds(samples["kinds"][1], samples["kinds"][0])
    finally:
        llm.stop()
        shutil.rmtree(work, ignore_errors=True)


def process_cpu_ns(pid):
    """Nanoseconds process `pid`'s live threads have run (sum of /proc/PID/task/*/schedstat)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass  # the thread ended meanwhile
    except OSError:
        return None
    return total


def stat_cpu_s(pid):
    """utime + stime of process `pid` (all its threads, ended ones too), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steps(args):
    if args.steps < 2:
        sys.exit("bench_tasks: --steps must be at least 2")
    llm = FakeLlm("done")
    work = tempfile.mkdtemp(prefix="ctxhost-bench-steps.")
    try:
        env = Env(args.ctxhost, llm, work)
        # Room for every step: no compression, no step limit in the way.
        with open(env.config, "a") as f:
            f.write(f"agent:\n  max_steps: {args.steps + 10}\n")
        with open(env.config) as f:
            text = f.read().replace("context_length: 32000", "context_length: 4000000")
        with open(env.config, "w") as f:
            f.write(text)
        env.task_exec(env.submit("warm-up: fills the compiled-component cache"))
        llm.mode = "steps"
        runs = []
        for r in range(args.runs):
            uuid = env.submit(f"bench: {args.steps} steps ({r})")
            seen = len(llm.snapshot())
            with llm.lock:
                llm.step, llm.steps = 0, args.steps
            err = open(os.path.join(work, "task.err"), "w")
            proc = subprocess.Popen(env.cmd("task-exec", uuid), stdout=subprocess.DEVNULL,
                                    stderr=err)
            with llm.lock:
                llm.pid = proc.pid
            # The process's total CPU just before it exits (it is a zombie until waited for).
            total = None
            while proc.poll() is None:
                try:
                    total = stat_cpu_s(proc.pid)
                except OSError:
                    pass
                time.sleep(0.005)
            with llm.lock:
                llm.pid = None
            err.close()
            if proc.returncode != 0:
                sys.exit(f"bench_tasks: task-exec {uuid} exited {proc.returncode}: "
                         f"{open(os.path.join(work, 'task.err')).read()}")
            got = llm.snapshot()[seen:]
            cpu = [c for (_, _, _, c) in got]
            if len(got) != args.steps or None in cpu:
                sys.exit(f"bench_tasks: task {uuid} made {len(got)} requests, "
                         f"expected {args.steps} (or its CPU could not be read)")
            per = [(b - a) / 1e6 for a, b in zip(cpu, cpu[1:])]  # ms, steps 2..STEPS
            n = len(per)
            mid = n // 2
            xs = list(range(2, n + 2))
            mx, my = statistics.mean(xs), statistics.mean(per)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, per)) / sum(
                (x - mx) ** 2 for x in xs)
            run = {
                "first": cpu[0] / 1e6,
                "early": statistics.median(per[:10]),
                "middle": statistics.median(per[max(0, mid - 5):mid + 5]),
                "late": statistics.median(per[-10:]),
                "max": max(per),
                "slope_us": slope * 1000,
                "stat_per_step": (total or 0) / args.steps * 1000,
            }
            runs.append(run)
            print(f"run {r + 1}/{args.runs}: step 1 (start to first request) "
                  f"{run['first']:.1f} ms; steps 2-11 {run['early']:.2f} ms, middle "
                  f"{run['middle']:.2f} ms, last 10 {run['late']:.2f} ms, max "
                  f"{run['max']:.2f} ms, slope {run['slope_us']:+.2f} us/step; "
                  f"utime+stime / steps {run['stat_per_step']:.2f} ms", file=sys.stderr)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"STEPS steps={args.steps} runs={args.runs} first_ms={med['first']:.1f} "
              f"early_ms={med['early']:.2f} middle_ms={med['middle']:.2f} "
              f"late_ms={med['late']:.2f} max_ms={med['max']:.2f} "
              f"slope_us_per_step={med['slope_us']:+.2f} "
              f"stat_ms_per_step={med['stat_per_step']:.2f} "
              f"load={' '.join(open('/proc/loadavg').read().split()[:3])}")
    finally:
        llm.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("p4")
    a.add_argument("ctxhost")
    a.add_argument("--runs", type=int, default=10)
    b = sub.add_parser("p6")
    b.add_argument("ctxhost")
    b.add_argument("--tasks", type=int, default=64)
    b.add_argument("--delay-ms", type=int, default=500)
    b.add_argument("--breakdown", action="store_true",
                   help="print one task process's smaps by mapping kind at the PSS sum's peak")
    c = sub.add_parser("steps")
    c.add_argument("ctxhost")
    c.add_argument("--steps", type=int, default=200)
    c.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    {"p4": p4, "p6": p6, "steps": steps}[args.cmd](args)


if __name__ == "__main__":
    main()
