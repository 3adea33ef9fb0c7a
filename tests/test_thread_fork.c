/* test_thread_fork.c -- what a fork and an exiting thread leave behind:
 *
 *  - a forked child inherits the library's mutexes as they were at the fork;
 *    one held then by another thread (which does not exist in the child)
 *    stays locked for ever. Every call of the child on what it inherited
 *    (a client, a MultiLock, a RedLock) must fail with RLOCK_ESYS before it
 *    takes a mutex: a MultiLock whose lost callback is running (its callback
 *    mutex held), a RedLock in the middle of an acquire (its op mutex held),
 *    a client whose lost callback is being set (its callback mutex held);
 *  - a request freed on a thread after that thread's spare list was freed
 *    (its thread-exit cleanup ran) is freed, not kept on a list no one
 *    frees again (the leak checkers judge it: ASan's, valgrind's).
 *
 * A forked child ends by exec (th_exit_by_exec: valgrind judges /bin/sh, not
 * the parent's memory the child inherited); the parent waits for it at most
 * CHILD_MS and fails the test when it hangs. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

#define CHILD_MS 10000 /* a child that fails fast is gone in milliseconds (valgrind: a second) */

/* The child's exit status, or -1 if it still ran after ms (then killed). */
static int wait_child_bounded(pid_t pid, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(r == 0);
    if (th_now_ms() > end) {
      kill(pid, SIGKILL);
      th_wait_child(pid);
      return -1;
    }
    th_sleep_ms(5); /* no event announces a child that hangs */
  }
}

static int says_forked(void) { return strstr(rlock_last_error(), "forked child") != NULL; }
/* Another message, so that says_forked() judges the call after it. */
static void reset_msg(void) {
  int64_t ms;
  CHECK_RC(rlock_duration_parse("not a duration", &ms), RLOCK_EINVAL);
}

/* ------------------------------------------------------------ MultiLock */

/* A lost callback that stays in (holding the MultiLock's callback mutex)
 * until the test lets it go. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int in, go, out;
} gate_t;

static void blocking_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)owner, (void)reason;
  gate_t *g = arg;
  pthread_mutex_lock(&g->mu);
  g->in = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->go) pthread_cond_wait(&g->cv, &g->mu);
  g->out = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* Waits (at most ms) until *flag is set under g->mu; its value. */
static int gate_wait(gate_t *g, int *flag, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  pthread_mutex_lock(&g->mu);
  while (!*flag && pthread_cond_timedwait(&g->cv, &g->mu, &ts) != ETIMEDOUT) {
  }
  int v = *flag;
  pthread_mutex_unlock(&g->mu);
  return v;
}

/* In the child: exit status = the number of the first failed check. */
static int multilock_child(rlock_multilock_t *m, rlock_lock_t *a) {
  reset_msg();
  rlock_multilock_on_lost(m, NULL, NULL); /* the old code: waits for cbmu for ever */
  if (!says_forked()) return 1;
  if (rlock_multilock_acquire(m, 43, 0, 5000, NULL) != RLOCK_ESYS) return 2;
  if (rlock_multilock_release(m, 43) != RLOCK_ESYS) return 3;
  int64_t vu = 0;
  if (rlock_multilock_valid_until(m, 42, &vu) != RLOCK_ESYS) return 4;
  rlock_lock_t *members[1] = {a};
  rlock_multilock_t *m2 = NULL;
  if (rlock_multilock_new(&m2, members, 1) != RLOCK_ESYS || m2) return 5;
  if (!says_forked()) return 6;
  rlock_multilock_free(m); /* touches nothing: must not hang */
  return 0;
}

