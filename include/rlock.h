/* rlock.h -- the one public header of librlock: distributed locks on Redis,
 * stored exactly as Redisson stores them (docs/wire-format.md lists every key,
 * channel and script). Each call has a line or four here; its full contract
 * is in docs/api/ (one page per handle, docs/api/README.md).
 *
 * Conventions (libuv style): names are rlock_<noun>_<verb>; handles are
 * opaque; a call that can fail returns 0 or a negative RLOCK_E* code
 * (rlock_strerror, rlock_last_error); durations are int64_t milliseconds;
 * each operation has a blocking (sync) and an event-driven (async) form.
 *
 * Threads: a client owns one I/O thread. Any call may be made from any thread,
 * except rlock_client_free from a callback. Callbacks run on the I/O thread:
 * they must not block, and sync calls of the same client made there fail with
 * RLOCK_EDEADLK. */
#ifndef RLOCK_H
#define RLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks every call of this header: exported from the shared library (which
 * hides everything else). */
#if defined(__GNUC__) || defined(__clang__)
#define RLOCK_EXPORT __attribute__((visibility("default")))
#else
#define RLOCK_EXPORT
#endif

#define RLOCK_VERSION_MAJOR 0
#define RLOCK_VERSION_MINOR 1
#define RLOCK_VERSION_PATCH 0
#define RLOCK_VERSION_STRING "0.1.0"

/* Version of the library actually linked, "MAJOR.MINOR.PATCH". */
RLOCK_EXPORT const char *rlock_version(void);

/* ---------------------------------------------------------------- errors */

/* Every error code, once: X(NAME, value, message). The enum below and
 * rlock_strerror / rlock_err_name are made from this list (libuv's
 * UV_ERRNO_MAP). New codes go at the end with the next free value; values
 * never change (they are ABI). docs/api/errors.md says when each occurs. */
#define RLOCK_ERRNO_MAP(X)                                                     \
  X(OK, 0, "success")                                                          \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EURL, -3, "invalid Redis URL")                                             \
  X(ECONNECT, -4, "cannot connect to Redis")                                   \
  X(EAUTH, -5, "authentication or handshake rejected by Redis")                \
  X(ETLS, -6, "TLS setup or handshake failed")                                 \
  X(ETIMEDOUT, -7, "Redis did not answer in time")                             \
  X(ECONNLOST, -8, "connection to Redis lost while the request was in flight") \
  X(EBUSY, -9, "timed out waiting for the lock")                               \
  X(ENOTHELD, -10, "lock not held by this owner")                              \
  X(ECANCELED, -11, "wait cancelled")                                          \
  X(ESERVER, -12, "Redis replied with an error")                               \
  X(EPROTO, -13, "malformed or unexpected reply from Redis")                   \
  X(ECLOSED, -14, "client closed")                                             \
  X(EDEADLK, -15, "blocking call made from the client's I/O thread")           \
  X(ESYS, -16, "system call failed")                                           \
  X(ENOTLOCK, -17, "the key is not a lock")                                    \
  X(ENOSYNC, -18, "too few replicas acknowledged the lock (replica sync)")     \
  X(ENOTREENTRANT, -19, "the owner holds this non-reentrant lock already")     \
  X(ENOPERM, -20, "permission denied by the server's ACL")                     \
  X(EUPGRADE, -21, "a read lock cannot be upgraded to the write lock")

#define RLOCK__ERRNO_ENUM(name, value, text) RLOCK_##name = (value),
/* RLOCK_OK, RLOCK_EINVAL, ... RLOCK_EUPGRADE. */
enum rlock_errno { RLOCK_ERRNO_MAP(RLOCK__ERRNO_ENUM) };
#undef RLOCK__ERRNO_ENUM

/* Short, static description of an error code ("timed out waiting for the lock"...). */
RLOCK_EXPORT const char *rlock_strerror(int err);

/* Name of the error code ("RLOCK_EBUSY"...). */
RLOCK_EXPORT const char *rlock_err_name(int err);

/* ---------------------------------------------------------------- options */

/* How many replicas must acknowledge (WAIT) each acquire, unlock and renewal
 * (rlock_options_t.replica_sync). A miss undoes an acquire (RLOCK_ENOSYNC);
 * an unlock or renewal stands and is counted. docs/api/options.md. */
typedef enum rlock_replica_sync {
  RLOCK_REPLICA_SYNC_OFF = 0,
  RLOCK_REPLICA_SYNC_ONE,
  RLOCK_REPLICA_SYNC_MAJORITY,
  RLOCK_REPLICA_SYNC_ALL
} rlock_replica_sync_t;

/* Client options. Start from rlock_options_init() (the defaults), then change
 * what you need. Strings are copied by rlock_client_new(). Each field, the
 * URL forms and the Sentinel and Cluster behaviour: docs/api/options.md. */
