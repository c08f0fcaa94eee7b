#!/usr/bin/env python3
"""link-order.py — regenerates host/link/task.order, the code layout of the ctxhost binary
(issue 14, P1: a task process's peak RSS).

Why: the kernel maps the page-cache pages around each page of the binary a process touches
(fault-around; whole large folios on recent kernels), so a task process that runs ~3 MB of code
spread over a 28 MB `.text` has half of `.text` resident. host/build.rs hands this file to the
linker (rust-lld's `--symbol-ordering-file`) in optimised builds, which places the functions it
lists together at the start of `.text`: the code a task process runs is then resident, and
little else.

How the list is made (a release build of ctxhost and bench_context, built here with the file
switched off, CTXHOST_LINK_ORDER=0):
  1. A task process runs under valgrind's callgrind: the functions it executes, by their
     symbol names (a resumed task over a 1 MiB synthetic history, as scripts/bench-rss.sh runs
     it, and a fresh task; one LLM call to scripts/sink_llm.py, components from the cache).
  2. Rounds: the binary is relinked with the list so far, the same tasks run natively under
     `perf record -e page-faults`, and every function whose page faulted outside the listed
     region is added (callgrind misses code that only runs natively: CPU-feature dispatch,
     copies of one function that the linker keeps apart). It stops after two rounds without a
     new function, or after --rounds.
The file lists one symbol per line (lld ignores `#` lines and names it does not find, so a
list made for an older build only places fewer functions; rerun this script after changes
that move much code). It covers the task path benchmarked; a task that calls tools, compresses
or uses PostgreSQL also runs code from the rest of `.text`.

Usage: scripts/link-order.py [--rounds N]     (from anywhere in the repository; ~10 min)
       scripts/link-order.py --check          (how many listed functions the release build has)
Needs: cargo, valgrind, perf (kernel.perf_event_paranoid <= 2), nm and readelf (binutils).
Then `cargo build --release` links with the new list.
"""

import argparse
import bisect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER_FILE = os.path.join(ROOT, "host", "link", "task.order")
BIN = os.path.join(ROOT, "target", "release", "ctxhost")
GEN = os.path.join(ROOT, "target", "release", "examples", "bench_context")
ENV = dict(os.environ, CTXHOST_LINK_ORDER="0")


def die(msg):
    print(f"link-order: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    """Runs `cmd`; a failure ends the script with the command and what it printed."""
    capture = "capture_output" not in kw and "stdout" not in kw
    if capture:
        kw["capture_output"] = True
        kw["text"] = True
    try:
        return subprocess.run(cmd, check=True, env=ENV, **kw)
    except subprocess.CalledProcessError as e:
        out = "\n".join(x for x in (e.stdout, e.stderr) if isinstance(x, str) and x.strip())
        die(f"{' '.join(cmd)} failed (exit {e.returncode})" + (f":\n{out[-4000:]}" if out else ""))
    except OSError as e:
        die(f"cannot run {cmd[0]}: {e}")


def text_symbols(binary):
    """[(address, size, mangled name)] of the functions defined in `binary`, by address."""
    out = run(["nm", "-n", "-S", "--defined-only", binary], capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTwW":
            syms.append((int(f[0], 16), int(f[1], 16), f[3]))
    return syms


def text_delta(binary):
    """Virtual address minus file offset of `binary`'s executable LOAD segment."""
    out = run(["readelf", "-lW", binary], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in "".join(f[6:8]):
            return int(f[2], 16) - int(f[1], 16)
    die(f"no executable LOAD segment in {binary}")


class Tasks:
    """A contexts directory, a config and the fake LLM, to run task processes in."""

    def __init__(self, work):
        self.work = work
        self.ctx = os.path.join(work, "contexts")
        port_file = os.path.join(work, "port")
        self.server = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "scripts", "sink_llm.py"), port_file,
             os.path.join(work, "llm.log")])
        for _ in range(200):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        else:
            die("the fake LLM (scripts/sink_llm.py) did not start")
        port = open(port_file).read().strip()
        self.config = os.path.join(work, "config.yaml")
        with open(self.config, "w") as f:
            f.write(f"""llm:
  provider: openai
  base_url: http://127.0.0.1:{port}
  model: bench-model
  api_key_env: ""
  context_length: 4000000000
  max_output_tokens: 1024
  max_retries: 0
plugins:
  compressor: none
agent:
  max_steps: 4000000000
""")

    def close(self):
        self.server.kill()
        self.server.wait()

    def ctxhost(self, binary, *args, wrapper=(), capture=False):
        cmd = [*wrapper, binary, "--config", self.config, "--contexts", self.ctx, *args]
        return run(cmd, capture_output=capture, text=capture)

    def run_all(self, binary, wrapper_for):
        """Runs a resumed task (1 MiB history) and a fresh one, each under wrapper_for(tag)."""
        for tag, history in (("resume", True), ("fresh", False)):
            uuid = self.ctxhost(binary, "submit", f"link-order {tag}", capture=True).stdout.strip()
            if history:
                run([GEN, "gen", os.path.join(self.ctx, "paused", uuid), "--mib", "1",
                     "--checkpoint", "--cache", os.path.join(self.ctx, ".cache")],
                    stdout=subprocess.DEVNULL)
            self.ctxhost(binary, "task-exec", uuid, wrapper=wrapper_for(tag), capture=True)


def callgrind_names(path):
    """Function names (as callgrind read them from the symbol table) in a callgrind file."""
    names = set()
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^c?fn=\(\d+\) (.+)$", line.rstrip("\n"))
            if m:
                names.add(m.group(1))
    return names


