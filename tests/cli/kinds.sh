#!/usr/bin/env bash
# tests/cli/kinds.sh -- Redisson's lock kinds through `rlock exec`:
# --nonreentrant (RLock's hash, count 1; busy while a Redisson-style holder
# has it); --fenced (CMD gets the token in RLOCK_TOKEN, one more each time;
# status --fenced shows the last one); --spin (RLock's hash, no pub/sub: a
# waiter polls, and gets the lock after a release that publishes nothing).
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
rc() { redis-cli -p "$PORT" "$@"; }

# --nonreentrant: RLock's hash, the holder's count 1, while CMD runs.
expect 0 "exec --nonreentrant runs the command" R exec --nonreentrant njob -- sh -c \
  "redis-cli -p $PORT TYPE njob > $T/type; redis-cli -p $PORT HVALS njob > $T/vals"
contains "$T/type" "hash" "the non-reentrant lock is RLock's hash"
[ "$(cat "$T/vals")" = 1 ] && pass "count 1" || fail "HVALS $(cat "$T/vals")"
[ "$(rc EXISTS njob)" = 0 ] && pass "released after the command" || fail "njob still exists"
# Held by a Redisson client (its owner id "<uuid>:<thread>"): busy, left as it is.
rc HSET njob 5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1 1 >/dev/null
rc PEXPIRE njob 60000 >/dev/null
expect 75 "--nonreentrant --wait times out while Redisson holds it" R exec --nonreentrant --wait 300ms njob -- true
[ "$(rc HLEN njob)" = 1 ] && pass "Redisson's hold is left as it is" || fail "HLEN njob: $(rc HLEN njob)"
rc DEL njob >/dev/null
expect 64 "--simple and --nonreentrant exclude each other" R exec --simple --nonreentrant njob -- true

# --fenced: the token in CMD's environment, 1 then 2; the counter key stays.
expect 0 "exec --fenced exports RLOCK_TOKEN" R exec --fenced fjob -- sh -c "echo \$RLOCK_TOKEN > $T/tok1"
[ "$(cat "$T/tok1")" = 1 ] && pass "first token 1" || fail "RLOCK_TOKEN '$(cat "$T/tok1")'"
expect 0 "exec --fenced again" R exec --fenced fjob -- sh -c "echo \$RLOCK_TOKEN > $T/tok2"
[ "$(cat "$T/tok2")" = 2 ] && pass "second token 2" || fail "RLOCK_TOKEN '$(cat "$T/tok2")'"
[ "$(rc GET 'redisson_lock_token:{fjob}')" = 2 ] && pass "Redisson's counter key" || fail "GET token: $(rc GET 'redisson_lock_token:{fjob}')"
[ "$(rc EXISTS fjob)" = 0 ] && pass "released after the command" || fail "fjob still exists"
expect 1 "status --fenced (free: 1)" R status --fenced fjob
contains "$T/out" "fenced token 2" "status shows the last token"
expect 1 "status --fenced --json (free: 1)" R status --fenced --json fjob
contains "$T/out" '"kind":"fenced","token":2' "JSON token"
expect 64 "--fenced takes one NAME" R exec --fenced fa fb -- true
expect 1 "status without --fenced (free: 1)" R status --json fjob
contains "$T/out" '"kind":"fenced","token":2' "the counter found: shown as a fenced lock"
expect 1 "status of a plain lock (free: 1)" R status --json njob
grep -q fenced "$T/out" && fail "a plain lock shown as fenced: $(cat "$T/out")" || pass "no token for a plain lock"

# --spin: RLock's hash while CMD runs; nothing published.
pubs() { rc INFO commandstats | awk -F'[=,]' '/^cmdstat_s?publish:/ {n += $2} END {print n + 0}'; }
p0=$(pubs)
expect 0 "exec --spin runs the command" R exec --spin spjob -- sh -c "redis-cli -p $PORT TYPE spjob > $T/stype"
contains "$T/stype" "hash" "the spin lock is RLock's hash"
[ "$(rc EXISTS spjob)" = 0 ] && pass "released after the command" || fail "spjob still exists"
[ "$(pubs)" = "$p0" ] && pass "nothing published" || fail "publishes: $p0 -> $(pubs)"
# A waiter polls: a Redisson-style holder's silent release (DEL) lets it in.
rc HSET spjob 5d9f6a2c-0b1e-4c3d-8e7f-9a0b1c2d3e4f:1 1 >/dev/null
rc PEXPIRE spjob 60000 >/dev/null
bg "$T/spw" "$RLOCK" -u "$URL" exec --spin --wait 30s spjob -- true
spw=$BG
evals() { rc INFO commandstats | awk -F'[=,]' '/^cmdstat_eval(sha)?:/ {n += $2} END {print n + 0}'; }
e0=$(evals)
tried_twice() { [ "$(evals)" -ge $((e0 + 2)) ]; }
until_true 20 tried_twice || fail "the spin waiter never tried twice"
[ "$(rc PUBSUB NUMSUB 'redisson_lock__channel:{spjob}' | tail -1)" = 0 ] && pass "the waiter did not subscribe" || fail "a subscriber"
rc DEL spjob >/dev/null
await "$spw" 25
[ "$RC" = 0 ] && pass "the spin waiter got the lock after a silent release" || fail "waiter: exit $RC, $(cat "$T/spw.err")"
finish
