/* test_lock_basic.c -- the reentrant lock on one server: lock/unlock, the
 * exact Redisson layout in Redis (hash NAME, field "<client id>:<thread id>"
 * = hold count, PTTL = lease), reentrancy, queries, unlock by non-owners,
 * explicit owners, name and argument validation, holders, force unlock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;
static rlock_client_t *cli;

static const char *self_id(char *buf, size_t len) {
  return th_owner_id(cli, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), buf, len);
}

TEST(client_id) {
  const char *id = rlock_client_id(cli);
  CHECK(id != NULL);
  CHECK_EQ(strlen(id), 36);
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) CHECK_EQ(id[i], '-');
    else CHECK_MSG(strchr("0123456789abcdef", id[i]) != NULL, "client id %s not lower hex", id);
  }
  CHECK(strchr("89ab", id[19]) != NULL); /* RFC 4122 variant */
  CHECK_EQ(id[14], '4');                 /* random (version 4) */
  rlock_client_t *other = th_client(srv->url, 0);
  CHECK(strcmp(rlock_client_id(other), id) != 0);
  rlock_client_free(other);
}

TEST(lock_unlock_layout) {
  rlock_lock_t *l = th_lock(cli, "basic:layout");
  size_t len = 0;
  const char *name = rlock_lock_name(l, &len);
  CHECK_EQ(len, 12);
  CHECK(memcmp(name, "basic:layout", 12) == 0);

  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  char owner[128];
  self_id(owner, sizeof owner);
  redisReply *r = th_cmd(srv, "TYPE", "basic:layout", NULL);
  CHECK_STREQ(r->str, "hash");
  th_reply_free(r);
  r = th_cmd(srv, "HGETALL", "basic:layout", NULL);
  CHECK_EQ(r->elements, 2);
  CHECK_STREQ(r->element[0]->str, owner);
  CHECK_STREQ(r->element[1]->str, "1");
  th_reply_free(r);
  long long pttl = th_cmd_int(srv, "PTTL", "basic:layout", NULL);
  CHECK_MSG(pttl > 20000 && pttl <= 30000, "PTTL %lld, want about the watchdog 30000", pttl);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:layout", NULL), 0);

  /* A fixed lease. */
  CHECK_OK(rlock_lock_lock(l, 7000));
  pttl = th_cmd_int(srv, "PTTL", "basic:layout", NULL);
  CHECK_MSG(pttl > 5000 && pttl <= 7000, "PTTL %lld, want about the lease 7000", pttl);
  CHECK_EQ(th_hget_num(srv, "basic:layout", owner), 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:layout", NULL), 0);
  rlock_lock_free(l);
}

TEST(reentrancy) {
  rlock_lock_t *l = th_lock(cli, "basic:reentrant");
  char owner[128];
  self_id(owner, sizeof owner);
  int64_t n = -1;
  for (int i = 1; i <= 3; i++) {
    CHECK_OK(rlock_lock_lock(l, 20000));
    CHECK_EQ(th_hget_num(srv, "basic:reentrant", owner), i);
    CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
    CHECK_EQ(n, i);
  }
  CHECK_OK(rlock_lock_trylock(l, 0, 20000)); /* trylock re-enters too */
  CHECK_EQ(th_hget_num(srv, "basic:reentrant", owner), 4);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "basic:reentrant", NULL), 1);
  for (int i = 3; i >= 1; i--) {
    CHECK_OK(rlock_lock_unlock(l));
    CHECK_EQ(th_hget_num(srv, "basic:reentrant", owner), i);
    CHECK(th_cmd_int(srv, "PTTL", "basic:reentrant", NULL) > 10000);
  }
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:reentrant", NULL), 0);
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
  CHECK_EQ(n, 0);
  CHECK_RC(rlock_lock_unlock(l), RLOCK_ENOTHELD);
  rlock_lock_free(l);
}

