#!/usr/bin/env bash
# tests/cli/family.sh -- the lock family through `rlock exec`: --simple (the
# SET NX PX lock: a string key holding the owner id, compare-and-delete
# release, waiters that poll), and its mutual exclusion with itself.
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
finish
