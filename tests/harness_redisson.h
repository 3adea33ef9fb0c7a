/* harness_redisson.h -- the Redisson peer for the interop tests: a JVM
 * running tests/interop/redisson (Redisson 4.7.0, built by Maven into the
 * build dir) on a single server, Sentinel or Cluster, driven line by line:
 * "<worker> <command>" in, "<worker> <answer>" out. A worker is one Java
 * thread, so one lock owner; its blocking lock() answers when it is granted
 * while the other workers go on answering. The JVM dies with the test. */
#ifndef RLOCK_TEST_HARNESS_REDISSON_H
#define RLOCK_TEST_HARNESS_REDISSON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

#define TH_PEER_PENDING 64

typedef struct th_peer {
  pid_t pid;
  FILE *in;        /* the peer's stdin */
  int out;         /* the peer's stdout (read side) */
  char id[64];     /* the Redisson client id (a UUID) */
  char buf[16384]; /* bytes read, not yet split into lines */
  size_t len;
  char *pending[TH_PEER_PENDING]; /* answers read for other workers, oldest first */
  int npending;
} th_peer_t;

/* NULL if the peer can run here; else why not (no java or mvn when the
 * build was configured, or the jar missing): the test then exits 77 (skip). */
const char *th_peer_unavailable(void);
/* Starts the peer: mode "single", "sentinel" or "cluster"; addresses as
 * Peer.java takes them (redis://127.0.0.1:P,...; Sentinel: the master name
 * first); watchdog_ms > 0 sets lockWatchdogTimeout, scan_ms > 0 the
 * topology scan interval. Waits for its "ready" line (60 s). */
th_peer_t *th_peer_start(const char *mode, const char *addresses, int64_t watchdog_ms, int64_t scan_ms);
/* Sends "<worker> <command>" (printf format). */
void th_peer_send(th_peer_t *p, const char *worker, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The next answer of worker (malloc'd, without the worker); fails the test
 * after timeout_ms or if the peer ended. */
char *th_peer_answer(th_peer_t *p, const char *worker, int64_t timeout_ms);
/* 1 and *out set if worker has answered within timeout_ms (0: now), else 0. */
int th_peer_poll(th_peer_t *p, const char *worker, int64_t timeout_ms, char **out);
/* Sends the command and checks its answer (10 s). */
#define th_peer_expect(p, worker, want, ...) th_peer_expect_at(__FILE__, __LINE__, (p), (worker), (want), __VA_ARGS__)
void th_peer_expect_at(const char *file, int line, th_peer_t *p, const char *worker, const char *want, const char *fmt,
                       ...) __attribute__((format(printf, 6, 7)));
/* Sends the command; its answer as a number (10 s; fails on anything else). */
long long th_peer_num(th_peer_t *p, const char *worker, const char *cmd);
/* Waits (20 s, else fails the test) until worker's thread sleeps on its
 * lock entry's latch: its lock()/acquire() tried, subscribed and waits for
 * a message. Redisson wakes only the threads already asleep there for a
 * write unlock's message `1` (LockPubSub: release(getQueueLength())), so a
 * test that unlocks a write lock to wake a Java waiter first waits for this. */
void th_peer_wait_parked(th_peer_t *p, const char *worker);
/* SIGKILL (a crashed Java service) and reap. */
void th_peer_kill(th_peer_t *p);
/* "quit", waits for the exit, frees p. */
void th_peer_stop(th_peer_t *p);

/* ------------------------------------------------------------ the C side */

/* A C thread that acquires l as itself (owner RLOCK_OWNER_THREAD | its tid,
 * set in owner) with wait_ms and lease_ms: the C side of a contention. */
typedef struct th_cwaiter {
  rlock_lock_t *l;
  int64_t wait_ms, lease_ms;
  pthread_t t;
  rlock_owner_t owner;
  int rc;
  int64_t done_at; /* th_now_ms() when the acquire returned */
  atomic_int done;
} th_cwaiter_t;
/* Starts the thread (w->l, w->wait_ms and w->lease_ms set). */
void th_cwaiter_start(th_cwaiter_t *w);
/* For th_wait_until: the acquire returned. */
int th_cwaiter_done(void *arg);

/* An async call's outcome: pass a th_res_t as the callback's arg. */
typedef struct th_res {
  atomic_int done;
  int status;
  int64_t value;
  char id[RLOCK_PERMIT_ID_LEN + 1]; /* a permit acquire's id buffer */
} th_res_t;
void th_res_sem(rlock_semaphore_t *s, int status, int64_t value, void *arg);
void th_res_pes(rlock_permits_t *s, int status, int64_t value, void *arg);
void th_res_latch(rlock_latch_t *l, int status, int64_t value, void *arg);
/* For th_wait_until: the callback ran. */
int th_res_done(void *arg);

#endif
