/* conn.c -- one RESP connection to one Redis node, driven by the I/O thread.
 *
 * resolve (a numeric address parsed; a name through the client's evdns, never
 * blocking the loop) -> connect (TCP, unix socket or TLS) -> handshake (AUTH, SELECT, CLIENT
 * SETNAME, INFO replication for the replica-sync check, SCRIPT LOAD,
 * pipelined) -> READY. Requests queued before READY wait in `pending`;
 * written requests wait in `inflight` and replies are matched to them in
 * order (Redis answers in order); a compound request (several
 * commands, as many replies) completes once all its replies are in.
 * Everything written in one pass of the loop leaves in one socket write (the
 * command connection's: one each EARLY_FLUSH bytes gathered): that is the
 * automatic pipelining. An error reply passes the topology's redirect
 * hook before its request completes.
 * A request that outlives its deadline completes with RLOCK_ETIMEDOUT (or
 * RLOCK_ECONNECT if it was never written) and its late reply is discarded.
 * When the connection drops, written requests complete with RLOCK_ECONNLOST
 * (never re-sent here: the layer above decides what is safe to re-send) and
 * the connection comes back with capped exponential backoff.
 * Liveness: a connection can die without a word (a NAT that forgot the flow),
 * so one silent for ping_interval_ms gets a PING, and a missed PING or
 * dead_after_timeouts timeouts in a row drop it (then it reconnects). Sockets
 * are close-on-exec, with TCP keepalive. */
#include "handshake.h"
#include "resolve.h"
#include "resp.h"
#include "scripts.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

/* The layer above, through the table the client set (conn_up_t). */
#define UP(c) ((c)->env->up)

/* One of the client's counters (rlock_client_stats). */
static void count_stat(const conn_t *c, int i, int64_t n) {
  atomic_fetch_add_explicit(&c->env->st[i], (uint64_t)n, memory_order_relaxed);
}

#define MAX_UNREAD (1024u * 1024u * 1024u) /* a reply larger than this is refused */

static void arm_at(conn_t *c, int64_t at);
static void drop(conn_t *c, int err, const char *msg);
static void describe_peer(conn_t *c, char *buf, size_t n);
static bool tcp_connected(conn_t *c);
static const char *node_host(const conn_t *c);
static void write_req(conn_t *c, req_t *r);
static void write_pending(conn_t *c);
static void event_cb(struct bufferevent *bev, short what, void *arg);

/* ------------------------------------------------------------ requests */

/* Requests are made and freed again and again on the I/O thread: each
 * thread keeps up to SPARE_REQS freed ones (with their command room, in
 * SPARE_ROOM steps) for its next requests, freed when the thread exits. Under
 * ASan a spare is poisoned (but its link) until it is taken again. A request
 * freed on a thread whose list was freed already (in another thread-specific
 * destructor called after the list's: a per-thread client freed by its
 * thread's clean-up) is freed at once: nothing would free the list again. */
#define SPARE_REQS 32
#define SPARE_ROOM 64
#if defined(__SANITIZE_ADDRESS__)
#define REQ_POISON(r) ASAN_POISON_MEMORY_REGION(&(r)->next + 1, sizeof *(r) + (r)->room - sizeof(r)->next)
#define REQ_UNPOISON(r) \
  (ASAN_UNPOISON_MEMORY_REGION((r), sizeof *(r)), ASAN_UNPOISON_MEMORY_REGION((r), sizeof *(r) + (r)->room))
#else
#define REQ_POISON(r) ((void)(r))
#define REQ_UNPOISON(r) ((void)(r))
#endif

static _Thread_local struct {
  req_t *head;
  int n;
  bool registered; /* spare_key set: the list is freed at thread exit */
  bool gone;       /* the list was freed (the thread is exiting): keep no spare */
} spares;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void spares_free(void *unused) {
  (void)unused;
  while (spares.head) {
    req_t *r = spares.head;
    spares.head = r->next;
    REQ_UNPOISON(r);
    free(r);
  }
  spares.n = 0;
  spares.gone = true;
}

static void spare_key_init(void) {
  if (pthread_key_create(&spare_key, spares_free)) spare_key = (pthread_key_t)-1;
}

/* The first spare with room for len bytes of command, else a new request. */
static req_t *req_take(size_t len) {
  for (req_t **pp = &spares.head; *pp; pp = &(*pp)->next) {
    req_t *r = *pp;
    REQ_UNPOISON(r);
    if (r->room < len) {
      REQ_POISON(r);
      continue;
    }
    *pp = r->next;
    spares.n--;
    size_t room = r->room;
    memset(r, 0, sizeof *r);
    r->room = room;
    return r;
  }
  req_t *r;
  size_t room = (len + SPARE_ROOM - 1) / SPARE_ROOM * SPARE_ROOM;
  if (!(r = malloc(sizeof *r + room))) return NULL;
  memset(r, 0, sizeof *r);
  r->room = room;
  return r;
}

/* r's memory back: kept as this thread's spare, or freed. */
static void req_give(req_t *r) {
  if (!spares.registered) {
    pthread_once(&spare_once, spare_key_init);
    spares.registered = spare_key != (pthread_key_t)-1 && !pthread_setspecific(spare_key, &spares);
  }
  if (!spares.registered || spares.gone || spares.n >= SPARE_REQS) {
    free(r);
    return;
  }
  r->next = spares.head;
  spares.head = r;
  spares.n++;
  REQ_POISON(r);
}

req_t *rlock__req_alloc(size_t len, int64_t timeout_ms, req_done_fn done, void *ctx) {
  req_t *r = req_take(len);
  if (!r) return NULL;
  r->cmd = r->inl;
  r->len = len;
  r->ncmds = 1;
  r->slot = -1;
  r->deadline = rlock_now_ms() + timeout_ms;
  r->done = done;
  r->ctx = ctx;
  return r;
}

/* One allocation: the request and its command, written by resp.c. */
req_t *rlock__req_new(int argc, const char **argv, const size_t *argvlen, int64_t timeout_ms, req_done_fn done,
                      void *ctx) {
  req_t *r = rlock__req_alloc(rlock__resp_size(argc, argv, argvlen), timeout_ms, done, ctx);
  if (r) rlock__resp_write(r->cmd, argc, argv, argvlen);
  return r;
}

void rlock__req_set_cmd(req_t *r, char *cmd, size_t len) {
  if (r->cmd != r->inl) free(r->cmd);
  r->cmd = cmd;
  r->len = len;
}

int rlock__req_append(req_t *r, int argc, const char **argv, const size_t *argvlen) {
  size_t n = rlock__resp_size(argc, argv, argvlen);
  char *all = malloc(r->len + n);
  if (!all) return RLOCK_ENOMEM;
  memcpy(all, r->cmd, r->len);
  rlock__resp_write(all + r->len, argc, argv, argvlen);
  rlock__req_set_cmd(r, all, r->len + n);
  r->ncmds++;
  return 0;
}

void rlock__req_free(req_t *r) {
  if (!r) return;
  rlock_reply_free(r->replies);
  if (r->cmd != r->inl) free(r->cmd);
  req_give(r);
}

static void q_push(req_queue_t *q, req_t *r) {
  r->next = NULL;
  if (q->tail) q->tail->next = r;
  else q->head = r;
  q->tail = r;
  q->n++;
}

static req_t *q_pop(req_queue_t *q) {
  req_t *r = q->head;
  if (!r) return NULL;
  q->head = r->next;
  if (!q->head) q->tail = NULL;
  q->n--;
  r->next = NULL;
  return r;
}

/* Complete r with an error unless it already completed; then free it. */
static void finish_err(req_t *r, int status) {
  if (!r->completed) {
    r->completed = true;
    if (r->done) r->done(r, status, NULL);
  }
  rlock__req_free(r);
}

/* ------------------------------------------------------------ handshake */

