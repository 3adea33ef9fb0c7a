/* lock.c -- the lock machinery every lock kind shares, on the I/O thread:
 * the acquire state machine, release, force unlock and the queries, driven
 * through the lock's kind table (kinds/kind.h) for what is the kind's own:
 * its scripts and what their replies mean (kinds/reentrant.c: Redisson's RLock).
 *
 * Acquire:  try (kind->try_req) -> granted: register the hold (watchdog.c)
 *           -> busy: subscribe to the lock's channel, try again, then park
 *              until a message wakes us or min(the kind's wait bound, wait
 *              left) runs out, try again... never a busy poll.
 * Each try carries a request id (the latch): a try whose reply is lost (timeout,
 * dropped connection) is re-sent with the same id and counts once; if we give
 * up, or the caller cancelled, the kind's undo gives the hold back. An
 * id is never re-sent once its latch may have expired on the server: the op
 * first gives back what the old id may have taken (an undo that also checks
 * the owner's count against the client's, so an expired latch cannot fool
 * it), then tries with a fresh id.
 * Release: kind->release_req with its own request id, re-sent on timeout the same
 * way, so an unlock never applies twice; it carries the client's hold count,
 * and a server count that disagrees is a loss (watchdog.c reports it).
 * Replica sync: tries and releases carry WAIT in the same request
 * (rlock__client_send_synced); a grant too few replicas acknowledged is undone
 * and tried again (sync_missed), an unlock stands and is counted. */
#include "kinds/kind.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#define ACQUIRE_LATCH "rlock_acquire_latch"
#define UNLOCK_LATCH "redisson_unlock_latch"
#define HANDOFF_MS 2         /* how long a releaser lets notified waiters go first */
#define HANDOFF_MAX 4096     /* entries kept before the table is reset */
#define LATCH_MARGIN_MS 1000 /* an id is re-sent only if it lands this long before its latch expires */

/* ------------------------------------------------------------ handoff
 * Redisson's lock is unfair: the process that just released is one round trip
 * ahead of the waiters its unlock message wakes, so in a hot loop it wins
 * again and again and they starve. When an unlock reached subscribers (reply
 * 2), this client's next acquire of that name lets them go first: it waits
 * for the next unlock message or HANDOFF_MS, whichever comes first. */

/* The deadline is stored in the map's value pointer itself (never 0: the
 * monotonic clock is far past HANDOFF_MS), so a mark costs no allocation. */
/* Each mark also counts in its name's fast slot (fast.c): no fast acquire of
 * the name while it stands. */
void rlock__handoff_mark(client_t *cl, const char *name, size_t len) {
  if (cl->handoff.count >= HANDOFF_MAX) rlock__handoff_clear(cl);
  bool added;
  void **slot = rlock__map_put_slot(&cl->handoff, name, len, NULL, &added);
  if (!slot) return; /* out of memory: no handoff this time */
  *slot = (void *)(uintptr_t)(rlock_now_ms() + HANDOFF_MS);
  if (added) atomic_fetch_add(&cl->fast.hand[rlock__fast_slot(name, len)], 1);
}

static void handoff_mark_lock(client_t *cl, const rlock_lock_t *l) { rlock__handoff_mark(cl, l->name, l->len); }

/* ms left of this client's handoff window for l (0: none), consuming it. */
static int64_t handoff_take(client_t *cl, const rlock_lock_t *l) {
  if (!cl->handoff.count) return 0; /* the usual case: no lookup */
  int64_t until = (int64_t)(uintptr_t)rlock__map_del(&cl->handoff, l->name, l->len);
  if (until) atomic_fetch_sub(&cl->fast.hand[rlock__fast_slot(l->name, l->len)], 1);
  int64_t left = until ? until - rlock_now_ms() : 0;
  return left > 0 ? left : 0;
}

void rlock__handoff_clear(client_t *cl) {
  map_iter_t it;
  rlock__map_iter_init(&it, &cl->handoff);
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));)
    atomic_fetch_sub(&cl->fast.hand[rlock__fast_slot(e->key, e->klen)], 1);
  rlock__map_free(&cl->handoff);
}

/* A request whose outcome is unknown: written, but its answer never came. */
static bool answer_lost(int status) { return status == RLOCK_ETIMEDOUT || status == RLOCK_ECONNLOST; }

static void attempt(op_t *op, bool fresh);
static void undo_attempt(op_t *op, bool wait);
static void undo_attempt_as(op_t *op, bool wait, bool stay);
static void wait_timer_cb(evutil_socket_t fd, short what, void *arg);

int64_t rlock__op_lease_ms(const op_t *op) {
  return op->lease_ms == RLOCK_LEASE_WATCHDOG ? op->cl->opt.watchdog_timeout_ms : op->lease_ms;
}

/* ------------------------------------------------------------ op memory
 * Ops are allocated on the callers' threads and freed on the I/O thread. Up
 * to about SPARE_OPS freed ones are kept for reuse (client->spare_ops, a
 * lock-free stack: no mutex on the way of a call): a lock+unlock pair in
 * steady state allocates no op. A taker takes the whole stack (one
 * exchange), keeps the first and pushes the rest back: no pop of one node,
 * so a node recycled meanwhile cannot fool a compare-and-swap (ABA). Under
 * ASan a spare is poisoned (but its link) until it is taken again, so a use
 * after free is still caught. */
#define SPARE_OPS 64
#if defined(__SANITIZE_ADDRESS__)
#define SPARE_POISON(op) ASAN_POISON_MEMORY_REGION(&(op)->next + 1, sizeof *(op) - sizeof(op)->next)
#define SPARE_UNPOISON(op) ASAN_UNPOISON_MEMORY_REGION((op), sizeof *(op))
#else
#define SPARE_POISON(op) ((void)(op))
#define SPARE_UNPOISON(op) ((void)(op))
#endif

/* Pushes the chain first..last (linked by next) on the spare stack. */
static void spares_push(client_t *cl, op_t *first, op_t *last) {
  op_t *head = atomic_load_explicit(&cl->spare_ops, memory_order_relaxed);
  do last->next = head;
  while (
      !atomic_compare_exchange_weak_explicit(&cl->spare_ops, &head, first, memory_order_release, memory_order_relaxed));
}

op_t *rlock__op_alloc(client_t *cl) {
  op_t *op = atomic_load_explicit(&cl->spare_ops, memory_order_relaxed)
                 ? atomic_exchange_explicit(&cl->spare_ops, NULL, memory_order_acquire)
                 : NULL;
  if (!op) {
    if ((op = calloc(1, sizeof *op))) op->fslot = -1;
    return op;
  }
  SPARE_UNPOISON(op);
  op_t *rest = op->next;
  if (rest) { /* the others: back on the stack (only their links are read and written) */
    op_t *last = rest;
    while (last->next) last = last->next;
    spares_push(cl, rest, last);
  }
  atomic_fetch_sub_explicit(&cl->nspare_ops, 1, memory_order_relaxed);
  memset(op, 0, offsetof(op_t, latch)); /* the latch room is not read before it is written */
  op->fslot = -1;
  return op;
}

void rlock__op_recycle(client_t *cl, op_t *op) {
  if (atomic_fetch_add_explicit(&cl->nspare_ops, 1, memory_order_relaxed) >= SPARE_OPS) {
    atomic_fetch_sub_explicit(&cl->nspare_ops, 1, memory_order_relaxed);
    free(op);
    return;
  }
  SPARE_POISON(op); /* before the push: a taker may unpoison it at once */
  spares_push(cl, op, op);
}

void rlock__op_spares_free(client_t *cl) {
  op_t *op = atomic_exchange(&cl->spare_ops, NULL);
  while (op) {
    SPARE_UNPOISON(op);
    op_t *next = op->next;
    free(op);
    op = next;
  }
  atomic_store(&cl->nspare_ops, 0);
}

static void op_free(op_t *op) {
  if (op->timer) event_free(op->timer);
  if (op->cancel_ev) event_free(op->cancel_ev);
  while (op->raw) { /* OP_COMMAND never started (client closing) */
    req_t *next = op->raw->next;
    rlock__req_free(op->raw);
    op->raw = next;
  }
  rlock__op_recycle(op->cl, op);
}

/* ------------------------------------------------------------ ops by lock name
 * The active ops of each lock name (client->by_name), so that a release or
 * an undo checks the ops on its own lock, not every active op: with 100,000
 * releases at once, scanning them all per release never finished. */
static void by_name_index(op_t *op);

/* op has just joined the active list. While it is the only active op the
 * index stays off (scans walk the active list: that one op); the second
 * one turns it on and indexes every active op; it goes off again once the
 * active list is empty (active_unlink). */
static void by_name_add(op_t *op) {
  client_t *cl = op->cl;
  if (!op->lock) return;
  if (!cl->by_name_on) {
    if (!op->anext) return; /* the only active op */
    cl->by_name_on = true;
    for (op_t *o = op->anext; o; o = o->anext) by_name_index(o);
  }
  by_name_index(op);
}

