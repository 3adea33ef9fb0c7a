#!/usr/bin/env bash
# tests/cli/usage.sh -- rlock's usage errors (64), help and version (0),
# per-command help, and unavailable servers (69): refused connection, wrong
# password (which must never be printed), a missing unix socket (named), a
# server that does not speak RESP, rediss:// to a plain port.
. "$(dirname "$0")/common.sh"

expect 0 "--help" "$RLOCK" --help
contains "$T/out" "exec" "--help lists the commands"
# every URL form lib/url.c takes (docs/cli.md), Sentinel and Cluster too
for form in redis:// rediss:// unix:// redis+sentinel:// rediss+sentinel:// redis+cluster:// rediss+cluster:// \
    /MASTER sentinel_password= 26379; do
  contains "$T/out" "$form" "--help shows the URL form $form"
done
expect 0 "--version" "$RLOCK" --version
contains "$T/out" "rlock 0." "--version prints the version"
expect 64 "--version with an argument (issue 23: exit 0)" "$RLOCK" --version bogus
# A -u value without a scheme may be a password put in the wrong place: never
# echoed (issue 23: 'rlock: S3cretPW: invalid Redis URL').
expect 64 "-u without a scheme" "$RLOCK" -u S3cretPW status x
grep -q S3cretPW "$T/err" && fail "the -u value without a scheme was echoed: $(cat "$T/err")" ||
  pass "the -u value without a scheme is not echoed"
contains "$T/err" "invalid Redis URL" "-u without a scheme: the error is still explained"
for c in exec status unlock demo; do
  expect 0 "$c --help" "$RLOCK" "$c" --help
  cp "$T/out" "$T/own-help"
  expect 0 "help $c" "$RLOCK" help "$c"
  cmp -s "$T/out" "$T/own-help" && pass "'rlock help $c' prints $c's help" ||
    fail "'rlock help $c' is not '$c --help': $(head -n 2 "$T/out")"
done
expect 0 "help" "$RLOCK" help
contains "$T/out" "--tls-ca" "the global help lists the TLS options"
expect 64 "help of an unknown command" "$RLOCK" help frobnicate

expect 64 "no command" "$RLOCK"
expect 64 "unknown command" "$RLOCK" frobnicate
expect 64 "unknown global option" "$RLOCK" --frob status x
expect 64 "-u without a value" "$RLOCK" -u
expect 64 "exec: bad duration" "$RLOCK" exec --wait 5x NAME -- true
contains "$T/err" "bad duration" "bad duration is explained"
expect 64 "exec: negative duration" "$RLOCK" exec --wait -1s NAME -- true
for bad in "--wait 1.5ms" "--wait 1." "--wait .5s" "--wait 1h30" "--lease 366d" "-E 256" "-E -1" "-E x"; do
  # shellcheck disable=SC2086
  expect 64 "exec $bad: usage error" "$RLOCK" -u redis://127.0.0.1:1 exec $bad NAME -- true
done
for good in "--wait 1.5s" "--lease 1h30m" "--lease 1d" "--watchdog 0.5s" "-E 3"; do
  # shellcheck disable=SC2086
  expect 69 "exec $good is accepted (then nothing listens: 69)" "$RLOCK" -u redis://127.0.0.1:1 exec $good NAME -- true
done
expect 64 "exec: zero lease" "$RLOCK" exec --lease 0 NAME -- true
expect 64 "exec: --lease with --watchdog" "$RLOCK" exec --lease 1s --watchdog 2s NAME -- true
# Every duration is checked before connecting (nothing listens on port 1: a
# connection attempt would be exit 69).
for bad in "--watchdog 1" "--watchdog 2ms" "--watchdog 3ms" "--watchdog 499ms" "--watchdog 0" "--lease 9223372036854775807" \
    "--watchdog 9223372036854775807" "--wait 9223372036854775807" "--lease 366000000s"; do
  # shellcheck disable=SC2086
  expect 64 "exec $bad: usage error" "$RLOCK" -u redis://127.0.0.1:1 exec $bad NAME -- true
  grep -q "connect" "$T/err" && fail "exec $bad talks about connecting: $(cat "$T/err")"
  contains "$T/err" "${bad%% *}" "exec $bad: the message names the option"
