/* harness_sentinel.h -- a Sentinel deployment for the tests: one master, its
 * replicas (--replicaof) and sentinels (redis-server <conf> --sentinel, the
 * config written to a temp dir: sentinel monitor, a short
 * down-after-milliseconds and failover-timeout), on loopback, random ports,
 * always cleaned up (the processes die with the test; temp dirs go at exit). */
#ifndef RLOCK_TEST_HARNESS_SENTINEL_H
#define RLOCK_TEST_HARNESS_SENTINEL_H

#include <pthread.h>

#include "harness.h"

#define TH_MAX_REPLICAS 4
#define TH_MAX_SENTINELS 5

typedef struct th_sentinel {
  pid_t pid;
  int port;
  int tls_port; /* 0: none */
  char dir[256];
} th_sentinel_t;

typedef struct th_sentinels {
  char name[64];                           /* the master's name in Sentinel */
  th_server_t *nodes[1 + TH_MAX_REPLICAS]; /* nodes[0] started as the master */
  int nnodes;
  th_sentinel_t sent[TH_MAX_SENTINELS];
  int nsent;
  char url[1024];                       /* redis+sentinel://127.0.0.1:p1,...,127.0.0.1:pn/NAME */
  char replicaof[TH_MAX_REPLICAS][16];  /* the master's port, for the replicas' command lines */
  const char *args[TH_MAX_REPLICAS][4]; /* --replicaof 127.0.0.1 PORT (kept for restarts) */
} th_sentinels_t;

/* Starts the master, nreplicas replicas and nsentinels sentinels (quorum
 * nsentinels/2+1, down-after 1000 ms, failover-timeout 5000 ms) and waits
 * until every replica is in sync and every sentinel knows every replica and
 * every other sentinel (so a failover can run). */
th_sentinels_t *th_sentinels_start(const char *name, int nreplicas, int nsentinels);
/* Stops everything, frees t. */
void th_sentinels_stop(th_sentinels_t *t);
/* SIGKILLs sentinel i (its port stays in t->url: a dead sentinel). */
void th_sentinel_kill(th_sentinels_t *t, int i);
/* A raw command to sentinel i (hiredis, blocking); NULL on a connection error. */
redisReply *th_sentinel_cmd(th_sentinels_t *t, int i, const char *fmt, ...);
/* The port of the master as sentinel i sees it (0: unknown or unreachable). */
int th_sentinel_master_port(th_sentinels_t *t, int i);
/* The node listening on port (NULL: none). */
th_server_t *th_sentinels_node(th_sentinels_t *t, int port);
/* Waits until every live sentinel names a master other than old_port whose
 * ROLE is master; returns it (NULL after timeout_ms). The nodes' cached raw
 * connections (th_cmd) are dropped: a demotion kills them. */
th_server_t *th_sentinels_wait_failover(th_sentinels_t *t, int old_port, int64_t timeout_ms);
/* One more sentinel on its own (quorum 1), monitoring master_port as name,
 * with requirepass if not NULL; with tls, also a TLS port (th_tls_certs),
 * and TLS to the master (master_port must then be its TLS port). Stop it
 * with th_sentinel_stop_alone. */
th_sentinel_t *th_sentinel_start_alone(const char *name, int master_port, const char *requirepass, int tls);
void th_sentinel_stop_alone(th_sentinel_t *s);
/* A stale sentinel: one more sentinel monitoring master_port under t->name
 * (quorum 2) that never learns of a failover, like one on the minority side
 * of a partition: it logs in to the nodes as an ACL user without access to
 * any channel (made on every node of t here), so it never hears the other
 * sentinels' hello messages, and they never hear of it; nor can it
 * reconfigure a node (no REPLICAOF). It keeps naming master_port with
 * config-epoch 0. Stop it with th_sentinel_stop_alone. */
th_sentinel_t *th_sentinel_start_stale(th_sentinels_t *t, int master_port);
/* Waits until master m has n replicas online (after a failover Sentinel
 * re-points the other replicas, which then sync): 1, or 0 after timeout_ms. */
int th_sentinels_wait_replicas(th_server_t *m, int n, int64_t timeout_ms);
/* A port with nothing listening (for a dead sentinel in a URL). */
int th_dead_port(void);
/* Every sentinel of t stops monitoring t->name and monitors the server on
 * port under that name instead (quorum nsent/2+1): no +switch-master. */
void th_sentinels_monitor(th_sentinels_t *t, int port);

/* A thread that waits up to 120 s for lock (lease lease_ms), records when
 * and how its wait ended, and unlocks once granted (the failover tests'
 * waiter). */
typedef struct th_waiter {
  rlock_lock_t *lock;
  int64_t lease_ms;
  pthread_t thread;
  int rc, done;    /* read them once th_waiter_done said 1 */
  int64_t done_at; /* th_now_ms() when the wait ended */
} th_waiter_t;
void th_waiter_start(th_waiter_t *w);
/* 1 once the wait has ended, 0 if it has not within timeout_ms (0: now). */
int th_waiter_done(th_waiter_t *w, int64_t timeout_ms);
void th_waiter_join(th_waiter_t *w);

#endif