TEST(multilock_child_fails_fast_while_lost_callback_runs) {
  /* a 3 s watchdog: a renewal every second finds the deleted hold */
  rlock_client_t *c = th_client(srv->url, 3000), *o = th_client(srv->url, 0);
  rlock_lock_t *a = th_lock(c, "tf:ml"), *oa = th_lock(o, "tf:ml");
  rlock_lock_t *members[1] = {a};
  rlock_multilock_t *m = NULL;
  CHECK_OK(rlock_multilock_new(&m, members, 1));
  gate_t g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  rlock_multilock_on_lost(m, blocking_lost, &g);
  CHECK_OK(rlock_multilock_acquire(m, 42, 0, RLOCK_LEASE_WATCHDOG, NULL));
  int was = 0;
  CHECK_OK(rlock_lock_force_unlock(oa, &was));
  CHECK_EQ(was, 1);
  /* bound: 10 watchdog periods, for a loaded machine */
  CHECK_MSG(gate_wait(&g, &g.in, 30000), "the MultiLock's lost callback did not run");
  pid_t pid = th_fork(); /* while the callback holds the MultiLock's callback mutex */
  if (pid == 0) th_exit_by_exec(multilock_child(m, a));
  int st = wait_child_bounded(pid, CHILD_MS);
  pthread_mutex_lock(&g.mu);
  g.go = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  CHECK(gate_wait(&g, &g.out, 30000));
  CHECK_MSG(st != -1, "the forked child hangs in a MultiLock call (a mutex held at the fork)");
  CHECK_MSG(st == 0, "child check %d failed", st);
  /* the parent's MultiLock still works */
  rlock_multilock_on_lost(m, NULL, NULL);
  CHECK_OK(rlock_multilock_acquire(m, 44, 0, 30000, NULL));
  CHECK_OK(rlock_multilock_release(m, 44));
  rlock_multilock_free(m);
  rlock_lock_free(a), rlock_lock_free(oa);
  rlock_client_free(c), rlock_client_free(o);
}

/* ------------------------------------------------------------ RedLock */

typedef struct acquirer {
  rlock_redlock_t *r;
  rlock_cancel_t *cancel;
  int rc;
} acquirer_t;

static void *acquire_main(void *arg) {
  acquirer_t *a = arg;
  a->rc = rlock_redlock_acquire(a->r, 120000, 10000, a->cancel, NULL);
  return NULL;
}

static long long scripts_base;
static int scripts_ran(void *unused) {
  (void)unused;
  return th_scripts_run(srv) > scripts_base;
}

static void noop_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)owner, (void)reason, (void)arg;
}

static int redlock_child(rlock_redlock_t *r) {
  reset_msg();
  if (rlock_redlock_release(r) != RLOCK_ESYS) return 1; /* the old code: waits for op_mu for ever */
  if (!says_forked()) return 2;
  if (rlock_redlock_acquire(r, 0, 5000, NULL, NULL) != RLOCK_ESYS) return 3;
  if (rlock_redlock_set_node_timeout(r, 10) != RLOCK_ESYS) return 4;
  int64_t vu = 0;
  if (rlock_redlock_valid_until(r, &vu) != RLOCK_ESYS) return 5;
  int held = 0;
  int64_t ttl = 0;
  if (rlock_redlock_node_status(r, 0, &held, &ttl) != RLOCK_ESYS) return 6;
  reset_msg();
  rlock_redlock_on_lost(r, noop_lost, NULL);
  if (!says_forked()) return 7;
  rlock_redlock_free(r); /* touches nothing: must not hang */
  return 0;
}

TEST(redlock_child_fails_fast_while_acquire_waits) {
  /* another owner holds the lock: the RedLock's acquire retries its rounds
   * (holding its op mutex) until cancelled */
  rlock_client_t *o = th_client(srv->url, 0);
  rlock_lock_t *ol = th_lock(o, "tf:rl");
  CHECK_OK(rlock_lock_lock(ol, 120000));
  rlock_options_t opts;
  rlock_options_init(&opts);
  const char *urls[1] = {srv->url};
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &opts, urls, 1, "tf:rl", 5, 0));
  acquirer_t acq = {.r = r};
  CHECK_OK(rlock_cancel_new(&acq.cancel));
  scripts_base = th_scripts_run(srv);
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, acquire_main, &acq), 0);
  /* a round's try reached the server: the acquire is under way */
  CHECK_MSG(th_wait_until(scripts_ran, NULL, 30000), "the RedLock's acquire sent no try");
  pid_t pid = th_fork(); /* while the acquiring thread holds the RedLock's op mutex */
  if (pid == 0) th_exit_by_exec(redlock_child(r));
  int st = wait_child_bounded(pid, CHILD_MS);
  rlock_cancel_trigger(acq.cancel);
  pthread_join(th, NULL);
  CHECK_MSG(st != -1, "the forked child hangs in a RedLock call (a mutex held at the fork)");
  CHECK_MSG(st == 0, "child check %d failed", st);
  CHECK_EQ(acq.rc, RLOCK_ECANCELED);
  /* the parent's RedLock still works */
  CHECK_OK(rlock_lock_unlock(ol));
  CHECK_OK(rlock_redlock_acquire(r, 30000, 10000, NULL, NULL));
  CHECK_OK(rlock_redlock_release(r));
  rlock_cancel_free(acq.cancel);
  rlock_redlock_free(r);
  rlock_lock_free(ol);
  rlock_client_free(o);
}

