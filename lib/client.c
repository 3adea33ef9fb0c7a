/* client.c -- the client: options, the I/O thread and its event loop, the
 * submit queue from user threads (mutex + eventfd wake-up; the I/O thread
 * takes the whole queue at once, so requests of many threads leave in one
 * write), clean shutdown, and the lock-lost callback. */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <openssl/err.h>

RLOCK_API void rlock_options_init(rlock_options_t *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->url = "redis://127.0.0.1:6379";
  o->tls_verify = 1;
  o->connect_timeout_ms = 3000;
  o->command_timeout_ms = 3000;
  o->watchdog_timeout_ms = 30000;
  o->reconnect_min_ms = 100;
  o->reconnect_max_ms = 5000;
  o->retry_attempts = 3;
}

int64_t client_latch_ttl(const client_t *cl) {
  int64_t t = cl->opt.command_timeout_ms * (cl->opt.retry_attempts + 2);
  return t < 10000 ? 10000 : t;
}

/* Threads keep Redisson's "<client id>:<thread id>"; explicit owners get
 * "<client id>:owner-<n>", so owner 1234 and thread 1234 never mix. */
size_t client_owner_id(const client_t *cl, uint64_t owner, char *buf) {
  memcpy(buf, cl->id, 36);
  buf[36] = ':';
  if (owner & RLOCK_OWNER_THREAD) return 37 + rlock__u64toa(owner & ~RLOCK_OWNER_THREAD, buf + 37);
  memcpy(buf + 37, "owner-", 6);
  return 43 + rlock__u64toa(owner, buf + 43);
}

void client_lost(client_t *cl, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason) {
  pthread_mutex_lock(&cl->cbmu);
  rlock_lost_cb cb = cl->lost_cb;
  void *arg = cl->lost_arg;
  pthread_mutex_unlock(&cl->cbmu);
  if (cb) cb(name, len, owner, reason, arg);
}

RLOCK_API void rlock_client_on_lost(rlock_client_t *cl, rlock_lost_cb cb, void *arg) {
  if (!cl) return;
  pthread_mutex_lock(&cl->cbmu);
  cl->lost_cb = cb;
  cl->lost_arg = arg;
  pthread_mutex_unlock(&cl->cbmu);
}

/* ------------------------------------------------------------ routing */

/* The one place that picks the connection for a request about `key`. Today a
 * client talks to one node; Cluster will route by names_slot(key) to the
 * node that owns the slot (and follow MOVED/ASK), Sentinel to the current
 * master: the lock objects above never change. key may be NULL (any node). */
void client_send(client_t *cl, const char *key, size_t klen, req_t *r) {
  (void)key;
  (void)klen;
  conn_send(&cl->cmd, r);
}

/* ------------------------------------------------------------ latch clean-up */

#define DEL_BATCH 128
#define DEL_DELAY_MS 20

void client_queue_del(client_t *cl, const char *key, size_t len) {
  if (cl->ndels == cl->capdels) {
    size_t cap = cl->capdels ? cl->capdels * 2 : 64;
    bytes_t *d = realloc(cl->dels, cap * sizeof *d);
    if (!d) return;
    cl->dels = d;
    cl->capdels = cap;
  }
  char *p = rlock__strndup(key, len);
  if (!p) return;
  cl->dels[cl->ndels].p = p;
  cl->dels[cl->ndels++].n = len;
  if (cl->ndels == 1 && cl->del_timer) {
    struct timeval tv = {0, DEL_DELAY_MS * 1000};
    evtimer_add(cl->del_timer, &tv);
  }
}

static void send_dels(client_t *cl) {
  if (cl->del_timer) evtimer_del(cl->del_timer);
  if (cl->ndels && cl->cmd.state != CS_CLOSED) {
    size_t n = cl->ndels + 1;
    const char **argv = malloc(n * sizeof *argv);
    size_t *lens = malloc(n * sizeof *lens);
    if (argv && lens) {
      argv[0] = "DEL", lens[0] = 3;
      for (size_t i = 0; i < cl->ndels; i++) argv[i + 1] = cl->dels[i].p, lens[i + 1] = cl->dels[i].n;
      req_t *r = req_new((int)n, argv, lens, cl->opt.command_timeout_ms, NULL, NULL);
      if (r) conn_send(&cl->cmd, r); /* fire and forget: the latches expire anyway */
    }
    free(argv);
    free(lens);
  }
  for (size_t i = 0; i < cl->ndels; i++) free(cl->dels[i].p);
  cl->ndels = 0;
}

