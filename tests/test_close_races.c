/* test_close_races.c -- rlock_client_free while an acquire is on the wire,
 * against a real redis-server that is slow at that moment (DEBUG SLEEP,
 * CLIENT PAUSE WRITE):
 *   - the try reaches the server after the client is gone: the hold it
 *     takes must be given back, not left to nobody for its whole lease;
 *   - a thread whose acquire ended with RLOCK_ECLOSED frees its lock handle
 *     at once (allowed: the call returned) while the client still lingers for
 *     its last requests: the try's late reply must not touch that handle
 *     (use-after-free under ASan), and the hold is given back;
 *   - an acquire on the calling thread's fast connection is in flight: it
 *     is undone before free returns (it never returns RLOCK_ECLOSED with its
 *     hold left, nor RLOCK_OK for a hold the client forgot). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

/* ------------------------------------------------------------ helpers */

/* Sends a command on its own raw connection without waiting for the reply. */
static redisContext *send_nowait(const char *fmt, ...) {
  redisContext *rc = th_raw_connect(srv);
  va_list ap;
  va_start(ap, fmt);
  CHECK(redisvAppendCommand(rc, fmt, ap) == REDIS_OK);
  va_end(ap);
  int done = 0;
  while (!done) CHECK(redisBufferWrite(rc, &done) == REDIS_OK);
  return rc;
}

static void finish(redisContext *rc) {
  void *r = NULL;
  CHECK(redisGetReply(rc, &r) == REDIS_OK);
  freeReplyObject(r);
  redisFree(rc);
}

/* The server has read everything sent on rc (DEBUG SLEEP is running). */
static int server_took(void *arg) {
  redisContext *rc = arg;
  int me = th_local_port(rc->fd);
  long tx = -1, rx = -1;
  return th_tcp_queues(me, srv->port, &tx, NULL) && tx == 0 && th_tcp_queues(srv->port, me, NULL, &rx) && rx == 0;
}

typedef struct sent_arg {
  rlock_client_t *c;
  uint64_t want;
} sent_arg_t;
static int sent_reaches(void *a) {
  sent_arg_t *s = a;
  rlock_stats_t st;
  rlock_client_stats(s->c, &st);
  return st.commands_sent >= s->want;
}
static uint64_t commands_sent(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  return st.commands_sent;
}
static void wait_sent(rlock_client_t *c, uint64_t want) {
  sent_arg_t a = {c, want};
  CHECK_MSG(th_wait_until(sent_reaches, &a, 10000), "the client did not write its request");
}

typedef struct evalsha_arg {
  long long want;
} evalsha_arg_t;
static int evalsha_reaches(void *a) { return th_cmdstat(srv, "evalsha") >= ((evalsha_arg_t *)a)->want; }

/* The lock is not left to nobody: no such key. */
static void check_not_left(const char *name) {
  long long pttl = th_cmd_int(srv, "PTTL", name, NULL);
  CHECK_MSG(pttl == -2, "'%s' is held by a client that is gone (PTTL %lld ms): nobody will release it", name, pttl);
}

typedef struct done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls, status;
} done_t;
static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  (void)lock, (void)value;
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  d->calls++;
  d->status = status;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* ------------------------------------------------------------ tests */

/* The acquire is written while the server sleeps; the client is freed before
 * it wakes up (free lingers at most 500 ms, the sleep lasts 2 s). */
TEST(acquire_in_flight_at_free) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "close:sleep");
  long long ev0 = th_cmdstat(srv, "evalsha");
  redisContext *rc = send_nowait("DEBUG SLEEP 2");
  CHECK_MSG(th_wait_until(server_took, rc, 5000), "the server never read DEBUG SLEEP");
  done_t d = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  uint64_t base = commands_sent(c);
  CHECK_OK(rlock_lock_acquire_async(l, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL, on_done, &d));
  wait_sent(c, base + 1);
  rlock_client_free(c);
  CHECK_EQ(d.calls, 1);
  CHECK_RC(d.status, RLOCK_ECLOSED);
  rlock_lock_free(l);
  finish(rc);                  /* the server is awake: it runs what the closed connection sent */
  evalsha_arg_t a = {ev0 + 2}; /* the try, and what gives it back */
  th_wait_until(evalsha_reaches, &a, 5000);
  check_not_left("close:sleep");
}

