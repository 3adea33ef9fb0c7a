/* conn.h -- one RESP connection to one node and its requests (conn.c). */
#ifndef RLOCK_CONN_H
#define RLOCK_CONN_H

#include "reply.h"
#include "url.h"

#include <stdatomic.h>
#include <openssl/ssl.h>

typedef struct conn conn_t;
typedef struct req req_t;
typedef struct hs_list hs_list_t; /* handshake.h */
typedef struct conn_env conn_env_t;
#define RLOCK__TOPO_REQ_ROOM 4 /* req_t.topo: bytes a topology keeps per request */

/* Completion of a request: status 0 with reply (owned by the callee, may be
 * an error reply), or RLOCK_ETIMEDOUT / RLOCK_ECONNLOST (it was written, the
 * outcome is unknown) / RLOCK_ECONNECT (never written: not connected in time)
 * / RLOCK_ECLOSED. Called exactly once, on the I/O thread. */
typedef void (*req_done_fn)(req_t *r, int status, rlock_reply_t *reply);

/* The connection a request needs on the node the topology picks. */
typedef enum { CONN_CMD, CONN_SUB, CONN_USER } conn_kind_t; /* lock commands, pub/sub, user commands */

/* A request keeps its formatted command(s) and its key's slot until it is
 * answered, so the topology can re-route it (MOVED/ASK) or conn.c re-send it
 * (NOSCRIPT). A compound request (rlock__req_append) carries ncmds commands written
 * together; done() gets status 0 with an ARRAY of ncmds replies, one per
 * command in order (any of them may be an error reply), or one failure
 * status (timeout, connection lost...) for the whole compound, once. */
struct req {
  req_t *next;
  char *cmd; /* formatted RESP, every command of the request */
  size_t len;
  int ncmds;              /* commands in cmd (>= 1), as many replies expected */
  rlock_reply_t *replies; /* compound: the replies read so far (an ARRAY) */
  int slot;               /* Cluster slot of the request's key, -1: any node */
  conn_kind_t conn;       /* CONN_SUB: SUBSCRIBE/UNSUBSCRIBE, on the subscriber connection */
  int64_t deadline;       /* monotonic ms */
  int64_t sent_at;        /* monotonic ms of the write, 0 if not yet written */
  int64_t waits_ms;       /* of deadline, the allowance for the WAITs ahead (conn.c behind_waits) */
  int64_t wait_end;       /* an acquire's wait bound (monotonic ms; 0: none): not written by
                             then (not connected, held), it ends RLOCK_ECONNECT (rlock__req_unsent_by);
                             only on a copy of an id never written (lock.c send_attempt) */
  req_done_fn done;
  void *ctx;
  int script;          /* index+1 of an embedded script (EVALSHA form), for NOSCRIPT fallback */
  bool completed;      /* done() already called (timed out): the reply is discarded */
  bool internal;       /* handshake request: its errors fail the connection */
  bool is_auth;        /* AUTH: an error here is RLOCK_EAUTH */
  bool reads_replicas; /* INFO replication: its answer sets the connection's replicas */
  bool topo_check;     /* a handshake command of the topology's: its handshake_check judges the reply */
  uint8_t laters;      /* LOADING/MASTERDOWN/BUSY backoffs so far (conn.c) */
  /* The topology's own bytes per request (Cluster: redirects followed,
   * TRYAGAIN backoffs), zero when made. No one else reads them. */
  uint8_t topo[RLOCK__TOPO_REQ_ROOM];
  int64_t resend_at; /* conn.c's `later` queue: when it is sent again */
  bool pinned;       /* a part of a user transaction: never redirected alone (usercmd.c) */
  /* A call over several keys of one slot that can be sent key by key (a
   * renewal batch, watchdog.c): TRYAGAIN (its keys on two nodes, the slot
   * migrating) ends it at once as not run, `split` set, instead of waiting
   * out backoffs that cannot help until the migration ends. */
  bool splittable;
  bool split; /* ended so: send its keys one by one (topology/cluster.c) */
  bool waits; /* carries a replica-sync WAIT (rlock__client_send_synced) */
  bool ahead; /* written even while its connection holds its pending requests (hold_pending) */
  /* Any refusal of it (an error reply: OOM, MISCONF, NOREPLICAS, NOPERM...;
   * nothing ran) is sent again later, like LOADING (lock.c: an undo or
   * unlock an earlier copy of which may still land: the refusal does not
   * answer that copy). */
  bool refused_later;
  /* Replica sync decided when r is written (rlock__client_send_synced on a
   * connection not ready yet: its node's replica count is read by the
   * handshake); the sync_need_t the WAIT is recorded in. */
  struct sync_need *sync_defer;
  /* The sync_need_t of a request sent with rlock__client_send_synced (NULL:
   * none): a redirect of one that went without WAIT decides it again on the
   * node it is redirected to. */
  struct sync_need *sync_of;
  size_t room; /* bytes of inl */
  char inl[];  /* cmd as first written, in the request's own allocation (rlock__req_alloc) */
};