static void by_name_index(op_t *op) {
  client_t *cl = op->cl;
  if (!op->lock || op->islot) return;
  bool added;
  void **slot = rlock__map_put_slot(&cl->by_name, op->lock->name, op->lock->len, op, &added);
  if (!slot) {
    cl->by_name_broken = true; /* from now on the scans walk every active op */
    return;
  }
  if (!added) { /* after the first: the map keeps pointing at it */
    op_t *first = *slot;
    op->nprev = first;
    op->nnext = first->nnext;
    if (first->nnext) first->nnext->nprev = op;
    first->nnext = op;
  }
  op->islot = slot;
}

/* Never reads op->lock: an op may end (client closing) after its lock
 * handle was freed. The map entry keeps its own copy of the name. */
static void by_name_del(op_t *op) {
  if (!op->islot) return;
  client_t *cl = op->cl;
  if (op->nprev) {
    op->nprev->nnext = op->nnext;
    if (op->nnext) op->nnext->nprev = op->nprev;
  } else if (op->nnext) { /* the first goes: the next one is the map's */
    op->nnext->nprev = NULL;
    *op->islot = op->nnext;
  } else {
    map_entry_t *e = (map_entry_t *)(void *)((char *)op->islot - offsetof(map_entry_t, value));
    rlock__map_del(&cl->by_name, e->key, e->klen);
  }
  op->nprev = op->nnext = NULL;
  op->islot = NULL;
}

/* The active ops that may be on the lock `name` (then same_name_next): its
 * own list, or every active op if the index is off (one op) or broken
 * (callers compare the names anyway). */
static const op_t *same_name_first(const client_t *cl, const char *name, size_t len) {
  return cl->by_name_broken || !cl->by_name_on ? cl->active : rlock__map_get(&cl->by_name, name, len);
}
static const op_t *same_name_next(const client_t *cl, const op_t *o) {
  return cl->by_name_broken || !cl->by_name_on ? o->anext : o->nnext;
}

void rlock__op_index_free(client_t *cl) {
  rlock__map_free(&cl->by_name);
  cl->by_name_on = false;
}

static void active_unlink(op_t *op) {
  by_name_del(op);
  client_t *cl = op->cl;
  if (op->aprev) op->aprev->anext = op->anext;
  else if (cl->active == op) cl->active = op->anext;
  if (op->anext) op->anext->aprev = op->aprev;
  op->aprev = op->anext = NULL;
  if (!cl->active) cl->by_name_on = false; /* every indexed op has left the index */
}

void rlock__op_finish(op_t *op, int status, int64_t value, void *ptr, size_t n) {
  if (op->finished) return;
  op->finished = true;
  if (op->w.ch && op->woken && status != 0) rlock__pubsub_pass_wake(&op->w); /* ends without the lock */
  if (op->w.ch) rlock__pubsub_leave(&op->cl->ps, &op->w);
  if (op->timer) evtimer_del(op->timer);
  if (op->cancel_ev) event_del(op->cancel_ev);
  active_unlink(op);
  rlock__fast_busy(op->cl, op->fslot, -1); /* counted at submit (client.c) */
  op->fslot = -1;
  if (op->fast_releasing) { /* a renewal that found the hold gone meanwhile was this unlock (fast.c) */
    op->fast_releasing = false;
    rlock__fast_release_ended(op->cl, op->lock->name, op->lock->len, op->owner_id, op->owner_len);
  }
  if (status < 0) rlock__fail_keep(status);
  if (op->sync) {
    sync_wait_t *s = op->sync;
    s->status = status;
    s->value = value;
    s->ptr = ptr;
    s->n = n;
    if (status < 0) snprintf(s->msg, sizeof s->msg, "%s", rlock__msg());
    rlock__sync_signal(&s->done); /* s may be gone after this */
  } else if (op->sem_cb) {
    op->sem_cb((rlock_semaphore_t *)op->lock, status, value, op->arg);
  } else if (op->latch_cb) {
    op->latch_cb((rlock_latch_t *)op->lock, status, value, op->arg);
  } else if (op->cb) {
    op->cb(op->lock, status, value, op->arg);
    if (ptr && op->kind == OP_HOLDERS) rlock_holders_free(ptr, n);
    if (ptr && op->kind == OP_COMMAND) rlock_reply_free(ptr);
  }
  if (!op->in_flight) op_free(op);
}

/* Closing: every acquire whose current try is unanswered (in flight, or
 * queued for a re-send) gets its undo now, before the op ends and while its
 * lock handle is still valid. On the same connection
 * the undo runs right after the try, so the hold is given back (or never
 * applied) even if the reply never comes; rlock_client_free lingers for
 * the undos' answers (briefly). */
void rlock__op_undo_on_close(client_t *cl) {
  for (op_t *op = cl->active; op; op = op->anext) /* (a try held back and never written needs none) */
    if (op->kind == OP_ACQUIRE && !op->finished &&
        ((op->in_flight && (!op->held || op->id_written)) || (op->queued && !op->in_flight)))
      undo_attempt(op, false); /* (a parked waiter of a queueing kind: out of the queue) */
    else if (op->kind == OP_SEM_ACQUIRE && !op->finished && (op->in_flight || op->queued))
      rlock__sem_undo_on_close(op); /* its permits back, out of the queue (semaphore.c) */
}

/* Closing: an op submitted and never started ends (RLOCK_ECLOSED). An
 * acquire whose try went out on the fast connection with its answer lost
 * (fast.c) may hold the lock on the server: its undo goes first, as for a
 * try in flight (rlock__op_undo_on_close). */
void rlock__op_end_unstarted(op_t *op) {
  if (op->kind == OP_ACQUIRE && op->fast_lost) undo_attempt(op, false);
  rlock__set_msg("client closed");
  rlock__op_finish(op, RLOCK_ECLOSED, 0, NULL, 0);
}

void rlock__op_fail_all(client_t *cl, int status) {
  while (cl->active) {
    op_t *op = cl->active;
    rlock__set_msg("client closed");
    rlock__op_finish(op, status, 0, NULL, 0);
  }
}

/* An in-flight reply for an op that already finished (closing): just free it. */
static bool orphan(op_t *op) {
  op->in_flight = false;
  if (!op->finished) return false;
  op_free(op);
  return true;
}

bool rlock__op_orphan(op_t *op) { return orphan(op); }

/* ------------------------------------------------------------ undo
 * The kind's undo (reentrant_acquire_undo.lua) gives back the hold a try may have taken: exactly,
 * when the try's latch says it applied; and when the latch is missing (never
 * applied, or applied and the latch expired) it brings the owner's count down
 * to the client's own count (if the server has more), so an expired latch
 * cannot hide a hold. Either way it plants a tombstone, so a late copy of the
 * try never applies. Re-sending an undo is always safe.
 * An undo either belongs to an op that waits for it before trying again with
 * a fresh id (op set), or runs on its own after the op ended. */

typedef struct undo {
  client_t *cl;
  int fslot; /* the name's fast slot, busy while the undo is in flight */
  const lock_kind_t *kind;
  op_t *op; /* the op waiting for this undo, or NULL */
  bytes_t name, channel, latch;
  char owner_id[RLOCK__OWNER_ID_ROOM];
  int64_t keep; /* the count the owner keeps: an unlatched try's (the fast path's count), or -2: undo_keep's */
  bool stay;    /* a queueing kind's owner goes on waiting: its queue entry stays (kind_undo_t) */
  /* A copy of the undone request (or of this undo) whose answer was lost may
   * still land: a refusal of a copy (nothing ran) does not answer it, the
   * copy is sent again later (req.refused_later) until one runs. */
  bool lost;
  /* The order gate: while the undo is in cl->undos (not answered yet), the
   * tries and unlocks of the same (owner, name) wait in `held` (linked by
   * req->next, oldest first), not written. seq: its place in cl->order_seq. */
  struct undo *next;
  bool listed;
  uint64_t seq;
  req_t *held, *held_tail;
  /* Not an undo but an unlock whose op gave up with its answer lost
   * (unlock_go_on): the same request (same id: its latch answers a copy
   * that ran), re-sent until answered or its id may be stale (stale_at). */
  req_t *tmpl;
  int64_t stale_at;
} undo_t;

static void undo_send(undo_t *u);
static void resume_after_undo(op_t *op, bool landed, int status);

/* ------------------------------------------------------------ the order gate
 * For one (owner, name), no try or unlock is written before every earlier
 * undo of the pair was answered (any reply: a copy that ran, or a refusal;
 * the copies before it on its connection ran before it; a refused write
 * while a copy on another connection may still land is sent again later:
 * req.refused_later). Without a latch to
 * go by (the fast path's first copy, a refused try) the undo brings the
 * owner's count down to the count the client knew, and the script cannot
 * tell a later grant of the same owner from the hold it gives back (one hash
 * field counts both): an undo that ran after the owner's next grant would
 * take that grant away. The copies of an undo may land late in many ways (a
 * timeout re-send at the tail, a reconnect, NOSCRIPT re-written as EVAL at
 * the tail, a redirect, a copy left in a replaced connection): so the next
 * request waits for the answer, not for a place in a queue. Once any copy
 * ran, every other copy finds the tombstone and changes nothing. The fast
 * path is kept off the name meanwhile by the undo's busy slot. */

