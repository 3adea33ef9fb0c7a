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
#define RLOCK_ESYS (-16)       /* a system call failed (thread, pipe, socket setup), or a
                                  client used in a forked child (see rlock_client_new) */
#define RLOCK_ENOTLOCK (-17)   /* the key exists but is not a lock (force unlock refused) */
#define RLOCK_ENOSYNC (-18)    /* the replica-sync check failed: too few replicas acknowledged
                                  the acquire (WAIT); nothing is left held (replica_sync) */
#define RLOCK_EUPGRADE (-19)   /* a read-write lock's reader asked for the write lock (an
                                  upgrade): refused at once, nothing taken */

/* Short, static description of an error code ("timed out waiting for the lock"...). */
const char *rlock_strerror(int err);

/* Name of the error code ("RLOCK_EBUSY"...). */
const char *rlock_err_name(int err);

/* ---------------------------------------------------------------- options */

/* The replica-sync check (rlock_options_t.replica_sync): after each acquire,
 * unlock and renewal script, `WAIT <n> <replica_sync_timeout_ms>` goes in the
 * same write, where n is what the policy needs of the replicas the server
 * reported online (INFO replication's slaveN lines with state=online: one
 * still in its first sync acknowledges nothing and is not counted; read at
 * every (re)connect of the command connection and again every
 * ping_interval_ms, so replicas that
 * attach later, e.g. after a master restart the client reconnected to
 * first, are waited for from then on; any URL: a plain redis:// URL too).
 * A server that reports no replicas gets no WAIT (nor one whose ACL refuses
 * INFO: the count stays 0), unless its command connection saw replicas
 * before (one server and Sentinel: any master of the deployment since the
 * client was made; Cluster: that node) or Sentinel lists replicas for it:
 * then WAIT asks one, under every policy. A master cut off from its
 * replicas (a partition, or its replica promoted elsewhere) reports none:
 * zero acknowledgements then end in RLOCK_ENOSYNC, never in a lock taken
 * without WAIT. So a deployment that lost its replicas for good refuses
 * every acquire until one is back online, and each unlock and renewal
 * waits replica_sync_timeout_ms for an acknowledgement that does not come
 * (set OFF, or make a new client; Sentinel forgets replicas only on
 * SENTINEL RESET).
 *   OFF       no WAIT
 *   ONE       at least one replica must acknowledge (Redisson's behaviour:
 *             it fails only when none did); the default
 *   MAJORITY  more than half of the online replicas
 *   ALL       every online replica
 * Not met on an acquire: the acquire is undone (the undo is awaited, so no
 * hold is left that the caller was told it does not have) and tried again
 * with a fresh request id, up to retry_attempts times; then it ends with
 * RLOCK_ENOSYNC, the message saying how many replicas acknowledged of how
 * many ("replica sync: 0 of 1 replicas acknowledged within 1000 ms, policy
 * one needs 1"; "0 acknowledged ..., the master reports no replica online
 * but had some" for a master cut off from them; the message names the way out). A waiting acquire does
 * not wait on after that: the replicas, not the lock, are missing. The
 * replica count is also read again after a miss (a replica that left no
 * longer counts for majority and all; at least one is still asked).
 * Not met on an unlock: the unlock applied on the master and stands (it
 * returns 0: taking the lock back would be worse); the miss is counted in
 * rlock_stats_t.unlock_sync_misses. A failover before the replica
 * caught up can bring the hold back on the new master until its lease runs
 * out (no renewal: the client forgot it): a delay for the next owner, never
 * two owners. Not met on a renewal: the renewal stands, the miss is counted
 * in renewal_sync_misses.
 * What WAIT does not guarantee: an acknowledged write is in the replicas'
 * memory, not on their disk, and a failover may still promote a replica that
 * did not get it (Redis replication is asynchronous; WAIT only narrows the
 * window). A lock that must survive any single failure needs RedLock
 * (independent masters) and, for the resource, fencing tokens.
 * Cost: WAIT blocks the command connection until the acknowledgements come
 * or the timeout: with a slow replica every lock call of the client waits
 * behind it (at most replica_sync_timeout_ms each). A request's command
 * timeout is counted from when the WAITs queued ahead of it on that
 * connection end (replica_sync_timeout_ms more per WAIT ahead). */
typedef enum rlock_replica_sync {
  RLOCK_REPLICA_SYNC_OFF = 0,
  RLOCK_REPLICA_SYNC_ONE,
  RLOCK_REPLICA_SYNC_MAJORITY,
  RLOCK_REPLICA_SYNC_ALL
} rlock_replica_sync_t;

/* Client options. Always start from rlock_options_init(), which fills in the
 * defaults, then change what you need. Strings are copied by
 * rlock_client_new(); they need not outlive the call. */
