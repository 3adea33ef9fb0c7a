/* client.c -- the client: options, the I/O thread and its event loop, the
 * submit queue from user threads (a lock-free stack + eventfd wake-up; the
 * I/O thread takes the whole queue at once, so requests of many threads leave in one
 * write), clean shutdown (the last latch DELs are sent and awaited, briefly),
 * use from a forked child refused, and the lock-lost callback. */
#include "client.h"
#include "op.h"
#include "hooks.h"
#include "replica_sync.h"
#include "resolve.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <event2/dns.h>

/* TEST ONLY (hooks.h). */
#ifdef RLOCK_TEST_HOOKS
void (*rlock__test_pass_hook)(client_t *cl);
void (*rlock__test_submit_hook)(client_t *cl);
void (*rlock__test_call_hook)(client_t *cl, int where);
int64_t rlock__test_wall_offset_us;
#endif

int64_t rlock__client_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
#ifdef RLOCK_TEST_HOOKS
  us += rlock__test_wall_offset_us;
#endif
  return us / 1000;
}

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
  o->ping_interval_ms = 5000;
  o->dead_after_timeouts = 5;
  o->tcp_keepalive_ms = 60000;
  o->replica_sync = RLOCK_REPLICA_SYNC_ONE;
  o->replica_sync_timeout_ms = 0; /* 1000 ms, or half the command timeout if shorter */
  o->fast_path = 1;
  o->fair_waiter_timeout_ms = 10000;
  o->semaphore_fair_after_ms = 2;
}

int64_t rlock__client_latch_ttl(const client_t *cl) {
  int64_t t = cl->opt.command_timeout_ms * (cl->opt.retry_attempts + 2);
  return t < 10000 ? 10000 : t;
}

int64_t rlock__client_waiter_slot(const client_t *cl) {
  return cl->opt.fair_waiter_timeout_ms > 0 ? cl->opt.fair_waiter_timeout_ms : 10000;
}

/* Threads keep Redisson's "<client id>:<thread id>"; explicit owners get
 * "<client id>:owner-<n>", so owner 1234 and thread 1234 never mix. */
size_t rlock__client_owner_id(const client_t *cl, uint64_t owner, char *buf) {
  memcpy(buf, cl->id, 36);
  buf[36] = ':';
  if (owner & RLOCK_OWNER_THREAD) return 37 + rlock__tid_dec(owner & ~RLOCK_OWNER_THREAD, buf + 37);
  memcpy(buf + 37, "owner-", 6);
  return 43 + rlock__u64toa(owner, buf + 43);
}

void rlock__client_lost(client_t *cl, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason) {
  rlock__fast_bump(cl, name, len);
  pthread_mutex_lock(&cl->cbmu);
  rlock_lost_cb cb = cl->lost_cb;
  void *arg = cl->lost_arg;
  pthread_mutex_unlock(&cl->cbmu);
  if (cb) cb(name, len, owner, reason, arg);
}

RLOCK_API void rlock_client_on_lost(rlock_client_t *cl, rlock_lost_cb cb, void *arg) {
  if (!cl || rlock__client_check_fork(cl)) return; /* a forked child: cbmu may be held for ever */
  if (!rlock__client_enter(cl)) return;            /* closing */
  pthread_mutex_lock(&cl->cbmu);
  cl->lost_cb = cb;
  cl->lost_arg = arg;
  pthread_mutex_unlock(&cl->cbmu);
  rlock__client_leave(cl);
}

/* What the client's connections call back (conn_up_t): conn.c knows the
 * client only through this table, and the deployment's part of a
 * connection's life only through the client. */
