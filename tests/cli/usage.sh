#!/usr/bin/env bash
# tests/cli/usage.sh -- rlock's usage errors (64), help and version (0),
# and unavailable servers (69): refused connection, wrong password (which
# must never be printed).
. "$(dirname "$0")/common.sh"

expect 0 "--help" "$RLOCK" --help
contains "$T/out" "exec" "--help lists the commands"
expect 0 "--version" "$RLOCK" --version
contains "$T/out" "rlock 0." "--version prints the version"
for c in exec status unlock demo; do expect 0 "$c --help" "$RLOCK" "$c" --help; done

expect 64 "no command" "$RLOCK"
expect 64 "unknown command" "$RLOCK" frobnicate
expect 64 "unknown global option" "$RLOCK" --frob status x
expect 64 "-u without a value" "$RLOCK" -u
expect 64 "exec: bad duration" "$RLOCK" exec --wait 5x NAME -- true
contains "$T/err" "bad duration" "bad duration is explained"
expect 64 "exec: negative duration" "$RLOCK" exec --wait -1s NAME -- true
expect 64 "exec: zero lease" "$RLOCK" exec --lease 0 NAME -- true
expect 64 "exec: --lease with --watchdog" "$RLOCK" exec --lease 1s --watchdog 2s NAME -- true
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

start_redis --requirepass s3cret-pw
expect 0 "right password" "$RLOCK" -u "redis://:s3cret-pw@127.0.0.1:$PORT" status NAME
expect 69 "wrong password" "$RLOCK" -u "redis://:wr0ng-pw@127.0.0.1:$PORT" status NAME
if grep -q "wr0ng-pw" "$T/err" "$T/out"; then fail "the password was printed: $(cat "$T/err")"; else
  pass "the password is not printed"; fi
expect 69 "no password" "$RLOCK" -u "redis://127.0.0.1:$PORT" exec NAME -- true
finish
