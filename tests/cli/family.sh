#!/usr/bin/env bash
# tests/cli/family.sh -- the lock family through `rlock exec`: --simple (the
# SET NX PX lock: a string key holding the owner id, compare-and-delete
# release, waiters that poll), and its mutual exclusion with itself; several
# NAMEs (a MultiLock: all or nothing); --redlock over three servers (one
# killed: still held; two killed: exit 69; a majority held elsewhere: 75).
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
rc() { redis-cli -p "$PORT" "$@"; }

# --simple: the key is a string with the holder's token and a TTL while CMD runs.
expect 0 "exec --simple runs the command" R exec --simple sjob -- sh -c \
  "redis-cli -p $PORT TYPE sjob > $T/type; redis-cli -p $PORT PTTL sjob > $T/pttl"
contains "$T/type" "string" "the simple lock is a string key"
[ "$(cat "$T/pttl")" -gt 0 ] && pass "with a TTL" || fail "PTTL $(cat "$T/pttl")"
[ "$(rc EXISTS sjob)" = 0 ] && pass "released after the command" || fail "sjob still exists"
expect 3 "exec --simple returns the command's status" R exec --simple sjob -- sh -c 'exit 3'

# Held by another program's token (redis-py, node-redlock...): busy, untouched.
rc SET sjob their-token PX 60000 >/dev/null
expect 75 "--simple --wait times out while another token holds it" R exec --simple --wait 300ms sjob -- true
contains "$T/err" "timed out waiting for sjob" "timeout message"
[ "$(rc GET sjob)" = their-token ] && pass "the other token is left as it is" || fail "GET sjob: $(rc GET sjob)"
# A waiter polls: the other program's release (a plain DEL, no message) lets it in.
scripts() { rc INFO commandstats | awk -F'[=,]' '/^cmdstat_eval(sha)?:/ {n += $2} END {print n + 0}'; }
before=$(scripts)
bg "$T/waiter" "$RLOCK" -u "$URL" exec --simple --wait 30s sjob -- true
waiter=$BG
tried_twice() { [ "$(scripts)" -ge $((before + 2)) ]; }
until_true 20 tried_twice || fail "the waiter never tried twice"
rc DEL sjob >/dev/null
await "$waiter" 25
[ "$RC" = 0 ] && pass "the waiter got the lock after a release without a message" || \
  fail "waiter: exit $RC, $(cat "$T/waiter.err")"

# Mutual exclusion: 4 concurrent loops of exec --simple; mkdir fails if two overlap.
cs='mkdir "$1" || exit 9; sleep 0.02; rmdir "$1"'
loop() { for _ in 1 2 3 4 5; do R exec --simple smutex -- sh -c "$cs" sh "$T/cs" || return $?; done; }
pids=()
for i in 1 2 3 4; do loop >"$T/loop$i.out" 2>&1 & pids+=($!); BG_PIDS+=($!); done
overlap=0
for p in "${pids[@]}"; do await "$p" 60; [ "$RC" = 0 ] || overlap=$RC; done
[ "$overlap" = 0 ] && pass "20 concurrent --simple execs never overlapped" || fail "concurrent execs: exit $overlap"

# status and unlock --force of a simple lock
rc SET sjob their-token PX 60000 >/dev/null
expect 0 "status --simple" R status --json --simple sjob
contains "$T/out" '"owner":"their-token","count":1' "status --simple shows the token"
expect 0 "unlock --force --simple" R unlock --force --simple sjob
[ "$(rc EXISTS sjob)" = 0 ] && pass "unlock --force --simple deleted it" || fail "sjob still exists"

# No NAME before the "--": a usage error, for every kind (--redlock took "--" as the NAME).
for k in "" --simple --redlock; do
  expect 64 "exec $k without a NAME is a usage error" R exec $k -- -- true
  contains "$T/err" "missing the lock NAME" "exec $k: the missing NAME is named"
done