/* ---- a handle freed as soon as its acquire returned RLOCK_ECLOSED */

typedef struct waiter {
  rlock_client_t *c;
  int rc;
  _Atomic int freed;
} waiter_t;

static void *lock_then_free_handle(void *arg) {
  waiter_t *w = arg;
  rlock_lock_t *l = th_lock(w->c, "close:handle");
  w->rc = rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG);
  rlock_lock_free(l); /* the call returned: the handle is ours to free */
  w->freed = 1;
  return NULL;
}

static void *free_client(void *arg) {
  rlock_client_free(arg);
  return NULL;
}

static int is_set(void *p) { return *(_Atomic int *)p; }

TEST(handle_freed_while_client_lingers) {
  rlock_client_t *c = th_client(srv->url, 0);
  /* latch DELs to send: the client lingers for them when freed */
  rlock_lock_t *b = th_lock(c, "close:b");
  CHECK_OK(rlock_lock_trylock(b, 0, 10000));
  CHECK_OK(rlock_lock_unlock(b));
  rlock_lock_free(b);
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", "10000", "WRITE", NULL);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
  long long ev0 = th_cmdstat(srv, "evalsha");

  waiter_t w = {c, 1, 0};
  pthread_t t, f;
  uint64_t base = commands_sent(c);
  CHECK_EQ(pthread_create(&t, NULL, lock_then_free_handle, &w), 0);
  wait_sent(c, base + 1); /* the try is on the server, held by the pause */
  CHECK_EQ(pthread_create(&f, NULL, free_client, c), 0);
  CHECK_MSG(th_wait_until(is_set, (void *)&w.freed, 10000), "the waiter never returned");
  CHECK_RC(w.rc, RLOCK_ECLOSED);
  r = th_cmd(srv, "CLIENT", "UNPAUSE", NULL); /* the try runs; its reply may find the client lingering */
  th_reply_free(r);
  pthread_join(f, NULL);
  pthread_join(t, NULL);
  evalsha_arg_t a = {ev0 + 2};
  th_wait_until(evalsha_reaches, &a, 5000);
  check_not_left("close:handle");
}

/* ---- a fast acquire (on the calling thread's fast connection) in flight
 * when free begins: it either completes (the caller owns the hold: free's
 * rule for held locks) or is undone before free returns; never
 * RLOCK_ECLOSED with its hold left on the server, never RLOCK_OK for a hold
 * the client forgot. Here its answer cannot come in time, so it is undone. */

typedef struct fast_caller {
  rlock_client_t *c;
  const char *name;
  int open_first; /* a fast call before: the fast connection is open */
  _Atomic int ready, go, done;
  int rc;
} fast_caller_t;

static void *fast_caller(void *arg) {
  fast_caller_t *fc = arg;
  rlock_lock_t *l = th_lock(fc->c, fc->name);
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)); /* through the I/O thread; */
  CHECK_OK(rlock_lock_unlock(l));                     /* this thread learns its count (0): its next acquire is fast */
  if (fc->open_first) {
    rlock_stats_t s0, s1;
    rlock_client_stats(fc->c, &s0);
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_unlock(l));
    rlock_client_stats(fc->c, &s1);
    CHECK_EQ(s1.fast_calls, s0.fast_calls + 2);
  }
  fc->ready = 1;
  th_wait_until(is_set, (void *)&fc->go, 10000);
  fc->rc = rlock_lock_trylock(l, 0, RLOCK_LEASE_WATCHDOG);
  rlock_lock_free(l);
  fc->done = 1;
  return NULL;
}