typedef struct rlock_options {
  /* redis://[[user]:password@]host[:port][/db]
   * rediss://... (TLS)
   * unix:///path/to/redis.sock[?db=N&user=U&password=P]
   * redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[/db]
   *                  [?sentinel_password=P]
   * rediss+sentinel://... (TLS to the sentinels and to the master)
   * redis+cluster://[[user]:password@]host[:port][,host:port...]   (Redis Cluster)
   * rediss+cluster://... (Redis Cluster over TLS)
   * Default "redis://127.0.0.1:6379". Percent-escapes are decoded in user
   * and password: write '/', '?', '#', '@' as %2F, %3F, %23, %40 there (and
   * '&' as %26 in a unix URL's password and in sentinel_password). Schemes
   * are case-insensitive.
   * Sentinel: the hosts are sentinels (port 26379 by default), MASTER the
   * name they monitor; user, password and db are the master's, and
   * sentinel_password (if any) is sent to the sentinels with AUTH. Before
   * every connection attempt the sentinels are asked for the master in order
   * (SENTINEL get-master-addr-by-name and SENTINEL MASTER, for its
   * config-epoch: a sentinel user needs both; one that is down or silent is
   * skipped after at most 1 s; the one that answered is asked first from
   * then on), and the node must answer ROLE as a master (a refusal counts
   * against the sentinel that named it: every other one is asked before the
   * node is tried again). The client's master never moves backwards: it
   * follows an answer of a higher config epoch; one of a lower epoch (a
   * stale sentinel, cut off from the others) is checked with the next
   * sentinel and followed only if a majority of the URL's sentinels name
   * it (as after SENTINEL MONITOR, which starts again at epoch 0). The
   * client follows a failover at once on Sentinel's +switch-master event
   * (checked by its epoch), and asks again every second, each time the next
   * sentinel, in case the event was missed; connections to a node that is
   * no longer the master (or that answered READONLY: a refused lock command
   * is sent again, a user command ends with the READONLY error reply) are
   * reset, and waiters are resubscribed and woken there. A hold survives a failover
   * only if the promoted replica had it (the lock is as safe as Redis
   * replication: see docs/guarantees.md).
   * Cluster: the hosts are seeds, tried in order until one answers (each
   * within connect_timeout_ms; rlock_client_new fails with RLOCK_ECONNECT
   * only when every seed failed); every seed after the first needs its port;
   * no database (Cluster has db 0 only). The slot map comes from CLUSTER
   * SLOTS; each lock's keys go to the master of its slot (one command
   * connection per master), following MOVED (the map is refreshed, at most
   * once a second), ASK (ASKING + the command, map untouched) and
   * TRYAGAIN / CLUSTERDOWN (sent again after a backoff) within
   * command_timeout_ms, at most 5 MOVED/ASK in a row; a command still
   * refused at its timeout did not run: an acquire keeps trying within its
   * wait (a trylock with no wait ends with RLOCK_ECONNECT). Waiters listen with
   * sharded pub/sub (SSUBSCRIBE on the slot's master, unlocks SPUBLISH) when
   * the cluster has it (probed once with PUBSUB SHARDNUMSUB before
   * rlock_client_new returns, as Redisson does), else classic. User commands
   * (rlock_client_command) go to the master of their key's slot, following
   * MOVED and ASK (see rlock_client_command). */
  const char *url;
  const char *client_name;      /* CLIENT SETNAME on every connection; NULL: "rlock" */
  const char *tls_ca_file;      /* PEM bundle to verify the server; NULL: system default */
  const char *tls_cert_file;    /* client certificate (PEM), for tls-auth-clients */
  const char *tls_key_file;     /* client private key (PEM) */
  const char *tls_server_name;  /* name to verify and send as SNI; NULL: the URL's host */
  int tls_verify;               /* 1 (default): verify the server certificate; 0: don't */
  int64_t connect_timeout_ms;   /* name resolution + TCP + TLS + handshake; default 3000 */
  int64_t command_timeout_ms;   /* per request; default 3000 */
  int64_t watchdog_timeout_ms;  /* lease of watchdog-renewed locks; default 30000 */
  int64_t reconnect_min_ms;     /* first reconnect delay; default 100 */
  int64_t reconnect_max_ms;     /* cap of the exponential backoff; default 5000 */
                                /* (every duration: at most RLOCK_DURATION_MAX, else
                                   rlock_client_new fails with RLOCK_EINVAL) */
  int retry_attempts;           /* re-sends of idempotent requests (unlock, acquire)
                                   after a timeout or a dropped connection (an unlock
                                   also when it was never written); default 3 (an
                                   unlock whose re-sends are all lost then goes on in
                                   the background: see rlock_lock_unlock; 0: none). A
                                   command the server refused before running it
                                   (LOADING, MASTERDOWN, BUSY) is sent again after a
                                   backoff within its command timeout */
  /* Liveness: a connection can die without a word (a NAT or load balancer
   * that forgets the flow, a peer that vanished); rlock notices and replaces
   * it: reconnect; on the subscriber connection every channel is subscribed
   * again and every waiter tries again. Requests in flight on it end with
   * RLOCK_ECONNLOST (acquire and unlock are re-sent, counting once). A server
   * that stalls past these bounds (long DEBUG SLEEP, CLIENT PAUSE) looks the
   * same and gets the same treatment. */
  int64_t ping_interval_ms;     /* a connection on which nothing arrived for this long
                                   gets a PING; no answer within command_timeout_ms =
                                   dead. Default 5000; 0: no PING */
  int dead_after_timeouts;      /* this many command timeouts in a row (nothing read
                                   in between; requests timing out together count
                                   once) = dead. Default 5; 0: never */
  int64_t tcp_keepalive_ms;     /* TCP keepalive: probes after this much idle time,
                                   then every third of it, 3 probes (whole seconds,
                                   rounded up). Default 60000; 0: off */
  int replica_sync;             /* an rlock_replica_sync_t (above); default ONE */
  int64_t replica_sync_timeout_ms; /* WAIT's timeout: 1 ms to less than command_timeout_ms
                                   (a PING queued behind a WAIT must still be answered in
                                   time); default 0: 1000 ms, or half the command timeout
                                   if that is shorter */
  int fast_path;                /* 1 (default): a blocking lock or unlock may run on the
                                   calling thread, on the client's fast connection (one per
                                   client, used by one thread at a time) when the client is
                                   otherwise idle for that lock: no hand-off to the I/O
                                   thread (docs/architecture.md, "The fast path"); 0: every
                                   call goes through the I/O thread. It relies on the owner
                                   rule below (one owner's calls one after the other): a call
                                   for thread T's owner made by another thread while T's own
                                   lock or unlock is on its way may count holds wrongly (the
                                   count check then drops the owner's holds and reports a loss) */
} rlock_options_t;

void rlock_options_init(rlock_options_t *opts);

/* ---------------------------------------------------------------- client */

typedef struct rlock_client rlock_client_t;

