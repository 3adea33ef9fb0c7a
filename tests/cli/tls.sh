#!/usr/bin/env bash
# tests/cli/tls.sh -- the CLI's TLS options against real redis-server TLS
# ports with a throw-away CA: --tls-ca verifies the server, verification
# failures are exit 69, --tls-server-name picks the name verified, --insecure
# skips verification, --tls-cert/--tls-key authenticate the client where the
# server asks for it; the options work before and after the sub-command and
# reach every process of `rlock demo`.
. "$(dirname "$0")/common.sh"
C=$T/certs
make_certs "$C" || { echo "openssl cannot make test certificates" >&2; exit 1; }
tls_args=(--tls-port @TLSPORT@ --tls-cert-file "$C/server.crt" --tls-key-file "$C/server.key"
          --tls-ca-cert-file "$C/ca.crt")
start_redis "${tls_args[@]}" --tls-auth-clients no
S="rediss://127.0.0.1:$TLS_PORT"
plain=$PORT

expect 1 "status over TLS with --tls-ca (free: 1)" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" status t
contains "$T/out" "t: not locked" "status over TLS answers"
expect 1 "TLS options after the sub-command (free: 1)" "$RLOCK" status -u "$S" --tls-ca "$C/ca.crt" t
expect 69 "an unknown CA is refused" "$RLOCK" -u "$S" status t
contains "$T/err" "certificate" "the refusal is about the certificate"
expect 1 "--insecure skips verification (free: 1)" "$RLOCK" -u "$S" --insecure status t
expect 69 "--tls-server-name that the certificate does not name" \
  "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" --tls-server-name wrong.example.org status t
contains "$T/err" "certificate does not name wrong.example.org" "a name mismatch is said in words (issue 23)"
expect 69 "a server certificate of an unknown CA" "$RLOCK" -u "$S" status t
contains "$T/err" "signed by an unknown CA" "an unknown CA is said in words (issue 23)"
openssl ecparam -name prime256v1 -genkey -noout -out "$C/other.key" 2>/dev/null
expect 69 "a client key that does not match the certificate" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" \
  --tls-cert "$C/client.crt" --tls-key "$C/other.key" status t
contains "$T/err" "does not match the certificate" "a key mismatch is said in words (issue 23)"
expect 1 "--tls-server-name localhost (free: 1)" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" --tls-server-name localhost status t
expect 0 "exec over TLS" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" exec tls-job -- sh -c \
  "redis-cli -p $plain EXISTS tls-job > $T/held"
[ "$(cat "$T/held")" = 1 ] && pass "the lock was held over TLS while the command ran" ||
  fail "lock not held during exec over TLS: $(cat "$T/held")"
expect 0 "demo over TLS (workers use the TLS options too)" \
  "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" demo --workers 2 --stock 20
contains "$T/out" "PASS" "demo over TLS passes"

# A server that requires client certificates.
start_redis "${tls_args[@]}" --tls-auth-clients yes
S="rediss://127.0.0.1:$TLS_PORT"
expect 69 "no client certificate: refused" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" status t
contains "$T/err" "client certificate" "a missing client certificate is named (issue 23)"
grep -q "lib(0)" "$T/err" && fail "OpenSSL codes instead of the cause: $(cat "$T/err")" || pass "no OpenSSL codes"
expect 1 "--tls-cert/--tls-key authenticate (free: 1)" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" \
  --tls-cert "$C/client.crt" --tls-key "$C/client.key" status t
expect 64 "--tls-key without --tls-cert" "$RLOCK" -u "$S" --tls-ca "$C/ca.crt" --tls-key "$C/client.key" status t
finish
