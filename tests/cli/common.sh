# tests/cli/common.sh -- sourced by the CLI tests: a temp dir, throwaway
# redis-server processes on random free loopback ports (always stopped on
# exit), and small assertion helpers. $1 of every test is the rlock binary.
set -u
RLOCK=${1:?usage: $0 RLOCK_BINARY}
T=$(mktemp -d)
REDIS_PIDS=()
BG_PIDS=()
FAILS=0

cleanup() {
  local p
  for p in "${BG_PIDS[@]}" "${REDIS_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${BG_PIDS[@]}" "${REDIS_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
finish() {
  ((FAILS == 0)) && { echo "all checks passed"; exit 0; }
  echo "$FAILS check(s) failed" >&2
  exit 1
}

# start_redis [ARGS...]: starts a redis-server, sets PORT and URL. An
# argument @TLSPORT@ becomes a second random port, set in TLS_PORT.
start_redis() {
  local attempt dir pid a args
  for attempt in $(seq 1 20); do
    PORT=$((20000 + RANDOM % 40000))
    TLS_PORT=$((20000 + RANDOM % 40000))
    args=()
    for a in "$@"; do [ "$a" = @TLSPORT@ ] && args+=("$TLS_PORT") || args+=("$a"); done
    dir=$(mktemp -d "$T/redis.XXXX")
    redis-server --save '' --appendonly no --port "$PORT" --bind 127.0.0.1 --dir "$dir" \
      --logfile "$dir/log" --daemonize no "${args[@]}" &
    pid=$!
    for _ in $(seq 1 200); do
      if grep -q 'Ready to accept connections' "$dir/log" 2>/dev/null; then
        REDIS_PIDS+=("$pid")
        URL="redis://127.0.0.1:$PORT"
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  echo "could not start redis-server" >&2
  exit 1
}

# make_certs DIR: a throw-away CA and a server certificate (localhost,
# 127.0.0.1) and client certificate signed by it, as tests/harness.c makes them.
make_certs() {
  local d=$1 n
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$d/ca.key" \
    -out "$d/ca.crt" -days 2 -subj "/CN=rlock test CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" >/dev/null 2>&1 || return 1
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$d/server.ext"
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >"$d/client.ext"
  for n in server client; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$d/$n.key" \
      -out "$d/$n.csr" -subj /CN=localhost >/dev/null 2>&1 &&
      openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -set_serial "$RANDOM" \
        -days 2 -out "$d/$n.crt" -extfile "$d/$n.ext" >/dev/null 2>&1 || return 1
  done
}

# expect CODE DESCRIPTION CMD...: runs CMD (stdout in $T/out, stderr in $T/err)
# and checks its exit code.
expect() {
  local want=$1 what=$2 rc=0
  shift 2
  "$@" >"$T/out" 2>"$T/err" || rc=$?
  if [ "$rc" = "$want" ]; then pass "$what (exit $rc)"; else
    fail "$what: exit $rc, wanted $want; stdout: $(head -c 500 "$T/out"); stderr: $(head -c 500 "$T/err")"
  fi
}

# contains FILE TEXT DESCRIPTION: FILE must contain TEXT.
contains() {
  if grep -qF -- "$2" "$1"; then pass "$3"; else fail "$3: '$2' not in $(head -c 500 "$1")"; fi
}

# bg OUTPREFIX CMD...: starts CMD in the background (stdout/stderr in
# OUTPREFIX.out/.err); its pid is in BG.
bg() {
  local prefix=$1
  shift
  "$@" >"$prefix.out" 2>"$prefix.err" &
  BG=$!
  BG_PIDS+=("$BG")
}

# await PID [SECS]: waits (bounded) for a background process; its exit code in RC.
await() {
  if ! timeout "${2:-30}" tail --pid="$1" -s 0.05 -f /dev/null; then
    kill -KILL "$1" 2>/dev/null
    fail "process $1 did not end within ${2:-30} s"
  fi
  RC=0
  wait "$1" || RC=$?
}

# ready FIFO [SECS]: waits until a child process writes a line to FIFO.
ready() {
  timeout "${2:-30}" cat "$1" >/dev/null || { fail "no signal on $1 within ${2:-30} s"; return 1; }
}

# until_true SECS CMD...: polls CMD (every 50 ms) until it succeeds; 1 if it never does.
until_true() {
  local n=$(($1 * 20))
  shift
  while ((n-- > 0)); do "$@" && return 0; sleep 0.05; done
  return 1
}