typedef struct rlock_options {
  /* redis://, rediss:// (TLS), unix://, redis+sentinel://, rediss+sentinel://,
   * redis+cluster://, rediss+cluster://. Default "redis://127.0.0.1:6379". */
  const char *url;
  const char *client_name;         /* CLIENT SETNAME on every connection; NULL: "rlock" */
  const char *tls_ca_file;         /* PEM bundle to verify the server; NULL: system default */
  const char *tls_cert_file;       /* client certificate (PEM), for tls-auth-clients */
  const char *tls_key_file;        /* client private key (PEM) */
  const char *tls_server_name;     /* name to verify and send as SNI; NULL: the URL's host */
  int tls_verify;                  /* 1 (default): verify the server certificate; 0: don't */
  int64_t connect_timeout_ms;      /* name resolution + TCP + TLS + handshake; default 3000 */
  int64_t command_timeout_ms;      /* per request; default 3000 */
  int64_t watchdog_timeout_ms;     /* lease of watchdog-renewed locks; default 30000 */
  int64_t reconnect_min_ms;        /* first reconnect delay; default 100 */
  int64_t reconnect_max_ms;        /* cap of the exponential backoff; default 5000 */
  int retry_attempts;              /* re-sends of idempotent requests after a timeout or a
                                      dropped connection; default 3 */
  int64_t ping_interval_ms;        /* PING a connection silent this long; default 5000; 0: none */
  int dead_after_timeouts;         /* this many timeouts in a row = dead; default 5; 0: never */
  int64_t tcp_keepalive_ms;        /* TCP keepalive idle time; default 60000; 0: off */
  int replica_sync;                /* an rlock_replica_sync_t (above); default ONE */
  int64_t replica_sync_timeout_ms; /* WAIT's timeout; default 0: 1000 ms or half the
                                   command timeout if that is shorter */
  int fast_path;                   /* 1 (default): blocking calls may run on the calling
                                      thread (docs/internals/fast-path.md); 0: never */
  /* Room for new options without a change of size (ABI): left 0 by
   * rlock_options_init. A new field takes slots from here. */
  int64_t fair_waiter_timeout_ms; /* fair locks and semaphore waiters: a dead waiter's
                                   slot; default 10000 (docs/api/fair.md) */
  /* Act as an earlier client: its id (rlock_client_id, 36 characters of an
   * RFC 4122 UUID) instead of a random one, so that this client's owner n is
   * that client's owner n (e.g. `rlock release NAME TOKEN`). NULL: random.
   * Holds are checked on the server: a wrong id holds nothing. Malformed:
   * RLOCK_EINVAL. In a union with a reserved slot (same size everywhere). */
  union {
    const char *client_id;
    int64_t reserved_client_id_;
  };
  int64_t semaphore_fair_after_ms; /* semaphores: a waiter that has waited this long is
                                    served in order (FIFO); before, tries compete;
                                    default 2; 0: in order at once (docs/api/semaphore.md) */
  int64_t reserved_[13];
} rlock_options_t;

/* Fills opts with the defaults. */
RLOCK_EXPORT void rlock_options_init(rlock_options_t *opts);

/* ---------------------------------------------------------------- client */

typedef struct rlock_client rlock_client_t;

/* Creates a client: parses the URL, starts the I/O thread and waits at most
 * connect_timeout_ms for the first connection. 0, or RLOCK_EURL, RLOCK_ECONNECT,
 * RLOCK_EAUTH, RLOCK_ETLS, RLOCK_EPROTO, RLOCK_EINVAL. It reconnects by itself
 * afterwards. Not usable in a forked child (RLOCK_ESYS). */
RLOCK_EXPORT int rlock_client_new(rlock_client_t **out, const rlock_options_t *opts);

/* Stops the I/O thread and frees the client. Held locks are not released
 * (their leases run out); pending async calls complete with RLOCK_ECLOSED.
 * Not from a callback (it then does nothing). */
RLOCK_EXPORT void rlock_client_free(rlock_client_t *client);

/* The client's random RFC 4122 id (36 characters), the first part of its
 * owner ids. Valid until the client is freed. */
RLOCK_EXPORT const char *rlock_client_id(const rlock_client_t *client);

/* Detailed message of the last failure reported to the calling thread by any
 * rlock call (e.g. "connect 127.0.0.1:1: Connection refused"). Never NULL.
 * Passwords never appear in it. */
RLOCK_EXPORT const char *rlock_last_error(void);

/* Why a hold was lost (the lock-lost callback's reason). */
typedef enum rlock_lost_reason {
  RLOCK_LOST_EXPIRED = 1,    /* a fixed lease ran out while the hold was still taken */
  RLOCK_LOST_RENEWAL_FAILED, /* watchdog renewals failed until the lease had run out */
  RLOCK_LOST_DELETED,        /* a renewal found the hold gone from the server */
  RLOCK_LOST_FORCE_UNLOCKED, /* this client force-unlocked the lock */
  RLOCK_LOST_COUNT_MISMATCH  /* an unlock found another hold count on the server */
} rlock_lost_reason_t;

/* Short, static text of a reason ("fixed lease ran out"...); "unknown" for
 * other values. */
RLOCK_EXPORT const char *rlock_lost_reason_str(rlock_lost_reason_t reason);

/* The lock-lost notification, on the I/O thread: a hold of this client ended
 * without an unlock by its owner. name is not NUL-terminated. Replaces any
 * earlier callback; NULL removes it. */
typedef void (*rlock_lost_cb)(const char *name, size_t name_len, uint64_t owner, rlock_lost_reason_t reason, void *arg);
RLOCK_EXPORT void rlock_client_on_lost(rlock_client_t *client, rlock_lost_cb cb, void *arg);

/* Counters of what the client sent, for tests and monitoring. Every counter
 * once: X(NAME, field), in the struct's order. New counters go at the end.
 * docs/api/client.md says what each counts. */
