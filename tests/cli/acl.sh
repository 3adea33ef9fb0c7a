#!/usr/bin/env bash
# tests/cli/acl.sh -- Redis 7 ACL users (issue 23): a user without what rlock
# needs (here the lock's channel: Redis 7 gives a new user no channel; or a key)
# is told before CMD runs, naming what is missing, exit 77; an unlock whose
# channel permission was taken while CMD ran is refused before it writes
# (the lock stays held until its lease ends, no latch left), never half done.
. "$(dirname "$0")/common.sh"
start_redis
rc() { redis-cli -p "$PORT" "$@"; }
rc ACL SETUSER nochan on '>pw' '~*' resetchannels '+@all' >/dev/null
rc ACL SETUSER appkeys on '>pw' '~app:*' '~rlock_acquire_latch:{app:*' '~redisson_unlock_latch:{app:*' '~redisson_lock__channel:{app:*' '&*' '+@all' >/dev/null
rc ACL SETUSER full on '>pw' '~*' '&*' '+@all' >/dev/null
U() { "$RLOCK" -u "redis://$1:pw@127.0.0.1:$PORT" "${@:2}"; }

# No channel permission: refused before CMD runs.
expect 77 "exec as a user without channel permission" U nochan exec job -- touch "$T/ran1"
[ -e "$T/ran1" ] && fail "CMD ran although the unlock could not work" || pass "CMD did not run"
contains "$T/err" "publish on channel redisson_lock__channel:{job}" "the missing publish permission is named"
contains "$T/err" "subscribe on channel redisson_lock__channel:{job}" "the missing subscribe permission is named"
[ "$(rc DBSIZE)" = 0 ] && pass "nothing written" || fail "keys left: $(rc KEYS '*' | tr '\n' ' ')"
expect 77 "exec --simple as a user without channel permission" U nochan exec --simple job -- true
contains "$T/err" "rlock_simple__channel:{job}" "the simple lock's channel is named"

# Keys outside the user's patterns: refused, naming the key.
expect 77 "exec as a user without key permission on NAME" U appkeys exec job -- touch "$T/ran2"
[ -e "$T/ran2" ] && fail "CMD ran without key permission" || pass "CMD did not run (key)"
contains "$T/err" "job" "the key is named"
expect 0 "exec as a user with key and channel permission" U appkeys exec app:job -- true
rc ACL SETUSER nochankey on '>pw' '~app:*' '~rlock_acquire_latch:{app:*' '~redisson_unlock_latch:{app:*' '&*' '+@all' >/dev/null
expect 77 "exec as a user without key permission on the channel name" U nochankey exec app:job -- touch "$T/ran3"
[ -e "$T/ran3" ] && fail "CMD ran without key permission on the channel" || pass "CMD did not run (channel key)"
contains "$T/err" "key redisson_lock__channel:{app:job}" "the channel's key is named"

# The channel permission is taken while CMD runs: the unlock is refused
# before it writes (before: the key was deleted, then PUBLISH failed: exit 70,
# latch key left, waiters never told).
expect 77 "unlock refused after the permission was taken" U full exec job2 -- \
  redis-cli -p "$PORT" ACL SETUSER full resetchannels
contains "$T/err" "cannot release the lock" "the failed release is reported"
contains "$T/err" "may not publish to the channel redisson_lock__channel:{job2}" "the script names the channel"
[ "$(rc EXISTS job2)" = 1 ] && pass "the lock was left as it was (held until its lease ends)" ||
  fail "the unlock script wrote before failing: job2 gone"
[ -z "$(rc KEYS 'redisson_unlock_latch:*')" ] && pass "no unlock latch left" ||
  fail "latch left: $(rc KEYS 'redisson_unlock_latch:*')"

