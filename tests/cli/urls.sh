#!/usr/bin/env bash
# tests/cli/urls.sh -- malformed and odd Redis URLs given to the CLI (-u and
# $RLOCK_URL): the password never appears in anything rlock prints, a URL
# that cannot be parsed is a usage error (64) whose message says what to fix
# (percent-encoding for a '/', '?', '#' or '&' in the password) once, and a
# well-formed one that cannot connect is exit 69. In every URL the password
# is made of the fragments PWa1 and PWb2.
. "$(dirname "$0")/common.sh"

# URL and expected exit code, one class each.
cases=(
  'redis://u:PWa1/PWb2@127.0.0.1:1' 64        # '/' in the password
  'redis://u:PWa1?PWb2@127.0.0.1:1' 64        # '?'
  'redis://u:PWa1#PWb2@127.0.0.1:1' 64        # '#'
  'redis://u:PWa1@PWb2@127.0.0.1:1' 69        # '@': the last one ends it
  'redis://u:PWa1:PWb2@127.0.0.1:1' 69        # ':'
  'redis://:PWa1/PWb2@127.0.0.1:1' 64         # no user
  'redis://PWa1/PWb2@127.0.0.1:1' 64          # password@host form
  'redis://PWa1PWb2@127.0.0.1:1' 69
  'redis://u:PWa1PWb2@' 64                    # no host
  'redis://u:PWa1PWb2@:1' 64
  'redis://u:PWa1/PWb2@' 64
  'redis:/u:PWa1PWb2@127.0.0.1:1' 64          # scheme typos
  'redis:u:PWa1PWb2@127.0.0.1:1' 64
  'redis//u:PWa1PWb2@127.0.0.1:1' 64
  'redis:///u:PWa1PWb2@127.0.0.1:1' 64
  'rediss:/u:PWa1/PWb2@127.0.0.1:1' 64
  'http://u:PWa1PWb2@127.0.0.1:1' 64
  'u:PWa1PWb2@127.0.0.1:1' 64
  ':PWa1PWb2@127.0.0.1:1' 64
  'u:PWa1:PWb2@127.0.0.1:1' 64                # no scheme, a ':' in the password
  'default:PWa1:PWb2@127.0.0.1:6379' 64
  ' redis://u:PWa1PWb2@127.0.0.1:1' 64
  'redis://u:PWa1%zzPWb2@127.0.0.1:1' 64      # bad escapes
  'redis://u:PWa1%2@' 64
  'redis://u:PWa1PWb2@127.0.0.1:99999' 64     # bad port, db, query, host
  'redis://u:PWa1PWb2@127.0.0.1:1/x' 64
  'redis://u:PWa1PWb2@127.0.0.1:1?db=1' 64
  'redis://u:PWa1PWb2@[::1' 64
  'redis://u:PWa1PWb2@h!st:1' 64
  'redis://u:PWa1 PWb2@127.0.0.1:1' 69
  'rediss://u:PWa1PWb2@127.0.0.1:1' 69
  "unix://$T/none?password=PWa1PWb2" 69       # unix sockets
  "unix://$T/none?password=PWa1#PWb2" 69
  "unix://$T/none?password=PWa1&PWb2" 64
  "unix://$T/none?password=&password=PWa1PWb2" 69
  "unix://$T/none?PASSWORD=PWa1PWb2" 64
  "unix://$T/none?password=PWa1PWb2&db=x" 64
  "unix://$T/none?user=u&password=PWa1%zzPWb2" 64
  "unix://u:PWa1PWb2@$T/none" 64
  "unix://$T/none?password=PWa1@PWb2" 69
)
for ((i = 0; i < ${#cases[@]}; i += 2)); do
  url=${cases[i]} want=${cases[i + 1]}
  expect "$want" "-u '$url'" "$RLOCK" -u "$url" status a
  if grep -q -e PWa1 -e PWb2 "$T/out" "$T/err"; then fail "the password was printed for '$url': $(cat "$T/err")"; fi
  if grep -qi 'invalid Redis URL.*invalid Redis URL' "$T/err"; then fail "repeated message: $(cat "$T/err")"; fi
  [ "$(wc -l <"$T/err")" = 1 ] || fail "not one line for '$url': $(cat "$T/err")"
  expect "$want" "RLOCK_URL='$url'" env RLOCK_URL="$url" "$RLOCK" exec a -- true
  if grep -q -e PWa1 -e PWb2 "$T/out" "$T/err"; then fail "the password was printed for RLOCK_URL '$url'"; fi
done

"$RLOCK" -u 'redis://u:S3cr/3t-pw@127.0.0.1:1' status a 2>"$T/err"
contains "$T/err" "%2F" "a '/' in the password: the message points at %2F"
grep -q port "$T/err" && fail "the message blames the port: $(cat "$T/err")" || pass "the port is not blamed"
"$RLOCK" -u "unix://$T/none?password=a&b" status a 2>"$T/err"
contains "$T/err" "%26" "a '&' in a unix password: the message points at %26"
"$RLOCK" -u "redis:/127.0.0.1:1" status a 2>"$T/err"
contains "$T/err" "//" "a scheme typo: the message asks for '//'"
# A plain redis:// URL to a Cluster node (issue 23: exit 70 with "MOVED
# ..."): the error suggests redis+cluster://. Two nodes; every slot on A, so
# B answers MOVED for any key.
start_redis --cluster-enabled yes --cluster-config-file nodes-a.conf
PA=$PORT
start_redis --cluster-enabled yes --cluster-config-file nodes-b.conf
PB=$PORT
redis-cli -p "$PA" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
redis-cli -p "$PB" CLUSTER MEET 127.0.0.1 "$PA" >/dev/null
b_knows() { redis-cli -p "$PB" CLUSTER SLOTS | grep -q "$PA" && redis-cli -p "$PB" CLUSTER INFO | grep -q "cluster_state:ok"; }
until_true 30 b_knows || fail "node B never learnt A's slots"
expect 64 "exec with redis:// on a Cluster node" "$RLOCK" -u "redis://127.0.0.1:$PB" exec --wait 0 job -- true
contains "$T/err" "redis+cluster://" "the error suggests redis+cluster://"
finish