/* Creates a client: parses the URL, starts the I/O thread and connects,
 * waiting at most connect_timeout_ms for the first connection (so that a bad
 * URL, an unreachable server or a wrong password is reported here, with
 * RLOCK_EURL / RLOCK_ECONNECT / RLOCK_EAUTH / RLOCK_ETLS; RLOCK_EPROTO when
 * the server answers in another protocol: not a Redis server). Sentinel URLs:
 * RLOCK_ECONNECT also when no sentinel answered for the master (each one
 * down, silent, or not knowing MASTER) or when the node they name is still
 * not a master (ROLE) at connect_timeout_ms: a refusal is asked again (with
 * the reconnect backoff, cut short at connect_timeout_ms; Sentinel first)
 * until then, since mid-failover
 * Sentinel can name a replica whose promotion is on its way. Host names (the
 * URL's, and those Sentinel or a Cluster name) are resolved without blocking
 * the client's I/O thread (/etc/hosts, then the nameservers of
 * /etc/resolv.conf; not the other sources of nsswitch.conf: mDNS .local
 * names, NIS or LDAP host tables: give those as addresses or put them in
 * /etc/hosts); one that cannot be resolved, or not within
 * connect_timeout_ms, is a failed connection attempt (RLOCK_ECONNECT,
 * "cannot resolve HOST: ..."). Afterwards the
 * client reconnects by itself whenever a connection drops or is found dead
 * (see the liveness options). opts must not be NULL (RLOCK_EINVAL).
 * A client belongs to the process that created it: its descriptors are
 * close-on-exec (a program the application execs inherits none), and in a
 * child created by fork() every call on it fails at once with RLOCK_ESYS
 * ("client used in a forked child: create a new client after fork"), before
 * it takes any mutex (one another thread of the parent held at the fork
 * would stay locked in the child), while rlock_client_free there does
 * nothing (the parent's connections are left alone). So do the calls on a
 * MultiLock over such a client's locks and on a RedLock made before the fork
 * (RLOCK_ESYS, a message naming the forked child; rlock_client_on_lost,
 * rlock_multilock_on_lost and rlock_redlock_on_lost do nothing but set it;
 * rlock_multilock_free and rlock_redlock_free do nothing). Create a new
 * client (MultiLock, RedLock) in the child. */
int rlock_client_new(rlock_client_t **out, const rlock_options_t *opts);

/* Stops the I/O thread and frees the client. Locks it still holds are NOT
 * released (their leases run out on the server); outstanding async requests
 * complete with RLOCK_ECLOSED. An acquire still waiting for its answer gets
 * an undo sent behind it, so the hold it may take on the server is given
 * back rather than left to nobody for its lease; so does a blocking acquire
 * on the fast path (rlock_options_t.fast_path) still waiting for its answer
 * after min(command_timeout_ms, 500 ms): its connection is cut and the call
 * returns RLOCK_ECLOSED (one answered before returns its result: a hold it
 * took is the caller's, as any held lock). Calls made by other threads
 * while it runs either complete or return RLOCK_ECLOSED; it returns only
 * once each has stopped touching the client (each call on this client: a
 * MultiLock's calls span several, and must not run across the free of a
 * member's client: see rlock_multilock_new). The request-id latch keys
 * of acquires and unlocks that completed are deleted before it returns (one
 * DEL; the DEL and the undos are awaited at most min(command_timeout_ms,
 * 500 ms), plus replica_sync_timeout_ms for each replica-sync WAIT written on
 * the command connection: an undo sent behind a try's WAIT runs only once
 * that WAIT and every WAIT before it end; past that the latches expire by
 * their TTL).
 * Must not be called from a callback (on the I/O thread it cannot join
 * itself: the call then does nothing). */
void rlock_client_free(rlock_client_t *client);

/* The client's random RFC 4122 id (36 characters), the first part of its
 * owner ids. Valid until the client is freed. */
const char *rlock_client_id(const rlock_client_t *client);

/* Detailed message of the last failure reported to the calling thread by any
 * rlock call (e.g. "connect 127.0.0.1:1: Connection refused"). Never NULL.
 * Passwords never appear in it. */
const char *rlock_last_error(void);

/* Why a hold was lost (the lock-lost callback's reason). */
typedef enum rlock_lost_reason {
  RLOCK_LOST_EXPIRED = 1,     /* a fixed lease ran out while the hold was still taken */
  RLOCK_LOST_RENEWAL_FAILED,  /* watchdog renewals failed (server unreachable) until the lease
                                 had certainly run out */
  RLOCK_LOST_DELETED,         /* a renewal found the hold gone: the key was deleted, expired on
                                 the server, force-unlocked by someone else, or the server lost
                                 its data (restart) */
  RLOCK_LOST_FORCE_UNLOCKED,  /* this client force-unlocked the lock (rlock_lock_force_unlock) */
  RLOCK_LOST_COUNT_MISMATCH   /* an unlock found a hold count on the server other than the one
                                 this client took: the owner's field was removed (waiters woken)
                                 and the hold is no longer tracked */
} rlock_lost_reason_t;

/* Short, static text of a reason ("fixed lease ran out"...); "unknown" for
 * other values. */
const char *rlock_lost_reason_str(rlock_lost_reason_t reason);

/* The lock-lost notification: called (on the I/O thread) when a hold of this
 * client ends without an unlock by its owner, with the reason.
 * name is not NUL-terminated; use name_len. owner is the hold's owner in the
 * rlock_owner_t encoding: RLOCK_OWNER_THREAD | thread id for holds taken with
 * RLOCK_OWNER_SELF, else the explicit owner (it can be passed back to
 * rlock_lock_release). Replaces any earlier callback; NULL removes it. */
typedef void (*rlock_lost_cb)(const char *name, size_t name_len, uint64_t owner,
                              rlock_lost_reason_t reason, void *arg);
void rlock_client_on_lost(rlock_client_t *client, rlock_lost_cb cb, void *arg);

