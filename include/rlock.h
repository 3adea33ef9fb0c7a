/* rlock.h -- the one public header of librlock: distributed locks on Redis,
 * stored exactly as Redisson stores them (docs/wire-format.md lists every key,
 * channel and script).
 *
 * Conventions (libuv style):
 *   - every name is rlock_<noun>_<verb>; handles are opaque;
 *   - every call that can fail returns an int: 0 on success, a negative
 *     RLOCK_E* code on failure; rlock_strerror() turns it into text and
 *     rlock_last_error() gives the detailed message of the last failure
 *     seen by the calling thread;
 *   - durations are int64_t milliseconds;
 *   - a blocking ("sync") call and an event-driven ("async") call exist for
 *     every operation; both run on the same engine: the sync one submits the
 *     async one and waits for its completion.
 *
 * Threads: a client owns one I/O thread. Every call here may be made from any
 * thread (except rlock_client_free from inside a callback). Async callbacks
 * run on the client's I/O thread: they must not block and must not call sync
 * functions of the same client (that would deadlock; such calls fail with
 * RLOCK_EDEADLK instead).
 */
#ifndef RLOCK_H
#define RLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLOCK_VERSION_MAJOR 0
#define RLOCK_VERSION_MINOR 1
#define RLOCK_VERSION_PATCH 0
#define RLOCK_VERSION_STRING "0.1.0"

/* Version of the library actually linked, "MAJOR.MINOR.PATCH". */
const char *rlock_version(void);

/* ---------------------------------------------------------------- errors */

#define RLOCK_OK 0
#define RLOCK_EINVAL (-1)      /* invalid argument (empty name, bad duration, NULL...) */
#define RLOCK_ENOMEM (-2)      /* out of memory */
#define RLOCK_EURL (-3)        /* the Redis URL could not be parsed */
#define RLOCK_ECONNECT (-4)    /* could not connect to Redis (refused, unreachable, DNS) */
#define RLOCK_EAUTH (-5)       /* AUTH / SELECT / handshake rejected by the server */
#define RLOCK_ETLS (-6)        /* TLS setup or handshake failed (certificate, key, verify) */
#define RLOCK_ETIMEDOUT (-7)   /* the server did not answer within the command timeout */
#define RLOCK_ECONNLOST (-8)   /* the connection dropped while the request was in flight */
#define RLOCK_EBUSY (-9)       /* the lock was not acquired within the wait time */
#define RLOCK_ENOTHELD (-10)   /* unlock by an owner that does not hold the lock */
#define RLOCK_ECANCELED (-11)  /* the wait was cancelled through an rlock_cancel_t */
#define RLOCK_ESERVER (-12)    /* the server answered with an error reply */
#define RLOCK_EPROTO (-13)     /* the server's reply was malformed or unexpected */
#define RLOCK_ECLOSED (-14)    /* the client is closing or closed */
#define RLOCK_EDEADLK (-15)    /* a sync call made from the client's own I/O thread */
#define RLOCK_ESYS (-16)       /* a system call failed (thread, pipe, socket setup) */
#define RLOCK_ENOTLOCK (-17)   /* the key exists but is not a lock (force unlock refused) */

/* Short, static description of an error code ("timed out waiting for the lock"...). */
const char *rlock_strerror(int err);

/* Name of the error code ("RLOCK_EBUSY"...). */
const char *rlock_err_name(int err);

/* ---------------------------------------------------------------- options */

/* Client options. Always start from rlock_options_init(), which fills in the
 * defaults, then change what you need. Strings are copied by
 * rlock_client_new(); they need not outlive the call. */
typedef struct rlock_options {
  /* redis://[[user]:password@]host[:port][/db]
   * rediss://... (TLS)
   * unix:///path/to/redis.sock[?db=N&user=U&password=P]
   * Default "redis://127.0.0.1:6379". Percent-escapes are decoded in user
   * and password: write '/', '?', '#', '@' as %2F, %3F, %23, %40 there (and
   * '&' as %26 in a unix URL's password). Schemes are case-insensitive. */
  const char *url;
  const char *client_name;      /* CLIENT SETNAME on every connection; NULL: "rlock" */
  const char *tls_ca_file;      /* PEM bundle to verify the server; NULL: system default */
  const char *tls_cert_file;    /* client certificate (PEM), for tls-auth-clients */
  const char *tls_key_file;     /* client private key (PEM) */
  const char *tls_server_name;  /* name to verify and send as SNI; NULL: the URL's host */
  int tls_verify;               /* 1 (default): verify the server certificate; 0: don't */
  int64_t connect_timeout_ms;   /* TCP + TLS + handshake; default 3000 */
  int64_t command_timeout_ms;   /* per request; default 3000 */
  int64_t watchdog_timeout_ms;  /* lease of watchdog-renewed locks; default 30000 */
  int64_t reconnect_min_ms;     /* first reconnect delay; default 100 */
  int64_t reconnect_max_ms;     /* cap of the exponential backoff; default 5000 */
  int retry_attempts;           /* re-sends of idempotent requests (unlock, acquire)
                                   after a timeout or a dropped connection; default 3 */
} rlock_options_t;

