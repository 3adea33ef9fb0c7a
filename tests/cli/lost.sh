#!/usr/bin/env bash
# tests/cli/lost.sh -- a lock lost while `rlock exec` runs its command: the
# command gets SIGTERM and rlock exits 76 (and a watchdog-renewed lock is not
# lost while its command outlives one lease). Lost by force-unlock (watchdog
# lease, noticed at the next renewal) and by a fixed lease running out.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
# The command: says it runs on fifo $1, records SIGTERM in file $2.
child='trap "echo term > $2; exit 143" TERM; echo > $1; while :; do sleep 0.05; done'

# Renewal keeps the lock: a command outliving its watchdog lease is not stopped.
expect 0 "watchdog renews a 1s lease for a 2.5s command" R exec --watchdog 1s keep -- sleep 2.5

mkfifo "$T/run1"
bg "$T/x1" "$RLOCK" -u "$URL" exec --watchdog 1s job -- sh -c "$child" sh "$T/run1" "$T/term1"
x1=$BG
ready "$T/run1"
expect 0 "force-unlock from outside" R unlock --force job
contains "$T/out" "was locked" "the lock was held by exec"
await "$x1" 20
[ "$RC" = 76 ] && pass "exec exits 76 after losing the lock" ||
  fail "exec after force-unlock: exit $RC, stderr $(cat "$T/x1.err")"
contains "$T/x1.err" "lock job lost while the command ran" "the loss is reported"
[ -s "$T/term1" ] && pass "the command got SIGTERM" || fail "the command did not get SIGTERM"

mkfifo "$T/run2"
bg "$T/x2" "$RLOCK" -u "$URL" exec --lease 1s job2 -- sh -c "$child" sh "$T/run2" "$T/term2"
x2=$BG
ready "$T/run2"
await "$x2" 20
[ "$RC" = 76 ] && pass "fixed lease ran out: exit 76" ||
  fail "exec with an expired lease: exit $RC, stderr $(cat "$T/x2.err")"
[ -s "$T/term2" ] && pass "the command got SIGTERM when the lease ran out" || fail "no SIGTERM on expiry"
finish