static bool undo_is(const undo_t *u, const char *name, size_t len, const char *owner_id) {
  return u->name.n == len && !memcmp(u->name.p, name, len) && !strcmp(u->owner_id, owner_id);
}

/* The first unanswered undo of (owner_id, name) older than seq, or NULL. */
static undo_t *undo_ahead(const client_t *cl, const char *name, size_t len, const char *owner_id, uint64_t seq) {
  for (undo_t *u = cl->undos; u; u = u->next)
    if (u->seq < seq && undo_is(u, name, len, owner_id)) return u;
  return NULL;
}

static void undo_list(undo_t *u) {
  u->seq = ++u->cl->order_seq;
  u->next = u->cl->undos;
  u->cl->undos = u;
  u->listed = true;
}

static void undo_unlist(undo_t *u) {
  if (!u->listed) return;
  for (undo_t **p = &u->cl->undos; *p; p = &(*p)->next)
    if (*p == u) {
      *p = u->next;
      break;
    }
  u->listed = false;
}

static void send_now(op_t *op, req_t *r);

/* op's request r waits behind an unanswered undo of its (owner, name), if
 * there is one: true (r is the undo's now). */
static bool hold_back(op_t *op, req_t *r) {
  client_t *cl = op->cl;
  undo_t *u = cl->undos ? undo_ahead(cl, op->lock->name, op->lock->len, op->owner_id, UINT64_MAX) : NULL;
  if (!u) return false;
  RLOCK__ASSERT(!op->held); /* one request of an op at a time */
  op->held = true;
  r->next = NULL;
  if (u->held_tail) u->held_tail->next = r;
  else u->held = r;
  u->held_tail = r;
  return true;
}

/* The held requests of u, once it is answered (status 0: written now, in
 * their order, behind another undo of the pair if one is still unanswered)
 * or ends without an answer (status: their failure, the client closes). */
static void undo_release(undo_t *u, int status) {
  req_t *r = u->held;
  u->held = u->held_tail = NULL;
  while (r) {
    req_t *next = r->next;
    op_t *op = r->ctx;
    r->next = NULL;
    RLOCK__ASSERT(op->held && op->in_flight);
    op->held = false;
    if (status || op->finished) { /* an op ended (closing) may have lost its lock handle: not sent */
      r->completed = true;
      r->done(r, status ? status : RLOCK_ECLOSED, NULL);
      rlock__req_free(r);
    } else {
      r->deadline = rlock_now_ms() + op->cl->opt.command_timeout_ms; /* written now */
      r->waits_ms = 0;                                               /* the WAITs ahead of it are counted afresh */
      send_now(op, r);
    }
    r = next;
  }
}

/* Held requests past their deadline end as never written (RLOCK_ECONNECT:
 * an acquire is queued again until its wait bound, as while disconnected). */
static void held_expire(undo_t *u) {
  int64_t now = rlock_now_ms();
  req_t *due = NULL, **dt = &due, *keep = NULL, **kt = &keep, *tail = NULL;
  for (req_t *r = u->held, *next; r; r = next) {
    next = r->next;
    r->next = NULL;
    if (rlock__req_unsent_by(r) <= now) *dt = r, dt = &r->next;
    else *kt = r, kt = &r->next, tail = r;
  }
  u->held = keep;
  u->held_tail = tail;
  for (req_t *r = due, *next; r; r = next) {
    next = r->next;
    r->next = NULL;
    ((op_t *)r->ctx)->held = false;
    rlock__fail(RLOCK_ECONNECT, "not written: an earlier undo of the same owner and lock is not answered yet");
    r->completed = true;
    r->done(r, RLOCK_ECONNECT, NULL);
    rlock__req_free(r);
  }
}

/* An answer of op's request: no unanswered undo of its (owner, name) was
 * sent before the request (the gate above). */
static void order_check(const op_t *op) {
  (void)op;
  RLOCK__ASSERT(!op->cl->undos || !undo_ahead(op->cl, op->lock->name, op->lock->len, op->owner_id, op->wseq));
}

static void undo_free(undo_t *u) {
  client_t *cl = u->cl;
  undo_unlist(u);
  undo_release(u, RLOCK_ECLOSED); /* none left but when it ended without an answer */
  rlock__fast_busy(cl, u->fslot, -1);
  if (u->tmpl) rlock__req_free(u->tmpl);
  free(u->name.p);
  free(u->channel.p);
  free(u->latch.p);
  free(u);
  cl->undos_inflight--;
  rlock__client_linger_check(cl); /* closing: this may be the last request it waits for */
}

/* o is an acquire (kind OP_ACQUIRE) or a release in flight of owner_id on the
 * lock `name`: a request that may change the owner's count on the server
 * before the client's count shows it. */
static bool owner_op_in_flight(const op_t *o, op_kind_t kind, const char *name, size_t len, const char *owner_id) {
  return o->kind == kind && o->in_flight && o->lock->len == len && !memcmp(o->lock->name, name, len) &&
         !strcmp(o->owner_id, owner_id);
}

/* The count the owner may keep on the server: the client's own, or -1 (trust
 * only the latch) while another try of the same owner and lock is in flight:
 * its hold may be on the server already but not yet in the client's count. */
static int64_t undo_keep(const undo_t *u) {
  size_t len = u->name.n;
  for (const op_t *o = same_name_first(u->cl, u->name.p, len); o; o = same_name_next(u->cl, o))
    if (o != u->op && !o->held && owner_op_in_flight(o, OP_ACQUIRE, u->name.p, len, u->owner_id)) return -1;
  int64_t unknown;
  return rlock__watchdog_count(&u->cl->wd, u->name.p, len, u->owner_id, &unknown);
}

/* Whether an undo that did not land is sent again: until it is answered
 * (a copy of it may still land; the owner's next requests of the lock wait
 * for its answer), or the client closes. */
static bool undo_again(undo_t *u, int status) {
  if (u->tmpl && rlock_now_ms() >= u->stale_at) return false; /* its latch may be gone: no copy more */
  if (status == RLOCK_ECONNECT) return true;                  /* never written: wait for the reconnect */
  return answer_lost(status);                                 /* else closed, or answered (a refusal) */
}

static bool op_over(const op_t *op) {
  return op->finished || op->cancelled || (op->deadline >= 0 && rlock_now_ms() >= op->deadline);
}

static void undo_done(req_t *r, int status, rlock_reply_t *reply) {
  undo_t *u = r->ctx;
  bool answered = status == 0; /* a reply came: a copy ran (or was refused), every copy before it too */
  if (answer_lost(status)) u->lost = true;
  bool landed = status == 0 && (u->tmpl || (reply && reply->type != RLOCK_REPLY_ERROR && u->kind->undo_reply(reply)));
  if (status == 0 && !landed) /* answered, but refused (OOM, an error reply): the op must not take
                                 status 0 for a grant (resume_after_undo) */
    status = rlock__fail(RLOCK_ESERVER,
                         "the server refused to give back the hold (it may stay until its lease "
                         "runs out): %.200s",
                         reply && reply->type == RLOCK_REPLY_ERROR ? reply->str : "unexpected reply");
  rlock_reply_free(reply);
  bool again = !landed && undo_again(u, status);
  op_t *op = u->op;
  if (!again) undo_unlist(u); /* the gate opens before anything goes on */
  if (op && (!again || op_over(op))) {
    u->op = NULL; /* the op goes on (or ends); an undo that did not land goes on alone */
    resume_after_undo(op, landed, status);
  }
  if (again) {
    held_expire(u);
    undo_send(u);
    return;
  }
  undo_release(u, answered ? 0 : status);
  /* the tombstone (the try's latch) is left to its TTL: a late copy of the
   * try may still be on its way (that is why it is undone) */
  undo_free(u);
}

static void undo_send(undo_t *u) {
  client_t *cl = u->cl;
  req_t *r;
  if (u->tmpl) { /* an unlock going on alone: a copy of its request */
    int64_t t = cl->opt.command_timeout_ms + (u->tmpl->waits ? cl->opt.replica_sync_timeout_ms : 0);
    if ((r = rlock__req_alloc(u->tmpl->len, t, undo_done, u))) {
      memcpy(r->cmd, u->tmpl->cmd, u->tmpl->len);
      r->ncmds = u->tmpl->ncmds;
      r->script = u->tmpl->script;
      r->waits = u->tmpl->waits;
    }
  } else {
    kind_undo_t view = {
        cl, u->name.p, u->name.n, &u->channel, &u->latch, u->owner_id, u->keep >= 0 ? u->keep : undo_keep(u), u->stay};
    r = u->kind->undo_req(&view, undo_done, u);
  }
  if (!r) {
    op_t *op = u->op;
    undo_unlist(u);
    undo_release(u, rlock__fail(RLOCK_ENOMEM, "out of memory"));
    undo_free(u);
    if (op) resume_after_undo(op, false, rlock__fail(RLOCK_ENOMEM, "out of memory"));
    return;
  }
  r->refused_later = u->lost;
  stat_add(cl, ST_SCRIPTS, 1);
  rlock__client_send(cl, u->name.p, u->name.n, r);
}