void rlock_options_init(rlock_options_t *opts);

/* ---------------------------------------------------------------- client */

typedef struct rlock_client rlock_client_t;

/* Creates a client: parses the URL, starts the I/O thread and connects,
 * waiting at most connect_timeout_ms for the first connection (so that a bad
 * URL, an unreachable server or a wrong password is reported here, with
 * RLOCK_EURL / RLOCK_ECONNECT / RLOCK_EAUTH / RLOCK_ETLS; RLOCK_EPROTO when
 * the server answers in another protocol: not a Redis server). Afterwards the
 * client reconnects by itself whenever a connection drops. opts must not be
 * NULL (RLOCK_EINVAL). */
int rlock_client_new(rlock_client_t **out, const rlock_options_t *opts);

/* Stops the I/O thread and frees the client. Locks it still holds are NOT
 * released (their leases run out on the server); outstanding async requests
 * complete with RLOCK_ECLOSED. Must not be called from a callback (on the
 * I/O thread it cannot join itself: the call then does nothing). */
void rlock_client_free(rlock_client_t *client);

/* The client's random RFC 4122 id (36 characters), the first part of its
 * owner ids. Valid until the client is freed. */
const char *rlock_client_id(const rlock_client_t *client);

/* Detailed message of the last failure reported to the calling thread by any
 * rlock call (e.g. "connect 127.0.0.1:1: Connection refused"). Never NULL.
 * Passwords never appear in it. */
const char *rlock_last_error(void);

/* The lock-lost notification: called (on the I/O thread) when a hold of this
 * client ends without an unlock by its owner: a renewal found the hold gone
 * (deleted, force-unlocked, expired, server restarted), renewals failed until
 * the lease had certainly run out, a fixed lease ran out while held, or this
 * client force-unlocked it.
 * name is not NUL-terminated; use name_len. owner is the owner's integer
 * (thread id or the explicit owner). Replaces any earlier callback; NULL
 * removes it. */
typedef void (*rlock_lost_cb)(const char *name, size_t name_len, uint64_t owner, void *arg);
void rlock_client_on_lost(rlock_client_t *client, rlock_lost_cb cb, void *arg);

/* Counters of what the client sent, for tests and monitoring. */
typedef struct rlock_stats {
  uint64_t commands_sent;     /* every command written on the command connection */
  uint64_t writes;            /* passes of the I/O loop that wrote commands: each leaves in
                                 one socket write (pipelining: commands_sent / writes) */
  uint64_t scripts_sent;      /* EVAL/EVALSHA commands */
  uint64_t noscript_fallbacks;/* EVALSHA answered NOSCRIPT and re-sent as EVAL */
  uint64_t subscribes;        /* SUBSCRIBE commands */
  uint64_t unsubscribes;      /* UNSUBSCRIBE commands */
  uint64_t messages;          /* pub/sub messages received */
  uint64_t acquire_attempts;  /* acquire scripts sent (first tries and retries after a wake) */
  uint64_t renewals;          /* watchdog renewal script calls */
  uint64_t renewed_locks;     /* holds renewed by those calls */
  uint64_t reconnects;        /* connections re-established after a drop */
  uint64_t timeouts;          /* requests that hit the command timeout */
  uint64_t locks_lost;        /* lock-lost notifications */
  uint64_t held;              /* holds tracked right now (name, owner) */
} rlock_stats_t;
void rlock_client_stats(rlock_client_t *client, rlock_stats_t *out);

/* ---------------------------------------------------------------- cancellation */

/* A cancel token interrupts waits (rlock_lock_acquire): rlock_cancel_trigger
 * makes every wait using the token end with RLOCK_ECANCELED, now or when it
 * starts. Thread-safe; trigger is also safe from a signal handler. */