TEST(queries) {
  rlock_lock_t *l = th_lock(cli, "basic:queries");
  int v = -1;
  int64_t ttl = 0, until = 0;
  CHECK_OK(rlock_lock_is_locked(l, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(rlock_lock_ttl(l, &ttl));
  CHECK_EQ(ttl, -2);
  CHECK_RC(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until), RLOCK_ENOTHELD);

  int64_t before = rlock_now_ms();
  CHECK_OK(rlock_lock_lock(l, 9000));
  CHECK_OK(rlock_lock_is_locked(l, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_lock_is_held(l, 12345, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(rlock_lock_ttl(l, &ttl));
  CHECK_MSG(ttl > 7000 && ttl <= 9000, "ttl %lld", (long long)ttl);
  CHECK_OK(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until));
  CHECK_MSG(until >= before + 9000 && until <= rlock_now_ms() + 9000, "valid_until %lld", (long long)(until - before));
  CHECK(rlock_now_ms() < until);
  /* rlock_now_ms is CLOCK_MONOTONIC in ms, like the harness clock: read
   * between two harness reads, it lies between them (no timing bound). */
  int64_t t_before = th_now_ms(), t_lib = rlock_now_ms(), t_after = th_now_ms();
  CHECK_MSG(t_before <= t_lib && t_lib <= t_after, "rlock_now_ms %lld outside [%lld, %lld]", (long long)t_lib,
            (long long)t_before, (long long)t_after);

  /* A key without TTL: ttl -1. */
  th_reply_free(th_cmd(srv, "PERSIST", "basic:queries", NULL));
  CHECK_OK(rlock_lock_ttl(l, &ttl));
  CHECK_EQ(ttl, -1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_ttl(l, &ttl));
  CHECK_EQ(ttl, -2);
  CHECK_RC(rlock_lock_valid_until(l, RLOCK_OWNER_SELF, &until), RLOCK_ENOTHELD);
  rlock_lock_free(l);
}

struct thread_arg {
  rlock_lock_t *lock;
  rlock_owner_t owner;
  int rc;
  int v;
};

static void *unlock_other_thread(void *p) {
  struct thread_arg *a = p;
  a->rc = rlock_lock_unlock(a->lock);
  rlock_lock_is_held(a->lock, RLOCK_OWNER_SELF, &a->v);
  return NULL;
}

static void *release_owner_thread(void *p) {
  struct thread_arg *a = p;
  a->rc = rlock_lock_release(a->lock, a->owner);
  return NULL;
}

TEST(unlock_by_non_owner) {
  rlock_lock_t *l = th_lock(cli, "basic:nonowner");
  char owner[128];
  self_id(owner, sizeof owner);
  CHECK_OK(rlock_lock_lock(l, 20000));

  /* Another thread of the same client. */
  struct thread_arg a = {.lock = l, .v = -1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, unlock_other_thread, &a), 0);
  pthread_join(t, NULL);
  CHECK_RC(a.rc, RLOCK_ENOTHELD);
  CHECK_EQ(a.v, 0);
  CHECK_EQ(th_hget_num(srv, "basic:nonowner", owner), 1);

  /* Another owner value. */
  CHECK_RC(rlock_lock_release(l, 987654321), RLOCK_ENOTHELD);
  /* Another client, same thread id. */
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *lo = th_lock(other, "basic:nonowner");
  CHECK_RC(rlock_lock_unlock(lo), RLOCK_ENOTHELD);
  CHECK_RC(rlock_lock_trylock(lo, 0, 10000), RLOCK_EBUSY);
  rlock_lock_free(lo);
  rlock_client_free(other);

  CHECK_EQ(th_hget_num(srv, "basic:nonowner", owner), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "basic:nonowner", NULL), 1);
  CHECK(th_cmd_int(srv, "PTTL", "basic:nonowner", NULL) > 10000);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:nonowner", NULL), 0);
  rlock_lock_free(l);
}

TEST(explicit_owner) {
  rlock_lock_t *l = th_lock(cli, "basic:owner");
  char o777[128], self[128];
  th_owner_id(cli, 777, o777, sizeof o777);
  self_id(self, sizeof self);
  CHECK_OK(rlock_lock_acquire(l, 777, 0, 20000, NULL));
  CHECK_EQ(th_hget_num(srv, "basic:owner", o777), 1);
  CHECK_OK(rlock_lock_acquire(l, 777, RLOCK_WAIT_FOREVER, 20000, NULL));
  CHECK_EQ(th_hget_num(srv, "basic:owner", o777), 2);
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, 777, &n));
  CHECK_EQ(n, 2);
  /* The calling thread is a different owner: busy. */
  CHECK_RC(rlock_lock_trylock(l, 0, 20000), RLOCK_EBUSY);
  CHECK_RC(rlock_lock_acquire(l, 778, 0, 20000, NULL), RLOCK_EBUSY);
  CHECK_EQ(th_hget_num(srv, "basic:owner", self), -1000);

  /* Released from another thread by owner value. */
  struct thread_arg a = {.lock = l, .owner = 777};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, release_owner_thread, &a), 0);
  pthread_join(t, NULL);
  CHECK_OK(a.rc);
  CHECK_EQ(th_hget_num(srv, "basic:owner", o777), 1);
  CHECK_OK(rlock_lock_release(l, 777));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:owner", NULL), 0);
  CHECK_RC(rlock_lock_release(l, 777), RLOCK_ENOTHELD);

  /* RLOCK_OWNER_SELF through the general form is RLOCK_OWNER_THREAD | thread id. */
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 0, 20000, NULL));
  CHECK_EQ(th_hget_num(srv, "basic:owner", self), 1);
  CHECK_OK(rlock_lock_release(l, RLOCK_OWNER_THREAD | (rlock_owner_t)th_gettid()));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:owner", NULL), 0);

  /* Big owner values are stored in decimal (the top bit marks thread owners). */
  uint64_t big = ~RLOCK_OWNER_THREAD;
  char obig[128];
  th_owner_id(cli, big, obig, sizeof obig);
  CHECK(strstr(obig, ":owner-9223372036854775807") != NULL);
  CHECK_OK(rlock_lock_acquire(l, big, 0, 20000, NULL));
  CHECK_EQ(th_hget_num(srv, "basic:owner", obig), 1);
  CHECK_OK(rlock_lock_release(l, big));
  rlock_lock_free(l);
}