/* TCP + TLS + handshake: the connection's own bound (the topology's), else the option. */
static int64_t connect_timeout(const conn_t *c) {
  return c->connect_timeout_ms ? c->connect_timeout_ms : c->env->opt->connect_timeout_ms;
}

/* The error text of a refused handshake command for a message. A server
 * that does not know the command quotes its arguments ("unknown command
 * 'AUTH', with args beginning with: '<password>'", Redis cuts them to 128
 * bytes): the text stops before the quoted arguments, and any password of
 * the URL left in it becomes ***. */
static void refusal_text(const conn_t *c, const char *str, char *out, size_t n) {
  const char *cut = strstr(str, "with args beginning with");
  snprintf(out, n, "%.*s", cut ? (int)(cut - str) : 200, str);
  for (size_t l = strlen(out); cut && l && (out[l - 1] == ' ' || out[l - 1] == ','); l--) out[l - 1] = 0;
  const char *secrets[2];
  rlock__url_secrets(c->env->url, secrets);
  for (int i = 0; i < 2; i++) {
    size_t sl = secrets[i] ? strlen(secrets[i]) : 0;
    for (char *p; sl && (p = strstr(out, secrets[i]));) {
      size_t rest = strlen(p + sl) + 1;
      if (sl >= 3) {
        memcpy(p, "***", 3);
        memmove(p + 3, p + sl, rest);
      } else {
        memset(p, '*', sl); /* shorter than the mask: masked in place */
      }
    }
  }
}

static void handshake_done(req_t *r, int status, rlock_reply_t *reply) {
  conn_t *c = r->ctx;
  if (status == 0 && reply && reply->type == RLOCK_REPLY_ERROR) {
    /* CLIENT SETNAME and SCRIPT LOAD may be refused by proxies: harmless,
     * unless the refusal says we are not authenticated. */
    bool fatal = r->is_auth || rlock__reply_is_error(reply, "NOAUTH") || rlock__reply_is_error(reply, "WRONGPASS") ||
                 rlock__reply_is_error(reply, "ERR DB index") || rlock__reply_is_error(reply, "ERR invalid DB") ||
                 rlock__reply_is_error(reply, "NOPERM");
    if (fatal) {
      char msg[300], text[210];
      refusal_text(c, reply->str ? reply->str : "", text, sizeof text);
      snprintf(msg, sizeof msg, "%s rejected: %s", r->is_auth ? "AUTH" : "handshake", text);
      rlock_reply_free(reply);
      c->last_err = RLOCK_EAUTH;
      drop(c, RLOCK_EAUTH, msg);
      return;
    }
  }
  char why[120];
  int refused = r->topo_check && status == 0 && c->state == CS_HANDSHAKE
                    ? UP(c)->handshake_check(c->env, reply, why, sizeof why)
                    : 0;
  if (refused) {
    /* the topology refused the node (Sentinel: not a master): drop it; its
     * before_connect sees node_refused at the reconnect */
    char msg[400], peer[256];
    describe_peer(c, peer, sizeof peer);
    snprintf(msg, sizeof msg, "%s %s", peer, why);
    rlock_reply_free(reply);
    c->last_err = refused;
    c->node_refused = true;
    drop(c, refused, msg);
    return;
  }
  if (status == 0 && reply && reply->type != RLOCK_REPLY_STATUS && reply->type != RLOCK_REPLY_STRING &&
      reply->type != RLOCK_REPLY_ERROR && c->state == CS_HANDSHAKE && !r->topo_check) {
    /* AUTH, SELECT, CLIENT SETNAME answer +OK and SCRIPT LOAD a SHA: an array
     * or a number is RESP from something else (an echo server, a proxy) */
    char msg[400], peer[256];
    describe_peer(c, peer, sizeof peer);
    snprintf(msg, sizeof msg, "%s answered the handshake with an unexpected %s: is this a Redis server?", peer,
             reply->type == RLOCK_REPLY_ARRAY ? "array"
             : reply->type == RLOCK_REPLY_NIL ? "nil"
                                              : "integer");
    rlock_reply_free(reply);
    c->last_err = RLOCK_EPROTO;
    drop(c, RLOCK_EPROTO, msg);
    return;
  }
  rlock_reply_free(reply);
  if (status != 0 || c->state != CS_HANDSHAKE) return; /* drop() reports */
  if (--c->handshake_left > 0) return;
  c->state = CS_READY;
  c->backoff_ms = c->env->opt->reconnect_min_ms;
  if (c->ever_ready && !c->topo_own) count_stat(c, ST_RECONNECTS, 1);
  c->ever_ready = true;
  c->last_err = 0;
  c->last_read = rlock_now_ms();
  c->timeouts_in_row = 0;
  c->ping_missed = false;
  if (c->env->opt->ping_interval_ms > 0) {
    struct timeval tv;
    rlock__tv_from_ms(&tv, c->env->opt->ping_interval_ms);
    evtimer_add(c->ping, &tv);
  }
  if (c->before_pending) c->before_pending(c);
  write_pending(c);
  if (c->on_ready) c->on_ready(c);
  UP(c)->flush(c->env);
}

/* The requests queued while c was not ready, in order; while c holds them
 * (hold_pending) only those marked `ahead`. */
static void write_pending(conn_t *c) {
  req_queue_t keep = {0};
  req_t *p;
  while ((p = q_pop(&c->pending))) {
    if (!c->hold_pending || p->ahead) write_req(c, p);
    else q_push(&keep, p);
  }
  c->pending = keep;
}

void rlock__conn_hold_end(conn_t *c) {
  if (!c->hold_pending) return;
  c->hold_pending = false;
  if (c->state != CS_READY) return;
  write_pending(c);
  rlock__conn_flush(c);
}

/* An answer to INFO replication: c->replicas is the replicas it lists online
 * (left as it is if the answer is anything else). */
static void replicas_read(conn_t *c, int status, const rlock_reply_t *reply) {
  if (status != 0 || !reply || reply->type != RLOCK_REPLY_STRING || !reply->str ||
      !strstr(reply->str, "connected_slaves:"))
    return;
  /* "slaveN:ip=...,port=...,state=online,offset=...": only an online replica
   * acknowledges writes; one still in its first sync (after a failover every
   * replica resyncs) would make every WAIT come short for the whole sync. */
  int online = 0;
  for (const char *p = reply->str; (p = strstr(p, "\nslave")); p++) {
    const char *q = p + 6, *eol = strchr(p + 1, '\n');
    while (*q >= '0' && *q <= '9') q++;
    if (q == p + 6 || *q != ':') continue;
    const char *st = strstr(q, "state=online");
    if (st && (!eol || st < eol)) online++;
  }
  c->replicas = online;
  if (online) c->had_replicas = true; /* WAITs may be queued on c from now on */
  if (c == c->env->cmd && c->state == CS_READY && !c->hold_pending) UP(c)->cmd_ready(c->env); /* WAIT needed or not */
}

/* INFO replication: the replicas the node reports online (the replica-sync
 * check asks WAIT for them). A refusal (an ACL without INFO) leaves 0: no WAIT. */
static void replicas_done(req_t *r, int status, rlock_reply_t *reply) {
  conn_t *c = r->ctx;
  c->replicas = 0;
  replicas_read(c, status, reply);
  if (status == 0 && rlock__reply_is_error(reply, "NOPERM")) { /* INFO is in @dangerous: not an AUTH failure */
    rlock_reply_free(reply);
    reply = NULL;
  }
  handshake_done(r, status, reply);
}

static req_t *handshake_cmd(conn_t *c, int argc, const char **argv, bool is_auth);

/* SCRIPT EXISTS of every embedded script answered: SCRIPT LOAD only the ones
 * the server lacks, before the connection is ready (their requests count in
 * handshake_left before this one is done). A reconnect to a server that kept
 * them loads none: one command, not one compile per script (40 of them, which
 * delayed the first renewals after a reconnect). An answer that is not one
 * integer per script (a proxy, a refusal): every script is loaded, as
 * before; an error is judged as any handshake refusal. */
