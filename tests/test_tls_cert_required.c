/* test_tls_cert_required.c -- rlock.h promises that rlock_client_new
 * reports a failed TLS handshake with RLOCK_ETLS. Against a server that
 * requires client certificates (tls-auth-clients yes), a client without one
 * completes its side of the TLS 1.3 handshake, then reads the server's alert
 * while it sends CLIENT SETNAME / SCRIPT LOAD: lib/conn.c's event callback
 * must still call that a TLS failure (it once said RLOCK_ECONNLOST, because
 * the connection was no longer CS_CONNECTING; the test was labelled
 * known_bug until the fix). */
#include "harness.h"

TEST(no_client_cert_is_a_tls_error) {
  const th_tls_certs_t *certs = th_tls_certs();
  th_server_opts_t so = {.tls = 1, .tls_auth_clients = 1};
  th_server_t *s = th_server_start(&so);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = s->tls_url;
  o.tls_ca_file = certs->ca;
  o.connect_timeout_ms = 2000;
  rlock_client_t *c = NULL;
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_ETLS);
  CHECK(c == NULL);
  th_server_stop(s);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 50);
  RUN(no_client_cert_is_a_tls_error);
  return th_done();
}
