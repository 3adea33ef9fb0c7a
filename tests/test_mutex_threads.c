/* test_mutex_threads.c -- mutual exclusion under contention: 4 processes x
 * 100 and 8 threads x 200 read-modify-write cycles of unprotected counters
 * (a Redis key through rlock_client_command, and a plain int within one
 * client) under the lock; any overlap of two holders loses an increment. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

/* GET key, +1, SET key: deliberately not atomic. */
static void redis_increment(rlock_client_t *c, const char *key) {
  const char *get[] = {"GET", key};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(c, 2, get, NULL, &r));
  long long v = r->type == RLOCK_REPLY_NIL ? 0 : strtoll(r->str, NULL, 10);
  rlock_reply_free(r);
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", v + 1);
  const char *set[] = {"SET", key, buf};
  CHECK_OK(rlock_client_command(c, 3, set, NULL, &r));
  CHECK_EQ(r->type, RLOCK_REPLY_STATUS);
  rlock_reply_free(r);
}

#define NPROC 4
#define PROC_ITERS 100

TEST(processes) {
  /* Forked first: no client or thread exists yet in this process. */
  pid_t pids[NPROC];
  for (int p = 0; p < NPROC; p++) {
    pids[p] = th_fork();
    if (pids[p] == 0) {
      rlock_client_t *c = th_client(srv->url, 0);
      rlock_lock_t *l = th_lock(c, "mutex:proc");
      for (int i = 0; i < PROC_ITERS; i++) {
        CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
        redis_increment(c, "mutex:proc:counter");
        CHECK_OK(rlock_lock_unlock(l));
      }
      rlock_lock_free(l);
      rlock_client_free(c);
      _exit(0);
    }
  }
  for (int p = 0; p < NPROC; p++) CHECK_EQ(th_wait_child(pids[p]), 0);
  char *v = th_cmd_str(srv, "GET", "mutex:proc:counter", NULL);
  CHECK(v != NULL);
  CHECK_EQ(strtoll(v, NULL, 10), NPROC * PROC_ITERS);
  free(v);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "mutex:proc", NULL), 0);
}

#define NTHREADS 8
#define ITERS 200

static rlock_client_t *cli;
static rlock_lock_t *shared_lock;
static int plain_counter; /* protected only by the distributed lock */

static void *worker(void *arg) {
  (void)arg;
  for (int i = 0; i < ITERS; i++) {
    CHECK_OK(rlock_lock_lock(shared_lock, RLOCK_LEASE_WATCHDOG));
    int v = plain_counter;
    redis_increment(cli, "mutex:threads:counter");
    plain_counter = v + 1;
    CHECK_OK(rlock_lock_unlock(shared_lock));
  }
  return NULL;
}

TEST(threads) {
  cli = th_client(srv->url, 0);
  CHECK_OK(rlock_lock_new(cli, "mutex:threads", 13, &shared_lock));
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, worker, NULL), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  CHECK_EQ(plain_counter, NTHREADS * ITERS);
  char *v = th_cmd_str(srv, "GET", "mutex:threads:counter", NULL);
  CHECK(v != NULL);
  CHECK_EQ(strtoll(v, NULL, 10), NTHREADS * ITERS);
  free(v);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "mutex:threads", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(shared_lock);
  rlock_client_free(cli);
}

/* Threads of two clients on the same lock, mixing trylock with a wait. */
static rlock_client_t *cli2;
static rlock_lock_t *lock1, *lock2;

static void *mixed_worker(void *arg) {
  long id = (long)arg;
  rlock_lock_t *l = id % 2 ? lock1 : lock2;
  rlock_client_t *c = id % 2 ? cli : cli2;
  for (int i = 0; i < ITERS / 2; i++) {
    if (i % 2) CHECK_OK(rlock_lock_trylock(l, 20000, 10000));
    else CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
    /* Only the Redis counter here: between two clients the ordering goes
     * through Redis, which ThreadSanitizer cannot see. */
    redis_increment(c, "mutex:mixed:counter");
    CHECK_OK(rlock_lock_unlock(l));
  }
  return NULL;
}

TEST(two_clients_mixed) {
  cli = th_client(srv->url, 0);
  cli2 = th_client(srv->url, 0);
  lock1 = th_lock(cli, "mutex:mixed");
  lock2 = th_lock(cli2, "mutex:mixed");
  pthread_t t[NTHREADS];
  for (long i = 0; i < NTHREADS; i++) CHECK_EQ(pthread_create(&t[i], NULL, mixed_worker, (void *)i), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  char *v = th_cmd_str(srv, "GET", "mutex:mixed:counter", NULL);
  CHECK_EQ(strtoll(v, NULL, 10), NTHREADS * ITERS / 2);
  free(v);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "mutex:mixed", NULL), 0);
  rlock_lock_free(lock1);
  rlock_lock_free(lock2);
  rlock_client_free(cli);
  rlock_client_free(cli2);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 290);
  srv = th_server_start(NULL);
  RUN(processes);
  RUN(threads);
  RUN(two_clients_mixed);
  th_server_stop(srv);
  return th_done();
}