typedef enum { CS_IDLE, CS_CONNECTING, CS_HANDSHAKE, CS_READY, CS_CLOSED } conn_state_t;

/* Counters behind rlock_client_stats (index into conn_env_t.st). */
#define ST_ROW(name, field) ST_##name,
enum { RLOCK_STATS_MAP(ST_ROW) ST_COUNT };
#undef ST_ROW

/* What a connection needs of the layer above: conn.c calls nothing of the
 * client, the topology, the fast path or the scripts directly, only this
 * table, which the client sets at creation (client.c). Each entry gets the
 * connections' shared conn_env_t back; the client finds itself from it. */
typedef struct conn_up {
  void (*pass_begin)(conn_env_t *env); /* a pass of the loop starts (a read, a timer) */
  void (*pass_end)(conn_env_t *env);
  void (*flush)(conn_env_t *env);       /* end of an I/O batch */
  void (*write_batch)(conn_env_t *env); /* the command connection's counted writes, now */
  void (*cmd_ready)(conn_env_t *env);   /* the command connection is ready (or its replicas changed) */
  int (*sync_decide)(conn_env_t *env, const conn_t *c, req_t *r); /* a deferred WAIT, decided when written */
  const char *(*script_body)(int script);                         /* for SCRIPT LOAD in the handshake */
  const char *(*script_sha)(int script);                          /* for SCRIPT EXISTS in the handshake */
  int (*script_to_eval)(req_t *r);                                /* NOSCRIPT: the request again as EVAL */
  /* The deployment's part (topology.h has the meaning of each): before a
   * connection attempt (false: not yet), the commands it adds to a handshake
   * (c NULL: the fast path's), the check of their replies, and every error
   * reply first (true: it took the request). */
  bool (*before_connect)(conn_env_t *env, conn_t *c);
  void (*handshake)(const conn_env_t *env, const conn_t *c, hs_list_t *hs);
  int (*handshake_check)(conn_env_t *env, const rlock_reply_t *reply, char *msg, size_t n);
  bool (*on_error_reply)(conn_env_t *env, conn_t *c, req_t *r, const rlock_reply_t *err);
} conn_up_t;

/* What the connections of one client share (conn.c, resolve.c, handshake.c):
 * the client fills it at creation (rlock__client_net_init) and owns it. The
 * options, URL and strings are the client's and outlive every connection. */
struct conn_env {
  const conn_up_t *up;
  const rlock_options_t *opt;
  const url_t *url;
  const char *name; /* CLIENT SETNAME */
  const char *sni;  /* TLS: the server name to check (NULL: the node's host) */
  const char *cert; /* TLS: the client certificate file (for messages) */
  struct event_base *base;
  SSL_CTX *ssl_ctx;
  conn_t *cmd;          /* the client's command connection */
  _Atomic uint64_t *st; /* the client's counters (ST_*) */
  /* A pass of the loop is running (the client's pass_begin/_end): it ends
   * with the client's flush, so a counted command-connection write in it
   * needs no flush event (conn.c write_req). */
  bool in_pass;
  bool batch_wrote; /* a counted command-connection write waits for the pass's write_batch */
  /* The resolver of host names (libevent's evdns on base: /etc/hosts and
   * /etc/resolv.conf, never blocking the loop), made on the first name that
   * is not a numeric address (resolve.c), freed by the I/O thread once the
   * resolutions it cancelled have called back. */
  struct evdns_base *dns;
  int dns_jobs;                 /* resolutions whose callback is still to come */
  _Atomic uint64_t dns_lookups; /* names handed to evdns (tests read it) */
};

