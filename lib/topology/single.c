/* topology/single.c -- one Redis server: every request goes to the client's
 * command connection, SUBSCRIBE/UNSUBSCRIBE to its subscriber connection,
 * user commands to the user connection.
 * Slots do not matter (batches stay as large as they go) and an error reply
 * is an answer like any other (no redirects to follow). */
#include "client.h"

static conn_t *route(client_t *cl, const req_t *r) {
  switch (r->conn) {
  case CONN_SUB: return &cl->ps.conn;
  case CONN_USER: return &cl->uc.conn;
  default: return &cl->cmd;
  }
}

static bool on_error_reply(client_t *cl, conn_t *c, req_t *r, const rlock_reply_t *err) {
  (void)cl, (void)c, (void)r, (void)err;
  return false; /* complete it */
}

const topology_ops_t rlock__topology_single = {
    .name = "single",
    .slots_matter = false,
    .route = route,
    .on_error_reply = on_error_reply,
};
