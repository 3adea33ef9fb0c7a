/* semaphore.c -- Redisson's RSemaphore and RCountDownLatch on the engine: their
 * handles (an rlock_lock_t of a kind that names only the channel), and the
 * three ops the public calls make (api.c):
 *   OP_SEM_ACQUIRE  try semaphore_acquire.lua; too few permits: join
 *                   redisson_sc:{NAME}, park until a release's message (the
 *                   new count N wakes up to N parked waiters), the wait
 *                   bound or the keep-alive of its queue entry (within half
 *                   a slot, fair_waiter_timeout_ms), try again
 *   OP_SEM_CALL     one script (release, try-set, add, drain, the latch's
 *                   try-set and count-down) or a GET (available, count)
 *   OP_LATCH_AWAIT  GET the count; above 0: join the latch's channel, park
 *                   until the message 0 (wakes all) or the wait bound, GET again
 *   OP_AWAIT_FREE   a lock of any kind: PTTL of its key; there: join the
 *                   lock's channel, park until a message, the holder's TTL or
 *                   the wait bound (a simple lock: also its acquirers' poll),
 *                   PTTL again (rlock_lock_await_free)
 * Every script that writes carries a request id whose latch key
 * (rlock_semaphore_latch:{NAME}:<id>, rlock_countdown_latch:{NAME}:<id>)
 * stores its first answer: a request re-sent after a lost answer (up to
 * retry_attempts, while its latch surely lives) counts once. An acquire
 * whose answer stays lost, or that was cancelled or refused by the replica
 * sync once granted, is undone (semaphore_acquire_undo.lua: its permits
 * back, a tombstone against a late copy). */
#include "kinds/kind.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#define SEM_CHANNEL "redisson_sc"
#define LATCH_CHANNEL "redisson_countdownlatch__channel__{"
#define SEM_LATCH "rlock_semaphore_latch"
#define SEM_QUEUE "rlock_semaphore_queue"
#define SEM_TIMEOUT "rlock_semaphore_timeout"
#define WAITER_ID_LEN 16 /* hex chars of a waiter's id in the queue */
#define LATCH_LATCH "rlock_countdown_latch"
#define LATCH_MARGIN_MS 1000 /* an id is re-sent only if it lands this long before its latch expires */

/* ------------------------------------------------------------ kinds */

static int sem_init(rlock_lock_t *l) { return rlock__kind_init_channel(l, SEM_CHANNEL); }

/* redisson_countdownlatch__channel__{NAME}: braces always (Redisson's; not
 * prefixName). */
static int latch_init(rlock_lock_t *l) {
  l->plain = memchr(l->name, '{', l->len) || memchr(l->name, '}', l->len) ? -1 : 1;
  l->slot1 = rlock__names_slot(l->name, l->len) + 1;
  size_t pl = strlen(LATCH_CHANNEL), n = pl + l->len + 1;
  char *p = malloc(n + 1);
  if (!p) return RLOCK_ENOMEM;
  memcpy(p, LATCH_CHANNEL, pl);
  memcpy(p + pl, l->name, l->len);
  p[n - 1] = '}';
  p[n] = 0;
  l->channel.p = p;
  l->channel.n = n;
  return 0;
}

/* A semaphore's message is its new count N: up to N parked waiters try. */
static int sem_wake(const rlock_reply_t *msg) {
  if (!msg || msg->type != RLOCK_REPLY_STRING || !msg->str) return 0;
  char *end = NULL;
  long long n = strtoll(msg->str, &end, 10);
  if (end == msg->str || n <= 0) return 0;
  return n >= WAKE_ALL ? WAKE_ALL - 1 : (int)n;
}

/* The latch's 0 opens it: every waiter; 1 (a new count) wakes nobody. */
static int latch_wake(const rlock_reply_t *msg) {
  return msg && msg->type == RLOCK_REPLY_STRING && msg->len == 1 && msg->str[0] == '0' ? WAKE_ALL : 0;
}

