/* handshake.c -- the handshake of a new connection, built in one place.
 *
 * conn.c queues it on the loop and fast.c sends it blocking; both take this
 * list: AUTH with the URL's password, the topology's own commands
 * (topology.h handshake: Sentinel's ROLE, which the topology judges), SELECT
 * (not on a subscriber connection), CLIENT SETNAME. A connection the
 * topology keeps for itself (c->topo_own: Sentinel's queries) takes the
 * topology's commands and CLIENT SETNAME only. */
#include "handshake.h"

#include <stdio.h>

void rlock__hs_add(hs_list_t *hs, hs_kind_t kind, int argc, const char *const *argv) {
  RLOCK__ASSERT(hs->n < HS_MAX && argc >= 1 && argc <= 3);
  hs_cmd_t *c = &hs->cmd[hs->n++];
  c->kind = kind;
  c->argc = argc;
  for (int i = 0; i < argc; i++) c->argv[i] = argv[i];
}

void rlock__handshake_list(const conn_env_t *env, const conn_t *c, hs_list_t *hs) {
  const url_t *u = env->url;
  bool own = c && c->topo_own;
  hs->n = 0;
  if (!own && u->password) {
    const char *a[3] = {"AUTH", u->user ? u->user : u->password, u->password};
    rlock__hs_add(hs, HS_AUTH, u->user ? 3 : 2, a);
  }
  env->up->handshake(env, c, hs);
  if (!own && (!c || c->kind != CONN_SUB) && u->db) {
    snprintf(hs->db, sizeof hs->db, "%d", u->db);
    const char *a[2] = {"SELECT", hs->db};
    rlock__hs_add(hs, HS_PLAIN, 2, a);
  }
  const char *n[3] = {"CLIENT", "SETNAME", env->name};
  rlock__hs_add(hs, HS_PLAIN, 3, n);
}
