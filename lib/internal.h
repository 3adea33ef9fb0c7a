/* internal.h -- the engine's private types and the seams between lib/ modules.
 *
 * Layers, bottom up (each only calls the ones below it):
 *   util/map/names/url/reply  helpers: clock, errors, uuid, hash map, key names, URL, replies
 *   conn      one RESP connection to one node: connect, TLS, handshake, pipelined
 *             requests matched FIFO to replies, command timeouts, reconnect
 *   topology  the deployment (topology/): which connection each request goes
 *             to, redirects, whether multi-key batches are cut per slot
 *   script    the embedded Lua scripts: EVALSHA with the NOSCRIPT -> EVAL fallback
 *   pubsub    the subscriber connection: ref-counted channels, parked waiters
 *             woken as the lock kind says (one for the reentrant lock)
 *   watchdog  the hold registry: batched lease renewal, valid-until, lock-lost
 *   lock      the lock machinery: acquire state machine, release, queries,
 *             driven through each lock's kind table (kinds/kind.h: one file
 *             per lock kind, kinds/reentrant.c the reentrant lock)
 *   usercmd   the user's own commands: their own connection, the filter, transactions
 *   client    options, the I/O thread, the submit queue, sync-over-async
 *   fast      the fast path: a blocking lock/unlock on the calling thread over the
 *             client's fast connection; what the engine must know is posted to it
 * Everything below "client" runs on the client's I/O thread only, so it needs no
 * locks; user threads only touch the submit queue (client.c) and, on the fast
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

#define RLOCK_API __attribute__((visibility("default")))

/* RLOCK__ASSERT(cond): an invariant the code relies on. Live when built with
 * RLOCK_ASSERTS (debug, sanitizer and test builds): a false one prints the
 * condition and its place on stderr and aborts. Gone otherwise: cond must
 * have no side effect. */