/* Give back the hold that the current try of op may have taken. With wait,
 * op waits for the undo (in flight) and then goes on: resume_after_undo.
 * A queueing kind's undo also takes the owner out of the queue, unless stay
 * (the op goes on waiting: only the tombstone). */
static void undo_attempt(op_t *op, bool wait) { undo_attempt_as(op, wait, false); }

static void undo_attempt_as(op_t *op, bool wait, bool stay) {
  undo_t *u = calloc(1, sizeof *u);
  rlock_lock_t *l = op->lock;
  if (!stay) op->queued = false; /* (out of memory below: the entry's deadline frees the queue) */
  if (!u) goto fail;
  u->cl = op->cl;
  u->kind = l->kind;
  u->stay = stay;
  /* an unlatched try (fast.c) left no latch to trust: the count it started
   * from is what the owner keeps */
  u->keep = op->unlatched ? op->fast_count : -2;
  u->lost = op->retries > 0 || op->unlatched; /* a copy of the try whose answer was lost */
  u->fslot = (int)rlock__fast_slot(l->name, l->len);
  rlock__fast_busy(op->cl, u->fslot, 1);
  op->cl->undos_inflight++;
  memcpy(u->owner_id, op->owner_id, op->owner_len + 1);
  if (!(u->name.p = rlock__strndup(l->name, l->len)) || !(u->channel.p = rlock__strndup(l->channel.p, l->channel.n)) ||
      rlock__names_prefixed_suffix(&u->latch, ACQUIRE_LATCH, l->name, l->len, op->reqid)) {
    undo_free(u);
    goto fail;
  }
  u->name.n = l->len;
  u->channel.n = l->channel.n;
  undo_list(u);
  if (wait) {
    u->op = op;
    op->in_flight = true;
  }
  undo_send(u);
  return;
fail:
  if (wait) resume_after_undo(op, false, rlock__fail(RLOCK_ENOMEM, "out of memory"));
}

/* An unlock whose answer was lost and whose re-sends ran out: its copies
 * may still land, and one landing after the owner's next grant would take
 * it for a count mismatch and remove the owner's field (another client then
 * takes the lock). So it goes on alone like an undo: re-sent (a copy of r,
 * the same request id) until answered, the owner's later requests of the
 * lock held back until then (the order gate), the name off the fast path.
 * The caller is told the failure as before (counted as done). Not with
 * retry_attempts 0 (no re-send at all). Out of memory: nothing goes on. */
static void unlock_go_on(op_t *op, const req_t *r) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  undo_t *u = calloc(1, sizeof *u);
  req_t *t = u ? rlock__req_alloc(r->len, 0, NULL, NULL) : NULL;
  if (!t || !(u->name.p = rlock__strndup(l->name, l->len))) {
    if (t) rlock__req_free(t);
    free(u);
    return;
  }
  memcpy(t->cmd, r->cmd, r->len);
  t->ncmds = r->ncmds;
  t->script = r->script;
  t->waits = r->waits;
  u->tmpl = t;
  u->lost = true;
  u->cl = cl;
  u->kind = l->kind;
  u->name.n = l->len;
  memcpy(u->owner_id, op->owner_id, op->owner_len + 1);
  /* a copy lands within a command timeout of its send, and must land
   * before the latch of the id's first copy may expire */
  u->stale_at = op->sent_at + rlock__client_latch_ttl(cl) - cl->opt.command_timeout_ms - LATCH_MARGIN_MS;
  u->fslot = (int)rlock__fast_slot(l->name, l->len);
  rlock__fast_busy(cl, u->fslot, 1);
  cl->undos_inflight++;
  undo_list(u);
  undo_send(u);
}

/* ------------------------------------------------------------ latched requests
 * Tries and releases carry the op's request id in a latch key (the last key):
 * a re-send of the same request is answered by the latch, never applied twice. */

/* The latch key "<prefix>:{NAME}:<id>" of op's current request id: built
 * once into op->latch (when it fits: OP_LATCH_ROOM), then the same for the
 * request's re-sends and its DEL; latch_done gives back a longer one. 0, or
 * RLOCK_ENOMEM. */
static bool lock_plain(rlock_lock_t *l) {
  if (!l->plain) l->plain = memchr(l->name, '{', l->len) || memchr(l->name, '}', l->len) ? -1 : 1;
  return l->plain > 0;
}

static int lock_slot(rlock_lock_t *l) {
  if (!l->slot1) l->slot1 = rlock__names_slot(l->name, l->len) + 1;
  return l->slot1 - 1;
}

static int latch_key_n(op_t *op, const char *prefix, size_t plen, bytes_t *out) {
  if (op->latch_n && op->latch_prefix == prefix) {
    out->p = op->latch;
    out->n = op->latch_n;
    return 0;
  }
  rlock_lock_t *l = op->lock;
  int rc = lock_plain(l) ? rlock__names_plain_in(out, op->latch, sizeof op->latch, prefix, plen, l->name, l->len,
                                                 op->reqid, sizeof op->reqid - 1)
                         : rlock__names_prefixed_suffix_in(out, op->latch, sizeof op->latch, prefix, plen, l->name,
                                                           l->len, op->reqid, sizeof op->reqid - 1);
  if (!rc && out->p == op->latch) {
    op->latch_prefix = prefix;
    op->latch_n = out->n;
  }
  return rc;
}
#define latch_key(op, prefix, out) latch_key_n(op, prefix, sizeof prefix - 1, out)

int rlock__op_reg_latch(op_t *op, char *buf, size_t cap, bytes_t *out) {
  const char *id = op->reg_reqid[0] ? op->reg_reqid : op->reqid;
  rlock_lock_t *l = op->lock;
  return lock_plain(l) ? rlock__names_plain_in(out, buf, cap, ACQUIRE_LATCH, sizeof ACQUIRE_LATCH - 1, l->name, l->len,
                                               id, sizeof op->reqid - 1)
                       : rlock__names_prefixed_suffix_in(out, buf, cap, ACQUIRE_LATCH, sizeof ACQUIRE_LATCH - 1,
                                                         l->name, l->len, id, sizeof op->reqid - 1);
}

static void latch_done(const op_t *op, bytes_t *latch) {
  if (latch->p != op->latch) free(latch->p);
}

/* A fresh request id for op. */
static void new_reqid(op_t *op) {
  rlock__prng_hex(&op->cl->prng, op->reqid);
  op->latch_n = 0; /* the key of the old id */
  op->grant_heard = false;
}

/* Sends op's request r (built by the kind; NULL: out of memory), with the
 * replica-sync WAIT behind it when the policy and the node ask for one. */
static void send_op_req(op_t *op, req_t *r) {
  client_t *cl = op->cl;
  if (!r) {
    rlock__op_finish(op, rlock__fail(RLOCK_ENOMEM, "out of memory"), 0, NULL, 0);
    return;
  }
  op->in_flight = true;
  stat_add(cl, ST_SCRIPTS, 1);
  send_now(op, r);
}

/* Writes op's request r, unless an unanswered undo of its (owner, name)
 * holds it back (the order gate, above). */
static void send_now(op_t *op, req_t *r) {
  client_t *cl = op->cl;
  if (cl->undos && hold_back(op, r)) return;
  op->wseq = ++cl->order_seq;
  rlock__client_send_synced_at(cl, lock_slot(op->lock), r, &op->sync_need);
}

/* The request got its answer: its latch is dead weight (batched DEL), unless
 * the request was sent more than once (op->retries): an earlier copy may
 * still arrive (written on a connection given up since, whose bytes the
 * kernel keeps sending), and only the latch stops it from applying again.
 * Such a latch lives its TTL. */
static void drop_latch_n(op_t *op, const char *prefix, size_t plen) {
  bytes_t latch;
  if (op->retries > 0 || latch_key_n(op, prefix, plen, &latch)) return;
  rlock__client_queue_del(op->cl, latch.p, latch.n);
  latch_done(op, &latch);
}
#define drop_latch(op, prefix) drop_latch_n(op, prefix, sizeof prefix - 1)

/* ------------------------------------------------------------ acquire */

static void acquire_done(req_t *r, int status, rlock_reply_t *reply);

static void send_attempt(op_t *op) {
  bytes_t latch;
  req_t *r = NULL;
  stat_add(op->cl, ST_ATTEMPTS, 1);
  if (!latch_key(op, ACQUIRE_LATCH, &latch)) {
    r = op->lock->kind->try_req(op, &latch, acquire_done);
    latch_done(op, &latch);
  }
  /* a bounded wait (not a bare try: it may wait for a reconnect) ends at its
   * bound if the try cannot be written by then; not a re-send of an id that
   * may have been written: its answer is what the caller waits for (the
   * bound is about the lock, not the transport: acquire_failed) */
  if (r && op->wait_ms > 0 && !op->id_written) r->wait_end = op->deadline;
  send_op_req(op, r);
}

static void attempt(op_t *op, bool fresh) {
  if (fresh) {
    new_reqid(op);
    op->unlatched = false;
    op->retries = 0;
    op->sent_at = rlock_now_ms();
    op->id_written = false;
  }
  send_attempt(op);
}