/* Counters of what the client sent, for tests and monitoring. */
typedef struct rlock_stats {
  uint64_t commands_sent;     /* every command written on the lock connections (command and
                                 subscriber); user commands and liveness PINGs are not counted */
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
  uint64_t reconnects;        /* connections re-established after a drop (any of the three;
                                 not the connections to sentinels) */
  uint64_t timeouts;          /* requests that hit their timeout (user commands included,
                                 liveness PINGs not) */
  uint64_t locks_lost;        /* lock-lost notifications */
  uint64_t held;              /* holds tracked right now (name, owner) */
  uint64_t user_commands;     /* commands written on the user connection (rlock_client_command;
                                 a transaction of n commands counts n + 2: MULTI, EXEC) */
  uint64_t acquire_sync_misses; /* acquires granted but undone: too few replicas acknowledged */
  uint64_t unlock_sync_misses;  /* unlocks applied on the master that too few replicas
                                   acknowledged (the unlock stands) */
  uint64_t renewal_sync_misses; /* renewal calls applied on the master that too few replicas
                                   acknowledged (the renewal stands) */
  uint64_t fast_calls;          /* blocking locks and unlocks completed on the calling thread
                                   (the fast path: rlock_options_t.fast_path) */
} rlock_stats_t;
/* Called while rlock_client_free runs on another thread, or in a forked
 * child: every field 0 (the client may be gone the moment the call is
 * refused; a child takes none of the parent's mutexes). */
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
 * RLOCK_NAME_MAX). Every key of the lock hashes to the Cluster slot of the
 * name: Redisson's key and channel names where they do (any name without
 * braces or with a well-formed {tag}), a documented variant for the others
 * (docs/architecture.md, "Key names and slots"). */
typedef struct rlock_lock rlock_lock_t;

#define RLOCK_NAME_MAX (64 * 1024)

/* Owner of a hold. Two kinds that never mix (stored differently in Redis):
 *   RLOCK_OWNER_SELF (0)         the calling thread, as in Redisson;
 *   RLOCK_OWNER_THREAD | tid     the thread with Linux thread id tid (what SELF
 *                                means in that thread: lets another thread
 *                                release or query a thread's hold);
 *   any other value n < 2^63     an explicit owner: an event-loop program can
 *                                use one integer per task, or unlock from
 *                                another thread. Explicit owner 1234 and thread
 *                                1234 are different owners.
 * The owner id stored in Redis is "<client id>:<thread id>" for threads
 * (Redisson's form) and "<client id>:owner-<n>" for explicit owners.
 * One owner's calls on one lock are expected one after the other (as a
 * thread makes them), not concurrently. */
typedef uint64_t rlock_owner_t;
#define RLOCK_OWNER_SELF ((rlock_owner_t)0)
#define RLOCK_OWNER_THREAD ((rlock_owner_t)1 << 63)

/* The longest duration accepted anywhere (lease, wait, watchdog and other
 * timeouts): 10^12 ms, about 31.7 years. Longer values are refused with
 * RLOCK_EINVAL before anything is sent (Redis refuses TTLs that overflow its
 * clock, and the scripts refuse them too before they write anything). */
#define RLOCK_DURATION_MAX ((int64_t)1000000000000)

#define RLOCK_WAIT_FOREVER ((int64_t)-1)  /* wait_ms: wait until acquired */
#define RLOCK_LEASE_WATCHDOG ((int64_t)-1) /* lease_ms: watchdog-renewed lease */

int rlock_lock_new(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);
void rlock_lock_free(rlock_lock_t *lock);
/* The name as given (not NUL-terminated; see len). */
const char *rlock_lock_name(const rlock_lock_t *lock, size_t *len);

/* lock: wait until acquired. lease_ms > 0: the hold expires after lease_ms
 * unless released; RLOCK_LEASE_WATCHDOG: watchdog_timeout_ms, renewed every
 * third of it while the client lives. Reentrant: each acquire by the same
 * owner adds one to the hold count, which this client also keeps.
 * Leases of one owner's nested holds never shorten each other: a re-entry
 * sets the key's TTL only if it is longer than the TTL left; the lock is
 * renewed while any of the owner's holds asked for the watchdog; an unlock
 * that leaves holds sets the TTL to what the remaining holds still need (a
 * fixed lease counts from its own acquire). Durations: 1 to
 * RLOCK_DURATION_MAX ms. */
int rlock_lock_lock(rlock_lock_t *lock, int64_t lease_ms);

/* try-lock: wait at most wait_ms (0: one attempt, no wait; RLOCK_WAIT_FOREVER:
 * like rlock_lock_lock; at most RLOCK_DURATION_MAX) for the lock.
 * 0 = acquired; RLOCK_EBUSY = not acquired within wait_ms. */
int rlock_lock_trylock(rlock_lock_t *lock, int64_t wait_ms, int64_t lease_ms);

/* The general form: an explicit owner, RLOCK_WAIT_FOREVER or a bound, and an
 * optional cancel token (NULL: none). Waiting never polls: the waiter wakes on
 * the unlock message (pub/sub) or after the holder's remaining TTL. A try whose
 * answer was lost (timeout, dropped connection) is re-sent up to
 * retry_attempts times and counts once; if the client gives up, the hold it may
 * have taken is given back. A request id is never re-sent once its latch may
 * have expired on the server (an outage longer than the latch TTL,
 * max(10 s, command_timeout_ms x (retry_attempts + 2))): the hold it may have
 * taken is given back first and the try goes on with a fresh id. While the
 * server is unreachable a bounded wait ends with RLOCK_ECONNECT;
 * RLOCK_WAIT_FOREVER keeps waiting until it is back. A waiter woken by an
 * unlock message that then ends without the lock (deadline, cancel, error)
 * passes the wake-up on to the next waiter of this client. */
int rlock_lock_acquire(rlock_lock_t *lock, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                       rlock_cancel_t *cancel);

