/* test_redlock_node.c -- RedLock in the simple format (RLOCK_REDLOCK_SIMPLE)
 * shares one lock with the real node-redlock (npm `redlock` 5.0.0-beta.2,
 * pinned in bench/peers; scripts/test runs `npm ci` there) on the same three
 * redis-servers, driven through tests/interop/node_redlock.js:
 *   node_holds   node-redlock holds: rlock's RedLock is busy, then waits and
 *                gets it once node-redlock releases
 *   rlock_holds  rlock holds: node-redlock is busy, then (retrying) gets it
 *                once rlock releases; its value is then on every server */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define N 3
#define MODULES RLOCK_SOURCE_DIR "/bench/peers/node_modules"

static th_server_t *srv[N];
static const char *urls[N];

typedef struct peer {
  pid_t pid;
  FILE *in, *out;
} peer_t;

static peer_t node_start(const char *name) {
  CHECK_MSG(access(MODULES "/redlock/package.json", R_OK) == 0,
            "node-redlock is not installed: run 'npm ci' in bench/peers (scripts/test does)");
  int to[2], from[2];
  CHECK(pipe(to) == 0 && pipe(from) == 0);
  char ports[N][16];
  for (int i = 0; i < N; i++) snprintf(ports[i], sizeof ports[i], "%d", srv[i]->port);
  pid_t pid = th_fork();
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[1]), close(from[0]);
    setenv("NODE_PATH", MODULES, 1);
    execlp("node", "node", RLOCK_SOURCE_DIR "/tests/interop/node_redlock.js", name, ports[0], ports[1], ports[2],
           (char *)NULL);
    _exit(127);
  }
  close(to[0]), close(from[1]);
  peer_t p = {pid, fdopen(to[1], "w"), fdopen(from[0], "r")};
  char line[64] = "";
  CHECK_MSG(fgets(line, sizeof line, p.out) && !strcmp(line, "ready\n"), "node_redlock.js did not start");
  return p;
}

static void peer_send(peer_t *p, const char *cmd) {
  fprintf(p->in, "%s\n", cmd);
  fflush(p->in);
}

static char *peer_answer(peer_t *p) {
  char line[512] = "";
  CHECK_MSG(fgets(line, sizeof line, p->out), "node_redlock.js ended");
  line[strcspn(line, "\n")] = 0;
  return strdup(line);
}

static void peer_expect(peer_t *p, const char *cmd, const char *want) {
  peer_send(p, cmd);
  char *got = peer_answer(p);
  CHECK_MSG(!strcmp(got, want), "node-redlock '%s': got '%s', want '%s'", cmd, got, want);
  free(got);
}

static void peer_stop(peer_t *p) {
  peer_send(p, "quit");
  fclose(p->in);
  fclose(p->out);
  CHECK_EQ(th_wait_child(p->pid), 0);
}

static rlock_redlock_t *redlock(const char *name) {
  rlock_options_t o;
  rlock_options_init(&o);
  rlock_redlock_t *r = NULL;
  CHECK_OK(rlock_redlock_new(&r, &o, urls, N, name, strlen(name), RLOCK_REDLOCK_SIMPLE));
  CHECK_OK(rlock_redlock_set_node_timeout(r, 1000)); /* valgrind: answers, not speed */
  return r;
}

typedef struct waiter {
  rlock_redlock_t *r;
  int rc;
  atomic_int done;
} waiter_t;

static void *wait_thread(void *arg) {
  waiter_t *w = arg;
  w->rc = rlock_redlock_acquire(w->r, 60000, 30000, NULL, NULL);
  atomic_store(&w->done, 1);
  return NULL;
}

static int is_done(void *arg) { return atomic_load(&((waiter_t *)arg)->done); }

static long long scripts0;
static int rlock_retried(void *arg) {
  (void)arg;
  return th_scripts_run(srv[0]) >= scripts0 + 2; /* two rounds reached node 1 */
}

TEST(node_holds) {
  peer_t p = node_start("interop:rl-node");
  peer_expect(&p, "acquire 30000 0", "ok");
  waiter_t w = {.r = redlock("interop:rl-node")};
  CHECK_RC(rlock_redlock_acquire(w.r, 0, 30000, NULL, NULL), RLOCK_EBUSY);
  scripts0 = th_scripts_run(srv[0]);
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  CHECK(th_wait_until(rlock_retried, NULL, 20000));
  CHECK(!is_done(&w));
  peer_expect(&p, "release", "released");
  CHECK_MSG(th_wait_until(is_done, &w, 20000), "rlock did not get the lock after node-redlock released");
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  peer_expect(&p, "acquire 30000 0", "busy");
  CHECK_OK(rlock_redlock_release(w.r));
  peer_stop(&p);
  rlock_redlock_free(w.r);
}

static long long node_scripts0;
static int node_retried(void *arg) {
  (void)arg;
  return th_scripts_run(srv[1]) >= node_scripts0 + 2;
}

TEST(rlock_holds) {
  rlock_redlock_t *r = redlock("interop:rl-rlock");
  peer_t p = node_start("interop:rl-rlock");
  CHECK_OK(rlock_redlock_acquire(r, 0, 30000, NULL, NULL));
  peer_expect(&p, "acquire 30000 0", "busy");
  node_scripts0 = th_scripts_run(srv[1]);
  peer_send(&p, "acquire 30000 100"); /* retries every ~100 ms */
  CHECK(th_wait_until(node_retried, NULL, 20000));
  CHECK_OK(rlock_redlock_release(r));
  char *got = peer_answer(&p);
  CHECK_STREQ(got, "ok");
  free(got);
  peer_send(&p, "value");
  char *value = peer_answer(&p);
  for (int i = 0; i < N; i++) {
    char *v = th_cmd_str(srv[i], "GET", "interop:rl-rlock", NULL);
    CHECK_STREQ(v, value);
    free(v);
  }
  free(value);
  CHECK_RC(rlock_redlock_acquire(r, 0, 30000, NULL, NULL), RLOCK_EBUSY);
  peer_expect(&p, "release", "released");
  peer_stop(&p);
  rlock_redlock_free(r);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 170);
  signal(SIGPIPE, SIG_IGN); /* a helper that died is a failed read, not a killed test */
  for (int i = 0; i < N; i++) {
    srv[i] = th_server_start(NULL);
    urls[i] = srv[i]->url;
  }
  RUN(node_holds);
  RUN(rlock_holds);
  for (int i = 0; i < N; i++) th_server_stop(srv[i]);
  return th_done();
}