static void scripts_exist_done(req_t *r, int status, rlock_reply_t *reply) {
  conn_t *c = r->ctx;
  if (status == 0 && c->state == CS_HANDSHAKE) {
    bool known = reply && reply->type == RLOCK_REPLY_ARRAY && reply->elements == (size_t)SCRIPT_N;
    for (int s = 1; s <= SCRIPT_N; s++) {
      const rlock_reply_t *e = known ? reply->element[s - 1] : NULL;
      if (e && e->type == RLOCK_REPLY_INTEGER && e->integer == 1) continue;
      const char *a[3] = {"SCRIPT", "LOAD", UP(c)->script_body(s)};
      if (!handshake_cmd(c, 3, a, false)) break; /* dropped (out of memory) */
    }
  }
  if (reply && reply->type != RLOCK_REPLY_ERROR) { /* an array: not an answer handshake_done knows */
    rlock_reply_free(reply);
    reply = NULL;
  }
  handshake_done(r, status, reply);
}

static req_t *handshake_req(conn_t *c, int argc, const char **argv, bool is_auth, req_done_fn done) {
  req_t *r = rlock__req_new(argc, argv, NULL, connect_timeout(c), done, c);
  if (!r) {
    drop(c, RLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  r->internal = true;
  r->is_auth = is_auth;
  c->handshake_left++;
  write_req(c, r);
  return r;
}

static req_t *handshake_cmd(conn_t *c, int argc, const char **argv, bool is_auth) {
  return handshake_req(c, argc, argv, is_auth, handshake_done);
}

/* The handshake list (handshake.c), then on a command connection of the
 * client's INFO replication and the scripts. */
static void start_handshake(conn_t *c) {
  c->state = CS_HANDSHAKE;
  c->handshake_left = 1; /* held until every command below is queued */
  hs_list_t hs;
  rlock__handshake_list(c->env, c, &hs);
  for (int i = 0; i < hs.n; i++) {
    req_t *r = handshake_cmd(c, hs.cmd[i].argc, hs.cmd[i].argv, hs.cmd[i].kind == HS_AUTH);
    if (r) r->topo_check = hs.cmd[i].kind == HS_CHECKED;
  }
  bool data = c->kind == CONN_CMD && !c->topo_own;
  if (data && c->env->opt->replica_sync != RLOCK_REPLICA_SYNC_OFF) {
    const char *a[2] = {"INFO", "replication"};
    handshake_req(c, 2, a, false, replicas_done);
  }
  if (data) {
    const char *a[SCRIPT_N + 2] = {"SCRIPT", "EXISTS"};
    for (int s = 1; s <= SCRIPT_N; s++) a[s + 1] = UP(c)->script_sha(s);
    handshake_req(c, SCRIPT_N + 2, a, false, scripts_exist_done);
  }
  if (c->state != CS_HANDSHAKE) return;
  c->handshake_left--;
}

/* ------------------------------------------------------------ reading */

static bool is_push(const rlock_reply_t *r) {
  if (r->type != RLOCK_REPLY_ARRAY || r->elements < 3 || !r->element[0] || r->element[0]->type != RLOCK_REPLY_STRING)
    return false;
  const char *k = r->element[0]->str;
  return !strcmp(k, "message") || !strcmp(k, "smessage") || (!strcmp(k, "pmessage") && r->elements >= 4);
}

/* Collects one reply of the compound request r: true once all are in (then
 * *reply is the ARRAY of them). A reader without memory drops the connection. */
static bool gather(conn_t *c, req_t *r, rlock_reply_t **reply) {
  if (!r->replies) {
    rlock_reply_t *a = calloc(1, sizeof *a);
    if (a) a->element = calloc((size_t)r->ncmds, sizeof *a->element);
    if (!a || !a->element) {
      free(a);
      rlock_reply_free(*reply);
      drop(c, RLOCK_ENOMEM, "out of memory reading a reply");
      return false;
    }
    a->type = RLOCK_REPLY_ARRAY;
    r->replies = a;
  }
  r->replies->element[r->replies->elements++] = *reply;
  if (r->replies->elements < (size_t)r->ncmds) return false;
  *reply = r->replies;
  r->replies = NULL;
  return true;
}

/* The error reply a redirect hook looks at: the reply, or the first error
 * among the replies of a compound. */
static const rlock_reply_t *first_error(const req_t *r, const rlock_reply_t *reply) {
  if (r->ncmds == 1) return reply->type == RLOCK_REPLY_ERROR ? reply : NULL;
  for (size_t i = 0; i < reply->elements; i++)
    if (reply->element[i]->type == RLOCK_REPLY_ERROR) return reply->element[i];
  return NULL;
}

/* ------------------------------------------------------------ not run, send again
 * LOADING (a restart reading its data), MASTERDOWN (a replica whose master
 * link is down) and BUSY (a script or function running past the busy
 * threshold) refuse a command before it runs: nothing of it was applied. A
 * lock-engine request (command connection; a compound only when the refused
 * command is its first and the rest is its WAIT) refused so is sent again
 * on the same connection after a backoff (10 ms doubling to 500 ms) while
 * that fits its deadline; else it completes as never written
 * (RLOCK_ECONNECT: did not run), as for a Cluster TRYAGAIN. Requests sent on
 * the connection meanwhile wait behind it (rlock__conn_send): none overtakes
 * one refused so. */

#define LATER_MIN_MS 10
#define LATER_MAX_MS 500

static void later_arm(conn_t *c) {
  int64_t at = INT64_MAX;
  for (const req_t *r = c->later.head; r; r = r->next)
    if (r->resend_at < at) at = r->resend_at;
  if (at == INT64_MAX || !c->later_ev) return;
  struct timeval tv;
  rlock__tv_from_ms(&tv, at > rlock_now_ms() ? at - rlock_now_ms() : 0);
  evtimer_add(c->later_ev, &tv);
}

/* Complete r as not run (its deadline comes before its next try). */
static void not_run_final(req_t *r, const char *why) {
  rlock__fail(RLOCK_ECONNECT, "Redis answered %.100s until the command timeout: not run", why);
  finish_err(r, RLOCK_ECONNECT);
}

static void conn_send_now(conn_t *c, req_t *r);

/* r waits in c's later queue, behind every request there (FIFO: its
 * resend_at no earlier than theirs). */
static void later_push(conn_t *c, req_t *r, int64_t at) {
  if (c->later.tail && c->later.tail->resend_at > at) at = c->later.tail->resend_at;
  r->resend_at = at;
  q_push(&c->later, r);
  later_arm(c);
  arm_at(c, r->deadline); /* the connection's timer ends it at its deadline (expire_later) */
}

/* The requests of c's later queue past their deadline end as not run (the
 * connection's timer: each within a ms of its deadline). */
static void expire_later(conn_t *c, int64_t now) {
  req_queue_t keep = {0}, over = {0};
  req_t *r;
  while ((r = q_pop(&c->later))) q_push(now >= r->deadline ? &over : &keep, r);
  c->later = keep; /* before the completions: they may send more (behind these) */
  while ((r = q_pop(&over))) not_run_final(r, "LOADING, MASTERDOWN or BUSY");
}

/* Sends again the requests at the head of c's later queue that are due, in
 * order; those past their deadline meanwhile end as not run. */
static void later_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  conn_t *c = arg;
  int64_t now = rlock_now_ms();
  expire_later(c, now);
  while (c->later.head && c->later.head->resend_at <= now) conn_send_now(c, q_pop(&c->later));
  later_arm(c);
  UP(c)->flush(c->env);
}

/* r (answered, not completed) was refused before it ran: true if it is sent
 * again later or completed as not run (r is then no longer the caller's). */
static bool not_run_later(conn_t *c, req_t *r, const rlock_reply_t *err, const rlock_reply_t *head) {
  if (c->kind != CONN_CMD || r->completed || err != head) return false;
  /* r->refused_later (an undo, or an unlock going on alone, a copy of which
   * may still land): any refusal of this copy (OOM, MISCONF, NOREPLICAS,
   * NOPERM, NOAUTH...) says nothing of that one, so the copy is sent again
   * later until one runs; the owner's next requests wait (lock.c's gate) */
  if (!rlock__reply_not_run(err) && !r->refused_later) return false;
  if (r->ncmds != 1 && !(r->waits && r->ncmds == 2)) return false; /* another command after it may have run */
  int64_t ms = (int64_t)LATER_MIN_MS << (r->laters < 6 ? r->laters : 6);
  if (ms > LATER_MAX_MS) ms = LATER_MAX_MS;
  if (r->laters < UINT8_MAX) r->laters++;
  r->sent_at = 0;
  int64_t now = rlock_now_ms();
  if (now + ms >= r->deadline || !c->later_ev) {
    char why[120];
    snprintf(why, sizeof why, "%.100s", err->str);
    not_run_final(r, why);
    return true;
  }
  later_push(c, r, now + ms);
  return true;
}

/* r has all its replies. NOSCRIPT (the script is a compound's first command)
 * re-sends it as EVAL; other errors pass the topology's redirect hook, then
 * LOADING, MASTERDOWN and BUSY send it again later (not_run_later). */
static void answered(conn_t *c, req_t *r, rlock_reply_t *reply) {
  const rlock_reply_t *err = r->completed || r->internal ? NULL : first_error(r, reply);
  const rlock_reply_t *head = r->ncmds == 1 ? reply : reply->element[0];
  if (r->script && err == head && rlock__reply_is_error(head, "NOSCRIPT")) {
    rlock_reply_free(reply);
    count_stat(c, ST_NOSCRIPT, 1);
    if (UP(c)->script_to_eval(r) == 0) {
      write_req(c, r);
      return;
    }
    finish_err(r, RLOCK_ENOMEM);
    return;
  }
  if (err && UP(c)->on_error_reply(c->env, c, r, err)) {
    rlock_reply_free(reply); /* r belongs to the topology now */
    return;
  }
  if (err && not_run_later(c, r, err, head)) {
    rlock_reply_free(reply);
    return;
  }
  if (r->reads_replicas) replicas_read(c, 0, reply); /* the replica-sync check's refresh */
  if (r->completed) {
    rlock_reply_free(reply);
  } else {
    r->completed = true;
    if (r->done) r->done(r, 0, reply);
    else rlock_reply_free(reply);
  }
  rlock__req_free(r);
}

static void on_reply(conn_t *c, rlock_reply_t *reply) {
  if (c->kind == CONN_SUB && (is_push(reply) || (c->is_own_push && c->is_own_push(c, reply)))) {
    if (c->on_push) c->on_push(c, reply);
    else rlock_reply_free(reply);
    return;
  }
  req_t *r = c->inflight.head;
  if (!r) {
    rlock_reply_free(reply);
    drop(c, RLOCK_EPROTO, "reply without a request (protocol out of sync)");
    return;
  }
  if (r->ncmds > 1 && !gather(c, r, &reply)) return; /* more replies to come */
  q_pop(&c->inflight);
  answered(c, r, reply);
}

/* n bytes read from c: feeds the reader, completes every whole reply.
 * false: the connection was dropped meanwhile (c's socket is gone). */
static bool feed(conn_t *c, const char *p, size_t n) {
  struct bufferevent *bev = c->bev;
  /* the command connection's integer and nil replies (the lock scripts'
   * answers) are parsed here while the reader holds nothing: no copy into
   * its buffer, no task stack; the rest, in order, goes to the reader */
  while (c->kind == CONN_CMD && n && rlock__reply_reader_idle(c->reader)) {
    size_t used;
    rlock_reply_t *reply = rlock__reply_fast(p, n, &used);
    if (!reply) break;
    p += used;
    n -= used;
    on_reply(c, reply);
    if (c->state == CS_IDLE || c->state == CS_CLOSED || c->bev != bev) return false; /* dropped */
  }
  if (!n) return true;
  if (redisReaderFeed(c->reader, p, n) != REDIS_OK) {
    drop(c, RLOCK_ENOMEM, "out of memory reading a reply");
    return false;
  }
  if (c->reader->len - c->reader->pos > MAX_UNREAD) {
    drop(c, RLOCK_EPROTO, "reply larger than 1 GiB refused");
    return false;
  }
  for (;;) {
    void *reply = NULL;
    if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
      char msg[600], peer[256];
      describe_peer(c, peer, sizeof peer);
      if (c->state == CS_HANDSHAKE) /* the first bytes it sent are not RESP */
        snprintf(msg, sizeof msg, "%s answered the handshake in another protocol (%s): is this a Redis server?", peer,
                 c->reader->errstr);
      else snprintf(msg, sizeof msg, "malformed reply: %s", c->reader->errstr);
      drop(c, RLOCK_EPROTO, msg);
      return false;
    }
    if (!reply) return true;
    on_reply(c, reply);
    if (c->state == CS_IDLE || c->state == CS_CLOSED || c->bev != bev) return false; /* dropped */
  }
}