static void up_pass_begin(conn_env_t *e) { rlock__client_pass_begin(rlock__client_of_env(e)); }
static void up_pass_end(conn_env_t *e) { rlock__client_pass_end(rlock__client_of_env(e)); }
static void up_flush(conn_env_t *e) { rlock__client_flush(rlock__client_of_env(e)); }
static void up_write_batch(conn_env_t *e) { rlock__client_write_batch(rlock__client_of_env(e)); }
static void up_cmd_ready(conn_env_t *e) { rlock__fast_cmd_ready(rlock__client_of_env(e)); }
static int up_sync_decide(conn_env_t *e, const conn_t *c, req_t *r) {
  return rlock__client_sync_decide(rlock__client_of_env(e), c, r);
}
static bool up_before_connect(conn_env_t *e, conn_t *c) {
  client_t *cl = rlock__client_of_env(e);
  return !cl->topo->before_connect || cl->topo->before_connect(cl, c);
}
static void up_handshake(const conn_env_t *e, const conn_t *c, hs_list_t *hs) {
  client_t *cl = rlock__client_of_env(e);
  if (cl->topo->handshake) cl->topo->handshake(cl, c, hs);
}
static int up_handshake_check(conn_env_t *e, const rlock_reply_t *reply, char *msg, size_t n) {
  client_t *cl = rlock__client_of_env(e);
  return cl->topo->handshake_check(cl, reply, msg, n);
}
static bool up_on_error_reply(conn_env_t *e, conn_t *c, req_t *r, const rlock_reply_t *err) {
  client_t *cl = rlock__client_of_env(e);
  return cl->topo->on_error_reply(cl, c, r, err);
}
const conn_up_t rlock__client_conn_up = {
    .pass_begin = up_pass_begin,
    .pass_end = up_pass_end,
    .flush = up_flush,
    .write_batch = up_write_batch,
    .cmd_ready = up_cmd_ready,
    .sync_decide = up_sync_decide,
    .script_body = rlock__script_body,
    .script_sha = rlock__script_sha,
    .script_to_eval = rlock__script_to_eval,
    .before_connect = up_before_connect,
    .handshake = up_handshake,
    .handshake_check = up_handshake_check,
    .on_error_reply = up_on_error_reply,
};

void rlock__client_net_init(client_t *cl) {
  conn_env_t *e = &cl->net;
  e->up = &rlock__client_conn_up;
  e->opt = &cl->opt;
  e->url = &cl->url;
  e->name = cl->s_name;
  e->sni = cl->s_sni;
  e->cert = cl->s_cert;
  e->base = cl->base;
  e->ssl_ctx = cl->ssl_ctx;
  e->cmd = &cl->cmd;
  e->st = cl->st;
}

/* ------------------------------------------------------------ routing */

/* The one place that picks the connection for a request about `key`: the
 * request keeps the key's slot, the topology (lib/topology/) picks the node
 * and connection. One server today; Cluster routes by the slot (and follows
 * MOVED/ASK through its redirect hook), Sentinel to the current master: the
 * lock objects above never change. key may be NULL (any node). */
conn_t *rlock__client_send(client_t *cl, const char *key, size_t klen, req_t *r) {
  r->slot = key ? rlock__names_slot(key, klen) : -1;
  conn_t *c = cl->topo->route(cl, r);
  rlock__conn_send(c, r);
  return c;
}

void rlock__client_linger_check(client_t *cl) {
  if (cl->draining && cl->linger && cl->dels_inflight == 0 && cl->undos_inflight == 0)
    event_active(cl->linger, EV_TIMEOUT, 0);
}

/* The pass's counted writes on the command connection leave now, in one
 * write (counted in the stats). */
void rlock__client_write_batch(client_t *cl) {
  stat_add(cl, ST_WRITES, 1);
  cl->net.batch_wrote = false;
  rlock__conn_flush(&cl->cmd);
}

/* End of a pass of the loop. Latch keys are deleted in one DEL of many keys,
 * sent when enough have gathered or shortly after the first (latch_batch.c): they are
 * dead weight with a TTL, not worth a command (or a write) each. */
void rlock__client_flush(client_t *cl) {
  if (cl->ndels >= RLOCK__DEL_BATCH) rlock__latch_send_dels(cl);
  if (cl->net.batch_wrote) rlock__client_write_batch(cl);
  if (cl->topo->flush) cl->topo->flush(cl);
  rlock__conn_flush(&cl->uc.conn);
}

/* ------------------------------------------------------------ I/O thread */

static void shutdown_engine(client_t *cl) {
  if (cl->shut) return;
  cl->shut = true;
  rlock__conn_flush(&cl->cmd); /* what the last pass queued (undos) leaves before the close */
  if (cl->topo->flush) cl->topo->flush(cl);
  /* Order matters: closing the command and user connections completes every
   * request in flight (ops that begin_close ended just free themselves; a
   * user command's op ends through its requests); then any op still active
   * (none after begin_close). */
  rlock__conn_close(&cl->cmd);
  if (cl->topo->close) cl->topo->close(cl); /* the deployment's own connections (shards, sentinels) */
  rlock__usercmd_close(&cl->uc);
  cl->lock_up->op_fail_all(cl, RLOCK_ECLOSED);
  cl->lock_up->op_index_free(cl);
  rlock__pubsub_close(&cl->ps);
  rlock__watchdog_close(&cl->wd);
  cl->lock_up->handoff_clear(cl);
  rlock__latch_send_dels(cl); /* the command connection is closed: just frees them */
  if (cl->del_timer) event_free(cl->del_timer);
  if (cl->linger) event_free(cl->linger);
  cl->del_timer = cl->linger = NULL;
  free(cl->dels);
  free(cl->delkeys);
  cl->dels = NULL;
  cl->delkeys = NULL;
  cl->ndels = cl->delkeys_n = cl->delkeys_cap = 0;
  event_base_loopbreak(cl->base);
}