const lock_kind_t rlock__kind_semaphore = {.name = "semaphore", .init = sem_init, .wake = sem_wake};
const lock_kind_t rlock__kind_latch = {.name = "latch", .init = latch_init, .wake = latch_wake};

/* ------------------------------------------------------------ requests */

static bool is_latch(const op_t *op) { return op->lock->kind == &rlock__kind_latch; }

static int op_slot(const op_t *op) { return op->lock->slot1 - 1; }

/* A read that writes nothing: no request id, no latch, no WAIT. */
static bool is_read(const op_t *op) {
  return op->kind == OP_LATCH_AWAIT || op->kind == OP_AWAIT_FREE || (op->kind == OP_SEM_CALL && !op->script);
}

/* The current request id's latch key (malloc'd into out): 0 or RLOCK_ENOMEM. */
static int latch_key(const op_t *op, const char *reqid, bytes_t *out) {
  const rlock_lock_t *l = op->lock;
  return rlock__names_prefixed_suffix(out, is_latch(op) ? LATCH_LATCH : SEM_LATCH, l->name, l->len, reqid)
             ? RLOCK_ENOMEM
             : 0;
}

/* NAME's queue and deadline keys (malloc'd): 0 or RLOCK_ENOMEM. */
static int queue_keys(const char *name, size_t len, bytes_t *q, bytes_t *z) {
  return rlock__names_prefixed2(q, SEM_QUEUE, z, SEM_TIMEOUT, name, len);
}

static void done_cb(req_t *r, int status, rlock_reply_t *reply);

/* semaphore_acquire.lua: KEYS name, latch, queue, deadlines; ARGV permits,
 * latch TTL, waiter id, slot, mode ('q' queue when short; 't' one try),
 * fair after (ms). */
static req_t *acquire_req(op_t *op, const bytes_t *latch, const char *pbuf, size_t pn, const char *tbuf, size_t tn) {
  rlock_lock_t *l = op->lock;
  bytes_t q, z;
  if (queue_keys(l->name, l->len, &q, &z)) return NULL;
  char slot[24], after[24];
  size_t slotn = rlock__i64toa(rlock__client_waiter_slot(op->cl), slot);
  size_t aftern = rlock__i64toa(op->cl->opt.semaphore_fair_after_ms, after);
  const char *keys[4] = {l->name, latch->p, q.p, z.p};
  size_t kl[4] = {l->len, latch->n, q.n, z.n};
  const char *args[6] = {pbuf, tbuf, op->waiter, slot, op->wait_ms == 0 ? "t" : "q", after};
  size_t al[6] = {pn, tn, WAITER_ID_LEN, slotn, 1, aftern};
  req_t *r = rlock__script_req(SCRIPT_SEMAPHORE_ACQUIRE, 4, keys, kl, 6, args, al, op->cl->opt.command_timeout_ms,
                               done_cb, op);
  free(q.p);
  free(z.p);
  return r;
}