/* Releases one hold of the calling thread (or owner). RLOCK_ENOTHELD when the
 * owner does not hold the lock (the lock is left as it is). When the count
 * reaches zero the key is deleted and one waiter is woken. Idempotent under
 * retries (request-id latch): a timeout, a dropped connection, or an unlock
 * that was not written or did not run within the command timeout (server
 * unreachable, LOADING, BUSY, MASTERDOWN, Cluster TRYAGAIN) is sent again up
 * to retry_attempts times without ever releasing twice. When every answer was
 * lost the call fails, and (retry_attempts > 0) the same unlock goes on being
 * sent in the background until it is answered: a copy of it still on its way
 * could otherwise land after this owner's next acquire of the lock and take
 * that hold away; the owner's next acquire or unlock of the lock waits for
 * that answer.
 * An unlock that fails (any error but RLOCK_ENOTHELD: e.g. RLOCK_ETIMEDOUT,
 * RLOCK_ECONNECT while the server is unreachable) still counts as done in
 * this client: that hold is no longer tracked, and when it was the owner's
 * last one, renewal stops and the server frees the lock when its lease runs
 * out (at most watchdog_timeout_ms for watchdog holds). So a caller that
 * ignores an unlock error never leaks the lock; do not retry a failed unlock
 * (a retry releases one more hold, or answers RLOCK_ENOTHELD). If the server
 * counts a different number of holds than this client took (see
 * RLOCK_LOST_COUNT_MISMATCH), the unlock removes the owner's field, frees
 * the lock and reports the loss through the lock-lost callback. That check
 * is skipped while another acquire or unlock of the same owner on that lock
 * is in flight (async calls, an explicit owner shared by threads): the
 * server may have applied it already. */
int rlock_lock_unlock(rlock_lock_t *lock);
int rlock_lock_release(rlock_lock_t *lock, rlock_owner_t owner);

/* Deletes the lock whoever holds it and wakes waiters. *was_locked (may be
 * NULL) is set to 1 if it was locked, 0 if there was no such key. A key of
 * that name that is not a lock (another type, or a hash that is not owner id
 * "<uuid>:..." -> positive hold count) is left as it is: RLOCK_ENOTLOCK, the
 * type in the message. */
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

/* Local (no round trip): the node this lock's commands go to now, into buf
 * (NUL-terminated): "host:port" ("[addr]:port" for IPv6), or the socket's
 * path for a unix:// URL. One server: the URL's. Sentinel: the master the
 * client uses, as the sentinels named it (RLOCK_ECONNECT while none has
 * named one yet). Cluster: the master of the name's slot in the client's
 * slot map (the seed the client's control connection uses while that slot's
 * owner is not known yet, e.g. before any command). Right after a lock call
 * on this handle answered, that is the node that answered it, unless a
 * failover or a slot move came in between. RLOCK_EINVAL if buf is NULL,
 * buflen is 0 or too small (the message says how many bytes it needs; 300
 * is always enough for an IP address). */
int rlock_lock_node(rlock_lock_t *lock, char *buf, size_t buflen);

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

/* ---------------------------------------------------------------- simple lock */

/* A handle on one named simple lock: SET NAME <token> NX PX <lease>, the
 * layout of redis-py's Lock, node-redlock and redsync, so C, Python, Node and
 * Go programs share one lock (docs/wire-format.md, "The simple lock"). Every
 * rlock_lock_* call works on it, with these differences:
 *   - not reentrant: an acquire by the owner that holds it already fails at
 *     once with RLOCK_EBUSY ("this owner holds the lock already (a simple
 *     lock is not reentrant)"), whatever the wait: never a deadlock;
 *   - the token stored is the owner id ("<client id>:<thread id>" or
 *     "<client id>:owner-<n>"); a release deletes the key only while it holds
 *     that token (compare-and-delete), else RLOCK_ENOTHELD and the key is left
 *     as it is; the watchdog renews by compare-and-PEXPIRE, and a renewal that
 *     finds another token (or none) reports RLOCK_LOST_DELETED;
 *   - waiting polls: the other libraries publish nothing when they release,
 *     so a busy acquire tries again after a capped exponential backoff with
 *     jitter: the n-th wait is drawn uniformly from [c/2, c], c = min(8 ms x
 *     2^n, 500 ms), and never lasts past the holder's TTL left. rlock's own
 *     releases also publish on "rlock_simple__channel:{NAME}", so rlock
 *     waiters (this process's and others') wake at once when an rlock program
 *     releases;
 *   - hold count is 1 or 0; holders lists the token stored, whoever wrote it;
 *     force unlock deletes a string key (another type: RLOCK_ENOTLOCK unless
 *     RLOCK_FORCE_ANY_TYPE).
 * Free with rlock_lock_free. */
int rlock_lock_new_simple(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **out);

/* A read-write lock (Redisson's RReadWriteLock, same keys and channel): *read
 * and *write are lock handles for the rlock_lock_* calls; many readers or one
 * writer; a reader's write acquire fails at once (RLOCK_EUPGRADE); the writer
 * may take reads. Contract: docs/api/rwlock.md. Free both with rlock_lock_free. */
int rlock_rwlock_new(rlock_client_t *client, const void *name, size_t name_len, rlock_lock_t **read,
                     rlock_lock_t **write);

/* ---------------------------------------------------------------- MultiLock */