static void linger_cb(evutil_socket_t fd, short what, void *arg) { shutdown_engine(arg); }

/* Closing. An acquire whose try may be on the server gets its undo (so its
 * hold is never left to nobody for a whole lease), then every op ends
 * (RLOCK_ECLOSED); the latch keys still queued for deletion are sent; the
 * DEL and the undos are awaited, at most min(command timeout,
 * CLOSE_LINGER_MS), so a short-lived process leaves no keys behind; then the
 * engine shuts down. */
#define CLOSE_LINGER_MS RLOCK__CLOSE_LINGER_MS
/* How long closing waits for the last DELs and undos: min(command timeout,
 * CLOSE_LINGER_MS), plus the WAIT timeout for each WAIT written on the
 * command connection: an undo sent behind a try's WAIT runs only once that
 * WAIT (and every WAIT before it) ends, and a connection closed before would
 * drop it (the hold would wait for its lease). WAITs not written (the
 * connection is down) hold nothing back: a dead server costs no more. */
static int64_t close_linger_ms(const client_t *cl) {
  int64_t ms = cl->opt.command_timeout_ms < CLOSE_LINGER_MS ? cl->opt.command_timeout_ms : CLOSE_LINGER_MS;
  return ms + rlock__conn_waits_written(&cl->cmd) * cl->opt.replica_sync_timeout_ms;
}