/* The request of op's current id: its script with keys and arguments. */
static req_t *build(op_t *op) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  int64_t t = cl->opt.command_timeout_ms;
  if (is_read(op)) {
    bool free_wait = op->kind == OP_AWAIT_FREE;
    const char *argv[2] = {free_wait ? "PTTL" : "GET", l->name};
    size_t lens[2] = {free_wait ? 4 : 3, l->len};
    return rlock__req_new(2, argv, lens, t, done_cb, op);
  }
  bytes_t latch;
  if (latch_key(op, op->reqid, &latch)) return NULL;
  char pbuf[24], tbuf[24];
  size_t pn = rlock__i64toa(op->permits, pbuf), tn = rlock__i64toa(rlock__client_latch_ttl(cl), tbuf);
  const char *pub = rlock__publish_cmd(cl);
  size_t pubn = rlock__publish_len(cl);
  int script = op->kind == OP_SEM_ACQUIRE ? SCRIPT_SEMAPHORE_ACQUIRE : op->script;
  req_t *r = NULL;
  if (script == SCRIPT_SEMAPHORE_ACQUIRE) {
    r = acquire_req(op, &latch, pbuf, pn, tbuf, tn);
  } else if (script == SCRIPT_SEMAPHORE_DRAIN) {
    const char *keys[2] = {l->name, latch.p};
    size_t kl[2] = {l->len, latch.n};
    const char *args[1] = {tbuf};
    size_t al[1] = {tn};
    r = rlock__script_req(script, 2, keys, kl, 1, args, al, t, done_cb, op);
  } else {
    const char *keys[3] = {l->name, l->channel.p, latch.p};
    size_t kl[3] = {l->len, l->channel.n, latch.n};
    if (script == SCRIPT_LATCH_SET) { /* message 1, count, publish, TTL */
      const char *args[4] = {"1", pbuf, pub, tbuf};
      size_t al[4] = {1, pn, pubn, tn};
      r = rlock__script_req(script, 3, keys, kl, 4, args, al, t, done_cb, op);
    } else if (script == SCRIPT_LATCH_COUNT_DOWN) { /* message 0, publish, TTL */
      const char *args[3] = {"0", pub, tbuf};
      size_t al[3] = {1, pubn, tn};
      r = rlock__script_req(script, 3, keys, kl, 3, args, al, t, done_cb, op);
    } else { /* release, set, add: permits, publish, TTL */
      const char *args[3] = {pbuf, pub, tbuf};
      size_t al[3] = {pn, pubn, tn};
      r = rlock__script_req(script, 3, keys, kl, 3, args, al, t, done_cb, op);
    }
  }
  free(latch.p);
  return r;
}

static void send_req(op_t *op) {
  req_t *r = build(op);
  if (!r) {
    rlock__op_finish(op, rlock__fail(RLOCK_ENOMEM, "out of memory"), 0, NULL, 0);
    return;
  }
  op->in_flight = true;
  if (op->kind == OP_SEM_ACQUIRE) stat_add(op->cl, ST_ATTEMPTS, 1);
  if (op->kind == OP_SEM_ACQUIRE && op->wait_ms != 0) op->queued = true; /* it may queue */
  if (is_read(op)) {
    rlock__client_send(op->cl, op->lock->name, op->lock->len, r); /* a read: no WAIT */
    return;
  }
  stat_add(op->cl, ST_SCRIPTS, 1);
  rlock__client_send_synced_at(op->cl, op_slot(op), r, &op->sync_need);
}

/* A fresh request id (the latch of the old one stays: it may be re-sent no more). */
static void attempt(op_t *op, bool fresh) {
  if (fresh) {
    rlock__prng_hex(&op->cl->prng, op->reqid);
    op->retries = 0;
    op->sent_at = rlock_now_ms();
    op->id_written = false;
  }
  send_req(op);
}

/* The current id may have reached the server, and a copy sent now might land
 * after its latch expired there: it must not be sent again. */
static bool id_stale(const op_t *op) {
  if (!op->id_written || is_read(op)) return false; /* a read has no id: a copy of it changes nothing */
  int64_t ends = op->sent_at + rlock__client_latch_ttl(op->cl);
  return rlock_now_ms() + op->cl->opt.command_timeout_ms + LATCH_MARGIN_MS >= ends;
}

/* The latch of an answered id: deleted (batched), unless a copy of it was
 * re-sent (an earlier copy may still arrive: the latch stops it). */
static void drop_latch(op_t *op) {
  bytes_t latch;
  if (op->retries > 0 || (op->kind != OP_SEM_ACQUIRE && !op->script)) return;
  if (latch_key(op, op->reqid, &latch)) return;
  rlock__client_queue_del(op->cl, latch.p, latch.n);
  free(latch.p);
}

