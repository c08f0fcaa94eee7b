#!/usr/bin/env python3
"""Issue 41: the JSON API of `ctxhost serve` with 100,000 tasks in the store (SQLite, or
PostgreSQL with --pg URL).

Prints (medians over the runs):
  - a task-list page (`GET /api/v1/tasks?limit=50`): the first page, a page deep in the cursor
    chain, and a filtered one (status=completed) — p50 and p95 in ms;
  - SSE latency: a line appended to a running task's messages.jsonl until its event reaches a
    client of `GET /api/v1/tasks/{uuid}/events` — p50 and max in ms over 20 lines;
  - memory per SSE client: the server's RSS with 100 clients following a running task, minus
    its RSS before they connected, divided by 100.

Usage: python3 bench/api_bench.py [PATH/TO/ctxhost] [--tasks N] [--pg URL]
(default target/debug/ctxhost, 100000 tasks, SQLite; needs only the Python standard library, and
`psql` for --pg: the rows are loaded with COPY into the store at URL, which must hold no ctxhost
tables yet, e.g. a throwaway cluster from `scripts/test-postgres.sh start`).
"""

import http.client
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib

TOKEN = "bench-token-0123456789abcdef"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    argv = sys.argv[1:]
    pg = None
    if "--pg" in argv:
        i = argv.index("--pg")
        pg = argv[i + 1]
        del argv[i:i + 2]
    args = [a for a in argv if not a.startswith("--")]
    binary = os.path.abspath(args[0] if args else "target/debug/ctxhost")
    n = 100_000
    if "--tasks" in sys.argv:
        n = int(sys.argv[sys.argv.index("--tasks") + 1])
    work = tempfile.mkdtemp(prefix="ctxhost-api-bench-")
    store = "task_store:\n  url_env: BENCH_DATABASE_URL\n" if pg else ""
    with open(os.path.join(work, "config.yaml"), "w") as f:
        f.write(store + "context_storage:\n  base_dir: ./contexts\nllm:\n  provider: openai\n  model: m\n  api_key_env: \"\"\n")
    env = dict(os.environ, BENCH_TOKEN=TOKEN)
    if pg:
        env["BENCH_DATABASE_URL"] = pg
    subprocess.run([binary, "init"], cwd=work, check=True, capture_output=True, env=env)
    t0 = time.time()
    statuses = ["completed", "completed", "completed", "failed", "queued", "stopped"]
    rows = []
    for i in range(n):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_700_000_000 + i)) + ".000Z"
        rows.append((str(uuidlib.uuid4()), "local", statuses[i % len(statuses)], ts, ts, f"task {i}", "m", "openai"))
    # One running task with a directory, for the event stream.
    running = str(uuidlib.uuid4())
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"
    cols = "uuid, task_source, status, created_at, updated_at, prompt, model, llm_provider"
    if pg:
        csv = "".join(",".join(r) + "\n" for r in rows)
        subprocess.run(["psql", pg, "-q", "-v", "ON_ERROR_STOP=1", "-c",
                        f"\\copy tasks ({cols}) from stdin with (format csv)"],
                       input=csv, text=True, check=True)
        subprocess.run(["psql", pg, "-q", "-v", "ON_ERROR_STOP=1", "-c",
                        f"INSERT INTO tasks ({cols}, started_at) VALUES "
                        f"('{running}', 'local', 'running', '{now}', '{now}', 'followed', 'm', 'openai', '{now}'); ANALYZE tasks"],
                       check=True)
    else:
        db = sqlite3.connect(os.path.join(work, "contexts", "tasks.db"))
        db.executemany(f"INSERT INTO tasks ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        db.execute(
            f"INSERT INTO tasks ({cols}, started_at) "
            "VALUES (?, 'local', 'running', ?, ?, 'followed', 'm', 'openai', ?)", (running, now, now, now))
        db.commit()
        db.close()
    task_dir = os.path.join(work, "contexts", "running", running)
    os.makedirs(task_dir)
    messages = os.path.join(task_dir, "messages.jsonl")
    open(messages, "w").close()
    print(f"{n} tasks inserted in {time.time() - t0:.1f} s into {'PostgreSQL' if pg else 'SQLite'} ({work})")

    serve = subprocess.Popen([binary, "serve", "--bind", "127.0.0.1:0", "--token-env", "BENCH_TOKEN"],
                             cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        banner = serve.stdout.readline()
        port = int(banner.split("http://127.0.0.1:")[1].split("/")[0])
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def get(path):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.sock = socket.create_connection(("127.0.0.1", port))
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = time.perf_counter()
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t) * 1000
            c.close()
            assert r.status == 200, (r.status, body[:200])
            return ms, json.loads(body)

        # A cursor 1,000 pages deep (50,000 tasks in; half the tasks in for a smaller --tasks).
        depth = max(1, min(1000, n // 100))
        _, page = get("/api/v1/tasks?limit=50")
        deep = page["next_cursor"]
        for _ in range(depth - 1):
            _, page = get(f"/api/v1/tasks?limit=50&cursor={deep}")
            deep = page["next_cursor"]

        def timed(path, runs=100):
            times = sorted(get(path)[0] for _ in range(runs))
            return statistics.median(times), times[int(len(times) * 0.95) - 1]

        for name, path in [
            ("first page", "/api/v1/tasks?limit=50"),
            (f"page {depth + 1:,} (cursor)", f"/api/v1/tasks?limit=50&cursor={deep}"),
            ("status=completed", "/api/v1/tasks?limit=50&status=completed"),
            ("status=queued, source=local", "/api/v1/tasks?limit=50&status=queued&source=local"),
        ]:
            p50, p95 = timed(path)
            print(f"list {name:32s} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms")

        # SSE latency: append a line, wait for its event.
        def sse_client(events, ready):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall((f"GET /api/v1/tasks/{running}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n").encode())
            ready.set()
            buf = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.startswith(b"data:") and b'"prompt"' in line:
                        events.append(time.perf_counter())
        events, ready = [], threading.Event()
        threading.Thread(target=sse_client, args=(events, ready), daemon=True).start()
        ready.wait()
        time.sleep(1)
        lat = []
        for seq in range(1, 21):
            line = json.dumps({"seq": seq, "role": "user", "content": f"line {seq}", "tokens": 3,
                               "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"})
            before = len(events)
            t = time.perf_counter()
            with open(messages, "a") as f:
                f.write(line + "\n")
            while len(events) == before and time.perf_counter() - t < 5:
                time.sleep(0.001)
            lat.append((events[-1] - t) * 1000 if len(events) > before else 5000)
            time.sleep(0.05)
        print(f"SSE event after append           p50 {statistics.median(lat):6.1f} ms   max {max(lat):6.1f} ms")

        # Memory per SSE client.
        time.sleep(1)
        base = rss_kib(serve.pid)
        socks = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall((f"GET /api/v1/tasks/{running}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n").encode())
            socks.append(s)
        time.sleep(3)
        for s in socks:
            s.setblocking(False)
            try:
                while s.recv(65536):
                    pass
            except BlockingIOError:
                pass
        with_clients = rss_kib(serve.pid)
        print(f"100 SSE clients: RSS {base / 1024:.1f} -> {with_clients / 1024:.1f} MiB, "
              f"{(with_clients - base) / 100:.0f} KiB per client")
        for s in socks:
            s.close()
        print("(load average " + " ".join(open("/proc/loadavg").read().split()[:3]) + ")")
    finally:
        serve.terminate()
        serve.wait()


if __name__ == "__main__":
    main()
