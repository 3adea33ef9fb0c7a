/* kinds/kind.h -- the seam between the lock machinery (lock.c) and a lock kind.
 *
 * One file per kind in lib/kinds/, beside its scripts lua/<kind>_*.lua, as
 * curl's lib/vtls/ has one file per TLS backend: reentrant.c (Redisson's
 * RLock), simple.c, nonreentrant.c, fenced.c (its token: granted) and spin.c
 * (no pub/sub: no_pubsub, poll_ms), fair.c (waiter_channel, queues), rwlock.c
 * today; semaphore.c's semaphore and latch use the table's init and wake only.
 *
 * lock.c owns everything every kind needs the same way: the op's lifecycle,
 * the request ids and their latch keys (a re-sent try or release counts
 * once; an id is never re-sent once its latch may have expired), re-sends,
 * waiting on the lock's channel, parking with a deadline, passing on a
 * wake-up nobody used, cancellation, undoing a try whose outcome is unknown
 * (when, and whether it landed), the handoff, the client's hold count
 * (watchdog.c) and the queries. A kind says only what is its own:
 *   init           the lock's derived names (l->channel: where its waiters
 *                  listen), at rlock_lock_new
 *   try_req        one try: its script, keys and arguments
 *   try_reply      what a try's answer means: granted, busy (how long to
 *                  wait at most), or an error
 *   undo_req/_reply give back what a try whose outcome is unknown may have taken
 *   release_req/_reply one release, and what its answer means: released,
 *                  still held, not held, count mismatch; whether it woke
 *                  someone (handoff)
 *   wake           whom a message on its channel wakes: one waiter, or all
 *   force_req      delete the lock whoever holds it
 * A request builder gets the request's latch key (its last key) and the
 * completion to use; it builds the request (rlock__script_req, or rlock__req_new for a
 * plain EVAL) and returns it, NULL when out of memory; lock.c sends it.
 * Error replies are lock.c's ("acquire: <error>", RLOCK_ESERVER): the reply
 * functions see only the others.
 *
 * How the next kinds fit (their Redisson formats):
 *   fair lock     = a queue and a channel per waiter ("...:{NAME}:<owner>"):
 *                   the unlock message wakes the named waiter
 *                   (waiter_channel; NULL = l->channel, shared), and a
 *                   refused try leaves a queue entry (queues: the undo
 *                   takes it out when the acquire gives up): kinds/fair.c
 *   read-write    = one hash, mode field; a write unlock publishes 1: wake
 *                   returns WAKE_ALL for it (many readers enter at once)
 *   semaphore,    = no holds and no owners: their handles use a kind that
 *   latch           fills in only init (the channel) and wake (a semaphore's
 *                   message N wakes up to N waiters, a latch's 0 all); their
 *                   ops are semaphore.c's, on the same requests, replica sync
 *                   and pub/sub waiting
 * The watchdog renews every hold with reentrant_renew.lua (the owner's hash
 * field gets the lease), which fits the fair and write locks too; a kind
 * whose holds renew otherwise (read holds) adds a renew entry here. Queries
 * (is locked, hold count, TTL, holders) read the hash layout (lock.c). */
#ifndef RLOCK_KIND_H
#define RLOCK_KIND_H

#include "internal.h"

#include <limits.h>

/* try_reply's answers: KIND_GRANTED, KIND_BUSY (client.h, beside lock_up_t,
 * which hands them to the fast path) or an RLOCK_E code (< 0). */

/* wake: every parked waiter of the channel (and a wake token for the one
 * whose try is in flight). Any other count n wakes up to n parked waiters. */
#define WAKE_ALL INT_MAX

/* What an undo knows: the op that made the try may be gone (the undo can
 * outlive it), so everything is copied. */
typedef struct kind_undo {
  client_t *cl;
  const char *name;
  size_t len;
  const bytes_t *channel; /* the lock's channel (l->channel) */
  const bytes_t *latch;   /* the try's latch key */
  const char *owner_id;
  int64_t keep; /* the hold count the owner may keep on the server (the
                   client's own), -1: trust the latch only (another try of
                   the same owner and lock is in flight) */
  bool stay;    /* a queueing kind: the owner goes on waiting, keep its queue
                   entry (only the tombstone) */
} kind_undo_t;

