/* test_tls.c -- TLS promises not covered by test_connect.c:
 *   a client certificate without its key (or a key without a certificate)
 *   is refused up front with RLOCK_EINVAL and a message;
 *   the SNI really goes on the wire: a tiny TLS server in this test (OpenSSL,
 *   loopback only, the harness's test CA) records the server name of each
 *   ClientHello through OpenSSL's servername callback: tls_server_name is
 *   sent; with an IP-address URL and no tls_server_name none is (RFC 6066);
 *   TLS connections come back after CLIENT KILL and after a server restart:
 *   locks land on the server and a waiter is woken through the re-made
 *   TLS subscriber connection. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "harness.h"

/* ------------------------------------------------------------ cert without key */

TEST(cert_without_key) {
  const th_tls_certs_t *certs = th_tls_certs();
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = "rediss://127.0.0.1:1"; /* never reached: refused before connecting */
  o.tls_ca_file = certs->ca;
  o.tls_cert_file = certs->client_cert;
  rlock_client_t *c = NULL;
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_EINVAL);
  CHECK(c == NULL);
  CHECK_MSG(strstr(rlock_last_error(), "tls_key_file") != NULL, "message: %s", rlock_last_error());
  o.tls_cert_file = NULL;
  o.tls_key_file = certs->client_key;
  CHECK_RC(rlock_client_new(&c, &o), RLOCK_EINVAL);
  CHECK(c == NULL);
  CHECK_MSG(strstr(rlock_last_error(), "tls_cert_file") != NULL, "message: %s", rlock_last_error());
}

/* ------------------------------------------------------------ SNI */

#define SNI_MAX 16

typedef struct sni_server {
  SSL_CTX *ctx;
  int lfd, port;
  pthread_t thread;
  atomic_int stop;
  pthread_mutex_t mu;
  char names[SNI_MAX][256]; /* one per ClientHello; "" = no SNI */
  int n;
} sni_server_t;

static int on_servername(SSL *ssl, int *alert, void *arg) {
  sni_server_t *s = arg;
  const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  pthread_mutex_lock(&s->mu);
  if (s->n < SNI_MAX) snprintf(s->names[s->n++], sizeof s->names[0], "%s", name ? name : "");
  pthread_mutex_unlock(&s->mu);
  return SSL_TLSEXT_ERR_OK;
}

/* Accepts connections one at a time, runs the TLS handshake (which calls
 * on_servername) and closes: it is no Redis server, so the client fails
 * after the handshake, which is all this test needs. */
static void *sni_main(void *arg) {
  sni_server_t *s = arg;
  while (!atomic_load(&s->stop)) {
    struct pollfd p = {.fd = s->lfd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) continue;
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    SSL *ssl = SSL_new(s->ctx);
    if (ssl) {
      SSL_set_fd(ssl, fd);
      if (SSL_accept(ssl) == 1) SSL_shutdown(ssl);
      SSL_free(ssl);
    }
    ERR_clear_error();
    close(fd);
  }
  return NULL;
}

static void sni_start(sni_server_t *s) {
  const th_tls_certs_t *certs = th_tls_certs();
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  s->ctx = SSL_CTX_new(TLS_server_method());
  CHECK(s->ctx != NULL);
  CHECK(SSL_CTX_use_certificate_chain_file(s->ctx, certs->server_cert) == 1);
  CHECK(SSL_CTX_use_PrivateKey_file(s->ctx, certs->server_key, SSL_FILETYPE_PEM) == 1);
  SSL_CTX_set_tlsext_servername_callback(s->ctx, on_servername);
  SSL_CTX_set_tlsext_servername_arg(s->ctx, s);
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  CHECK(bind(s->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s->lfd, 16) == 0);
  CHECK(getsockname(s->lfd, (struct sockaddr *)&a, &len) == 0);
  s->port = ntohs(a.sin_port);
  CHECK_EQ(pthread_create(&s->thread, NULL, sni_main, s), 0);
}

static void sni_stop(sni_server_t *s) {
  atomic_store(&s->stop, 1);
  pthread_join(s->thread, NULL);
  close(s->lfd);
  SSL_CTX_free(s->ctx);
  pthread_mutex_destroy(&s->mu);
}