#define RLOCK_STATS_MAP(X)                                                                                    \
  X(COMMANDS, commands_sent)                  /* commands written on the lock connections */                  \
  X(WRITES, writes)                           /* passes of the I/O loop that wrote (one socket write each) */ \
  X(SCRIPTS, scripts_sent)                    /* EVAL/EVALSHA commands */                                     \
  X(NOSCRIPT, noscript_fallbacks)             /* EVALSHA answered NOSCRIPT, re-sent as EVAL */                \
  X(SUBSCRIBES, subscribes)                   /* SUBSCRIBE commands */                                        \
  X(UNSUBSCRIBES, unsubscribes)               /* UNSUBSCRIBE commands */                                      \
  X(MESSAGES, messages)                       /* pub/sub messages received */                                 \
  X(ATTEMPTS, acquire_attempts)               /* acquire scripts sent (first tries and retries) */            \
  X(RENEWALS, renewals)                       /* renewal script calls (and reconnect checks) */               \
  X(RENEWED, renewed_locks)                   /* holds renewed by those calls */                              \
  X(RECONNECTS, reconnects)                   /* connections re-established after a drop */                   \
  X(TIMEOUTS, timeouts)                       /* requests that hit their timeout */                           \
  X(LOST, locks_lost)                         /* lock-lost notifications */                                   \
  X(HELD, held)                               /* holds tracked right now (name, owner) */                     \
  X(USER_COMMANDS, user_commands)             /* commands written on the user connection */                   \
  X(ACQUIRE_SYNC_MISSES, acquire_sync_misses) /* acquires undone: too few replicas acked */                   \
  X(UNLOCK_SYNC_MISSES, unlock_sync_misses)   /* unlocks too few replicas acknowledged */                     \
  X(RENEWAL_SYNC_MISSES, renewal_sync_misses) /* renewals too few replicas acknowledged */                    \
  X(FAST, fast_calls)                         /* blocking calls completed on the calling thread */            \
  X(HANDOFFS, handoffs_heard)                 /* fair-lock grants made by an unlock, taken from its message */

/* A client's counters (rlock_client_stats): one uint64_t per RLOCK_STATS_MAP row,
 * then room for new ones (ABI: the size stays 32 counters; a new row at the end
 * of the map takes one reserved slot). */
#define RLOCK__STATS_FIELD(name, field) uint64_t field;
#define RLOCK__STATS_ONE(name, field) +1
typedef struct rlock_stats {
  RLOCK_STATS_MAP(RLOCK__STATS_FIELD)
  uint64_t reserved_[32 - (0 RLOCK_STATS_MAP(RLOCK__STATS_ONE))];
} rlock_stats_t;
#undef RLOCK__STATS_ONE
#undef RLOCK__STATS_FIELD
/* Copies the client's counters into *out. Any thread; every field 0 while
 * rlock_client_free runs or in a forked child. */
RLOCK_EXPORT void rlock_client_stats(rlock_client_t *client, rlock_stats_t *out);

/* ---------------------------------------------------------------- cancellation */

/* A cancel token interrupts waits (rlock_lock_acquire): rlock_cancel_trigger
 * makes every wait using the token end with RLOCK_ECANCELED, now or when it
 * starts. Thread-safe; trigger is also safe from a signal handler. */
typedef struct rlock_cancel rlock_cancel_t;
RLOCK_EXPORT int rlock_cancel_new(rlock_cancel_t **out);
RLOCK_EXPORT void rlock_cancel_trigger(rlock_cancel_t *c);
RLOCK_EXPORT int rlock_cancel_is_triggered(const rlock_cancel_t *c);
RLOCK_EXPORT void rlock_cancel_free(rlock_cancel_t *c);

/* ---------------------------------------------------------------- lock */

/* A handle on one named reentrant lock (Redisson RLock). Cheap, no Redis
 * state: holds belong to owners, so threads may share one handle. Names are
 * any bytes, 1 to RLOCK_NAME_MAX long. docs/api/lock.md. */
typedef struct rlock_lock rlock_lock_t;

#define RLOCK_NAME_MAX (64 * 1024)

/* Owner of a hold: RLOCK_OWNER_SELF (the calling thread), RLOCK_OWNER_THREAD |
 * tid (that thread), or any n < 2^63 (an explicit owner). One owner's calls
 * on one lock go one after the other. */
typedef uint64_t rlock_owner_t;
#define RLOCK_OWNER_SELF ((rlock_owner_t)0)
#define RLOCK_OWNER_THREAD ((rlock_owner_t)1 << 63)

/* The longest duration accepted anywhere: 10^12 ms (about 31.7 years). Longer
 * values are RLOCK_EINVAL before anything is sent. */
#define RLOCK_DURATION_MAX ((int64_t)1000000000000)

#define RLOCK_WAIT_FOREVER ((int64_t)-1)   /* wait_ms: wait until acquired */
#define RLOCK_LEASE_WATCHDOG ((int64_t)-1) /* lease_ms: watchdog-renewed lease */

/* Makes and frees a lock handle (freeing releases nothing). */
RLOCK_EXPORT int rlock_lock_new(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);
RLOCK_EXPORT void rlock_lock_free(rlock_lock_t *lock);
/* The name as given (not NUL-terminated; see len). */
RLOCK_EXPORT const char *rlock_lock_name(const rlock_lock_t *lock, size_t *len);

