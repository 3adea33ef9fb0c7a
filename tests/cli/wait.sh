#!/usr/bin/env bash
# tests/cli/wait.sh -- `rlock wait NAME`: waits until the lock is free without
# taking it, woken by the unlock message, or by a look with a backoff (a spin
# lock's unlock, a lock of another kind taken meanwhile: no message where it
# listens), or at the holder's TTL; exit 0 free, 1 still held after --wait (as status's
# 0/1), 65 not a lock, 64 usage; text and --json. A read-write lock is found
# by itself and waited for on its own channel.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
numsub() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB "$1" | tail -1)" = 1 ]; }
pttls() { redis-cli -p "$PORT" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_pttl:calls=\([0-9]*\),.*/\1/p'; }

expect 64 "wait without NAME" R wait
expect 64 "wait with a bad --wait" R wait --wait 1x w
p0=$(pttls)
expect 0 "wait on a free lock" R wait w
contains "$T/out" "w: free" "free message"
# free when its type was read: said at once, no wait behind it (a lock of
# another kind taken meanwhile would be waited for on the wrong channel)
p1=$(pttls)
[ "${p1:-0}" = "${p0:-0}" ] && pass "a free lock: no PTTL, no wait" || fail "a free lock: $((p1 - p0)) PTTLs"
expect 0 "wait --json on a free lock" R wait --json w
contains "$T/out" '{"name":"w","free":true,"waited_ms":' "free JSON"

expect 0 "acquire w" R acquire --lease 60s w
tok=$(cat "$T/out")
expect 1 "wait --wait 300ms on a held lock: still held" R wait --wait 300ms w
contains "$T/out" "w: still held after" "still held message"
expect 1 "wait --wait 0 --json" R wait --wait 0 --json w
contains "$T/out" '"free":false' "still held JSON"

# Woken by the release's message (it listens on the lock's channel); the lock is not taken.
p0=$(pttls)
bg "$T/w1" "$RLOCK" -u "$URL" wait --json w
w1=$BG
until_true 30 numsub 'redisson_lock__channel:{w}' && pass "waiter subscribed" || fail "waiter never subscribed"
kill -0 "$w1" 2>/dev/null && pass "waiter still waiting" || fail "waiter ended while held"
expect 0 "release w" R release w "$tok"
await "$w1" 30
[ "$RC" = 0 ] && pass "waiter: free after the release" || fail "waiter exit $RC: $(cat "$T/w1.err")"
contains "$T/w1.out" '"free":true' "waiter's JSON"
p1=$(pttls)
echo "# $((p1 - p0)) PTTLs (the message's look and the backoff's, 4 ms doubling to 250-500 ms)"
[ "$(redis-cli -p "$PORT" EXISTS w)" = 0 ] && pass "the lock was not taken" || fail "wait took the lock"

# A lease that runs out publishes nothing: the waiter wakes at the TTL.
expect 0 "acquire e with a 700ms lease" R acquire --lease 700ms e
expect 0 "wait e: free once the lease ran out" R wait --wait 20s e

# A read-write lock: its own channel.
redis-cli -p "$PORT" HSET rw mode read 00000000-0000-4000-8000-000000000000:1 1 >/dev/null
redis-cli -p "$PORT" PEXPIRE rw 60000 >/dev/null
bg "$T/w2" "$RLOCK" -u "$URL" wait rw
w2=$BG
until_true 30 numsub 'redisson_rwlock:{rw}' && pass "rwlock waiter on redisson_rwlock:{rw}" ||
  fail "rwlock waiter not on its channel"
redis-cli -p "$PORT" DEL rw >/dev/null
redis-cli -p "$PORT" PUBLISH 'redisson_rwlock:{rw}' 0 >/dev/null
await "$w2" 30
[ "$RC" = 0 ] && pass "rwlock waiter: free" || fail "rwlock waiter exit $RC: $(cat "$T/w2.err")"

# A simple lock of another library (redis-py's Lock(timeout=None): no TTL),
# released by a DEL that publishes nothing: looked at again as its acquirers poll.
redis-cli -p "$PORT" SET py 'py-token' >/dev/null
bg "$T/w3" "$RLOCK" -u "$URL" wait py
w3=$BG
until_true 30 numsub 'rlock_simple__channel:{py}' && pass "simple-lock waiter on rlock_simple__channel:{py}" ||
  fail "simple-lock waiter not on its channel"
redis-cli -p "$PORT" DEL py >/dev/null
await "$w3" 10
[ "$RC" = 0 ] && pass "simple-lock waiter: free after a release without a message" ||
  fail "simple-lock waiter exit $RC: $(cat "$T/w3.err")"

# A spin lock (Redisson's getSpinLock, rlock --spin): the reentrant lock's
# hash, and an unlock that publishes nothing (a DEL). Its layout is the
# reentrant lock's, so rlock wait cannot tell them apart: it must look again
# with a backoff, not sleep to the TTL (60 s; not seen within 20 s: fails).
redis-cli -p "$PORT" HSET sp 00000000-0000-4000-8000-000000000000:1 1 >/dev/null
redis-cli -p "$PORT" PEXPIRE sp 60000 >/dev/null
bg "$T/w4" "$RLOCK" -u "$URL" wait sp
w4=$BG
until_true 30 numsub 'redisson_lock__channel:{sp}' && pass "spin waiter listens too" || fail "spin waiter not on the channel"
redis-cli -p "$PORT" DEL sp >/dev/null
await "$w4" 20
[ "$RC" = 0 ] && pass "spin-lock waiter: free after an unlock without a message" ||
  fail "spin-lock waiter exit $RC: $(cat "$T/w4.out" "$T/w4.err")"

# The kind changes while it waits: a reentrant lock released (its message)
# and a write lock taken at once, then released on its own channel
# (redisson_rwlock:{kc}): the waiter must not sleep on to the TTL (60 s).
redis-cli -p "$PORT" HSET kc 00000000-0000-4000-8000-000000000000:1 1 >/dev/null
redis-cli -p "$PORT" PEXPIRE kc 60000 >/dev/null
bg "$T/w5" "$RLOCK" -u "$URL" wait kc
w5=$BG
until_true 30 numsub 'redisson_lock__channel:{kc}' && pass "kind-change waiter subscribed" || fail "kind-change waiter never subscribed"
pttls_gt() { (($(pttls) > $1)); }
p0=$(pttls)
redis-cli -p "$PORT" EVAL "redis.call('del', KEYS[1]); redis.call('hset', KEYS[1], 'mode', 'write', ARGV[1], 1);
  redis.call('pexpire', KEYS[1], 60000); redis.call('publish', KEYS[2], '0')" 2 kc 'redisson_lock__channel:{kc}' \
  00000000-0000-4000-8000-000000000001:1:write >/dev/null
# a look after the message (it finds the write lock), then the write lock's release
until_true 30 pttls_gt "$p0" || fail "no look after the reentrant lock's message"
redis-cli -p "$PORT" EVAL "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], '0')" 2 kc 'redisson_rwlock:{kc}' >/dev/null
await "$w5" 20
[ "$RC" = 0 ] && pass "kind-change waiter: free after the write lock's release" ||
  fail "kind-change waiter exit $RC: $(cat "$T/w5.out" "$T/w5.err")"

# Not a lock.
redis-cli -p "$PORT" RPUSH list-key a >/dev/null
expect 65 "wait on a list" R wait list-key
contains "$T/err" "list-key is not a lock (holds a list)" "not a lock message"
redis-cli -p "$PORT" SET sem 3 >/dev/null
expect 65 "wait on a semaphore" R wait sem
contains "$T/err" "semaphore or count-down latch, count 3" "semaphore named"
finish
