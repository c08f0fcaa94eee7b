#!/usr/bin/env python3
"""rss-breakdown.py — what a process's resident memory is made of at its peak (issue 14, P1).

Runs COMMAND, samples /proc/PID/status every millisecond, and each time VmRSS reaches a new
high copies /proc/PID/smaps. At exit it prints the peak (VmHWM, which /usr/bin/time -v also
reports as "Maximum resident set size") and the last snapshot taken at that peak, summed by
mapping: the executable's code (r-xp) and read-only data (r--p), shared libraries, the heap,
anonymous mappings (wasmtime puts compiled component code and guest memories there) and the
stack. File-backed pages are pages of the page cache mapped into the process: they count in
RSS, but every process running the same binary shares them (PSS splits them).

Usage:
  scripts/rss-breakdown.py [--top N] -- COMMAND [ARG...]
  e.g. scripts/rss-breakdown.py -- target/release/ctxhost --config C --contexts D task-exec UUID

A sample is taken every millisecond, so a peak shorter than that can be missed: the printed
VmHWM is exact, the breakdown is of the highest sample (its total is printed next to it).
Exits with COMMAND's exit code (128 + N when signal N killed it; 127/126 when it cannot be
run).
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import time


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def kib(text, field):
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def threads(status):
    m = re.search(r"^Threads:\s+(\d+)", status, re.M)
    return m.group(1) if m else "?"


def summarise(smaps, exe):
    """Rss and Anonymous KiB per (mapping name, permissions), in file order of first sight."""
    rss, anon, key = collections.Counter(), collections.Counter(), None
    for line in smaps.splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split(None, 5)
            name = parts[5].strip() if len(parts) > 5 else "[anonymous]"
            if name == exe:
                name = "executable " + name
            key = (name, parts[1])
        elif line.startswith("Rss:") and key:
            rss[key] += int(line.split()[1])
        elif line.startswith("Anonymous:") and key:
            anon[key] += int(line.split()[1])
    return rss, anon


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=12, help="mappings to list (default 12)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("a COMMAND to run is needed (after --)")
    if args.top < 0:
        ap.error("--top must be 0 or more")
    try:
        proc = subprocess.Popen(cmd)
    except OSError as e:
        # As a shell says it: 127 not found, 126 found but not runnable.
        print(f"rss-breakdown: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    best, hwm, snap, exe = 0, 0, None, None
    while proc.poll() is None:
        status = read(f"/proc/{proc.pid}/status")
        if status:
            hwm = max(hwm, kib(status, "VmHWM"))
            now = kib(status, "VmRSS")
            if now > best:
                smaps = read(f"/proc/{proc.pid}/smaps")
                if smaps:
                    best, snap = now, (status, smaps)
                    try:
                        exe = os.readlink(f"/proc/{proc.pid}/exe")
                    except OSError:
                        pass
        time.sleep(0.001)
    # Killed by signal N: 128 + N, as a shell reports it.
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if snap is None:
        print("rss-breakdown: the process ended before a sample was taken", file=sys.stderr)
        return code
    status, smaps = snap
    rss, anon = summarise(smaps, exe)
    print(f"peak RSS (VmHWM): {hwm / 1024:.1f} MiB; highest sample {best / 1024:.1f} MiB, of it "
          f"file-backed {kib(status, 'RssFile') / 1024:.1f} MiB, anonymous "
          f"{kib(status, 'RssAnon') / 1024:.1f} MiB; threads {threads(status)}")
    groups = collections.Counter()
    for (name, perms), v in rss.items():
        if name.startswith("executable "):
            g = f"executable {perms}"
        elif name.startswith("/") and ".so" in name:
            g = "shared libraries"
        elif name in ("[heap]", "[stack]"):
            g = name
        elif name == "[anonymous]" or name.startswith("/memfd:"):
            g = f"anonymous {perms}"
        else:
            g = "other files"
        groups[g] += v
    print(f"{'MiB':>7}  by kind")
    for g, v in groups.most_common():
        if v:
            print(f"{v / 1024:7.1f}  {g}")
    print(f"{'MiB':>7}  {'anon':>5}  largest mappings")
    for (name, perms), v in rss.most_common(args.top):
        print(f"{v / 1024:7.1f}  {anon[(name, perms)] / 1024:5.1f}  {perms} {name}")
    return code


if __name__ == "__main__":
    sys.exit(main())
