#!/usr/bin/env bash
# tests/cli/status.sh -- `rlock status` (text and --json, valid JSON with any
# bytes in the name) and `rlock unlock --force` on free and held locks, and on
# keys that are not locks (refused, exit 65, unless --any-type); the node that
# answered (host:port, a unix socket's path) in both forms. Exit codes a script
# can test: 0 held, 1 free, 64 up errors.
. "$(dirname "$0")/common.sh"
start_redis
R() { "$RLOCK" -u "$URL" "$@"; }
json_check() { # json_check FILE PYTHON-EXPR (on the parsed object o)
  python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2"
}

expect 1 "status of a free lock: exit 1" R status free
contains "$T/out" "free: not locked" "text status of a free lock"
contains "$T/out" "node 127.0.0.1:$PORT" "text status names the node that answered"
expect 1 "status --json of a free lock: exit 1" R status --json free
python3 -m json.tool "$T/out" >/dev/null && pass "valid JSON" || fail "invalid JSON: $(cat "$T/out")"
json_check "$T/out" 'o == {"name": "free", "locked": False, "holders": [], "ttl_ms": -2, "node": "127.0.0.1:'"$PORT"'"}' &&
  pass "free lock JSON" || fail "free lock JSON: $(cat "$T/out")"
[ "$(wc -l <"$T/out")" = 1 ] && pass "one line of JSON" || fail "JSON is not one line"

# A name with quotes, a backslash, a tab, a newline, a non-UTF-8 byte and UTF-8.
weird=$'we"ird\\na\tme\n\xff\xc3\xa9'
mkfifo "$T/held"
bg "$T/holder" "$RLOCK" -u "$URL" exec "$weird" -- sh -c "echo > $T/held; exec sleep 60"
holder=$BG
ready "$T/held"
expect 0 "status --json of a held lock" R status --json "$weird"
python3 -m json.tool "$T/out" >/dev/null && pass "valid JSON for a weird name" || fail "invalid JSON: $(cat "$T/out")"
json_check "$T/out" 'o["name"] == "we\"ird\\na\tme\n\u00ff\u00e9"' && pass "name escaped exactly" ||
  fail "name escaping: $(cat "$T/out")"
json_check "$T/out" 'o["locked"] is True and len(o["holders"]) == 1 and o["holders"][0]["count"] == 1' &&
  pass "one holder, count 1" || fail "holders: $(cat "$T/out")"
json_check "$T/out" '__import__("re").fullmatch(r"[0-9a-f-]{36}:[0-9]+", o["holders"][0]["owner"])' &&
  pass "owner is <uuid>:<thread>" || fail "owner: $(cat "$T/out")"
json_check "$T/out" '0 < o["ttl_ms"] <= 30000' && pass "ttl within the watchdog lease" ||
  fail "ttl: $(cat "$T/out")"
expect 0 "text status of a held lock" R status "$weird"
contains "$T/out" "locked, ttl" "text status shows the TTL"
contains "$T/out" "count 1" "text status shows the holder"
contains "$T/out" "node 127.0.0.1:$PORT" "text status of a held lock names the node"


# unlock --force
expect 0 "unlock --force of a free lock" R unlock --force free
contains "$T/out" "free was not locked" "free lock reported as not locked"
mkfifo "$T/held2"
bg "$T/holder2" "$RLOCK" -u "$URL" exec --lease 60s plain -- sh -c "echo > $T/held2; exec sleep 60"
holder2=$BG
ready "$T/held2"
expect 0 "unlock --force of a held lock" R unlock --force plain
contains "$T/out" "unlocked plain (was locked)" "held lock reported as was locked"
R status --json plain | grep -q '"locked":false' && pass "lock is free after unlock --force" ||
  fail "still locked after unlock --force"

