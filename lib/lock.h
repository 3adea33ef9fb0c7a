/* lock.h -- the lock machinery (lock.c), semaphores and latches (semaphore.c),
 * cancel tokens (api.c); the op and the lock handle are in op.h. */
#ifndef RLOCK_LOCK_H
#define RLOCK_LOCK_H

#include "client.h"
#include "op.h"
#include "replica_sync.h"

extern const lock_up_t rlock__lock_up; /* what the client calls back in this layer (lock.c) */

/* The MultiLock's final step: the hold of (l, owner) gets exactly lease_ms
 * (rlock__watchdog_relet); cb as rlock_lock_release_async's. */
int rlock__lock_relet_async(rlock_lock_t *l, uint64_t owner, int64_t lease_ms, rlock_cb cb, void *arg);
/* A zeroed op (any thread): a spare one of the client's, else calloc. NULL: no memory. */
op_t *rlock__op_alloc(client_t *cl);
void rlock__op_recycle(client_t *cl, op_t *op); /* its memory back: kept as a spare, or freed */
void rlock__op_spares_free(client_t *cl);       /* client destroyed */
void rlock__op_start(op_t *op);                 /* I/O thread: begin the operation */
/* OP_NODE (api.c, I/O thread): finishes op with the node its lock's commands go to now. */
void rlock__op_node(op_t *op);
int rlock__lock_node_here(rlock_lock_t *l, char **out, size_t *len); /* on l's client's I/O thread */
void rlock__handoff_clear(client_t *cl);
/* An unlock reached subscribers: this client's next acquire of name lets them go first. */
void rlock__handoff_mark(client_t *cl, const char *name, size_t len);
void rlock__op_fail_all(client_t *cl, int status); /* closing: end every active op */
void rlock__op_index_free(client_t *cl);           /* closing, after rlock__op_fail_all */
void rlock__op_undo_on_close(client_t *cl);        /* closing: undo the tries that may be on the server */
void rlock__op_end_unstarted(op_t *op); /* closing: a submitted op ends (RLOCK_ECLOSED), undone if it must be */
void rlock__op_finish(op_t *op, int status, int64_t value, void *ptr, size_t n);
/* A request's answer came for op: false, go on; true, op had finished
 * (closing) and is freed now. */
bool rlock__op_orphan(op_t *op);

/* ------------------------------------------------------------ semaphore.c */
extern const lock_kind_t rlock__kind_semaphore; /* Redisson's RSemaphore: its channel only */
extern const lock_kind_t rlock__kind_latch;     /* Redisson's RCountDownLatch: its channel only */
void rlock__sem_start(op_t *op);         /* I/O thread: OP_SEM_ACQUIRE, OP_SEM_CALL, OP_LATCH_AWAIT, OP_AWAIT_FREE */
void rlock__sem_undo_on_close(op_t *op); /* closing: a semaphore try in flight is given back */

/* api.c: a cancel token. */
struct rlock_cancel {
  _Atomic int triggered;
  int fd; /* eventfd, readable once triggered */
};

#endif