TEST(names) {
  rlock_lock_t *l = NULL;
  CHECK_RC(rlock_lock_new(cli, "", 0, &l), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_new(cli, NULL, 3, &l), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_new(NULL, "x", 1, &l), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_new(cli, "x", 1, NULL), RLOCK_EINVAL);

  /* Binary name with NUL bytes: the key is exactly those bytes. */
  const char bin[] = {'b', 0, 'i', (char)0xff, 'n', 0, '{', '}'};
  CHECK_OK(rlock_lock_new(cli, bin, sizeof bin, &l));
  size_t len = 0;
  CHECK(memcmp(rlock_lock_name(l, &len), bin, sizeof bin) == 0);
  CHECK_EQ(len, sizeof bin);
  CHECK_OK(rlock_lock_lock(l, 20000));
  const char *ex[] = {"EXISTS", bin};
  size_t exl[] = {6, sizeof bin};
  redisReply *r = th_cmdv(srv, 2, ex, exl);
  CHECK_EQ(r->integer, 1);
  th_reply_free(r);
  int v = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_lock_unlock(l));
  r = th_cmdv(srv, 2, ex, exl);
  CHECK_EQ(r->integer, 0);
  th_reply_free(r);
  rlock_lock_free(l);

  /* The largest name. */
  char *huge = malloc(RLOCK_NAME_MAX + 1);
  for (size_t i = 0; i <= RLOCK_NAME_MAX; i++) huge[i] = (char)('A' + i % 23);
  CHECK_OK(rlock_lock_new(cli, huge, RLOCK_NAME_MAX, &l));
  CHECK_OK(rlock_lock_lock(l, 20000));
  size_t hl[] = {6, RLOCK_NAME_MAX};
  const char *hx[] = {"EXISTS", huge};
  r = th_cmdv(srv, 2, hx, hl);
  CHECK_EQ(r->integer, 1);
  th_reply_free(r);
  CHECK_OK(rlock_lock_unlock(l));
  r = th_cmdv(srv, 2, hx, hl);
  CHECK_EQ(r->integer, 0);
  th_reply_free(r);
  rlock_lock_free(l);
  l = NULL;
  CHECK_RC(rlock_lock_new(cli, huge, RLOCK_NAME_MAX + 1, &l), RLOCK_EINVAL);
  free(huge);
}

TEST(bad_arguments) {
  rlock_lock_t *l = th_lock(cli, "basic:args");
  CHECK_RC(rlock_lock_lock(l, 0), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_lock(l, -2), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_lock(l, -1000), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_trylock(l, 0, 0), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_trylock(l, -2, 1000), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_trylock(l, -100, RLOCK_LEASE_WATCHDOG), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_acquire(l, 5, -3, 1000, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_acquire(l, 5, 0, -7, NULL), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_lock(NULL, 1000), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_unlock(NULL), RLOCK_EINVAL);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:args", NULL), 0);
  /* Valid special values. */
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG, NULL));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_trylock(l, RLOCK_WAIT_FOREVER, RLOCK_LEASE_WATCHDOG)); /* = lock */
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
}