/* ------------------------------------------------------------ undo */

typedef struct sem_undo {
  client_t *cl;
  bytes_t name, channel, latch, queue, timeout;
  char waiter[40]; /* its queue entry ("<id>:<permits>"; empty: none) */
  bool leave;      /* the entry leaves the queue (the wait ended) */
  int64_t permits;
  int tries;
} sem_undo_t;

static void undo_send(sem_undo_t *u);

static void undo_free(sem_undo_t *u) {
  client_t *cl = u->cl;
  free(u->name.p);
  free(u->channel.p);
  free(u->latch.p);
  free(u->queue.p);
  free(u->timeout.p);
  free(u);
  RLOCK__ASSERT(cl->undos_inflight > 0);
  cl->undos_inflight--;
  rlock__client_linger_check(cl); /* closing: this may be the last answer it waits for */
}

static void undo_done(req_t *r, int status, rlock_reply_t *reply) {
  sem_undo_t *u = r->ctx;
  bool lost = status == RLOCK_ETIMEDOUT || status == RLOCK_ECONNLOST || status == RLOCK_ECONNECT;
  rlock_reply_free(reply);
  if (lost && u->tries++ < u->cl->opt.retry_attempts) {
    undo_send(u); /* safe to send again */
    return;
  }
  undo_free(u);
}

static void undo_send(sem_undo_t *u) {
  client_t *cl = u->cl;
  char pbuf[24], tbuf[24];
  size_t pn = rlock__i64toa(u->permits, pbuf), tn = rlock__i64toa(rlock__client_latch_ttl(cl), tbuf);
  const char *keys[5] = {u->name.p, u->channel.p, u->latch.p, u->queue.p, u->timeout.p};
  size_t kl[5] = {u->name.n, u->channel.n, u->latch.n, u->queue.n, u->timeout.n};
  const char *args[5] = {pbuf, rlock__publish_cmd(cl), tbuf, u->waiter, u->leave ? "1" : "0"};
  size_t al[5] = {pn, rlock__publish_len(cl), tn, strlen(u->waiter), 1};
  req_t *r = rlock__script_req(SCRIPT_SEMAPHORE_ACQUIRE_UNDO, 5, keys, kl, 5, args, al, cl->opt.command_timeout_ms,
                               undo_done, u);
  if (!r) {
    undo_free(u);
    return;
  }
  stat_add(cl, ST_SCRIPTS, 1);
  rlock__client_send(cl, u->name.p, u->name.n, r);
}

static bytes_t dup_bytes(const char *p, size_t n) {
  bytes_t b = {malloc(n + 1), n};
  if (b.p) memcpy(b.p, p, n), b.p[n] = 0;
  return b;
}

/* Give back what op's current try may have taken, and stop its copies;
 * leave: op's wait ends, its queue entry goes too (a waiter that tries
 * again keeps its place). */
static void undo_leave(op_t *op, bool leave) {
  sem_undo_t *u = calloc(1, sizeof *u);
  if (!u) return;
  u->cl = op->cl;
  /* a close waits for its answer (client.c's linger): written behind a
   * try's WAIT, it runs only once that WAIT ends, and a connection closed
   * before drops it (the permits the try took would be lost: no lease) */
  op->cl->undos_inflight++;
  u->permits = op->permits;
  u->leave = leave;
  if (op->queued) memcpy(u->waiter, op->waiter, sizeof u->waiter);
  if (leave) op->queued = false;
  u->name = dup_bytes(op->lock->name, op->lock->len);
  u->channel = dup_bytes(op->lock->channel.p, op->lock->channel.n);
  if (!u->name.p || !u->channel.p || latch_key(op, op->reqid, &u->latch) ||
      queue_keys(op->lock->name, op->lock->len, &u->queue, &u->timeout)) {
    undo_free(u);
    return;
  }
  undo_send(u);
}

static void undo(op_t *op) { undo_leave(op, false); }

