/* usercmd.h -- the user's own commands on their own connection (usercmd.c). */
#ifndef RLOCK_USERCMD_H
#define RLOCK_USERCMD_H

#include "conn.h"

typedef struct rlock_client client_t;

typedef struct op op_t;
/* The user connection (rlock_client_command), opened on first use; on a
 * Cluster also one per master (cluster.c opens them, attached here). */
typedef struct usercmd {
  client_t *cl;
  conn_t conn;
  bool started, closed;
  struct event *unstick; /* reset a connection stuck behind a timed-out command */
  conn_t **more;         /* the masters' user connections (Cluster), owned by the topology */
  int nmore, capmore;
} usercmd_t;
int rlock__usercmd_init(usercmd_t *u, client_t *cl);
/* Closes the user connection and every attached one (their commands end). */
void rlock__usercmd_close(usercmd_t *u);
/* A topology's user connection to one node (initialised, kind CONN_USER):
 * unstuck and closed with the others. RLOCK_ENOMEM, or RLOCK_ECLOSED once
 * the user connections are closed. */
int rlock__usercmd_attach(usercmd_t *u, conn_t *c);
void rlock__usercmd_detach_all(usercmd_t *u); /* forgets them (the topology frees them: its close) */
/* 0, or RLOCK_EINVAL with a message naming a command that must not run on
 * the shared user connection (SUBSCRIBE, MULTI, SELECT, CLIENT REPLY...). */
int rlock__usercmd_check(int argc, const char *const *argv, const size_t *argvlen);
void rlock__usercmd_start(op_t *op); /* I/O thread: send an OP_COMMAND */

#endif