/* Several locks taken as one, all or nothing: rlock_lock_t handles of any
 * kind, on one client or several (servers, deployments). The handles are not
 * copied: they must outlive the MultiLock (rlock_multilock_free does not
 * free them), and so must their clients: free the MultiLock before any
 * member's client, and free a member's client only once no call on the
 * MultiLock is under way. A MultiLock call goes into its member clients one
 * call at a time (an acquire may wait on one member for ever while it holds
 * another), so rlock_client_free can neither wait for it nor refuse the
 * calls it has yet to make: they would touch the freed client, and so would
 * rlock_multilock_free (it removes its listener from every member's
 * client). The same lock twice (same name on the same server, however its
 * URL spells it) is RLOCK_EINVAL.
 *
 * Acquire takes the members one by one in a canonical order, whatever the
 * order given: by name (bytes) first, then, for one name on several
 * deployments, by the deployment as its client's URL names it, never the
 * node serving it now (a Sentinel failover, a Cluster failover or slot move
 * changes that node, and so does a host name whose DNS answer changes, as a
 * failover endpoint's does): one server by its host as the URL spells it,
 * never resolved (a numeric address in canonical form, localhost as
 * 127.0.0.1, a name in lower case; a unix socket: its real path) and the
 * URL's database; a Sentinel deployment by its least sentinel (spelled so)
 * and the master's name; a Cluster by its least seed. So
 * "redis://localhost:6379" and "redis://127.0.0.1:6379/0" are the same
 * server, every process orders the same members the same way at any time,
 * and two MultiLocks over overlapping sets never wait for each other in a
 * cycle (no deadlock). What the order cannot see: one name on two
 * deployments reached through different addresses or spellings (a NAT, a
 * proxy, a host name in one process and its address in another), and one
 * deployment named by processes with different least seeds (spell the
 * same seeds the same way in every process): give such members distinct
 * names. One name on the node a member's client is served
 * by at rlock_multilock_new (one Cluster named by two seed lists) is the
 * same lock too. Each member waits within what is
 * left of the one wait budget. If a member cannot be had (the budget ran
 * out: RLOCK_EBUSY; an error; cancel: RLOCK_ECANCELED), the members already
 * taken are released (in parallel). A transient error of a member
 * (RLOCK_ECONNECT, RLOCK_ETIMEDOUT, RLOCK_ECONNLOST, RLOCK_ENOSYNC: its
 * server or replicas did not answer in time) then starts the whole acquire
 * again after a short random backoff (10 ms doubling to 200 ms), as long as
 * the wait budget lasts (RLOCK_WAIT_FOREVER: until it succeeds or is
 * cancelled) and every give-back of that round landed (one that failed may
 * leave that member's hold on its server until its lease runs out: the call
 * then fails rather than take it again on top). Any other error (EINVAL,
 * ENOMEM, ESERVER...), the budget's end or a cancel fails the call at once
 * with that member's error, the member named in rlock_last_error(): nothing
 * is left behind.
 * Lease: one lease for all, applied at the end. While later members are
 * awaited the members taken so far are held with the watchdog (their
 * client's watchdog_timeout_ms, renewed), so none runs out during the wait,
 * whatever its length. With RLOCK_LEASE_WATCHDOG they stay so (a member
 * its client saw lost during the wait fails the acquire, RLOCK_ENOTHELD
 * naming it, after releasing every member). With a fixed
 * lease, once every member is held each member's TTL is set to exactly the
 * lease, in parallel (the client's hold becomes a fixed lease too: no more
 * renewal), so all expire together lease ms after the acquire, and
 * rlock_multilock_valid_until reports that (with the replica-sync check this
 * step carries WAIT too: one too few replicas acknowledged fails the acquire
 * with RLOCK_ENOSYNC); RLOCK_WAIT_FOREVER with a fixed
 * lease is allowed. (A member the owner already held before keeps what its
 * outer hold needs: the TTL is never cut below it.) If that final step
 * fails for a member (its hold gone from the server: RLOCK_ENOTHELD; a
 * timeout or lost connection: that error), the acquire fails, naming it,
 * after releasing every member: all or nothing here too (a member whose
 * server does not answer its release either is freed, as after any failed
 * release, by the lease it has: the watchdog lease from its last renewal,
 * or the fixed lease if the final step landed). Owners as in
 * rlock_lock_acquire. A member lost while held is reported by its client's
 * lock-lost callback (with the member's name) and by the MultiLock's own
 * (rlock_multilock_on_lost). */
typedef struct rlock_multilock rlock_multilock_t;
int rlock_multilock_new(rlock_multilock_t **out, rlock_lock_t *const *locks, size_t n);
void rlock_multilock_free(rlock_multilock_t *multilock);
int rlock_multilock_acquire(rlock_multilock_t *multilock, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                            rlock_cancel_t *cancel);
/* Releases every member in parallel and waits for their answers. The first
 * error (RLOCK_ENOTHELD: a member was not held) after all were tried. */
int rlock_multilock_release(rlock_multilock_t *multilock, rlock_owner_t owner);
/* The earliest valid-until of the members (rlock_lock_valid_until). */
int rlock_multilock_valid_until(rlock_multilock_t *multilock, rlock_owner_t owner, int64_t *out);
/* The MultiLock's lock-lost notification: cb runs (on the I/O thread of the
 * member's client) once per acquire, when the first member held by the
 * MultiLock's owner is lost (any reason), with that member's name, the owner
 * and the member client's reason; later losses of the same acquire are not
 * reported again (the next successful acquire re-arms it). The member
 * clients' own callbacks (rlock_client_on_lost) still run, before this one:
 * this is a second listener, not a replacement. Replaces any earlier
 * callback of this MultiLock; NULL removes it. Each owner using the
 * MultiLock is armed by its own acquire (another owner's failed acquire or
 * release does not silence it). cb must not call rlock_multilock_on_lost or
 * rlock_multilock_free (they wait for a running callback to return);
 * rlock_multilock_acquire/release from cb (or any callback of a member's
 * client) fail with RLOCK_EDEADLK, as blocking calls on an I/O thread do;
 * rlock_multilock_free removes the callback, and none runs after it
 * returned. */
void rlock_multilock_on_lost(rlock_multilock_t *multilock, rlock_lost_cb cb, void *arg);

/* ---------------------------------------------------------------- RedLock */