/* An acquire's wait ended without its permits: its queue entry (if its tries
 * may have made one) leaves, and those behind it are told if permits are
 * there (semaphore_acquire_undo.lua, which also stops a copy of the last
 * try). The only way out of the queue besides taking; a dead process's entry
 * goes at its deadline instead. */
static void leave(op_t *op) {
  if (op->kind == OP_SEM_ACQUIRE && op->queued) undo_leave(op, true);
}

void rlock__sem_undo_on_close(op_t *op) { undo_leave(op, true); }

/* ------------------------------------------------------------ waiting */

static int cancelled_rc(void) { return rlock__fail(RLOCK_ECANCELED, "wait cancelled"); }

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  op_t *op = arg;
  if (op->in_flight || op->finished) return;
  op->w.parked = false;
  attempt(op, true); /* one more try; its reply checks the deadline */
}

/* Wake op at its deadline (none: RLOCK_WAIT_FOREVER), or at ttl (a lock's
 * PTTL, > 0) if that comes first: a lock may expire without a message. */
static void arm_deadline_ttl(op_t *op, int64_t now, int64_t ttl) {
  if (op->deadline < 0 && ttl <= 0) return;
  if (!op->timer && !(op->timer = evtimer_new(op->cl->base, timer_cb, op))) {
    leave(op);
    rlock__op_finish(op, rlock__fail(RLOCK_ENOMEM, "out of memory"), 0, NULL, 0);
    return;
  }
  int64_t in = op->deadline < 0 ? ttl : op->deadline > now ? op->deadline - now : 0;
  if (ttl > 0 && ttl < in) in = ttl;
  struct timeval tv;
  rlock__tv_from_ms(&tv, in + 1);
  evtimer_add(op->timer, &tv);
}

/* The subscription was refused (an ACL without the channel): no message will
 * come, and a semaphore or latch has no TTL to wake on: the wait ends now. */
static bool wait_refused(op_t *op) {
  if (!op->w.refused) return false;
  leave(op);
  rlock__op_finish(op, rlock__fail(op->w.refused, "cannot wait: %s", rlock__pubsub_refused(&op->w)), 0, NULL, 0);
  return true;
}

static void on_wake(waiter_t *w) {
  op_t *op = (op_t *)((char *)w - offsetof(op_t, w));
  if (op->in_flight || op->finished) return;
  if (wait_refused(op)) return;
  op->woken = true;
  if (op->timer) evtimer_del(op->timer);
  attempt(op, true);
}

static void cancel_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  op_t *op = arg;
  op->cancelled = true;
  event_del(op->cancel_ev);
  if (!op->in_flight) {
    leave(op);
    rlock__op_finish(op, cancelled_rc(), 0, NULL, 0);
  }
  /* else: the reply of the try in flight decides (and gives permits back) */
}

/* Not yet (too few permits, the count above 0, the lock held with ttl ms
 * left: -1 none): wait, or end. */
