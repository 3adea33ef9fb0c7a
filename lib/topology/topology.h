/* topology/topology.h -- the seam between the engine and the deployment.
 *
 * One file per deployment in lib/topology/, as curl's lib/vtls/ has one per
 * TLS backend: single.c, sentinel.c and cluster.c fill in the same table.
 * The engine asks the table for these and never tests for a deployment
 * itself:
 *   route           which connection a request goes to (by r->slot, r->conn)
 *   on_error_reply  a redirect hook every error reply passes before the
 *                   request completes (MOVED, ASK, TRYAGAIN re-route it)
 *   slots_matter    whether multi-key batches (renewals, latch DELs) must be
 *                   cut per slot: Cluster refuses cross-slot scripts and DELs,
 *                   one server (single, Sentinel) keeps them as large as they go
 *   init, flush, close, before_connect (optional, NULL in single.c)
 *                   the deployment's own state and connections, and a hook
 *                   before every connection attempt (Sentinel: ask for the
 *                   master first)
 *   handshake, handshake_check (optional)
 *                   the commands the deployment adds to a new connection's
 *                   handshake and the check of their replies (Sentinel: ROLE,
 *                   a master only; its own connections' AUTH)
 *   no_node_yet     whether a connection must wait for the topology to name
 *                   its node (Sentinel: the master), and what to say meanwhile
 * What the topology keeps per request lives in req_t.topo, per connection
 * in its own state: the engine reads neither.
 * I/O thread only. */
#ifndef RLOCK_TOPOLOGY_H
#define RLOCK_TOPOLOGY_H

#include "conn.h"
#include "handshake.h"
#include "url.h"

typedef struct rlock_client client_t;

typedef struct topology_ops {
  const char *name;
  bool slots_matter;
  /* The connection for r: never NULL (it may be down: r then waits in its
   * pending queue, bounded by its deadline). */
  conn_t *(*route)(client_t *cl, const req_t *r);
  /* r (not completed, not a handshake request) got an error reply: err is it,
   * or the first error reply of a compound. true: the topology took r (sent
   * it again elsewhere, or completed it) and r must not be touched; false: r
   * completes with the reply as usual. */
  bool (*on_error_reply)(client_t *cl, conn_t *c, req_t *r, const rlock_reply_t *err);
  /* Optional (NULL: nothing to do). init: creates cl->topo_state at client
   * creation, after the client's connections exist, before the I/O thread
   * starts (0 or RLOCK_ENOMEM; it cleans up after itself on failure).
   * flush: the end of an I/O pass (write what the topology's own connections
   * queued). close: the client shuts down, right after the command
   * connection closed and before the ops still active are failed: complete
   * what the topology holds and free its state (also called by the creator
   * if the I/O thread never ran). */
  int (*init)(client_t *cl);
  void (*flush)(client_t *cl);
  void (*close)(client_t *cl);
  /* Called by rlock__conn_start before every connection attempt of c:
   * true = connect now (to c's node); false = not yet: the topology calls
   * rlock__conn_start(c) again once c's node is known. NULL: connect now. */
  bool (*before_connect)(client_t *cl, conn_t *c);
  /* Optional (NULL: none). handshake: the topology's commands for the
   * handshake of c (NULL: the fast path's connection, a command connection
   * of its own), added to hs with rlock__hs_add after AUTH and before SELECT
   * (handshake.c). For a connection of its own (c->topo_own) they are all
   * but CLIENT SETNAME. handshake_check: the reply (may be an error reply or
   * NULL) to a command it added as HS_CHECKED: 0, or RLOCK_ECONNECT with why
   * in msg ("is not a master ..."): the attempt fails, c->node_refused set. */
  void (*handshake)(client_t *cl, const conn_t *c, hs_list_t *hs);
  int (*handshake_check)(client_t *cl, const rlock_reply_t *reply, char *msg, size_t n);
  /* NULL: a connection no node was set for (rlock__conn_set_node) talks to
   * the URL's host. Else such a connection waits for the topology to name
   * its node, and this is why a question for that node fails meanwhile. */
  const char *no_node_yet;
} topology_ops_t;

extern const topology_ops_t rlock__topology_single;
extern const topology_ops_t rlock__topology_sentinel;
extern const topology_ops_t rlock__topology_cluster;
/* sentinel.c's poll period (POLL_MS, 1 s), read by each new client: tests
 * raise it to prove what the +switch-master event does on its own. */
extern int64_t rlock__sentinel_poll_ms;

/* The topology of a client's URL: Sentinel for redis+sentinel://, Cluster for
 * redis+cluster://, else one server. */
/* Tests only: a table every client made from now on takes whatever its URL
 * (NULL: by URL). Set it on the thread that then calls rlock_client_new. */
extern const topology_ops_t *rlock__topology_forced;
const topology_ops_t *rlock__topology_for(const url_t *u);

/* Cuts n items into batches of at most max items (topology.c). With slots
 * (slots[i]: the slot of item i; pass it only when the topology's
 * slots_matter), items are grouped by slot, keeping their order within a
 * slot, and no batch spans two slots; without, batches follow the items' own
 * order across slots. Use:
 *   rlock__batcher_init(&b, slots, n, max);
 *   while (rlock__batcher_next(&b, &first, &count))
 *     for (i = first; i < first + count; i++) use(items[batcher_item(&b, i)]);
 *   rlock__batcher_free(&b); */
typedef struct batcher {
  size_t *order; /* grouped order of the items; NULL: their own order */
  const uint16_t *slots;
  size_t n, pos, max;
} batcher_t;
int rlock__batcher_init(batcher_t *b, const uint16_t *slots, size_t n, size_t max); /* RLOCK_ENOMEM */
bool rlock__batcher_next(batcher_t *b, size_t *first, size_t *count);
static inline size_t batcher_item(const batcher_t *b, size_t i) { return b->order ? b->order[i] : i; }
void rlock__batcher_free(batcher_t *b);

#endif
