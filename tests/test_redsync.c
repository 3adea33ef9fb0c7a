/* test_redsync.c -- rlock shares locks with the real redsync (Go:
 * github.com/go-redsync/redsync/v4 with go-redis v9, from the Go module
 * proxy), driven line by line through tests/interop/redsync (a Go program
 * built into the build dir):
 *   simple_go_holds     one server: redsync holds, rlock's simple lock is
 *                       busy, then (polling) gets it once redsync unlocks;
 *                       redsync is busy while rlock holds
 *   simple_rlock_holds  one server: rlock holds, redsync (retrying) gets it
 *                       once rlock releases; rlock's release never deletes
 *                       redsync's token, and redsync's Extend keeps its own
 *   redlock_go_holds    three servers: redsync's RedLock holds, rlock's
 *                       RedLock (simple format) is busy, then gets it
 *   redlock_rlock_holds three servers: the reverse; redsync's token is then
 *                       on every server
 * Waits derive from server-side events (script calls counted by INFO
 * commandstats) and the peers' answers, never from sleeps. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#ifndef RLOCK_REDSYNC_PEER
#define RLOCK_REDSYNC_PEER ""
#endif

#define N 3

static th_server_t *srv[N];
static const char *urls[N];

typedef struct peer {
  pid_t pid;
  FILE *in, *out;
} peer_t;

/* Starts the redsync peer on the first n servers for lock name. */
static peer_t go_start(const char *name, int n) {
  int to[2], from[2];
  CHECK(pipe(to) == 0 && pipe(from) == 0);
  char ports[N][16];
  const char *argv[N + 3] = {RLOCK_REDSYNC_PEER, name};
  for (int i = 0; i < n; i++) {
    snprintf(ports[i], sizeof ports[i], "%d", srv[i]->port);
    argv[2 + i] = ports[i];
  }
  argv[2 + n] = NULL;
  pid_t pid = th_fork();
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]), close(from[0]);
    execv(RLOCK_REDSYNC_PEER, (char *const *)argv);
    _exit(127);
  }
  close(to[0]), close(from[1]);
  peer_t p = {pid, fdopen(to[1], "w"), fdopen(from[0], "r")};
  char line[64] = "";
  CHECK_MSG(fgets(line, sizeof line, p.out) && !strcmp(line, "ready\n"), "the redsync peer did not start");
  return p;
}

static void go_send(peer_t *p, const char *cmd) {
  fprintf(p->in, "%s\n", cmd);
  fflush(p->in);
}

static char *go_answer(peer_t *p) {
  char line[256] = "";
  CHECK_MSG(fgets(line, sizeof line, p->out), "the redsync peer ended");
  line[strcspn(line, "\n")] = 0;
  return strdup(line);
}

static void go_expect(peer_t *p, const char *cmd, const char *want) {
  go_send(p, cmd);
  char *got = go_answer(p);
  CHECK_MSG(!strcmp(got, want), "redsync '%s': got '%s', want '%s'", cmd, got, want);
  free(got);
}

static void go_stop(peer_t *p) {
  go_send(p, "quit");
  fclose(p->in);
  fclose(p->out);
  CHECK_EQ(th_wait_child(p->pid), 0);
}

typedef struct waiter {
  rlock_lock_t *l;    /* the simple lock, or */
  rlock_redlock_t *r; /* the RedLock */
  int rc;
  atomic_int done;
} waiter_t;

static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  w->rc = w->l ? rlock_lock_acquire(w->l, 1, 60000, 30000, NULL)
               : rlock_redlock_acquire(w->r, 60000, 30000, NULL, NULL);
  atomic_store(&w->done, 1);
  return NULL;
}
static int is_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }

static long long scripts0;
static int rlock_retried(void *arg) {
  (void)arg;
  return th_scripts_run(srv[0]) >= scripts0 + 2; /* rlock's acquire script: it polls */
}
static long long sets0;
static int go_retried(void *arg) {
  (void)arg;
  return th_cmdstat(srv[0], "set") >= sets0 + 2; /* redsync tries with SET NX PX */
}

static rlock_lock_t *simple(rlock_client_t *c, const char *name) {
  rlock_lock_t *l = NULL;
  CHECK_OK(rlock_lock_new_simple(c, name, strlen(name), &l));
  return l;
}

static rlock_redlock_t *redlock(const char *name) {
  rlock_options_t o;
  rlock_options_init(&o);
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &o, urls, N, name, strlen(name), RLOCK_REDLOCK_SIMPLE));
  return r;
}