/* ------------------------------------------------------------ client */

/* The client's callback mutex is held for a few instructions per
 * rlock_client_on_lost: many forks (at most BUSY_FORKS, for at most BUSY_MS)
 * while a thread sets the callback without pause; each child sets it too. */
#define BUSY_FORKS 1000
#define BUSY_MS 5000
static atomic_int busy_stop;
static void *set_lost_main(void *arg) {
  rlock_client_t *c = arg;
  for (unsigned long i = 0; !atomic_load(&busy_stop); i++) rlock_client_on_lost(c, i & 1 ? noop_lost : NULL, NULL);
  return NULL;
}

TEST(client_on_lost_in_child_fails_fast) {
  rlock_client_t *c = th_client(srv->url, 0);
  atomic_store(&busy_stop, 0);
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, set_lost_main, c), 0);
  int64_t end = th_now_ms() + BUSY_MS;
  int forks = 0, st = 0;
  for (; forks < BUSY_FORKS && th_now_ms() < end && st == 0; forks++) {
    pid_t pid = th_fork();
    if (pid == 0) {
      reset_msg();
      rlock_client_on_lost(c, noop_lost, NULL); /* the old code: may wait for cbmu for ever */
      th_exit_by_exec(says_forked() ? 0 : 1);
    }
    st = wait_child_bounded(pid, CHILD_MS);
  }
  atomic_store(&busy_stop, 1);
  pthread_join(th, NULL);
  printf("# %d forks\n", forks);
  CHECK_MSG(st != -1, "fork %d: the child hangs in rlock_client_on_lost (its mutex held at the fork)", forks);
  CHECK_MSG(st == 0, "fork %d: rlock_client_on_lost in the child did not say why it did nothing", forks);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ spare requests */

/* A thread's freed requests are kept for reuse on that thread, and freed
 * when it exits (a thread-specific key's destructor). A request freed on the
 * thread after that destructor ran (another key's destructor, called later:
 * a per-thread client's clean-up) must be freed at once. An invalid
 * transaction frees its MULTI request on the caller's thread. */
static pthread_key_t late_key;

static void bad_transaction(rlock_client_t *c) {
  rlock_command_t cmd = {.argc = 0, .argv = NULL, .argvlen = NULL};
  rlock_reply_t *reply = NULL;
  CHECK_RC(rlock_client_transaction(c, 1, &cmd, &reply), RLOCK_EINVAL);
}

static void late_cleanup(void *arg) { bad_transaction(arg); } /* after the spare list's destructor */

static void *exiting_main(void *arg) {
  bad_transaction(arg); /* this thread keeps a spare: its clean-up is registered */
  pthread_setspecific(late_key, arg);
  return NULL;
}

static void *nothing_main(void *arg) { return arg; }

TEST(request_freed_after_thread_cleanup) {
  rlock_client_t *c = th_client(srv->url, 0);
  bad_transaction(c); /* the library's key exists before late_key: its destructor runs first */
  CHECK_EQ(pthread_key_create(&late_key, late_cleanup), 0);
  for (int i = 0; i < 4; i++) {
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, exiting_main, c), 0);
    pthread_join(th, NULL);
  }
  /* a thread on the stack (and static TLS) of those that exited: what their
   * TLS pointed to is then unreachable for valgrind too */
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, nothing_main, NULL), 0);
  pthread_join(th, NULL);
  pthread_key_delete(late_key);
  rlock_client_free(c);
}

/* ONLY=name[,name...] runs only those tests. */
static int selected(const char *name) {
  const char *only = getenv("ONLY");
  return !only || strstr(only, name) != NULL;
}
#define RUN_SELECTED(name)          \
  do {                              \
    if (selected(#name)) RUN(name); \
  } while (0)

int main(int argc, char **argv) {
  th_init(argc, argv, 200);
  srv = th_server_start(NULL);
  RUN_SELECTED(request_freed_after_thread_cleanup);
  RUN_SELECTED(multilock_child_fails_fast_while_lost_callback_runs);
  RUN_SELECTED(redlock_child_fails_fast_while_acquire_waits);
  RUN_SELECTED(client_on_lost_in_child_fails_fast);
  th_server_stop(srv);
  return th_done();
}