static void got_bytes(conn_t *c) {
  c->last_read = rlock_now_ms(); /* it is alive */
  c->timeouts_in_row = 0;
}

/* TLS: the bufferevent read the socket. */
static void read_pass(struct bufferevent *bev, conn_t *c) {
  struct evbuffer *in = bufferevent_get_input(bev);
  got_bytes(c);
  while (evbuffer_get_length(in) > 0) {
    struct evbuffer_iovec v;
    if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) break;
    if (!feed(c, v.iov_base, v.iov_len)) return;
    evbuffer_drain(in, v.iov_len);
  }
}

/* A read is a pass of the loop (rlock__client_pass_begin/_end): what user
 * threads submit meanwhile leaves with this pass's writes. */
static void read_cb(struct bufferevent *bev, void *arg) {
  conn_t *c = arg;
  UP(c)->pass_begin(c->env);
  read_pass(bev, c);
  UP(c)->pass_end(c->env);
}

#define READ_CHUNK 65536
#define READS_PER_PASS 16 /* a large reply yields to the loop between chunks */

/* Plain sockets: one read() per chunk into the reader, no FIONREAD. EOF and
 * errors go to event_cb as the bufferevent reports them. */
static void direct_read_pass(evutil_socket_t fd, conn_t *c) {
  char buf[READ_CHUNK];
  ssize_t n = 0;
  for (int i = 0; i < READS_PER_PASS; i++) {
    n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    if (i == 0) got_bytes(c);
    if (!feed(c, buf, (size_t)n)) return;
    if (n < (ssize_t)sizeof buf) break;
  }
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    if (n == 0) errno = 0;
    event_cb(c->bev, (short)(BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR)), c);
  }
}

static void direct_read_cb(evutil_socket_t fd, short what, void *arg) {
  conn_t *c = arg;
  UP(c)->pass_begin(c->env);
  direct_read_pass(fd, c);
  UP(c)->pass_end(c->env);
}

/* Connected on a plain socket: the connection reads and writes it itself
 * from now on (conn_t.direct). false: out of memory (c stays on the
 * bufferevent, which works as before). */
static bool go_direct(conn_t *c) {
  if (c->env->url->kind == URL_TLS || !c->flush_ev) return false;
  c->rev = event_new(c->env->base, bufferevent_getfd(c->bev), EV_READ | EV_PERSIST, direct_read_cb, c);
  if (!c->rev) return false;
  bufferevent_disable(c->bev, EV_READ);
  if (event_add(c->rev, NULL)) {
    event_free(c->rev);
    c->rev = NULL;
    bufferevent_enable(c->bev, EV_READ);
    return false;
  }
  c->direct = true;
  return true;
}