static int hellos(sni_server_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* Connects once with server_name/verify and returns the SNI the server saw
 * in the first ClientHello ("" = none). */
static void sni_seen(sni_server_t *s, const char *server_name, int verify, char *out, size_t len) {
  char url[64];
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.tls_ca_file = th_tls_certs()->ca;
  o.tls_server_name = server_name;
  o.tls_verify = verify;
  o.connect_timeout_ms =
      30000; /* the client fails as soon as the server hangs up; a slow (valgrind) handshake must not time out first */
  int before = hellos(s);
  rlock_client_t *c = NULL;
  int rc = rlock_client_new(&c, &o);
  if (rc == 0) rlock_client_free(c);
  CHECK_MSG(rc != 0, "a TLS server that is not Redis was accepted");
  CHECK_MSG(hellos(s) > before, "no ClientHello reached the server (%s)", rlock_last_error());
  pthread_mutex_lock(&s->mu);
  snprintf(out, len, "%s", s->names[before]);
  pthread_mutex_unlock(&s->mu);
}

/* A server of its own for each case: a client's later connection (its
 * ClientHello may come after the call failed) once answered the next case's
 * question under valgrind ("sni.example.test" seen where none was sent). */
static void sni_case(const char *server_name, int verify, const char *want) {
  sni_server_t s;
  sni_start(&s);
  char seen[256];
  sni_seen(&s, server_name, verify, seen, sizeof seen);
  CHECK_STREQ(seen, want);
  printf("%d ClientHellos seen\n", hellos(&s));
  sni_stop(&s);
}

TEST(sni_sent) {
  sni_case("localhost", 1, "localhost"); /* the certificate's name: verified */
  sni_case("sni.example.test", 0, "sni.example.test");
  sni_case(NULL, 1, ""); /* the URL's host is an IP address: no SNI */
}

/* ------------------------------------------------------------ TLS reconnect */

static th_server_t *tls_srv;
static rlock_stats_t stats(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st;
}
typedef struct since {
  rlock_client_t *c;
  uint64_t reconnects;
} since_t;
static int reconnected(void *a) {
  since_t *s = a;
  return stats(s->c).reconnects >= s->reconnects + 2; /* command + subscriber */
}
static int subscribed(void *chan) { return th_numsub(tls_srv, chan) == 1; }

typedef struct done {
  pthread_mutex_t mu;
  int calls, status;
} done_t;
static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  d->calls++, d->status = status;
  pthread_mutex_unlock(&d->mu);
}
static int called(void *arg) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  int n = d->calls;
  pthread_mutex_unlock(&d->mu);
  return n;
}

/* A lock round trip over TLS that lands on the server, and a waiter woken
 * by the unlock message (the holder's lease is 60 s). */
static void check_tls_works(rlock_client_t *h, rlock_client_t *w, const char *when) {
  rlock_lock_t *lh = th_lock(h, "tls:re"), *lw = th_lock(w, "tls:re");
  int rc = rlock_lock_acquire(lh, 1, 0, 60000, NULL);
  CHECK_MSG(rc == 0, "%s: acquire: %s: %s", when, rlock_err_name(rc), rlock_last_error());
  char owner[128];
  CHECK_EQ(th_hget_num(tls_srv, "tls:re", th_owner_id(h, 1, owner, sizeof owner)), 1);
  done_t d = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
  CHECK_OK(rlock_lock_acquire_async(lw, 2, RLOCK_WAIT_FOREVER, 60000, NULL, on_done, &d));
  CHECK_MSG(th_wait_until(subscribed, "redisson_lock__channel:{tls:re}", 20000), "%s: the waiter never subscribed",
            when);
  CHECK_OK(rlock_lock_release(lh, 1));
  CHECK_MSG(th_wait_until(called, &d, 20000), "%s: the waiter was not woken", when);
  CHECK_OK(d.status);
  CHECK_OK(rlock_lock_release(lw, 2));
  CHECK_EQ(th_cmd_int(tls_srv, "EXISTS", "tls:re", NULL), 0);
  rlock_lock_free(lh), rlock_lock_free(lw);
}

static rlock_client_t *tls_client(void) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = tls_srv->tls_url;
  o.tls_ca_file = th_tls_certs()->ca;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 200;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

TEST(tls_reconnect) {
  th_server_opts_t so = {.tls = 1};
  tls_srv = th_server_start(&so);
  rlock_client_t *h = tls_client(), *w = tls_client();
  check_tls_works(h, w, "first connection");

  since_t sh = {h, stats(h).reconnects}, sw = {w, stats(w).reconnects};
  /* the raw client is on the plain port: SKIPME spares it, every TLS connection goes */
  th_reply_free(th_cmd(tls_srv, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", NULL));
  th_reply_free(th_cmd(tls_srv, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "pubsub", NULL));
  CHECK_MSG(th_wait_until(reconnected, &sh, 10000) && th_wait_until(reconnected, &sw, 10000),
            "no TLS reconnect after CLIENT KILL");
  check_tls_works(h, w, "after CLIENT KILL");

  sh.reconnects = stats(h).reconnects, sw.reconnects = stats(w).reconnects;
  th_server_restart(tls_srv);
  CHECK_MSG(th_wait_until(reconnected, &sh, 10000) && th_wait_until(reconnected, &sw, 10000),
            "no TLS reconnect after the restart");
  check_tls_works(h, w, "after the restart");
  rlock_client_free(h), rlock_client_free(w);
  th_server_stop(tls_srv);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  RUN(cert_without_key);
  RUN(sni_sent);
  RUN(tls_reconnect);
  return th_done();
}