/* Waits until the calling thread holds the lock. lease_ms > 0: a fixed lease;
 * RLOCK_LEASE_WATCHDOG: renewed while the client lives. Reentrant. */
RLOCK_EXPORT int rlock_lock_lock(rlock_lock_t *lock, int64_t lease_ms);

/* Waits at most wait_ms (0: one try) for the lock. 0 = acquired; RLOCK_EBUSY =
 * not acquired within wait_ms. */
RLOCK_EXPORT int rlock_lock_trylock(rlock_lock_t *lock, int64_t wait_ms, int64_t lease_ms);

/* The general form: an explicit owner, a wait bound or RLOCK_WAIT_FOREVER, and
 * an optional cancel token. Wakes on the unlock message, never polls; a lost
 * answer is re-sent and counts once. */
RLOCK_EXPORT int rlock_lock_acquire(rlock_lock_t *lock, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                    rlock_cancel_t *cancel);

/* Releases one hold of the calling thread (unlock) or of owner (release).
 * RLOCK_ENOTHELD if not held. Safe under re-sends; a failed unlock still
 * counts as done here: do not retry it. */
RLOCK_EXPORT int rlock_lock_unlock(rlock_lock_t *lock);
RLOCK_EXPORT int rlock_lock_release(rlock_lock_t *lock, rlock_owner_t owner);

/* Deletes the lock whoever holds it and wakes waiters. *was_locked (may be
 * NULL): 1 if it was locked, 0 if no such key. A key that is not a lock is
 * left alone: RLOCK_ENOTLOCK. */
RLOCK_EXPORT int rlock_lock_force_unlock(rlock_lock_t *lock, int *was_locked);

/* The same with flags. RLOCK_FORCE_ANY_TYPE: delete the key whatever it holds
 * (*was_locked = 2 when it was not a lock). Unknown flags: RLOCK_EINVAL. */
#define RLOCK_FORCE_ANY_TYPE 1u
RLOCK_EXPORT int rlock_lock_force_unlock_flags(rlock_lock_t *lock, unsigned flags, int *was_locked);

/* Queries (one round trip each). */
RLOCK_EXPORT int rlock_lock_is_locked(rlock_lock_t *lock, int *out);
RLOCK_EXPORT int rlock_lock_is_held(rlock_lock_t *lock, rlock_owner_t owner, int *out);
RLOCK_EXPORT int rlock_lock_hold_count(rlock_lock_t *lock, rlock_owner_t owner, int64_t *out);
/* Remaining time to live in ms: -2 if not locked, -1 if locked without TTL. */
RLOCK_EXPORT int rlock_lock_ttl(rlock_lock_t *lock, int64_t *out);

/* Local: the rlock_now_ms() time until which this client knows owner's hold
 * is valid. RLOCK_ENOTHELD if it tracks no such hold. */
RLOCK_EXPORT int rlock_lock_valid_until(rlock_lock_t *lock, rlock_owner_t owner, int64_t *out);

/* Local: the node this lock's commands go to now ("host:port" or a socket
 * path) into buf. RLOCK_EINVAL if buf is NULL or too small. */
RLOCK_EXPORT int rlock_lock_node(rlock_lock_t *lock, char *buf, size_t buflen);

/* Every holder of the lock, as stored in Redis. owner strings are
 * NUL-terminated copies ("<client id>:<thread>"). Free with rlock_holders_free. */
typedef struct rlock_holder {
  char *owner;
  int64_t count;
} rlock_holder_t;
RLOCK_EXPORT int rlock_lock_holders(rlock_lock_t *lock, rlock_holder_t **out, size_t *n);
RLOCK_EXPORT void rlock_holders_free(rlock_holder_t *holders, size_t n);

/* CLOCK_MONOTONIC in milliseconds. */
RLOCK_EXPORT int64_t rlock_now_ms(void);

/* ---------------------------------------------------------------- simple lock */

/* A handle on one named simple lock (SET NAME <token> NX PX <lease>: redis-py,
 * node-redlock, redsync). Every rlock_lock_* call works on it; it is not
 * reentrant. docs/api/simple-lock.md. */
RLOCK_EXPORT int rlock_lock_new_simple(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);

/* ---------------------------------------------------------------- lock family */

/* A non-reentrant lock (Redisson's getNonReentrantLock): RLock's layout, every
 * rlock_lock_* call works on it; the holder's second acquire fails at once
 * with RLOCK_ENOTREENTRANT, whatever the wait. Contract: docs/api/kinds.md. */
RLOCK_EXPORT int rlock_lock_new_nonreentrant(rlock_client_t *client, const void *name, size_t name_len,
                                             rlock_lock_t **out);

/* A fenced lock (Redisson's RFencedLock): RLock's hash plus the counter
 * "redisson_lock_token:{NAME}", bumped by every acquire (re-entries too).
 * rlock_lock_* calls work on it; an async acquire's value is its token. */
RLOCK_EXPORT int rlock_lock_new_fenced(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);
/* rlock_lock_acquire on a fenced lock that also returns the acquire's token
 * (> 0, issued in the acquire script; the lease is honoured). Calling thread. */
RLOCK_EXPORT int rlock_fenced_acquire(rlock_lock_t *lock, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                      rlock_cancel_t *cancel, int64_t *token);
/* The last token issued (GET of the counter; 0: never taken). Calling thread. */
RLOCK_EXPORT int rlock_fenced_token(rlock_lock_t *lock, int64_t *token);