/* The socket is going away: forget the direct state (bytes not written
 * belong to requests that fail with the connection). */
static void leave_direct(conn_t *c) {
  if (c->rev) event_free(c->rev);
  c->rev = NULL;
  c->direct = false;
  c->wbuf_n = 0;
  if (c->flush_ev) event_del(c->flush_ev);
  c->flush_pending = false;
}

/* ------------------------------------------------------------ writing */

static void ping_done(req_t *r, int status, rlock_reply_t *reply);
static void recount_done(req_t *r, int status, rlock_reply_t *reply);

/* A pass that has gathered this much for the command connection writes it
 * at once and goes on gathering: redis-server starts on the first requests
 * while the pass still runs the callbacks that queue the next ones (50 async
 * owners: the batch of 50 left after the last callback, and the server and
 * the client took turns). */
#ifndef EARLY_FLUSH
#define EARLY_FLUSH 2048
#endif
#define WBUF_KEEP 65536 /* a larger wbuf is freed once written */

/* n bytes behind what this pass gathered in c->wbuf (grown by doubling,
 * kept). Out of memory: what wbuf holds and the bytes go to the
 * bufferevent's output instead, in order (its write event sends them). */
static void wbuf_add(conn_t *c, const char *p, size_t n) {
  if (c->wbuf_n + n > c->wbuf_cap) {
    size_t cap = c->wbuf_cap ? c->wbuf_cap : 4096;
    while (cap < c->wbuf_n + n) cap *= 2;
    char *nb = realloc(c->wbuf, cap);
    if (!nb) {
      struct evbuffer *out = bufferevent_get_output(c->bev);
      evbuffer_add(out, c->wbuf, c->wbuf_n);
      evbuffer_add(out, p, n);
      c->wbuf_n = 0;
      return;
    }
    c->wbuf = nb;
    c->wbuf_cap = cap;
  }
  memcpy(c->wbuf + c->wbuf_n, p, n);
  c->wbuf_n += n;
}

/* r keeps its command: a redirect or NOSCRIPT may send it again. */
static void write_req(conn_t *c, req_t *r) {
  if (r->sync_defer && UP(c)->sync_decide(c->env, c, r)) {
    rlock__fail(RLOCK_ENOMEM, "out of memory");
    finish_err(r, RLOCK_ENOMEM);
    return;
  }
  bool counted = r->done != ping_done && r->done != recount_done && !c->topo_own;
  if (c->direct && c->state == CS_READY) {
    wbuf_add(c, r->cmd, r->len);
    /* written at the pass's end at the latest: a counted write on the
     * client's command connection in a pass is flushed by the pass
     * (rlock__client_flush, batch_wrote); anything else activates flush_ev */
    if (!(counted && c == c->env->cmd && c->env->in_pass) && !c->flush_pending) {
      event_active(c->flush_ev, EV_WRITE, 0);
      c->flush_pending = true;
    }
  } else {
    bufferevent_write(c->bev, r->cmd, r->len);
  }
  r->sent_at = rlock_now_ms();
  q_push(&c->inflight, r);
  arm_at(c, r->deadline);
  if (!counted) return; /* liveness, replica recount, discovery: not counted, not a batch */
  count_stat(c, c->kind == CONN_USER ? ST_USER_COMMANDS : ST_COMMANDS, r->ncmds);
  if (c->kind == CONN_CMD) c->env->batch_wrote = true;
  if (c->direct && c == c->env->cmd && c->env->in_pass && c->wbuf_n >= EARLY_FLUSH)
    UP(c)->write_batch(c->env); /* (EARLY_FLUSH) */
}

/* End of a pass (and write_req, each EARLY_FLUSH bytes the pass gathered
 * for the command connection): write what the pass queued now, in one
 * write, instead of waiting for the loop's next turn to report the socket
 * writable (a whole epoll round per request on an idle connection). Plain sockets only: TLS
 * bufferevents write through OpenSSL on their own.
 * A direct connection writes wbuf with one write and arms nothing: only
 * what the socket refuses (EAGAIN, a partial write, an error) goes to the
 * bufferevent's output, whose write event then finishes it (or reports the
 * error); while that output holds bytes, wbuf goes behind them (order).
 * Before READY (the handshake) writes go through the bufferevent: a socket
 * bufferevent keeps the front of its output buffer frozen (only its own
 * write callback drains it, unfreezing it meanwhile): evbuffer_write() on it
 * fails, so the front is unfrozen for the write, as libevent's callback does. */
void rlock__conn_flush(conn_t *c) {
  if (c->state != CS_READY || !c->bev || c->env->url->kind == URL_TLS) return;
  struct evbuffer *out = bufferevent_get_output(c->bev);
  if (c->direct && c->wbuf_n) {
    if (c->flush_pending) event_del(c->flush_ev); /* this pass writes it */
    c->flush_pending = false;
    size_t done = 0;
    if (!evbuffer_get_length(out)) {
      ssize_t w;
      do w = write(bufferevent_getfd(c->bev), c->wbuf, c->wbuf_n);
      while (w < 0 && errno == EINTR);
      if (w > 0) done = (size_t)w;
    }
    if (done < c->wbuf_n) evbuffer_add(out, c->wbuf + done, c->wbuf_n - done); /* arms the write event */
    c->wbuf_n = 0;
    if (c->wbuf_cap > WBUF_KEEP) { /* a burst grew it: not kept for ever */
      free(c->wbuf);
      c->wbuf = NULL;
      c->wbuf_cap = 0;
    }
    return;
  }
  if (!evbuffer_get_length(out)) return;
  evbuffer_unfreeze(out, 1);
  evbuffer_write(out, bufferevent_getfd(c->bev));
  evbuffer_freeze(out, 1);
  /* a partial write leaves the rest to the bufferevent (EV_WRITE); an error
   * is the bufferevent's to report when it writes */
}

static void flush_cb(evutil_socket_t fd, short what, void *arg) {
  conn_t *c = arg;
  c->flush_pending = false; /* it ran: no longer active */
  rlock__conn_flush(c);
}

static int waits_in(const req_queue_t *q) {
  int n = 0;
  for (const req_t *r = q->head; r; r = r->next) n += r->waits;
  return n;
}

int rlock__conn_waits_ahead(const conn_t *c) { return waits_in(&c->pending) + waits_in(&c->inflight); }
int rlock__conn_waits_written(const conn_t *c) { return waits_in(&c->inflight); }

/* r queued behind the WAITs on c: its deadline allows for them (rlock__conn_waits_ahead).
 * The count walks c's queues: only where WAITs can be (sync on, replicas
 * seen), not on every send of a connection with 100,000 requests queued.
 * A request sent again (the later queue, a redirect) keeps the largest
 * allowance of its sends, never their sum: its deadline does not grow with
 * its re-sends. */
static void behind_waits(conn_t *c, req_t *r) {
  if (c->kind == CONN_CMD && c->env->opt->replica_sync != RLOCK_REPLICA_SYNC_OFF &&
      (c->replicas > 0 || c->had_replicas)) {
    int64_t allow = rlock__conn_waits_ahead(c) * c->env->opt->replica_sync_timeout_ms;
    if (allow > r->waits_ms) r->deadline += allow - r->waits_ms, r->waits_ms = allow;
  }
}

/* A request sent while others wait in c's later queue (refused before they
 * ran) goes behind them: the connection's requests keep their order. */
void rlock__conn_send(conn_t *c, req_t *r) {
  if (c->later.head && c->state != CS_CLOSED) {
    later_push(c, r, 0);
    return;
  }
  conn_send_now(c, r);
}

static void conn_send_now(conn_t *c, req_t *r) {
  behind_waits(c, r);
  if (c->state == CS_CLOSED) {
    finish_err(r, RLOCK_ECLOSED);
    return;
  }
  if (c->state == CS_READY && (!c->hold_pending || r->ahead)) {
    write_req(c, r);
  } else {
    q_push(&c->pending, r);
    arm_at(c, rlock__req_unsent_by(r));
  }
}

