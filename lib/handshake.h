/* handshake.h -- the handshake list of a new connection (handshake.c). */
#ifndef RLOCK_HANDSHAKE_H
#define RLOCK_HANDSHAKE_H

#include "conn.h"

/* The handshake of a new connection, built in one place for conn.c (queued
 * on the loop) and fast.c (blocking): AUTH, the topology's commands
 * (topology.h handshake: Sentinel's ROLE), SELECT, CLIENT SETNAME. conn.c
 * adds INFO replication and the scripts on a command connection. */
typedef enum {
  HS_AUTH,    /* an error reply is RLOCK_EAUTH */
  HS_CHECKED, /* the topology's: its handshake_check judges the reply */
  HS_PLAIN    /* SELECT, CLIENT SETNAME */
} hs_kind_t;
#define HS_MAX 6
typedef struct hs_cmd {
  hs_kind_t kind;
  int argc;
  const char *argv[3]; /* strings that outlive the list (the client's, the list's db) */
} hs_cmd_t;
typedef struct hs_list {
  hs_cmd_t cmd[HS_MAX];
  int n;
  char db[16]; /* SELECT's argument */
} hs_list_t;
/* The handshake of c (NULL: the fast path's connection, a command
 * connection of its own) into hs. */
void rlock__handshake_list(const conn_env_t *env, const conn_t *c, hs_list_t *hs);
void rlock__hs_add(hs_list_t *hs, hs_kind_t kind, int argc, const char *const *argv);

#endif