done
# TLS options: files must be readable, cert and key go together, only with rediss://.
expect 64 "--tls-ca of a missing file" "$RLOCK" -u rediss://127.0.0.1:1 --tls-ca "$T/none.pem" status NAME
contains "$T/err" "$T/none.pem" "the missing CA file is named"
touch "$T/x.pem"
expect 64 "--tls-cert without --tls-key" "$RLOCK" -u rediss://127.0.0.1:1 --tls-cert "$T/x.pem" status NAME
expect 64 "TLS options with redis://" "$RLOCK" -u redis://127.0.0.1:1 --insecure status NAME
contains "$T/err" "rediss://" "TLS options without rediss:// are explained"
expect 64 "--insecure with --tls-ca" "$RLOCK" -u rediss://127.0.0.1:1 --insecure --tls-ca "$T/x.pem" status NAME
expect 64 "--tls-ca without a value" "$RLOCK" status NAME --tls-ca
# --replica-sync: a policy name, a positive timeout below the command timeout (3s),
# all checked before connecting (port 1: a connection attempt would be exit 69).
expect 64 "--replica-sync of an unknown policy" "$RLOCK" -u redis://127.0.0.1:1 --replica-sync some status NAME
contains "$T/err" "off, one, majority or all" "the policies are listed"
expect 64 "--replica-sync-timeout 0" "$RLOCK" -u redis://127.0.0.1:1 --replica-sync-timeout 0 status NAME
expect 64 "--replica-sync-timeout of the command timeout" "$RLOCK" -u redis://127.0.0.1:1 --replica-sync-timeout 3s status NAME
contains "$T/err" "less than the command timeout" "a too long WAIT timeout is explained"
expect 69 "--replica-sync all is accepted" "$RLOCK" -u redis://127.0.0.1:1 status --replica-sync all --replica-sync-timeout 500ms NAME
expect 69 "--replica-sync off ignores the timeout" "$RLOCK" -u redis://127.0.0.1:1 --replica-sync off --replica-sync-timeout 9s status NAME
expect 64 "exec: empty name" "$RLOCK" exec "" -- true
contains "$T/err" "empty" "empty name is explained"
expect 64 "exec: no name" "$RLOCK" exec
expect 64 "exec: no command" "$RLOCK" exec NAME --
expect 64 "exec: unknown option" "$RLOCK" exec --frob NAME -- true
expect 64 "status: no name" "$RLOCK" status
expect 64 "status: empty name" "$RLOCK" status ""
expect 64 "status: two names" "$RLOCK" status a b
expect 64 "unlock without --force" "$RLOCK" unlock NAME
contains "$T/err" "--force" "unlock without --force explains --force"
expect 64 "unlock --force: empty name" "$RLOCK" unlock --force ""
expect 64 "demo: bad --workers" "$RLOCK" demo --workers 0
expect 64 "demo: bad --stock" "$RLOCK" demo --stock lots

# Nothing listens on port 1.
expect 69 "unreachable server" "$RLOCK" -u redis://127.0.0.1:1 status NAME
expect 69 "unreachable server (exec)" "$RLOCK" -u redis://127.0.0.1:1 exec NAME -- true
expect 69 "unreachable server via RLOCK_URL" env RLOCK_URL=redis://127.0.0.1:1 "$RLOCK" status NAME
contains "$T/err" "127.0.0.1:1" "the message names the server"
grep -q "cannot connect.*cannot connect" "$T/err" && fail "repeated message: $(cat "$T/err")"
expect 69 "missing unix socket" "$RLOCK" -u "unix://$T/no-such.sock" status NAME
contains "$T/err" "connect $T/no-such.sock:" "the missing socket path is named in the reason"

# A server that answers but is not Redis: exit 69, and the message says so.
python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept(); c.recv(65536); c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n"); c.close()
' >"$T/http.port" &
BG_PIDS+=($!)
until_true 10 test -s "$T/http.port" || fail "the fake HTTP server did not start"
expect 69 "a non-Redis server" "$RLOCK" -u "redis://127.0.0.1:$(cat "$T/http.port")" status NAME
contains "$T/err" "is this a Redis server?" "a non-Redis server is explained"

# An echo server speaks RESP back: every handshake reply is an array.
python3 -c '
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
def echo(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()
' >"$T/echo.port" &
BG_PIDS+=($!)
until_true 10 test -s "$T/echo.port" || fail "the echo server did not start"
expect 69 "an echo server" "$RLOCK" -u "redis://127.0.0.1:$(cat "$T/echo.port")" status NAME
contains "$T/err" "is this a Redis server?" "an echo server is explained"

start_redis --requirepass s3cret-pw
expect 1 "right password (a free lock: 1)" "$RLOCK" -u "redis://:s3cret-pw@127.0.0.1:$PORT" status NAME
expect 69 "wrong password" "$RLOCK" -u "redis://:wr0ng-pw@127.0.0.1:$PORT" status NAME
if grep -q "wr0ng-pw" "$T/err" "$T/out"; then fail "the password was printed: $(cat "$T/err")"; else
  pass "the password is not printed"; fi
expect 69 "no password" "$RLOCK" -u "redis://127.0.0.1:$PORT" exec NAME -- true

# rediss:// to a plain Redis port: the TLS handshake gets no answer.
expect 69 "rediss:// to a plain port" "$RLOCK" -u "rediss://:s3cret-pw@127.0.0.1:$PORT" --insecure status NAME
contains "$T/err" "is this a TLS port?" "rediss:// to a plain port is explained"
finish
