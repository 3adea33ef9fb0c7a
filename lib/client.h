/* client.h -- the client: options, the I/O thread, the submit stack, the routing
 * point, the tables of the layers around it (client.c, latch_batch.c). */
#ifndef RLOCK_CLIENT_H
#define RLOCK_CLIENT_H

#include "fast.h"
#include "names.h"
#include "pubsub.h"
#include "topology/topology.h"
#include "url.h"
#include "usercmd.h"
#include "watchdog.h"

#include <event2/event.h>
#include <openssl/ssl.h>
#include <stddef.h>

typedef struct op op_t;

/* rlock_client_free waits at most min(command timeout, this) for the fast
 * calls under way, then for the last DELs and undos (rlock.h). */
#define RLOCK__CLOSE_LINGER_MS 500

extern const conn_up_t rlock__client_conn_up; /* the client's connections' table (conn.h; client.c) */

/* What the client needs of the lock layer above (op completions, clean-up,
 * the handoff marks): client.c, fast.c and usercmd.c call nothing of lock.c
 * directly, only this table, which lock.c gives the client at creation
 * (rlock_client_new -> rlock__client_create). */
typedef struct lock_up {
  void (*op_start)(op_t *op);
  void (*op_finish)(op_t *op, int status, int64_t value, void *ptr, size_t n);
  void (*op_end_unstarted)(op_t *op);
  void (*op_fail_all)(client_t *cl, int status);
  void (*op_undo_on_close)(client_t *cl);
  void (*op_index_free)(client_t *cl);
  void (*op_spares_free)(client_t *cl);
  void (*op_recycle)(client_t *cl, op_t *op);
  void (*handoff_mark)(client_t *cl, const char *name, size_t len);
  void (*handoff_clear)(client_t *cl);
  /* The fast path's requests and the meaning of their replies, as the op's
   * lock kind makes and reads them (fast.c knows no kind: lock.c asks the
   * kind's table, kinds/kind.h). fast_fits: a kind the fast path serves (the
   * reentrant lock). fast_try_reply: KIND_GRANTED, KIND_BUSY (*wait_ms: the
   * holder's TTL) or an RLOCK_E code with its message. fast_release_req: one
   * release expecting `left` holds to remain, their TTL op->lease_ms.
   * fast_release_reply: 0 with *how and *notified, or an RLOCK_E code. */
  bool (*fast_fits)(const rlock_lock_t *l);
  req_t *(*fast_try_req)(op_t *op, const bytes_t *latch, req_done_fn done);
  int (*fast_try_reply)(const op_t *op, const rlock_reply_t *reply, int64_t *wait_ms);
  req_t *(*fast_release_req)(op_t *op, const bytes_t *latch, int64_t left, req_done_fn done);
  int (*fast_release_reply)(const op_t *op, const rlock_reply_t *reply, release_t *how, bool *notified);
} lock_up_t;
/* A try's answer (lock_kind_t.try_reply, lock_up_t.fast_try_reply), else an RLOCK_E code (< 0). */
enum { KIND_BUSY = 0, KIND_GRANTED = 1 };
int rlock__client_create(rlock_client_t **out, const rlock_options_t *opts, const lock_up_t *up);
/* Fills cl->net from cl's options, URL, names, base and TLS context (once
 * they are made, before the first rlock__conn_init; tests' bare clients too). */
void rlock__client_net_init(client_t *cl);