/* The current id may have reached the server, and a copy sent now might land
 * after its latch expired there (the latch lives at least latch TTL from the
 * id's first send): it must not be sent again. */
static bool id_stale(const op_t *op) {
  if (!op->id_written) return false;
  int64_t latch_ends = op->sent_at + rlock__client_latch_ttl(op->cl);
  return rlock_now_ms() + op->cl->opt.command_timeout_ms + LATCH_MARGIN_MS >= latch_ends;
}

/* An acquire op that ends without the lock; a queueing kind's owner leaves
 * the queue (the undo, in the order gate: the owner's next try waits for it). */
static void acquire_fail(op_t *op, int rc) {
  if (op->queued && !op->finished && rc != RLOCK_ECLOSED) { /* (closing: rlock__op_undo_on_close) */
    int keep = rlock__fail_keep(rc);                        /* the undo must not replace the op's message */
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rlock__msg());
    undo_attempt(op, false);
    rlock__set_msg(msg);
    rc = keep;
  }
  rlock__op_finish(op, rc, 0, NULL, 0);
}

static int cancelled_rc(void) { return rlock__fail(RLOCK_ECANCELED, "wait for the lock cancelled"); }

/* The undo of a stale id or of a grant the replicas did not acknowledge
 * (undo_attempt with wait) is answered, or gave up. */
static void resume_after_undo(op_t *op, bool landed, int status) {
  if (orphan(op)) return;
  if (op->cancelled) acquire_fail(op, cancelled_rc());
  else if (!landed) acquire_fail(op, rlock__fail_keep(status));
  else if (op->sync_misses > op->cl->opt.retry_attempts)
    acquire_fail(op, rlock__client_sync_fail(op->cl, &op->sync_need, op->sync_acked));
  else attempt(op, true);
}

/* Wake op after ms (the wait bound, the TTL, a handoff window). The timer is
 * made on first use: an acquire granted at once never needs one. Out of
 * memory ends op (RLOCK_ENOMEM; no try is in flight here): do not touch op
 * after this call. */
static void arm_wait(op_t *op, int64_t ms) {
  if (!op->timer && !(op->timer = evtimer_new(op->cl->base, wait_timer_cb, op))) {
    acquire_fail(op, rlock__fail(RLOCK_ENOMEM, "out of memory"));
    return;
  }
  struct timeval tv;
  rlock__tv_from_ms(&tv, ms + 1);
  evtimer_add(op->timer, &tv);
}

/* Wait for a wake-up, at most min(ttl, time left before the deadline);
 * ttl < 0: no TTL bound. now is the caller's clock reading: the deadline is
 * judged once, and a deadline that passed is a bound of 0, never "none". */
/* The subscription was refused (an ACL without the channel): a message
 * would never come, so the wait ends now (with a fair lock's give-up). */
static bool wait_refused(op_t *op) {
  if (!op->w.refused) return false;
  acquire_fail(op, rlock__fail(op->w.refused, "cannot wait for the lock: %s", rlock__pubsub_refused(&op->w)));
  return true;
}

static void park(op_t *op, int64_t ttl, int64_t now) {
  if (wait_refused(op)) return;
  if (rlock__pubsub_park(&op->w)) {
    op->woken = true; /* a message came while our try was in flight */
    attempt(op, true);
    return;
  }
  op->woken = false;
  int64_t wait = ttl;
  if (op->deadline >= 0) {
    int64_t left = op->deadline > now ? op->deadline - now : 0;
    if (wait < 0 || left < wait) wait = left;
  }
  if (wait >= 0) arm_wait(op, wait);
}

static void acquired(op_t *op);

/* The unlock granted the lock to the owner's try of id (fair_unlock.lua's
 * handoff: that try's latch is '1' on the server, as if it had been
 * granted). Taken here only for the current id when every copy of it is
 * accounted for (one send: no tombstone of it can be on its way) and its
 * grant needs no WAIT; answered busy already: the hold is op's now; in
 * flight: its busy answer is read as granted. For the id before it, the try
 * in flight takes the hold over (fair_acquire.lua, KEYS[7]). Otherwise the
 * message wakes like any other, and the next try learns from the latch. */
static bool on_grant(waiter_t *w, const char *id, size_t n) {
  op_t *op = (op_t *)((char *)w - offsetof(op_t, w));
  if (op->finished || n != sizeof op->reqid - 1) return false;
  if (memcmp(id, op->reqid, n) != 0) return op->in_flight && op->reg_reqid[0] && !memcmp(id, op->reg_reqid, n);
  if (op->retries > 0 || op->sync_need.need > 0 || !op->lock->kind->handoff) return false;
  if (op->in_flight) {
    op->grant_heard = true; /* counted if its answer is read as the grant (acquire_done) */
    return true;
  }
  stat_add(op->cl, ST_HANDOFFS, 1);
  if (op->timer) evtimer_del(op->timer);
  w->parked = false;
  if (op->cancel && atomic_load(&op->cancel->triggered)) op->cancelled = true;
  acquired(op); /* (cancelled: given back, like any grant) */
  return true;
}

static void on_wake(waiter_t *w) {
  op_t *op = (op_t *)((char *)w - offsetof(op_t, w));
  if (op->in_flight || op->finished) return;
  if (op->timer) evtimer_del(op->timer);
  if (wait_refused(op)) return;
  op->woken = true;
  attempt(op, true);
}

static void wait_timer_cb(evutil_socket_t fd, short what, void *arg) {
  op_t *op = arg;
  if (op->in_flight || op->finished) return;
  op->w.parked = false;
  attempt(op, true); /* one more try; its reply checks the deadline */
}

static void cancel_cb(evutil_socket_t fd, short what, void *arg) {
  op_t *op = arg;
  op->cancelled = true;
  event_del(op->cancel_ev);
  if (!op->in_flight) acquire_fail(op, cancelled_rc());
  /* else: the reply of the try in flight decides (and gives a hold back) */
}

/* Join the lock's channel: 1 subscribed already, 0 subscribing (on_wake
 * follows), < 0 failed (op finished). */
static int join_channel(op_t *op) {
  op->subscribed = true;
  op->w.on_wake = on_wake;
  op->w.on_grant = op->lock->kind->handoff ? on_grant : NULL;
  op->w.wake = op->lock->kind->wake; /* whom a message wakes: the kind says */
  int rc;
  if (op->lock->kind->waiter_channel) { /* a channel of the owner's own (the fair lock) */
    bytes_t ch;
    rc = op->lock->kind->waiter_channel(op, &ch);
    if (!rc) rc = rlock__pubsub_join(&op->cl->ps, &op->w, ch.p, ch.n), free(ch.p);
  } else {
    rc = rlock__pubsub_join(&op->cl->ps, &op->w, op->lock->channel.p, op->lock->channel.n);
  }
  if (rc < 0) rlock__op_finish(op, rlock__fail(rc, "cannot subscribe"), 0, NULL, 0);
  return rc;
}

/* A try that got no answer (status < 0): re-send it, undo it, or end. */
static void acquire_failed(op_t *op, int status) {
  client_t *cl = op->cl;
  bool again;
  if (status == RLOCK_ECONNECT) /* not connected: re-queued until the wait bound (not written) */
    again = !op->cancelled && (op->deadline < 0 || rlock_now_ms() < op->deadline);
  else /* the wait bound is about waiting for the lock, not about the transport: a
          try whose answer was lost is re-sent even when wait_ms is over */
    again = answer_lost(status) && !op->cancelled && op->retries < cl->opt.retry_attempts;
  if (again) {
    if (answer_lost(status)) op->retries++;   /* same request id: counts once even if both arrive */
    if (id_stale(op)) undo_attempt(op, true); /* give back, then a fresh id */
    else attempt(op, false);
    return;
  }
  if (op->id_written) undo_attempt(op, false);
  acquire_fail(op, op->cancelled ? cancelled_rc() : rlock__fail_keep(status));
}

/* The try was applied (or the unlock granted it: on_grant): the hold is ours. */
static void acquired(op_t *op) {
  rlock_lock_t *l = op->lock;
  if (op->cancelled) {
    undo_attempt(op, false);
    acquire_fail(op, cancelled_rc());
    return;
  }
  if (rlock__watchdog_acquired(&op->cl->wd, l->name, l->len, op->owner, op->owner_id, rlock__op_lease_ms(op),
                               op->lease_ms == RLOCK_LEASE_WATCHDOG, op->sent_at - l->kind->expiry_slack_ms)) {
    undo_attempt(op, false); /* cannot track it: do not keep it */
    acquire_fail(op, rlock__fail(RLOCK_ENOMEM, "out of memory"));
    return;
  }
  op->queued = false; /* a grant takes the owner out of the queue */
  if (l->kind->renew_script)
    rlock__watchdog_set_renew(&op->cl->wd, l->name, l->len, op->owner_id, l->kind->renew_script,
                              l->kind->expiry_slack_ms);
  rlock__fast_bump(op->cl, l->name, l->len); /* a hold the calling thread's fast table does not know */
  drop_latch(op, ACQUIRE_LATCH);
  rlock__op_finish(op, 0, op->token, NULL, 0); /* the fenced lock's token, else 0 */
}