static void begin_close(client_t *cl) {
  RLOCK__ASSERT(rlock__client_on_io_thread(cl));
  if (cl->draining || cl->shut) return;
  /* every fast call ended before `stopping` (rlock__fast_close_wait; asserted
   * in rlock__fast_end): its posts and its op (an answer lost: undone) are
   * all here. fast.calls may still be up for a moment: a call inside that
   * counts its window now sees `closing` and takes it back (rlock__fast_begin) */
  cl->draining = true;
  rlock__conn_hold_end(&cl->cmd); /* the undos below must not wait for a renewal round */
  rlock__fast_drain(cl);          /* the fast calls' holds and latch keys, before the rest */
  rlock__set_msg("client closed");
  rlock__usercmd_close(&cl->uc); /* user commands end through their requests (ECLOSED) */
  cl->lock_up->op_undo_on_close(cl);
  cl->lock_up->op_fail_all(cl, RLOCK_ECLOSED);
  if (cl->cmd.state == CS_READY) rlock__latch_send_dels(cl);
  int64_t ms = close_linger_ms(cl);
  if ((cl->dels_inflight == 0 && cl->undos_inflight == 0) || !(cl->linger = evtimer_new(cl->base, linger_cb, cl))) {
    shutdown_engine(cl);
    return;
  }
  struct timeval tv;
  rlock__tv_from_ms(&tv, ms);
  evtimer_add(cl->linger, &tv);
  rlock__client_flush(cl);
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

/* Starts what was submitted (ends it once the client is stopping: an
 * acquire whose try may be on the server gets its undo first). */
static void run_submitted(client_t *cl) {
  RLOCK__ASSERT(rlock__client_on_io_thread(cl));
  bool stopping = atomic_load(&cl->stopping);
  op_t *op = take_submitted(cl);
  if (op) rlock__fast_drain(cl); /* the fast calls made before these ops come first */
  while (op) {
    op_t *next = op->next;
    op->next = NULL;
    if (stopping) {
      cl->lock_up->op_end_unstarted(op);
    } else {
      cl->lock_up->op_start(op);
    }
    op = next;
  }
}

void rlock__client_wake(client_t *cl) {
  uint64_t one = 1;
  if (write(cl->wake_fd, &one, sizeof one) < 0) { /* counter overflow is impossible here */
  }
}

/* The hand-off protocol, I/O thread side. A pass sets cl->awake first, and
 * ends by taking the stack until it stays empty once awake is cleared: a
 * push that saw awake set (and skipped the eventfd) is taken by that last
 * look; a push that comes after it sees awake clear and writes the eventfd.
 * Both steps are seq_cst (a store then a load on each side). At most
 * PASS_TAKES takes: threads that submit without pause would otherwise keep
 * the loop from reading replies and running timers; past that the pass
 * writes the eventfd itself, so the rest is taken at the loop's next turn. */
#define PASS_TAKES 4
void rlock__client_pass_begin(client_t *cl) {
  cl->net.in_pass = true;
  atomic_store(&cl->awake, true);
}

void rlock__client_pass_end(client_t *cl) {
  for (int takes = 1;; takes++) {
    run_submitted(cl);
    RLOCK__TEST_HOOK(rlock__test_pass_hook, cl); /* tests: a push right after the take */
    atomic_store(&cl->awake, false);
    if (!atomic_load(&cl->submitted)) break;
    if (takes == PASS_TAKES) {
      rlock__client_wake(cl);
      break;
    }
    atomic_store(&cl->awake, true);
  }
  rlock__fast_wake(cl); /* after awake is clear: fast calls' posts are applied within drain_ms */
  if (!cl->shut) rlock__client_flush(cl);
  cl->net.in_pass = false;
}

/* The eventfd is watched edge-triggered where the backend can (epoll): every
 * write is a new edge, so it is never read (its counter cannot reach its
 * limit of 2^64 - 2 writes). Level-triggered backends (EVENT_NOEPOLL) read it. */
static void wake_cb(evutil_socket_t fd, short what, void *arg) {
  client_t *cl = arg;
  uint64_t v;
  if (!cl->wake_et && read(cl->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN) { /* nothing to do */
  }
  rlock__client_pass_begin(cl);
  rlock__client_pass_end(cl);
  if (atomic_load(&cl->stopping)) begin_close(cl);
}

static void start_result(client_t *cl, int status, const char *msg) {
  if (cl->start_ev) evtimer_del(cl->start_ev); /* answered: the deadline is no longer needed */
  pthread_mutex_lock(&cl->smu);
  if (cl->start_status == 1) {
    cl->start_status = status;
    snprintf(cl->start_msg, sizeof cl->start_msg, "%s", msg ? msg : "");
    pthread_cond_broadcast(&cl->scond);
  }
  pthread_mutex_unlock(&cl->smu);
}

/* After a reconnect, the requests queued meanwhile wait until the renewal
 * round has asked about every hold (one server, Sentinel: the command
 * connection carries both): a hold the server lost (a restart without
 * persistence, a failover to a replica that lacked it) is reported before a
 * queued re-entry of it could take the lock afresh and hide the loss. */
static void cmd_before_pending(conn_t *c) {
  client_t *cl = rlock__client_of(c);
  c->hold_pending = !cl->topo->slots_matter && cl->wd.holds.count > 0 && !cl->draining;
}

static void cmd_on_ready(conn_t *c) {
  client_t *cl = rlock__client_of(c);
  if (!c->hold_pending) rlock__fast_cmd_ready(cl); /* else once the holds were checked */
  start_result(cl, 0, NULL);
  if (c->hold_pending) rlock__watchdog_check_now(&cl->wd);         /* ends with rlock__client_checked */
  else if (cl->wd.holds.count) rlock__watchdog_renew_now(&cl->wd); /* after a reconnect: find lost holds now */
}

void rlock__client_checked(client_t *cl) {
  if (!cl->cmd.hold_pending) return;
  rlock__conn_hold_end(&cl->cmd);
  if (cl->cmd.state == CS_READY) rlock__fast_cmd_ready(cl);
}

static void cmd_down(conn_t *c) { rlock__fast_cmd_down(rlock__client_of(c)); }

void rlock__client_start_note(client_t *cl, const char *msg) {
  if (cl->start_status == 1 && msg && msg[0]) snprintf(cl->start_last, sizeof cl->start_last, "%s", msg);
}

/* An attempt bounded by the same deadline answers first, with its own reason. */
#define START_GRACE_MS 100

/* rlock_client_new's bound under Sentinel: whatever attempt is under way (a Sentinel
 * question waiting its command timeout, a backoff between rounds, a node
 * refused for its role), the call answers once connect_timeout_ms (and START_GRACE_MS) passed. */
static void start_deadline_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  client_t *cl = arg;
  char msg[400];
  snprintf(msg, sizeof msg, "not connected within connect_timeout_ms (%lld ms)%s%.250s",
           (long long)cl->opt.connect_timeout_ms, cl->start_last[0] ? ": " : "", cl->start_last);
  start_result(cl, RLOCK_ECONNECT, msg);
}

static void cmd_error(conn_t *c, int err, const char *msg) {
  rlock__client_start_note(rlock__client_of(c), msg);
  /* the topology refused the node (Sentinel named one that is not a master
   * yet): mid-failover the promotion is on its way, so rlock_client_new asks again (the reconnect
   * asks Sentinel first) until its connect_timeout_ms has passed; the next
   * attempt (drop() arms it from backoff_ms after this call) comes no later
   * than that, so a long reconnect backoff does not put the answer off. */
  int64_t left = rlock__client_of(c)->start_deadline - rlock_now_ms();
  if (c->node_refused && left > 0) {
    if (!c->ever_ready && c->backoff_ms > left) c->backoff_ms = left;
    return;
  }
  if (!c->ever_ready) start_result(rlock__client_of(c), err, msg);
}

static void *io_main(void *arg) {
  client_t *cl = arg;
  rlock__conn_start(&cl->cmd);
  rlock__conn_start(&cl->ps.conn);
  event_base_dispatch(cl->base);
  rlock__resolve_close(&cl->net);
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
  if (cl->s_key && SSL_CTX_use_PrivateKey_file(cl->ssl_ctx, cl->s_key, SSL_FILETYPE_PEM) != 1) {
    unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    if (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH)
      return rlock__fail(RLOCK_ETLS, "client key %s does not match the certificate %s", cl->s_key,
                         cl->s_cert ? cl->s_cert : "");
    return rlock__fail(RLOCK_ETLS, "cannot load client key %s (not a readable PEM private key)", cl->s_key);
  }
  return 0;
}

/* A duration option: min..RLOCK_DURATION_MAX ms. */
static int check_ms(const char *name, int64_t v, int64_t min) {
  if (v < min || v > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "%s is %lld ms (allowed: %lld to %lld)", name, (long long)v, (long long)min,
                       (long long)RLOCK_DURATION_MAX);
  return 0;
}

/* The replica-sync policy, and WAIT's timeout below the command timeout: a
 * WAIT blocks the command connection that long, and a PING queued behind it
 * must still be answered within the command timeout. 0 is automatic
 * (sync_timeout_ms). */
static int validate_replica_sync(const rlock_options_t *o) {
  if (o->replica_sync < RLOCK_REPLICA_SYNC_OFF || o->replica_sync > RLOCK_REPLICA_SYNC_ALL)
    return rlock__fail(RLOCK_EINVAL, "replica_sync is %d (allowed: RLOCK_REPLICA_SYNC_OFF, _ONE, _MAJORITY, _ALL)",
                       o->replica_sync);
  if (o->replica_sync == RLOCK_REPLICA_SYNC_OFF || o->replica_sync_timeout_ms == 0) return 0; /* 0: automatic */
  if (check_ms("replica_sync_timeout_ms", o->replica_sync_timeout_ms, 0)) return RLOCK_EINVAL;
  if (o->replica_sync_timeout_ms >= o->command_timeout_ms)
    return rlock__fail(RLOCK_EINVAL,
                       "replica_sync_timeout_ms (%lld) must be less than command_timeout_ms (%lld): a WAIT blocks "
                       "the command connection that long",
                       (long long)o->replica_sync_timeout_ms, (long long)o->command_timeout_ms);
  return 0;
}

/* WAIT's timeout: the option, or by default 1000 ms (Redisson's), at most
 * half the command timeout. */
static int64_t sync_timeout_ms(const rlock_options_t *o) {
  if (o->replica_sync_timeout_ms > 0) return o->replica_sync_timeout_ms;
  int64_t half = o->command_timeout_ms / 2;
  return half < 1 ? 1 : half < 1000 ? half : 1000;
}

static int validate(const rlock_options_t *o) {
  if (check_ms("connect_timeout_ms", o->connect_timeout_ms, 1) ||
      check_ms("command_timeout_ms", o->command_timeout_ms, 1) ||
      check_ms("watchdog_timeout_ms", o->watchdog_timeout_ms, 3) ||
      check_ms("reconnect_min_ms", o->reconnect_min_ms, 1) || check_ms("reconnect_max_ms", o->reconnect_max_ms, 1) ||
      (o->fair_waiter_timeout_ms && check_ms("fair_waiter_timeout_ms", o->fair_waiter_timeout_ms, 100)) ||
      check_ms("semaphore_fair_after_ms", o->semaphore_fair_after_ms, 0))
    return RLOCK_EINVAL;
  if (o->reconnect_max_ms < o->reconnect_min_ms)
    return rlock__fail(RLOCK_EINVAL, "reconnect_min_ms must be <= reconnect_max_ms");
  if (o->retry_attempts < 0 || o->retry_attempts > 100)
    return rlock__fail(RLOCK_EINVAL, "retry_attempts must be 0..100");
  if (o->ping_interval_ms < 0) return rlock__fail(RLOCK_EINVAL, "ping_interval_ms must be >= 0 (0: off)");
  if (o->dead_after_timeouts < 0) return rlock__fail(RLOCK_EINVAL, "dead_after_timeouts must be >= 0 (0: never)");
  if (o->tcp_keepalive_ms < 0 || o->tcp_keepalive_ms > 32767000)
    return rlock__fail(RLOCK_EINVAL, "tcp_keepalive_ms must be 0 (off) to 32767000");
  if (validate_replica_sync(o)) return RLOCK_EINVAL;
  if (o->fast_path != 0 && o->fast_path != 1) return rlock__fail(RLOCK_EINVAL, "fast_path must be 0 or 1");
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
  /* nobody is inside any more (stop_thread; a client that never started has
   * had no caller): nothing touches this memory after it is freed */
  RLOCK__ASSERT(atomic_load(&cl->inside) == 0 && atomic_load(&cl->fast.calls) == 0);
  RLOCK__ASSERT(atomic_load(&cl->submitted) == NULL);
  if (cl->wake_ev) event_free(cl->wake_ev);
  if (cl->start_ev) event_free(cl->start_ev);
  if (cl->fast.drain_ev) event_free(cl->fast.drain_ev); /* before its base (fast.c) */
  cl->fast.drain_ev = NULL;
  if (cl->base) event_base_free(cl->base);
  if (cl->wake_fd >= 0) close(cl->wake_fd);
  if (cl->ssl_ctx) SSL_CTX_free(cl->ssl_ctx);
  rlock__url_free(&cl->url);
  free(cl->s_url), free(cl->s_name), free(cl->s_ca), free(cl->s_cert), free(cl->s_key), free(cl->s_sni);
  pthread_mutex_destroy(&cl->smu);
  pthread_mutex_destroy(&cl->cbmu);
  pthread_cond_destroy(&cl->scond);
  cl->lock_up->op_spares_free(cl);
  if (cl->fast.serial) rlock__fast_destroy(cl);
  free(cl);
}

/* Closing, on the freeing thread. 1. `closing`: every call that comes now
 * is refused (RLOCK_ECLOSED; rlock__client_enter), and so is a new op of a
 * call already inside, but for a fast call's op whose answer was lost (its
 * try may be on the server: it must reach the I/O thread, to be undone).
 * 2. The fast calls under way end: each either completes (its posts wait
 * for the drain) or hands its op to the I/O thread; one still waiting for
 * its answer after min(command timeout, CLOSE_LINGER_MS) has its connection
 * cut (its answer is lost: undone). 3. `stopping`: the I/O thread undoes
 * and ends what it has (begin_close) and stops. 4. The calls still inside
 * leave: a sync call's op was answered by the close, or is on the stack (a
 * push after the I/O thread's last take), answered here. A call touches
 * nothing of the client once it left; nothing is freed before every call
 * has left. */
static void stop_thread(client_t *cl) {
  atomic_store(&cl->closing, true);
  rlock__fast_close_wait(cl,
                         cl->opt.command_timeout_ms < CLOSE_LINGER_MS ? cl->opt.command_timeout_ms : CLOSE_LINGER_MS);
  atomic_store(&cl->stopping, true);
  rlock__client_wake(cl);
  pthread_join(cl->thread, NULL);
  for (;;) {
    /* a push comes before its caller's leave: with nobody inside when this
     * look began, the take below finds every push */
    bool last = atomic_load(&cl->inside) == 0;
    rlock__set_msg("client closed");
    for (op_t *op = take_submitted(cl), *next; op; op = next) {
      next = op->next;
      RLOCK__ASSERT(!op->fast_lost); /* pushed inside a fast call: taken by the I/O thread */
      cl->lock_up->op_finish(op, RLOCK_ECLOSED, 0, NULL, 0);
    }
    if (last) break;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

/* 8-4-4-4-12 hex digits (either case), as rlock__uuid writes. */
static bool client_id_valid(const char *id) {
  for (int i = 0; i < 36; i++) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? id[i] != '-' : !isxdigit((unsigned char)id[i])) return false;
  }
  return id[36] == '\0';
}

/* rlock_client_new (lock.c) with the lock layer's table. */
int rlock__client_create(rlock_client_t **out, const rlock_options_t *opts, const lock_up_t *up) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!opts) return rlock__fail(RLOCK_EINVAL, "options are NULL (start from rlock_options_init)");
  rlock_options_t defaults;
  rlock_options_init(&defaults);
  int rc = validate(opts);
  if (rc) return rc;
  if (opts->client_id && !client_id_valid(opts->client_id))
    return rlock__fail(RLOCK_EINVAL, "client_id is not a 36-character UUID such as rlock_client_id gives");
  rlock__script_init();
  client_t *cl = calloc(1, sizeof *cl);
  if (!cl) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  cl->lock_up = up;
  cl->wake_fd = -1;
  pthread_mutex_init(&cl->smu, NULL);
  pthread_mutex_init(&cl->cbmu, NULL);
  pthread_cond_init(&cl->scond, NULL);
  cl->opt = *opts;
  cl->opt.replica_sync_timeout_ms = sync_timeout_ms(opts);
  rlock__dec_set(&cl->dec_latch_ttl, rlock__client_latch_ttl(cl));
  rlock__dec_set(&cl->dec_lease, cl->opt.watchdog_timeout_ms);
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
  if ((rc = rlock__url_parse(&cl->url, cl->s_url)) || (cl->url.kind == URL_TLS && (rc = setup_tls(cl)))) {
    client_destroy(cl);
    return rc;
  }
  cl->topo = rlock__topology_for(&cl->url);
  if (opts->client_id) memcpy(cl->id, opts->client_id, 36), cl->id[36] = '\0';
  else rlock__uuid(cl->id);
  rlock__prng_seed(&cl->prng);
  cl->fork_gen = rlock__fork_generation();
  cl->base = event_base_new();
  cl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!cl->base || cl->wake_fd < 0) {
    client_destroy(cl);
    return rlock__fail(RLOCK_ESYS, "cannot create the event loop: %s", strerror(errno));
  }
  cl->wake_et = (event_base_get_features(cl->base) & EV_FEATURE_ET) != 0;
  cl->wake_ev = event_new(cl->base, cl->wake_fd, EV_READ | EV_PERSIST | (cl->wake_et ? EV_ET : 0), wake_cb, cl);
  rlock__client_net_init(cl);
  if (!cl->wake_ev || event_add(cl->wake_ev, NULL) || rlock__conn_init(&cl->cmd, &cl->net, CONN_CMD) ||
      rlock__pubsub_init(&cl->ps, cl) || rlock__usercmd_init(&cl->uc, cl) || rlock__watchdog_init(&cl->wd, cl) ||
      rlock__fast_init(cl)) {
    client_destroy(cl); /* events belong to the base; freed with it */
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  cl->del_timer = evtimer_new(cl->base, rlock__latch_timer_cb, cl);
  cl->cmd.on_ready = cmd_on_ready;
  cl->cmd.before_pending = cmd_before_pending;
  cl->cmd.on_down = cmd_down;
  cl->cmd.on_error = cmd_error;
  cl->start_status = 1;
  cl->start_deadline = rlock_now_ms() + cl->opt.connect_timeout_ms;
  /* Sentinel: the attempt's own bound (connect_deadline) does not cover the
   * questions to the sentinels and their backoffs; one server has one
   * attempt, Cluster one per seed (each within connect_timeout_ms, rlock.h) */
  if (cl->url.sentinel) cl->start_ev = evtimer_new(cl->base, start_deadline_cb, cl);
  if (cl->start_ev) {
    struct timeval tv;
    rlock__tv_from_ms(&tv, cl->opt.connect_timeout_ms + START_GRACE_MS);
    evtimer_add(cl->start_ev, &tv);
  }
  if (cl->topo->init && cl->topo->init(cl)) {
    rlock__conn_close(&cl->cmd);
    rlock__pubsub_close(&cl->ps);
    rlock__usercmd_close(&cl->uc);
    rlock__watchdog_close(&cl->wd);
    client_destroy(cl);
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  /* The I/O thread starts with every signal blocked: the application's
   * signals go to its own threads, and a write to a connection the server
   * closed gives EPIPE there instead of a SIGPIPE that would kill the process. */
  sigset_t all, caller;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &caller);
  rc = pthread_create(&cl->thread, NULL, io_main, cl);
  pthread_sigmask(SIG_SETMASK, &caller, NULL);
  if (rc) {
    rlock__conn_close(&cl->cmd);
    if (cl->topo->close) cl->topo->close(cl);
    rlock__pubsub_close(&cl->ps);
    rlock__usercmd_close(&cl->uc);
    rlock__watchdog_close(&cl->wd);
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

/* The client's I/O thread exists only in the process that created it. */
static bool in_forked_child(const client_t *cl) { return cl->fork_gen != rlock__fork_generation(); }

RLOCK_API void rlock_client_free(rlock_client_t *cl) {
  if (!cl) return;
  if (in_forked_child(cl)) return;                       /* touch nothing: the connections are the parent's */
  if (pthread_equal(pthread_self(), cl->thread)) return; /* documented misuse: refuse, don't crash */
  stop_thread(cl);
  client_destroy(cl);
}

RLOCK_API const char *rlock_client_id(const rlock_client_t *cl) { return cl ? cl->id : ""; }

RLOCK_API void rlock_client_stats(rlock_client_t *cl, rlock_stats_t *o) {
  if (!cl || !o) return;
  uint64_t v[ST_COUNT] = {0};
  /* refused (free began): zeros, and nothing of cl is touched (free may
   * end the moment the refusal left). A forked child: zeros, before any
   * mutex (statmu may be held for ever there: the drain's, at the fork) */
  if (!rlock__client_check_fork(cl) && rlock__client_enter(cl)) {
    pthread_mutex_lock(&cl->fast.statmu); /* not in the middle of a fast post's drain (fast.c) */
    for (int i = 0; i < ST_COUNT; i++) v[i] = atomic_load_explicit(&cl->st[i], memory_order_relaxed);
    pthread_mutex_unlock(&cl->fast.statmu);
    rlock__client_leave(cl);
  }
  memset(o, 0, sizeof *o); /* the reserved room too */
#define ST_COPY(name, field) o->field = v[ST_##name];
  RLOCK_STATS_MAP(ST_COPY)
#undef ST_COPY
}

/* ------------------------------------------------------------ submitting */

/* Checked before a call takes anything of the client (its spare ops sit
 * behind a mutex another thread may have held at the fork: locked for ever
 * in the child). */
int rlock__client_check_fork(const client_t *cl) {
  if (in_forked_child(cl))
    return rlock__fail(RLOCK_ESYS, "client used in a forked child: create a new client after fork");
  return 0;
}

bool rlock__client_enter(client_t *cl) {
  atomic_fetch_add(&cl->inside, 1); /* seq_cst both sides: free sees us, or we see closing */
  if (!atomic_load(&cl->closing)) return true;
  atomic_fetch_sub(&cl->inside, 1);
  RLOCK__TEST_HOOK(rlock__test_call_hook, cl, RLOCK__AT_REFUSED); /* tests: free may end now */
  return false;
}

void rlock__client_leave(client_t *cl) {
  RLOCK__ASSERT(atomic_load(&cl->inside) > 0);
  atomic_fetch_sub(&cl->inside, 1);
}

int rlock__client_submit(client_t *cl, op_t *op) {
  /* the caller is inside (api.c), or the I/O thread (a callback) */
  RLOCK__ASSERT(atomic_load(&cl->inside) > 0 || rlock__client_on_io_thread(cl));
  int rc = rlock__client_check_fork(cl);
  if (rc) return rc;
  /* closing: refused, but for a fast call's op with its answer lost (its
   * try may be on the server: the I/O thread undoes it; stop_thread) */
  if (atomic_load(&cl->closing) && !op->fast_lost) return rlock__fail(RLOCK_ECLOSED, "client closed");
  if (op->lock && cl->fast.on) { /* the name is busy for the fast path until op finishes */
    op->fslot = (int)rlock__fast_slot(op->lock->name, op->lock->len);
    rlock__fast_busy(cl, op->fslot, 1);
  }
  op_t *head = atomic_load(&cl->submitted);
  do op->next = head;
  while (!atomic_compare_exchange_weak(&cl->submitted, &head, op));
  bool was_empty = head == NULL;
  RLOCK__TEST_HOOK(rlock__test_submit_hook, cl);                     /* tests: a free between the push and the wake */
  if (was_empty && !atomic_load(&cl->awake)) rlock__client_wake(cl); /* the I/O thread may sleep */
  return 0;                                                          /* op may be done and freed by now */
}

bool rlock__client_on_io_thread(const client_t *cl) { return pthread_equal(pthread_self(), cl->thread); }
