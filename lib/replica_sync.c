/* replica_sync.c -- the replica-sync policy (ReplicaSync): after a lock
 * script, WAIT for as many replicas as the policy asks, counted from what the
 * node reported (conn.c), and the error when too few acknowledged. Moved out
 * of client.c as is; the client routes, this file only builds and reads WAIT. */
#include "client.h"
#include "replica_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ replica sync
 * After an acquire, unlock or renewal script: WAIT in the same compound
 * request, asking what the policy needs of the replicas the node reported
 * online at its last count (conn.c), and of at least one once the connection
 * had replicas (rlock__sync_replicas: a master cut off from its replicas
 * reports none, and a lock taken there without WAIT is the split brain the
 * check is for). WAIT returns as soon as that many have acknowledged, or
 * after the timeout with how many did. */

static const char *policy_name(int policy) {
  static const char *names[] = {"off", "one", "majority", "all"};
  return policy >= 0 && policy <= RLOCK_REPLICA_SYNC_ALL ? names[policy] : "?";
}

/* Acknowledgements the policy needs of n connected replicas (0: no WAIT). */
static int sync_needed(int policy, int n) {
  if (n <= 0) return 0;
  switch (policy) {
  case RLOCK_REPLICA_SYNC_ONE: return 1;
  case RLOCK_REPLICA_SYNC_MAJORITY: return n / 2 + 1;
  case RLOCK_REPLICA_SYNC_ALL: return n;
  default: return 0;
  }
}

/* WAIT <needed> <timeout> appended to r for the node c (0: none needed). */
static int add_wait(client_t *cl, const conn_t *c, req_t *r, sync_need_t *need) {
  need->need = need->of = 0;
  if (cl->opt.replica_sync == RLOCK_REPLICA_SYNC_OFF) return 0;
  int n = sync_needed(cl->opt.replica_sync, rlock__sync_replicas(c));
  RLOCK__ASSERT(n > 0 || !c->had_replicas); /* never "no WAIT needed" once replicas were seen */
  if (!n) return 0;
  char count[16], ms[32];
  snprintf(count, sizeof count, "%d", n);
  rlock__i64toa(cl->opt.replica_sync_timeout_ms, ms);
  const char *argv[3] = {"WAIT", count, ms};
  if (rlock__req_append(r, 3, argv, NULL)) return RLOCK_ENOMEM;
  r->deadline += cl->opt.replica_sync_timeout_ms; /* its own WAIT; those ahead: rlock__conn_send */
  r->waits = true;
  need->need = n;
  need->of = c->replicas;
  return 0;
}

void rlock__client_send_synced(client_t *cl, const char *key, size_t klen, req_t *r, sync_need_t *need) {
  rlock__client_send_synced_at(cl, key ? rlock__names_slot(key, klen) : -1, r, need);
}

void rlock__client_send_synced_at(client_t *cl, int slot, req_t *r, sync_need_t *need) {
  r->slot = slot;
  r->sync_of = need;
  conn_t *c = cl->topo->route(cl, r);
  if (c->state != CS_READY && c->state != CS_CLOSED && cl->opt.replica_sync != RLOCK_REPLICA_SYNC_OFF) {
    /* not connected yet (a Cluster node opened a moment ago): its replicas
     * are known once its handshake read them; decided when r is written */
    need->need = need->of = 0;
    r->sync_defer = need;
    r->deadline += cl->opt.replica_sync_timeout_ms;
    rlock__conn_send(c, r);
    return;
  }
  if (add_wait(cl, c, r, need)) { /* out of memory: the request fails as a whole */
    rlock__fail(RLOCK_ENOMEM, "out of memory");
    r->done(r, RLOCK_ENOMEM, NULL);
    rlock__req_free(r);
    return;
  }
  rlock__conn_send(c, r);
}

int rlock__client_sync_decide(client_t *cl, const conn_t *c, req_t *r) {
  sync_need_t *need = r->sync_defer;
  r->sync_defer = NULL;
  int rc = add_wait(cl, c, r, need);
  if (!rc && need->need) r->deadline -= cl->opt.replica_sync_timeout_ms; /* pushed back already */
  return rc;
}

void rlock__client_sync_redirected(client_t *cl, req_t *r) {
  if (!r->sync_of || r->sync_defer || r->sync_of->need || cl->opt.replica_sync == RLOCK_REPLICA_SYNC_OFF) return;
  r->sync_defer = r->sync_of;
  r->deadline += cl->opt.replica_sync_timeout_ms;
}

bool rlock__client_sync_split(const sync_need_t *need, rlock_reply_t **reply, int *acked) {
  *acked = 0;
  if (!need->need) return true;
  rlock_reply_t *all = *reply, *wait = all->element[1];
  *reply = all->element[0];
  all->element[0] = NULL;
  if (wait->type == RLOCK_REPLY_INTEGER) *acked = (int)wait->integer;
  else *acked = -1; /* an error reply (an ACL without WAIT...) */
  rlock_reply_free(all);
  return *acked >= need->need;
}

void rlock__client_sync_refresh(client_t *cl, const char *key, size_t klen) {
  const char *argv[2] = {"INFO", "replication"};
  req_t *r = rlock__req_new(2, argv, NULL, cl->opt.command_timeout_ms, NULL, NULL);
  if (!r) return; /* out of memory: the next reconnect reads it */
  r->reads_replicas = true;
  rlock__client_send(cl, key, klen, r);
}

int rlock__client_sync_fail(const client_t *cl, const sync_need_t *need, int acked) {
  if (acked < 0)
    return rlock__fail(RLOCK_ENOSYNC,
                       "replica sync: the server refused WAIT (%d replicas connected; an ACL without WAIT? "
                       "replica_sync off locks without it)",
                       need->of);
  if (need->of == 0)
    return rlock__fail(RLOCK_ENOSYNC,
                       "replica sync: %d acknowledged within %lld ms, policy %s needs %d: the master reports no "
                       "replica online but had some (or Sentinel lists some): cut off? (replica_sync off locks "
                       "without them; a new client forgets them, Sentinel on SENTINEL RESET)",
                       acked, (long long)cl->opt.replica_sync_timeout_ms, policy_name(cl->opt.replica_sync),
                       need->need);
  return rlock__fail(RLOCK_ENOSYNC, "replica sync: %d of %d replicas acknowledged within %lld ms, policy %s needs %d",
                     acked, need->of, (long long)cl->opt.replica_sync_timeout_ms, policy_name(cl->opt.replica_sync),
                     need->need);
}