/* Granted, but fewer replicas acknowledged than the policy needs: the hold
 * is given back (and the op waits for that, so a caller told "not acquired"
 * leaves nothing held), the node's replica count is read again first (a
 * replica may be gone), then a fresh try, up to retry_attempts times; then
 * RLOCK_ENOSYNC (resume_after_undo). */
static void sync_missed(op_t *op, int acked) {
  stat_add(op->cl, ST_ACQUIRE_SYNC_MISSES, 1);
  op->sync_misses++;
  op->sync_acked = acked;
  rlock__client_sync_refresh(op->cl, op->lock->name, op->lock->len);
  undo_attempt(op, true);
}

/* Held by others for ttl ms more at most (-1: no bound): wait, or end. */
static void try_busy(op_t *op, int64_t ttl) {
  int64_t now = rlock_now_ms();
  if (op->cancelled) {
    acquire_fail(op, cancelled_rc());
    return;
  }
  if (op->wait_ms == 0 || (op->deadline >= 0 && now >= op->deadline)) {
    acquire_fail(op, rlock__fail(RLOCK_EBUSY, "timed out waiting for the lock"));
    return;
  }
  if (!op->subscribed && !op->lock->kind->no_pubsub) {
    int rc = join_channel(op);
    if (rc == 1) attempt(op, true); /* already subscribed: try again now */
    else if (rc == 0 && op->deadline >= 0) arm_wait(op, op->deadline - now);
    /* rc 0: on_wake once the subscription is confirmed */
    return;
  }
  if (op->lock->kind->poll_ms) ttl = op->lock->kind->poll_ms(op, ttl); /* no message from other programs */
  park(op, ttl, now);
}

static void acquire_done(req_t *r, int status, rlock_reply_t *reply) {
  op_t *op = r->ctx;
  if (op->finished) { /* closing: rlock__op_undo_on_close() already sent this try's undo, and
                         op->lock may be freed (the caller's call has returned) */
    orphan(op);
    rlock_reply_free(reply);
    return;
  }
  op->in_flight = false;
  /* only a copy of an id never written is ended by the wait bound (send_attempt) */
  RLOCK__ASSERT(!r->wait_end || !op->id_written);
  if (status == 0) order_check(op);
  if (status != RLOCK_ECONNECT) op->id_written = true;
  if (status != RLOCK_ECONNECT && op->lock->kind->queues && op->wait_ms != 0)
    op->queued = true; /* it may have queued */
  /* a cancel triggered before this reply counts even if its event has not
   * been dispatched yet (rlock.h: the wait ends with RLOCK_ECANCELED) */
  if (op->cancel && atomic_load(&op->cancel->triggered)) op->cancelled = true;
  if (status == RLOCK_ECLOSED) {
    acquire_fail(op, status);
    return;
  }
  if (status != 0) {
    acquire_failed(op, status);
    return;
  }
  int64_t ttl = -1;
  int acked;
  bool synced = rlock__client_sync_split(&op->sync_need, &reply, &acked);
  int rc = reply->type == RLOCK_REPLY_ERROR ? rlock__fail(rlock__reply_error_code(reply), "acquire: %.200s", reply->str)
                                            : op->lock->kind->try_reply(reply, &ttl);
  if (rc == KIND_GRANTED && op->lock->kind->granted) op->lock->kind->granted(op, reply); /* the token */
  rlock_reply_free(reply);
  if (rc == KIND_BUSY && op->grant_heard && op->retries == 0) {
    /* the unlock granted this try after it ran (on_grant): its latch is '1' */
    RLOCK__ASSERT(op->sync_need.need == 0);
    stat_add(op->cl, ST_HANDOFFS, 1);
    rc = KIND_GRANTED;
  } else if (rc == KIND_BUSY && op->lock->kind->handoff) {
    memcpy(op->reg_reqid, op->reqid, sizeof op->reqid); /* the server registered this id */
  }
  /* Refused (busy, an error reply, the simple lock's holder acquiring again)
   * after this id went out more than once: an earlier copy may still be on its
   * way (a connection given up keeps sending what it wrote) and land once the
   * lock is free, after the op moved on to a fresh id or ended, taking a hold
   * nobody knows of. A refused try writes nothing on the server, so plant the
   * id's tombstone (the undo, on its own; sent before any next try). */
  if (rc != KIND_GRANTED && op->retries > 0)
    undo_attempt_as(op, false, rc == KIND_BUSY); /* busy: it waits on, queued */
  if (rc == KIND_GRANTED && !synced) sync_missed(op, acked);
  else if (rc == KIND_GRANTED) acquired(op);
  else if (rc < 0) acquire_fail(op, rc);
  else try_busy(op, ttl);
}

static void start_acquire(op_t *op) {
  client_t *cl = op->cl;
  if (op->cancel) {
    if (atomic_load(&op->cancel->triggered)) {
      acquire_fail(op, cancelled_rc());
      return;
    }
    op->cancel_ev = event_new(cl->base, op->cancel->fd, EV_READ | EV_PERSIST, cancel_cb, op);
    if (op->cancel_ev) event_add(op->cancel_ev, NULL);
  }
  op->deadline = op->wait_ms < 0 ? -1 : rlock_now_ms() + op->wait_ms;
  if (op->fast_lost) { /* its try went out on the fast connection, its answer was lost (fast.c) */
    op->fast_lost = false;
    if (op->unlatched) { /* no latch to make a re-send count once: give back what it took (and
                            plant the tombstone that stops its copy), then a fresh try */
      undo_attempt(op, true);
      return;
    }
    acquire_failed(op, RLOCK_ECONNLOST); /* re-sent with the same id, or undone */
    return;
  }
  /* any acquire uses up the mark (a trylock without wait just does not
   * yield): a mark left standing would keep the name off the fast path */
  int64_t yield = handoff_take(cl, op->lock);
  if (op->wait_ms == 0 || op->lock->kind->no_pubsub) yield = 0; /* (a spin lock has no channel to wait on) */
  if (yield > 0) { /* waiters were notified by our last unlock: let them go first */
    int rc = join_channel(op);
    if (rc == 1) park(op, yield, rlock_now_ms());
    else if (rc == 0) arm_wait(op, yield);
    return;
  }
  attempt(op, true);
}

/* ------------------------------------------------------------ release */

static void release_done(req_t *r, int status, rlock_reply_t *reply);

/* Other acquires and releases of op's owner on op's lock in flight: the
 * server may have applied them before this release runs, so the client's
 * count says nothing exact (the count check is skipped). *lease: the longest
 * lease one of those acquires may have given the key (0: none). */
static bool others_in_flight(const op_t *op, int64_t *lease) {
  bool any = false;
  *lease = 0;
  const rlock_lock_t *l = op->lock;
  for (const op_t *o = same_name_first(op->cl, l->name, l->len); o; o = same_name_next(op->cl, o)) {
    if (o == op) continue;
    if (owner_op_in_flight(o, OP_ACQUIRE, op->lock->name, op->lock->len, op->owner_id)) {
      any = true;
      if (rlock__op_lease_ms(o) > *lease) *lease = rlock__op_lease_ms(o);
    } else if (owner_op_in_flight(o, OP_RELEASE, op->lock->name, op->lock->len, op->owner_id)) {
      any = true;
    }
  }
  return any;
}

/* The kind's release with the client's view: the count it expects to be left
 * (-1: this client tracks no hold, or other calls of the owner on this lock
 * are in flight: no check) and how many more the server may count (releases
 * whose outcome was unknown), plus the TTL the remaining holds need, at least
 * the lease of an acquire in flight (kept in op->lease_ms for the reply). */
static void send_release(op_t *op) {
  rlock_lock_t *l = op->lock;
  watchdog_t *wd = &op->cl->wd;
  int64_t unknown, pending_lease;
  int64_t count = rlock__watchdog_count(wd, l->name, l->len, op->owner_id, &unknown);
  if (others_in_flight(op, &pending_lease)) op->unchecked = true; /* for every copy of this id */
  if (op->unchecked) count = 0;
  op->lease_ms = rlock__watchdog_lease(wd, l->name, l->len, op->owner_id);
  if (pending_lease > op->lease_ms) op->lease_ms = pending_lease;
  kind_release_t rel = {.left = count > 0 ? count - 1 : -1, .unknown = unknown, .lease_ms = op->lease_ms};
  if (op->unlatched) /* a re-send of the fast path's unlatched unlock: the count it started from
                        tells the script whether that copy was applied */
    rel.left = op->fast_count - 1, rel.unknown = 0;
  bytes_t latch;
  req_t *r = NULL;
  if (!latch_key(op, UNLOCK_LATCH, &latch)) {
    r = l->kind->release_req(op, &latch, &rel, release_done);
    latch_done(op, &latch);
  }
  send_op_req(op, r);
}

