#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for ctxhost's tests (the distribution's PostgreSQL; nothing
# is installed here: `.ci/run` runs `apt-get install -y postgresql` when it is missing).
#
# Usage:
#   scripts/test-postgres.sh start [DIR] [PORT]  create the cluster in DIR if needed (initdb), start it
#                                                on 127.0.0.1:PORT, wait until it answers, print the
#                                                admin URL of role `ctxhost` (CREATEDB, password
#                                                authentication) on stdout
#   scripts/test-postgres.sh stop [DIR]          stop it (fast shutdown); the files stay
#   scripts/test-postgres.sh restart [DIR]       restart it (fast shutdown: clients are disconnected)
#   scripts/test-postgres.sh url [DIR]           print the URL of a started cluster
#   scripts/test-postgres.sh destroy [DIR]       stop it and delete DIR
#
# DIR defaults to <repo>/target/test-postgres; PORT to the one DIR used before, else a free port.
# The cluster is for tests only: fsync off, trust for the local socket, scram-sha-256 on TCP
# (so the URL carries a password, which tests check is never printed), up to 300 connections.
# PostgreSQL refuses to run as root: as root, initdb and pg_ctl run as the `postgres` user
# (runuser), which must be able to reach DIR (else a directory under /tmp is used, named
# after DIR, and DIR/location points to it).
#
# Environment: CTXHOST_TEST_PG_DIR (default DIR), PG_BINDIR (default: the newest
# /usr/lib/postgresql/*/bin, else the PATH).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"
DIR="${2:-${CTXHOST_TEST_PG_DIR:-$REPO_ROOT/target/test-postgres}}"
WANT_PORT="${3:-}"
ROLE=ctxhost

die() { echo "test-postgres: $*" >&2; exit 1; }

bindir() {
    if [[ -n "${PG_BINDIR:-}" ]]; then echo "$PG_BINDIR"; return; fi
    local d
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [[ -n "$d" && -x "$d/initdb" ]]; then echo "$d"; return; fi
    command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return; }
    die "PostgreSQL is not installed (Debian: apt-get install -y postgresql)"
}
BIN="$(bindir)"

# Run a PostgreSQL program as the cluster's owner.
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# The directory that holds the cluster: DIR, or (root, DIR unreachable for postgres) a
# directory under /tmp recorded in DIR/location.
cluster_dir() {
    mkdir -p "$DIR"
    if [[ -f "$DIR/location" ]]; then cat "$DIR/location"; return; fi
    if [[ "$(id -u)" == 0 ]] && ! runuser -u postgres -- test -x "$DIR"; then
        local alt
        alt="/tmp/ctxhost-test-postgres-$(printf '%s' "$DIR" | sha256sum | cut -c1-12)"
        mkdir -p "$alt"
        echo "$alt" >"$DIR/location"
        echo "$alt"
        return
    fi
    echo "$DIR"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

url_of() {
    local c="$1"
    echo "postgres://$ROLE:$(cat "$c/password")@127.0.0.1:$(cat "$c/port")/postgres"
}

start() {
    local c
    c="$(cluster_dir)"
    [[ "$(id -u)" == 0 ]] && chown postgres "$c"
    if [[ ! -f "$c/data/PG_VERSION" ]]; then
        local port="${WANT_PORT:-$(free_port)}"
        local pw
        pw="$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 20)"
        echo "$port" >"$c/port"
        echo "pw$pw" >"$c/password"
        chmod 644 "$c/port" "$c/password"
        as_owner "$BIN/initdb" -D "$c/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
            --no-sync -E UTF8 --locale=C >"$c/initdb.log" 2>&1 || { cat "$c/initdb.log" >&2; die "initdb failed"; }
        cat >>"$c/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$c'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
        as_owner "$BIN/pg_ctl" -D "$c/data" -l "$c/server.log" -w -t 60 start >/dev/null \
            || { tail -n 30 "$c/server.log" >&2; die "the server did not start"; }
        as_owner "$BIN/psql" -h "$c" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
            -c "CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$(cat "$c/password")'" >/dev/null
    elif [[ -n "$WANT_PORT" && "$WANT_PORT" != "$(cat "$c/port")" ]]; then
        die "$c was created for port $(cat "$c/port"); destroy it to change the port"
    elif ! as_owner "$BIN/pg_ctl" -D "$c/data" status >/dev/null 2>&1; then
        as_owner "$BIN/pg_ctl" -D "$c/data" -l "$c/server.log" -w -t 60 start >/dev/null \
            || { tail -n 30 "$c/server.log" >&2; die "the server did not start"; }
    fi
    url_of "$c"
}

case "$CMD" in
    start) start ;;
    stop)
        c="$(cluster_dir)"
        [[ -f "$c/data/PG_VERSION" ]] || exit 0
        as_owner "$BIN/pg_ctl" -D "$c/data" -m fast -w stop >/dev/null 2>&1 || true
        ;;
    restart)
        c="$(cluster_dir)"
        as_owner "$BIN/pg_ctl" -D "$c/data" -l "$c/server.log" -m fast -w -t 60 restart >/dev/null
        ;;
    url)
        c="$(cluster_dir)"
        as_owner "$BIN/pg_ctl" -D "$c/data" status >/dev/null 2>&1 || die "not running ($c)"
        url_of "$c"
        ;;
    destroy)
        c="$(cluster_dir)"
        if [[ -f "$c/data/PG_VERSION" ]]; then
            as_owner "$BIN/pg_ctl" -D "$c/data" -m immediate -w stop >/dev/null 2>&1 || true
        fi
        rm -rf "$c" "$DIR"
        ;;
    *)
        sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