TEST(holders) {
  rlock_lock_t *l = th_lock(cli, "basic:holders");
  rlock_holder_t *h = NULL;
  size_t n = 99;
  CHECK_OK(rlock_lock_holders(l, &h, &n));
  CHECK_EQ(n, 0);
  rlock_holders_free(h, n);

  CHECK_OK(rlock_lock_lock(l, 20000));
  CHECK_OK(rlock_lock_lock(l, 20000));
  char self[128];
  self_id(self, sizeof self);
  CHECK_OK(rlock_lock_holders(l, &h, &n));
  CHECK_EQ(n, 1);
  CHECK_STREQ(h[0].owner, self);
  CHECK_EQ(h[0].count, 2);
  rlock_holders_free(h, n);

  /* A second field (as a foreign implementation could leave) is listed too. */
  th_reply_free(th_cmd(srv, "HSET", "basic:holders", "other-uuid:7", "5", NULL));
  CHECK_OK(rlock_lock_holders(l, &h, &n));
  CHECK_EQ(n, 2);
  int seen_self = 0, seen_other = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(h[i].owner, self) == 0) {
      seen_self = 1;
      CHECK_EQ(h[i].count, 2);
    } else if (strcmp(h[i].owner, "other-uuid:7") == 0) {
      seen_other = 1;
      CHECK_EQ(h[i].count, 5);
    }
  }
  CHECK(seen_self && seen_other);
  rlock_holders_free(h, n);
  th_reply_free(th_cmd(srv, "HDEL", "basic:holders", "other-uuid:7", NULL));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:holders", NULL), 0);
  rlock_lock_free(l);
}

TEST(force_unlock) {
  rlock_lock_t *l = th_lock(cli, "basic:force");
  rlock_client_t *other = th_client(srv->url, 0);
  rlock_lock_t *lo = th_lock(other, "basic:force");
  CHECK_OK(rlock_lock_lock(lo, RLOCK_LEASE_WATCHDOG));
  int was = -1;
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 1);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "basic:force", NULL), 0);
  CHECK_OK(rlock_lock_force_unlock(l, &was));
  CHECK_EQ(was, 0);
  CHECK_OK(rlock_lock_force_unlock(l, NULL));
  /* Free for the taking; the former holder's unlock fails. */
  CHECK_OK(rlock_lock_trylock(l, 0, 20000));
  CHECK_RC(rlock_lock_unlock(lo), RLOCK_ENOTHELD);
  int v = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(lo);
  rlock_client_free(other);
  rlock_lock_free(l);
}

TEST(stats_held) {
  rlock_lock_t *a = th_lock(cli, "basic:stats:a"), *b = th_lock(cli, "basic:stats:b");
  rlock_stats_t st;
  rlock_client_stats(cli, &st);
  uint64_t held0 = st.held;
  CHECK_OK(rlock_lock_lock(a, 20000));
  CHECK_OK(rlock_lock_lock(a, 20000));
  CHECK_OK(rlock_lock_lock(b, RLOCK_LEASE_WATCHDOG));
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, held0 + 2);
  CHECK(st.scripts_sent >= 3 && st.acquire_attempts >= 3);
  CHECK(st.commands_sent >= st.scripts_sent);
  CHECK_OK(rlock_lock_unlock(a));
  CHECK_OK(rlock_lock_unlock(a));
  CHECK_OK(rlock_lock_unlock(b));
  rlock_client_stats(cli, &st);
  CHECK_EQ(st.held, held0);
  rlock_lock_free(a);
  rlock_lock_free(b);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  cli = th_client(srv->url, 0);
  RUN(client_id);
  RUN(lock_unlock_layout);
  RUN(reentrancy);
  RUN(queries);
  RUN(unlock_by_non_owner);
  RUN(explicit_owner);
  RUN(names);
  RUN(bad_arguments);
  RUN(holders);
  RUN(force_unlock);
  RUN(stats_held);
  rlock_client_free(cli);
  th_server_stop(srv);
  return th_done();
}
