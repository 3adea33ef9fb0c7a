/* test_free_races.c -- rlock_client_free on one thread while another thread
 * is still inside a blocking call of the same client (issue 20, item 2).
 * The invariant: nothing touches the client after its sync call was
 * answered unless free waits for it; free waits for (or refuses) every
 * caller. A seam of the library (rlock__test_call_hook) stops the calling
 * thread at the point of the race and lets free run; then the caller goes
 * on. Before the fix free returned at once and the caller read the freed
 * client (ASan: heap-use-after-free); now free returns only once the caller
 * has left, and the caller's result is its own. Also item 3's last step:
 * a fast try whose answer free cut is undone even when the I/O thread takes
 * its op only once it is stopping. And calls that must touch nothing of the
 * client: one refused while free runs (free may end at once), one counting
 * its fast window after free's wait, rlock_client_stats in a forked child.
 * Real redis-server. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "internal.h"

static th_server_t *srv;

/* ------------------------------------------------------------ the seam */

static client_t *target;   /* the client whose caller stops */
static pthread_t caller;   /* the thread that stops */
static atomic_int stop_at; /* RLOCK__AT_... where it stops (0: nowhere) */
static atomic_int stopped; /* it stopped there once */
static atomic_int freed;   /* rlock_client_free returned */
static pthread_t freer;

static void *free_client(void *arg) {
  rlock_client_free(arg);
  atomic_store(&freed, 1);
  return NULL;
}

static int is_set(void *p) { return atomic_load((atomic_int *)p); }

/* On the caller, at stop_at: start rlock_client_free on another thread and
 * give it time to finish. Once fixed it cannot (it waits for this caller):
 * the bounded wait then ends and the caller goes on. The seam never reads
 * cl (it may be freed). */
static void refused_hook(client_t *cl, int where);

static void late_window_hook(client_t *cl, int where);

static void hook(client_t *cl, int where) {
  refused_hook(cl, where);
  late_window_hook(cl, where);
  if (cl != target || !pthread_equal(pthread_self(), caller) || where != atomic_load(&stop_at)) return;
  atomic_store(&stop_at, 0);
  atomic_store(&stopped, 1);
  CHECK_EQ(pthread_create(&freer, NULL, free_client, cl), 0);
  th_wait_until(is_set, &freed, 1000); /* fixed: free waits for us (no timing claim either way) */
}

static void arm(rlock_client_t *c, int where) {
  target = c;
  caller = pthread_self();
  atomic_store(&freed, 0);
  atomic_store(&stopped, 0);
  atomic_store(&stop_at, where);
}

/* ------------------------------------------------------------ tests */

/* A release through the I/O thread is answered; free runs before the caller
 * tells its fast table the count (rlock__fast_released_slow read the freed
 * client). */
TEST(release_answered_then_freed) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "free:release");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)); /* the first hold goes through the I/O thread */
  arm(c, RLOCK__AT_ANSWERED);
  int rc = rlock_lock_unlock(l); /* the first release too: its count is not known yet */
  CHECK(atomic_load(&stopped));
  CHECK_RC(rc, 0); /* answered before free began */
  pthread_join(freer, NULL);
  CHECK(atomic_load(&freed));
  rlock_lock_free(l);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "free:release", NULL), 0);
}

/* A fast acquire finds the lock busy and has a wait: it goes on through the
 * I/O thread. free runs right then (the submit read the freed client). */
TEST(fast_fallback_then_freed) {
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *lo = th_lock(other, "free:fallback");
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "free:fallback");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l)); /* this thread knows its count (0): its next acquire is fast */
  CHECK_OK(rlock_lock_trylock(lo, 0, 20000));
  rlock_stats_t s0;
  rlock_client_stats(c, &s0);
  arm(c, RLOCK__AT_FAST_FELL_BACK);
  int rc = rlock_lock_trylock(l, 5000, RLOCK_LEASE_WATCHDOG); /* busy on the fast path: falls back */
  CHECK(atomic_load(&stopped));
  CHECK_RC(rc, RLOCK_ECLOSED); /* nothing of it reached the I/O thread: refused */
  pthread_join(freer, NULL);
  CHECK(atomic_load(&freed));
  rlock_lock_free(l);
  CHECK_OK(rlock_lock_unlock(lo)); /* the only hold on it is the other client's */
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "free:fallback", NULL), 0);
  rlock_lock_free(lo);
  rlock_client_free(other);
}