static void not_yet(op_t *op, int64_t ttl) {
  int64_t now = rlock_now_ms();
  /* a free-waiter's lock has a TTL (> 0) or none (-1): never 0, which
   * arm_deadline_ttl reads as none (a semaphore's, a latch's) */
  RLOCK__ASSERT(op->kind != OP_AWAIT_FREE || ttl != 0);
  if (op->cancelled) {
    leave(op);
    rlock__op_finish(op, cancelled_rc(), 0, NULL, 0);
    return;
  }
  if (op->wait_ms == 0 || (op->deadline >= 0 && now >= op->deadline)) {
    leave(op);
    rlock__op_finish(op,
                     rlock__fail(RLOCK_EBUSY, op->kind == OP_AWAIT_FREE ? "the lock is still held"
                                              : is_latch(op)            ? "timed out waiting for the latch to open"
                                                                        : "timed out waiting for permits"),
                     0, NULL, 0);
    return;
  }
  /* a kind whose releases may say nothing on the channel looks sooner */
  if (op->kind == OP_AWAIT_FREE && op->lock->kind->look_ms) ttl = op->lock->kind->look_ms(op, ttl);
  /* a kind without messages (the spin lock) only looks */
  if (op->kind == OP_AWAIT_FREE && op->lock->kind->no_pubsub) {
    arm_deadline_ttl(op, now, ttl);
    return;
  }
  if (!op->subscribed) {
    op->subscribed = true;
    op->w.on_wake = on_wake;
    op->w.wake = op->lock->kind->wake;
    op->w.observer = op->kind == OP_AWAIT_FREE; /* takes no waiter's wake-up */
    int rc = rlock__pubsub_join(&op->cl->ps, &op->w, op->lock->channel.p, op->lock->channel.n);
    if (rc < 0) {
      leave(op);
      rlock__op_finish(op, rlock__fail(rc, "cannot subscribe"), 0, NULL, 0);
    } else if (rc == 1) attempt(op, true); /* subscribed already: a release may have come before it */
    else arm_deadline_ttl(op, now, ttl);   /* on_wake once the subscription is confirmed */
    return;
  }
  if (wait_refused(op)) return;
  if (rlock__pubsub_park(&op->w)) { /* a message came while the try was in flight */
    op->woken = true;
    attempt(op, true);
    return;
  }
  op->woken = false;
  arm_deadline_ttl(op, now, ttl);
}

/* A waiter woken by a message could not take: a waiter of this client ahead
 * of it in the queue (a smaller place) may take what the message announced,
 * and the client may have woken this one instead (it wakes its waiters in
 * the order they joined the channel, and a waiter whose entry was taken out
 * as gone comes back at the tail): the wake-up it used goes on to the first
 * parked one ahead. Each pass goes to a smaller place, so a chain of passes
 * ends. The channel redisson_sc:{NAME} is the permit-expirable semaphore's
 * too (one NAME may be both, as in Redisson): its waiters (lock ops, one
 * permit each) do not read rlock's queue and may take what this one could
 * not: with no semaphore waiter ahead, the first parked one (not an
 * observer) is passed the wake-up (it passes on no further, so the chain
 * still ends). */
static void pass_ahead(op_t *op) {
  waiter_t *first = &op->w, *pes = NULL;
  while (first->prev) first = first->prev;
  for (waiter_t *o = first; o; o = o->next) {
    if (o == &op->w || !o->parked) continue;
    op_t *x = (op_t *)((char *)o - offsetof(op_t, w));
    RLOCK__ASSERT(x->kind == OP_SEM_ACQUIRE || x->lock->kind == &rlock__kind_pes);
    if (x->kind != OP_SEM_ACQUIRE) {
      if (!pes && !o->observer) pes = o;
    } else if (x->place > 0 && x->place < op->place) {
      o->parked = false;
      o->on_wake(o);
      return;
    }
  }
  if (pes) { /* none ahead: a permit waiter, which may take what this one could not */
    pes->parked = false;
    pes->on_wake(pes);
  }
}

/* ------------------------------------------------------------ answers */

static bool answer_lost(int status) { return status == RLOCK_ETIMEDOUT || status == RLOCK_ECONNLOST; }

