/* replica_sync.h -- the replica-sync check: WAIT after a script (replica_sync.c). */
#ifndef RLOCK_REPLICA_SYNC_H
#define RLOCK_REPLICA_SYNC_H

#include "conn.h"

typedef struct rlock_client client_t;

/* The replica-sync check (rlock_options_t.replica_sync): WAIT after a
 * script, in the same compound request (client.c). */
typedef struct sync_need {
  int need; /* acknowledgements the policy needs: 0 = no WAIT was sent */
  int of;   /* replicas the node reported connected */
} sync_need_t;
/* rlock__client_send, with "WAIT <need> <timeout>" appended to r (a request
 * for the command connection) when the policy is not off and the node r goes
 * to reported replicas; r's deadline is pushed back by the timeout. Out of
 * memory: r completes with RLOCK_ENOMEM. */
void rlock__client_send_synced(client_t *cl, const char *key, size_t klen, req_t *r, sync_need_t *need);
/* The same for a request whose key's slot is known (slot: -1 any node). */
void rlock__client_send_synced_at(client_t *cl, int slot, req_t *r, sync_need_t *need);
/* conn.c, writing r (r->sync_defer set) on c: the WAIT c's node needs, appended
 * now (RLOCK_ENOMEM: r must fail as a whole). */
int rlock__client_sync_decide(client_t *cl, const conn_t *c, req_t *r);
/* topology, re-sending r to another node (MOVED/ASK): a request sent with
 * rlock__client_send_synced and no WAIT decides its WAIT there, when written. */
void rlock__client_sync_redirected(client_t *cl, req_t *r);
/* The reply of a request sent with rlock__client_send_synced: *reply becomes
 * the script's own reply (the compound's rest is freed); returns whether the
 * policy was met (true without a WAIT), *acked how many acknowledged (-1: an
 * error reply to WAIT). */
bool rlock__client_sync_split(const sync_need_t *need, rlock_reply_t **reply, int *acked);
/* A WAIT came short: the node of key reads its replica count again (an
 * INFO replication request with reads_replicas, routed like the others). */
void rlock__client_sync_refresh(client_t *cl, const char *key, size_t klen);
/* RLOCK_ENOSYNC with the message "replica sync: <acked> of <of> replicas ...". */
int rlock__client_sync_fail(const client_t *cl, const sync_need_t *need, int acked);

#endif