TEST(simple_go_holds) {
  const char *name = "interop:rs-go";
  rlock_client_t *c = th_client(srv[0]->url, 0);
  peer_t p = go_start(name, 1);
  go_expect(&p, "acquire 30000 1", "ok");
  waiter_t w = {.l = simple(c, name)};
  CHECK_RC(rlock_lock_trylock(w.l, 0, 30000), RLOCK_EBUSY);
  scripts0 = th_scripts_run(srv[0]);
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(th_wait_until(rlock_retried, NULL, 20000));
  CHECK(!is_done(&w));
  go_expect(&p, "release", "released");
  /* polls are at most 500 ms apart: well under the 30 s TTL */
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "rlock slept while the lock was free");
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  go_expect(&p, "acquire 30000 1", "busy");
  CHECK_OK(rlock_lock_release(w.l, 1));
  go_stop(&p);
  rlock_lock_free(w.l);
  rlock_client_free(c);
}

TEST(simple_rlock_holds) {
  const char *name = "interop:rs-rlock";
  rlock_client_t *c = th_client(srv[0]->url, 0);
  rlock_lock_t *l = simple(c, name);
  peer_t p = go_start(name, 1);
  CHECK_OK(rlock_lock_trylock(l, 0, 30000));
  go_expect(&p, "acquire 30000 1", "busy");
  sets0 = th_cmdstat(srv[0], "set");
  go_send(&p, "acquire 30000 400"); /* retries every ~50 ms */
  CHECK(th_wait_until(go_retried, NULL, 20000));
  CHECK_OK(rlock_lock_unlock(l));
  char *got = go_answer(&p);
  CHECK_STREQ(got, "ok");
  free(got);
  go_send(&p, "value");
  char *token = go_answer(&p), *v = th_cmd_str(srv[0], "GET", name, NULL);
  CHECK_STREQ(v, token);
  free(v);
  CHECK_RC(rlock_lock_trylock(l, 0, 30000), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD); /* not rlock's token: left alone */
  v = th_cmd_str(srv[0], "GET", name, NULL);
  CHECK_STREQ(v, token);
  free(v);
  go_expect(&p, "extend", "extended");
  go_expect(&p, "release", "released");
  CHECK_EQ(th_cmd_int(srv[0], "EXISTS", name, NULL), 0);
  free(token);
  go_stop(&p);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(redlock_go_holds) {
  const char *name = "interop:rl-go";
  peer_t p = go_start(name, N);
  go_expect(&p, "acquire 30000 1", "ok");
  waiter_t w = {.r = redlock(name)};
  CHECK_RC(rlock_redlock_acquire(w.r, 0, 30000, NULL, NULL), RLOCK_EBUSY);
  scripts0 = th_scripts_run(srv[0]);
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(th_wait_until(rlock_retried, NULL, 20000));
  CHECK(!is_done(&w));
  go_expect(&p, "release", "released");
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "rlock did not get the lock after redsync released");
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  go_expect(&p, "acquire 30000 1", "busy");
  CHECK_OK(rlock_redlock_release(w.r));
  go_stop(&p);
  rlock_redlock_free(w.r);
}

TEST(redlock_rlock_holds) {
  const char *name = "interop:rl-rlock-go";
  rlock_redlock_t *r = redlock(name);
  peer_t p = go_start(name, N);
  CHECK_OK(rlock_redlock_acquire(r, 0, 30000, NULL, NULL));
  go_expect(&p, "acquire 30000 1", "busy");
  sets0 = th_cmdstat(srv[0], "set");
  go_send(&p, "acquire 30000 400");
  CHECK(th_wait_until(go_retried, NULL, 20000));
  CHECK_OK(rlock_redlock_release(r));
  char *got = go_answer(&p);
  CHECK_STREQ(got, "ok");
  free(got);
  go_send(&p, "value");
  char *value = go_answer(&p);
  /* redsync holds it on a majority: a node its try reached before rlock's
   * release landed there refused it (RedLock needs only the quorum), and no
   * node holds anyone else's value */
  int held = 0;
  for (int i = 0; i < N; i++) {
    char *v = th_cmd_str(srv[i], "GET", name, NULL);
    CHECK_MSG(!v || strcmp(v, value) == 0, "node %d holds %s, not redsync's %s", i, v, value);
    held += v != NULL;
    free(v);
  }
  CHECK_MSG(held > N / 2, "redsync's value on %d of %d nodes", held, N);
  free(value);
  CHECK_RC(rlock_redlock_acquire(r, 0, 30000, NULL, NULL), RLOCK_EBUSY);
  go_expect(&p, "release", "released");
  go_stop(&p);
  rlock_redlock_free(r);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  struct stat st;
  if (!*RLOCK_REDSYNC_PEER || stat(RLOCK_REDSYNC_PEER, &st) != 0) {
    printf("SKIP test_redsync: the redsync peer was not built (no go when the build was configured)\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < N; i++) {
    srv[i] = th_server_start(NULL);
    urls[i] = srv[i]->url;
  }
  RUN(simple_go_holds);
  RUN(simple_rlock_holds);
  RUN(redlock_go_holds);
  RUN(redlock_rlock_holds);
  for (int i = 0; i < N; i++) th_server_stop(srv[i]);
  return th_done();
}