/* ---- a fast acquire whose answer is lost while free runs, its op taken by
 * the I/O thread only once the client is stopping: it is undone before it
 * ends (rlock__op_end_unstarted), never just failed with its try left to
 * run on the server. An async call's callback holds the I/O thread until
 * free says `stopping`, so the fast call's op waits on the submit stack. */

typedef struct fast_caller {
  rlock_client_t *c;
  _Atomic int ready, go;
  int rc;
} fast_caller_t;

static void *fast_caller(void *arg) {
  fast_caller_t *fc = arg;
  rlock_lock_t *l = th_lock(fc->c, "free:unstarted");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l)); /* this thread learns its count: its next calls are fast */
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l)); /* the fast connection is open */
  atomic_store(&fc->ready, 1);
  th_wait_until(is_set, &fc->go, 10000);
  fc->rc = rlock_lock_trylock(l, 0, RLOCK_LEASE_WATCHDOG);
  rlock_lock_free(l);
  return NULL;
}

static int stopping(void *arg) { return atomic_load(&((client_t *)arg)->stopping); }

static void hold_io_thread(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)status, (void)value;
  th_wait_until(stopping, arg, 10000); /* the I/O thread takes nothing meanwhile */
}

static redisContext *sleeper;
static int server_took(void *arg) {
  (void)arg;
  int me = th_local_port(sleeper->fd);
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

static long long evalsha_want;
static int evalsha_reaches(void *a) {
  (void)a;
  return th_cmdstat(srv, "evalsha") >= evalsha_want;
}

TEST(fast_lost_answer_undone_when_stopping) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = 5000; /* longer than the sleep: only the close cuts the answer */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  fast_caller_t fc = {.c = c};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, fast_caller, &fc), 0);
  CHECK(th_wait_until(is_set, &fc.ready, 10000));
  long long ev0 = th_cmdstat(srv, "evalsha");
  sleeper = th_raw_connect(srv);
  CHECK(redisAppendCommand(sleeper, "DEBUG SLEEP 3") == REDIS_OK);
  int done = 0;
  while (!done) CHECK(redisBufferWrite(sleeper, &done) == REDIS_OK);
  CHECK_MSG(th_wait_until(server_took, NULL, 5000), "the server never read DEBUG SLEEP");
  rlock_stats_t s0;
  rlock_client_stats(c, &s0);
  atomic_store(&fc.go, 1);
  sent_arg_t a = {c, s0.commands_sent + 1};
  CHECK_MSG(th_wait_until(sent_reaches, &a, 10000), "the fast try never left");
  /* a cancelled acquire ends at once on the I/O thread: its callback holds it */
  rlock_lock_t *blocker = th_lock(c, "free:blocker");
  rlock_cancel_t *cancel;
  CHECK_OK(rlock_cancel_new(&cancel));
  rlock_cancel_trigger(cancel);
  CHECK_OK(rlock_lock_acquire_async(blocker, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, cancel, hold_io_thread, c));
  rlock_client_free(c); /* cuts the fast call's answer after 500 ms; its op waits for the I/O thread */
  pthread_join(t, NULL);
  rlock_lock_free(blocker);
  rlock_cancel_free(cancel);
  CHECK_RC(fc.rc, RLOCK_ECLOSED);
  void *r = NULL;
  CHECK(redisGetReply(sleeper, &r) == REDIS_OK); /* awake: it runs what the closed connections sent */
  freeReplyObject(r);
  redisFree(sleeper);
  evalsha_want = ev0 + 2; /* the try, and its undo */
  th_wait_until(evalsha_reaches, NULL, 5000);
  long long pttl = th_cmd_int(srv, "PTTL", "free:unstarted", NULL);
  CHECK_MSG(pttl == -2, "the fast try's hold is left to nobody (PTTL %lld ms)", pttl);
}

/* ---- a call that comes while free runs is refused (RLOCK_ECLOSED) and
 * touches nothing of the client after: free may end the moment it is
 * refused. One thread (the holder) stays inside the client after its
 * answer, so free waits; a call made then is refused, and the seam at its
 * refusal lets the holder go and waits for free to end before the call
 * goes on. ASan: a read of the freed client is a heap-use-after-free. */

static client_t *rtarget;
static pthread_t holder, refused;
static atomic_int holder_armed, holder_stopped, holder_go, refused_armed, refused_seen;

