/* fast.h -- the fast path: a blocking lock or unlock on the calling thread (fast.c). */
#ifndef RLOCK_FAST_H
#define RLOCK_FAST_H

#include "map.h"
#include "reply.h"

#include <pthread.h>
#include <sys/socket.h>

typedef struct rlock_client client_t;
typedef struct op op_t;

/* The fast path (fast.c, docs/internals/fast-path.md): a blocking
 * lock or unlock done on the calling thread over the client's one fast
 * connection, when nothing else of the client is busy with that lock name.
 * What the I/O thread must know (a hold to renew, a latch key to delete, a
 * handoff mark) is posted to it and applied in order before anything
 * submitted later starts (rlock__fast_drain). Per lock-name slot (a hash of
 * the name) the client counts what makes a name busy for the fast path. */
#define FAST_SLOTS 256
typedef struct fast_buf {
  unsigned char *p;
  size_t n, cap;
} fast_buf_t;
typedef struct fast {
  bool on;          /* the option, and a deployment it fits (slots do not matter, plain socket) */
  uint64_t serial;  /* this client for the per-thread tables (never reused in a process) */
  int64_t drain_ms; /* posts are applied at most this long after the first */
  /* the fast connection: one thread at a time (trylock) */
  pthread_mutex_t mu;
  int fd;              /* -1: not connected (set and closed under amu too: rlock__fast_close_wait) */
  bool cut;            /* amu: closing cut the connection: no new one */
  atomic_int calls;    /* fast call windows open (rlock__fast_begin/_end) */
  unsigned fd_gen;     /* the command connection's generation it was made for */
  unsigned failed_gen; /* connecting failed for that generation: not tried again */
  redisReader *reader;
  /* where the command connection is connected, published by the I/O thread (amu) */
  pthread_mutex_t amu;
  struct sockaddr_storage addr;
  unsigned addrlen;
  _Atomic unsigned gen; /* 0: the command connection is not ready: no fast path */
  unsigned next_gen;    /* I/O thread */
  atomic_bool nowait;   /* no replica-sync WAIT is needed on that node */
  /* posts to the I/O thread (pmu); spare: the drained buffer, kept for reuse */
  pthread_mutex_t pmu;
  pthread_mutex_t statmu; /* recursive: a drain step counted in ST_HELD twice is never seen */
  fast_buf_t posts, spare;
  atomic_bool posted; /* posts wait (written under pmu): the first one woke the I/O thread */
  bool drain_armed;   /* I/O thread: drain_ev is pending */
  struct event *drain_ev;
  map_t releasing;                    /* I/O thread: (name, owner id) -> fast unlocks in flight */
  _Atomic int busy[FAST_SLOTS];       /* ops submitted and not finished, undos in flight */
  _Atomic int hand[FAST_SLOTS];       /* handoff marks (lock.c) and notified fast unlocks not drained */
  _Atomic uint32_t epoch[FAST_SLOTS]; /* +1 at each hold change the I/O thread makes on its own */
} fast_t;
int rlock__fast_init(client_t *cl); /* at rlock_client_new, before the I/O thread */
void rlock__fast_destroy(client_t *cl);
unsigned rlock__fast_slot(const char *name, size_t len);
/* Blocking calls (api.c): true when the call was done here (*rc its result,
 * op recycled); false: op goes to the I/O thread (op->fast_lost: its request
 * may have reached the server: re-send it with the same id). */
bool rlock__fast_acquire(op_t *op, int *rc);
bool rlock__fast_release(op_t *op, int *rc);
/* A blocking call's fast window, around rlock__fast_acquire/_release and the
 * submit of the op it hands over (api.c): false, the fast path is off or the
 * client is closing (nothing to end). rlock_client_free waits for every
 * window open (rlock__fast_close_wait). */
bool rlock__fast_begin(client_t *cl);
void rlock__fast_end(client_t *cl);
/* rlock_client_free, after `closing`: waits until no fast call is under way;
 * past ms, cuts the fast connection (a call waiting for its answer loses it:
 * its op goes to the I/O thread, which undoes its try). */
void rlock__fast_close_wait(client_t *cl, int64_t ms);
/* A blocking release through the I/O thread ended (rc, value): the calling
 * thread's table learns the count when it is known (0 after the last hold). */
void rlock__fast_released_slow(client_t *cl, const rlock_lock_t *l, uint64_t owner, int rc, int64_t value);
/* I/O thread: apply the posts now (before starting submitted ops, before
 * reading a renewal's answer, when closing). */
void rlock__fast_drain(client_t *cl);
void rlock__fast_wake(client_t *cl);      /* I/O thread woken: arm the drain timer if posts wait */
void rlock__fast_cmd_ready(client_t *cl); /* the command connection is ready (or its replicas changed) */
void rlock__fast_cmd_down(client_t *cl);
/* A renewal found (name, owner) gone: whether a fast unlock of it is in flight. */
bool rlock__fast_releasing(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
/* I/O thread: how many of those unlocks are in flight (0: none). */
int64_t rlock__fast_releasing_n(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
/* I/O thread: an op that carried a fast unlock's re-send ended (op->fast_releasing). */
void rlock__fast_release_ended(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
/* I/O thread: an unlock of (name, owner) whose answer was lost may have freed
 * the hold already (the mark lasts until its op ends: rlock__fast_release_ended). */
void rlock__fast_release_began(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
void rlock__fast_bump(client_t *cl, const char *name, size_t len); /* epoch of name's slot + 1 */
void rlock__fast_busy(client_t *cl, int slot, int delta);

#endif