/* The client's view of the hold a release gives back (watchdog.c). */
typedef struct kind_release {
  int64_t left;     /* the count it expects to be left, -1: untracked, no check */
  int64_t unknown;  /* how many more the server may count (releases whose
                       outcome was unknown) */
  int64_t lease_ms; /* the TTL the remaining holds need */
} kind_release_t;

struct lock_kind {
  const char *name;
  /* rlock_lock_new: fill in l->channel (l->name, l->len are set). 0 or
   * RLOCK_ENOMEM; rlock_lock_free frees l->channel. */
  int (*init)(rlock_lock_t *l);
  /* One try of op (op->lock, op->owner_id, rlock__op_lease_ms(op)); latch last. */
  req_t *(*try_req)(op_t *op, const bytes_t *latch, req_done_fn done);
  /* A try's reply: KIND_GRANTED; KIND_BUSY with *wait_ms, how long at most
   * before trying again (-1: no bound, wait for a message); or an RLOCK_E
   * code with its message (rlock__fail). */
  int (*try_reply)(const rlock_reply_t *reply, int64_t *wait_ms);
  /* Give back what the try of u->latch may have taken, and stop a late copy
   * of it from ever applying. Must be safe to send again. */
  req_t *(*undo_req)(const kind_undo_t *u, req_done_fn done, void *ctx);
  /* The undo ran (true), or must be sent again. */
  bool (*undo_reply)(const rlock_reply_t *reply);
  /* One release of op's hold; latch last. */
  req_t *(*release_req)(op_t *op, const bytes_t *latch, const kind_release_t *rel, req_done_fn done);
  /* A release's reply: 0 with *how (REL_ONE, REL_ALL, REL_NOTHELD,
   * REL_MISMATCH) and *notified (its message reached a subscriber: this
   * client lets the waiters go first), or an RLOCK_E code with its message. */
  int (*release_reply)(const rlock_reply_t *reply, release_t *how, bool *notified);
  /* How many parked waiters a message (its payload) on the kind's channel
   * wakes: 1, n, or WAKE_ALL. */
  int (*wake)(const rlock_reply_t *msg);
  /* Force unlock (reply: integer 1 if it was locked, 0 if not). */
  req_t *(*force_req)(op_t *op, req_done_fn done);
  /* Optional (NULL: try_reply's bound). How long a busy try of op waits at
   * most before trying again, given try_reply's bound: a kind whose unlocks
   * other programs make without a message polls (backoff, op->polls). */
  int64_t (*poll_ms)(op_t *op, int64_t wait_ms);
  /* The script that renews its holds (watchdog.c); 0: SCRIPT_RENEW, the
   * hash layout's. Same keys and arguments: names; lease, owner ids. */
  int renew_script;
  /* Optional (NULL: the hash layout's HEXISTS, HGET, HGETALL). is held,
   * hold count, holders of op as one request, answered in those shapes. */
  req_t *(*query_req)(op_t *op, req_done_fn done);
  /* Optional (NULL: l->channel, shared by every waiter). The channel op's
   * waiter listens on (malloc'd into *out; 0 or RLOCK_ENOMEM): the fair
   * lock's per-owner channel, on which its unlock wakes the queue's head. */
  int (*waiter_channel)(const op_t *op, bytes_t *out);
  /* The kind's unlock may grant the lock to a waiting owner directly (the
   * fair lock, fair_unlock.lua): a message "g:<id>" on the owner's channel
   * says its try of that id was granted (lock.c on_grant); a busy try
   * registers its id, and passes the one registered before as well
   * (rlock__op_reg_latch). */
  bool handoff;
  /* A refused try may leave state behind (the fair lock's queue entry):
   * an acquire that ends without the lock after a try that may have queued
   * sends the undo (stay false), in the order gate like any undo. */
  bool queues;
  /* Optional: a granted try's reply (try_reply said KIND_GRANTED) also
   * carries what the acquire returns as its value (op->token: the fenced
   * lock's token). */
  void (*granted)(op_t *op, const rlock_reply_t *reply);
  /* No pub/sub (the spin lock): a busy try never subscribes, it waits
   * poll_ms and tries again; its releases publish nothing. */
  bool no_pubsub;
  /* Optional: appended to every owner id of the kind's handles (the write
   * lock's ":write", Redisson's "<uuid>:<tid>:write"). */
  const char *owner_suffix;
  /* query_req answers "is locked" too (an integer 1/0), in place of EXISTS. */
  bool query_locked;
  /* Expiry judged on whole ms of the clients' wall clocks (Redisson's PES: a
   * score <= now is reclaimed): a hold can end up to this many ms before
   * send + lease on the client's own clock. Its valid-until is that early. */
  uint8_t expiry_slack_ms;
  /* Optional (NULL: at the TTL). How long a free-waiter of op
   * (rlock_lock_await_free) may sleep before it looks again, given the
   * lock's TTL (ms; -1: none): a kind whose releases may come without a
   * message on l->channel looks sooner. */
  int64_t (*look_ms)(op_t *op, int64_t ttl);
};

