/* internal.h -- the engine's private headers, all of them: one per module
 * (util.h, map.h, names.h, url.h, resp.h, reply.h, conn.h, handshake.h,
 * topology/topology.h, script.h, pubsub.h, watchdog.h, usercmd.h, fast.h,
 * client.h, replica_sync.h, resolve.h, hooks.h, op.h, lock.h), in layer order. The
 * lock layer's files include this one; the layers below include only the
 * headers they use.
 *
 * Layers, bottom up (each only calls the ones below it):
 *   util/map/names/url/reply  helpers: clock, errors, uuid, hash map, key names, URL, replies
 *   conn      one RESP connection to one node: connect, TLS, handshake, pipelined
 *             requests matched FIFO to replies, command timeouts, reconnect
 *   handshake the handshake list of a new connection (conn.c and fast.c send it)
 *   topology  the deployment (topology/): which connection each request goes
 *             to, redirects, whether multi-key batches are cut per slot
 *   script    the embedded Lua scripts: EVALSHA with the NOSCRIPT -> EVAL fallback
 *   pubsub    the subscriber connection: ref-counted channels, parked waiters
 *             woken as the lock kind says (one for the reentrant lock)
 *   watchdog  the hold registry: batched lease renewal, valid-until, lock-lost
 *   usercmd   the user's own commands: their own connection, the filter, transactions
 *   client    options, the I/O thread, the submit queue, sync-over-async
 *   fast      the fast path: a blocking lock/unlock on the calling thread over the
 *             client's fast connection; what the engine must know is posted to it
 *   op        an op and the lock handle (op.h): read by the client, driven by lock
 *   lock      the lock machinery: acquire state machine, release, queries,
 *             driven through each lock's kind table (kinds/kind.h: one file
 *             per lock kind, kinds/reentrant.c the reentrant lock)
 * Calls go up only through tables: conn_up_t (conn.h, in the connections'
 * conn_env_t) and lock_up_t (client.h).
 * What the public calls (api.c) hand over runs on the client's I/O thread
 * only, so it needs no locks; user threads only touch the submit queue (client.c) and, on the fast
 * path, the fast connection and the posts (fast.c).
 */
#ifndef RLOCK_INTERNAL_H
#define RLOCK_INTERNAL_H

#include "rlock.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <string.h>
#include <event2/event.h>
#include <event2/bufferevent.h>
#include <openssl/ssl.h>
#include <hiredis/hiredis.h>

#include "util.h"
#include "map.h"
#include "names.h"
#include "url.h"
#include "resp.h"
#include "reply.h"
#include "conn.h"
#include "handshake.h"
#include "topology/topology.h"
#include "script.h"
#include "pubsub.h"
#include "watchdog.h"
#include "usercmd.h"
#include "fast.h"
#include "client.h"
#include "replica_sync.h"
#include "resolve.h"
#include "hooks.h"
#include "op.h"
#include "lock.h"

#endif