/* A spin lock (Redisson's getSpinLock): RLock's hash, no pub/sub; a busy
 * acquire retries after a backoff: the n-th wait is min(initial x multiplier^n,
 * max) + a draw from [0, min(n, max)] ms (multiplier 1: constant, no jitter). NULL:
 * Redisson's defaults {1, 128, 2}. rlock_lock_* calls work on it. */
typedef struct rlock_backoff {
  int64_t initial_ms, max_ms;
  int multiplier;
} rlock_backoff_t;
RLOCK_EXPORT int rlock_lock_new_spin(rlock_client_t *client, const void *name, size_t name_len,
                                     const rlock_backoff_t *backoff, rlock_lock_t **out);

/* A read-write lock (Redisson's RReadWriteLock, same keys and channel): *read
 * and *write are lock handles for the rlock_lock_* calls; many readers or one
 * writer; a reader's write acquire fails at once (RLOCK_EUPGRADE); the writer
 * may take reads. Contract: docs/api/rwlock.md. Free both with rlock_lock_free. */
RLOCK_EXPORT int rlock_rwlock_new(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **read,
                                  rlock_lock_t **write);

/* ---------------------------------------------------------------- MultiLock */

/* Several locks taken as one, all or nothing, on one client or several. The
 * handles and their clients must outlive the MultiLock. Acquire returns 0 or
 * the first member's error, with every member released. docs/api/multilock.md. */
typedef struct rlock_multilock rlock_multilock_t;
RLOCK_EXPORT int rlock_multilock_new(rlock_multilock_t **out, rlock_lock_t *const *locks, size_t n);
RLOCK_EXPORT void rlock_multilock_free(rlock_multilock_t *multilock);
RLOCK_EXPORT int rlock_multilock_acquire(rlock_multilock_t *multilock, rlock_owner_t owner, int64_t wait_ms,
                                         int64_t lease_ms, rlock_cancel_t *cancel);
/* Releases every member in parallel and waits for their answers. The first
 * error (RLOCK_ENOTHELD: a member was not held) after all were tried. */
RLOCK_EXPORT int rlock_multilock_release(rlock_multilock_t *multilock, rlock_owner_t owner);
/* The earliest valid-until of the members (rlock_lock_valid_until). */
RLOCK_EXPORT int rlock_multilock_valid_until(rlock_multilock_t *multilock, rlock_owner_t owner, int64_t *out);
/* A second lost listener, on the member's I/O thread: once per acquire, when
 * a member is lost. Replaces any earlier one; NULL removes it. */
RLOCK_EXPORT void rlock_multilock_on_lost(rlock_multilock_t *multilock, rlock_lost_cb cb, void *arg);

/* ---------------------------------------------------------------- RedLock */

/* RedLock over n independent masters (1 to 64 URLs), one client each. Acquire
 * needs a majority within wait_ms (RLOCK_EBUSY, RLOCK_ECONNECT, RLOCK_ECANCELED).
 * Not from a callback: free joins the nodes' threads. docs/api/redlock.md. */
typedef struct rlock_redlock rlock_redlock_t;
#define RLOCK_REDLOCK_SIMPLE 1u /* the simple format (SET NX PX) on each node */
RLOCK_EXPORT int rlock_redlock_new(rlock_redlock_t **out, const rlock_options_t *opts, const char *const *urls,
                                   size_t n, const void *name, size_t name_len, unsigned flags);
RLOCK_EXPORT void rlock_redlock_free(rlock_redlock_t *redlock);
RLOCK_EXPORT int rlock_redlock_acquire(rlock_redlock_t *redlock, int64_t wait_ms, int64_t lease_ms,
                                       rlock_cancel_t *cancel, int64_t *valid_until);
/* Releases every node in parallel, waiting at most command_timeout_ms.
 * RLOCK_ENOTHELD if not held or lost. */
RLOCK_EXPORT int rlock_redlock_release(rlock_redlock_t *redlock);
RLOCK_EXPORT int rlock_redlock_valid_until(rlock_redlock_t *redlock, int64_t *out);
RLOCK_EXPORT void rlock_redlock_on_lost(rlock_redlock_t *redlock, rlock_lost_cb cb, void *arg);
/* The per-node timeout of an acquire round; 0: lease/100 clamped to 5..50 ms. */
RLOCK_EXPORT int rlock_redlock_set_node_timeout(rlock_redlock_t *redlock, int64_t ms);
RLOCK_EXPORT size_t rlock_redlock_nodes(const rlock_redlock_t *redlock);
/* Node i's view: *held 1 if this RedLock's hold counts on it; *ttl_ms the
 * lock's PTTL there (-2: no key). RLOCK_ECONNECT for a node not reached yet. */
RLOCK_EXPORT int rlock_redlock_node_status(rlock_redlock_t *redlock, size_t i, int *held, int64_t *ttl_ms);

/* ---------------------------------------------------------------- async */

/* Completion of an async call, on the I/O thread. status is 0 or RLOCK_E*;
 * value is the result (acquire: 0, a fenced lock: its token; release: 1 if
 * freed; force unlock: was locked; queries: 0/1, the count, the ttl).
 * docs/api/lock.md. */
typedef void (*rlock_cb)(rlock_lock_t *lock, int status, int64_t value, void *arg);

/* Each returns 0 if queued (cb then runs exactly once) or an error (cb does
 * not run). The lock handle must stay alive until cb has run. */
