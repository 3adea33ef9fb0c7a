#!/usr/bin/env bash
# tests/cli/signals.sh -- `rlock exec` never leaves its command running
# outside the lock when rlock itself is told to stop. Every signal that would
# kill rlock (not only SIGINT/SIGTERM/SIGHUP: SIGQUIT, SIGUSR1, SIGUSR2,
# SIGALRM, real-time signals...) is forwarded to the command's group; rlock
# waits for the group, releases the lock and exits with the command's status.
# A command that ignores the SIGTERM of a lost lock gets SIGKILL after
# --kill-after. And if rlock dies anyway (SIGKILL), the command's whole group is killed
# with it instead of running on after the lease, when another process may
# hold the lock.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
locked() { R status --json "$1" | grep -q '"locked":true'; }
# Dead: no such process, or a zombie (its new parent may reap it late).
gone() { ! [ -e "/proc/$1/stat" ] || grep -q ') Z' "/proc/$1/stat" 2>/dev/null; }

# CMD: a shell (pid in $1.pid) with a grandchild (pid in $1.gc); says it runs on fifo $1.
start_job() {
  local f=$1 name=$2
  shift 2
  mkfifo "$f"
  bg "$f" "$RLOCK" -u "$URL" exec "$@" "$name" -- \
    sh -c "echo \$\$ > $f.pid; sleep 120 & echo \$! > $f.gc; echo > $f; wait"
  RL=$BG
  ready "$f" || return 1
  CMD_PID=$(cat "$f.pid") GC_PID=$(cat "$f.gc")
  BG_PIDS+=("$CMD_PID" "$GC_PID")
}

# Signals that kill a process by default: forwarded, then the lock is released.
# (Not SIGINT/SIGQUIT: a script starts its background jobs with them ignored.)
for sig in USR1 USR2 ALRM RTMIN+3; do
  num=$(kill -l "$sig" 2>/dev/null) || num=$(($(kill -l RTMIN) + 3))
  start_job "$T/f-$sig" "job-$sig" || continue
  kill -s "$sig" "$RL" 2>/dev/null || kill -"$num" "$RL"
  await "$RL" 30
  [ "$RC" = $((128 + num)) ] && pass "SIG$sig: exit $RC (the command died of it)" ||
    fail "SIG$sig: exit $RC, wanted $((128 + num)); stderr: $(cat "$T/f-$sig.err")"
  until_true 10 gone "$GC_PID" && pass "SIG$sig reached the command's grandchild" ||
    fail "SIG$sig: the grandchild $GC_PID runs on outside the lock"
  locked "job-$sig" && fail "SIG$sig: job-$sig is still locked after rlock exited" ||
    pass "SIG$sig: the lock was released"
done

# A signal while waiting for the lock ends the wait (exit 128+N, a message).
mkfifo "$T/held"
bg "$T/holder" "$RLOCK" -u "$URL" exec held -- sh -c "echo > $T/held; exec sleep 120"
holder=$BG
ready "$T/held"
bg "$T/waiter" "$RLOCK" -u "$URL" exec held -- true
waiter=$BG
waiting() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB 'redisson_lock__channel:{held}' | tail -n 1)" -ge 1 ]; }
until_true 10 waiting || fail "the waiter never subscribed"
kill -USR1 "$waiter"
await "$waiter" 30
[ "$RC" = 138 ] && pass "SIGUSR1 while waiting: exit 138" || fail "SIGUSR1 while waiting: exit $RC"
contains "$T/waiter.err" "interrupted by signal 10" "SIGUSR1 while waiting is reported"
kill -TERM "$holder"
await "$holder" 30

# A lost lock while the command ignores SIGTERM: SIGKILL follows after
# --kill-after (the lock is gone: another process may be inside already).
mkfifo "$T/ign"
bg "$T/ign" "$RLOCK" -u "$URL" exec --lease 1s --kill-after 1s ignores -- \
  sh -c "trap '' TERM; echo \$\$ > $T/ign.pid; echo > $T/ign; while :; do sleep 0.05; done"
ign=$BG
if ready "$T/ign"; then
  ign_cmd=$(cat "$T/ign.pid")
  BG_PIDS+=("$ign_cmd")
  await "$ign" 30 # lease 1 s + kill-after 1 s, with a wide margin
  [ "$RC" = 76 ] && pass "lost lock, SIGTERM ignored: exit 76" ||
    fail "lost lock, SIGTERM ignored: exit $RC; stderr: $(cat "$T/ign.err")"
  gone "$ign_cmd" && pass "lost lock, SIGTERM ignored: the command got SIGKILL" ||
    fail "lost lock, SIGTERM ignored: the command $ign_cmd runs on outside the lock"
  contains "$T/ign.err" "lock ignores lost while the command ran: fixed lease ran out" "the loss says why"
fi
expect 64 "--kill-after takes a duration" "$RLOCK" -u "$URL" exec --kill-after x job -- true
expect 64 "--kill-after: at most 365 days" "$RLOCK" -u "$URL" exec --kill-after 9999999999s job -- true

# rlock killed outright: its command's whole group goes with it.
start_job "$T/k" killed --watchdog 3s
kill -KILL "$RL"
await "$RL" 30
until_true 10 gone "$CMD_PID" && pass "SIGKILL of rlock: the command was killed too" ||
  fail "SIGKILL of rlock: the command $CMD_PID runs on outside the lock"
until_true 10 gone "$GC_PID" && pass "SIGKILL of rlock: the grandchild was killed too" ||
  fail "SIGKILL of rlock: the grandchild $GC_PID runs on outside the lock"
finish