/* RedLock over N independent masters (no replication between them), as the
 * Redis documentation describes it. The RedLock makes one client per URL
 * (its own I/O thread and connections: the nodes are asked in parallel) and
 * one lock handle per node, in Redisson's reentrant format (a RedLock shared
 * with Redisson's RedLock / MultiLock over the same masters) or, with
 * RLOCK_REDLOCK_SIMPLE, the simple format (shared with node-redlock and
 * redsync).
 *
 * Acquire: a try (no wait) goes to every node at once; a node that has not
 * answered within the per-node timeout (default lease/100 clamped to 5..50
 * ms; rlock_redlock_set_node_timeout) counts as failed, like a dead, slow or
 * SIGSTOPped node: never an error of the whole attempt (its try is
 * cancelled: a late grant is given back). It succeeds with a majority
 * (N/2+1) AND a validity = lease - elapsed (monotonic) - drift (lease/100 +
 * 2 ms) > 0; *valid_until (may be NULL) is then the CLOCK_MONOTONIC ms
 * (rlock_now_ms) until which the lock is safe. Otherwise every node that
 * granted is released, and the round is retried after a random delay of 10
 * to 200 ms while the wait budget lasts. RLOCK_EBUSY: no majority within
 * wait_ms; RLOCK_ECONNECT: too many nodes unreachable (or too slow) for a
 * majority; RLOCK_ECANCELED: cancelled. One hold per RedLock object: an
 * acquire while it is held is RLOCK_EBUSY. The owner on each node is the
 * calling thread ("<node client id>:<thread id>"); any thread may release.
 *
 * Lease: fixed, or RLOCK_LEASE_WATCHDOG (opts->watchdog_timeout_ms, each
 * node renewed by its client, so all nodes are extended in parallel).
 * rlock_redlock_valid_until then answers the time until which a majority of
 * nodes is known valid, minus the drift. When fewer than a majority still
 * hold (a node's renewal found the hold gone, a fixed lease ran out, a
 * partition outlasted the lease), the callback set with rlock_redlock_on_lost
 * runs once (on a node's I/O thread, with that node's reason), and the
 * remaining nodes are released.
 *
 * Nodes: a node unreachable when the RedLock is made counts as failed until
 * its client can be made: each acquire round (and rlock_redlock_node_status)
 * starts a background attempt for it, at most once a second, so a node that
 * comes up later takes part in the rounds after the attempt succeeds (its
 * client is made with the same options); a bad URL or option fails
 * rlock_redlock_new itself (RLOCK_EURL, RLOCK_EINVAL). rlock_redlock_free
 * waits for an attempt under way (at most connect_timeout_ms). A node restarted without persistence forgets the hold: it
 * may then grant it to another process, and with the other failures of a
 * minority, two processes can both believe they hold a majority. The remedy
 * is a restart delayed by more than the longest lease (or persistence with
 * appendfsync always), or fencing tokens checked by the resource.
 *
 * opts: the options of every node's client (its url is ignored: urls[i]);
 * 1 <= n <= 64. Free with rlock_redlock_free (holds are not released, their
 * leases free the nodes; not from a callback: it joins the nodes' threads). */
typedef struct rlock_redlock rlock_redlock_t;
#define RLOCK_REDLOCK_SIMPLE 1u /* the simple format (SET NX PX) on each node */
int rlock_redlock_new(rlock_redlock_t **out, const rlock_options_t *opts, const char *const *urls, size_t n,
                      const void *name, size_t name_len, unsigned flags);
void rlock_redlock_free(rlock_redlock_t *redlock);
int rlock_redlock_acquire(rlock_redlock_t *redlock, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                          int64_t *valid_until);
/* Releases every node in parallel and waits for their answers at most
 * command_timeout_ms (a node that does not answer frees the lock when its
 * lease runs out). RLOCK_ENOTHELD if not held, or if the hold was lost (the
 * nodes still holding were released all the same). */
int rlock_redlock_release(rlock_redlock_t *redlock);
int rlock_redlock_valid_until(rlock_redlock_t *redlock, int64_t *out);
void rlock_redlock_on_lost(rlock_redlock_t *redlock, rlock_lost_cb cb, void *arg);
/* The per-node timeout of an acquire round; 0: lease/100 clamped to 5..50 ms. */
int rlock_redlock_set_node_timeout(rlock_redlock_t *redlock, int64_t ms);
size_t rlock_redlock_nodes(const rlock_redlock_t *redlock);
/* Node i's view: *held 1 if this RedLock's hold counts on it; *ttl_ms the
 * lock's PTTL there (-2: no key). RLOCK_ECONNECT for a node whose client
 * could not be made yet (message: why; the call starts another attempt if
 * the last one is over a second old). */
int rlock_redlock_node_status(rlock_redlock_t *redlock, size_t i, int *held, int64_t *ttl_ms);

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