static void refused_hook(client_t *cl, int where) {
  if (cl != rtarget) return;
  if (where == RLOCK__AT_ANSWERED && pthread_equal(pthread_self(), holder) && atomic_exchange(&holder_armed, 0)) {
    atomic_store(&holder_stopped, 1);
    th_wait_until(is_set, &holder_go, 10000);
  } else if (where == RLOCK__AT_REFUSED && pthread_equal(pthread_self(), refused) &&
             atomic_exchange(&refused_armed, 0)) {
    atomic_store(&refused_seen, 1);
    atomic_store(&holder_go, 1);
    th_wait_until(is_set, &freed, 10000); /* free ends: nobody is inside */
  }
}

static void *holder_main(void *arg) {
  rlock_lock_t *l = arg;
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked)); /* stops after its answer (refused_hook) */
  return NULL;
}

static int closing(void *arg) { return atomic_load(&((client_t *)arg)->closing); }

static void ignore_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)status, (void)value, (void)arg;
}
static void ignore_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t why, void *arg) {
  (void)name, (void)len, (void)owner, (void)why, (void)arg;
}

enum { C_STATS, C_ON_LOST, C_LOCK, C_UNLOCK, C_ASYNC, C_COMMAND, C_HOLDERS, C_NODE, C_FORCE, C_COUNT };
static const char *const call_names[C_COUNT] = {"stats",   "on_lost", "lock", "unlock",      "acquire_async",
                                                "command", "holders", "node", "force_unlock"};

/* Makes call `which` on c while free runs; its result (RLOCK_ECLOSED). */
static int refused_call(rlock_client_t *c, rlock_lock_t *l, int which) {
  int rc = RLOCK_ECLOSED;
  switch (which) {
  case C_STATS: {
    rlock_stats_t st;
    rlock_client_stats(c, &st);
    break;
  }
  case C_ON_LOST: rlock_client_on_lost(c, ignore_lost, NULL); break;
  case C_LOCK: rc = rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG); break;
  case C_UNLOCK: rc = rlock_lock_unlock(l); break;
  case C_ASYNC:
    rc = rlock_lock_acquire_async(l, RLOCK_OWNER_SELF, 0, RLOCK_LEASE_WATCHDOG, NULL, ignore_cb, NULL);
    break;
  case C_COMMAND: {
    const char *argv[] = {"PING"};
    rlock_reply_t *reply = NULL;
    rc = rlock_client_command(c, 1, argv, NULL, &reply);
    rlock_reply_free(reply);
    break;
  }
  case C_HOLDERS: {
    rlock_holder_t *h = NULL;
    size_t n = 0;
    rc = rlock_lock_holders(l, &h, &n);
    rlock_holders_free(h, n);
    break;
  }
  case C_NODE: {
    char buf[128];
    rc = rlock_lock_node(l, buf, sizeof buf);
    break;
  }
  case C_FORCE: rc = rlock_lock_force_unlock(l, NULL); break;
  }
  return rc;
}

TEST(calls_refused_while_freeing_touch_nothing) {
  for (int which = 0; which < C_COUNT; which++) {
    fprintf(stderr, "  call: %s\n", call_names[which]);
    rlock_client_t *c = th_client(srv->url, 0);
    rlock_lock_t *l = th_lock(c, "free:refused");
    rlock_lock_t *lh = th_lock(c, "free:refused-holder");
    rtarget = c;
    atomic_store(&holder_stopped, 0), atomic_store(&holder_go, 0), atomic_store(&refused_seen, 0);
    atomic_store(&freed, 0);
    atomic_store(&holder_armed, 1);
    CHECK_EQ(pthread_create(&holder, NULL, holder_main, lh), 0);
    CHECK(th_wait_until(is_set, &holder_stopped, 10000));
    CHECK_EQ(pthread_create(&freer, NULL, free_client, c), 0);
    CHECK(th_wait_until(closing, c, 10000)); /* c is not freed: the holder is inside */
    refused = pthread_self();
    atomic_store(&refused_armed, 1);
    int rc = refused_call(c, l, which);
    CHECK(atomic_load(&refused_seen));
    CHECK_RC(rc, RLOCK_ECLOSED);
    atomic_store(&holder_go, 1);
    pthread_join(holder, NULL);
    pthread_join(freer, NULL);
    CHECK(atomic_load(&freed));
    rtarget = NULL;
    rlock_lock_free(l);
    rlock_lock_free(lh);
  }
}

