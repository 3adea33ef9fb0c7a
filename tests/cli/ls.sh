#!/usr/bin/env bash
# tests/cli/ls.sh -- `rlock ls [--json] [PATTERN]`: every lock object with its
# kind (reentrant, rwlock, fair, fenced, simple, semaphore_or_latch,
# permit_semaphore), holders, TTL and waiters; hashes that are not locks,
# plain strings, other types and the objects' companion keys are not listed;
# PATTERN filters; --json is valid JSON with any bytes in a name. On a
# Cluster every master is scanned and a waiter on sharded pub/sub counted.
# `rlock status NAME` without a kind option finds the kind and says it.
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
contains "$T/out" "job: reentrant, ttl" "job listed"
contains "$T/out" "1 waiting, held by $tok (count 1)" "job's waiter and holder"
contains "$T/out" "rw: rwlock (read)" "read-write lock listed with its mode"
grep -q "user:1\|list-key" "$T/out" && fail "non-locks listed: $(cat "$T/out")" || pass "non-locks not listed"
[ "$(wc -l <"$T/out")" -ge 4 ] && pass "four locks" || fail "ls: $(cat "$T/out")"
expect 0 "ls --json" R ls --json
json_check "$T/out" 'sorted(x["name"] for x in o) == sorted(["job", "other", "rw", "we\"ird\n\u00ff"])' &&
  pass "json lists exactly the locks" || fail "json names: $(cat "$T/out")"
json_check "$T/out" '[x for x in o if x["name"] == "job"][0] == {"name": "job", "kind": "reentrant", "holders": [{"owner": "'"$tok"'", "count": 1}], "ttl_ms": [x for x in o if x["name"] == "job"][0]["ttl_ms"], "waiters": 1}' &&
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

# Every kind of lock object, with the kind found by itself.
mkfifo "$T/f1" "$T/f2" "$T/f3" "$T/f4"
bg "$T/fair" "$RLOCK" -u "$URL" exec --fair fjob -- sh -c "echo > $T/f1; exec sleep 60"
ready "$T/f1"
bg "$T/fairw" "$RLOCK" -u "$URL" exec --fair --wait 1h fjob -- true
queued() { [ "$(redis-cli -p "$PORT" LLEN 'redisson_lock_queue:{fjob}')" = 1 ]; }
until_true 30 queued && pass "a fair waiter queued" || fail "no fair waiter queued"
bg "$T/fen" "$RLOCK" -u "$URL" exec --fenced fen -- sh -c "echo > $T/f2; exec sleep 60"
ready "$T/f2"
bg "$T/sim" "$RLOCK" -u "$URL" exec --simple sim -- sh -c "echo > $T/f3; exec sleep 60"
ready "$T/f3"
bg "$T/pes" "$RLOCK" -u "$URL" exec --permit --permits 3 pes -- sh -c "echo > $T/f4; exec sleep 60"
ready "$T/f4"
expect 0 "semaphore set" R semaphore sem set 5
expect 0 "latch set" R latch lat set 2
redis-cli -p "$PORT" SET plain-string hello >/dev/null
expect 0 "ls --json, every kind" R ls --json
kind() { json_check "$T/out" '[x["kind"] for x in o if x["name"] == "'"$1"'"] == ["'"$2"'"]' && pass "$1 is $2" ||
  fail "$1 not listed as $2: $(cat "$T/out")"; }
kind fjob fair
kind fen fenced
kind sim simple
kind pes permit_semaphore
kind sem semaphore_or_latch
kind lat semaphore_or_latch
kind rw rwlock
kind job reentrant
json_check "$T/out" '[x["waiters"] for x in o if x["name"] == "fjob"] == [1]' && pass "fair lock: its queue counted" ||
  fail "fair waiters: $(cat "$T/out")"
json_check "$T/out" '[x["count"] for x in o if x["name"] == "pes"] == [2] and [x["count"] for x in o if x["name"] == "sem"] == [5]' &&
  pass "counts of the semaphores" || fail "counts: $(cat "$T/out")"
json_check "$T/out" 'not [x for x in o if x["name"] in ("plain-string", "user:1", "list-key") or "redisson_" in x["name"] or "rlock_" in x["name"] or "timeout" in x["name"]]' &&
  pass "no plain string, no companion key" || fail "listed: $(cat "$T/out")"

# status without a kind option finds the kind and says so.
for k in "fjob fair" "fen fenced" "sim simple" "rw rwlock" "job reentrant"; do
  set -- $k
  expect 0 "status $1 (no kind option)" R status --json "$1"
  contains "$T/out" "\"found\":\"$2\"" "status found $1 to be $2"