/* An unlock applied on the master that fewer replicas acknowledged than the
 * policy needs stands: taking the lock back would be worse. A failover
 * before the replicas catch up may bring the hold back until its lease runs
 * out (nobody renews it): a delay for the next owner, never two owners. The
 * miss is counted, and the replica count read again. */
static void unlock_sync_missed(op_t *op) {
  stat_add(op->cl, ST_UNLOCK_SYNC_MISSES, 1);
  rlock__client_sync_refresh(op->cl, op->lock->name, op->lock->len);
}

static void release_done(req_t *r, int status, rlock_reply_t *reply) {
  op_t *op = r->ctx;
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  if (orphan(op)) {
    rlock_reply_free(reply);
    return;
  }
  if (status == 0) order_check(op);
  /* Lost answers, and unlocks never written or not run (RLOCK_ECONNECT: not
   * connected within the command timeout, a failover; Cluster TRYAGAIN,
   * LOADING, BUSY... until it): re-sent with the same request id, whose
   * latch answers a copy that was applied. */
  if (answer_lost(status)) op->id_written = true; /* this copy may still land */
  /* It may have freed the hold already: a renewal or the reconnect's check
   * that finds the hold gone before its re-send is answered saw this
   * unlock, not a loss (the releasing mark, as for a fast unlock; the
   * unlock's own answer decides). */
  RLOCK__ASSERT(op->fast_releasing); /* marked at its first send (rlock__op_start) */
  if (status != 0 && (answer_lost(status) || status == RLOCK_ECONNECT) && op->retries < cl->opt.retry_attempts) {
    op->retries++;
    send_release(op);
    return;
  }
  /* An earlier copy may still land, even when the last one was never
   * written: before the owner's next request of the lock (retry_attempts 0:
   * never re-sent). */
  if ((answer_lost(status) || status == RLOCK_ECONNECT) && op->id_written && cl->opt.retry_attempts > 0)
    unlock_go_on(op, r);
  int rc = 0, acked;
  int64_t value = 0;
  release_t how = REL_UNKNOWN; /* failed: counted as done all the same (rlock.h) */
  bool notified = false;
  bool synced = status != 0 || rlock__client_sync_split(&op->sync_need, &reply, &acked);
  if (status != 0) {
    rc = rlock__fail_keep(status);
  } else if (reply->type == RLOCK_REPLY_ERROR) {
    rc = rlock__fail(rlock__reply_error_code(reply), "unlock: %.200s", reply->str);
    /* refused, nothing ran: an earlier copy whose answer was lost may still land */
    if (op->id_written && cl->opt.retry_attempts > 0) unlock_go_on(op, r);
  } else if ((rc = l->kind->release_reply(reply, &how, &notified))) {
    how = REL_UNKNOWN;
  } else if (how == REL_NOTHELD) {
    rc = rlock__fail(RLOCK_ENOTHELD, "lock '%.*s' is not held by owner %s", (int)(l->len > 100 ? 100 : l->len), l->name,
                     op->owner_id);
    drop_latch(op, UNLOCK_LATCH); /* its 'n' latch: dead weight once answered (sent once), as the fast path does */
  } else {                        /* it applied: one hold released, the last one, or another count found */
    if (how == REL_ONE && op->unchecked) how = REL_ONE_UNCHECKED; /* the count was not compared */
    value = how != REL_ONE && how != REL_ONE_UNCHECKED;           /* REL_MISMATCH: the owner's field is gone too */
    if (notified) handoff_mark_lock(cl, l);
    drop_latch(op, UNLOCK_LATCH);
    if (!synced) unlock_sync_missed(op);
  }
  rlock_reply_free(reply);
  /* a hold of the name of another kind (a handle of the wrong kind) is left
   * alone: this release did not touch it */
  if (rlock__watchdog_kind_is(&cl->wd, l->name, l->len, op->owner_id, l->kind->renew_script)) {
    rlock__watchdog_released(&cl->wd, l->name, l->len, op->owner_id, how, op->lease_ms);
    /* ENOTHELD never leaves a hold tracked: it was reported lost or was not there */
    RLOCK__ASSERT(rc != RLOCK_ENOTHELD || !rlock__watchdog_tracks(&cl->wd, l->name, l->len, op->owner_id));
  }
  rlock__fast_bump(cl, l->name, l->len);
  rlock__op_finish(op, rc, value, NULL, 0);
}

/* ------------------------------------------------------------ force unlock, queries */

static int64_t parse_i64(const rlock_reply_t *r, bool *ok) {
  char *end;
  *ok = r->str && r->len > 0;
  errno = 0;
  long long v = *ok ? strtoll(r->str, &end, 10) : 0;
  if (*ok && (*end || errno == ERANGE)) *ok = false;
  return v;
}

static void simple_done(req_t *r, int status, rlock_reply_t *reply) {
  op_t *op = r->ctx;
  client_t *cl = op->cl;
  if (orphan(op)) {
    rlock_reply_free(reply);
    return;
  }
  if (status != 0) {
    /* queries are read-only, so re-sending is safe; force unlock is not */
    if (op->kind != OP_FORCE && !(op->kind == OP_KIND_CALL && op->call_once) && answer_lost(status) &&
        op->retries < cl->opt.retry_attempts) {
      op->retries++;
      rlock__op_start(op);
      return;
    }
    rlock__op_finish(op, rlock__fail_keep(status), 0, NULL, 0);
    return;
  }
  if (op->kind == OP_FORCE && reply->type == RLOCK_REPLY_INTEGER && reply->integer == 1)
    rlock__watchdog_forget(&cl->wd, op->lock->name, op->lock->len); /* our own holds of it are gone */
  int rc = 0;
  int64_t v = 0;
  void *ptr = NULL;
  size_t n = 0;
  bool ok = true;
  if (op->kind == OP_FORCE && rlock__reply_is_error(reply, "NOTLOCK ")) {
    const char *kind = reply->str + 8;
    rc = rlock__fail(RLOCK_ENOTLOCK, "it holds a %.20s%s: left as it is", kind,
                     strcmp(kind, "hash") ? "" : " that is not owner -> hold count");
  } else if (reply->type == RLOCK_REPLY_ERROR) {
    rc = rlock__fail(rlock__reply_error_code(reply), "%.200s", reply->str);
  } else if (op->kind == OP_COUNT) {
    if (reply->type == RLOCK_REPLY_NIL) v = 0;
    else if (reply->type == RLOCK_REPLY_STRING) v = parse_i64(reply, &ok);
    else ok = false;
  } else if (op->kind == OP_HOLDERS) {
    ok = reply->type == RLOCK_REPLY_ARRAY && reply->elements % 2 == 0;
    n = ok ? reply->elements / 2 : 0;
    rlock_holder_t *hs = n ? calloc(n, sizeof *hs) : NULL;
    if (n && !hs) rc = rlock__fail(RLOCK_ENOMEM, "out of memory"), n = 0;
    for (size_t i = 0; ok && hs && i < n; i++) {
      rlock_reply_t *f = reply->element[2 * i], *c = reply->element[2 * i + 1];
      if (f->type != RLOCK_REPLY_STRING || c->type != RLOCK_REPLY_STRING) {
        ok = false;
        break;
      }
      hs[i].owner = rlock__strndup(f->str, f->len);
      hs[i].count = parse_i64(c, &ok);
    }
    if (!ok && hs) rlock_holders_free(hs, n), hs = NULL, n = 0;
    ptr = hs;
  } else {
    ok = reply->type == RLOCK_REPLY_INTEGER;
    v = ok ? reply->integer : 0;
  }
  if (!ok && !rc) rc = rlock__fail(RLOCK_EPROTO, "unexpected reply (is the key a Redisson lock?)");
  rlock_reply_free(reply);
  rlock__op_finish(op, rc, v, ptr, n);
}

static void start_simple(op_t *op) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  req_t *r = NULL;
  int64_t t = cl->opt.command_timeout_ms;
  if (op->kind == OP_FORCE) {
    r = l->kind->force_req(op, simple_done); /* reentrant_force_unlock.lua (kinds/reentrant.c) */
    stat_add(cl, ST_SCRIPTS, 1);
  } else if (l->kind->query_req && (op->kind == OP_IS_HELD || op->kind == OP_COUNT || op->kind == OP_HOLDERS ||
                                    op->kind == OP_KIND_CALL || (op->kind == OP_IS_LOCKED && l->kind->query_locked))) {
    r = l->kind->query_req(op, simple_done); /* the kind's layout is not a hash */
    stat_add(cl, ST_SCRIPTS, 1);
  } else {
    static const char *verbs[] = {[OP_IS_LOCKED] = "EXISTS",
                                  [OP_IS_HELD] = "HEXISTS",
                                  [OP_COUNT] = "HGET",
                                  [OP_TTL] = "PTTL",
                                  [OP_HOLDERS] = "HGETALL"};
    const char *argv[3] = {verbs[op->kind], l->name, op->owner_id};
    size_t lens[3] = {strlen(verbs[op->kind]), l->len, op->owner_len};
    int argc = op->kind == OP_IS_HELD || op->kind == OP_COUNT ? 3 : 2;
    r = rlock__req_new(argc, argv, lens, t, simple_done, op);
  }
  if (!r) {
    rlock__op_finish(op, rlock__fail(RLOCK_ENOMEM, "out of memory"), 0, NULL, 0);
    return;
  }
  op->in_flight = true;
  rlock__client_send(cl, l ? l->name : NULL, l ? l->len : 0, r);
}