/* No answer (status < 0): re-send (same id), or end. */
static void failed(op_t *op, int status) {
  client_t *cl = op->cl;
  bool waits = op->kind != OP_SEM_CALL;
  bool again;
  if (status == RLOCK_ECONNECT) /* not written: re-queued until the wait bound (calls: a retry each) */
    again = !op->cancelled &&
            (waits ? op->deadline < 0 || rlock_now_ms() < op->deadline : op->retries < cl->opt.retry_attempts);
  else if (waits && is_read(op)) /* an await's read: no id, nothing written; sent again until the wait bound,
                                  * and up to retry_attempts times past it (the bound is about the wait, not
                                  * the transport: a one-look await is re-sent as before, as a lock try is) */
    again = answer_lost(status) && !op->cancelled &&
            (op->retries < cl->opt.retry_attempts || op->deadline < 0 || rlock_now_ms() < op->deadline);
  else /* a scripted call (release, count-down...) goes on past retry_attempts while its id's latch
        * surely lives (id_stale, below): the dead connection it met is replaced meanwhile
        * (dead_after_timeouts), and a lost release would lose its permits for good (no lease) */
    again = answer_lost(status) && !op->cancelled &&
            (op->retries < cl->opt.retry_attempts || (op->kind == OP_SEM_CALL && op->script && op->id_written));
  if (again && status != RLOCK_ECONNECT && id_stale(op)) {
    /* its latch may be gone when a copy lands: an acquire gives back and
     * tries with a fresh id; a call's outcome stays unknown */
    if (op->kind == OP_SEM_ACQUIRE) {
      undo(op);
      attempt(op, true);
      return;
    }
    again = false;
  }
  if (again) {
    /* same request id: counts once even if both arrive (a request never
     * written is no copy: a wait's does not use up the re-sends) */
    RLOCK__ASSERT(op->retries < cl->opt.retry_attempts || status == RLOCK_ECONNECT || !id_stale(op));
    if (status != RLOCK_ECONNECT || !waits) op->retries++;
    send_req(op);
    return;
  }
  if (op->kind == OP_SEM_ACQUIRE && op->id_written) undo_leave(op, true);
  else leave(op);
  rlock__op_finish(op, op->cancelled ? cancelled_rc() : rlock__fail_keep(status), 0, NULL, 0);
}

static bool parse_int(const rlock_reply_t *r, int64_t *v) {
  if (r->type == RLOCK_REPLY_INTEGER) {
    *v = r->integer;
    return true;
  }
  if (r->type == RLOCK_REPLY_NIL) {
    *v = 0; /* missing: 0 (Redisson's) */
    return true;
  }
  if (r->type != RLOCK_REPLY_STRING || !r->len || r->len > 20) return false;
  char *end = NULL;
  *v = strtoll(r->str, &end, 10);
  return end == r->str + r->len;
}