/* ------------------------------------------------------------ timers
 * One timer per connection, armed at the earliest deadline it was told about:
 * each request queued or written moves it earlier if its deadline is earlier
 * (O(1)); when it fires, one pass over both queues completes what is due and
 * finds the next deadline. So every request ends within a ms of its own
 * deadline whatever its place in the queues or the connect deadline; the
 * timer may fire early (requests answered since), never late. */

static void arm_at(conn_t *c, int64_t at) {
  if (c->state == CS_CLOSED || at >= c->timer_at) return;
  c->timer_at = at;
  struct timeval tv;
  rlock__tv_from_ms(&tv, at - rlock_now_ms() + 1);
  evtimer_add(c->timer, &tv);
}

/* The earliest deadline still to watch (INT64_MAX: none). */
static int64_t next_deadline(const conn_t *c) {
  int64_t next = INT64_MAX;
  if (c->state == CS_CONNECTING || c->state == CS_HANDSHAKE) next = c->connect_deadline;
  for (const req_t *r = c->pending.head; r; r = r->next)
    if (rlock__req_unsent_by(r) < next) next = rlock__req_unsent_by(r);
  for (const req_t *r = c->inflight.head; r; r = r->next)
    if (!r->completed && r->deadline < next) next = r->deadline;
  for (const req_t *r = c->later.head; r; r = r->next)
    if (r->deadline < next) next = r->deadline;
  return next;
}

/* Requests past their deadline that were never written: RLOCK_ECONNECT. A
 * completion may queue a new request (at the tail): the walk sees it, not due. */
static void expire_pending(conn_t *c, int64_t now) {
  req_t *prev = NULL, *r = c->pending.head;
  while (r) {
    if (rlock__req_unsent_by(r) > now) {
      prev = r;
      r = r->next;
      continue;
    }
    if (prev) prev->next = r->next;
    else c->pending.head = r->next;
    if (c->pending.tail == r) c->pending.tail = prev;
    c->pending.n--;
    r->next = NULL;
    if (c->last_msg[0]) /* where, and why: the last attempt's own message */
      rlock__fail(RLOCK_ECONNECT, "not connected: %s", c->last_msg);
    else
      rlock__fail(RLOCK_ECONNECT, "not connected to Redis (%s)",
                  rlock_strerror(c->last_err ? c->last_err : RLOCK_ECONNECT));
    finish_err(r, RLOCK_ECONNECT);
    r = prev ? prev->next : c->pending.head;
  }
}

/* Written requests past their deadline: RLOCK_ETIMEDOUT now; they stay in the
 * queue, as their replies are still to come (and will be discarded). Returns
 * how many. */
static int expire_inflight(conn_t *c, int64_t now) {
  int n = 0;
  for (req_t *r = c->inflight.head; r; r = r->next) {
    if (r->completed || r->deadline > now) continue;
    r->completed = true;
    n++;
    if (r->done != ping_done) count_stat(c, ST_TIMEOUTS, 1);
    rlock__fail(RLOCK_ETIMEDOUT, "Redis did not answer within %lld ms", (long long)c->env->opt->command_timeout_ms);
    if (r->done) r->done(r, RLOCK_ETIMEDOUT, NULL);
  }
  return n;
}

/* ------------------------------------------------------------ liveness */

static void ping_done(req_t *r, int status, rlock_reply_t *reply) {
  conn_t *c = r->ctx;
  rlock_reply_free(reply); /* any answer will do: +PONG, or ["pong",""] when subscribed */
  c->ping_out = false;
  if (status == RLOCK_ETIMEDOUT) c->ping_missed = true; /* timer_cb drops it after its pass */
}

/* The periodic INFO replication of the replica-sync check (answered() reads
 * it: reads_replicas). */
static void recount_done(req_t *r, int status, rlock_reply_t *reply) {
  conn_t *c = r->ctx;
  rlock_reply_free(reply);
  c->recount_out = false;
}

/* Every ping interval the command connection reads its node's replica count
 * again (policy not off): replicas that attach after the handshake (a master
 * restart: the client reconnects before its replicas do) are waited for
 * from then on, not only after the next reconnect. */
static void recount_replicas(conn_t *c) {
  if (c->kind != CONN_CMD || c->topo_own || c->env->opt->replica_sync == RLOCK_REPLICA_SYNC_OFF || c->recount_out)
    return;
  const char *argv[2] = {"INFO", "replication"};
  req_t *r = rlock__req_new(2, argv, NULL, c->env->opt->command_timeout_ms, recount_done, c);
  if (!r) return;
  r->reads_replicas = true;
  behind_waits(c, r);
  c->recount_out = true;
  write_req(c, r);
  rlock__conn_flush(c);
}

/* Every ping_interval_ms: a PING on a connection nothing arrived on for that
 * long (PING is allowed on a subscribed connection). */
static void ping_cb(evutil_socket_t fd, short what, void *arg) {
  conn_t *c = arg;
  if (c->state == CS_READY) recount_replicas(c);
  if (c->state != CS_READY || c->ping_out || rlock_now_ms() - c->last_read < c->env->opt->ping_interval_ms) return;
  /* The user connection is silent by design while a blocking command runs
   * (BLPOP key 0 with its own timeout): its commands' deadlines watch it. */
  if (c->kind == CONN_USER && c->inflight.head) return;
  const char *argv[1] = {"PING"};
  req_t *r = rlock__req_new(1, argv, NULL, c->env->opt->command_timeout_ms, ping_done, c);
  if (!r) return;
  behind_waits(c, r); /* a PING behind a WAIT is answered when the WAIT ends */
  c->ping_out = true;
  write_req(c, r);
  rlock__conn_flush(c);
}

/* A connection that owes replies and stays silent is dead (half-open: the
 * peer or a middlebox forgot it), however long the kernel would keep
 * retransmitting: drop it, so it reconnects (and resubscribes). What the
 * timeouts' completions queued is written first: if the server is only slow,
 * it still gets those requests (an undo, a re-sent unlock) in order. */
static void check_alive(conn_t *c) {
  int n = c->env->opt->dead_after_timeouts;
  char msg[200];
  if (c->ping_missed)
    snprintf(msg, sizeof msg, "no answer to PING within %lld ms: connection presumed dead, reconnecting",
             (long long)c->env->opt->command_timeout_ms);
  else if (n > 0 && c->timeouts_in_row >= n)
    snprintf(msg, sizeof msg, "%d command timeouts in a row: connection presumed dead, reconnecting",
             c->timeouts_in_row);
  else return;
  rlock__conn_flush(c);
  drop(c, RLOCK_ECONNLOST, msg);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  conn_t *c = arg;
  c->timer_at = INT64_MAX; /* fired */
  int64_t now = rlock_now_ms();
  if ((c->state == CS_CONNECTING || c->state == CS_HANDSHAKE) && now >= c->connect_deadline) {
    char peer[256], msg[400];
    long long ms = (long long)connect_timeout(c);
    describe_peer(c, peer, sizeof peer);
    bool tls_silent = c->state == CS_CONNECTING && c->env->url->kind == URL_TLS && tcp_connected(c);
    if (c->dns)
      snprintf(msg, sizeof msg, "cannot resolve %.200s: no answer within %lld ms (connect timeout)", node_host(c), ms);
    else if (tls_silent)
      snprintf(msg, sizeof msg, "TLS handshake with %s got no answer within %lld ms: is this a TLS port?", peer, ms);
    else if (c->state == CS_HANDSHAKE)
      snprintf(msg, sizeof msg, "%s did not answer the handshake within %lld ms: is this a Redis server?", peer, ms);
    else snprintf(msg, sizeof msg, "connect %s timed out after %lld ms", peer, ms);
    c->last_err = tls_silent ? RLOCK_ETLS : RLOCK_ECONNECT;
    drop(c, c->last_err, msg);
    now = rlock_now_ms();
  }
  expire_pending(c, now);
  expire_later(c, now);
  if (expire_inflight(c, now) > 0) c->timeouts_in_row++; /* requests timing out together count once */
  if (c->state == CS_READY) check_alive(c);
  arm_at(c, next_deadline(c));
  UP(c)->flush(c->env);
}