# The fair and read-write locks (their scripts publish too): the permission is
# taken while CMD runs; the unlock is refused before it writes (before: the
# key was deleted, then PUBLISH failed; the fair queue's head never told).
LUA=$(cd "$(dirname "$0")/../../lua" && pwd)
rc ACL SETUSER full '&*' >/dev/null
far=$(($(date +%s) * 1000 + 600000))
expect 77 "fair unlock with a queued waiter refused after the permission was taken" U full exec --fair jf -- \
  sh -c "redis-cli -p $PORT RPUSH 'redisson_lock_queue:{jf}' w1 >/dev/null &&
    redis-cli -p $PORT ZADD 'redisson_lock_timeout:{jf}' $far w1 >/dev/null &&
    redis-cli -p $PORT ACL SETUSER full resetchannels"
contains "$T/err" "may not publish to the channel redisson_lock__channel:{jf}:w1" "the fair script names the waiter's channel"
[ "$(rc EXISTS jf)" = 1 ] && pass "fair: the lock was left as it was" || fail "fair: the unlock wrote before failing: jf gone"
[ "$(rc LRANGE 'redisson_lock_queue:{jf}' 0 -1)" = w1 ] && pass "fair: the queue was left as it was" ||
  fail "fair: queue now: $(rc LRANGE 'redisson_lock_queue:{jf}' 0 -1 | tr '\n' ' ')"
[ -z "$(rc KEYS 'redisson_unlock_latch:*')" ] && pass "fair: no unlock latch left" ||
  fail "fair: latch left: $(rc KEYS 'redisson_unlock_latch:*')"
for m in read write; do
  rc ACL SETUSER full '&*' >/dev/null
  expect 77 "$m unlock refused after the permission was taken" U full exec --$m j$m -- \
    redis-cli -p "$PORT" ACL SETUSER full resetchannels
  contains "$T/err" "may not publish to the channel redisson_rwlock:{j$m}" "the $m unlock names the channel"
  [ "$(rc EXISTS j$m)" = 1 ] && pass "$m: the lock was left as it was" || fail "$m: the unlock wrote before failing: j$m gone"
  [ -z "$(rc KEYS "redisson_unlock_latch:{j$m}:*")" ] && pass "$m: no unlock latch left" ||
    fail "$m: latch left: $(rc KEYS "redisson_unlock_latch:{j$m}:*")"
done

# The fair scripts run as a user without channel permission (the pre-check of
# exec stops such a user earlier, so they are sent by hand): nothing written.
N() { redis-cli -p "$PORT" --user nochan --pass pw --no-auth-warning "$@"; }
rc DEL 'redisson_lock_queue:{jg}' 'redisson_lock_timeout:{jg}' >/dev/null
rc RPUSH 'redisson_lock_queue:{jg}' me w2 >/dev/null
rc ZADD 'redisson_lock_timeout:{jg}' $far me $((far + 5000)) w2 >/dev/null
N EVAL "$(cat "$LUA/fair_acquire_undo.lua")" 5 jg 'redisson_lock_queue:{jg}' 'redisson_lock_timeout:{jg}' \
  'redisson_lock__channel:{jg}' 'rlock_acquire_latch:{jg}:r1' 0 me publish 10000 -1 5000 0 >"$T/out" 2>&1
# The give-up of a waiter behind which this user may not publish to: the
# owner leaves (before: refused NOPERM, its entry blocked the queue for its
# slot, test_acl fair_waiters_refused_together); w2 keeps its deadline, untold.
[ "$(cat "$T/out")" = 0 ] && pass "fair give-up with a waiter behind it may not tell: done" ||
  fail "fair give-up with a waiter behind it may not tell: $(cat "$T/out")"
[ "$(rc LRANGE 'redisson_lock_queue:{jg}' 0 -1 | tr '\n' ' ')" = "w2 " ] && pass "give-up: the owner left the queue" ||
  fail "give-up: queue now: $(rc LRANGE 'redisson_lock_queue:{jg}' 0 -1 | tr '\n' ' ')"
[ "$(rc ZSCORE 'redisson_lock_timeout:{jg}' w2)" = $((far + 5000)) ] && pass "give-up: the deadline behind was left as it was" ||
  fail "give-up: w2's deadline now $(rc ZSCORE 'redisson_lock_timeout:{jg}' w2)"