typedef struct req_queue {
  req_t *head, *tail;
  size_t n;
} req_queue_t;

struct conn {
  conn_env_t *env; /* its client's (rlock__client_of finds the client from it) */
  conn_kind_t kind;
  conn_state_t state;
  /* The node this connection talks to (owned; set by the topology with
   * rlock__conn_set_node, used from the next connection attempt on).
   * NULL: the URL's host and port (a unix:// URL has no other). */
  char *host;
  int port;
  struct bufferevent *bev;
  /* Plain sockets (not TLS) once connected: the connection reads and writes
   * the socket itself (`direct`): `rev` reads into the reader (no FIONREAD),
   * `wbuf` (a plain byte buffer, kept between passes: no allocation per
   * write) gathers a pass's commands and leaves in one write at the pass's
   * end (the command connection's also each EARLY_FLUSH bytes, conn.c);
   * only what the socket refuses (EAGAIN, a partial write) moves to the
   * bufferevent's output, which then arms the write event. `flush_ev` (fd -1,
   * activated by a write outside a pass that flushes) writes wbuf before the
   * loop sleeps. TLS keeps the bufferevent for both. */
  bool direct;
  struct event *rev;
  char *wbuf;
  size_t wbuf_n, wbuf_cap;
  struct event *flush_ev;
  bool flush_pending; /* flush_ev is active */
  redisReader *reader;
  req_queue_t pending;  /* not written yet: waiting for READY */
  req_queue_t inflight; /* written, reply not yet read (FIFO) */
  struct event *timer;  /* command timeouts / connect timeout */
  int64_t timer_at;     /* when `timer` fires (INT64_MAX: not armed); never later
                           than the earliest deadline of any request */
  struct event *retry;  /* reconnect backoff */
  /* Requests answered "not run, try later" (LOADING, MASTERDOWN, BUSY: conn.c
   * not_run_later), each sent again on this connection at its resend_at
   * within its deadline; `later_ev` fires at the earliest. */
  req_queue_t later;
  struct event *later_ev;
  /* liveness (conn.c): a PING on a connection silent for ping_interval_ms,
   * and a drop after a missed PING or dead_after_timeouts timeouts in a row */
  struct event *ping;
  int64_t last_read;   /* monotonic ms of the last bytes read */
  int timeouts_in_row; /* timeouts since the last bytes read (a batch counts once) */
  bool ping_out;       /* a PING is in flight */
  bool ping_missed;    /* its deadline passed: the connection is presumed dead */
  int64_t backoff_ms;
  int64_t connect_deadline;
  struct addrinfo *addrs, *addr_next; /* the node's addresses (evutil_freeaddrinfo) */
  /* The name resolution in flight (conn.c: the client's evdns), NULL: none.
   * Cancelled by a connect timeout, a drop or a close; its callback then
   * only frees it (it never touches c again). */
  struct dns_job *dns;
  int handshake_left;
  bool ever_ready;
  bool node_refused;  /* the last attempt ended on the topology's refusal of the node (handshake_check) */
  int last_err;       /* why the last connection attempt failed */
  char last_msg[240]; /* its message ("connect 127.0.0.1:6379: Connection refused"), "" before any */
  int replicas;       /* command connections: the replicas the node reported connected
                         (INFO replication) at the last handshake, after a WAIT that
                         came short, or at the last ping interval; 0 unknown or none */
  bool recount_out;   /* the periodic INFO replication is in flight */
  bool had_replicas;  /* replicas were seen once (INFO replication), or Sentinel lists
                         some for the master (topology/sentinel.c): never cleared, the
                         replica-sync check keeps asking WAIT (rlock__sync_replicas) */
  /* A connection the topology keeps for itself (Sentinel's queries), not one
   * of the client's data connections: its handshake is the topology's alone
   * (no AUTH of the URL's password, no SELECT, no scripts, no INFO), it reads
   * no replica count and is not counted in the client's stats. */
  bool topo_own;
  int64_t connect_timeout_ms; /* 0: the client's connect_timeout_ms (the topology may set it shorter) */
  /* Callbacks into the layer above. */
  void (*on_ready)(conn_t *c);
  /* Before the requests queued while it was down are written (may be NULL):
   * it may set hold_pending, then they and every later request but those
   * marked `ahead` wait in pending until rlock__conn_hold_end (client.c:
   * after a reconnect the renewal round that finds lost holds goes first). */
  void (*before_pending)(conn_t *c);
  bool hold_pending;
  void (*on_down)(conn_t *c);
  void (*on_push)(conn_t *c, rlock_reply_t *msg); /* pub/sub messages (SUB only) */
  /* SUB only, may be NULL: whether a reply that is not a message is a push
   * nonetheless (an unsolicited sunsubscribe); true: it goes to on_push. */
  bool (*is_own_push)(conn_t *c, const rlock_reply_t *reply);
  void (*on_error)(conn_t *c, int err, const char *msg); /* a connection attempt failed */
};

