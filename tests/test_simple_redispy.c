/* test_simple_redispy.c -- the simple lock (rlock_lock_new_simple) shares
 * one lock with the real redis-py Lock (Debian's python3-redis), driven
 * line by line through tests/interop/redispy_lock.py, on one redis-server:
 *   redispy_holds   redis-py holds: rlock is busy, then waits (polling: the
 *                   redis-py release publishes nothing) and gets it once
 *                   redis-py releases
 *   rlock_holds     rlock holds: redis-py is busy, then waits and gets it
 *                   once rlock releases
 *   spares_token    rlock's hold expired and redis-py took the name: rlock's
 *                   release answers RLOCK_ENOTHELD and leaves redis-py's
 *                   token; redis-py still owns and releases it
 * Waits derive from server-side events (SET calls counted by INFO
 * commandstats, key existence), never from sleeps. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define PYTHON "/usr/bin/python3" /* Debian's: python3-redis lives there */

static th_server_t *srv;

typedef struct py {
  pid_t pid;
  FILE *in, *out;
} py_t;

/* Starts redispy_lock.py on the server for lock name. */
static py_t py_start(const char *name) {
  int to[2], from[2];
  CHECK(pipe(to) == 0 && pipe(from) == 0);
  char port[16];
  snprintf(port, sizeof port, "%d", srv->port);
  pid_t pid = th_fork();
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]), close(from[0]);
    execl(PYTHON, PYTHON, RLOCK_SOURCE_DIR "/tests/interop/redispy_lock.py", port, name, (char *)NULL);
    _exit(127);
  }
  close(to[0]), close(from[1]);
  py_t p = {pid, fdopen(to[1], "w"), fdopen(from[0], "r")};
  char line[64] = "";
  CHECK_MSG(fgets(line, sizeof line, p.out) && !strcmp(line, "ready\n"),
            "redispy_lock.py did not start (is python3-redis installed?)");
  return p;
}

static void py_send(py_t *p, const char *cmd) {
  fprintf(p->in, "%s\n", cmd);
  fflush(p->in);
}

/* The answer line of the last command (malloc'd, without the newline). */
static char *py_answer(py_t *p) {
  char line[256] = "";
  CHECK_MSG(fgets(line, sizeof line, p->out), "redispy_lock.py ended");
  line[strcspn(line, "\n")] = 0;
  return strdup(line);
}

static void py_expect(py_t *p, const char *cmd, const char *want) {
  py_send(p, cmd);
  char *got = py_answer(p);
  CHECK_MSG(!strcmp(got, want), "redis-py '%s': got '%s', want '%s'", cmd, got, want);
  free(got);
}

static void py_stop(py_t *p) {
  py_send(p, "quit");
  fclose(p->in);
  fclose(p->out);
  CHECK_EQ(th_wait_child(p->pid), 0);
}

static rlock_lock_t *simple(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_simple(c, name, strlen(name), &l));
  return l;
}

typedef struct waiter {
  rlock_lock_t *l;
  int rc;
  atomic_int done;
} waiter_t;

static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  w->rc = rlock_lock_acquire(w->l, 1, 60000, 30000, NULL); /* owner 1: released by the test thread */
  atomic_store(&w->done, 1);
  return NULL;
}

static int is_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }

TEST(redispy_holds) {
  rlock_client_t *c = th_client(srv->url, 0);
  py_t py = py_start("interop:py-holds");
  py_expect(&py, "acquire 0 30", "ok");
  waiter_t w = {.l = simple(c, "interop:py-holds")};
  CHECK_RC(rlock_lock_trylock(w.l, 0, 30000), RLOCK_EBUSY);
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(TH_STAT_REACHES(c, acquire_attempts, 3, 20000)); /* rlock polls */
  CHECK(!is_done(&w));
  py_expect(&py, "release", "released");
  /* polls are at most 500 ms apart: 20 s is a margin for a loaded machine,
   * well under the 30 s that a waiter sleeping until the TTL would take */
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "rlock slept while the lock was free");
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  py_expect(&py, "acquire 0 30", "busy");
  CHECK_OK(rlock_lock_release(w.l, 1));
  py_stop(&py);
  rlock_lock_free(w.l);
  rlock_client_free(c);
}

static long long set_calls0;
static int redispy_retried(void *arg) {
  (void)arg;
  return th_cmdstat(srv, "set") >= set_calls0 + 2; /* redis-py polls with SET NX */
}

TEST(rlock_holds) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = simple(c, "interop:rlock-holds");
  py_t py = py_start("interop:rlock-holds");
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  py_expect(&py, "acquire 0 30", "busy");
  set_calls0 = th_cmdstat(srv, "set");
  py_send(&py, "acquire 20 30"); /* waits (polls every 0.1 s) */
  CHECK(th_wait_until(redispy_retried, NULL, 20000));
  CHECK_OK(rlock_lock_unlock(l));
  char *got = py_answer(&py);
  CHECK_STREQ(got, "ok");
  free(got);
  py_send(&py, "token");
  char *token = py_answer(&py), *v = th_cmd_str(srv, "GET", "interop:rlock-holds", NULL);
  CHECK_STREQ(v, token);
  free(token), free(v);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_EBUSY);
  py_expect(&py, "release", "released");
  py_stop(&py);
  rlock_lock_free(l);
  rlock_client_free(c);
}

static int key_gone(void *name) { return th_cmd_int(srv, "EXISTS", name, NULL) == 0; }

TEST(spares_token) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = simple(c, "interop:spare");
  py_t py = py_start("interop:spare");
  CHECK_OK(rlock_lock_trylock(l, 0, 200)); /* a short fixed lease */
  CHECK(th_wait_until(key_gone, "interop:spare", 20000));
  py_expect(&py, "acquire 0 30", "ok");
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  py_expect(&py, "owned", "yes");
  py_expect(&py, "release", "released");
  py_stop(&py);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  signal(SIGPIPE, SIG_IGN); /* a helper that died is a failed read, not a killed test */
  srv = th_server_start(NULL);
  RUN(redispy_holds);
  RUN(rlock_holds);
  RUN(spares_token);
  th_server_stop(srv);
  return th_done();
}