[ "$(rc ZSCORE 'redisson_lock_timeout:{jg}' me)" = "" ] && pass "give-up: the owner's deadline removed" ||
  fail "give-up: the owner's deadline left: $(rc ZSCORE 'redisson_lock_timeout:{jg}' me)"
[ "$(rc GET 'rlock_acquire_latch:{jg}:r1')" = xd ] && pass "give-up: the tombstone written" || fail "give-up: no tombstone"
# A try that evicts a stale head tells the next one: refused before the eviction.
rc DEL 'redisson_lock_queue:{jh}' 'redisson_lock_timeout:{jh}' >/dev/null
rc HSET jh other:1 1 >/dev/null
rc RPUSH 'redisson_lock_queue:{jh}' stale w2 >/dev/null
rc ZADD 'redisson_lock_timeout:{jh}' 1 stale $far w2 >/dev/null
N EVAL "$(cat "$LUA/fair_acquire.lua")" 5 jh 'redisson_lock_queue:{jh}' 'redisson_lock_timeout:{jh}' \
  'redisson_lock__channel:{jh}' 'rlock_acquire_latch:{jh}:r1' 30000 me 5000 $((far - 600000)) 10000 t 0 publish >"$T/out" 2>&1
contains "$T/out" "NOPERM" "fair try evicting a stale head: refused (NOPERM)"
[ "$(rc LRANGE 'redisson_lock_queue:{jh}' 0 -1 | tr '\n' ' ')" = "stale w2 " ] && pass "try: the queue was left as it was" ||
  fail "try: queue now: $(rc LRANGE 'redisson_lock_queue:{jh}' 0 -1 | tr '\n' ' ')"
# A channel pattern that allows one waiter's channel and not another's: the
# script checks the channel of the head the eviction of stale heads leaves
# (w2), not one standing for all (w1 is allowed, and evicted).
rc ACL SETUSER onewaiter on '>pw' '~*' resetchannels '&redisson_lock__channel:{jk}:w1' '+@all' >/dev/null
O() { redis-cli -p "$PORT" --user onewaiter --pass pw --no-auth-warning "$@"; }
force() {
  O EVAL "$(cat "$LUA/fair_force_unlock.lua")" 4 jk 'redisson_lock_queue:{jk}' 'redisson_lock_timeout:{jk}' \
    'redisson_lock__channel:{jk}' 0 publish 1 $((far - 600000)) >"$T/out" 2>&1
}
rc HSET jk x 1 >/dev/null
rc RPUSH 'redisson_lock_queue:{jk}' w1 w2 >/dev/null
rc ZADD 'redisson_lock_timeout:{jk}' 1 w1 $far w2 >/dev/null
force
contains "$T/out" "NOPERM rlock: this user may not publish to the channel redisson_lock__channel:{jk}:w2" \
  "fair force-unlock: the live head's channel is checked (w2), not the stale one's"
[ "$(rc EXISTS jk) $(rc LRANGE 'redisson_lock_queue:{jk}' 0 -1 | tr '\n' ' ')" = "1 w1 w2 " ] &&
  pass "force-unlock: nothing written (key, queue)" || fail "force-unlock wrote: $(rc EXISTS jk) $(rc LRANGE 'redisson_lock_queue:{jk}' 0 -1 | tr '\n' ' ')"
rc DEL 'redisson_lock_queue:{jk}' >/dev/null
rc RPUSH 'redisson_lock_queue:{jk}' w1 >/dev/null
rc ZADD 'redisson_lock_timeout:{jk}' $far w1 >/dev/null
force
[ "$(cat "$T/out")" = 2 ] && [ "$(rc EXISTS jk)" = 0 ] && pass "force-unlock allowed for the permitted head w1" ||
  fail "force-unlock with head w1: $(cat "$T/out"), jk exists: $(rc EXISTS jk)"

