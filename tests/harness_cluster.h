/* harness_cluster.h -- a Redis Cluster for the tests: masters and replicas
 * (redis-server with cluster-enabled, each in its own temp dir and random
 * port on loopback) joined with `redis-cli --cluster create`, waited for
 * until every node reports cluster_state:ok, always stopped. Plus the slot
 * moves and failovers the cluster tests drive with raw commands. */
#ifndef RLOCK_TEST_HARNESS_CLUSTER_H
#define RLOCK_TEST_HARNESS_CLUSTER_H

#include "harness.h"

#define TH_CLUSTER_MAX 9

typedef struct th_cluster {
  th_server_t *node[TH_CLUSTER_MAX]; /* node[0..masters) start as masters */
  int n, masters;
  char url[TH_CLUSTER_MAX * 24 + 32]; /* redis+cluster://127.0.0.1:p1,127.0.0.1:p2,... */
  /* each node's extra redis-server arguments (kept: th_server_restart reuses them) */
  char bus[TH_CLUSTER_MAX][16], timeout[16];
  const char *args[TH_CLUSTER_MAX][12];
} th_cluster_t;

/* masters (>= 3) with replicas_each replicas each; cluster-node-timeout node_timeout_ms. */
th_cluster_t *th_cluster_start(int masters, int replicas_each, int node_timeout_ms);
void th_cluster_stop(th_cluster_t *c);
/* Waits until every live node says cluster_state:ok (a replica: its link
 * to its master is up) and agrees on the owner of every slot; 1 if so
 * within timeout_ms. */
int th_cluster_wait_ok(th_cluster_t *c, int64_t timeout_ms);
/* The master that serves slot, as a live node sees it (NULL if none). */
th_server_t *th_cluster_owner(th_cluster_t *c, int slot);
/* A node's cluster id (CLUSTER MYID), malloc'd. */
char *th_cluster_id(th_server_t *s);
/* Moves slot (every key in it) from its owner to `to`, as redis-cli
 * --cluster reshard does: IMPORTING/MIGRATING, MIGRATE of each key, SETSLOT
 * NODE on both. With between (may be NULL), calls between(arg) after the
 * IMPORTING/MIGRATING marks and before the keys move, and again after the keys
 * moved and before SETSLOT NODE. */
void th_cluster_move_slot(th_cluster_t *c, int slot, th_server_t *to, void (*between)(void *arg, int phase), void *arg);
/* CLUSTER KEYSLOT of a key (computed by a node). */
int th_cluster_keyslot(th_cluster_t *c, const char *key);
/* The live node (a master or a replica) that is a replica of master m, or NULL. */
th_server_t *th_cluster_replica_of(th_cluster_t *c, th_server_t *m);

#endif
