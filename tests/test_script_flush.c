/* test_script_flush.c -- SCRIPT FLUSH on the server (the script cache is
 * emptied, e.g. by a failover or an operator): EVALSHA gets NOSCRIPT and
 * the client falls back to EVAL; acquire, unlock, renewals, force unlock
 * and waits keep working, also when flushes race with lock traffic. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

static void flush_scripts(void) {
  redisReply *r = th_cmd(srv, "SCRIPT", "FLUSH", NULL);
  CHECK(r->type == REDIS_REPLY_STATUS);
  th_reply_free(r);
}

static rlock_client_t *renew_client;
static uint64_t renew_target;
static int renewed(void *arg) {
  (void)arg;
  rlock_stats_t st;
  rlock_client_stats(renew_client, &st);
  return st.renewals >= renew_target;
}

TEST(between_operations) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "flush:lock");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_OK(rlock_lock_unlock(l));
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  uint64_t fallbacks0 = st.noscript_fallbacks;

  flush_scripts();
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "flush:lock", NULL), 1);
  flush_scripts();
  /* The renewal script too (watchdog 1000: renewals every ~333 ms): 5
   * renewals after the flush span more than one whole lease. */
  rlock_client_stats(c, &st);
  renew_client = c;
  renew_target = st.renewals + 5;
  CHECK_MSG(th_wait_until(renewed, NULL, 10000), "no renewals after SCRIPT FLUSH");
  CHECK(th_cmd_int(srv, "PTTL", "flush:lock", NULL) > 0);
  flush_scripts();
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "flush:lock", NULL), 0);
  flush_scripts();
  int was = -1;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 0);

  rlock_client_stats(c, &st);
  CHECK_MSG(st.noscript_fallbacks >= fallbacks0 + 2, "noscript_fallbacks %llu -> %llu",
            (unsigned long long)fallbacks0, (unsigned long long)st.noscript_fallbacks);
  CHECK_EQ(st.locks_lost, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(while_waiting) {
  rlock_client_t *a = th_client(srv->url, 0), *b = th_client(srv->url, 0);
  rlock_lock_t *la = th_lock(a, "flush:wait"), *lb = th_lock(b, "flush:wait");
  CHECK_OK(rlock_lock_lock(la, 800));
  flush_scripts();
  /* B waits; its retry after the lease ran out needs the script again. */
  CHECK_OK(rlock_lock_trylock(lb, 10000, 10000));
  flush_scripts();
  CHECK_OK(rlock_lock_unlock(lb));
  rlock_lock_free(la);
  rlock_lock_free(lb);
  rlock_client_free(a);
  rlock_client_free(b);
}

#define NTHREADS 4
#define ITERS 100
static rlock_client_t *cli;
static atomic_int running;

static void *locker(void *arg) {
  rlock_lock_t *l = arg;
  for (int i = 0; i < ITERS; i++) {
    CHECK_OK(rlock_lock_lock(l, 10000));
    CHECK_OK(rlock_lock_unlock(l));
  }
  atomic_fetch_sub(&running, 1);
  return NULL;
}

TEST(racing_flushes) {
  cli = th_client(srv->url, 0);
  rlock_lock_t *l[NTHREADS];
  pthread_t t[NTHREADS];
  atomic_store(&running, NTHREADS);
  for (int i = 0; i < NTHREADS; i++) {
    char name[32];
    snprintf(name, sizeof name, "flush:race:%d", i % 2);
    l[i] = th_lock(cli, name);
    CHECK_EQ(pthread_create(&t[i], NULL, locker, l[i]), 0);
  }
  int flushes = 0;
  while (atomic_load(&running) > 0) {
    flush_scripts();
    flushes++;
    th_sleep_ms(2); /* the scenario: a flush every ~2 ms while the threads lock */
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "flush:race:0", "flush:race:1", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  printf("# %d flushes, %llu fallbacks\n", flushes, (unsigned long long)st.noscript_fallbacks);
  CHECK(st.noscript_fallbacks > 0);
  CHECK_EQ(st.held, 0);
  for (int i = 0; i < NTHREADS; i++) rlock_lock_free(l[i]);
  rlock_client_free(cli);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(between_operations);
  RUN(while_waiting);
  RUN(racing_flushes);
  th_server_stop(srv);
  return th_done();
}