# The pre-check of exec per kind: the fair lock's waiter channels and its
# queue keys, the read-write lock's channel and timeout keys; the spin lock
# publishes nothing (no channel needed).
expect 77 "exec --fair as a user without channel permission" U nochan exec --fair jp -- touch "$T/ran4"
[ -e "$T/ran4" ] && fail "CMD ran (fair)" || pass "CMD did not run (fair)"
contains "$T/err" "publish on channel redisson_lock__channel:{jp}:<owner id>" "the fair lock's waiter channels are named"
for m in read write; do
  expect 77 "exec --$m as a user without channel permission" U nochan exec --$m jp -- true
  contains "$T/err" "publish on channel redisson_rwlock:{jp}" "the $m lock's channel is named"
done
expect 0 "exec --spin as a user without channel permission" U nochan exec --spin jp -- true
expect 77 "exec --fair as a user without key permission on the queue" U appkeys exec --fair app:jq -- true
contains "$T/err" "key redisson_lock_queue:{app:jq}" "the queue key is named"
contains "$T/err" "key redisson_lock_timeout:{app:jq}" "the deadlines key is named"
expect 77 "exec --read as a user without key permission on the timeout keys" U appkeys exec --read app:jq -- true
contains "$T/err" "{app:jq}:00000000-0000-0000-0000-000000000000:1:rwlock_timeout:1" "the timeout key is named"
rc ACL SETUSER appkeys '~redisson_lock_queue:{app:*' '~redisson_lock_timeout:{app:*' '~{app:*' '~redisson_rwlock:{app:*' >/dev/null
expect 0 "exec --fair with the queue keys allowed" U appkeys exec --fair app:jq -- true
expect 0 "exec --read with the timeout keys allowed" U appkeys exec --read app:jq -- true
expect 0 "exec --write with the timeout keys allowed" U appkeys exec --write app:jq -- true
# exec --permit: the semaphore's channel is checked before CMD runs (before:
# CMD ran, then the release was refused: exit 77 after the fact, the permit
# held until its lease); a user with just the documented keys and channel runs.
rc SET pj 2 >/dev/null
expect 77 "exec --permit as a user without channel permission" U nochan exec --permit pj -- touch "$T/ran4"
[ -e "$T/ran4" ] && fail "CMD ran although the release could not work" || pass "CMD did not run (permit)"
contains "$T/err" "publish on channel redisson_sc:{pj}" "the semaphore's channel is named"
[ "$(rc GET pj)" = 2 ] && [ "$(rc EXISTS '{pj}:timeout')" = 0 ] && pass "no permit taken" || fail "permit taken: $(rc GET pj)"
rc ACL SETUSER pmin on '>pw' '~pj' '~{pj}:timeout' '~rlock_acquire_latch:{pj}:*' '~redisson_unlock_latch:{pj}:*' \
  '~redisson_sc:{pj}' '&redisson_sc:{pj}' '+@all' >/dev/null
expect 0 "exec --permit as a user with the permit's keys and channel" U pmin exec --permit pj -- true
[ "$(rc GET pj)" = 2 ] && pass "permit given back" || fail "count after: $(rc GET pj)"

# A NAME with braces: its channel is Redisson's redisson_lock__channel:a{b}
# (no braces added); a user allowed that channel runs (before: refused,
# naming redisson_lock__channel:{a{b}}, a channel rlock never uses).
rc ACL SETUSER bra on '>pw' '~*' resetchannels '&redisson_lock__channel:a*' '&redisson_sc:a*' '+@all' >/dev/null
expect 0 "exec on a braced NAME as a user allowed its channel" U bra exec 'a{b}' -- true
rc SET 'a{p}' 1 >/dev/null
expect 0 "exec --permit on a braced NAME as a user allowed its channel" U bra exec --permit 'a{p}' -- true
expect 77 "exec on a braced NAME as a user without its channel" U nochan exec 'a{b}' -- true
contains "$T/err" "redisson_lock__channel:a{b}" "the braced name's channel is named as Redisson names it"

finish
