# bench_lib.sh — what the benchmark scripts share, sourced after they set BENCH_NAME (the name
# their messages start with) and ROOT (the repository): the checks of their knobs, the build
# they measure, a work directory removed at exit, and a fake server started and waited for.
#
# Knobs read here: BENCH_PROFILE (dev | bench | release; default dev), BENCH_RUNS (positive,
# default given by the script), BENCH_NO_BUILD=1 (measure what is built), BENCH_KEEP=1 (keep
# the work directory), CARGO_TARGET_DIR.

bench_die() { echo "$BENCH_NAME: $*" >&2; exit 1; }

# bench_positive VALUE WHAT: VALUE must be a whole number ≥ 1 (WHAT names it in the error).
bench_positive() {
  [[ $1 =~ ^[1-9][0-9]*$ ]] || bench_die "$2 must be a positive integer, got '$1'"
}

# bench_whole VALUE WHAT: VALUE must be a whole number ≥ 0.
bench_whole() {
  [[ $1 =~ ^[0-9]+$ ]] || bench_die "$2 must be a whole number, got '$1'"
}

# bench_profile: PROFILE from BENCH_PROFILE and OUT, the target directory holding its build
# ($CARGO_TARGET_DIR or target/, then debug or release).
bench_profile() {
  PROFILE=${BENCH_PROFILE:-dev}
  local sub
  case $PROFILE in
    dev) sub=debug ;;
    release | bench) sub=release ;;
    *) bench_die "BENCH_PROFILE must be dev, bench or release, got '$PROFILE'" ;;
  esac
  OUT="${CARGO_TARGET_DIR:-$ROOT/target}/$sub"
}

# bench_build CARGO_ARGS...: `cargo build -q -p ctxhost --profile $PROFILE CARGO_ARGS...`
# unless BENCH_NO_BUILD=1. Call bench_profile first.
bench_build() {
  if [[ ${BENCH_NO_BUILD:-0} == 1 ]]; then
    echo "BENCH_NO_BUILD=1: measuring what is built in $OUT" >&2
  else
    echo "building $* ($PROFILE profile)..." >&2
    (cd "$ROOT" && cargo build -q -p ctxhost --profile "$PROFILE" "$@")
  fi
}

# bench_workdir: WORK, a new directory under $TMPDIR removed at exit (kept with BENCH_KEEP=1),
# with the server of bench_server (if any) stopped first; Ctrl-C exits 130.
bench_workdir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/ctxhost-$BENCH_NAME.XXXXXX")
  SERVER_PID=
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_cleanup() {
  if [[ -n ${SERVER_PID:-} ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then echo "$BENCH_NAME: kept $WORK" >&2; else rm -rf "$WORK"; fi
}

# bench_server READY_FILE COMMAND...: start COMMAND in the background (its pid in SERVER_PID,
# stopped at exit) and wait up to 5 s for it to write READY_FILE (its port or ports).
bench_server() {
  local ready=$1
  shift
  "$@" &
  SERVER_PID=$!
  for _ in $(seq 100); do [[ -s $ready ]] && break; sleep 0.05; done
  [[ -s $ready ]] || bench_die "the server ($*) did not start"
}
