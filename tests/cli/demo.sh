#!/usr/bin/env bash
# tests/cli/demo.sh -- `rlock demo` with a small stock passes (exit 0, PASS,
# every unit sold once) and reports its figures.
. "$(dirname "$0")/common.sh"
start_redis
expect 0 "demo passes" "$RLOCK" -u "$URL" demo --workers 4 --stock 200
contains "$T/out" "sold 200 of 200, final stock 0: PASS" "no oversell, no lost sale"
contains "$T/out" "lock acquisitions" "throughput is reported"
contains "$T/out" "p99" "wait percentiles are reported"
[ "$(redis-cli -p "$PORT" GET "{rlock:demo}:stock")" = 0 ] && pass "stock is 0 in Redis" || fail "stock not 0"
expect 0 "demo with one worker" "$RLOCK" -u "$URL" demo --workers 1 --stock 20
contains "$T/out" "PASS" "one worker passes"
# The parent killed (issue 23: the workers were reparented and sold on):
# the workers die with it. A long demo; its workers are the parent's children.
workers_of() { pgrep -P "$1" | tr '\n' ' '; }
selling() { s=$(redis-cli -p "$PORT" GET "{rlock:demo}:stock"); [ -n "$s" ] && [ "$s" -lt 10000000 ]; }
for sig in KILL TERM; do
  redis-cli -p "$PORT" DEL "{rlock:demo}:stock" >/dev/null
  bg "$T/d$sig" "$RLOCK" -u "$URL" demo --workers 3 --stock 10000000
  d=$BG
  until_true 30 selling || fail "$sig: the demo never sold"
  ws=$(workers_of "$d")
  BG_PIDS+=($ws)
  [ "$(echo $ws | wc -w)" = 3 ] && pass "$sig: 3 workers run" || fail "$sig: workers: '$ws'"
  kill -"$sig" "$d"
  await "$d" 30
  all_gone() { for w in $ws; do kill -0 "$w" 2>/dev/null && return 1; done; return 0; }
  until_true 10 all_gone && pass "$sig of the parent: the workers ended" || fail "$sig of the parent: workers $ws still run"
done
[ "$RC" = 143 ] && pass "TERM: exit 143" || fail "TERM: exit $RC"
contains "$T/dTERM.out" "interrupted" "TERM: the summary so far is printed"

# Ctrl-C (SIGINT to the demo's whole process group): the summary so far,
# consistent (sold = stock - stock left), exit 130.
redis-cli -p "$PORT" DEL "{rlock:demo}:stock" >/dev/null
bg "$T/dINT" setsid "$RLOCK" -u "$URL" demo --workers 3 --stock 10000000
d=$BG
until_true 30 selling || fail "INT: the demo never sold"
ws=$(workers_of "$d")
BG_PIDS+=($ws)
kill -INT -- -"$d"
await "$d" 30
[ "$RC" = 130 ] && pass "Ctrl-C: exit 130" || fail "Ctrl-C: exit $RC, $(cat "$T/dINT.err")"
contains "$T/dINT.out" "interrupted" "Ctrl-C: the summary so far is printed"
contains "$T/dINT.out" "sales per worker:" "Ctrl-C: sales per worker"
contains "$T/dINT.out" "no oversell" "Ctrl-C: the sales so far are consistent"
finish