static void del_timer_cb(evutil_socket_t fd, short what, void *arg) { send_dels(arg); }

/* End of a pass of the loop. Latch keys are deleted in one DEL of many keys,
 * sent when enough have gathered or DEL_DELAY_MS after the first: they are
 * dead weight with a TTL, not worth a command (or a write) each. */
void client_flush(client_t *cl) {
  if (cl->ndels >= DEL_BATCH) send_dels(cl);
  if (cl->batch_wrote) {
    stat_add(cl, ST_WRITES, 1);
    cl->batch_wrote = false;
    conn_flush(&cl->cmd);
  }
}

/* ------------------------------------------------------------ I/O thread */

static void shutdown_engine(client_t *cl) {
  /* Order matters: closing the command connection completes every request in
   * flight (their ops finish with RLOCK_ECLOSED); then the parked ops. */
  conn_close(&cl->cmd);
  op_fail_all(cl, RLOCK_ECLOSED);
  pubsub_close(&cl->ps);
  watchdog_close(&cl->wd);
  handoff_clear(cl);
  send_dels(cl); /* the command connection is closed: just frees them */
  if (cl->del_timer) event_free(cl->del_timer);
  cl->del_timer = NULL;
  free(cl->dels);
  cl->dels = NULL;
  cl->ndels = 0;
  event_base_loopbreak(cl->base);
}

/* Everything submitted so far, oldest first. */
static op_t *take_submitted(client_t *cl) {
  op_t *op = atomic_exchange(&cl->submitted, NULL), *fifo = NULL;
  while (op) {
    op_t *next = op->next;
    op->next = fifo;
    fifo = op;
    op = next;
  }
  return fifo;
}

static void wake_cb(evutil_socket_t fd, short what, void *arg) {
  client_t *cl = arg;
  uint64_t v;
  if (read(cl->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN) { /* nothing to do */
  }
  bool closing = atomic_load(&cl->closing);
  op_t *op = take_submitted(cl);
  while (op) {
    op_t *next = op->next;
    op->next = NULL;
    if (closing) {
      rlock__set_msg("client closed");
      op_finish(op, RLOCK_ECLOSED, 0, NULL, 0);
    } else {
      op_start(op);
    }
    op = next;
  }
  if (closing) shutdown_engine(cl);
  else client_flush(cl);
}

static void start_result(client_t *cl, int status, const char *msg) {
  pthread_mutex_lock(&cl->smu);
  if (cl->start_status == 1) {
    cl->start_status = status;
    snprintf(cl->start_msg, sizeof cl->start_msg, "%s", msg ? msg : "");
    pthread_cond_broadcast(&cl->scond);
  }
  pthread_mutex_unlock(&cl->smu);
}

static void cmd_ready(conn_t *c) {
  client_t *cl = c->cl;
  start_result(cl, 0, NULL);
  if (cl->wd.holds.count) watchdog_renew_now(&cl->wd); /* after a reconnect: find lost holds now */
}

static void cmd_error(conn_t *c, int err, const char *msg) {
  if (!c->ever_ready) start_result(c->cl, err, msg);
}

static void *io_main(void *arg) {
  client_t *cl = arg;
  conn_start(&cl->cmd);
  conn_start(&cl->ps.conn);
  event_base_dispatch(cl->base);
  return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static int setup_tls(client_t *cl) {
  cl->ssl_ctx = SSL_CTX_new(TLS_client_method());
  if (!cl->ssl_ctx) return rlock__fail(RLOCK_ETLS, "SSL_CTX_new failed");
  SSL_CTX_set_min_proto_version(cl->ssl_ctx, TLS1_2_VERSION);
  if (cl->opt.tls_verify) {
    SSL_CTX_set_verify(cl->ssl_ctx, SSL_VERIFY_PEER, NULL);
    int ok = cl->s_ca ? SSL_CTX_load_verify_locations(cl->ssl_ctx, cl->s_ca, NULL)
                      : SSL_CTX_set_default_verify_paths(cl->ssl_ctx);
    if (ok != 1) return rlock__fail(RLOCK_ETLS, "cannot load CA file %s", cl->s_ca ? cl->s_ca : "(system)");
  }
  if (cl->s_cert && SSL_CTX_use_certificate_chain_file(cl->ssl_ctx, cl->s_cert) != 1)
    return rlock__fail(RLOCK_ETLS, "cannot load client certificate %s", cl->s_cert);
  if (cl->s_key && SSL_CTX_use_PrivateKey_file(cl->ssl_ctx, cl->s_key, SSL_FILETYPE_PEM) != 1)
    return rlock__fail(RLOCK_ETLS, "cannot load client key %s", cl->s_key);
  return 0;
}

/* A duration option: min..RLOCK_DURATION_MAX ms. */
static int check_ms(const char *name, int64_t v, int64_t min) {
  if (v < min || v > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "%s is %lld ms (allowed: %lld to %lld)", name, (long long)v,
                       (long long)min, (long long)RLOCK_DURATION_MAX);
  return 0;
}

static int validate(const rlock_options_t *o) {
  if (check_ms("connect_timeout_ms", o->connect_timeout_ms, 1) ||
      check_ms("command_timeout_ms", o->command_timeout_ms, 1) ||
      check_ms("watchdog_timeout_ms", o->watchdog_timeout_ms, 3) ||
      check_ms("reconnect_min_ms", o->reconnect_min_ms, 1) ||
      check_ms("reconnect_max_ms", o->reconnect_max_ms, 1))
    return RLOCK_EINVAL;
  if (o->reconnect_max_ms < o->reconnect_min_ms)
    return rlock__fail(RLOCK_EINVAL, "reconnect_min_ms must be <= reconnect_max_ms");
  if (o->retry_attempts < 0 || o->retry_attempts > 100)
    return rlock__fail(RLOCK_EINVAL, "retry_attempts must be 0..100");
  if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL))
    return rlock__fail(RLOCK_EINVAL, "tls_cert_file and tls_key_file go together");
  return 0;
}