/* ------------------------------------------------------------ connecting */

/* The host and port c connects to: its node's, else the URL's. */
static const char *node_host(const conn_t *c) { return c->host ? c->host : c->env->url->host; }
static int node_port(const conn_t *c) { return c->host ? c->port : c->env->url->port; }

int rlock__conn_set_node(conn_t *c, const char *host, int port) {
  char *h = strdup(host);
  if (!h) return RLOCK_ENOMEM;
  free(c->host);
  c->host = h;
  c->port = port;
  return 0;
}

/* ------------------------------------------------------------ resolving */

static void try_connect(conn_t *c);

/* The addresses of c's node are known (or not): connect to the first.
 * Called by resolve.c, on this pass or a later one. */
static void resolved(conn_t *c, int err, struct addrinfo *res) {
  if (err) {
    char msg[300];
    snprintf(msg, sizeof msg, "cannot resolve %.200s: %s", node_host(c), evutil_gai_strerror(err));
    c->last_err = RLOCK_ECONNECT;
    drop(c, RLOCK_ECONNECT, msg);
    return;
  }
  c->addrs = c->addr_next = res;
  try_connect(c);
}

/* Resolves c's node (resolve.c), then connects. */
static void resolve(conn_t *c) {
  if (c->addrs) evutil_freeaddrinfo(c->addrs);
  c->addrs = c->addr_next = NULL;
  if (c->env->url->kind == URL_UNIX) {
    try_connect(c);
    return;
  }
  if (rlock__resolve_start(c, node_host(c), node_port(c), resolved)) drop(c, RLOCK_ENOMEM, "out of memory (resolver)");
}

static SSL *new_ssl(conn_t *c) {
  const conn_env_t *env = c->env;
  SSL *ssl = SSL_new(env->ssl_ctx);
  if (!ssl) return NULL;
  const char *name = env->sni ? env->sni : node_host(c);
  unsigned char buf[sizeof(struct in6_addr)];
  bool ip = inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
  if (!ip) SSL_set_tlsext_host_name(ssl, name);
  if (env->opt->tls_verify) {
    X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
    if (ip) X509_VERIFY_PARAM_set1_ip_asc(p, name);
    else X509_VERIFY_PARAM_set1_host(p, name, 0);
  }
  return ssl;
}

/* A non-blocking, close-on-exec socket (libevent's own connect makes one
 * without SOCK_CLOEXEC: a program the application execs would inherit it),
 * with TCP_NODELAY and TCP keepalive. */
static int new_socket(conn_t *c, int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || family == AF_UNIX) return fd;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int64_t ka = c->env->opt->tcp_keepalive_ms;
  if (ka > 0) { /* probes after idle s, then every idle/3 s; dead after 3 unanswered */
    int idle = (int)((ka + 999) / 1000), intvl = (idle + 2) / 3, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  }
  return fd;
}

static void try_connect(conn_t *c) {
  const conn_env_t *env = c->env;
  struct sockaddr_storage ss;
  socklen_t sl;
  char where[300];
  if (env->url->kind == URL_UNIX) {
    struct sockaddr_un *un = (struct sockaddr_un *)&ss;
    memset(un, 0, sizeof *un);
    un->sun_family = AF_UNIX;
    if (strlen(env->url->path) >= sizeof un->sun_path) {
      c->last_err = RLOCK_EURL;
      drop(c, RLOCK_ECONNECT, "unix socket path too long");
      return;
    }
    strcpy(un->sun_path, env->url->path);
    sl = sizeof *un;
    snprintf(where, sizeof where, "%.250s", env->url->path);
  } else {
    if (!c->addr_next) {
      char msg[300];
      snprintf(msg, sizeof msg, "cannot resolve %.200s: no address", node_host(c));
      c->last_err = RLOCK_ECONNECT;
      drop(c, RLOCK_ECONNECT, msg);
      return;
    }
    memcpy(&ss, c->addr_next->ai_addr, c->addr_next->ai_addrlen);
    sl = c->addr_next->ai_addrlen;
    c->addr_next = c->addr_next->ai_next;
  }
  int fd = new_socket(c, ss.ss_family);
  if (fd < 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "socket: %s", strerror(errno));
    c->last_err = RLOCK_ECONNECT;
    drop(c, RLOCK_ECONNECT, msg);
    return;
  }
  if (env->url->kind == URL_TLS) {
    SSL *ssl = new_ssl(c);
    if (!ssl) {
      close(fd);
      c->last_err = RLOCK_ETLS;
      drop(c, RLOCK_ETLS, "SSL_new failed");
      return;
    }
    c->bev = bufferevent_openssl_socket_new(env->base, fd, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev) bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
    else SSL_free(ssl);
  } else {
    c->bev = bufferevent_socket_new(env->base, fd, BEV_OPT_CLOSE_ON_FREE);
  }
  if (!c->bev) {
    close(fd);
    drop(c, RLOCK_ENOMEM, "cannot create a bufferevent");
    return;
  }
  bufferevent_setcb(c->bev, read_cb, NULL, event_cb, c);
  bufferevent_enable(c->bev, EV_READ | EV_WRITE);
  if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&ss, (int)sl) < 0) {
    /* reported through event_cb for most errors; this path is immediate failure */
    int e = errno;
    char msg[600], peer[256];
    describe_peer(c, peer, sizeof peer);
    snprintf(msg, sizeof msg, "connect %s: %s", peer, strerror(e));
    c->last_err = RLOCK_ECONNECT;
    drop(c, RLOCK_ECONNECT, msg);
  }
}

/* The TCP connection is up (a TLS handshake may still be running). */
static bool tcp_connected(conn_t *c) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  return c->bev && getpeername(bufferevent_getfd(c->bev), (struct sockaddr *)&ss, &sl) == 0;
}

static void describe_peer(conn_t *c, char *buf, size_t n) {
  const url_t *u = c->env->url;
  if (u->kind == URL_UNIX) snprintf(buf, n, "%.200s", u->path);
  else snprintf(buf, n, "%.200s:%d", node_host(c), node_port(c));
}

/* The cause of a failed TLS connection in words (not OpenSSL's codes): the
 * certificate check's verdict, a server that closed the connection (it wants
 * a client certificate), a port that does not speak TLS. */