/* ---- a call inside the client (entered before free began) opens its fast
 * window only after free's wait for the fast calls ended: the window is
 * refused (closing), but for a moment it is counted. The I/O thread may
 * close in that moment: the count is not "a fast call under way" (only a
 * window opened before `closing` is, and free waited for those). The seam
 * holds the call before its count until `stopping`, then with its count up
 * while the I/O thread closes. Before: RLOCK__ASSERT(fast.calls == 0) in
 * begin_close aborted the process. */

static client_t *ltarget;
static atomic_int late_armed;

static int never(void *arg) {
  (void)arg;
  return 0;
}

static void late_window_hook(client_t *cl, int where) {
  if (cl != ltarget || !pthread_equal(pthread_self(), caller) || !atomic_load(&late_armed)) return;
  if (where == RLOCK__AT_FAST_BEGIN) {
    CHECK_EQ(pthread_create(&freer, NULL, free_client, cl), 0);
    CHECK(th_wait_until(stopping, cl, 10000)); /* cl is not freed: this call is inside */
  } else if (where == RLOCK__AT_FAST_COUNTED) {
    atomic_store(&late_armed, 0);
    th_wait_until(never, NULL, 300); /* the I/O thread closes meanwhile (no timing claim) */
  }
}

TEST(window_counted_after_free_waited_is_no_fast_call) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "free:late-window");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l)); /* its next acquire may be fast */
  ltarget = c;
  caller = pthread_self();
  atomic_store(&freed, 0);
  atomic_store(&late_armed, 1);
  int rc = rlock_lock_trylock(l, 0, RLOCK_LEASE_WATCHDOG);
  CHECK(!atomic_load(&late_armed)); /* the seam ran */
  CHECK_RC(rc, RLOCK_ECLOSED);
  pthread_join(freer, NULL);
  CHECK(atomic_load(&freed));
  ltarget = NULL;
  rlock_lock_free(l);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "free:late-window", NULL), 0);
}

/* ---- rlock_client_stats in a forked child: it takes no mutex (rlock.h:
 * every call on an inherited client fails at once, before it takes any).
 * Another thread of the parent holds the stats mutex at the fork, as the
 * I/O thread does while it applies a fast hold's post: in the child nobody
 * ever lets it go. Before: the child's stats call blocked for ever. */

typedef struct statmu_holder {
  client_t *cl;
  atomic_int held, release;
} statmu_holder_t;

static void *hold_statmu(void *arg) {
  statmu_holder_t *h = arg;
  pthread_mutex_lock(&h->cl->fast.statmu);
  atomic_store(&h->held, 1);
  th_wait_until(is_set, &h->release, 10000);
  pthread_mutex_unlock(&h->cl->fast.statmu);
  return NULL;
}

TEST(stats_in_forked_child_take_no_mutex) {
  rlock_client_t *c = th_client(srv->url, 0);
  statmu_holder_t h = {.cl = c};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, hold_statmu, &h), 0);
  CHECK(th_wait_until(is_set, &h.held, 10000));
  pid_t pid = th_fork();
  if (pid == 0) {
    rlock_stats_t st;
    memset(&st, 0xff, sizeof st);
    rlock_client_stats(c, &st); /* the client is the parent's: zeros */
    th_exit_by_exec(st.commands_sent == 0 && st.fast_calls == 0 ? 0 : 1);
  }
  CHECK(pid > 0);
  atomic_store(&h.release, 1);
  pthread_join(t, NULL);
  int st = -1;
  int64_t end = th_now_ms() + 10000;
  pid_t r = 0;
  while ((r = waitpid(pid, &st, WNOHANG)) == 0 && th_now_ms() < end) th_sleep_ms(5);
  if (r == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  CHECK_MSG(r == pid, "the child's rlock_client_stats blocked (the parent's stats mutex)");
  CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's stats were not zeros (status %d)", st);
  rlock_client_free(c);
}

/* An optional argument runs only the tests whose name contains it. */
#define RUN_IF(name) \
  if (argc < 2 || strstr(#name, argv[1])) RUN(name)

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  rlock__test_call_hook = hook;
  const char *extra[] = {"--enable-debug-command", "yes", NULL};
  th_server_opts_t o = {.extra_args = extra};
  srv = th_server_start(&o);
  RUN_IF(release_answered_then_freed);
  RUN_IF(fast_fallback_then_freed);
  RUN_IF(fast_lost_answer_undone_when_stopping);
  RUN_IF(calls_refused_while_freeing_touch_nothing);
  RUN_IF(window_counted_after_free_waited_is_no_fast_call);
  RUN_IF(stats_in_forked_child_take_no_mutex);
  th_server_stop(srv);
  return th_done();
}
