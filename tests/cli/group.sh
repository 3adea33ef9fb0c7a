#!/usr/bin/env bash
# tests/cli/group.sh -- `rlock exec` runs CMD in its own process group: a
# lost lock and a forwarded signal stop CMD's children too (a shell's
# grandchild), and the lock is released only once every process of the group
# has ended. On a terminal (tests/cli/pty_exec.py) CMD's group is the
# foreground group: Ctrl-C reaches it, and Ctrl-Z stops CMD and rlock (the
# shell gets its prompt back) until 'fg'. A member of the group that is not
# rlock's child (its parent left the group) is waited for too.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
locked() { R status --json "$1" | grep -q '"locked":true'; }
gone() { ! kill -0 "$1" 2>/dev/null; }

# CMD leads a group of its own.
expect 0 "exec" R exec job -- sh -c "echo \$\$ > $T/pid; ps -o pgid= -p \$\$ | tr -d ' ' > $T/pgid"
[ "$(cat "$T/pgid")" = "$(cat "$T/pid")" ] && pass "CMD leads its own process group" ||
  fail "CMD's group $(cat "$T/pgid") is not its pid $(cat "$T/pid")"

# The lease runs out while a grandchild runs: the whole group gets SIGTERM.
mkfifo "$T/run1"
bg "$T/x1" "$RLOCK" -u "$URL" exec --lease 1s lost-job -- \
  sh -c "sleep 120 & echo \$! > $T/gc1; echo > $T/run1; wait"
x1=$BG
ready "$T/run1"
gc1=$(cat "$T/gc1")
BG_PIDS+=("$gc1")
await "$x1" 30
[ "$RC" = 76 ] && pass "lost lock: exit 76" || fail "lost lock: exit $RC, $(cat "$T/x1.err")"
gone "$gc1" && pass "lost lock: the grandchild was stopped before rlock exited" ||
  fail "lost lock: the grandchild $gc1 still runs outside the lock"

# A signal to rlock reaches the grandchild.
mkfifo "$T/run2"
bg "$T/x2" "$RLOCK" -u "$URL" exec sig-job -- sh -c "sleep 120 & echo \$! > $T/gc2; echo > $T/run2; wait"
x2=$BG
ready "$T/run2"
gc2=$(cat "$T/gc2")
BG_PIDS+=("$gc2")
kill -TERM "$x2"
await "$x2" 30
[ "$RC" = 143 ] && pass "forwarded SIGTERM: exit 143" || fail "forwarded SIGTERM: exit $RC"
gone "$gc2" && pass "forwarded SIGTERM reached the grandchild" || fail "the grandchild $gc2 survived SIGTERM"
locked sig-job && fail "sig-job still locked" || pass "sig-job released"

# CMD exits but left a process in its group: the lock is held until it ends.
mkfifo "$T/run3" "$T/go3"
bg "$T/x3" "$RLOCK" -u "$URL" exec bg-job -- \
  sh -c "(read x < $T/go3; echo done > $T/done3) & echo \$\$ > $T/run3; exit 3"
x3=$BG
leader=$(timeout 30 cat "$T/run3")
until_true 30 gone "$leader" || fail "CMD $leader did not end"
locked bg-job && pass "the lock is held while CMD's background process runs" ||
  fail "the lock was released while CMD's background process still ran"
kill -0 "$x3" 2>/dev/null && pass "rlock waits for the group" || fail "rlock exited before its group ended"
echo > "$T/go3"
await "$x3" 30
[ "$RC" = 3 ] && pass "exit status is CMD's (3)" || fail "exit $RC, wanted CMD's 3"
[ -s "$T/done3" ] && pass "the background process finished before rlock exited" ||
  fail "rlock exited before the background process finished"
locked bg-job && fail "bg-job still locked" || pass "bg-job released after the group ended"

