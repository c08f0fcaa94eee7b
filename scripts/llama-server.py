#!/usr/bin/env python3
"""llama.cpp's llama-server (tools/server, OpenAI-compatible HTTP) run from the xllamacpp wheel.

Started by scripts/local-llm.sh; not meant to be run by hand (but it can be). xllamacpp is a
Python extension that embeds llama.cpp, including the llama-server HTTP code, built without
-march=native (AVX2 + FMA + F16C baseline: any x86-64 CPU since Intel Haswell / AMD Zen 1). The
extension is unpacked from the wheel, not installed: --xllamacpp-dir is the folder that holds the
`xllamacpp` package. Only the Python standard library and that folder are used.

Accepts the subset of llama-server's flags that local-llm.sh passes:
  --xllamacpp-dir DIR  -m MODEL.gguf  [-c N_CTX] [-t THREADS] [--host ADDR] [--port PORT] [--jinja]
Logs go to stderr (llama.cpp's own log lines, then one `llama-server.py:` line per event).
Exit codes: 0 after SIGTERM/SIGINT, 1 if the server cannot start (the cause is on stderr),
2 on bad arguments.
"""

import argparse
import os
import signal
import sys
import threading


def log(msg):
    print(f"llama-server.py: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="llama-server.py", description=__doc__.splitlines()[0])
    p.add_argument("--xllamacpp-dir", required=True, help="folder holding the xllamacpp package")
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, help="context window in tokens")
    p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (generation and batch)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8080, help="TCP port to listen on")
    p.add_argument("--jinja", action="store_true", help="use the model's Jinja chat template (default)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if sys.version_info < (3, 10):
        log(f"Python >= 3.10 is needed (the xllamacpp wheel is cp310-abi3), this is {sys.version.split()[0]}")
        return 1
    if not os.path.isfile(args.model):
        log(f"model file not found: {args.model}")
        return 1
    # GNU OpenMP spins (busy-waits) between parallel regions by default; on a shared machine with
    # other busy processes that starved the other thread and cut generation speed by 5-20x
    # (measured with -t 2 under a cargo build). Passive waiting costs nothing when the CPU is idle.
    # Read by libgomp when it is loaded, i.e. at the import below; a value already set wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.path.insert(0, args.xllamacpp_dir)
    try:
        import xllamacpp
    except ImportError as e:
        hint = ""
        if "libgomp" in str(e):
            hint = " (the OpenMP runtime is missing: install it, e.g. `apt-get install libgomp1`)"
        log(f"cannot load xllamacpp from {args.xllamacpp_dir}: {e}{hint}")
        return 1

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.ctx_size
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.hostnames = [args.host]
    params.port = args.port
    params.use_jinja = True  # llama-server's default too; --jinja is accepted for compatibility

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = xllamacpp.Server(params)  # loads the model, then serves HTTP on its own threads
    except RuntimeError as e:
        log(f"server failed to start: {e}")
        return 1
    log(f"serving on {server.listening_address}, /health answers once the model is loaded (xllamacpp {xllamacpp.__version__}; "
        f"{xllamacpp.get_system_info().strip()})")
    stop.wait()
    log("stopping")
    del server  # stops the HTTP server and frees the model
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
