#!/usr/bin/env bash
# tests/cli/acl.sh -- Redis 7 ACL users (issue 23): a user without what rlock
# needs (here the lock's channel: Redis 7 gives a new user no channel; or a key)
# is told before CMD runs, naming what is missing, exit 77; an unlock whose
# channel permission was taken while CMD ran is refused before it writes
# (the lock stays held until its lease ends, no latch left), never half done.
. "$(dirname "$0")/common.sh"
start_redis
rc() { redis-cli -p "$PORT" "$@"; }
rc ACL SETUSER nochan on '>pw' '~*' resetchannels '+@all' >/dev/null
rc ACL SETUSER appkeys on '>pw' '~app:*' '~rlock_acquire_latch:{app:*' '~redisson_unlock_latch:{app:*' '~redisson_lock__channel:{app:*' '&*' '+@all' >/dev/null
rc ACL SETUSER full on '>pw' '~*' '&*' '+@all' >/dev/null
U() { "$RLOCK" -u "redis://$1:pw@127.0.0.1:$PORT" "${@:2}"; }

# No channel permission: refused before CMD runs.
expect 77 "exec as a user without channel permission" U nochan exec job -- touch "$T/ran1"
[ -e "$T/ran1" ] && fail "CMD ran although the unlock could not work" || pass "CMD did not run"
contains "$T/err" "publish on channel redisson_lock__channel:{job}" "the missing publish permission is named"
contains "$T/err" "subscribe on channel redisson_lock__channel:{job}" "the missing subscribe permission is named"
[ "$(rc DBSIZE)" = 0 ] && pass "nothing written" || fail "keys left: $(rc KEYS '*' | tr '\n' ' ')"
expect 77 "exec --simple as a user without channel permission" U nochan exec --simple job -- true
contains "$T/err" "rlock_simple__channel:{job}" "the simple lock's channel is named"

# Keys outside the user's patterns: refused, naming the key.
expect 77 "exec as a user without key permission on NAME" U appkeys exec job -- touch "$T/ran2"
[ -e "$T/ran2" ] && fail "CMD ran without key permission" || pass "CMD did not run (key)"
contains "$T/err" "job" "the key is named"
expect 0 "exec as a user with key and channel permission" U appkeys exec app:job -- true
rc ACL SETUSER nochankey on '>pw' '~app:*' '~rlock_acquire_latch:{app:*' '~redisson_unlock_latch:{app:*' '&*' '+@all' >/dev/null
expect 77 "exec as a user without key permission on the channel name" U nochankey exec app:job -- touch "$T/ran3"
[ -e "$T/ran3" ] && fail "CMD ran without key permission on the channel" || pass "CMD did not run (channel key)"
contains "$T/err" "key redisson_lock__channel:{app:job}" "the channel's key is named"

# The channel permission is taken while CMD runs: the unlock is refused
# before it writes (before: the key was deleted, then PUBLISH failed: exit 70,
# latch key left, waiters never told).
expect 77 "unlock refused after the permission was taken" U full exec job2 -- \
  redis-cli -p "$PORT" ACL SETUSER full resetchannels
contains "$T/err" "cannot release the lock" "the failed release is reported"
contains "$T/err" "may not publish to the channel redisson_lock__channel:{job2}" "the script names the channel"
[ "$(rc EXISTS job2)" = 1 ] && pass "the lock was left as it was (held until its lease ends)" ||
  fail "the unlock script wrote before failing: job2 gone"
[ -z "$(rc KEYS 'redisson_unlock_latch:*')" ] && pass "no unlock latch left" ||
  fail "latch left: $(rc KEYS 'redisson_unlock_latch:*')"
finish