struct rlock_client {
  rlock_options_t opt;
  const lock_up_t *lock_up;                             /* what it calls back in the lock layer (above) */
  char *s_url, *s_name, *s_ca, *s_cert, *s_key, *s_sni; /* owned copies */
  url_t url;
  char id[37];
  struct event_base *base;
  pthread_t thread;
  SSL_CTX *ssl_ctx;
  /* submit queue: user threads -> I/O thread. A lock-free stack (push by CAS,
   * the I/O thread takes it all with one exchange and reverses it to FIFO);
   * the eventfd is written only by the push that found it empty. */
  _Atomic(op_t *) submitted;
  /* The I/O thread is in a pass that will take the submit stack again before
   * the loop sleeps (rlock__client_pass_begin/_end): a push that sees it set
   * skips the eventfd write. Cleared, then the stack re-checked (seq_cst on
   * both sides): a push either sees it set or is seen by the re-check. */
  atomic_bool awake;
  /* rlock_client_free began: calls are refused (stop_thread, client.c) */
  atomic_bool closing;
  /* then, once no fast call is under way: the I/O thread closes */
  atomic_bool stopping;
  /* Calls inside the client (rlock__client_enter/_leave): every public call
   * from its first touch of the client to its last, its wait and what it
   * does after its answer included. rlock_client_free frees nothing before
   * it is 0. */
  atomic_int inside;
  unsigned fork_gen; /* rlock__fork_generation() at creation: another = a forked child */
  int wake_fd;
  struct event *wake_ev;
  bool wake_et; /* wake_ev is edge-triggered (epoll): the eventfd is never read */
  /* first connection result, for rlock_client_new */
  pthread_mutex_t smu;
  pthread_cond_t scond;
  int start_status;       /* 1 = pending */
  int64_t start_deadline; /* rlock_client_new's bound: now + connect_timeout_ms */
  char start_msg[256];
  struct event *start_ev; /* fires at start_deadline: the start fails then whatever is under way */
  char start_last[256];   /* the last reason a connection attempt gave while starting (I/O thread) */
  /* engine (I/O thread only) */
  const topology_ops_t *topo; /* the deployment: picks the connection of every request */
  void *topo_state;           /* the deployment's own state (Sentinel: sentinel.c; Cluster: node table, slot map) */
  bool sharded_pubsub;        /* lock channels use SSUBSCRIBE/SPUBLISH (Cluster, when the server has them) */
  conn_env_t net;             /* what its connections share (conn.h; rlock__client_net_init) */
  conn_t cmd;
  pubsub_t ps;
  usercmd_t uc;
  watchdog_t wd;
  op_t *active; /* ops in progress (waiting, attempts), doubly linked */
  /* lock name -> the first of its active ops (then op->nnext): a release or
   * an undo looks at the ops on its own lock only, not at every active op */
  map_t by_name;
  bool by_name_broken; /* an op could not be indexed (out of memory): scan active */
  /* The index is kept only while two ops or more were active since the
   * active list was last empty (lock.c by_name_add): one op at a time (a
   * thread's lock+unlock) is found by scanning active, without a lookup. */
  bool by_name_on;
  map_t handoff;      /* lock name -> deadline (ms, stored in the value pointer): let notified waiters go first */
  rlock__prng_t prng; /* request ids (I/O thread) */
  /* The latch TTL and the watchdog lease in decimal, set at creation (kinds/) */
  dec_cache_t dec_latch_ttl, dec_lease;
  struct event *del_timer; /* flushes queued latch DELs that found no write to ride on */
  char *delkeys;           /* latch keys to delete in one DEL, back to back (kept between DELs) */
  size_t delkeys_n, delkeys_cap;
  size_t *dels; /* where each key starts in delkeys (it ends where the next starts) */
  size_t ndels, capdels;
  int dels_inflight;  /* DELs sent, answer not yet in */
  int undos_inflight; /* undos (and unlocks going on alone) not yet answered (lock.c) */
  /* The undos not answered yet (lock.c): no later try or unlock of the same
   * (owner, name) is written before each is answered; order_seq numbers the
   * undos and the requests handed to the topology, to check that order. */
  struct undo *undos;
  uint64_t order_seq;
  bool draining, shut;  /* closing: waiting for the last DELs; engine shut down */
  struct event *linger; /* bounds the wait for the last DELs */
  /* freed ops kept for reuse (lock.c rlock__op_alloc): allocated on the
   * callers' threads, freed on the I/O thread. A lock-free stack: pushed one
   * at a time (compare-and-swap), taken whole (exchange), so no pop ever
   * meets a recycled node (no ABA); nspare_ops bounds it (approximately). */
  _Atomic(op_t *) spare_ops;
  atomic_int nspare_ops;
  fast_t fast; /* the fast path (fast.c) */
  /* lock-lost callback */
  pthread_mutex_t cbmu;
  rlock_lost_cb lost_cb;
  void *lost_arg;
  /* stats (written on the I/O thread, read anywhere) */
  _Atomic uint64_t st[ST_COUNT];
};
/* The client of a connection's shared env, and of a connection. */
static inline client_t *rlock__client_of_env(const conn_env_t *env) {
  return (client_t *)((char *)env - offsetof(client_t, net));
}
static inline client_t *rlock__client_of(const conn_t *c) { return rlock__client_of_env(c->env); }
static inline void stat_add(client_t *cl, int i, int64_t n) {
  atomic_fetch_add_explicit(&cl->st[i], (uint64_t)n, memory_order_relaxed);
}
void rlock__client_lost(client_t *cl, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason);
void rlock__client_queue_del(client_t *cl, const char *key, size_t len); /* latch clean-up (copied) */
/* latch_batch.c: the queued DELs leave now (the pass, shutdown); the delay timer's callback. */
#define RLOCK__DEL_BATCH 128
void rlock__latch_send_dels(client_t *cl);
void rlock__latch_timer_cb(evutil_socket_t fd, short what, void *arg);
void rlock__client_flush(client_t *cl);       /* end of an I/O batch: send the queued DEL */
void rlock__client_write_batch(client_t *cl); /* the command connection's counted writes, now */
/* A read pass of the I/O thread (conn.c): begin sets cl->awake; end takes
 * what was submitted meanwhile (until the stack stays empty once awake is
 * cleared) and flushes. */
