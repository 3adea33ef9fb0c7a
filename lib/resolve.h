/* resolve.h -- the addresses of a connection's node (resolve.c). */
#ifndef RLOCK_RESOLVE_H
#define RLOCK_RESOLVE_H

#include "conn.h"

/* resolve.c: the addresses of c's node, then done(c, err, res) (at once for
 * a numeric address, else on a later pass). RLOCK_ENOMEM: nothing started. */
typedef void (*rlock__resolved_fn)(conn_t *c, int err, struct addrinfo *res);
int rlock__resolve_start(conn_t *c, const char *host, int port, rlock__resolved_fn done);
void rlock__resolve_cancel(conn_t *c);      /* its callback will not run for c */
void rlock__resolve_close(conn_env_t *env); /* after the engine shut down: the resolver goes */

#endif