static void done_cb(req_t *r, int status, rlock_reply_t *reply) {
  op_t *op = r->ctx;
  if (rlock__op_orphan(op)) { /* closing: op finished (an acquire in flight was undone) */
    rlock_reply_free(reply);
    return;
  }
  if (status != RLOCK_ECONNECT) op->id_written = true;
  if (op->cancel && atomic_load(&op->cancel->triggered)) op->cancelled = true;
  if (status == RLOCK_ECLOSED) {
    rlock__op_finish(op, status, 0, NULL, 0);
    return;
  }
  if (status != 0) {
    failed(op, status);
    return;
  }
  bool read = is_read(op);
  int acked = 0;
  bool synced = read ? true : rlock__client_sync_split(&op->sync_need, &reply, &acked);
  int64_t v = 0, wait = 0;
  int rc = 0;
  if (op->kind == OP_SEM_ACQUIRE && reply->type == RLOCK_REPLY_ARRAY) { /* queued: {0, ms, place} */
    if (reply->elements != 3 || reply->element[0]->type != RLOCK_REPLY_INTEGER ||
        reply->element[1]->type != RLOCK_REPLY_INTEGER || reply->element[2]->type != RLOCK_REPLY_INTEGER ||
        reply->element[0]->integer != 0 || reply->element[1]->integer < 1 || reply->element[2]->integer < 1)
      rc = rlock__fail(RLOCK_EPROTO, "semaphore: unexpected reply (not a queue place)");
    else {
      v = 2; /* queued */
      wait = reply->element[1]->integer;
      op->place = reply->element[2]->integer;
    }
  } else if (reply->type == RLOCK_REPLY_ERROR)
    rc = rlock__fail(rlock__reply_error_code(reply), "%s: %.200s", op->lock->kind->name, reply->str);
  else if (!parse_int(reply, &v))
    rc = rlock__fail(RLOCK_EPROTO, "%s: unexpected reply (not an integer)", op->lock->kind->name);
  rlock_reply_free(reply);
  if (rc) {
    if (op->kind == OP_SEM_ACQUIRE && op->retries > 0) undo_leave(op, true); /* a copy may still land */
    else leave(op);
    rlock__op_finish(op, rc, 0, NULL, 0);
    return;
  }
  switch (op->kind) {
  case OP_SEM_ACQUIRE:
    if (v == 1) op->queued = false;             /* the grant took the entry out */
    if (v == 1 && (op->cancelled || !synced)) { /* taken, but not wanted any more: given back */
      undo(op);
      if (!synced) stat_add(op->cl, ST_ACQUIRE_SYNC_MISSES, 1);
      rlock__op_finish(op, op->cancelled ? cancelled_rc() : rlock__client_sync_fail(op->cl, &op->sync_need, acked), 0,
                       NULL, 0);
    } else if (v == 1) {
      drop_latch(op);
      rlock__op_finish(op, 0, 0, NULL, 0);
    } else if (v == -3) {
      attempt(op, true);             /* that id was undone (id_stale): a fresh one */
    } else if (v == 0 || v == 2) {   /* could not take (a try only), or queued */
      if (op->retries > 0) undo(op); /* refused: plant the tombstone against an earlier copy */
      if (v == 2 && op->woken && op->w.ch) pass_ahead(op);
      not_yet(op, wait); /* queued: try again within wait ms (its entry's keep-alive) */
    } else {
      rlock__op_finish(op, rlock__fail(RLOCK_EPROTO, "semaphore: unexpected reply %lld", (long long)v), 0, NULL, 0);
    }
    return;
  case OP_LATCH_AWAIT:
    if (v <= 0) rlock__op_finish(op, 0, 0, NULL, 0);
    else not_yet(op, 0);
    return;
  case OP_AWAIT_FREE: /* PTTL: -2 no key (free), -1 no expiry, else ms left */
    /* 0: the holder's last ms (the key lives to its end): look again in
     * 1 ms. (not_yet's 0 is "no TTL", the semaphore's: it armed no timer,
     * and the waiter slept on beside the free lock.) */
    if (v == -2) rlock__op_finish(op, 0, 0, NULL, 0);
    else not_yet(op, v == 0 ? 1 : v);
    return;
  default:
    if (!synced) stat_add(op->cl, ST_UNLOCK_SYNC_MISSES, 1); /* a write stands; counted */
    drop_latch(op);
    rlock__op_finish(op, 0, v, NULL, 0);
  }
}

void rlock__sem_start(op_t *op) {
  client_t *cl = op->cl;
  if (op->kind != OP_SEM_CALL) {
    if (op->cancel) {
      if (atomic_load(&op->cancel->triggered)) {
        rlock__op_finish(op, cancelled_rc(), 0, NULL, 0);
        return;
      }
      op->cancel_ev = event_new(cl->base, op->cancel->fd, EV_READ | EV_PERSIST, cancel_cb, op);
      if (op->cancel_ev) event_add(op->cancel_ev, NULL);
    }
    op->deadline = op->wait_ms < 0 ? -1 : rlock_now_ms() + op->wait_ms;
  }
  if (op->kind == OP_SEM_ACQUIRE) { /* its queue entry: "<id>:<permits>" */
    char hex[33];
    rlock__prng_hex(&cl->prng, hex);
    memcpy(op->waiter, hex, WAITER_ID_LEN);
    op->waiter[WAITER_ID_LEN] = ':';
    rlock__i64toa(op->permits, op->waiter + WAITER_ID_LEN + 1);
  }
  attempt(op, true);
}