void rlock__client_pass_begin(client_t *cl);
void rlock__client_pass_end(client_t *cl);
/* Closing: ends the linger once no DEL and no undo is waiting for its answer. */
void rlock__client_linger_check(client_t *cl);
int64_t rlock__client_latch_ttl(const client_t *cl);
/* A queued waiter's slot (fair_waiter_timeout_ms; 0, options made without
 * rlock_options_init: the default 10000): the fair lock's and the semaphore
 * queue's. */
int64_t rlock__client_waiter_slot(const client_t *cl);
/* The wall clock in epoch ms (CLOCK_REALTIME), as Redisson's permit scores
 * are (kinds/pes.c, the watchdog's permit renewals). */
int64_t rlock__client_wall_ms(void);
int rlock__client_submit(client_t *cl, op_t *op); /* user thread -> I/O thread */
/* A calling thread is about to touch the client (false: it is closing: touch
 * nothing); _leave when done. rlock_client_free waits for every _leave. */
bool rlock__client_enter(client_t *cl);
void rlock__client_leave(client_t *cl);
/* RLOCK_ESYS in a forked child, before anything is taken. */
int rlock__client_check_fork(const client_t *cl);
void rlock__client_wake(client_t *cl); /* writes the eventfd: the I/O thread takes a turn */
/* The one routing point: every request (scripts, queries, DELs, renewals,
 * SUBSCRIBE/UNSUBSCRIBE, user commands) goes through it. Records the slot
 * of key (NULL: any node) in r, asks the topology for the connection. */
conn_t *rlock__client_send(client_t *cl, const char *key, size_t klen, req_t *r); /* the connection it went to */
/* The command unlock scripts publish with: "spublish" under sharded pub/sub, else "publish". */
static inline const char *rlock__publish_cmd(const client_t *cl) { return cl->sharded_pubsub ? "spublish" : "publish"; }
static inline size_t rlock__publish_len(const client_t *cl) { return cl->sharded_pubsub ? 8 : 7; }
bool rlock__client_on_io_thread(const client_t *cl);

/* Room for an owner id and its NUL: "<uuid>:owner-<20 digits>" (63) plus a
 * kind's suffix (the write lock's ":write"). */
#define RLOCK__OWNER_ID_ROOM 72
/* Owner id into buf (>= 64 bytes): "<client id>:<tid>" for RLOCK_OWNER_THREAD | tid,
 * "<client id>:owner-<n>" for explicit owners; returns the length. */
size_t rlock__client_owner_id(const client_t *cl, uint64_t owner, char *buf);

#endif
