#!/usr/bin/env bash
# tests/cli/hold.sh -- locks held across shell commands: `rlock acquire NAME
# --lease DUR` prints an owner token, `rlock extend` and `rlock release` take
# it. A wrong token (another acquire's, a forged one) frees and extends
# nothing; bad tokens and missing leases are usage errors (64).
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
ttl() { redis-cli -p "$PORT" PTTL "$1"; }

expect 64 "acquire without --lease" R acquire job
expect 64 "acquire with a bad lease" R acquire --lease 1x job
expect 0 "acquire job --lease 60s" R acquire --lease 60s job
tok=$(cat "$T/out")
[[ $tok =~ ^[0-9a-f-]{36}:owner-1$ ]] && pass "token printed: $tok" || fail "token: $tok"
expect 0 "status: held after acquire exited" R status job
t=$(ttl job); ((t > 50000 && t <= 60000)) && pass "lease 60s set ($t ms)" || fail "pttl $t"
expect 75 "second acquire: busy" R acquire --lease 60s job
contains "$T/err" "job is busy" "busy message"

# Another holder's token on another lock, and forged tokens, change nothing.
expect 0 "acquire other" R acquire --lease 60s other
other=$(cat "$T/out")
expect 1 "release job with other's token: not held" R release job "$other"
contains "$T/err" "not held by that token" "wrong token message"
expect 0 "job still held" R status job
expect 1 "extend job with other's token: not held" R extend --lease 1h job "$other"
t=$(ttl job); ((t <= 60000)) && pass "job's lease not extended ($t ms)" || fail "extended by a wrong token: $t"
forged="00000000-0000-4000-8000-000000000000:owner-1"
expect 1 "release with a forged token" R release job "$forged"
expect 0 "job still held after forged release" R status job
expect 64 "release with a malformed token" R release job "not-a-token"
expect 64 "release with the thread form of a token" R release job "${tok%:owner-1}:1"
expect 64 "extend without --lease" R extend job "$tok"

# The right token.
expect 0 "extend job --lease 1h with its token" R extend --lease 1h job "$tok"
t=$(ttl job); ((t > 3500000)) && pass "lease now about 1h ($t ms)" || fail "pttl after extend $t"
expect 0 "release job with its token" R release job "$tok"
contains "$T/out" "released job" "release message"
expect 1 "status: free after release" R status job
expect 1 "second release: not held" R release job "$tok"
expect 1 "extend after release: not held, nothing created" R extend --lease 1h job "$tok"
[ "$(redis-cli -p "$PORT" EXISTS job)" = 0 ] && pass "no key made by extend" || fail "extend made a key"

# A waiter is woken by release (pub/sub), and acquire --wait takes it.
expect 0 "acquire w" R acquire --lease 1h w
wtok=$(cat "$T/out")
bg "$T/waiter" "$RLOCK" -u "$URL" acquire --lease 60s --wait 1h w
waiter=$BG
subscribed() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB 'redisson_lock__channel:{w}' | tail -1)" = 1 ]; }
until_true 30 subscribed && pass "waiter subscribed" || fail "waiter never subscribed"
expect 0 "release w" R release w "$wtok"
await "$waiter" 30
[ "$RC" = 0 ] && pass "waiter acquired after release" || fail "waiter exit $RC: $(cat "$T/waiter.err")"
grep -qE '^[0-9a-f-]{36}:owner-1$' "$T/waiter.out" && pass "waiter printed a token" ||
  fail "waiter output: $(cat "$T/waiter.out")"

# SIGTERM while acquire waits (a background job ignores SIGINT): the wait is
# cancelled (a try in flight is undone by the library), exit 143, and the
# lock stays its holder's alone (before: killed by the signal with no word;
# a try applied at that moment left a hold nobody had the token of).
expect 0 "acquire busy-job" R acquire --lease 60s busy-job
btok=$(cat "$T/out")
bg "$T/sig" "$RLOCK" -u "$URL" acquire --wait 1h --lease 60s busy-job
sig=$BG
bsub() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB 'redisson_lock__channel:{busy-job}' | tail -1)" = 1 ]; }
until_true 20 bsub || fail "the waiting acquire did not subscribe"
kill -TERM "$sig"
await "$sig"
[ "$RC" = 143 ] && pass "SIGTERM: exit 143" || fail "SIGTERM: exit $RC: $(cat "$T/sig.err")"
contains "$T/sig.err" "interrupted by signal 15" "SIGTERM message"
expect 0 "release busy-job with its token" R release busy-job "$btok"
[ "$(redis-cli -p "$PORT" EXISTS busy-job)" = 0 ] && pass "busy-job free: the interrupted acquire holds nothing" ||
  fail "busy-job still held: $(redis-cli -p "$PORT" HGETALL busy-job | tr '\n' ' ')"
# A key that is not a lock.
redis-cli -p "$PORT" RPUSH list-key a >/dev/null
expect 65 "acquire a list" R acquire --lease 1s list-key
expect 65 "release on a list" R release list-key "$tok"
[ "$(redis-cli -p "$PORT" LLEN list-key)" = 1 ] && pass "list kept" || fail "list changed"
# The token cannot be written (stdout is /dev/full): the hold is released
# again, exit 74 (before: exit 0, the lock held for the whole lease with a
# token nobody had).
rc=0
R acquire --lease 1h lostout >/dev/full 2>"$T/err" || rc=$?
[ "$rc" = 74 ] && pass "acquire with an unwritable stdout: exit 74" || fail "exit $rc: $(cat "$T/err")"
[ "$(redis-cli -p "$PORT" EXISTS lostout)" = 0 ] && pass "no hold left without its token" ||
  fail "lostout held for $(redis-cli -p "$PORT" PTTL lostout) ms with a token nobody has"
contains "$T/err" "cannot write the owner token" "the message says why"
# The same for a pipe whose reader has gone (before: killed by SIGPIPE, the
# lock held for the whole lease).
rc=$(python3 -c 'import os,subprocess,sys
r, w = os.pipe(); os.close(r)
print(subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.DEVNULL).returncode)' "$RLOCK" -u "$URL" acquire --lease 1h lostpipe)
[ "$rc" = 74 ] && pass "acquire into a closed pipe: exit 74" || fail "acquire into a closed pipe: exit $rc"
[ "$(redis-cli -p "$PORT" EXISTS lostpipe)" = 0 ] && pass "no hold left (closed pipe)" ||
  fail "lostpipe held for $(redis-cli -p "$PORT" PTTL lostpipe) ms with a token nobody has"
finish