static rlock_client_t *client_timeout(int64_t command_timeout_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = command_timeout_ms;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

/* The server sleeps (DEBUG SLEEP) longer than free waits, not longer than
 * the command timeout: before, the answer came during free, the call
 * returned RLOCK_OK and the hold stayed for its whole lease (nobody renewed
 * or released it), and free blocked until the server woke. */
TEST(fast_acquire_in_flight_at_free) {
  rlock_client_t *c = client_timeout(5000);
  fast_caller_t fc = {.c = c, .name = "close:fast", .open_first = 1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, fast_caller, &fc), 0);
  CHECK(th_wait_until(is_set, (void *)&fc.ready, 10000));
  long long ev0 = th_cmdstat(srv, "evalsha");
  redisContext *rc = send_nowait("DEBUG SLEEP 3");
  CHECK_MSG(th_wait_until(server_took, rc, 5000), "the server never read DEBUG SLEEP");
  uint64_t base = commands_sent(c);
  fc.go = 1;
  wait_sent(c, base + 1); /* the fast try is written; the server sleeps */
  rlock_client_free(c);
  pthread_join(t, NULL);
  finish(rc);       /* the server is awake: it runs what the closed connections sent */
  if (fc.rc == 0) { /* answered in time: the caller owns the hold (nothing here) */
    th_fail(__FILE__, __LINE__, "the fast try was answered although the server slept");
  }
  CHECK_RC(fc.rc, RLOCK_ECLOSED);
  evalsha_arg_t a = {ev0 + 2}; /* the try, and its undo */
  th_wait_until(evalsha_reaches, &a, 5000);
  check_not_left("close:fast");
}

/* Bytes wait unread in a socket of the (sleeping) server: a connection's
 * handshake it has not read. */
static int server_has_unread(void *arg) {
  (void)arg;
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  int found = 0;
  CHECK(f != NULL);
  while (!found && fgets(line, sizeof line, f)) {
    unsigned lp = 0, rp = 0;
    unsigned long t = 0, r = 0;
    if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %lx:%lx", &lp, &rp, &t, &r) == 4 && (int)lp == srv->port && r > 0)
      found = 1;
  }
  fclose(f);
  return found;
}

/* The fast call opens the fast connection (its first) while the server
 * sleeps: free begins during its handshake. Before, the handshake and the
 * try went on once the server woke, the call returned RLOCK_OK during free
 * and its hold stayed for the whole lease (nobody renewed or released it),
 * and free blocked until then. */
TEST(first_fast_connect_at_free) {
  rlock_client_t *c = client_timeout(3000);
  fast_caller_t fc = {.c = c, .name = "close:fast1"};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, fast_caller, &fc), 0);
  CHECK(th_wait_until(is_set, (void *)&fc.ready, 10000));
  redisContext *rc = send_nowait("DEBUG SLEEP 2");
  CHECK_MSG(th_wait_until(server_took, rc, 5000), "the server never read DEBUG SLEEP");
  fc.go = 1;
  CHECK_MSG(th_wait_until(server_has_unread, NULL, 5000), "the fast connection's handshake never left");
  rlock_client_free(c);
  pthread_join(t, NULL);
  finish(rc);
  CHECK_RC(fc.rc, RLOCK_ECLOSED); /* nothing was sent: refused */
  check_not_left("close:fast1");
}

/* An optional argument runs only the tests whose name contains it. */
#define RUN_IF(name) \
  if (argc < 2 || strstr(#name, argv[1])) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  const char *extra[] = {"--enable-debug-command", "yes", NULL};
  th_server_opts_t o = {.extra_args = extra};
  srv = th_server_start(&o);
  RUN_IF(acquire_in_flight_at_free);
  RUN_IF(handle_freed_while_client_lingers);
  RUN_IF(fast_acquire_in_flight_at_free);
  RUN_IF(first_fast_connect_at_free);
  th_server_stop(srv);
  return th_done();
}