# Several NAMEs: a MultiLock. Both held while CMD runs, both released after.
expect 0 "exec NAME1 NAME2 -- CMD" R exec ma mb -- sh -c "redis-cli -p $PORT EXISTS ma mb > $T/both"
[ "$(cat "$T/both")" = 2 ] && pass "every member held while CMD runs" || fail "EXISTS ma mb: $(cat "$T/both")"
[ "$(rc EXISTS ma mb)" = 0 ] && pass "every member released after" || fail "members left: $(rc EXISTS ma mb)"
# A member held elsewhere: the whole acquire fails and leaves nothing behind.
rc HSET mb 00000000-0000-0000-0000-000000000000:1 1 >/dev/null
expect 75 "a member held elsewhere: timed out" R exec --wait 300ms ma mb mc -- true
contains "$T/err" "mb" "the busy member is named"
[ "$(rc EXISTS ma mc)" = 0 ] && pass "nothing left behind" || fail "left behind: $(rc EXISTS ma mc)"
rc DEL mb >/dev/null
# A fixed lease with no --wait: one lease for all, set once every member is held.
expect 0 "--lease with several NAMEs, no --wait" R exec --lease 5s ma mb -- sh -c "redis-cli -p $PORT PTTL ma > $T/pttl; redis-cli -p $PORT PTTL mb >> $T/pttl"
leases_ok() { set -- $(cat "$T/pttl"); [ $# -eq 2 ] || return 1; for p; do [ "$p" -gt 0 ] && [ "$p" -le 5000 ] || return 1; done; }
leases_ok && pass "every member's TTL is at most the lease" || fail "PTTLs: $(cat "$T/pttl" | tr '\n' ' ')"
# A member lost while CMD runs: the whole lock is lost (76).
bg "$T/mlost" "$RLOCK" -u "$URL" exec --watchdog 600ms ma mb -- sleep 30
mlost=$BG
both_held() { [ "$(rc EXISTS ma mb)" = 2 ]; }
until_true 20 both_held || fail "the MultiLock was never held"
rc DEL mb >/dev/null
await "$mlost" 30
[ "$RC" = 76 ] && pass "a lost member: exit 76" || fail "lost member: exit $RC, $(cat "$T/mlost.err")"
contains "$T/mlost.err" "lost while the command ran" "the loss is reported"
contains "$T/mlost.err" "lock mb (of the MultiLock ma mb) lost while the command ran: " "the lost member and the reason are named"
[ "$(rc EXISTS ma)" = 0 ] && pass "the other member released" || fail "ma left held: $(rc PTTL ma) ms"

# --redlock over three masters.
U1=$URL P1=$PORT PID1=${REDIS_PIDS[-1]}
start_redis
U2=$URL P2=$PORT PID2=${REDIS_PIDS[-1]}
start_redis
U3=$URL P3=$PORT
RL() { "$RLOCK" -u "$U1" -u "$U2" -u "$U3" "$@"; }
expect 0 "exec --redlock" RL exec --redlock rl -- sh -c \
  "for p in $P1 $P2 $P3; do redis-cli -p \$p EXISTS rl; done > $T/rl"
[ "$(grep -c 1 "$T/rl")" = 3 ] && pass "held on all three masters" || fail "held on: $(cat "$T/rl")"
expect 0 "exec --redlock --simple" RL exec --redlock --simple rl -- sh -c "redis-cli -p $P2 TYPE rl > $T/type"
contains "$T/type" "string" "--redlock --simple: a string on each node"
# A majority held by another program: busy (75); status --redlock shows each node.
redis-cli -p "$P1" SET rl their-token PX 60000 >/dev/null
redis-cli -p "$P2" SET rl their-token PX 60000 >/dev/null
expect 0 "status --redlock --simple --json" RL status --redlock --simple --json rl
contains "$T/out" '"locked_on":2,"majority":2' "status --redlock counts the masters that hold it"
contains "$T/out" '"holders":[{"owner":"their-token","count":1}]' "status --redlock shows a node's holder"
expect 75 "--redlock: a majority held elsewhere" RL exec --redlock --simple --wait 300ms rl -- true
redis-cli -p "$P1" DEL rl >/dev/null
redis-cli -p "$P2" DEL rl >/dev/null
# The majority lost while CMD runs (2 of 3 deleted): 76.
# CMD says when it runs (the RedLock is held on a majority then: on a loaded
# machine a round with a 600 ms lease, 6 ms per node, may take many tries);
# deleting the key on 2 of the 3 masters leaves at most one.
mkfifo "$T/rlheld"
bg "$T/rlost" "$RLOCK" -u "$U1" -u "$U2" -u "$U3" exec --redlock --watchdog 600ms rl -- sh -c "echo > $T/rlheld; exec sleep 30"
rlost=$BG
ready "$T/rlheld" 60 || fail "the RedLock's command never ran"
held_on() { for p in "$P1" "$P2" "$P3"; do redis-cli -p "$p" EXISTS rl; done | grep -c 1; }
[ "$(held_on)" -ge 2 ] && pass "the RedLock is held on a majority while CMD runs" || fail "held on $(held_on) of 3 while CMD runs"
redis-cli -p "$P1" DEL rl >/dev/null
redis-cli -p "$P2" DEL rl >/dev/null
await "$rlost" 30
[ "$RC" = 76 ] && pass "--redlock: majority lost, exit 76" || fail "redlock lost: exit $RC, $(cat "$T/rlost.err")"
# Busy on a majority beyond the connect timeout (3 s): without --wait the
# waiter waits (issue 23: only unreachable masters end the wait).
redis-cli -p "$P1" SET rl their-token PX 4500 >/dev/null
redis-cli -p "$P2" SET rl their-token PX 4500 >/dev/null
expect 0 "--redlock without --wait: a busy majority is waited for" timeout 60 "$RLOCK" -u "$U1" -u "$U2" -u "$U3" \
  exec --redlock --simple rl -- true
kill -KILL "$PID1"
expect 0 "--redlock with one of three masters dead" RL exec --redlock --wait 2s rl -- true
kill -KILL "$PID2"
expect 69 "--redlock with two of three masters dead" RL exec --redlock --wait 500ms rl -- true
contains "$T/err" "unreachable" "the unreachable nodes are reported"
# Without --wait: said at once, then exit 69 after the connect timeout (issue
# 23: waited forever, silently).
expect 69 "--redlock without --wait, two of three masters dead" timeout 30 "$RLOCK" -u "$U1" -u "$U2" -u "$U3" \
  exec --redlock rl -- true
contains "$T/err" "no majority of the RedLock's masters can be reached" "the unreachable majority is reported"
[ "$(wc -l <"$T/err")" = 2 ] && pass "reported when the wait began, and at the end" || fail "stderr: $(cat "$T/err")"
expect 1 "status --redlock with two masters dead (not held on a majority: 1)" RL status --redlock rl
contains "$T/out" "node 1 redis://127.0.0.1:$P1: cannot read it" "a dead master is shown as such"
contains "$T/out" "locked on 0 of 3 masters" "status --redlock summary"
grep -q "ttl -2" "$T/out" && fail "status --redlock shows 'ttl -2 ms' for a free node" || pass "no 'ttl -2' for a free node"
# --fair: Redisson's RFairLock. Waiters queue in redisson_lock_queue:{NAME} and
# run in the order they queued; a waiter that gives up leaves the queue.
expect 0 "exec --fair runs the command" R exec --fair fjob -- sh -c "redis-cli -p $PORT TYPE fjob > $T/ftype"
contains "$T/ftype" "hash" "the fair lock is Redisson's hash"
bg "$T/fholder" "$RLOCK" -u "$URL" exec --fair fjob -- sh -c "until [ -e $T/fgo ]; do sleep 0.05; done"
fholder=$BG
held() { [ "$(rc EXISTS fjob)" = 1 ]; }
until_true 20 held || fail "the fair holder never held fjob"
queued() { [ "$(rc LLEN 'redisson_lock_queue:{fjob}')" = "$1" ]; }
expect 75 "--fair --wait times out while held" R exec --fair --wait 200ms fjob -- true
until_true 20 queued 0 || fail "the timed-out waiter left its entry"
bg "$T/fa" "$RLOCK" -u "$URL" exec --fair --wait 30s fjob -- sh -c "echo a >> $T/forder"
fa=$BG
until_true 20 queued 1 || fail "waiter a never queued"
bg "$T/fb" "$RLOCK" -u "$URL" exec --fair --wait 30s fjob -- sh -c "echo b >> $T/forder"
fb=$BG
until_true 20 queued 2 || fail "waiter b never queued"
expect 0 "status --fair shows the queue" R status --fair fjob
contains "$T/out" "waiter 2 " "status --fair lists both waiters"
contains "$T/out" " deadline in " "status --fair shows each waiter's deadline"
expect 0 "status --fair --json" R status --fair --json fjob
contains "$T/out" '"queue":[{"owner":' "status --fair --json has the queue"
touch "$T/fgo"
await "$fholder" 30
await "$fa" 30
await "$fb" 30
[ "$(tr -d '\n' < "$T/forder")" = ab ] && pass "--fair: waiters ran in the order they queued" || \
  fail "order: $(cat "$T/forder")"
[ "$(rc EXISTS 'redisson_lock_queue:{fjob}' 'redisson_lock_timeout:{fjob}')" = 0 ] && \
  pass "--fair: nothing left queued" || fail "queue keys left"
expect 64 "--fair with --simple is refused" R exec --fair --simple fjob -- true
# unlock --force --fair: deletes the hash and wakes the queue's head at once
bg "$T/fh2" "$RLOCK" -u "$URL" exec --fair --lease 60s fjob -- sh -c "sleep 30"
fh2=$BG
until_true 20 held || fail "the second fair holder never held fjob"
bg "$T/fw2" "$RLOCK" -u "$URL" exec --fair --wait 20s fjob -- true
fw2=$BG
until_true 20 queued 1 || fail "the waiter never queued"
expect 0 "unlock --force --fair" R unlock --force --fair fjob
contains "$T/out" "unlocked fjob" "unlock --force --fair says so"
await "$fw2" 10
[ "$RC" = 0 ] && pass "--fair: the head got the lock after unlock --force" || fail "waiter: exit $RC"
kill -TERM "$fh2" 2>/dev/null
await "$fh2" 30
finish
