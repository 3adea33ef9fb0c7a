#!/usr/bin/env bash
# tests/cli/semaphore.sh -- `rlock semaphore` and `rlock latch`: Redisson's
# keys (NAME a counter), text and --json output, exit codes (64 usage, 75 a
# wait that ran out), and a waiting acquire / await woken by another rlock
# process's release / count-down.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
rc() { redis-cli -p "$PORT" "$@"; }

# semaphore: set, status, acquire, release
expect 0 "semaphore set" R semaphore jobs set 2
contains "$T/out" "jobs: set to 2 permits" "set message"
[ "$(rc GET jobs)" = 2 ] && pass "NAME holds the permits" || fail "GET jobs: $(rc GET jobs)"
expect 0 "semaphore set again" R semaphore --json jobs set 5
contains "$T/out" '{"name":"jobs","kind":"semaphore","set":false,"available":2}' "set JSON when it exists"
expect 0 "semaphore acquire" R semaphore jobs acquire
contains "$T/out" "jobs: acquired 1 permit (1 available)" "acquire message"
expect 0 "semaphore acquire --json" R semaphore jobs acquire 1 --json
contains "$T/out" '"acquired":1,"available":0' "acquire JSON"
expect 75 "acquire times out" R semaphore jobs acquire --wait 200ms
contains "$T/err" "not enough permits" "timeout message"
# issue 23 (repeated words, a lock named for a semaphore: "timed out waiting
# for the lock (timed out waiting for permits)"): said once, of the semaphore
[ "$(grep -o "timed out" "$T/err" | wc -l)" = 1 ] && pass "acquire timeout said once" || fail "repeated: $(cat "$T/err")"
grep -q "the lock" "$T/err" && fail "a semaphore's timeout names a lock: $(cat "$T/err")" || pass "no lock named"
expect 0 "semaphore status" R semaphore jobs status
contains "$T/out" "jobs: 0 permits available" "status message"
# a waiting acquire is woken by another process's release
bg "$T/w" "$RLOCK" -u "$URL" semaphore jobs acquire 2 --wait 30s --json
w=$BG
subscribed() { [ "$(rc PUBSUB NUMSUB 'redisson_sc:{jobs}' | tail -1)" = 1 ]; }
until_true 20 subscribed || fail "the waiter did not subscribe"
queued() { [ "$(rc ZCARD 'rlock_semaphore_queue:{jobs}')" = "$1" ]; }
until_true 20 queued 1 || fail "the waiter did not queue"
expect 0 "semaphore status with a waiter" R semaphore jobs status
contains "$T/out" "jobs: 0 permits available, 1 rlock waiter queued" "status shows the queue"
expect 0 "semaphore status --json with a waiter" R semaphore --json jobs status
contains "$T/out" '"available":0,"queued":1}' "status JSON shows the queue"
expect 0 "semaphore release 2" R semaphore jobs release 2
contains "$T/out" "jobs: released 2 permits" "release message"
await "$w"
[ "$RC" = 0 ] && pass "the waiter got its permits" || fail "waiter exit $RC: $(cat "$T/w.err")"
contains "$T/w.out" '"acquired":2,"available":0' "waiter JSON"
expect 0 "semaphore status --json" R semaphore --json jobs status
contains "$T/out" '{"name":"jobs","kind":"semaphore","available":0,"queued":0}' "status JSON"
# SIGTERM while waiting (a background job ignores SIGINT): the wait is
# cancelled, exit 143, nothing taken
bg "$T/i" "$RLOCK" -u "$URL" semaphore jobs acquire
i=$BG
until_true 20 subscribed || fail "the waiter did not subscribe"
kill -TERM "$i"
await "$i"
[ "$RC" = 143 ] && pass "SIGTERM: exit 143" || fail "SIGTERM: exit $RC: $(cat "$T/i.err")"
contains "$T/i.err" "interrupted by signal 15" "SIGTERM message"
[ "$(rc GET jobs)" = 0 ] && pass "nothing taken" || fail "GET jobs: $(rc GET jobs)"
[ "$(rc EXISTS 'rlock_semaphore_queue:{jobs}')" = 0 ] && pass "the cancelled waiter left the queue" ||
  fail "queue left: $(rc ZRANGE 'rlock_semaphore_queue:{jobs}' 0 -1)"
# bad input
expect 64 "acquire 0" R semaphore jobs acquire 0
expect 64 "release -1" R semaphore jobs release -1
expect 64 "unknown action" R semaphore jobs take
expect 64 "no action" R semaphore jobs
expect 64 "--wait on release" R semaphore jobs release --wait 1s
expect 0 "semaphore --help" R semaphore --help
contains "$T/out" "Usage: rlock semaphore" "help text"

# latch: set, down, await, status
expect 0 "latch set" R latch gate set 2
contains "$T/out" "gate: count set to 2" "latch set message"
expect 0 "latch set again --json" R latch --json gate set 3
contains "$T/out" '{"name":"gate","kind":"latch","set":false,"count":2}' "latch set JSON"
expect 75 "await times out" R latch gate await --wait 200ms
[ "$(grep -o "timed out" "$T/err" | wc -l)" = 1 ] && pass "await timeout said once" || fail "repeated: $(cat "$T/err")"
grep -q "the lock" "$T/err" && fail "a latch's timeout names a lock: $(cat "$T/err")" || pass "no lock named"
contains "$T/err" "gate" "the latch named"
bg "$T/a" "$RLOCK" -u "$URL" latch gate await --wait 30s
a=$BG
lsub() { [ "$(rc PUBSUB NUMSUB 'redisson_countdownlatch__channel__{gate}' | tail -1)" = 1 ]; }
until_true 20 lsub || fail "the awaiter did not subscribe"
expect 0 "latch down" R latch gate down
contains "$T/out" "gate: count 1" "down message"
expect 0 "latch status --json" R latch --json gate status
contains "$T/out" '{"name":"gate","kind":"latch","count":1,"open":false}' "status JSON"
expect 0 "latch down to zero" R latch gate down --json
contains "$T/out" '"count":0,"open":true' "down JSON at zero"
await "$a"
[ "$RC" = 0 ] && pass "the awaiter was woken" || fail "awaiter exit $RC: $(cat "$T/a.err")"
contains "$T/a.out" "gate: open" "await message"
[ "$(rc EXISTS gate)" = 0 ] && pass "the latch key is gone at zero" || fail "gate still exists"
expect 0 "await an open latch" R latch gate await
expect 64 "latch set 0" R latch gate set 0
expect 64 "latch down takes no N" R latch gate down 2
# The output of a successful acquire cannot be written (stdout /dev/full, a
# pipe whose reader has gone): the permits are given back, exit 74 (before:
# exit 0 or killed by SIGPIPE with the permits taken, the caller unable to
# tell).
rc SET outsem 2 >/dev/null
code=0
R semaphore outsem acquire >/dev/full 2>"$T/err" || code=$?
[ "$code" = 74 ] && pass "acquire with an unwritable stdout: exit 74" || fail "exit $code: $(cat "$T/err")"
[ "$(rc GET outsem)" = 2 ] && pass "permits given back" || fail "count $(rc GET outsem)"
code=$(python3 -c 'import os,subprocess,sys
r, w = os.pipe(); os.close(r)
print(subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.DEVNULL).returncode)' "$RLOCK" -u "$URL" semaphore outsem acquire)
[ "$code" = 74 ] && pass "acquire into a closed pipe: exit 74" || fail "acquire into a closed pipe: exit $code"
[ "$(rc GET outsem)" = 2 ] && pass "permits given back (closed pipe)" || fail "count $(rc GET outsem)"

finish