extern const lock_kind_t rlock__kind_reentrant;
extern const lock_kind_t rlock__kind_simple;            /* SET NX PX (kinds/simple.c) */
extern const lock_kind_t rlock__kind_fair;              /* Redisson's RFairLock (kinds/fair.c) */
extern const lock_kind_t rlock__kind_fair_nonreentrant; /* RNonReentrantFairLock (kinds/fair.c) */
extern const lock_kind_t rlock__kind_nonreentrant;      /* RLock's layout, no re-entry (kinds/nonreentrant.c) */
extern const lock_kind_t rlock__kind_fenced;            /* RLock's layout and a token (kinds/fenced.c) */
extern const lock_kind_t rlock__kind_spin;              /* RLock's layout, no pub/sub, backoff (kinds/spin.c) */
/* The fenced lock's token key redisson_lock_token:{NAME} (malloc'd): 0 or RLOCK_ENOMEM. */
int rlock__fenced_token_key(const rlock_lock_t *l, bytes_t *out);
/* fair_tell_head.lua for l (a fair lock): its queue's head tries again
 * (the MultiLock's final step cut the TTL it parked on). NULL: no memory. */
req_t *rlock__fair_tell_head_req(client_t *cl, const rlock_lock_t *l, req_done_fn done, void *ctx);
extern const lock_kind_t rlock__kind_read; /* RReadWriteLock's two (kinds/rwlock.c) */
extern const lock_kind_t rlock__kind_write;
/* Redisson's RPermitExpirableSemaphore (kinds/pes.c): a hold is one permit,
 * its owner id the permit id; its queries and settings are OP_KIND_CALL
 * ops, op->call one of these, op->call_arg the count. */
extern const lock_kind_t rlock__kind_pes;
enum {
  RLOCK__PES_AVAILABLE,
  RLOCK__PES_PERMITS,
  RLOCK__PES_ACQUIRED,
  RLOCK__PES_SET,
  RLOCK__PES_TRY_SET,
  RLOCK__PES_ADD
};

/* Shared by kinds whose layout fits (kinds/common.c): l->channel = prefix:{NAME};
 * the latch scripts' try (KEYS name, latch; ARGV lease, owner, latch TTL)
 * and undo (KEYS name, channel, latch; ARGV message, owner, publish command,
 * latch TTL, keep) with the kind's script; undo_reply "it ran" (an integer);
 * wake one waiter. */
int rlock__kind_init_channel(rlock_lock_t *l, const char *prefix);
req_t *rlock__kind_try_req(int script, op_t *op, const bytes_t *latch, req_done_fn done);
req_t *rlock__kind_undo_req(int script, const char *message, const char *publish, const kind_undo_t *u,
                            req_done_fn done, void *ctx);
bool rlock__kind_undo_ran(const rlock_reply_t *reply);
int rlock__kind_wake_one(const rlock_reply_t *msg);

/* A lock handle of a kind (rlock_lock_new: rlock__kind_reentrant). */
int rlock__lock_new_kind(client_t *cl, const lock_kind_t *kind, const void *name, size_t len, rlock_lock_t **out);
/* The lease a try asks for (watchdog_timeout_ms for RLOCK_LEASE_WATCHDOG). */
int64_t rlock__op_lease_ms(const op_t *op);
/* The latch key of op's registered try (op->reg_reqid; none: its current
 * id's), in buf when it fits (cap bytes), else malloc'd. 0 or RLOCK_ENOMEM. */
int rlock__op_reg_latch(op_t *op, char *buf, size_t cap, bytes_t *out);

#endif