# unlock --force on keys that are not locks: refused (65), the key is kept.
redis-cli -p "$PORT" SET str-key value >/dev/null
redis-cli -p "$PORT" HSET user:1 name bob age 42 >/dev/null
redis-cli -p "$PORT" RPUSH list-key a b >/dev/null
redis-cli -p "$PORT" HSET counters views 5 likes 3 >/dev/null # integers, but no owner ids
for k in str-key user:1 counters list-key; do
  expect 65 "unlock --force of $k (not a lock) is refused" R unlock --force "$k"
  contains "$T/err" "not a lock" "refusal for $k explained"
  contains "$T/err" "--any-type" "refusal for $k names --any-type"
  [ "$(redis-cli -p "$PORT" EXISTS "$k")" = 1 ] && pass "$k is still there" || fail "$k was deleted"
done
contains "$T/err" "list" "the refusal names the key's type"
# exec and status on keys that are not locks (issue 23: raw WRONGTYPE, exit
# 70; exec --simple on a list waited forever): "not a lock", exit 65.
expect 65 "exec on a list" timeout 20 "$RLOCK" -u "$URL" exec list-key -- touch "$T/ran-list"
contains "$T/err" "list-key is not a lock (holds a list)" "exec on a list: explained"
expect 65 "exec --simple on a list" timeout 20 "$RLOCK" -u "$URL" exec --simple list-key -- touch "$T/ran-list"
contains "$T/err" "not a lock (holds a list)" "exec --simple on a list: explained"
[ -e "$T/ran-list" ] && fail "CMD ran on a list" || pass "CMD did not run on a list"
expect 65 "status of a list" R status list-key
contains "$T/err" "list-key is not a lock (holds a list)" "status of a list: explained"
expect 65 "exec on a string (a simple lock's type)" timeout 20 "$RLOCK" -u "$URL" exec str-key -- true
contains "$T/err" "holds a string; try --simple" "exec on a string suggests --simple"
# A semaphore's or latch's count (a string without TTL): not a simple lock
# either (before: "try --simple", and exec --simple waited for it forever).
redis-cli -p "$PORT" SET count-key 5 >/dev/null
expect 65 "exec on a semaphore's count" timeout 20 "$RLOCK" -u "$URL" exec count-key -- true
contains "$T/err" "count-key is not a lock (a semaphore or count-down latch, count 5" "exec on a count: explained"
grep -q "try --simple" "$T/err" && fail "a count: --simple suggested" || pass "no --simple suggested for a count"
expect 65 "exec --simple on a semaphore's count" timeout 20 "$RLOCK" -u "$URL" exec --simple count-key -- true
contains "$T/err" "count-key is not a lock (a semaphore or count-down latch" "exec --simple on a count: explained"
[ "$(redis-cli -p "$PORT" GET count-key)" = 5 ] && pass "the count is left as it is" || fail "count-key changed"
[ "$(redis-cli -p "$PORT" TYPE list-key)" = list ] && pass "the list is left as it is" || fail "list-key changed"
expect 0 "unlock --force --any-type deletes a string" R unlock --force --any-type str-key
contains "$T/out" "not a lock" "--any-type says it deleted something that was not a lock"
[ "$(redis-cli -p "$PORT" EXISTS str-key)" = 0 ] && pass "str-key deleted with --any-type" || fail "str-key still there"
expect 0 "unlock --force --any-type of a missing key" R unlock --force --any-type str-key
contains "$T/out" "str-key was not locked" "a missing key with --any-type"
mkfifo "$T/held3"
bg "$T/holder3" "$RLOCK" -u "$URL" exec --lease 60s anyt -- sh -c "echo > $T/held3; exec sleep 60"
holder3=$BG
ready "$T/held3"
expect 0 "unlock --force --any-type of a held lock" R unlock --force --any-type anyt
contains "$T/out" "unlocked anyt (was locked)" "--any-type on a real lock reports it as a lock"
kill -TERM "$holder" "$holder2" "$holder3"
await "$holder3"
await "$holder"
await "$holder2"
# unix:// URL: the node is the socket's path.
start_redis --unixsocket "$T/redis.sock"
expect 1 "status --json over a unix socket (free)" "$RLOCK" -u "unix://$T/redis.sock" status --json free
json_check "$T/out" 'o["node"] == "'"$T/redis.sock"'"' && pass "node is the socket path" ||
  fail "unix node: $(cat "$T/out")"
finish
