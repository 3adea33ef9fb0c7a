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
finish