static char *dup_or_null(const char *s, bool *fail) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *fail = true;
  return d;
}

static void client_destroy(client_t *cl) {
  if (cl->wake_ev) event_free(cl->wake_ev);
  if (cl->base) event_base_free(cl->base);
  if (cl->wake_fd >= 0) close(cl->wake_fd);
  if (cl->ssl_ctx) SSL_CTX_free(cl->ssl_ctx);
  url_free(&cl->url);
  free(cl->s_url), free(cl->s_name), free(cl->s_ca), free(cl->s_cert), free(cl->s_key), free(cl->s_sni);
  pthread_mutex_destroy(&cl->smu);
  pthread_mutex_destroy(&cl->cbmu);
  pthread_cond_destroy(&cl->scond);
  free(cl);
}

static void stop_thread(client_t *cl) {
  atomic_store(&cl->closing, true);
  uint64_t one = 1;
  if (write(cl->wake_fd, &one, sizeof one) < 0) { /* the eventfd cannot be full here */
  }
  pthread_join(cl->thread, NULL);
  /* A call that raced with the close (a misuse, but no hang): fail it. */
  rlock__set_msg("client closed");
  for (op_t *op = take_submitted(cl), *next; op; op = next) {
    next = op->next;
    op_finish(op, RLOCK_ECLOSED, 0, NULL, 0);
  }
}

