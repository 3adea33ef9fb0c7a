/* harness.h -- the test harness of the rlock suite: a tiny test framework
 * (TEST/RUN, CHECK macros that stop the test with file:line), real
 * redis-server processes on loopback (random free ports, temp dirs, always
 * cleaned up), a raw hiredis client independent of the library under test,
 * INFO commandstats counters and a throw-away TLS test CA. */
#ifndef RLOCK_TEST_HARNESS_H
#define RLOCK_TEST_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "rlock.h"

/* ------------------------------------------------------------ framework */

void th_fail(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

#define CHECK(cond)                                               \
  do {                                                            \
    if (!(cond)) th_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); \
  } while (0)

#define CHECK_MSG(cond, ...)                               \
  do {                                                     \
    if (!(cond)) th_fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define CHECK_EQ(a, b)                                                                                       \
  do {                                                                                                       \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);                                                \
    if (th_a_ != th_b_) th_fail(__FILE__, __LINE__, "CHECK_EQ(%s, %s): %lld != %lld", #a, #b, th_a_, th_b_); \
  } while (0)

#define CHECK_STREQ(a, b)                                                                                    \
  do {                                                                                                       \
    const char *th_a_ = (a), *th_b_ = (b);                                                                   \
    if (!th_a_ || !th_b_ || strcmp(th_a_, th_b_) != 0)                                                       \
      th_fail(__FILE__, __LINE__, "CHECK_STREQ(%s, %s): \"%s\" != \"%s\"", #a, #b, th_a_ ? th_a_ : "(null)", \
              th_b_ ? th_b_ : "(null)");                                                                     \
  } while (0)

/* An rlock call that must return `want` (0, RLOCK_E*). Prints the library's
 * error name and rlock_last_error() on a mismatch. */
#define CHECK_RC(expr, want) th_check_rc((expr), (want), #expr, __FILE__, __LINE__)
#define CHECK_OK(expr) CHECK_RC(expr, 0)
void th_check_rc(int got, int want, const char *expr, const char *file, int line);

#define TEST(name) static void test_##name(void)
#define RUN(name) th_run(#name, test_##name)
void th_run(const char *name, void (*fn)(void));
/* Call first in main(): installs cleanup (atexit, signals) and a watchdog
 * alarm that fails the test binary after timeout_s seconds. */
void th_init(int argc, char **argv, int timeout_s);
/* Prints the summary; returns the exit status for main(). */
int th_done(void);

/* ------------------------------------------------------------ time, misc */

int64_t th_now_ms(void); /* CLOCK_MONOTONIC */
void th_sleep_ms(int64_t ms);
pid_t th_gettid(void);
/* Polls pred(arg) every few ms until it returns non-zero or timeout_ms pass;
 * returns the last value. For conditions no event announces (a server-side
 * state such as PUBSUB NUMSUB). */
int th_wait_until(int (*pred)(void *), void *arg, int64_t timeout_ms);
/* Forks a child that dies with the test process (PR_SET_PDEATHSIG) and
 * never runs the harness cleanup; returns the pid (0 in the child). */
pid_t th_fork(void);
/* Ends a forked child with status rc by exec (/bin/sh -c 'exit rc'): it
 * must not run its exit under valgrind with the parent's memory it
 * inherited (every block the parent's threads pointed to reads as lost,
 * and valgrind's error exit code would replace rc). */
void th_exit_by_exec(int rc) __attribute__((noreturn));
/* The member a MultiLock over (name_a on url_a, name_b on url_b) takes
 * first: both must be held by another owner, so a try with no wait fails on
 * the first member in its order ('a' or 'b': the member whose client sent an
 * acquire; '?' neither or both). */
char th_multilock_first_taken(const char *url_a, const char *name_a, const char *url_b, const char *name_b);
/* Waits for pid; returns its exit status, or 128+signal. */
int th_wait_child(pid_t pid);
/* Makes a fresh temp dir (removed at exit); returns a static-lifetime path. */
const char *th_tempdir(void);
/* Runs argv (NULL-terminated) with stdout/stderr to /dev/null; returns exit status. */
int th_exec(const char *const *argv);

/* ------------------------------------------------------------ redis-server */

typedef struct th_server_opts {
  const char *const *extra_args; /* NULL-terminated, appended to the command line */
  int unixsocket;                /* also listen on dir/redis.sock */
  int tls;                       /* also listen with TLS (certs from th_tls_certs) */
  int tls_auth_clients;          /* with tls: require client certificates */
  int appendonly;                /* appendonly yes + appendfsync always */
  const char *raw_user;          /* credentials of the raw client (AUTH) */
  const char *raw_password;
  int port; /* nonzero: listen on this port; th_server_start returns NULL if it is taken */
} th_server_opts_t;

typedef struct th_server {
  pid_t pid;
  int port;
  int tls_port;
  char dir[256];
  char url[300];     /* redis://127.0.0.1:port */
  char tls_url[300]; /* rediss://127.0.0.1:tls_port */
  char sock[300];    /* dir/redis.sock */
  th_server_opts_t opts;
  redisContext *raw; /* cached raw connection (th_cmd) */
} th_server_t;

/* Start, restart and stop servers from the main thread: a server dies with
 * the thread that started it (PR_SET_PDEATHSIG). */
th_server_t *th_server_start(const th_server_opts_t *opts); /* opts may be NULL */
void th_server_kill(th_server_t *s);                        /* SIGKILL and reap */
void th_server_restart(th_server_t *s);                     /* kill, then start again on the same ports */
void th_server_stop(th_server_t *s);                        /* kill, remove the dir, free */
/* For servers of other shapes (sentinels): a free loopback port, and a
 * redis-server run from argv until its output shows ready_text: 0 (*pid set),
 * 1 if its port was taken (pick another), the test fails otherwise. */
int th_free_port(void);
int th_spawn_ready(const char *const *argv, const char *ready_text, pid_t *pid);

/* Raw commands (hiredis, blocking) on the server's plain TCP port. th_cmd*
 * share one cached connection per server: use them from one thread at a time. */
redisContext *th_raw_connect(th_server_t *s);              /* a new, authenticated connection */
redisReply *th_cmd(th_server_t *s, const char *arg0, ...); /* NULL-terminated string args */
redisReply *th_cmdv(th_server_t *s, int argc, const char **argv, const size_t *lens);
void th_reply_free(redisReply *r);
/* Shortcuts: an integer reply (fails the test on another type). */
long long th_cmd_int(th_server_t *s, const char *arg0, ...);
/* Calls of one command (lower-case name: "evalsha") from INFO commandstats. */
long long th_cmdstat(th_server_t *s, const char *cmd);
/* PUBSUB NUMSUB channel. */
long long th_numsub(th_server_t *s, const char *channel);
/* 1 if a connection named client_name (CLIENT SETNAME) has a command held
 * back by CLIENT PAUSE (flag b in CLIENT LIST). */
int th_client_blocked(th_server_t *s, const char *client_name);
/* How many connections named client_name (CLIENT SETNAME) s has. */
int th_clients_named(th_server_t *s, const char *client_name);
/* Script calls the server has run: EVALSHA + EVAL (INFO commandstats). */
long long th_scripts_run(th_server_t *s);

/* A string reply as a malloc'd copy (NULL for nil); free() it. */
char *th_cmd_str(th_server_t *s, const char *arg0, ...);
/* GET key as a number (a semaphore's or latch's count); -1000 when absent. */
long long th_get_num(th_server_t *s, const char *key);
/* HGET key field as a number; -1000 when the field or key is absent. */
long long th_hget_num(th_server_t *s, const char *key, const char *field);

/* ------------------------------------------------------------ TCP state */

/* Looks up the loopback TCP socket local_port -> remote_port in
 * /proc/net/tcp: returns 1 and its send queue (bytes not yet acknowledged
 * by the peer) and receive queue (bytes the application has not read yet),
 * or 0 if no such socket exists (never opened, or closed). tx/rx may be NULL. */
int th_tcp_queues(int local_port, int remote_port, long *tx, long *rx);
/* The local port of a connected socket (0 on error). */
int th_local_port(int fd);

/* ------------------------------------------------------------ rlock helpers */

/* A client on url (watchdog_ms 0: the default), failing the test on error. */
rlock_client_t *th_client(const char *url, int64_t watchdog_ms);
/* A client on url whose requests time out after command_timeout_ms, re-sent
 * up to retry_attempts times, and whose connection is never given up for
 * timeouts (dead_after_timeouts 0): for a pause longer than the timeout. */
rlock_client_t *th_client_timeouts(const char *url, int64_t command_timeout_ms, int retry_attempts);
/* A lock handle on a NUL-terminated name. */
rlock_lock_t *th_lock(rlock_client_t *c, const char *name);
/* Waits until the uint64_t field of c's rlock_stats_t reaches at_least:
 * 1, or 0 after timeout_ms. TH_STAT_REACHES(c, acquire_attempts, 3, ms). */
int th_stat_reaches(rlock_client_t *c, size_t field_offset, uint64_t at_least, int64_t timeout_ms);
#define TH_STAT_REACHES(c, field, n, timeout_ms) th_stat_reaches((c), offsetof(rlock_stats_t, field), (n), (timeout_ms))
/* A lock-lost recorder: pass th_lost_record and a th_lost_t (TH_LOST_INIT)
 * to rlock_client_on_lost or rlock_redlock_on_lost; read calls, reason and
 * name under mu. th_lost_once(lost) is 1 once it was called (th_wait_until). */
typedef struct th_lost {
  pthread_mutex_t mu;
  int calls;
  rlock_lost_reason_t reason; /* of the last call */
  char name[64];              /* of the last call */
} th_lost_t;
#define TH_LOST_INIT                       \
  {                                        \
    PTHREAD_MUTEX_INITIALIZER, 0, 0, { 0 } \
  }
void th_lost_record(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *lost);
int th_lost_once(void *lost);
void th_lost_reset(th_lost_t *lost); /* calls = 0 */
/* Writes the owner id as stored in Redis into buf; returns buf. owner in the
 * rlock_owner_t encoding: RLOCK_OWNER_THREAD | tid -> "<client id>:<tid>",
 * an explicit owner n -> "<client id>:owner-<n>". */
const char *th_owner_id(rlock_client_t *c, uint64_t owner, char *buf, size_t len);

/* ------------------------------------------------------------ TLS */

typedef struct th_tls_certs {
  char ca[300], server_cert[300], server_key[300], client_cert[300], client_key[300];
} th_tls_certs_t;
/* Generates (once per process) a CA and server/client certificates for
 * 127.0.0.1 and localhost with the openssl CLI into a temp dir. */
const th_tls_certs_t *th_tls_certs(void);

/* ------------------------------------------------------------ settled */

/* Returns once c (one server) sends nothing more of its own accord: a lock
 * query on its command connection is answered after every request sent
 * before it, and each of those answers has parked its waiter or sent
 * another request. A try counts (acquire_attempts, commands_sent) when it
 * is sent, before its answer is in: wait for the count, then for this,
 * before a step that needs the waiters parked. Fails the test if c keeps
 * sending. */
void th_settled(rlock_client_t *c);

#endif