static void tls_error_text(conn_t *c, struct bufferevent *bev, unsigned long ssl_err, char *e, size_t n) {
  const char *name = c->env->sni ? c->env->sni : node_host(c);
  SSL *ssl = bufferevent_openssl_get_ssl(bev);
  long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (ERR_GET_REASON(ssl_err) == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK) {
    switch (v) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      snprintf(e, n, "the server's certificate is signed by an unknown CA (%s; give its CA: tls_ca_file, --tls-ca)",
               X509_verify_cert_error_string(v));
      return;
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      snprintf(e, n,
               "the server's certificate does not name %.100s (the name verified: tls_server_name, "
               "--tls-server-name)",
               name);
      return;
    default: snprintf(e, n, "the server's certificate was refused: %s", X509_verify_cert_error_string(v)); return;
    }
  }
  if (ERR_GET_LIB(ssl_err) == 0) { /* no OpenSSL error: the server closed the connection in the handshake */
    snprintf(e, n, "the server closed the connection during the TLS handshake%s",
             c->env->cert ? ""
                          : " (does it require a client certificate? tls_cert_file and tls_key_file, "
                            "--tls-cert and --tls-key)");
    return;
  }
  const char *reason = ERR_reason_error_string(ssl_err);
  if (ERR_GET_REASON(ssl_err) == SSL_R_WRONG_VERSION_NUMBER)
    snprintf(e, n, "%s (is this a TLS port?)", reason ? reason : "wrong version number");
  else if (ERR_GET_REASON(ssl_err) == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED)
    snprintf(e, n,
             "the server requires a client certificate (tls_cert_file and tls_key_file, --tls-cert and --tls-key)");
  else if (reason) snprintf(e, n, "%s", reason);
  else ERR_error_string_n(ssl_err, e, n);
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
  conn_t *c = arg;
  if (what & BEV_EVENT_CONNECTED) {
    go_direct(c);
    start_handshake(c);
    return;
  }
  char peer[256], msg[600];
  describe_peer(c, peer, sizeof peer);
  unsigned long ssl_err = c->env->url->kind == URL_TLS ? bufferevent_get_openssl_error(bev) : 0;
  int sock_err = EVUTIL_SOCKET_ERROR();
  if (ssl_err && ERR_GET_LIB(ssl_err) == 0 && c->state == CS_CONNECTING && !tcp_connected(c))
    ssl_err = 0; /* only libevent's SSL_ERROR_SYSCALL: the TCP connect itself failed */
  if (ssl_err) {
    char e[300];
    tls_error_text(c, bev, ssl_err, e, sizeof e);
    snprintf(msg, sizeof msg, "TLS with %s failed: %s", peer, e);
    /* TLS 1.3: the server checks our certificate after the client considers
     * the handshake done, so its alert arrives during the Redis handshake. */
    bool setup = c->state != CS_READY;
    if (setup) c->last_err = RLOCK_ETLS;
    drop(c, setup ? RLOCK_ETLS : RLOCK_ECONNLOST, msg);
    return;
  }
  if (c->state == CS_CONNECTING) {
    if (c->env->url->kind == URL_TLS && !sock_err) {
      snprintf(msg, sizeof msg, "TLS handshake with %s failed (connection closed)", peer);
      c->last_err = RLOCK_ETLS;
      drop(c, RLOCK_ETLS, msg);
      return;
    }
    if (c->addr_next) { /* try the next address of the host */
      leave_direct(c);
      bufferevent_free(c->bev);
      c->bev = NULL;
      try_connect(c);
      return;
    }
    snprintf(msg, sizeof msg, "connect %s: %s", peer, sock_err ? strerror(sock_err) : "failed");
    c->last_err = RLOCK_ECONNECT;
    drop(c, RLOCK_ECONNECT, msg);
    return;
  }
  if (c->state == CS_HANDSHAKE) {
    snprintf(msg, sizeof msg, "connection to %s closed during the handshake%s", peer,
             c->env->url->kind == URL_TCP ? " (is it a TLS port? use rediss://)" : "");
    if (!c->last_err) c->last_err = RLOCK_ECONNECT;
    drop(c, RLOCK_ECONNLOST, msg);
    return;
  }
  snprintf(msg, sizeof msg, "connection to %s %s%s%s", peer, (what & BEV_EVENT_EOF) ? "closed by the server" : "lost",
           sock_err && !(what & BEV_EVENT_EOF) ? ": " : "",
           sock_err && !(what & BEV_EVENT_EOF) ? strerror(sock_err) : "");
  drop(c, RLOCK_ECONNLOST, msg);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) { rlock__conn_start(arg); }

void rlock__conn_start(conn_t *c) {
  if (c->state != CS_IDLE) return;
  /* the topology may first find c's node (Sentinel: ask for the master);
   * it starts c again once it knows it (topology.h) */
  if (!UP(c)->before_connect(c->env, c)) return;
  c->state = CS_CONNECTING;
  c->node_refused = false;
  c->connect_deadline = rlock_now_ms() + connect_timeout(c);
  if (!c->reader && !(c->reader = rlock__reply_reader_new(c->kind == CONN_CMD))) {
    drop(c, RLOCK_ENOMEM, "out of memory");
    return;
  }
  arm_at(c, c->connect_deadline);
  resolve(c);
}

/* The connection is gone (or never came up): fail what was written, keep
 * what was not, and schedule the next attempt. */
static void drop(conn_t *c, int err, const char *msg) {
  if (c->state == CS_IDLE || c->state == CS_CLOSED) return;
  bool was_ready = c->state == CS_READY;
  c->state = CS_IDLE;
  rlock__resolve_cancel(c);
  if (c->ping) evtimer_del(c->ping);
  c->ping_missed = false;
  c->timeouts_in_row = 0;
  leave_direct(c);
  if (c->bev) {
    bufferevent_free(c->bev);
    c->bev = NULL;
  }
  if (c->reader) {
    redisReaderFree(c->reader);
    c->reader = NULL;
  }
  rlock__set_msg(msg);
  if (msg && *msg) snprintf(c->last_msg, sizeof c->last_msg, "%s", msg);
  if (c->on_error && !was_ready) c->on_error(c, c->last_err ? c->last_err : err, msg);
  req_t *r;
  while ((r = q_pop(&c->inflight))) {
    if (r->internal) r->completed = true;
    rlock__set_msg(msg);
    finish_err(r, RLOCK_ECONNLOST);
  }
  if (was_ready && c->on_down) c->on_down(c);
  struct timeval tv;
  rlock__tv_from_ms(&tv, c->backoff_ms);
  evtimer_add(c->retry, &tv);
  c->backoff_ms = c->backoff_ms * 2 > c->env->opt->reconnect_max_ms ? c->env->opt->reconnect_max_ms : c->backoff_ms * 2;
}

void rlock__conn_reset(conn_t *c, const char *msg) { drop(c, RLOCK_ECONNLOST, msg); }

int rlock__conn_init(conn_t *c, conn_env_t *env, conn_kind_t kind) {
  memset(c, 0, sizeof *c);
  c->env = env;
  c->kind = kind;
  c->state = CS_IDLE;
  c->backoff_ms = env->opt->reconnect_min_ms;
  c->timer = evtimer_new(env->base, timer_cb, c);
  c->timer_at = INT64_MAX;
  c->retry = evtimer_new(env->base, retry_cb, c);
  c->ping = event_new(env->base, -1, EV_PERSIST, ping_cb, c);
  c->later_ev = evtimer_new(env->base, later_cb, c);
  if (env->url->kind != URL_TLS) {
    c->flush_ev = event_new(env->base, -1, 0, flush_cb, c);
  }
  return c->timer && c->retry && c->ping && c->later_ev && (env->url->kind == URL_TLS || c->flush_ev) ? 0
                                                                                                      : RLOCK_ENOMEM;
}

void rlock__conn_close(conn_t *c) {
  if (c->state == CS_CLOSED) return;
  c->state = CS_CLOSED;
  rlock__resolve_cancel(c);
  leave_direct(c);
  if (c->bev) bufferevent_free(c->bev);
  c->bev = NULL;
  req_t *r;
  rlock__set_msg("client closed");
  while ((r = q_pop(&c->inflight))) finish_err(r, RLOCK_ECLOSED);
  while ((r = q_pop(&c->pending))) finish_err(r, RLOCK_ECLOSED);
  while ((r = q_pop(&c->later))) finish_err(r, RLOCK_ECLOSED);
  if (c->later_ev) event_free(c->later_ev);
  c->later_ev = NULL;
  if (c->timer) event_free(c->timer);
  if (c->retry) event_free(c->retry);
  if (c->ping) event_free(c->ping);
  if (c->flush_ev) event_free(c->flush_ev);
  free(c->wbuf);
  c->timer = c->retry = c->ping = c->flush_ev = NULL;
  c->wbuf = NULL;
  c->wbuf_n = c->wbuf_cap = 0;
  if (c->reader) redisReaderFree(c->reader);
  c->reader = NULL;
  if (c->addrs) evutil_freeaddrinfo(c->addrs);
  c->addrs = NULL;
  free(c->host);
  c->host = NULL;
}