typedef struct rlock_cancel rlock_cancel_t;
int rlock_cancel_new(rlock_cancel_t **out);
void rlock_cancel_trigger(rlock_cancel_t *c);
int rlock_cancel_is_triggered(const rlock_cancel_t *c);
void rlock_cancel_free(rlock_cancel_t *c);

/* ---------------------------------------------------------------- lock */

/* A handle on one named reentrant lock (Redisson RLock). Cheap; holds no
 * Redis state itself: the hold belongs to the owner (thread), so several
 * threads may share one handle. The name may contain any bytes (length 1 to
 * RLOCK_NAME_MAX). */
typedef struct rlock_lock rlock_lock_t;

#define RLOCK_NAME_MAX (64 * 1024)

/* Owner of a hold. RLOCK_OWNER_SELF = the calling thread (Linux thread id),
 * as in Redisson. Any other value is used as given: an event-loop program can
 * use one integer per task, or unlock from another thread. The owner id stored
 * in Redis is "<client id>:<owner>". */
typedef uint64_t rlock_owner_t;
#define RLOCK_OWNER_SELF ((rlock_owner_t)0)

#define RLOCK_WAIT_FOREVER ((int64_t)-1)  /* wait_ms: wait until acquired */
#define RLOCK_LEASE_WATCHDOG ((int64_t)-1) /* lease_ms: watchdog-renewed lease */

int rlock_lock_new(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);
void rlock_lock_free(rlock_lock_t *lock);
/* The name as given (not NUL-terminated; see len). */
const char *rlock_lock_name(const rlock_lock_t *lock, size_t *len);

/* lock: wait until acquired. lease_ms > 0: the hold expires after lease_ms
 * unless released; RLOCK_LEASE_WATCHDOG: watchdog_timeout_ms, renewed every
 * third of it while the client lives. Reentrant: each acquire by the same
 * owner adds one to the hold count. */
int rlock_lock_lock(rlock_lock_t *lock, int64_t lease_ms);

/* try-lock: wait at most wait_ms (0: one attempt, no wait; RLOCK_WAIT_FOREVER:
 * like rlock_lock_lock) for the lock.
 * 0 = acquired; RLOCK_EBUSY = not acquired within wait_ms. */
int rlock_lock_trylock(rlock_lock_t *lock, int64_t wait_ms, int64_t lease_ms);

/* The general form: an explicit owner, RLOCK_WAIT_FOREVER or a bound, and an
 * optional cancel token (NULL: none). Waiting never polls: the waiter wakes on
 * the unlock message (pub/sub) or after the holder's remaining TTL. A try whose
 * answer was lost (timeout, dropped connection) is re-sent up to
 * retry_attempts times and counts once; if the client gives up, the hold it may
 * have taken is given back. While the server is unreachable a bounded wait ends
 * with RLOCK_ECONNECT; RLOCK_WAIT_FOREVER keeps waiting until it is back. */
int rlock_lock_acquire(rlock_lock_t *lock, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                       rlock_cancel_t *cancel);

/* Releases one hold of the calling thread (or owner). RLOCK_ENOTHELD when the
 * owner does not hold the lock (the lock is left as it is). When the count
 * reaches zero the key is deleted and one waiter is woken. Idempotent under
 * retries (request-id latch): a timeout or dropped connection is retried up to
 * retry_attempts times without ever releasing twice. */
int rlock_lock_unlock(rlock_lock_t *lock);
int rlock_lock_release(rlock_lock_t *lock, rlock_owner_t owner);

/* Deletes the lock whoever holds it and wakes waiters. *was_locked (may be
 * NULL) is set to 1 if it was locked, 0 if there was no such key. A key of
 * that name that is not a lock (another type, or a hash that is not owner ->
 * hold count) is left as it is: RLOCK_ENOTLOCK, the type in the message. */
int rlock_lock_force_unlock(rlock_lock_t *lock, int *was_locked);

/* The same with flags. RLOCK_FORCE_ANY_TYPE: delete the key whatever it holds
 * (*was_locked = 2 when it was not a lock). Unknown flags: RLOCK_EINVAL. */
#define RLOCK_FORCE_ANY_TYPE 1u
int rlock_lock_force_unlock_flags(rlock_lock_t *lock, unsigned flags, int *was_locked);

/* Queries. */
int rlock_lock_is_locked(rlock_lock_t *lock, int *out);
int rlock_lock_is_held(rlock_lock_t *lock, rlock_owner_t owner, int *out);
int rlock_lock_hold_count(rlock_lock_t *lock, rlock_owner_t owner, int64_t *out);
/* Remaining time to live in ms: -2 if not locked, -1 if locked without TTL. */
int rlock_lock_ttl(rlock_lock_t *lock, int64_t *out);