/* Any Redis command, for the data that the lock protects. User commands
 * never touch the lock traffic: they run on a connection of their own, the
 * user connection, opened on the first call (same URL, credentials, database
 * and TLS settings as the lock connections) and re-opened after a drop like
 * them. A blocking command (BLPOP 0, WAIT, XREAD BLOCK...) therefore delays
 * neither renewals nor acquires.
 *
 * The user connection is shared by every thread of the client and answers
 * in order: a command sent behind a blocking one waits for it (use a second
 * client for concurrent blocking commands). For the same reason commands that
 * would change that connection's state or its one-reply-per-command stream are
 * refused before anything is sent, with RLOCK_EINVAL and a message naming the
 * command (in any case, compared in ASCII as Redis does, whatever the locale
 * the application set): SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their
 * UNSUBSCRIBEs, MONITOR, SYNC, PSYNC, REPLCONF, SELECT (the database is the
 * URL's), HELLO, AUTH, RESET, QUIT, READONLY, READWRITE, ASKING, CLIENT REPLY /
 * TRACKING / CACHING / SETNAME / SETINFO / NO-EVICT / NO-TOUCH, and MULTI,
 * EXEC, DISCARD, WATCH, UNWATCH (use rlock_client_transaction; WATCH has no
 * equivalent: hold a lock around the read-modify-write, that is what it is
 * for). Use PUBLISH freely; subscribe with another Redis client.
 *
 * Timeouts: a command that gets no reply within its timeout ends with
 * RLOCK_ETIMEDOUT (it may still run: it is never re-sent). The connection
 * then still waits for that reply (a BLPOP 0 stays blocked on the server), so
 * the user connection is dropped and re-opened when the timeout fires, or
 * when the next command is sent, whichever first finds the timed-out command
 * oldest in line (a command ahead of it that is still within its own timeout
 * is left to finish). The server then lets go of the blocked command, commands
 * written behind it end with RLOCK_ECONNLOST and later ones run on the new
 * connection. Give a blocking command a timeout longer than its block time
 * with rlock_client_command_timeout. A command whose connection drops while
 * it is in flight ends with RLOCK_ECONNLOST (it may or may not have run).
 *
 * Ordering: a command whose reply you received ran before any lock call you
 * make afterwards. A command that ended without a reply (RLOCK_ETIMEDOUT,
 * RLOCK_ECONNLOST) travels on another connection than the locks: it may
 * still run after a later unlock, so after such an error inside a critical
 * section check the data before relying on it.
 *
 * rlock_stats_t counts user commands in user_commands only. */
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
 * strings) and waits for the reply, at most command_timeout_ms. An error reply
 * is returned as a reply of type RLOCK_REPLY_ERROR with status 0. Free the
 * reply with rlock_reply_free.
 *
 * Redis Cluster (redis+cluster://): the command goes to the master of its
 * key's slot, on a user connection of that node (one per master, opened on
 * first use, with the behaviour above). The key is argv[1] for the data
 * commands (strings, keys, hashes, lists, sets, sorted sets, streams,
 * HyperLogLog, bitmaps, geo: GET, SET, DEL, MGET, MSET, INCR, HSET, LPUSH,
 * BLPOP, ZADD, XADD..., and SPUBLISH's channel), argv[2] for BITOP, OBJECT,
 * MEMORY, XGROUP, XINFO (their forms with a key) and for SINTERCARD,
 * ZINTERCARD, ZINTER, ZUNION, ZDIFF, LMPOP, ZMPOP and argv[3] for EVAL,
 * EVALSHA, FCALL (and their _RO forms), BLMPOP, BZMPOP, with numkeys > 0. Any other command (PING,
 * INFO, CLUSTER..., or a key in another position, e.g. XREAD ... STREAMS key)
 * goes to the first seed's user connection, as does a keyed command sent
 * before the slot map is known (it follows the MOVED). MOVED and ASK (ASKING first) are followed within
 * the command's timeout, at most 5 in a row; TRYAGAIN and CLUSTERDOWN come
 * back as error replies. A multi-key command whose keys span slots gets
 * Redis's CROSSSLOT error reply: give such keys one hash tag ({tag}). A
 * command sent to a master that died waits for its timeout (it is not moved
 * to the promoted replica). */
int rlock_client_command(rlock_client_t *client, int argc, const char *const *argv,
                         const size_t *argvlen, rlock_reply_t **reply);

/* The same with a timeout of its own: timeout_ms > 0, or RLOCK_WAIT_FOREVER
 * (no bound: until the reply comes, the connection drops or the client is
 * freed). For blocking commands: BLPOP with a 10 s block and a 12 s timeout. */
int rlock_client_command_timeout(rlock_client_t *client, int64_t timeout_ms, int argc,
                                 const char *const *argv, const size_t *argvlen,
                                 rlock_reply_t **reply);

/* One command of a transaction (argvlen may be NULL). */
typedef struct rlock_command {
  int argc;
  const char *const *argv;
  const size_t *argvlen;
} rlock_command_t;

/* Runs cmds (ncmds >= 1) as one Redis transaction: MULTI, the commands and
 * EXEC leave in one write on the user connection, so no other thread's
 * command can land inside it. *reply is EXEC's reply: an array with one reply
 * per command (a command that failed while running gives an error element and
 * the others still ran), or an error reply (EXECABORT...) if Redis refused a
 * command while queueing it (then none ran). Each command passes the same
 * filter as rlock_client_command (RLOCK_EINVAL: nothing is sent). Times out
 * after command_timeout_ms like a command. In the unlikely case that Redis
 * refuses MULTI itself (an ACL without it) the call ends with RLOCK_ESERVER:
 * the commands may then have run one by one.
 *
 * Redis Cluster: the transaction goes to the master of its first keyed
 * command's slot (keys as for rlock_client_command; all its keys must share
 * that slot). A MOVED or ASK inside it is not followed (each command would
 * run outside the transaction): the reply is EXEC's EXECABORT and nothing
 * ran; a MOVED updates the slot map, so the same call sent again goes to the
 * new owner (not a transaction with no command keyed by that table, e.g.
 * only XREAD ... STREAMS key: it always goes to the first seed). */
int rlock_client_transaction(rlock_client_t *client, size_t ncmds, const rlock_command_t *cmds,
                             rlock_reply_t **reply);

void rlock_reply_free(rlock_reply_t *reply);

/* ---------------------------------------------------------------- helpers */

/* Parses a duration "250", "250ms", "3s", "2m" into ms (no suffix = ms).
 * RLOCK_EINVAL for anything else, negative values or overflow. */
int rlock_duration_parse(const char *s, int64_t *out_ms);

/* Copies url into buf (cut to buflen, always NUL-terminated) with every byte
 * that may be a password replaced by "***", whatever url holds, well-formed or
 * not: the user info up to the last '@' after the user name's ':' (all of it
 * without a ':'; a "scheme:" counts only when a '/' follows it, so in
 * "user:pass:word@host" all of "pass:word" is hidden), and every "password="
 * value. For messages. */
void rlock_url_redact(const char *url, char *buf, size_t buflen);

#ifdef __cplusplus
}
#endif

#endif /* RLOCK_H */