/* ------------------------------------------------------------ relet (MultiLock) */

/* The MultiLock's final step: the hold's TTL set to exactly its one lease by
 * the kind's renew script ('=' lease), only where the owner still holds it.
 * The client's view changes before the request leaves (watchdog.c). Not
 * re-sent: a failure fails the MultiLock's acquire, which releases all. */
static void relet_told(req_t *r, int status, rlock_reply_t *reply) {
  (void)r, (void)status;
  rlock_reply_free(reply);
}

/* The relet cut the TTL (the watchdog lease of a member taken while later
 * ones were awaited, to the MultiLock's lease): waiters parked on the old
 * TTL try again now (the kind's unlock message), so none sleeps on
 * once the lease runs out unreleased. Best effort: an ACL that refuses the
 * channel leaves them their old TTL. A fair lock's queue head listens on a
 * channel of its own: it is told there (fair_tell_head.lua); the spin lock's
 * waiters listen on none. */
static void relet_tell(op_t *op) {
  rlock_lock_t *l = op->lock;
  if (l->kind->no_pubsub || !l->channel.p) return;
  if (l->kind->queues) { /* a fair lock: its queue's head, on its own channel */
    req_t *r = rlock__fair_tell_head_req(op->cl, l, relet_told, NULL);
    if (r) rlock__client_send(op->cl, l->name, l->len, r);
    return;
  }
  if (l->kind->waiter_channel) return;
  /* a write lock's unlock message, "1" (Java's READ_UNLOCK): every Java
   * waiter of a JVM tries again, the readers among them too; "0" would wake
   * one per JVM and leave the others on the old TTL */
  const char *pub = rlock__publish_cmd(op->cl), *msg = l->kind == &rlock__kind_write ? "1" : "0";
  const char *argv[3] = {pub, l->channel.p, msg};
  size_t lens[3] = {strlen(pub), l->channel.n, 1};
  req_t *r = rlock__req_new(3, argv, lens, op->cl->opt.command_timeout_ms, relet_told, NULL);
  if (r) rlock__client_send(op->cl, l->name, l->len, r);
}

static void relet_done(req_t *r, int status, rlock_reply_t *reply) {
  op_t *op = r->ctx;
  if (orphan(op)) {
    rlock_reply_free(reply);
    return;
  }
  int rc = 0, acked;
  bool synced = status != 0 || rlock__client_sync_split(&op->sync_need, &reply, &acked);
  if (status) rc = rlock__fail_keep(status);
  else if (reply->type == RLOCK_REPLY_ERROR)
    rc = rlock__fail(rlock__reply_error_code(reply), "relet: %.200s", reply->str);
  else if (reply->type != RLOCK_REPLY_STRING || reply->len != 1 || (reply->str[0] != '0' && reply->str[0] != '1'))
    rc = rlock__fail(RLOCK_EPROTO, "relet: unexpected reply");
  else if (reply->str[0] != '1')
    rc = rlock__fail(RLOCK_ENOTHELD, "the hold was gone from the server when its lease was set");
  else if (!synced) /* a lease the replicas may not have: fails like an acquire's grant */
    rc = rlock__client_sync_fail(op->cl, &op->sync_need, acked);
  rlock_reply_free(reply);
  if (!rc) relet_tell(op);
  rlock__op_finish(op, rc, 0, NULL, 0);
}

static void start_relet(op_t *op) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  int64_t t = cl->opt.command_timeout_ms, ttl;
  int script = l->kind->renew_script ? l->kind->renew_script : SCRIPT_RENEW;
  int rc = rlock__watchdog_relet(&cl->wd, l->name, l->len, op->owner_id, script, op->lease_ms, rlock_now_ms() + t,
                                 &ttl);
  rlock__fast_bump(cl, l->name, l->len);
  if (rc) {
    rlock__op_finish(op, rc, 0, NULL, 0);
    return;
  }
  char lease[32] = "=";
  rlock__i64toa(ttl, lease + 1);
  const char *keys[1] = {l->name}, *args[2] = {lease, op->owner_id};
  size_t kl[1] = {l->len}, al[2] = {strlen(lease), op->owner_len};
  req_t *r = rlock__script_req(script, 1, keys, kl, 2, args, al, t, relet_done, op);
  if (!r) {
    rlock__op_finish(op, rlock__fail(RLOCK_ENOMEM, "out of memory"), 0, NULL, 0);
    return;
  }
  stat_add(cl, ST_SCRIPTS, 1);
  op->in_flight = true;
  rlock__client_send_synced(cl, l->name, l->len, r, &op->sync_need); /* WAIT, as the acquire */
}

/* ------------------------------------------------------------ dispatch */

void rlock__op_start(op_t *op) {
  client_t *cl = op->cl;
  if (!op->aprev && cl->active != op) { /* first start: join the active list */
    op->anext = cl->active;
    if (cl->active) cl->active->aprev = op;
    cl->active = op;
    by_name_add(op);
  }
  switch (op->kind) {
  case OP_ACQUIRE: start_acquire(op); break;
  case OP_RELEASE:
    if (!op->reqid[0]) new_reqid(op);
    /* the id's first send (a fast connection's copy left at most a command timeout ago) */
    op->sent_at = rlock_now_ms() - (op->fast_lost ? cl->opt.command_timeout_ms : 0);
    op->id_written = op->fast_lost;                            /* release_done: a copy whose answer was lost */
    if (op->fast_lost) op->retries = 1, op->fast_lost = false; /* a re-send of the fast connection's (fast.c) */
    /* from its first send the unlock may free the hold: a renewal that finds
     * it gone, or its lease ending, is this unlock's doing until its answer
     * says otherwise (the releasing mark, watchdog.c; a fast unlock's re-send
     * carries the fast path's own) */
    if (!op->fast_releasing) {
      op->fast_releasing = true;
      rlock__fast_release_began(cl, op->lock->name, op->lock->len, op->owner_id, op->owner_len);
    }
    send_release(op);
    break;
  case OP_COMMAND:
    rlock__usercmd_start(op); /* on the user connection (usercmd.c) */
    break;
  case OP_RELET: start_relet(op); break;
  case OP_VALID_UNTIL: {
    int64_t v = 0;
    int rc = rlock__watchdog_valid_until(&cl->wd, op->lock->name, op->lock->len, op->owner_id, &v);
    rlock__op_finish(op, rc, v, NULL, 0);
    break;
  }
  case OP_NODE:
    rlock__op_node(op); /* api.c */
    break;
  case OP_SEM_ACQUIRE:
  case OP_SEM_CALL:
  case OP_LATCH_AWAIT:
  case OP_AWAIT_FREE:
    rlock__sem_start(op); /* semaphore.c */
    break;
  default: start_simple(op);
  }
}

/* The fast path's view of an op's kind (lock_up_t): the kind's own table. */
static bool kind_fast_fits(const rlock_lock_t *l) { return l->kind == &rlock__kind_reentrant; }
static req_t *kind_fast_try_req(op_t *op, const bytes_t *latch, req_done_fn done) {
  return op->lock->kind->try_req(op, latch, done);
}
static int kind_fast_try_reply(const op_t *op, const rlock_reply_t *reply, int64_t *wait_ms) {
  return op->lock->kind->try_reply(reply, wait_ms);
}
static req_t *kind_fast_release_req(op_t *op, const bytes_t *latch, int64_t left, req_done_fn done) {
  kind_release_t rel = {.left = left, .unknown = 0, .lease_ms = op->lease_ms};
  return op->lock->kind->release_req(op, latch, &rel, done);
}
static int kind_fast_release_reply(const op_t *op, const rlock_reply_t *reply, release_t *how, bool *notified) {
  return op->lock->kind->release_reply(reply, how, notified);
}

/* What the client calls back in this layer (lock_up_t): the client knows the
 * lock machinery only through this table, given at creation. */
const lock_up_t rlock__lock_up = {
    .op_start = rlock__op_start,
    .op_finish = rlock__op_finish,
    .op_end_unstarted = rlock__op_end_unstarted,
    .op_fail_all = rlock__op_fail_all,
    .op_undo_on_close = rlock__op_undo_on_close,
    .op_index_free = rlock__op_index_free,
    .op_spares_free = rlock__op_spares_free,
    .op_recycle = rlock__op_recycle,
    .handoff_mark = rlock__handoff_mark,
    .handoff_clear = rlock__handoff_clear,
    .fast_fits = kind_fast_fits,
    .fast_try_req = kind_fast_try_req,
    .fast_try_reply = kind_fast_try_reply,
    .fast_release_req = kind_fast_release_req,
    .fast_release_reply = kind_fast_release_reply,
};

/* The public call: the client, given this layer's table. */
RLOCK_API int rlock_client_new(rlock_client_t **out, const rlock_options_t *opts) {
  return rlock__client_create(out, opts, &rlock__lock_up);
}