/* Local (no round trip): the CLOCK_MONOTONIC time in ms (see rlock_now_ms)
 * until which this client knows the owner's hold is valid: the send time of
 * the last successful acquire or renewal plus the lease. RLOCK_ENOTHELD if this
 * client does not track a hold of that owner (never held, released, lost). A
 * careful holder checks rlock_now_ms() < *out before touching the resource. */
int rlock_lock_valid_until(rlock_lock_t *lock, rlock_owner_t owner, int64_t *out);

/* Every holder of the lock, as stored in Redis. owner strings are
 * NUL-terminated copies ("<client id>:<thread>"). Free with rlock_holders_free. */
typedef struct rlock_holder {
  char *owner;
  int64_t count;
} rlock_holder_t;
int rlock_lock_holders(rlock_lock_t *lock, rlock_holder_t **out, size_t *n);
void rlock_holders_free(rlock_holder_t *holders, size_t n);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t rlock_now_ms(void);

/* ---------------------------------------------------------------- async */

/* Completion of an async call, on the I/O thread. status is 0 or RLOCK_E*;
 * value carries the result: acquire -> 0; release -> 1 if the lock was freed,
 * 0 if still held (count > 0); force unlock -> was locked (0/1, 2: not a
 * lock, deleted with RLOCK_FORCE_ANY_TYPE); is locked /
 * is held -> 0/1; hold count -> count; ttl -> ms. */
typedef void (*rlock_cb)(rlock_lock_t *lock, int status, int64_t value, void *arg);

/* Each returns 0 if the request was queued (cb will be called exactly once),
 * or an error (cb will not be called). RLOCK_OWNER_SELF means the thread that
 * makes the call. The lock handle must stay alive until cb has run. */
int rlock_lock_acquire_async(rlock_lock_t *lock, rlock_owner_t owner, int64_t wait_ms,
                             int64_t lease_ms, rlock_cancel_t *cancel, rlock_cb cb, void *arg);
int rlock_lock_release_async(rlock_lock_t *lock, rlock_owner_t owner, rlock_cb cb, void *arg);
int rlock_lock_force_unlock_async(rlock_lock_t *lock, rlock_cb cb, void *arg);
int rlock_lock_force_unlock_flags_async(rlock_lock_t *lock, unsigned flags, rlock_cb cb, void *arg);
int rlock_lock_is_locked_async(rlock_lock_t *lock, rlock_cb cb, void *arg);
int rlock_lock_is_held_async(rlock_lock_t *lock, rlock_owner_t owner, rlock_cb cb, void *arg);
int rlock_lock_hold_count_async(rlock_lock_t *lock, rlock_owner_t owner, rlock_cb cb, void *arg);
int rlock_lock_ttl_async(rlock_lock_t *lock, rlock_cb cb, void *arg);

/* ---------------------------------------------------------------- plain commands */

/* Any Redis command on the client's command connection (pipelined with the
 * lock traffic): for the data that the lock protects. */
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
  int64_t integer;               /* RLOCK_REPLY_INTEGER */
  char *str;                     /* STRING, STATUS, ERROR; NUL-terminated */
  size_t len;
  struct rlock_reply **element;  /* ARRAY */
  size_t elements;
} rlock_reply_t;

/* Sends argv (argc >= 1 arguments; argvlen may be NULL for NUL-terminated
 * strings) and waits for the reply. An error reply is returned as a reply of
 * type RLOCK_REPLY_ERROR with status 0. Free the reply with rlock_reply_free. */
int rlock_client_command(rlock_client_t *client, int argc, const char *const *argv,
                         const size_t *argvlen, rlock_reply_t **reply);
void rlock_reply_free(rlock_reply_t *reply);

/* ---------------------------------------------------------------- helpers */

/* Parses a duration "250", "250ms", "3s", "2m" into ms (no suffix = ms).
 * RLOCK_EINVAL for anything else, negative values or overflow. */
int rlock_duration_parse(const char *s, int64_t *out_ms);

/* Copies url into buf (cut to buflen, always NUL-terminated) with every byte
 * that may be a password replaced by "***", whatever url holds, well-formed or
 * not: the user info up to the last '@' after the user name's ':' (all of it
 * without a ':'), and every "password=" value. For messages. */
void rlock_url_redact(const char *url, char *buf, size_t buflen);

#ifdef __cplusplus
}
#endif

#endif /* RLOCK_H */
