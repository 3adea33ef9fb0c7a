/* op.h -- an op (one call's state, from the submit stack to its answer) and
 * the lock handle it acts on. Defined below the lock machinery, which drives
 * them (lock.c, semaphore.c, api.c, kinds/): the client's submit stack,
 * the fast path and the user connection (client.c, fast.c, usercmd.c) read
 * them without calling up into lock.c (they call back through lock_up_t). */
#ifndef RLOCK_OP_H
#define RLOCK_OP_H

#include "client.h"
#include "pubsub.h"
#include "replica_sync.h"

typedef enum {
  OP_ACQUIRE,
  OP_RELEASE,
  OP_FORCE,
  OP_IS_LOCKED,
  OP_IS_HELD,
  OP_COUNT,
  OP_TTL,
  OP_HOLDERS,
  OP_COMMAND,
  OP_VALID_UNTIL,
  OP_RELET,
  OP_NODE,
  OP_SEM_ACQUIRE,
  OP_SEM_CALL,
  OP_LATCH_AWAIT, /* semaphore.c */
  OP_KIND_CALL,   /* a kind's own query or setting (kind->query_req), answered by an integer */
  OP_AWAIT_FREE   /* semaphore.c: wait until a lock's key is gone (rlock_lock_await_free) */
} op_kind_t;

/* Blocking callers wait on this (sync over async): a futex word (SYNC_*),
 * set to SYNC_DONE (release) by the I/O thread once the result fields are
 * filled in (rlock__sync_signal). */
typedef struct sync_wait {
  _Atomic uint32_t done;
  int status;
  int64_t value;
  void *ptr; /* holders / reply */
  size_t n;
  char msg[256];
} sync_wait_t;

typedef struct lock_kind lock_kind_t; /* kinds/kind.h */

struct rlock_lock {
  client_t *cl;
  const lock_kind_t *kind; /* what the lock is: its scripts and their replies */
  char *name;
  size_t len;
  bytes_t channel; /* where its waiters listen (reentrant: redisson_lock__channel:{NAME}) */
  /* Set by the kind's init (kinds/common.c; else learnt by lock.c on the
   * I/O thread at first use), 0 until then: NAME's Cluster slot + 1, and 1
   * if NAME holds no brace (-1 if it does). */
  int slot1;
  int plain;
  /* The spin lock's backoff (kinds/spin.c; rlock_lock_new_spin): the first
   * wait, the cap, the multiplier. */
  int64_t backoff_initial_ms, backoff_max_ms;
  int backoff_multiplier;
};

#define OP_LATCH_ROOM 224
struct op {
  op_t *next;          /* submit queue link */
  op_t *aprev, *anext; /* client->active link */
  op_t *nprev, *nnext; /* the active ops on the same lock name (client->by_name) */
  void **islot;        /* in client->by_name: its entry's value (the first op), else NULL */
  op_kind_t kind;
  client_t *cl;
  rlock_lock_t *lock;
  uint64_t owner;
  char owner_id[RLOCK__OWNER_ID_ROOM];
  size_t owner_len;
  int64_t wait_ms, lease_ms, deadline; /* deadline -1: forever (user commands: INT64_MAX) */
  rlock_cancel_t *cancel;
  struct event *cancel_ev, *timer;
  rlock_cb cb;
  void *arg;
  sync_wait_t *sync;
  char reqid[33];  /* latch request id of the current attempt */
  int retries;     /* re-sends of the current attempt */
  int64_t sent_at; /* of the current attempt's first send (the id's birth) */
  bool id_written; /* a copy of the current request id may have reached the server */
  bool woken;      /* woken by a message (or a wake token) and not parked since */
  bool subscribed, cancelled, in_flight, finished;
  bool unchecked;        /* release: sent without the count check (others_in_flight) */
  bool held;             /* its request waits behind an unanswered undo of its (owner, name) (lock.c) */
  uint64_t wseq;         /* its current request's place in the client's order of writes (lock.c) */
  int polls;             /* acquire: busy answers so far (a polling kind's backoff) */
  sync_need_t sync_need; /* the current try's or release's WAIT (replica sync) */
  int sync_misses;       /* acquire: grants undone because the replicas did not acknowledge */
  int sync_acked;        /* ... and how many did, the last time */
  waiter_t w;
  /* OP_COMMAND: the command, or MULTI, the commands, EXEC (linked by next);
   * deadline is the call's, wait_ms its timeout (RLOCK_WAIT_FOREVER: none) */
  req_t *raw;
  /* OP_FORCE: delete the key whatever it holds (RLOCK_FORCE_ANY_TYPE) */
  bool any_type;
  /* fast.c: the request of the current id went out on the fast connection and
   * its answer was lost: the I/O thread re-sends it (same id) */
  bool fast_lost;
  bool fast_releasing; /* OP_RELEASE: fast.c's releasing mark of its (name, owner) is
                          the I/O thread's to remove when the op ends */
  /* fast.c: the current id's first copy went out without a latch (the
   * scripts' check-only form: a first acquire or an unlock; fast_count: the
   * owner's count it started from). A lost one is never sent the same way
   * again: an acquire is undone
   * (the undo's tombstone stops the copy, a count above fast_count is given
   * back), then tried with a fresh id; an unlock is re-sent with the re-send
   * mark (the count tells whether the first copy was applied). */
  bool unlatched;
  int64_t fast_count;
  int fslot; /* the lock name's fast slot counted busy at submit (-1: none) */
  /* acquire of a queueing kind (kind->queues): a try that may have queued
   * the owner was written and no undo has taken the entry out since */
  bool queued;
  int64_t token; /* acquire: what a granted try returns besides the hold (the fenced lock's token; 0: none) */
  /* acquire of a kind with a handoff (the fair lock, fair_unlock.lua): the
   * request id of its last try answered busy, which the server registered
   * ("": none), and whether the unlock's message granting the current id
   * came while that id's try was in flight */
  char reg_reqid[33];
  bool grant_heard;
  /* semaphore.c: the permits (or delta, or count) of a semaphore or latch
   * call, its script (OP_SEM_CALL; 0: a GET), and the caller's callback
   * (one of them; they get op->lock as their handle) */
  int64_t permits;
  int script;
  rlock_semaphore_cb sem_cb;
  rlock_latch_cb latch_cb;
  /* OP_SEM_ACQUIRE: its entry in rlock's queue of the semaphore, "<id>:<permits>"
   * (semaphore_acquire.lua), and its place there from the last busy answer
   * (0: none known) */
  char waiter[40];
  int64_t place;
  /* OP_KIND_CALL: which of the kind's calls, its argument, and whether a
   * lost answer may be re-sent (a call that is not idempotent: no) */
  int call;
  int64_t call_arg;
  bool call_once;
  /* The latch key of the current request id (lock.c latch_key), built once
   * for the request, its re-sends and its DEL: latch_n bytes (0: not built;
   * a longer key than the room is built for each use). Last: rlock__op_alloc
   * zeroes the op up to latch only. */
  const char *latch_prefix;
  size_t latch_n;
  char latch[OP_LATCH_ROOM];
};

#endif
