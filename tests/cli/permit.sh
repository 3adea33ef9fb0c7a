#!/usr/bin/env bash
# tests/cli/permit.sh -- `rlock exec --permit NAME -- CMD`: one permit of the
# permit-expirable semaphore NAME (Redisson's RPermitExpirableSemaphore) held
# while CMD runs: Redisson's layout (NAME the free count, {NAME}:timeout the
# permits), at most N commands at once, the permit back when CMD ends, and
# back about one watchdog lease after a SIGKILLed rlock; usage errors.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
rc() { redis-cli -p "$PORT" "$@"; }

expect 64 "--permit on a semaphore without permits is refused" R exec --permit pjob -- true
contains "$T/err" "has no permits" "the message says why"
contains "$T/err" "--permits N" "and how to set them"
[ "$(rc EXISTS pjob)" = 0 ] && pass "nothing written" || fail "pjob exists"

expect 0 "exec --permit --permits 2 runs the command" R exec --permit --permits 2 pjob -- sh -c \
  "echo \$RLOCK_PERMIT_ID > $T/id; redis-cli -p $PORT GET pjob > $T/avail; redis-cli -p $PORT ZCARD '{pjob}:timeout' > $T/zc"
grep -Eq '^[0-9a-f]{32}$' "$T/id" && pass "RLOCK_PERMIT_ID is 32 hex" || fail "RLOCK_PERMIT_ID '$(cat "$T/id")'"
[ "$(cat "$T/avail")" = 1 ] && pass "one of 2 taken while it ran" || fail "GET pjob: $(cat "$T/avail")"
[ "$(cat "$T/zc")" = 1 ] && pass "the permit in {pjob}:timeout" || fail "ZCARD: $(cat "$T/zc")"
[ "$(rc GET pjob)" = 2 ] && pass "given back after the command" || fail "GET pjob: $(rc GET pjob)"
[ "$(rc ZCARD '{pjob}:timeout')" = 0 ] && pass "no permit left" || fail "ZCARD $(rc ZCARD '{pjob}:timeout')"
expect 0 "--permits on an existing semaphore keeps its count" R exec --permit --permits 5 pjob -- true
[ "$(rc GET pjob)" = 2 ] && pass "still 2" || fail "GET pjob: $(rc GET pjob)"
expect 3 "the command's status" R exec --permit pjob -- sh -c 'exit 3'

# At most 2 at once: two holders wait for $T/go; a third times out, then gets
# one once a holder ends. One holder's rlock is SIGKILLed: its permit returns
# about one watchdog lease (600 ms) later.
hold() { # hold N: a holder that says $T/in.N, then waits for $T/go.N
  bg "$T/h$1" "$RLOCK" -u "$URL" exec --permit --watchdog 600ms pjob -- sh -c \
    "touch $T/in.$1; until [ -e $T/go.$1 ]; do sleep 0.05; done"
}
hold 1
h1=$BG
hold 2
h2=$BG
both_in() { [ -e "$T/in.1" ] && [ -e "$T/in.2" ]; }
until_true 20 both_in || fail "the two holders never ran"
[ "$(rc GET pjob)" = 0 ] && pass "both permits taken" || fail "GET pjob: $(rc GET pjob)"
expect 75 "a third command waits and times out" R exec --permit --wait 300ms pjob -- true
touch "$T/go.1"
await "$h1" 20
[ "$RC" = 0 ] && pass "holder 1 ended" || fail "holder 1: exit $RC, $(cat "$T/h1.err")"
expect 0 "a third gets the permit holder 1 gave back" R exec --permit --wait 10s pjob -- true
kill -KILL "$h2"
wait "$h2" 2>/dev/null
hold 3
h3=$BG
in3() { [ -e "$T/in.3" ]; }
until_true 20 in3 || fail "holder 3 never ran" # it took the free permit: only holder 2's is left
expect 0 "after holder 2's rlock was killed, its permit returns" R exec --permit --wait 10s pjob -- true
touch "$T/go.2" "$T/go.3"
await "$h3" 20
[ "$RC" = 0 ] && pass "holder 3 ended" || fail "holder 3: exit $RC, $(cat "$T/h3.err")"
[ "$(rc GET pjob)" = 2 ] && pass "both permits free at the end" || fail "GET pjob: $(rc GET pjob)"

expect 64 "--permits wants a count" R exec --permit --permits zero pjob -- true
expect 64 "--permits 0 is refused" R exec --permit --permits 0 pjob -- true
expect 64 "--permits goes with --permit" R exec --permits 2 pjob -- true
expect 64 "--permit takes one NAME" R exec --permit pa pb -- true
expect 64 "--permit and --fair exclude each other" R exec --permit --fair pjob -- true
rc HSET phash f 1 >/dev/null
expect 65 "a NAME that holds a hash" R exec --permit --permits 1 phash -- true
finish
