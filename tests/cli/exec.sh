#!/usr/bin/env bash
# tests/cli/exec.sh -- `rlock exec`: runs the command and returns its status,
# releases the lock afterwards, excludes concurrent execs, times out (75) while another exec holds the
# lock, forwards SIGTERM to the command, and cancels a wait on SIGTERM.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
unlocked() { R status --json "$1" | grep -q '"locked":false'; }

expect 0 "exec runs the command" R exec job -- sh -c "echo ran > $T/ran"
[ -s "$T/ran" ] && pass "the command ran" || fail "the command did not run"
expect 3 "exec returns the command's status" R exec job -- sh -c 'exit 3'
expect 0 "exec without --" R exec job true
expect 137 "killed command: 128+9" R exec job -- sh -c 'kill -KILL $$'
expect 127 "command not found" R exec job -- /nonexistent/command
contains "$T/err" "/nonexistent/command" "the failed command is named"
unlocked job && pass "lock released after each exec" || fail "lock still held: $(R status job)"
expect 0 "exec with --lease and --wait" R exec --lease 10s --wait 1s job -- true

# Mutual exclusion: 4 concurrent loops of exec; mkdir fails if two overlap.
cs='mkdir "$1" || exit 9; sleep 0.02; rmdir "$1"'
loop() { for _ in 1 2 3 4 5; do R exec mutex -- sh -c "$cs" sh "$T/cs" || return $?; done; }
pids=()
for i in 1 2 3 4; do loop >"$T/loop$i.out" 2>&1 & pids+=($!); BG_PIDS+=($!); done
overlap=0
for p in "${pids[@]}"; do await "$p" 60; [ "$RC" = 0 ] || overlap=$RC; done
[ "$overlap" = 0 ] && pass "20 concurrent execs never overlapped" || fail "concurrent execs: exit $overlap"

# Another exec holds the lock: a bounded wait times out.
mkfifo "$T/held"
bg "$T/holder" "$RLOCK" -u "$URL" exec job -- sh -c "echo > $T/held; exec sleep 60"
holder=$BG
ready "$T/held"
expect 75 "wait times out while held" R exec --wait 300ms job -- true
contains "$T/err" "timed out waiting for job" "timeout message"
[ "$(grep -o "timed out waiting" "$T/err" | wc -l)" = 1 ] && pass "the timeout is said once" ||
  fail "repeated words: $(cat "$T/err")"
expect 75 "single attempt (--wait 0) fails while held" R exec --wait 0 job -- true

# A waiter (waits forever) is interrupted by SIGTERM once it waits.
bg "$T/waiter" "$RLOCK" -u "$URL" exec job -- true
waiter=$BG
waiting() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB 'redisson_lock__channel:{job}' | tail -n 1)" -ge 1 ]; }
until_true 10 waiting || fail "the waiter never subscribed to the lock's channel"
kill -TERM "$waiter"
await "$waiter"
[ "$RC" = 143 ] && pass "SIGTERM while waiting: exit 143" || fail "SIGTERM while waiting: exit $RC"
contains "$T/waiter.err" "interrupted" "interrupted wait is reported"

# SIGTERM to the holder goes to its command; the lock is released after it.
kill -TERM "$holder"
await "$holder"
[ "$RC" = 143 ] && pass "SIGTERM forwarded: exit 143 (the command's status)" || \
  fail "holder after SIGTERM: exit $RC, stderr $(cat "$T/holder.err")"
unlocked job && pass "lock released after the forwarded signal" || fail "lock still held"
# Redis dies while exec waits for a held lock (issue 23: "cannot connect to
# Redis (not connected to Redis (cannot connect to Redis))"): the message
# names the address and the cause.
start_redis
redis-cli -p "$PORT" HSET wdown other:1 1 >/dev/null
redis-cli -p "$PORT" PEXPIRE wdown 60000 >/dev/null
bg "$T/wdown" "$RLOCK" -u "$URL" exec --wait 1s wdown -- true
wdown=$BG
waiting() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB "redisson_lock__channel:{wdown}" | tail -1)" = 1 ]; }
until_true 30 waiting || fail "the waiter never subscribed"
kill -KILL "${REDIS_PIDS[-1]}"
await "$wdown" 30
[ "$RC" = 69 ] && pass "Redis gone while waiting: exit 69" || fail "Redis gone while waiting: exit $RC"
contains "$T/wdown.err" "127.0.0.1:$PORT" "the message names the address"
contains "$T/wdown.err" "Connection refused" "the message names the cause"