def faulted_outside(perf_data, binary, order):
    """Functions of `binary` whose pages faulted (perf page-fault samples) outside the region
    where the functions in `order` were placed."""
    out = run(["perf", "script", "-i", perf_data, "--show-mmap-events", "-F", "addr"],
              capture_output=True, text=True).stdout
    mapping = None
    pattern = re.compile(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+) .*r-xp "
                         + re.escape(binary) + "$")
    addrs = []
    for line in out.splitlines():
        m = pattern.search(line)
        if m:
            mapping = tuple(int(x, 16) for x in m.groups())
        elif re.fullmatch(r"\s*[0-9a-f]+\s*", line):
            addrs.append(int(line, 16))
    if mapping is None:
        die(f"perf recorded no executable mapping of {binary}")
    start, length, offset = mapping
    delta = text_delta(binary)
    syms = text_symbols(binary)
    starts = [s[0] for s in syms]
    listed = [s[0] for s in syms if s[2] in order]
    lo, hi = min(listed), max(listed) + 64 * 1024
    found = set()
    for a in addrs:
        if not start <= a < start + length:
            continue
        va = a - start + offset + delta
        if lo <= va <= hi:
            continue
        i = bisect.bisect_right(starts, va) - 1
        if i >= 0 and va < syms[i][0] + max(syms[i][1], 1):
            found.add(syms[i][2])
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40, help="most relink-and-measure rounds")
    ap.add_argument("--check", action="store_true",
                    help="only count the listed functions the release binary has (a list made "
                         "for an older build places fewer)")
    args = ap.parse_args()
    if args.check:
        if not os.path.exists(BIN):
            die(f"{BIN} is not built (cargo build --release -p ctxhost)")
        listed = [l for l in open(ORDER_FILE).read().splitlines() if l and not l.startswith("#")]
        defined = {s[2] for s in text_symbols(BIN)}
        have = sum(1 for l in listed if l in defined)
        print(f"{have} of the {len(listed)} functions in {ORDER_FILE} are in {BIN} "
              f"({len(listed) - have} missing)")
        return
    if args.rounds < 1:
        die("--rounds must be at least 1")
    for tool in ("cargo", "valgrind", "perf", "nm", "readelf"):
        if shutil.which(tool) is None:
            die(f"{tool} is needed and not on PATH")
    try:
        paranoid = int(open("/proc/sys/kernel/perf_event_paranoid").read())
    except (OSError, ValueError):
        paranoid = None
    if paranoid is not None and paranoid > 2:
        die(f"kernel.perf_event_paranoid is {paranoid}: perf cannot record page faults of this "
            "user's processes (it needs 2 or less: sysctl kernel.perf_event_paranoid=2)")

    print("building ctxhost and bench_context (release, without a link order)...", file=sys.stderr)
    run(["cargo", "build", "-q", "--release", "-p", "ctxhost", "--bin", "ctxhost",
         "--example", "bench_context"], cwd=ROOT)
    work = tempfile.mkdtemp(prefix="ctxhost-link-order.")
    tasks = Tasks(work)
    try:
        plain = os.path.join(work, "ctxhost.plain")
        shutil.copy2(BIN, plain)
        tasks.run_all(plain, lambda tag: ())  # fills the compiled-component cache
        # valgrind's CPU has other features, so its first run compiles the components again
        # under another cache key: only the second run is the cached path.
        cg = os.path.join(work, "callgrind.{}.{}")
        for n in (1, 2):
            tasks.run_all(plain, lambda tag: ("valgrind", "-q", "--tool=callgrind", "--demangle=no",
                                              "--callgrind-out-file=" + cg.format(tag, n)))
        defined = {s[2] for s in text_symbols(plain)}
        order = sorted((callgrind_names(cg.format("resume", 2)) | callgrind_names(cg.format("fresh", 2)))
                       & defined)
        if not order:
            die("callgrind recorded no function of the binary (is it stripped?)")
        print(f"callgrind: {len(order)} functions", file=sys.stderr)
        quiet = 0
        for r in range(1, args.rounds + 1):
            order_path = os.path.join(work, f"order.{r}")
            with open(order_path, "w") as f:
                f.write("\n".join(order) + "\n")
            run(["cargo", "rustc", "-q", "--release", "-p", "ctxhost", "--bin", "ctxhost", "--",
                 "-C", f"link-arg=-Wl,--symbol-ordering-file={order_path}",
                 "-C", "link-arg=-Wl,--no-warn-symbol-ordering"], cwd=ROOT)
            binary = os.path.join(work, f"ctxhost.{r}")
            shutil.copy2(BIN, binary)
            listed = set(order)
            data = os.path.join(work, f"perf.{r}")
            tasks.run_all(binary, lambda tag: ("perf", "record", "-q", "-e", "page-faults", "-c", "1",
                                               "-d", "-o", f"{data}.{tag}"))
            new = set()
            for tag in ("resume", "fresh"):
                new |= faulted_outside(f"{data}.{tag}", binary, listed) - listed
            print(f"round {r}: {len(new)} functions faulted outside the listed region",
                  file=sys.stderr)
            order += sorted(new)
            quiet = quiet + 1 if not new else 0
            if quiet == 2:
                break
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        if rev and dirty:
            rev += " with uncommitted changes"
        os.makedirs(os.path.dirname(ORDER_FILE), exist_ok=True)
        with open(ORDER_FILE, "w") as f:
            f.write("# The functions a ctxhost task process runs, placed first in .text by the\n"
                    "# linker (host/build.rs). Made by scripts/link-order.py from a release\n"
                    f"# build at {rev or 'an unknown commit'}: {len(order)} functions. Do not edit.\n")
            f.write("\n".join(order) + "\n")
        print(f"wrote {ORDER_FILE} ({len(order)} functions); `cargo build --release` links with it",
              file=sys.stderr)
    finally:
        tasks.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