#ifdef RLOCK_ASSERTS
#define RLOCK__ASSERT(cond) \
  ((cond) ? (void)0 : rlock__assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define RLOCK__ASSERT(cond) ((void)0)
#endif
void rlock__assert_fail(const char *cond, const char *file, int line, const char *func)
    __attribute__((noreturn));

/* ------------------------------------------------------------ util.c */
int rlock__fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rlock__fail_keep(int err); /* err, keeping the detailed message already set */
void rlock__uuid(char out[37]);
void rlock__random_hex(char *out, size_t nbytes); /* 2*nbytes hex chars + NUL */
void rlock__random_bytes(void *out, size_t n);
size_t rlock__i64toa(int64_t v, char *out); /* decimal, NUL-terminated; returns length */
size_t rlock__u64toa(uint64_t v, char *out);
/* A value in decimal, written once (rlock__dec_set, at client creation)
 * and read from any thread: rlock__dec gives its text when v is that
 * value, else writes v into buf (>= 24 bytes); *n its length. */
typedef struct dec_cache {
  int64_t v;
  size_t n; /* 0: empty */
  char s[24];
} dec_cache_t;
static inline void rlock__dec_set(dec_cache_t *c, int64_t v) {
  c->n = rlock__i64toa(v, c->s);
  c->v = v;
}
static inline const char *rlock__dec(const dec_cache_t *c, int64_t v, char *buf, size_t *n) {
  if (c->n && c->v == v) {
    *n = c->n;
    return c->s;
  }
  *n = rlock__i64toa(v, buf);
  return buf;
}
typedef struct rlock__prng {
  uint64_t s[4];
} rlock__prng_t;
void rlock__prng_seed(rlock__prng_t *p);
uint64_t rlock__prng_next(rlock__prng_t *p);
void rlock__prng_hex(rlock__prng_t *p, char out[33]); /* 128 random bits as 32 hex chars */
uint64_t rlock__gettid(void); /* cached per thread (reset in a forked child) */
size_t rlock__tid_dec(uint64_t tid, char *out); /* rlock__u64toa, the calling thread's last one kept */
unsigned rlock__fork_generation(void); /* +1 in each forked child (pthread_atfork) */
void rlock__futex_wait(_Atomic uint32_t *word, uint32_t while_value);
void rlock__futex_wake(_Atomic uint32_t *word);
/* Sync over async (util.c): the states of a sync call's word, the wait and
 * the I/O thread's signal (FUTEX_WAKE only for a waiter that sleeps). */
enum { SYNC_PENDING = 0, SYNC_DONE = 1, SYNC_SLEEPING = 2 };
void rlock__sync_wait(_Atomic uint32_t *word);
void rlock__sync_signal(_Atomic uint32_t *word);
char *rlock__strndup(const char *s, size_t n);
/* The first n bytes of a and b (or up to a NUL in both) are equal, ASCII
 * letters compared without case whatever the locale (strncasecmp follows
 * the application's locale: in Turkish 'I' and 'i' differ). */
bool rlock__ascii_ncaseeq(const char *a, const char *b, size_t n);
void rlock__tv_from_ms(struct timeval *tv, int64_t ms);
/* Per-thread detailed message, copied to the waiting user thread by sync calls. */
void rlock__set_msg(const char *msg);
const char *rlock__msg(void);

/* ------------------------------------------------------------ map.c */
/* Hash map from byte strings to pointers (chained, power-of-two buckets;
 * a deleted entry is kept as the next put's, so put/del cycles do not allocate). */
typedef struct map_entry {
  struct map_entry *next;
  uint64_t hash;
  size_t klen;
  void *value;
  char key[]; /* klen bytes */
} map_entry_t;
typedef struct map {
  map_entry_t **buckets;
  size_t nbuckets, count;
  map_entry_t *spare; /* the last deleted entry, reused by the next put */
} map_t;
void rlock__map_init(map_t *m);
uint64_t rlock__map_hash(const void *key, size_t klen); /* the map's hash (watchdog.c's own table) */
void rlock__map_free(map_t *m); /* frees entries, not values */
void *rlock__map_get(const map_t *m, const void *key, size_t klen);
/* Where key's value is stored (NULL: no such key): set it without allocating. */
void **rlock__map_slot(const map_t *m, const void *key, size_t klen);
int rlock__map_put(map_t *m, const void *key, size_t klen, void *value); /* replaces */
/* Where key's value is stored, after putting value there if key was absent
 * (*added; one lookup). NULL: out of memory. */
void **rlock__map_put_slot(map_t *m, const void *key, size_t klen, void *value, bool *added);
void *rlock__map_del(map_t *m, const void *key, size_t klen);         /* returns old value */
/* Iteration that tolerates deleting the current entry. */
typedef struct map_iter {
  const map_t *m;
  size_t bucket;
  map_entry_t *next;
} map_iter_t;
void rlock__map_iter_init(map_iter_t *it, const map_t *m);
map_entry_t *rlock__map_iter_next(map_iter_t *it);

/* ------------------------------------------------------------ names.c */
/* A byte buffer for key names built from the lock name. */
typedef struct bytes {
  char *p;
  size_t n;
} bytes_t;
/* Key names derived from a lock NAME, always in NAME's Cluster slot:
 * Redisson's form when it lands there, else the slot-tag form (names.c).
 * Prefix form: "P:{NAME}" ("P:NAME" when NAME holds '{'), else "P:{T}NAME". */
int rlock__names_prefixed(bytes_t *out, const char *prefix, const char *name, size_t len);
/* prefix form plus ":" suffix: "P:{NAME}:S" (else "P:NAME:S", "P:{T}NAME:S"). */
int rlock__names_prefixed_suffix(bytes_t *out, const char *prefix, const char *name, size_t len,
                          const char *suffix);
/* The same in buf when it fits (cap bytes, its NUL included: out->p == buf),
 * else malloc'd; prefix and suffix plen and slen bytes (no NUL needed). */
int rlock__names_prefixed_suffix_in(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen,
                                    const char *name, size_t len, const char *suffix, size_t slen);
/* suffix form: "{NAME}:S" ("NAME:S" when NAME holds '{'), else "{T}NAME:S". */
int rlock__names_suffixed(bytes_t *out, const char *name, size_t len, const char *suffix);
/* rlock__names_prefixed_suffix_in for a NAME known to hold no brace:
 * "P:{NAME}:S" (prefix and suffix NULL: absent). */
int rlock__names_plain_in(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen, const char *name,
                          size_t len, const char *suffix, size_t slen);
uint16_t rlock__names_crc16(const char *p, size_t n);
uint16_t rlock__names_slot(const char *key, size_t n); /* Redis Cluster hash slot */
const char *rlock__names_tag(uint16_t slot); /* the shortest [0-9a-z] tag T hashing to slot */

/* ------------------------------------------------------------ url.c */
typedef enum { URL_TCP, URL_TLS, URL_UNIX } url_kind_t;
typedef struct url_node {
  char *host;
  int port;
} url_node_t;
typedef struct url {
  url_kind_t kind;
  char *host; /* TCP/TLS; brackets removed for IPv6 (Sentinel: the first sentinel's) */
  int port;
  char *path; /* unix socket */
  char *user, *password; /* the Redis servers' (Sentinel: the master's) */
  int db;
  /* redis+sentinel:// and rediss+sentinel:// (kind URL_TCP / URL_TLS) */
  bool sentinel;
  url_node_t *sentinels; /* in the URL's order */
  int nsentinels;
  char *master;            /* the master's name in Sentinel */
  char *sentinel_password; /* AUTH to the sentinels; NULL: none */
  bool cluster; /* redis+cluster:// or rediss+cluster:// (kind URL_TCP / URL_TLS) */
  char *seeds;  /* cluster: the seeds after the first, "h2:p2,h3:p3" (validated); NULL: none */
} url_t;
int rlock__url_parse(url_t *u, const char *s); /* RLOCK_EURL with a message (never quoting s) */
/* Sets hide[i] for each of the n bytes of s that may be a password, whatever
 * s holds: the user info up to the last '@' after the user's ':' (all of it
 * without a ':'), and every "password=" value. rlock_url_redact hides them. */
void rlock__url_secret_mask(const char *s, size_t n, unsigned char *hide);
void rlock__url_free(url_t *u);
/* The URL's passwords (its own, its sentinels'), NULL where none: masked in
 * the servers' refusals. */
void rlock__url_secrets(const url_t *u, const char *out[2]);

/* ------------------------------------------------------------ resp.c */
/* Commands in RESP, written straight into a buffer sized beforehand (no
 * printf): rlock__resp_size bytes, then rlock__resp_write (returns the bytes
 * written). argvlen NULL: strlen of each argument. The pieces, for writers
 * of their own (script.c): "*n\r\n" / "$n\r\n" (type '*' or '$') and one
 * bulk string; each returns the end of what it wrote. */
size_t rlock__resp_size(int argc, const char *const *argv, const size_t *argvlen);
size_t rlock__resp_write(char *out, int argc, const char *const *argv, const size_t *argvlen);
/* Inline: a request is a dozen of them (script.c). */
static inline size_t rlock__resp_digits(size_t n) {
  size_t d = 1;
  while (n >= 10) n /= 10, d++;
  return d;
}
static inline size_t rlock__resp_head_size(size_t n) { return 1 + rlock__resp_digits(n) + 2; }
static inline char *rlock__resp_head(char *p, char type, size_t n) {
  p[0] = type;
  if (n < 10) { /* most lengths and counts: one or two digits */
    p[1] = (char)('0' + n), p[2] = '\r', p[3] = '\n';
    return p + 4;
  }
  if (n < 100) {
    p[1] = (char)('0' + n / 10), p[2] = (char)('0' + n % 10), p[3] = '\r', p[4] = '\n';
    return p + 5;
  }
  size_t d = rlock__resp_digits(n);
  for (size_t i = d; i > 0; i--, n /= 10) p[i] = (char)('0' + n % 10);
  p[d + 1] = '\r';
  p[d + 2] = '\n';
  return p + d + 3;
}
static inline size_t rlock__resp_bulk_size(size_t n) { return rlock__resp_head_size(n) + n + 2; }
static inline char *rlock__resp_bulk(char *p, const void *s, size_t n) {
  p = rlock__resp_head(p, '$', n);
  if (n) memcpy(p, s, n);
  p[n] = '\r';
  p[n + 1] = '\n';
  return p + n + 2;
}

/* ------------------------------------------------------------ reply.c */
/* hiredis reader building rlock_reply_t trees, with bounds on sizes. shared:
 * replies only the engine reads (the command connection's), nil and small
 * integers shared and read-only (no allocation; rlock_reply_free skips them). */
redisReader *rlock__reply_reader_new(bool shared);
/* The command connection's integer and nil replies, whole at p (n bytes),
 * parsed without the reader, as the shared reader builds them; *used the
 * bytes taken. NULL: another reply, or not whole (the reader takes it). */
rlock_reply_t *rlock__reply_fast(const char *p, size_t n, size_t *used);
/* The reader holds no part of a reply (rlock__reply_fast may take the next bytes). */
bool rlock__reply_reader_idle(const redisReader *r);
/* A reply is an error whose text starts with prefix. */
bool rlock__reply_is_error(const rlock_reply_t *r, const char *prefix);
/* The code of an error reply: RLOCK_ENOPERM for an ACL refusal (NOPERM), else RLOCK_ESERVER. */
int rlock__reply_error_code(const rlock_reply_t *r);
/* A refusal before the command ran (LOADING, MASTERDOWN, BUSY): nothing of
 * it applied; it may be sent again (conn.c's later queue). */
bool rlock__reply_not_run(const rlock_reply_t *r);

/* ------------------------------------------------------------ conn.c */
typedef struct rlock_client client_t;
typedef struct conn conn_t;
typedef struct req req_t;
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
  int64_t deadline; /* monotonic ms */
  int64_t sent_at;  /* monotonic ms of the write, 0 if not yet written */
  int64_t waits_ms; /* of deadline, the allowance for the WAITs ahead (conn.c behind_waits) */
  int64_t wait_end; /* an acquire's wait bound (monotonic ms; 0: none): not written by
                       then (not connected, held), it ends RLOCK_ECONNECT (rlock__req_unsent_by);
                       only on a copy of an id never written (lock.c send_attempt) */
  req_done_fn done;
  void *ctx;
  int script; /* index+1 of an embedded script (EVALSHA form), for NOSCRIPT fallback */
  bool completed; /* done() already called (timed out): the reply is discarded */
  bool internal;  /* handshake request: its errors fail the connection */
  bool is_auth;   /* AUTH: an error here is RLOCK_EAUTH */
  bool reads_replicas; /* INFO replication: its answer sets the connection's replicas */
  bool topo_check; /* a handshake command of the topology's: its handshake_check judges the reply */
  uint8_t laters;  /* LOADING/MASTERDOWN/BUSY backoffs so far (conn.c) */
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
  bool waits;          /* carries a replica-sync WAIT (rlock__client_send_synced) */
  bool ahead;          /* written even while its connection holds its pending requests (hold_pending) */
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

typedef struct req_queue {
  req_t *head, *tail;
  size_t n;
} req_queue_t;

struct conn {
  client_t *cl;
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
  int64_t last_read;    /* monotonic ms of the last bytes read */
  int timeouts_in_row;  /* timeouts since the last bytes read (a batch counts once) */
  bool ping_out;        /* a PING is in flight */
  bool ping_missed;     /* its deadline passed: the connection is presumed dead */
  int64_t backoff_ms;
  int64_t connect_deadline;
  struct addrinfo *addrs, *addr_next; /* the node's addresses (evutil_freeaddrinfo) */
  /* The name resolution in flight (conn.c: the client's evdns), NULL: none.
   * Cancelled by a connect timeout, a drop or a close; its callback then
   * only frees it (it never touches c again). */
  struct dns_job *dns;
  int handshake_left;
  bool ever_ready;
  bool node_refused; /* the last attempt ended on the topology's refusal of the node (handshake_check) */
  int last_err; /* why the last connection attempt failed */
  char last_msg[240]; /* its message ("connect 127.0.0.1:6379: Connection refused"), "" before any */
  int replicas; /* command connections: the replicas the node reported connected
                   (INFO replication) at the last handshake, after a WAIT that
                   came short, or at the last ping interval; 0 unknown or none */
  bool recount_out; /* the periodic INFO replication is in flight */
  bool had_replicas; /* replicas were seen once (INFO replication), or Sentinel lists
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

int rlock__conn_init(conn_t *c, client_t *cl, conn_kind_t kind);
void rlock__conn_start(conn_t *c);   /* begin connecting (I/O thread) */
void rlock__conn_close(conn_t *c);   /* fail everything with ECLOSED, free resources */
/* Points c at host:port (copied) from its next connection attempt on
 * (Sentinel: the master it found; Cluster: a shard's master). RLOCK_ENOMEM. */
int rlock__conn_set_node(conn_t *c, const char *host, int port);
/* Queue a request (takes ownership of r and r->cmd). */
void rlock__conn_send(conn_t *c, req_t *r);
void rlock__conn_hold_end(conn_t *c); /* hold_pending off: the pending requests are written */
void rlock__conn_flush(conn_t *c); /* write what is queued now (end of a pass) */
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
req_t *rlock__req_new(int argc, const char **argv, const size_t *argvlen, int64_t timeout_ms,
               req_done_fn done, void *ctx);
/* A request with room for len bytes of command in the same allocation
 * (r->cmd, r->len = len): the caller writes them (script.c). NULL: no memory. */
req_t *rlock__req_alloc(size_t len, int64_t timeout_ms, req_done_fn done, void *ctx);
/* r's command becomes cmd (malloc'd, taken over), len bytes (NOSCRIPT -> EVAL). */
void rlock__req_set_cmd(req_t *r, char *cmd, size_t len);
/* Adds a command to r (a compound request, e.g. a script + "WAIT 1 100"). */
int rlock__req_append(req_t *r, int argc, const char **argv, const size_t *argvlen);
void rlock__req_free(req_t *r);

/* ------------------------------------------------------------ handshake.c */
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
void rlock__handshake_list(client_t *cl, const conn_t *c, hs_list_t *hs);
void rlock__hs_add(hs_list_t *hs, hs_kind_t kind, int argc, const char *const *argv);

#include "scripts.h"
#include "topology/topology.h"

/* ------------------------------------------------------------ script.c */
/* The embedded scripts (lua/<name>.lua): the reentrant lock's
 * (kinds/reentrant.c) and the simple lock's (kinds/simple.c); the watchdog
 * renews each hold with its kind's renew script (SCRIPT_RENEW by default). */
#define SCRIPT_ENUM_ROW(e, file) SCRIPT_##e,
enum { SCRIPT__NONE, RLOCK__SCRIPT_MAP(SCRIPT_ENUM_ROW) SCRIPT__END, SCRIPT_N = SCRIPT__END - 1 };
#undef SCRIPT_ENUM_ROW
void rlock__script_init(void); /* computes the SHA1s once (thread-safe) */
const char *rlock__script_body(int script);
const char *rlock__script_sha(int script); /* 40 hex digits */
/* A request running `script` with keys and args (EVALSHA form). */
req_t *rlock__script_req(int script, int nkeys, const char **keys, const size_t *keylens, int nargs,
                  const char **args, const size_t *arglens, int64_t timeout_ms,
                  req_done_fn done, void *ctx);
/* Rewrites an EVALSHA request into its EVAL form (for NOSCRIPT). */
int rlock__script_to_eval(req_t *r);

/* ------------------------------------------------------------ pubsub.c */
typedef struct waiter waiter_t;
typedef struct channel channel_t;
/* A lock waiter parked on a channel. */
struct waiter {
  waiter_t *prev, *next;
  channel_t *ch;
  bool parked; /* waiting for a message (vs. an attempt in flight) */
  bool token;  /* a message that wakes all came while its attempt was in flight:
                  it tries again instead of parking (pubsub.c) */
  int refused; /* RLOCK_ENOPERM: its channel's SUBSCRIBE was refused (an ACL):
                  the wait ends (rlock__pubsub_refused says why) */
  void (*on_wake)(waiter_t *w); /* a message arrived / resubscribed / subscribed */
  /* How many parked waiters a message (its payload) wakes: the lock kind's
   * policy, taken by the channel from its first waiter. NULL: one. */
  int (*wake)(const rlock_reply_t *msg);
};
typedef struct pubsub {
  client_t *cl;
  conn_t conn;
  map_t channels;
  uint64_t next_gen; /* channel generations: a late reply never touches a newer channel */
  struct event *resub;  /* re-sends SUBSCRIBEs that failed (timeout, error reply) */
  int64_t resub_ms;     /* its backoff: reconnect_min_ms .. reconnect_max_ms */
} pubsub_t;
int rlock__pubsub_init(pubsub_t *ps, client_t *cl);
/* c (CONN_SUB, another node's subscriber connection: sharded pub/sub in
 * Cluster) reports its messages, drops and reconnects to ps. */
void rlock__pubsub_attach(pubsub_t *ps, conn_t *c);
/* Subscribe now every channel that is not subscribed (the slot map changed). */
void rlock__pubsub_resubscribe(pubsub_t *ps);
void rlock__pubsub_close(pubsub_t *ps);
/* Join the channel: subscribes if first; w->on_wake is called once the
 * subscription is confirmed (or failed: the waiter then falls back to its
 * TTL-bounded retries). */
int rlock__pubsub_join(pubsub_t *ps, waiter_t *w, const char *chan, size_t len);
void rlock__pubsub_leave(pubsub_t *ps, waiter_t *w);
/* Why w->refused: the channel and the server's refusal. */
const char *rlock__pubsub_refused(const waiter_t *w);
bool rlock__pubsub_park(waiter_t *w); /* true: a wake token was waiting: retry now */
/* w got a wake-up it did not use (ends without the lock): wake the next
 * parked waiter of its channel, or leave a wake token. */
void rlock__pubsub_pass_wake(waiter_t *w);

/* ------------------------------------------------------------ watchdog.c */
typedef struct hold hold_t;
typedef struct watchdog {
  client_t *cl;
  struct {                /* (owner, name) -> hold_t, chained through the holds themselves */
    hold_t **buckets;
    size_t nbuckets, count;
  } holds;
  map_t owners;           /* owner id -> its interned copy, shared by that owner's holds */
  struct owner_rec *last_owner; /* the last one looked up */
  map_t residue;          /* (name, owner) -> residue_t: unknown releases of a forgotten hold */
  struct event *tick;     /* renewal round every watchdog_timeout/3 */
  struct event *expire;   /* the expiry queue's one timer */
  int64_t armed_at;       /* when it fires (0: not armed) */
  hold_t *qhead, *qtail;  /* holds whose lease ends watchdog_timeout after their last renewal, in that order */
  struct event *spare_ev; /* a freed timer of a hold with another deadline, for the next */
  hold_t *spare;          /* a freed hold, for the next one whose name fits */
  struct batch *cur[SCRIPT_N + 1]; /* the round's renewal call being filled, per renew script */
  struct batch *cur_fixed[SCRIPT_N + 1]; /* a check round's call of fixed-lease holds (never extended) */
  size_t round_at;        /* the round's next bucket */
  unsigned inflight;      /* renewal calls awaiting their reply */
  bool round_on, round_again, stepping; /* a round under way; another one due after it; in round_step */
  bool check;             /* the rounds under way check the holds after a reconnect (rlock__watchdog_check_now) */
  pthread_mutex_t lmu;    /* guards the listeners (added from user threads) */
  struct lost_listener *listeners; /* also told of every lost hold (MultiLock) */
  size_t nlisteners;
} watchdog_t;
int rlock__watchdog_init(watchdog_t *wd, client_t *cl);
void rlock__watchdog_close(watchdog_t *wd);
/* A second lock-lost listener beside the client's callback (the MultiLock's):
 * fn(cl, name, len, owner, reason, arg) runs on the I/O thread after the
 * client's callback, with lmu held, so _unlisten waits for a running call.
 * Any thread; RLOCK_ENOMEM. (fn, arg) added twice is called twice. */
typedef void (*lost_listener_fn)(client_t *cl, const char *name, size_t len, uint64_t owner,
                                 rlock_lost_reason_t reason, void *arg);
int rlock__watchdog_listen(watchdog_t *wd, lost_listener_fn fn, void *arg);
void rlock__watchdog_unlisten(watchdog_t *wd, lost_listener_fn fn, void *arg);
/* An acquire succeeded (sent at sent_at, reply at now): one more hold of
 * (name, owner), pushed on the hold's stack of leases (watchdog or fixed).
 * RLOCK_ENOMEM if it cannot be tracked. */
int rlock__watchdog_acquired(watchdog_t *wd, const char *name, size_t len, uint64_t owner,
                      const char *owner_id, int64_t lease_ms, bool renew, int64_t sent_at);
/* The script that renews the hold of (name, owner) (its kind's; default
 * SCRIPT_RENEW). Set after rlock__watchdog_acquired. */
void rlock__watchdog_set_renew(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                               int script);
/* Whether the hold of (name, owner) tracked here, if any, is of the kind
 * whose holds `script` renews (0: SCRIPT_RENEW's). A release through a handle
 * of another kind (the same name) must not touch the hold it cannot release. */
bool rlock__watchdog_kind_is(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script);
/* The client's hold count of (name, owner) (0: untracked) and, in *unknown,
 * how many of its releases had an unknown outcome (the server may count
 * that many more). */
int64_t rlock__watchdog_count(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                       int64_t *unknown);
/* Whether the registry tracks a hold of (name, owner id). */
bool rlock__watchdog_tracks(watchdog_t *wd, const char *name, size_t len, const char *owner_id);
/* The TTL (ms) one release must leave when holds remain: what the rest of
 * the stack still needs (watchdog lease if any renews, else the longest
 * fixed lease left, at least 1). */
int64_t rlock__watchdog_lease(watchdog_t *wd, const char *name, size_t len, const char *owner_id);
/* The MultiLock's final step (one lease for all): the top level of the hold
 * of (name, owner), taken with the watchdog to outlive the wait, becomes a
 * fixed lease of lease_ms sent now and answered by reply_by at the latest.
 * *ttl: the exact TTL to set, the lease or, if the levels below need more,
 * what they need (never shortened under an outer hold). Called before the
 * request leaves, so no renewal sent after it undoes the TTL.
 * RLOCK_ENOTHELD if untracked, or if the handle's kind (script) is not the
 * hold's. */
int rlock__watchdog_relet(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script,
                          int64_t lease_ms, int64_t reply_by, int64_t *ttl);
/* What a release did to the hold. */
typedef enum {
  REL_ONE,      /* one hold released, others remain; the TTL was set to lease_ms */
  REL_ONE_UNCHECKED, /* the same, without a count check (other calls of the owner
                        were in flight): the unknown releases stay unknown */
  REL_ALL,      /* the last hold released: the key is gone */
  REL_UNKNOWN,  /* the release failed: count it as done (it may or may not have landed) */
  REL_NOTHELD,  /* the server says the owner holds nothing: stop tracking */
  REL_MISMATCH  /* the server's count disagreed: field removed, a loss (callback) */
} release_t;
void rlock__watchdog_released(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                       release_t how, int64_t lease_ms);
int rlock__watchdog_valid_until(watchdog_t *wd, const char *name, size_t len, const char *owner_id,
                         int64_t *out);
void rlock__watchdog_renew_now(watchdog_t *wd); /* after a reconnect */
/* After a reconnect of the command connection that holds its queued
 * requests (hold_pending): a round whose calls go ahead of them; once every
 * hold was asked about, rlock__client_checked. */
void rlock__watchdog_check_now(watchdog_t *wd);
void rlock__client_checked(client_t *cl);
/* While rlock_client_new waits: msg is the latest reason the start has not
 * succeeded yet (the answer if connect_timeout_ms passes first). */
void rlock__client_start_note(client_t *cl, const char *msg);
/* Force unlock succeeded: every hold of name tracked here is lost (callback). */
void rlock__watchdog_forget(watchdog_t *wd, const char *name, size_t len);

/* ------------------------------------------------------------ usercmd.c */
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

/* ------------------------------------------------------------ fast.c */
/* The fast path (fast.c, docs/internals/fast-path.md): a blocking
 * lock or unlock done on the calling thread over the client's one fast
 * connection, when nothing else of the client is busy with that lock name.
 * What the I/O thread must know (a hold to renew, a latch key to delete, a
 * handoff mark) is posted to it and applied in order before anything
 * submitted later starts (rlock__fast_drain). Per lock-name slot (a hash of
 * the name) the client counts what makes a name busy for the fast path. */
#define FAST_SLOTS 256
typedef struct fast_buf {
  unsigned char *p;
  size_t n, cap;
} fast_buf_t;
typedef struct fast {
  bool on;              /* the option, and a deployment it fits (slots do not matter, plain socket) */
  uint64_t serial;      /* this client for the per-thread tables (never reused in a process) */
  int64_t drain_ms;     /* posts are applied at most this long after the first */
  /* the fast connection: one thread at a time (trylock) */
  pthread_mutex_t mu;
  int fd;               /* -1: not connected (set and closed under amu too: rlock__fast_close_wait) */
  bool cut;             /* amu: closing cut the connection: no new one */
  atomic_int calls;     /* fast call windows open (rlock__fast_begin/_end) */
  unsigned fd_gen;      /* the command connection's generation it was made for */
  unsigned failed_gen;  /* connecting failed for that generation: not tried again */
  redisReader *reader;
  /* where the command connection is connected, published by the I/O thread (amu) */
  pthread_mutex_t amu;
  struct sockaddr_storage addr;
  unsigned addrlen;
  _Atomic unsigned gen; /* 0: the command connection is not ready: no fast path */
  unsigned next_gen;    /* I/O thread */
  atomic_bool nowait;   /* no replica-sync WAIT is needed on that node */
  /* posts to the I/O thread (pmu); spare: the drained buffer, kept for reuse */
  pthread_mutex_t pmu;
  pthread_mutex_t statmu; /* recursive: a drain step counted in ST_HELD twice is never seen */
  fast_buf_t posts, spare;
  atomic_bool posted;   /* posts wait (written under pmu): the first one woke the I/O thread */
  bool drain_armed;     /* I/O thread: drain_ev is pending */
  struct event *drain_ev;
  map_t releasing;      /* I/O thread: (name, owner id) -> fast unlocks in flight */
  _Atomic int busy[FAST_SLOTS];       /* ops submitted and not finished, undos in flight */
  _Atomic int hand[FAST_SLOTS];       /* handoff marks (lock.c) and notified fast unlocks not drained */
  _Atomic uint32_t epoch[FAST_SLOTS]; /* +1 at each hold change the I/O thread makes on its own */
} fast_t;
int rlock__fast_init(client_t *cl);    /* at rlock_client_new, before the I/O thread */
void rlock__fast_destroy(client_t *cl);
unsigned rlock__fast_slot(const char *name, size_t len);
/* Blocking calls (api.c): true when the call was done here (*rc its result,
 * op recycled); false: op goes to the I/O thread (op->fast_lost: its request
 * may have reached the server: re-send it with the same id). */
bool rlock__fast_acquire(op_t *op, int *rc);
bool rlock__fast_release(op_t *op, int *rc);
/* A blocking call's fast window, around rlock__fast_acquire/_release and the
 * submit of the op it hands over (api.c): false, the fast path is off or the
 * client is closing (nothing to end). rlock_client_free waits for every
 * window open (rlock__fast_close_wait). */
bool rlock__fast_begin(client_t *cl);
void rlock__fast_end(client_t *cl);
/* rlock_client_free, after `closing`: waits until no fast call is under way;
 * past ms, cuts the fast connection (a call waiting for its answer loses it:
 * its op goes to the I/O thread, which undoes its try). */
void rlock__fast_close_wait(client_t *cl, int64_t ms);
/* A blocking release through the I/O thread ended (rc, value): the calling
 * thread's table learns the count when it is known (0 after the last hold). */
void rlock__fast_released_slow(client_t *cl, const rlock_lock_t *l, uint64_t owner, int rc, int64_t value);
/* I/O thread: apply the posts now (before starting submitted ops, before
 * reading a renewal's answer, when closing). */
void rlock__fast_drain(client_t *cl);
void rlock__fast_wake(client_t *cl);          /* I/O thread woken: arm the drain timer if posts wait */
void rlock__fast_cmd_ready(client_t *cl);     /* the command connection is ready (or its replicas changed) */
void rlock__fast_cmd_down(client_t *cl);
/* A renewal found (name, owner) gone: whether a fast unlock of it is in flight. */
bool rlock__fast_releasing(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
/* I/O thread: an op that carried a fast unlock's re-send ended (op->fast_releasing). */
void rlock__fast_release_ended(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
/* I/O thread: an unlock of (name, owner) whose answer was lost may have freed
 * the hold already (the mark lasts until its op ends: rlock__fast_release_ended). */
void rlock__fast_release_began(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen);
void rlock__fast_bump(client_t *cl, const char *name, size_t len); /* epoch of name's slot + 1 */
void rlock__fast_busy(client_t *cl, int slot, int delta);

/* ------------------------------------------------------------ client.c */

/* rlock_client_free waits at most min(command timeout, this) for the fast
 * calls under way, then for the last DELs and undos (rlock.h). */
#define RLOCK__CLOSE_LINGER_MS 500

/* Counters behind rlock_client_stats (index into client->st). */
#define ST_ROW(name, field) ST_##name,
enum { RLOCK_STATS_MAP(ST_ROW) ST_COUNT };
#undef ST_ROW

/* What a connection needs of the layer above: conn.c calls nothing of the
 * client, the fast path or the scripts directly, only this table, which the
 * client sets at creation (cl->conn_up, client.c). */
typedef struct conn_up {
  void (*pass_begin)(client_t *cl); /* a pass of the loop starts (a read, a timer) */
  void (*pass_end)(client_t *cl);
  void (*flush)(client_t *cl);       /* end of an I/O batch */
  void (*write_batch)(client_t *cl); /* the command connection's counted writes, now */
  void (*cmd_ready)(client_t *cl);   /* the command connection is ready (or its replicas changed) */
  int (*sync_decide)(client_t *cl, const conn_t *c, req_t *r); /* a deferred WAIT, decided when written */
  const char *(*script_body)(int script);                      /* for SCRIPT LOAD in the handshake */
  const char *(*script_sha)(int script);                       /* for SCRIPT EXISTS in the handshake */
  int (*script_to_eval)(req_t *r);                             /* NOSCRIPT: the request again as EVAL */
} conn_up_t;
extern const conn_up_t rlock__client_conn_up; /* the client's (client.c); tests' bare clients set it too */

/* What the client needs of the lock layer above (op completions, clean-up,
 * the handoff marks): client.c, fast.c and usercmd.c call nothing of lock.c
 * directly, only this table, which lock.c gives the client at creation
 * (rlock_client_new -> rlock__client_create). */
typedef struct lock_up {
  void (*op_start)(op_t *op);
  void (*op_finish)(op_t *op, int status, int64_t value, void *ptr, size_t n);
  void (*op_end_unstarted)(op_t *op);
  void (*op_fail_all)(client_t *cl, int status);
  void (*op_undo_on_close)(client_t *cl);
  void (*op_index_free)(client_t *cl);
  void (*op_spares_free)(client_t *cl);
  void (*op_recycle)(client_t *cl, op_t *op);
  void (*handoff_mark)(client_t *cl, const char *name, size_t len);
  void (*handoff_clear)(client_t *cl);
  /* The fast path's requests and the meaning of their replies, as the op's
   * lock kind makes and reads them (fast.c knows no kind: lock.c asks the
   * kind's table, kinds/kind.h). fast_fits: a kind the fast path serves (the
   * reentrant lock). fast_try_reply: KIND_GRANTED, KIND_BUSY (*wait_ms: the
   * holder's TTL) or an RLOCK_E code with its message. fast_release_req: one
   * release expecting `left` holds to remain, their TTL op->lease_ms.
   * fast_release_reply: 0 with *how and *notified, or an RLOCK_E code. */
  bool (*fast_fits)(const rlock_lock_t *l);
  req_t *(*fast_try_req)(op_t *op, const bytes_t *latch, req_done_fn done);
  int (*fast_try_reply)(const op_t *op, const rlock_reply_t *reply, int64_t *wait_ms);
  req_t *(*fast_release_req)(op_t *op, const bytes_t *latch, int64_t left, req_done_fn done);
  int (*fast_release_reply)(const op_t *op, const rlock_reply_t *reply, release_t *how, bool *notified);
} lock_up_t;
/* A try's answer (lock_kind_t.try_reply, lock_up_t.fast_try_reply), else an RLOCK_E code (< 0). */
enum { KIND_BUSY = 0, KIND_GRANTED = 1 };
extern const lock_up_t rlock__lock_up; /* lock.c's */
int rlock__client_create(rlock_client_t **out, const rlock_options_t *opts, const lock_up_t *up);

struct rlock_client {
  rlock_options_t opt;
  const conn_up_t *conn_up; /* what its connections call back (above) */
  const lock_up_t *lock_up; /* what it calls back in the lock layer (above) */
  char *s_url, *s_name, *s_ca, *s_cert, *s_key, *s_sni; /* owned copies */
  url_t url;
  char id[37];
  struct event_base *base;
  /* The resolver of host names (libevent's evdns on base: /etc/hosts and
   * /etc/resolv.conf, never blocking the loop), made on the first name that
   * is not a numeric address (resolve.c), freed by the I/O thread
   * once the resolutions it cancelled have called back. */
  struct evdns_base *dns;
  int dns_jobs;                   /* resolutions whose callback is still to come */
  _Atomic uint64_t dns_lookups;   /* names handed to evdns (tests read it) */
  pthread_t thread;
  SSL_CTX *ssl_ctx;
  /* submit queue: user threads -> I/O thread. A lock-free stack (push by CAS,
   * the I/O thread takes it all with one exchange and reverses it to FIFO);
   * the eventfd is written only by the push that found it empty. */
  _Atomic(op_t *) submitted;
  /* The I/O thread is in a pass that will take the submit stack again before
   * the loop sleeps (rlock__client_pass_begin/_end): a push that sees it set
   * skips the eventfd write. Cleared, then the stack re-checked (seq_cst on
   * both sides): a push either sees it set or is seen by the re-check. */
  atomic_bool awake;
  /* rlock_client_free began: calls are refused (stop_thread, client.c) */
  atomic_bool closing;
  /* then, once no fast call is under way: the I/O thread closes */
  atomic_bool stopping;
  /* Calls inside the client (rlock__client_enter/_leave): every public call
   * from its first touch of the client to its last, its wait and what it
   * does after its answer included. rlock_client_free frees nothing before
   * it is 0. */
  atomic_int inside;
  unsigned fork_gen; /* rlock__fork_generation() at creation: another = a forked child */
  int wake_fd;
  struct event *wake_ev;
  bool wake_et; /* wake_ev is edge-triggered (epoll): the eventfd is never read */
  /* first connection result, for rlock_client_new */
  pthread_mutex_t smu;
  pthread_cond_t scond;
  int start_status; /* 1 = pending */
  int64_t start_deadline; /* rlock_client_new's bound: now + connect_timeout_ms */
  char start_msg[256];
  struct event *start_ev; /* fires at start_deadline: the start fails then whatever is under way */
  char start_last[256];   /* the last reason a connection attempt gave while starting (I/O thread) */
  /* engine (I/O thread only) */
  const topology_ops_t *topo; /* the deployment: picks the connection of every request */
  void *topo_state;           /* the deployment's own state (Sentinel: sentinel.c; Cluster: node table, slot map) */
  bool sharded_pubsub;        /* lock channels use SSUBSCRIBE/SPUBLISH (Cluster, when the server has them) */
  conn_t cmd;
  pubsub_t ps;
  usercmd_t uc;
  watchdog_t wd;
  op_t *active; /* ops in progress (waiting, attempts), doubly linked */
  /* lock name -> the first of its active ops (then op->nnext): a release or
   * an undo looks at the ops on its own lock only, not at every active op */
  map_t by_name;
  bool by_name_broken; /* an op could not be indexed (out of memory): scan active */
  /* The index is kept only while two ops or more were active since the
   * active list was last empty (lock.c by_name_add): one op at a time (a
   * thread's lock+unlock) is found by scanning active, without a lookup. */
  bool by_name_on;
  map_t handoff; /* lock name -> deadline (ms, stored in the value pointer): let notified waiters go first */
  rlock__prng_t prng; /* request ids (I/O thread) */
  /* The latch TTL and the watchdog lease in decimal, set at creation (kinds/) */
  dec_cache_t dec_latch_ttl, dec_lease;
  struct event *del_timer; /* flushes queued latch DELs that found no write to ride on */
  char *delkeys; /* latch keys to delete in one DEL, back to back (kept between DELs) */
  size_t delkeys_n, delkeys_cap;
  size_t *dels;  /* where each key starts in delkeys (it ends where the next starts) */
  size_t ndels, capdels;
  int dels_inflight; /* DELs sent, answer not yet in */
  int undos_inflight; /* undos (and unlocks going on alone) not yet answered (lock.c) */
  /* The undos not answered yet (lock.c): no later try or unlock of the same
   * (owner, name) is written before each is answered; order_seq numbers the
   * undos and the requests handed to the topology, to check that order. */
  struct undo *undos;
  uint64_t order_seq;
  bool draining, shut; /* closing: waiting for the last DELs; engine shut down */
  struct event *linger; /* bounds the wait for the last DELs */
  bool batch_wrote;
  /* A pass is running (rlock__client_pass_begin/_end): it ends with
   * rlock__client_flush, so a counted command-connection write in it needs no
   * flush event (conn.c write_req). */
  bool in_pass;
  /* freed ops kept for reuse (lock.c rlock__op_alloc): allocated on the
   * callers' threads, freed on the I/O thread. A lock-free stack: pushed one
   * at a time (compare-and-swap), taken whole (exchange), so no pop ever
   * meets a recycled node (no ABA); nspare_ops bounds it (approximately). */
  _Atomic(op_t *) spare_ops;
  atomic_int nspare_ops;
  fast_t fast; /* the fast path (fast.c) */
  /* lock-lost callback */
  pthread_mutex_t cbmu;
  rlock_lost_cb lost_cb;
  void *lost_arg;
  /* stats (written on the I/O thread, read anywhere) */
  _Atomic uint64_t st[ST_COUNT];
};
static inline void stat_add(client_t *cl, int i, int64_t n) {
  atomic_fetch_add_explicit(&cl->st[i], (uint64_t)n, memory_order_relaxed);
}
void rlock__client_lost(client_t *cl, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason);
void rlock__client_queue_del(client_t *cl, const char *key, size_t len); /* latch clean-up (copied) */
/* latch_batch.c: the queued DELs leave now (the pass, shutdown); the delay timer's callback. */
#define RLOCK__DEL_BATCH 128
void rlock__latch_send_dels(client_t *cl);
void rlock__latch_timer_cb(evutil_socket_t fd, short what, void *arg);
void rlock__client_flush(client_t *cl); /* end of an I/O batch: send the queued DEL */
void rlock__client_write_batch(client_t *cl); /* the command connection's counted writes, now */
/* A read pass of the I/O thread (conn.c): begin sets cl->awake; end takes
 * what was submitted meanwhile (until the stack stays empty once awake is
 * cleared) and flushes. */
void rlock__client_pass_begin(client_t *cl);
void rlock__client_pass_end(client_t *cl);
/* Closing: ends the linger once no DEL and no undo is waiting for its answer. */
void rlock__client_linger_check(client_t *cl);
int64_t rlock__client_latch_ttl(const client_t *cl);
int rlock__client_submit(client_t *cl, op_t *op); /* user thread -> I/O thread */
/* A calling thread is about to touch the client (false: it is closing: touch
 * nothing); _leave when done. rlock_client_free waits for every _leave. */
bool rlock__client_enter(client_t *cl);
void rlock__client_leave(client_t *cl);
/* RLOCK_ESYS in a forked child, before anything is taken. */
int rlock__client_check_fork(const client_t *cl);
void rlock__client_wake(client_t *cl); /* writes the eventfd: the I/O thread takes a turn */
/* The one routing point: every request (scripts, queries, DELs, renewals,
 * SUBSCRIBE/UNSUBSCRIBE, user commands) goes through it. Records the slot
 * of key (NULL: any node) in r, asks the topology for the connection. */
conn_t *rlock__client_send(client_t *cl, const char *key, size_t klen, req_t *r); /* the connection it went to */
/* The command unlock scripts publish with: "spublish" under sharded pub/sub, else "publish". */
static inline const char *rlock__publish_cmd(const client_t *cl) { return cl->sharded_pubsub ? "spublish" : "publish"; }
static inline size_t rlock__publish_len(const client_t *cl) { return cl->sharded_pubsub ? 8 : 7; }
bool rlock__client_on_io_thread(const client_t *cl);
/* The client's evdns base, made on first use (I/O thread); NULL: out of memory. */
/* resolve.c: the addresses of c's node, then done(c, err, res) (at once for
 * a numeric address, else on a later pass). RLOCK_ENOMEM: nothing started. */
typedef void (*rlock__resolved_fn)(conn_t *c, int err, struct addrinfo *res);
int rlock__resolve_start(conn_t *c, const char *host, int port, rlock__resolved_fn done);
void rlock__resolve_cancel(conn_t *c); /* its callback will not run for c */
void rlock__resolve_close(client_t *cl); /* after the engine shut down: the resolver goes */
/* Test hooks: compiled only with RLOCK_TEST_HOOKS, which the tests' archive
 * (rlock_static_test) sets for the files of RLOCK_HOOKED_SOURCES
 * (lib/CMakeLists.txt); the shipped libraries have none (check_symbols.sh).
 * RLOCK__TEST_HOOK(h, args...) calls hook h if a test set it. */
enum { RLOCK__AT_ANSWERED = 1, RLOCK__AT_FAST_FELL_BACK, RLOCK__AT_REFUSED, RLOCK__AT_FAST_BEGIN, RLOCK__AT_FAST_COUNTED };
#ifdef RLOCK_TEST_HOOKS
/* tests/test_dns.c: the resolv.conf a client's evdns base reads when it is
 * made (NULL, the default: /etc/resolv.conf). Set before rlock_client_new. */
extern const char *rlock__test_resolv_conf;
/* tests/test_handoff.c: called by every pass of the I/O thread right after it
 * took the submit stack, before it clears cl->awake. */
extern void (*rlock__test_pass_hook)(client_t *cl);
/* tests/test_handoff.c: called by a submit between its push and its eventfd
 * write. */
extern void (*rlock__test_submit_hook)(client_t *cl);
/* tests/test_free_races.c: called on a calling thread of a sync call at
 * `where` (RLOCK__AT_...), to widen a race with rlock_client_free. */
extern void (*rlock__test_call_hook)(client_t *cl, int where);
#define RLOCK__TEST_HOOK(hook, ...) \
  do {                              \
    if (hook) hook(__VA_ARGS__);    \
  } while (0)
#else
#define RLOCK__TEST_HOOK(hook, ...) ((void)0)
#endif
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

/* Room for an owner id and its NUL: "<uuid>:owner-<20 digits>" (63) plus a
 * kind's suffix (the write lock's ":write"). */
#define RLOCK__OWNER_ID_ROOM 72
/* Owner id into buf (>= 64 bytes): "<client id>:<tid>" for RLOCK_OWNER_THREAD | tid,
 * "<client id>:owner-<n>" for explicit owners; returns the length. */
size_t rlock__client_owner_id(const client_t *cl, uint64_t owner, char *buf);

/* ------------------------------------------------------------ lock.c */
typedef enum {
  OP_ACQUIRE, OP_RELEASE, OP_FORCE, OP_IS_LOCKED, OP_IS_HELD, OP_COUNT, OP_TTL, OP_HOLDERS,
  OP_COMMAND, OP_VALID_UNTIL, OP_RELET, OP_NODE,
  OP_SEM_ACQUIRE, OP_SEM_CALL, OP_LATCH_AWAIT, /* semaphore.c */
  OP_KIND_CALL /* a kind's own query or setting (kind->query_req), answered by an integer */
} op_kind_t;

/* Blocking callers wait on this (sync over async): a futex word (SYNC_*),
 * set to SYNC_DONE (release) by the I/O thread once the result fields are
 * filled in (rlock__sync_signal). */
typedef struct sync_wait {
  _Atomic uint32_t done;
  int status;
  int64_t value;
  void *ptr; /* holders / reply */
  size_t n;
  char msg[256];
} sync_wait_t;

typedef struct lock_kind lock_kind_t; /* kinds/kind.h */

struct rlock_lock {
  client_t *cl;
  const lock_kind_t *kind; /* what the lock is: its scripts and their replies */
  char *name;
  size_t len;
  bytes_t channel; /* where its waiters listen (reentrant: redisson_lock__channel:{NAME}) */
  /* Set by the kind's init (kinds/common.c; else learnt by lock.c on the
   * I/O thread at first use), 0 until then: NAME's Cluster slot + 1, and 1
   * if NAME holds no brace (-1 if it does). */
  int slot1;
  int plain;
  /* The spin lock's backoff (kinds/spin.c; rlock_lock_new_spin): the first
   * wait, the cap, the multiplier. */
  int64_t backoff_initial_ms, backoff_max_ms;
  int backoff_multiplier;
};

#define OP_LATCH_ROOM 224
struct op {
  op_t *next;               /* submit queue link */
  op_t *aprev, *anext;      /* client->active link */
  op_t *nprev, *nnext;      /* the active ops on the same lock name (client->by_name) */
  void **islot;             /* in client->by_name: its entry's value (the first op), else NULL */
  op_kind_t kind;
  client_t *cl;
  rlock_lock_t *lock;
  uint64_t owner;
  char owner_id[RLOCK__OWNER_ID_ROOM];
  size_t owner_len;
  int64_t wait_ms, lease_ms, deadline; /* deadline -1: forever (user commands: INT64_MAX) */
  rlock_cancel_t *cancel;
  struct event *cancel_ev, *timer;
  rlock_cb cb;
  void *arg;
  sync_wait_t *sync;
  char reqid[33];  /* latch request id of the current attempt */
  int retries;     /* re-sends of the current attempt */
  int64_t sent_at; /* of the current attempt's first send (the id's birth) */
  bool id_written; /* a copy of the current request id may have reached the server */
  bool woken;      /* woken by a message (or a wake token) and not parked since */
  bool subscribed, cancelled, in_flight, finished;
  bool unchecked;  /* release: sent without the count check (others_in_flight) */
  bool held;       /* its request waits behind an unanswered undo of its (owner, name) (lock.c) */
  uint64_t wseq;   /* its current request's place in the client's order of writes (lock.c) */
  int polls;       /* acquire: busy answers so far (a polling kind's backoff) */
  sync_need_t sync_need; /* the current try's or release's WAIT (replica sync) */
  int sync_misses;       /* acquire: grants undone because the replicas did not acknowledge */
  int sync_acked;        /* ... and how many did, the last time */
  waiter_t w;
  /* OP_COMMAND: the command, or MULTI, the commands, EXEC (linked by next);
   * deadline is the call's, wait_ms its timeout (RLOCK_WAIT_FOREVER: none) */
  req_t *raw;
  /* OP_FORCE: delete the key whatever it holds (RLOCK_FORCE_ANY_TYPE) */
  bool any_type;
  /* fast.c: the request of the current id went out on the fast connection and
   * its answer was lost: the I/O thread re-sends it (same id) */
  bool fast_lost;
  bool fast_releasing; /* OP_RELEASE: fast.c's releasing mark of its (name, owner) is
                          the I/O thread's to remove when the op ends */
  /* fast.c: the current id's first copy went out without a latch (the
   * scripts' check-only form: a first acquire or an unlock; fast_count: the
   * owner's count it started from). A lost one is never sent the same way
   * again: an acquire is undone
   * (the undo's tombstone stops the copy, a count above fast_count is given
   * back), then tried with a fresh id; an unlock is re-sent with the re-send
   * mark (the count tells whether the first copy was applied). */
  bool unlatched;
  int64_t fast_count;
  int fslot; /* the lock name's fast slot counted busy at submit (-1: none) */
  /* acquire of a queueing kind (kind->queues): a try that may have queued
   * the owner was written and no undo has taken the entry out since */
  bool queued;
  int64_t token; /* acquire: what a granted try returns besides the hold (the fenced lock's token; 0: none) */
  /* semaphore.c: the permits (or delta, or count) of a semaphore or latch
   * call, its script (OP_SEM_CALL; 0: a GET), and the caller's callback
   * (one of them; they get op->lock as their handle) */
  int64_t permits;
  int script;
  rlock_semaphore_cb sem_cb;
  rlock_latch_cb latch_cb;
  /* OP_KIND_CALL: which of the kind's calls, its argument, and whether a
   * lost answer may be re-sent (a call that is not idempotent: no) */
  int call;
  int64_t call_arg;
  bool call_once;
  /* The latch key of the current request id (lock.c latch_key), built once
   * for the request, its re-sends and its DEL: latch_n bytes (0: not built;
   * a longer key than the room is built for each use). Last: rlock__op_alloc
   * zeroes the op up to latch only. */
  const char *latch_prefix;
  size_t latch_n;
  char latch[OP_LATCH_ROOM];
};

/* The MultiLock's final step: the hold of (l, owner) gets exactly lease_ms
 * (rlock__watchdog_relet); cb as rlock_lock_release_async's. */
int rlock__lock_relet_async(rlock_lock_t *l, uint64_t owner, int64_t lease_ms, rlock_cb cb, void *arg);
/* A zeroed op (any thread): a spare one of the client's, else calloc. NULL: no memory. */
op_t *rlock__op_alloc(client_t *cl);
void rlock__op_recycle(client_t *cl, op_t *op); /* its memory back: kept as a spare, or freed */
void rlock__op_spares_free(client_t *cl);       /* client destroyed */
void rlock__op_start(op_t *op);                       /* I/O thread: begin the operation */
/* OP_NODE (api.c, I/O thread): finishes op with the node its lock's commands go to now. */
void rlock__op_node(op_t *op);
int rlock__lock_node_here(rlock_lock_t *l, char **out, size_t *len); /* on l's client's I/O thread */
void rlock__handoff_clear(client_t *cl);
/* An unlock reached subscribers: this client's next acquire of name lets them go first. */
void rlock__handoff_mark(client_t *cl, const char *name, size_t len);
void rlock__op_fail_all(client_t *cl, int status);    /* closing: end every active op */
void rlock__op_index_free(client_t *cl);               /* closing, after rlock__op_fail_all */
void rlock__op_undo_on_close(client_t *cl);           /* closing: undo the tries that may be on the server */
void rlock__op_end_unstarted(op_t *op); /* closing: a submitted op ends (RLOCK_ECLOSED), undone if it must be */
void rlock__op_finish(op_t *op, int status, int64_t value, void *ptr, size_t n);
/* A request's answer came for op: false, go on; true, op had finished
 * (closing) and is freed now. */
bool rlock__op_orphan(op_t *op);

/* ------------------------------------------------------------ semaphore.c */
extern const lock_kind_t rlock__kind_semaphore; /* Redisson's RSemaphore: its channel only */
extern const lock_kind_t rlock__kind_latch;     /* Redisson's RCountDownLatch: its channel only */
void rlock__sem_start(op_t *op);         /* I/O thread: OP_SEM_ACQUIRE, OP_SEM_CALL, OP_LATCH_AWAIT */
void rlock__sem_undo_on_close(op_t *op); /* closing: a semaphore try in flight is given back */

struct rlock_cancel {
  _Atomic int triggered;
  int fd; /* eventfd, readable once triggered */
};

#endif