# A member whose parent left the group (A forks B, then A moves to a group of
# its own; CMD exits): B is not rlock's child, but the lock is held until B ends.
mkfifo "$T/go4" "$T/run4"
cat >"$T/leave.py" <<EOF
import os
if os.fork() == 0:                      # A
    if os.fork() == 0:                  # B: stays in CMD's group
        open("$T/b4", "w").write("%d %d" % (os.getpid(), os.getpgrp()))
        open("$T/run4", "w").close()
        open("$T/go4").read()
        open("$T/done4", "w").write("done")
        os._exit(0)
    os.setpgid(0, 0)                    # A leaves the group
    os.wait()
    os._exit(0)
EOF
bg "$T/x4" "$RLOCK" -u "$URL" exec stray-job -- python3 "$T/leave.py"
x4=$BG
ready "$T/run4"
read -r b4 leader4 <"$T/b4"
BG_PIDS+=("$b4")
until_true 30 gone "$leader4" || fail "CMD $leader4 did not end"
kill -0 "$x4" 2>/dev/null && pass "rlock waits for a member that is not its child" ||
  fail "rlock exited while $b4 of CMD's group still ran"
locked stray-job && pass "the lock is held while that member runs" ||
  fail "the lock was released while $b4 of CMD's group still ran"
echo > "$T/go4"
await "$x4" 30
[ -s "$T/done4" ] && pass "the member finished before rlock exited" || fail "rlock exited before the member finished"
locked stray-job && fail "stray-job still locked" || pass "stray-job released after the member ended"

# A member leaves the group (setsid) after CMD ended, while rlock waits for
# the group: its leaving ends the group, and rlock returns although that
# process runs on (issue 23: rlock waited in waitid(P_PGID) forever, renewing
# the lock). rlock is waiting (asleep, CMD reaped) before the member leaves.
mkfifo "$T/go5" "$T/run5"
printf '%s\n' "sh -c 'echo \$\$ > $T/c5; read x < $T/go5; exec setsid sleep 300' &" \
  "echo \$\$ > $T/run5" "exit 0" >"$T/leave5.sh"
bg "$T/x5" "$RLOCK" -u "$URL" exec setsid-job -- sh "$T/leave5.sh"
x5=$BG
leader5=$(timeout 30 cat "$T/run5")
until_true 30 gone "$leader5" || fail "CMD $leader5 did not end"
until_true 30 test -s "$T/c5" || fail "no pid in $T/c5"
c5=$(cat "$T/c5")
BG_PIDS+=("$c5")
asleep() { grep -q '^State:.*S' "/proc/$1/status"; }
until_true 30 asleep "$x5" || fail "rlock $x5 never waited"
locked setsid-job && pass "the lock is held while a member of CMD's group runs" ||
  fail "setsid-job was released while $c5 was still in CMD's group"
echo >"$T/go5"
await "$x5" 10
[ "$RC" = 0 ] && pass "a member that left the group (setsid) does not keep exec waiting" ||
  fail "exec with a member that left the group: exit $RC, $(cat "$T/x5.err")"
kill -0 "$c5" 2>/dev/null && pass "the member that left the group runs on" || fail "the setsid process $c5 was killed"
locked setsid-job && fail "setsid-job still locked" || pass "setsid-job released"
kill -KILL "$c5" 2>/dev/null
# The command of the issue, a few times (it hung in 2 of 5 runs).
for i in 1 2 3 4 5; do
  bg "$T/x6" "$RLOCK" -u "$URL" exec bgs1 -- sh -c 'setsid sleep 1 & exit 0'
  await "$BG" 20
  [ "$RC" = 0 ] || fail "exec bgs1 -- sh -c 'setsid sleep 1 & exit 0' (run $i): exit $RC"
done
pass "exec bgs1 -- sh -c 'setsid sleep 1 & exit 0' returned 5 times"

# On a terminal.
if python3 "$(dirname "$0")/pty_exec.py" "$RLOCK" "$URL" "$T" >"$T/pty.out" 2>&1; then
  pass "terminal: $(tr '\n' ' ' <"$T/pty.out")"
else
  fail "terminal: $(cat "$T/pty.out")"
fi
finish