RLOCK_API int rlock_client_new(rlock_client_t **out, const rlock_options_t *opts) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!opts) return rlock__fail(RLOCK_EINVAL, "options are NULL (start from rlock_options_init)");
  rlock_options_t defaults;
  rlock_options_init(&defaults);
  int rc = validate(opts);
  if (rc) return rc;
  script_init();
  client_t *cl = calloc(1, sizeof *cl);
  if (!cl) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  cl->wake_fd = -1;
  pthread_mutex_init(&cl->smu, NULL);
  pthread_mutex_init(&cl->cbmu, NULL);
  pthread_cond_init(&cl->scond, NULL);
  cl->opt = *opts;
  bool fail = false;
  cl->s_url = dup_or_null(opts->url ? opts->url : defaults.url, &fail);
  cl->s_name = dup_or_null(opts->client_name ? opts->client_name : "rlock", &fail);
  cl->s_ca = dup_or_null(opts->tls_ca_file, &fail);
  cl->s_cert = dup_or_null(opts->tls_cert_file, &fail);
  cl->s_key = dup_or_null(opts->tls_key_file, &fail);
  cl->s_sni = dup_or_null(opts->tls_server_name, &fail);
  if (fail) {
    client_destroy(cl);
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  cl->opt.url = cl->s_url;
  if ((rc = url_parse(&cl->url, cl->s_url)) || (cl->url.kind == URL_TLS && (rc = setup_tls(cl)))) {
    client_destroy(cl);
    return rc;
  }
  rlock__uuid(cl->id);
  rlock__prng_seed(&cl->prng);
  cl->base = event_base_new();
  cl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!cl->base || cl->wake_fd < 0) {
    client_destroy(cl);
    return rlock__fail(RLOCK_ESYS, "cannot create the event loop: %s", strerror(errno));
  }
  cl->wake_ev = event_new(cl->base, cl->wake_fd, EV_READ | EV_PERSIST, wake_cb, cl);
  if (!cl->wake_ev || event_add(cl->wake_ev, NULL) || conn_init(&cl->cmd, cl, CONN_CMD) ||
      pubsub_init(&cl->ps, cl) || watchdog_init(&cl->wd, cl)) {
    client_destroy(cl); /* events belong to the base; freed with it */
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  cl->del_timer = evtimer_new(cl->base, del_timer_cb, cl);
  cl->cmd.on_ready = cmd_ready;
  cl->cmd.on_error = cmd_error;
  cl->start_status = 1;
  /* The I/O thread starts with every signal blocked: the application's
   * signals go to its own threads, and a write to a connection the server
   * closed gives EPIPE there instead of a SIGPIPE that would kill the process. */
  sigset_t all, caller;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &caller);
  rc = pthread_create(&cl->thread, NULL, io_main, cl);
  pthread_sigmask(SIG_SETMASK, &caller, NULL);
  if (rc) {
    conn_close(&cl->cmd);
    pubsub_close(&cl->ps);
    watchdog_close(&cl->wd);
    client_destroy(cl);
    return rlock__fail(RLOCK_ESYS, "cannot start the I/O thread: %s", strerror(rc));
  }
  pthread_mutex_lock(&cl->smu);
  while (cl->start_status == 1) pthread_cond_wait(&cl->scond, &cl->smu);
  rc = cl->start_status;
  char msg[256];
  snprintf(msg, sizeof msg, "%s", cl->start_msg);
  pthread_mutex_unlock(&cl->smu);
  if (rc) {
    stop_thread(cl);
    client_destroy(cl);
    return rlock__fail(rc, "%s", msg[0] ? msg : rlock_strerror(rc));
  }
  *out = cl;
  return 0;
}

RLOCK_API void rlock_client_free(rlock_client_t *cl) {
  if (!cl) return;
  if (pthread_equal(pthread_self(), cl->thread)) return; /* documented misuse: refuse, don't crash */
  stop_thread(cl);
  client_destroy(cl);
}

RLOCK_API const char *rlock_client_id(const rlock_client_t *cl) { return cl ? cl->id : ""; }

RLOCK_API void rlock_client_stats(rlock_client_t *cl, rlock_stats_t *o) {
  if (!cl || !o) return;
  uint64_t v[ST_COUNT];
  for (int i = 0; i < ST_COUNT; i++) v[i] = atomic_load_explicit(&cl->st[i], memory_order_relaxed);
  o->commands_sent = v[ST_COMMANDS];
  o->writes = v[ST_WRITES];
  o->scripts_sent = v[ST_SCRIPTS];
  o->noscript_fallbacks = v[ST_NOSCRIPT];
  o->subscribes = v[ST_SUBSCRIBES];
  o->unsubscribes = v[ST_UNSUBSCRIBES];
  o->messages = v[ST_MESSAGES];
  o->acquire_attempts = v[ST_ATTEMPTS];
  o->renewals = v[ST_RENEWALS];
  o->renewed_locks = v[ST_RENEWED];
  o->reconnects = v[ST_RECONNECTS];
  o->timeouts = v[ST_TIMEOUTS];
  o->locks_lost = v[ST_LOST];
  o->held = v[ST_HELD];
}

/* ------------------------------------------------------------ submitting */

int client_submit(client_t *cl, op_t *op) {
  if (atomic_load(&cl->closing)) return rlock__fail(RLOCK_ECLOSED, "client closed");
  op_t *head = atomic_load(&cl->submitted);
  do
    op->next = head;
  while (!atomic_compare_exchange_weak(&cl->submitted, &head, op));
  bool was_empty = head == NULL;
  if (was_empty) {
    uint64_t one = 1;
    if (write(cl->wake_fd, &one, sizeof one) < 0) { /* counter overflow is impossible here */
    }
  }
  return 0;
}

bool client_on_io_thread(const client_t *cl) { return pthread_equal(pthread_self(), cl->thread); }
