#!/usr/bin/env bash
# tests/cli/ls.sh -- `rlock ls [--json] [PATTERN]`: held locks (reentrant and
# read-write) with their holders, TTL and waiters; hashes that are not locks
# and other types are not listed; PATTERN filters; --json is valid JSON with
# any bytes in a name; a Cluster URL is refused (64). The waiters of a fair
# lock (its queue) and of a name with braces (Redisson's channel keeps them:
# redisson_lock__channel:b{r}) are counted.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
json_check() { # json_check FILE PYTHON-EXPR (on the parsed object o)
  python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}

expect 0 "ls with no locks" R ls
[ ! -s "$T/out" ] && pass "nothing listed" || fail "listed: $(cat "$T/out")"
expect 0 "ls --json with no locks" R ls --json
[ "$(cat "$T/out")" = "[]" ] && pass "empty array" || fail "json: $(cat "$T/out")"

expect 0 "acquire job" R acquire --lease 60s job
tok=$(cat "$T/out")
expect 0 "acquire other" R acquire --lease 60s other
mkfifo "$T/held"
bg "$T/reader" "$RLOCK" -u "$URL" exec --read rw -- sh -c "echo > $T/held; exec sleep 60"
ready "$T/held"
redis-cli -p "$PORT" HSET user:1 name bob >/dev/null
redis-cli -p "$PORT" RPUSH list-key a >/dev/null
weird=$'we"ird\n\xff'
expect 0 "acquire a weird name" R acquire --lease 60s "$weird"
# a waiter on job
bg "$T/waiter" "$RLOCK" -u "$URL" acquire --lease 1s --wait 1h job
subscribed() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB 'redisson_lock__channel:{job}' | tail -1)" = 1 ]; }
until_true 30 subscribed && pass "waiter subscribed" || fail "waiter never subscribed"

expect 0 "ls" R ls
contains "$T/out" "job: lock, ttl" "job listed"
contains "$T/out" "1 waiting, held by $tok (count 1)" "job's waiter and holder"
contains "$T/out" "rw: rwlock (read)" "read-write lock listed with its mode"
grep -q "user:1\|list-key" "$T/out" && fail "non-locks listed: $(cat "$T/out")" || pass "non-locks not listed"
[ "$(wc -l <"$T/out")" -ge 4 ] && pass "four locks" || fail "ls: $(cat "$T/out")"
expect 0 "ls --json" R ls --json
json_check "$T/out" 'sorted(x["name"] for x in o) == sorted(["job", "other", "rw", "we\"ird\n\u00ff"])' &&
  pass "json lists exactly the locks" || fail "json names: $(cat "$T/out")"
json_check "$T/out" '[x for x in o if x["name"] == "job"][0] == {"name": "job", "kind": "lock", "holders": [{"owner": "'"$tok"'", "count": 1}], "ttl_ms": [x for x in o if x["name"] == "job"][0]["ttl_ms"], "waiters": 1}' &&
  pass "job's JSON" || fail "job JSON: $(cat "$T/out")"
json_check "$T/out" 'all(0 < x["ttl_ms"] <= 60000 for x in o if x["name"] != "rw")' && pass "ttls" || fail "ttls: $(cat "$T/out")"
json_check "$T/out" '[x for x in o if x["name"] == "rw"][0]["mode"] == "read"' && pass "rw mode in JSON" || fail "rw: $(cat "$T/out")"
expect 0 "ls 'o*'" R ls --json 'o*'
json_check "$T/out" '[x["name"] for x in o] == ["other"]' && pass "pattern filters" || fail "pattern: $(cat "$T/out")"
# A fair lock's waiter (queued, on a channel of its own) and a waiter of a
# name with braces are counted.
mkfifo "$T/fheld" "$T/bheld"
bg "$T/fholder" "$RLOCK" -u "$URL" exec --fair fl -- sh -c "echo > $T/fheld; exec sleep 60"
ready "$T/fheld"
bg "$T/fwaiter" "$RLOCK" -u "$URL" exec --fair --wait 1h fl -- true
queued() { [ "$(redis-cli -p "$PORT" LLEN 'redisson_lock_queue:{fl}')" = 1 ]; }
until_true 30 queued && pass "fair waiter queued" || fail "fair waiter never queued"
bg "$T/bholder" "$RLOCK" -u "$URL" exec 'b{r}' -- sh -c "echo > $T/bheld; exec sleep 60"
ready "$T/bheld"
bg "$T/bwaiter" "$RLOCK" -u "$URL" exec --wait 1h 'b{r}' -- true
bsub() { [ "$(redis-cli -p "$PORT" PUBSUB NUMSUB 'redisson_lock__channel:b{r}' | tail -1)" = 1 ]; }
until_true 30 bsub && pass "braced waiter subscribed" || fail "braced waiter never subscribed"
expect 0 "ls fl and b{r}" R ls --json '[fb]*'
json_check "$T/out" '{x["name"]: x["waiters"] for x in o} == {"fl": 1, "b{r}": 1}' &&
  pass "fair and braced waiters counted" || fail "waiters: $(cat "$T/out")"
# Hashes whose counts HINCRBY would never write (a leading zero, beyond
# int64) are not locks: skipped, and the JSON stays valid (before: "count":007).
redis-cli -p "$PORT" HSET zero0 00000000-0000-4000-8000-000000000000:1 007 >/dev/null
redis-cli -p "$PORT" HSET zbig 00000000-0000-4000-8000-000000000000:1 99999999999999999999999 >/dev/null
expect 0 "ls --json with odd counts" R ls --json 'z*'
json_check "$T/out" 'o == []' && pass "odd counts not listed, valid JSON" || fail "json: $(cat "$T/out")"
expect 64 "ls with two patterns" R ls a b
expect 64 "ls on a Cluster URL" "$RLOCK" -u "redis+cluster://127.0.0.1:$PORT" ls
finish