# What people reach for (issue 23): durations with fractions and long units,
# flock's -E for a busy lock, and the lock in CMD's environment (no password).
start_redis --requirepass envpw
PR() { "$RLOCK" -u "redis://:envpw@127.0.0.1:$PORT" "$@"; }
rc_() { redis-cli -a envpw --no-auth-warning -p "$PORT" "$@"; }
expect 0 "--wait 1.5s --lease 1h" PR exec --wait 1.5s --lease 1h dur -- sh -c "redis-cli -a envpw --no-auth-warning -p $PORT PTTL dur > $T/pttl"
pttl=$(cat "$T/pttl")
[ "$pttl" -gt 3500000 ] && [ "$pttl" -le 3600000 ] && pass "--lease 1h is 3600000 ms (PTTL $pttl)" || fail "--lease 1h: PTTL $pttl"
expect 0 "--lease 1d" PR exec --lease 1d dur -- sh -c "redis-cli -a envpw --no-auth-warning -p $PORT PTTL dur > $T/pttl"
pttl=$(cat "$T/pttl")
[ "$pttl" -gt 86300000 ] && [ "$pttl" -le 86400000 ] && pass "--lease 1d (PTTL $pttl)" || fail "--lease 1d: PTTL $pttl"
RLOCK_TOKEN=from-outside RLOCK_PERMIT_ID=from-outside PR exec envj -- sh -c 'printf "%s|%s|%s|%s" "$RLOCK_NAME" "$RLOCK_NODE" "${RLOCK_TOKEN-unset}" "${RLOCK_PERMIT_ID-unset}"' >"$T/env"
[ "$(cat "$T/env")" = "envj|127.0.0.1:$PORT|unset|unset" ] && pass "RLOCK_NAME, RLOCK_NODE set; a stale RLOCK_TOKEN, RLOCK_PERMIT_ID removed" ||
  fail "environment: $(cat "$T/env")"
PR exec enva envb -- sh -c 'printf "%s|%s" "$RLOCK_NAME" "${RLOCK_NODE-unset}"' >"$T/env"
[ "$(cat "$T/env")" = "enva envb|unset" ] && pass "several NAMEs: RLOCK_NAME lists them, no RLOCK_NODE" ||
  fail "MultiLock environment: $(cat "$T/env")"
PR exec --fenced envf -- sh -c 'printf "%s" "$RLOCK_TOKEN"' >"$T/env"
[ "$(cat "$T/env")" = 1 ] && pass "--fenced: RLOCK_TOKEN" || fail "--fenced token: $(cat "$T/env")"
PR exec envp -- env >"$T/env"
grep -q envpw "$T/env" && fail "the password reached CMD's environment" || pass "no password in CMD's environment"
mkfifo "$T/eheld"
bg "$T/eholder" "$RLOCK" -u "redis://:envpw@127.0.0.1:$PORT" exec busyj -- sh -c "echo > $T/eheld; exec sleep 30"
eholder=$BG
ready "$T/eheld"
expect 75 "busy, --wait ran out: 75" PR exec --wait 100ms busyj -- true
expect 9 "-E 9: busy exits 9" PR exec -E 9 --wait 100ms busyj -- true
expect 0 "-E 0" PR exec --conflict-exit-code 0 --wait 0 busyj -- true
expect 0 "status of a held lock: 0" PR status busyj
expect 1 "status of a free lock: 1" PR status nobody
kill -TERM "$eholder"
await "$eholder"
expect 1 "status once released: 1" PR status busyj
finish
