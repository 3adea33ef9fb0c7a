#!/usr/bin/env bash
# tests/cli/rwlock.sh -- the read-write lock through the CLI: `exec --read`
# (Redisson's hash in read mode while CMD runs; two readers inside at once),
# `exec --write` (busy while a reader holds: 75), `status --read`, `unlock
# --force --read/--write` (only in that mode), and the option checks.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
rc() { redis-cli -p "$PORT" "$@"; }

expect 0 "exec --read runs the command" R exec --read rwj -- sh -c \
  "redis-cli -p $PORT HGET rwj mode > $T/mode"
contains "$T/mode" "read" "the hash is in read mode while CMD runs"
[ "$(rc EXISTS rwj)" = 0 ] && pass "released after the command" || fail "rwj still exists"
expect 0 "exec --write runs the command" R exec --write rwj -- sh -c \
  "redis-cli -p $PORT HGET rwj mode > $T/mode"
contains "$T/mode" "write" "the hash is in write mode while CMD runs"

# Two readers at once: the first waits inside until the second is inside too.
bg "$T/r1" "$RLOCK" -u "$URL" exec --read --wait 20s rwj -- sh -c \
  "touch $T/in1; i=0; while [ ! -e $T/in2 ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i+1)); done; [ -e $T/in2 ]"
r1=$BG
in1() { [ -e "$T/in1" ]; }
until_true 20 in1 || fail "the first reader never got in"
expect 0 "a second reader gets in while the first holds" R exec --read --wait 5s rwj -- touch "$T/in2"
await "$r1" 20
[ "$RC" = 0 ] && pass "both readers were inside at once" || fail "reader 1: exit $RC, $(cat "$T/r1.err")"

# A writer waits while a reader holds; status and force unlock by mode.
bg "$T/r3" "$RLOCK" -u "$URL" exec --read rwj -- sh -c "touch $T/in3; sleep 30"
r3=$BG
in3() { [ -e "$T/in3" ]; }
until_true 20 in3 || fail "the reader never got in"
expect 75 "exec --write times out while a reader holds" R exec --write --wait 300ms rwj -- true
expect 0 "status --read --json" R status --read --json rwj
contains "$T/out" '"locked":true' "status --read sees the reader"
expect 0 "unlock --force --write leaves read mode alone" R unlock --force --write rwj
contains "$T/out" "was not locked" "write force unlock: not in write mode"
expect 0 "unlock --force --read breaks the reads" R unlock --force --read rwj
contains "$T/out" "unlocked rwj" "read force unlock"
await "$r3" 30
[ "$RC" = 76 ] && pass "the reader learnt its hold was lost (76)" || fail "reader 3: exit $RC, $(cat "$T/r3.err")"

expect 64 "--simple and --read exclude each other" R exec --simple --read rwj -- true
expect 64 "--redlock takes no --write" R exec --redlock --write rwj -- true
expect 64 "a name with an empty brace tag is refused" R exec --read '{}x' -- true
finish
