#!/usr/bin/env bash
# tests/cli/ls.sh -- `rlock ls [--json] [PATTERN]`: held locks (reentrant and
# read-write) with their holders, TTL and waiters; hashes that are not locks
# and other types are not listed; PATTERN filters; --json is valid JSON with
# any bytes in a name; a Cluster URL is refused (64).
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
expect 64 "ls with two patterns" R ls a b
expect 64 "ls on a Cluster URL" "$RLOCK" -u "redis+cluster://127.0.0.1:$PORT" ls
finish