int rlock__conn_init(conn_t *c, conn_env_t *env, conn_kind_t kind);
void rlock__conn_start(conn_t *c); /* begin connecting (I/O thread) */
void rlock__conn_close(conn_t *c); /* fail everything with ECLOSED, free resources */
/* Points c at host:port (copied) from its next connection attempt on
 * (Sentinel: the master it found; Cluster: a shard's master). RLOCK_ENOMEM. */
int rlock__conn_set_node(conn_t *c, const char *host, int port);
/* Queue a request (takes ownership of r and r->cmd). */
void rlock__conn_send(conn_t *c, req_t *r);
void rlock__conn_hold_end(conn_t *c); /* hold_pending off: the pending requests are written */
void rlock__conn_flush(conn_t *c);    /* write what is queued now (end of a pass) */
/* The replicas the replica-sync check asks WAIT of on c: those its node
 * reported online, and at least one once c had replicas (a master cut off
 * from its replicas reports none: zero acknowledgements then end in
 * RLOCK_ENOSYNC, never in "no WAIT needed"). */
static inline int rlock__sync_replicas(const conn_t *c) {
  return c->replicas > 0 ? c->replicas : c->had_replicas ? 1 : 0;
}
/* Requests carrying a replica-sync WAIT queued or written on c, not yet
 * answered (timed out ones too: the server still runs them). Redis runs
 * what follows a WAIT on the connection only once it ends, so each may hold
 * back a later request by up to replica_sync_timeout_ms: rlock__conn_send
 * pushes a command connection request's deadline back by that much per WAIT
 * ahead of it, and closing lingers that much longer. */
int rlock__conn_waits_ahead(const conn_t *c);
int rlock__conn_waits_written(const conn_t *c); /* the same, written ones only */
/* Drop the connection and reconnect: written requests end with RLOCK_ECONNLOST
 * (msg), queued ones wait. Not from inside a request's done callback. */
void rlock__conn_reset(conn_t *c, const char *msg);
/* When r ends if it is still not written: its deadline, or sooner its
 * acquire's wait bound (a bounded wait does not outlast its bound by a
 * command timeout while the server is unreachable). */
static inline int64_t rlock__req_unsent_by(const req_t *r) {
  return r->wait_end > 0 && r->wait_end < r->deadline ? r->wait_end : r->deadline;
}
req_t *rlock__req_new(int argc, const char **argv, const size_t *argvlen, int64_t timeout_ms, req_done_fn done,
                      void *ctx);
/* A request with room for len bytes of command in the same allocation
 * (r->cmd, r->len = len): the caller writes them (script.c). NULL: no memory. */
req_t *rlock__req_alloc(size_t len, int64_t timeout_ms, req_done_fn done, void *ctx);
/* r's command becomes cmd (malloc'd, taken over), len bytes (NOSCRIPT -> EVAL). */
void rlock__req_set_cmd(req_t *r, char *cmd, size_t len);
/* Adds a command to r (a compound request, e.g. a script + "WAIT 1 100"). */
int rlock__req_append(req_t *r, int argc, const char **argv, const size_t *argvlen);
void rlock__req_free(req_t *r);

#endif
