/* test_script_flush.c -- SCRIPT FLUSH on the server (the script cache is
 * emptied, e.g. by a failover or an operator): EVALSHA gets NOSCRIPT and
 * the client falls back to EVAL; acquire, unlock, renewals, force unlock
 * and waits keep working, also when flushes race with lock traffic. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"
#include "../lib/scripts.h"

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
  CHECK_MSG(st.noscript_fallbacks >= fallbacks0 + 2, "noscript_fallbacks %llu -> %llu", (unsigned long long)fallbacks0,
            (unsigned long long)st.noscript_fallbacks);
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

/* The handshake asks SCRIPT EXISTS and loads only the scripts the server
 * lacks: a reconnect to a server that kept them loads none (one command, not
 * one compile per script; with 40 scripts that delayed the first renewals
 * after a reconnect: test_watchdog reconnects_during_rounds lost 500 to 3000
 * holds), one that lost them (SCRIPT FLUSH) gets them all again. */
#define ONE_SCRIPT(e, file) +1
#define NSCRIPTS (0 RLOCK__SCRIPT_MAP(ONE_SCRIPT))
static rlock_client_t *rc_client;
static long long rc_reconnects;
static int reconnected(void *arg) {
  (void)arg;
  rlock_stats_t st;
  rlock_client_stats(rc_client, &st);
  return (long long)st.reconnects > rc_reconnects;
}
/* SCRIPT LOAD has run at least *(long long *)arg times. */
static int loads_reach(void *arg) { return th_cmdstat(srv, "script|load") >= *(long long *)arg; }
static void kill_and_wait(void) {
  rlock_stats_t st;
  rlock_client_stats(rc_client, &st);
  rc_reconnects = (long long)st.reconnects;
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes", NULL));
  CHECK_MSG(th_wait_until(reconnected, NULL, 10000), "no reconnect");
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(rc_client, 1, (const char *[]){"PING"}, NULL, &r));
  rlock_reply_free(r);
}

TEST(reconnect_loads_only_missing) {
  th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
  th_reply_free(th_cmd(srv, "CONFIG", "RESETSTAT", NULL));
  rc_client = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(rc_client, "flush:handshake");
  CHECK_OK(rlock_lock_trylock(l, 0, 10000));
  CHECK_OK(rlock_lock_unlock(l));
  long long loads = th_cmdstat(srv, "script|load"), exists = th_cmdstat(srv, "script|exists");
  CHECK_MSG(loads == NSCRIPTS, "first connect: %lld SCRIPT LOADs for %d scripts", loads, NSCRIPTS);
  CHECK_EQ(exists, 1);
  kill_and_wait();
  CHECK_MSG(th_cmdstat(srv, "script|load") == loads, "a reconnect loaded %lld scripts the server had",
            th_cmdstat(srv, "script|load") - loads);
  CHECK(th_cmdstat(srv, "script|exists") >= exists + 1);
  th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
  kill_and_wait();
  /* the command connection's handshake loads them; the PING above may have
   * gone on another connection back first (ASan, a loaded machine: 18 of 38
   * loaded when it came back) */
  long long want = loads + NSCRIPTS;
  CHECK_MSG(th_wait_until(loads_reach, &want, 10000), "%lld SCRIPT LOADs after a SCRIPT FLUSH, want %d",
            th_cmdstat(srv, "script|load") - loads, NSCRIPTS);
  CHECK_OK(rlock_lock_trylock(l, 0, 10000)); /* EVALSHA, no NOSCRIPT needed */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmdstat(srv, "script|load"), loads + NSCRIPTS); /* each once */
  rlock_lock_free(l);
  rlock_client_free(rc_client);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(between_operations);
  RUN(while_waiting);
  RUN(racing_flushes);
  RUN(reconnect_loads_only_missing);
  th_server_stop(srv);
  return th_done();
}