RLOCK_EXPORT int rlock_lock_acquire_async(rlock_lock_t *lock, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                          rlock_cancel_t *cancel, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_release_async(rlock_lock_t *lock, rlock_owner_t owner, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_force_unlock_async(rlock_lock_t *lock, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_force_unlock_flags_async(rlock_lock_t *lock, unsigned flags, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_is_locked_async(rlock_lock_t *lock, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_is_held_async(rlock_lock_t *lock, rlock_owner_t owner, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_hold_count_async(rlock_lock_t *lock, rlock_owner_t owner, rlock_cb cb, void *arg);
RLOCK_EXPORT int rlock_lock_ttl_async(rlock_lock_t *lock, rlock_cb cb, void *arg);

/* ---------------------------------------------------------------- plain commands */

/* A reply to rlock_client_command (hiredis-like). Free with rlock_reply_free. */
typedef enum rlock_reply_type {
  RLOCK_REPLY_NIL = 0,
  RLOCK_REPLY_STRING,
  RLOCK_REPLY_STATUS,
  RLOCK_REPLY_INTEGER,
  RLOCK_REPLY_ARRAY,
  RLOCK_REPLY_ERROR
} rlock_reply_type_t;

typedef struct rlock_reply {
  rlock_reply_type_t type;
  int64_t integer; /* RLOCK_REPLY_INTEGER */
  char *str;       /* STRING, STATUS, ERROR; NUL-terminated */
  size_t len;
  struct rlock_reply **element; /* ARRAY */
  size_t elements;
} rlock_reply_t;

/* Sends one Redis command on the client's user connection (not the locks')
 * and waits for its reply (an error reply is a reply: 0). Commands that would
 * change that connection's state are RLOCK_EINVAL. docs/api/commands.md. */
RLOCK_EXPORT int rlock_client_command(rlock_client_t *client, int argc, const char *const *argv, const size_t *argvlen,
                                      rlock_reply_t **reply);

/* The same with a timeout of its own: timeout_ms > 0, or RLOCK_WAIT_FOREVER. */
RLOCK_EXPORT int rlock_client_command_timeout(rlock_client_t *client, int64_t timeout_ms, int argc,
                                              const char *const *argv, const size_t *argvlen, rlock_reply_t **reply);

/* One command of a transaction (argvlen may be NULL). */
typedef struct rlock_command {
  int argc;
  const char *const *argv;
  const size_t *argvlen;
} rlock_command_t;

/* Runs cmds as one MULTI/EXEC transaction in one write; *reply is EXEC's reply. */
RLOCK_EXPORT int rlock_client_transaction(rlock_client_t *client, size_t ncmds, const rlock_command_t *cmds,
                                          rlock_reply_t **reply);

/* Frees a reply (NULL is fine). */
RLOCK_EXPORT void rlock_reply_free(rlock_reply_t *reply);

/* ---------------------------------------------------------------- helpers */

/* Parses a duration "250" (ms), "250ms", "1.5s", "2m", "1h", "1d", or a sum
 * of such parts ("1h30m") into ms. RLOCK_EINVAL for anything else, a part of
 * a ms, or overflow. */
RLOCK_EXPORT int rlock_duration_parse(const char *s, int64_t *out_ms);

/* Copies url into buf (cut to buflen, always NUL-terminated) with anything
 * that may be a password replaced by "***", well-formed or not. */
RLOCK_EXPORT void rlock_url_redact(const char *url, char *buf, size_t buflen);

/* ---------------------------------------------------------------- fair lock */

/* A fair lock (Redisson's RFairLock): waiters acquire in queue order; every
 * rlock_lock_* call works on it. docs/api/fair.md. */
RLOCK_EXPORT int rlock_lock_new_fair(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);
/* The same, not reentrant: a second acquire fails with RLOCK_ENOTREENTRANT. */
RLOCK_EXPORT int rlock_lock_new_fair_nonreentrant(rlock_client_t *client, const void *name, size_t name_len,
                                                  rlock_lock_t **out);
/* One queued waiter: its owner id and deadline (epoch ms; -1: none). */
typedef struct rlock_fair_waiter {
  char *owner;
  int64_t deadline_ms;
} rlock_fair_waiter_t;
/* The fair lock's queue, head first. Free with rlock_fair_waiters_free. */
RLOCK_EXPORT int rlock_lock_fair_waiters(rlock_lock_t *lock, rlock_fair_waiter_t **out, size_t *n);
RLOCK_EXPORT void rlock_fair_waiters_free(rlock_fair_waiter_t *waiters, size_t n);

/* ---------------------------------------------------------------- semaphore */

/* A handle on one named semaphore (Redisson's RSemaphore): the key NAME holds
 * the available permits (may be negative), the channel redisson_sc:{NAME}
 * carries the new count after each release. No owners: any process may
 * release. docs/api/semaphore.md. */
typedef struct rlock_semaphore rlock_semaphore_t;
RLOCK_EXPORT int rlock_semaphore_new(rlock_client_t *client, const void *name, size_t name_len,
                                     rlock_semaphore_t **out);
RLOCK_EXPORT void rlock_semaphore_free(rlock_semaphore_t *sem);
/* Takes permits (1 to RLOCK_PERMITS_MAX), waiting at most wait_ms (0: one
 * try; RLOCK_WAIT_FOREVER) for a release's message, never polling; rlock's
 * waiters are served in order once they waited semaphore_fair_after_ms
 * (Java's barge: docs/api/semaphore.md). 0 taken;
 * RLOCK_EBUSY not within wait_ms; RLOCK_ECANCELED. A lost answer is re-sent
 * and takes the permits once. */
#define RLOCK_PERMITS_MAX ((int64_t)999999999999999)
RLOCK_EXPORT int rlock_semaphore_acquire(rlock_semaphore_t *sem, int64_t permits, int64_t wait_ms,
                                         rlock_cancel_t *cancel);
RLOCK_EXPORT int rlock_semaphore_try_acquire(rlock_semaphore_t *sem, int64_t permits);
/* Gives permits back (1 to RLOCK_PERMITS_MAX); *available (may be NULL): the
 * count after it. A re-sent release counts once; a lost answer is re-sent
 * past retry_attempts while its request latch surely lives (11 s with the
 * defaults), so a dead connection is replaced before it gives up. */
RLOCK_EXPORT int rlock_semaphore_release(rlock_semaphore_t *sem, int64_t permits, int64_t *available);
/* Sets the permits if the semaphore has none yet: *set (may be NULL) 1, else 0. */
RLOCK_EXPORT int rlock_semaphore_try_set_permits(rlock_semaphore_t *sem, int64_t permits, int *set);
/* Adds delta permits (negative: takes them away); *available: the new count. */
RLOCK_EXPORT int rlock_semaphore_add_permits(rlock_semaphore_t *sem, int64_t delta, int64_t *available);
/* Takes every available permit; *drained: how many (0 if none). */
RLOCK_EXPORT int rlock_semaphore_drain(rlock_semaphore_t *sem, int64_t *drained);
/* The available permits (0 if the semaphore does not exist). */
RLOCK_EXPORT int rlock_semaphore_available(rlock_semaphore_t *sem, int64_t *out);
/* Async forms: cb on the I/O thread with the status and the value the sync
 * form returns through its pointer (acquire: 0). */
typedef void (*rlock_semaphore_cb)(rlock_semaphore_t *sem, int status, int64_t value, void *arg);
RLOCK_EXPORT int rlock_semaphore_acquire_async(rlock_semaphore_t *sem, int64_t permits, int64_t wait_ms,
                                               rlock_cancel_t *cancel, rlock_semaphore_cb cb, void *arg);
RLOCK_EXPORT int rlock_semaphore_release_async(rlock_semaphore_t *sem, int64_t permits, rlock_semaphore_cb cb,
                                               void *arg);

/* ---------------------------------------------------------------- count-down latch */

/* A handle on one named count-down latch (Redisson's RCountDownLatch): the key
 * NAME holds the count; the channel redisson_countdownlatch__channel__{NAME}
 * (braces always) carries 0 when it reaches zero; on a Cluster a NAME with
 * braces is refused (RLOCK_EINVAL: that channel is in another slot).
 * docs/api/latch.md. */
typedef struct rlock_latch rlock_latch_t;
RLOCK_EXPORT int rlock_latch_new(rlock_client_t *client, const void *name, size_t name_len, rlock_latch_t **out);
RLOCK_EXPORT void rlock_latch_free(rlock_latch_t *latch);
/* Sets the count (1 to RLOCK_PERMITS_MAX) if the latch has none: *set 1, else 0. */
RLOCK_EXPORT int rlock_latch_try_set_count(rlock_latch_t *latch, int64_t count, int *set);
/* Counts down by one; *left (may be NULL): the count after it (0: open). A
 * re-sent count-down counts once (re-sent as a semaphore release). */
RLOCK_EXPORT int rlock_latch_count_down(rlock_latch_t *latch, int64_t *left);
/* The count (0 if the latch does not exist: open). */
RLOCK_EXPORT int rlock_latch_get_count(rlock_latch_t *latch, int64_t *out);
/* Waits at most wait_ms (RLOCK_WAIT_FOREVER) until the count is 0, woken by
 * the message at zero. 0 open; RLOCK_EBUSY not within wait_ms; RLOCK_ECANCELED. */
RLOCK_EXPORT int rlock_latch_await(rlock_latch_t *latch, int64_t wait_ms, rlock_cancel_t *cancel);
typedef void (*rlock_latch_cb)(rlock_latch_t *latch, int status, int64_t value, void *arg);
RLOCK_EXPORT int rlock_latch_await_async(rlock_latch_t *latch, int64_t wait_ms, rlock_cancel_t *cancel,
                                         rlock_latch_cb cb, void *arg);
RLOCK_EXPORT int rlock_latch_count_down_async(rlock_latch_t *latch, rlock_latch_cb cb, void *arg);
/* ---------------------------------------------------------------- permit-expirable semaphore */

/* Redisson's RPermitExpirableSemaphore: N permits shared cluster-wide; each
 * acquire takes one permit with an id of its own and a lease, after which
 * the permit returns to the pool. A permit taken with RLOCK_LEASE_WATCHDOG
 * is renewed while this client lives and returns about one watchdog
 * timeout after it dies. docs/api/permit-semaphore.md. */
typedef struct rlock_permits rlock_permits_t;
#define RLOCK_PERMIT_ID_LEN 32 /* a permit id: 32 lowercase hex characters */
/* Completion of an async call: value as the sync call's result (acquire: 0,
 * release: 1, available: the count, add: the new available count, try set:
 * 1 if set). */
typedef void (*rlock_permits_cb)(rlock_permits_t *sem, int status, int64_t value, void *arg);
RLOCK_EXPORT int rlock_permits_new(rlock_client_t *client, const void *name, size_t name_len, rlock_permits_t **out);
RLOCK_EXPORT void rlock_permits_free(rlock_permits_t *sem);
/* Takes one permit, waiting at most wait_ms (0: one try; RLOCK_WAIT_FOREVER)
 * for a release or an expiry; lease_ms or RLOCK_LEASE_WATCHDOG. id gets the
 * permit's id (NUL-terminated). 0, RLOCK_EBUSY (none in time),
 * RLOCK_ECANCELED, or an error. */
RLOCK_EXPORT int rlock_permits_acquire(rlock_permits_t *sem, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                                       char id[RLOCK_PERMIT_ID_LEN + 1]);
/* One try: 0 or RLOCK_EBUSY. */
RLOCK_EXPORT int rlock_permits_try_acquire(rlock_permits_t *sem, int64_t lease_ms, char id[RLOCK_PERMIT_ID_LEN + 1]);
/* Gives the permit back. RLOCK_ENOTHELD if no permit has that id (never
 * taken, released, or expired). Any client may release any id. */
RLOCK_EXPORT int rlock_permits_release(rlock_permits_t *sem, const char *id);
/* The same, *released 1 or 0 in place of RLOCK_ENOTHELD. */
RLOCK_EXPORT int rlock_permits_try_release(rlock_permits_t *sem, const char *id, int *released);
/* Permits free now (expired ones reclaimed first); the total (free +
 * taken); the taken ones. A missing semaphore has 0. */
RLOCK_EXPORT int rlock_permits_available(rlock_permits_t *sem, int64_t *out);
RLOCK_EXPORT int rlock_permits_total(rlock_permits_t *sem, int64_t *out);
RLOCK_EXPORT int rlock_permits_acquired(rlock_permits_t *sem, int64_t *out);
/* The total becomes permits (Redisson's setPermits: the free count moves by
 * the difference and may go below 0 while more are taken). */
RLOCK_EXPORT int rlock_permits_set(rlock_permits_t *sem, int64_t permits);
/* Sets permits free only if the semaphore does not exist: *set 1, else 0. */
RLOCK_EXPORT int rlock_permits_try_set(rlock_permits_t *sem, int64_t permits, int *set);
/* Adds delta (may be negative) to the free count; *available (may be NULL) the new one. */
RLOCK_EXPORT int rlock_permits_add(rlock_permits_t *sem, int64_t delta, int64_t *available);
/* Deletes the semaphore and every permit; *deleted (may be NULL) 1 if it existed. */
RLOCK_EXPORT int rlock_permits_delete(rlock_permits_t *sem, int *deleted);
/* Async twins: 0 if queued (cb runs once) or an error (cb does not run).
 * acquire writes id before it returns; the permit is held once cb says 0. */
RLOCK_EXPORT int rlock_permits_acquire_async(rlock_permits_t *sem, int64_t wait_ms, int64_t lease_ms,
                                             rlock_cancel_t *cancel, char id[RLOCK_PERMIT_ID_LEN + 1],
                                             rlock_permits_cb cb, void *arg);
RLOCK_EXPORT int rlock_permits_release_async(rlock_permits_t *sem, const char *id, rlock_permits_cb cb, void *arg);
RLOCK_EXPORT int rlock_permits_available_async(rlock_permits_t *sem, rlock_permits_cb cb, void *arg);
RLOCK_EXPORT int rlock_permits_set_async(rlock_permits_t *sem, int64_t permits, rlock_permits_cb cb, void *arg);
RLOCK_EXPORT int rlock_permits_try_set_async(rlock_permits_t *sem, int64_t permits, rlock_permits_cb cb, void *arg);
RLOCK_EXPORT int rlock_permits_add_async(rlock_permits_t *sem, int64_t delta, rlock_permits_cb cb, void *arg);
/* The permit's valid-until (ms, rlock_now_ms's clock) as this client tracks
 * it: its lease's end, moved by each watchdog renewal. RLOCK_ENOTHELD if this
 * client holds no permit of that id (released, expired, lost, or another
 * client's). */
RLOCK_EXPORT int rlock_permits_valid_until(rlock_permits_t *sem, const char *id, int64_t *out);

/* ---------------------------------------------------------------- waiting for a lock to be free */

/* Waits at most wait_ms (0: one look; RLOCK_WAIT_FOREVER) until the lock's
 * key is gone (no holder, whatever the kind), without taking it: woken by the
 * unlock message, or at the holder's TTL (a lock that expires, a kind that
 * publishes nothing), never polling faster; a simple lock (released by other
 * libraries without a message) is also looked at as its acquirers poll, a
 * fair lock (Redisson's unlock tells only its next waiter) at least every
 * third of watchdog_timeout_ms.
 * 0 free; RLOCK_EBUSY still held at the bound; RLOCK_ECANCELED. Not for
 * semaphore, permit-semaphore or latch handles (RLOCK_EINVAL).
 * docs/api/lock.md. */
RLOCK_EXPORT int rlock_lock_await_free(rlock_lock_t *lock, int64_t wait_ms, rlock_cancel_t *cancel);

#ifdef __cplusplus
}
#endif

#endif /* RLOCK_H */