done
expect 0 "status fjob shows the fair queue by itself" R status fjob
contains "$T/out" "waiter 1 " "fair queue shown without --fair"
contains "$T/out" "kind: fair lock, found by itself" "the kind said"
expect 0 "status sim (a simple lock) without --simple" R status sim
contains "$T/out" "kind: simple lock" "simple lock found"
expect 65 "status of a semaphore" R status sem
contains "$T/err" "sem is not a lock (a semaphore or count-down latch, count 5" "semaphore explained"
expect 1 "status --fair of a free name (a kind option: nothing found)" R status --json --fair nothing
grep -q found "$T/out" && fail "found printed with a kind option: $(cat "$T/out")" || pass "a kind option: no detection"

# A Cluster: three masters, every one scanned.
start_redis --cluster-enabled yes --cluster-config-file nodes-a.conf
PA=$PORT
start_redis --cluster-enabled yes --cluster-config-file nodes-b.conf
PB=$PORT
start_redis --cluster-enabled yes --cluster-config-file nodes-c.conf
PC=$PORT
redis-cli -p "$PA" CLUSTER ADDSLOTSRANGE 0 5460 >/dev/null
redis-cli -p "$PB" CLUSTER ADDSLOTSRANGE 5461 10922 >/dev/null
redis-cli -p "$PC" CLUSTER ADDSLOTSRANGE 10923 16383 >/dev/null
redis-cli -p "$PB" CLUSTER MEET 127.0.0.1 "$PA" >/dev/null
redis-cli -p "$PC" CLUSTER MEET 127.0.0.1 "$PA" >/dev/null
all_ok() {
  local p
  for p in "$PA" "$PB" "$PC"; do
    redis-cli -p "$p" CLUSTER INFO | grep -q "cluster_state:ok" || return 1
    [ "$(redis-cli -p "$p" CLUSTER NODES | grep -c master)" = 3 ] || return 1
  done
}
until_true 30 all_ok && pass "cluster of three masters up" || fail "the cluster never came up"
CU="redis+cluster://127.0.0.1:$PA"
C() { "$RLOCK" -u "$CU" "$@"; }
for n in a b c d e f g h; do
  expect 0 "cluster: acquire $n" C acquire --lease 60s "$n"
done
expect 0 "cluster: semaphore set" C semaphore csem set 2
bg "$T/cw" "$RLOCK" -u "$CU" acquire --lease 1s --wait 1h a
cluster_waiter() { C ls --json a >"$T/cw.ls" 2>/dev/null && json_check "$T/cw.ls" 'o[0]["waiters"] == 1'; }
until_true 30 cluster_waiter && pass "cluster: the waiter on a counted (sharded pub/sub)" ||
  fail "cluster waiter not counted: $(cat "$T/cw.ls")"
expect 0 "cluster: ls --json" C ls --json
json_check "$T/out" 'sorted(x["name"] for x in o) == sorted(list("abcdefgh") + ["csem"])' &&
  pass "cluster: every master's locks listed" || fail "cluster ls: $(cat "$T/out")"
json_check "$T/out" 'len(set(x["node"] for x in o)) == 3' && pass "cluster: from all three masters" ||
  fail "cluster nodes: $(cat "$T/out")"
[ "$(redis-cli -p "$PA" DBSIZE)" -gt 0 ] && [ "$(redis-cli -p "$PB" DBSIZE)" -gt 0 ] && [ "$(redis-cli -p "$PC" DBSIZE)" -gt 0 ] &&
  pass "keys on every master" || fail "keys not spread"
expect 0 "cluster: ls 'a'" C ls a
contains "$T/out" "a: reentrant, node 127.0.0.1:" "cluster text names the node"
expect 0 "cluster: status a finds a reentrant lock" C status --json a
contains "$T/out" '"found":"reentrant"' "cluster status found"
# rlock wait on a Cluster: on the key's master's sharded channel, woken by a force unlock
bg "$T/cwait" "$RLOCK" -u "$CU" wait --json b
cwait=$BG
b_waited() { C ls --json b >"$T/cb.ls" 2>/dev/null && json_check "$T/cb.ls" 'o[0]["waiters"] == 1'; }
until_true 30 b_waited && pass "cluster: rlock wait subscribed (counted by ls)" || fail "cluster wait: $(cat "$T/cb.ls")"
expect 0 "cluster: unlock --force b" C unlock --force b
await "$cwait" 30
[ "$RC" = 0 ] && pass "cluster: wait returned once b was freed" || fail "cluster wait exit $RC: $(cat "$T/cwait.err")"
contains "$T/cwait.out" '"free":true' "cluster wait JSON"
finish
