/* test_sem_inflight.c -- semaphore wake-ups that reach a client while its
 * waiters' tries are in flight (lib/semaphore.c, lib/pubsub.c), through the
 * fault proxy (tests/fault/proxy.h):
 *   two_in_flight  two waiters for 1 permit on one client; both tries run on
 *                  the server (too few permits) and their answers are held
 *                  back; release(2) by another client publishes 2; then the
 *                  answers come. Both waiters must take a permit: the message
 *                  wakes up to 2 waiters, and with none parked each waiter
 *                  whose try was in flight must try again.
 *   free_waiter_beside_inflight_acquire  a free-waiter (rlock_lock_await_free)
 *                  and an acquirer of one client on one lock's channel, both
 *                  with their try in flight (answers held back) when the
 *                  holder's unlock publishes its one wake-up. The acquirer
 *                  must try again and take the lock: the free-waiter only
 *                  looks and never uses up the wake-up a waiter that may
 *                  take the lock needs.
 *   release_on_dead_connection
 *                  a permit held, then every connection of the client is
 *                  dropped for good (a NAT forgot the flows: nothing comes
 *                  back, no FIN) and the holder releases (command timeout
 *                  500 ms, PING off): the release must land once the dead
 *                  connection is replaced (dead_after_timeouts), within its
 *                  request id's latch; the permit is never lost while its
 *                  holder lives (a plain semaphore has no lease to bring
 *                  it back). The same for a latch's count-down.
 *   token_then_message  waiters X and Z for 1 permit on one client, count 0;
 *                  the command connection's answers held back. A message
 *                  wakes X (its try runs: too few). The subscriber
 *                  connection is killed: its resubscription wakes everyone,
 *                  X in flight gets a token, Z parked tries (too few). Then
 *                  2 permits come and their message "2" while both tries are
 *                  unanswered; then the answers. Both must take a permit.
 *                  Before: X's token set the channel's wake count to 0 as it
 *                  parked, so Z, whose try had run before the release,
 *                  parked asleep beside a free permit (RLOCK_WAIT_FOREVER:
 *                  for ever). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];

#define CNAME "seminflight"

static rlock_client_t *client_timeout(int64_t command_timeout_ms) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = purl;
  o.client_name = CNAME;
  o.command_timeout_ms = command_timeout_ms;
  o.ping_interval_ms = 0;
  rlock_client_t *cl = NULL;
  int rc = rlock_client_new(&cl, &o);
  if (rc) th_fail(__FILE__, __LINE__, "client_new: %s: %s", rlock_err_name(rc), rlock_last_error());
  return cl;
}
static rlock_client_t *client(void) { return client_timeout(20000); /* the held answers are late, not lost */ }

/* The server-side ports of every connection named CNAME; returns how many. */
static int all_ports(int *ports, int max) {
  redisReply *r = th_cmd(srv, "CLIENT", "LIST", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  int n = 0;
  for (char *line = r->str, *end; line && *line && n < max; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = 0;
    char *a = strstr(line, " addr=");
    char *colon = a ? strchr(a + 6, ':') : NULL;
    if (strstr(line, " name=" CNAME " ") && colon) ports[n++] = atoi(colon + 1);
  }
  th_reply_free(r);
  return n;
}

/* The server-side port of the client's command connection: the one named
 * CNAME that is subscribed to nothing. */
static int cmd_port(void) {
  redisReply *r = th_cmd(srv, "CLIENT", "LIST", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  int port = 0, n = 0;
  for (char *line = r->str, *end; line && *line; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = 0;
    char *a = strstr(line, " addr=");
    if (strstr(line, " name=" CNAME " ") && strstr(line, " sub=0 ") && strstr(line, " psub=0 ") && a) {
      char *colon = strchr(a + 6, ':');
      if (colon) port = atoi(colon + 1), n++;
    }
  }
  th_reply_free(r);
  CHECK_MSG(n == 1, "%d command connections named " CNAME " (1 expected)", n);
  return port;
}

/* Script calls the server has run (EVAL and EVALSHA). */
static long long script_calls(void) {
  char *s = th_cmd_str(srv, "INFO", "commandstats", NULL);
  long long n = 0;
  for (const char *k = s; k && (k = strstr(k, "cmdstat_eval")); k++) {
    const char *c = strstr(k, "calls=");
    if (c) n += atoll(c + 6);
  }
  free(s);
  return n;
}

typedef struct {
  long long want;
} calls_t;
static int calls_reach(void *arg) { return script_calls() >= ((calls_t *)arg)->want; }

static atomic_int done, ok;
static void on_done(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s, (void)value, (void)arg;
  if (status == 0) atomic_fetch_add(&ok, 1);
  atomic_fetch_add(&done, 1);
}
static int both_done(void *arg) { return atomic_load(&done) >= *(int *)arg; }

static int numsub_is_1(void *chan) {
  redisReply *r = th_cmd(srv, "PUBSUB", "NUMSUB", (const char *)chan, NULL);
  int v = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer == 1;
  th_reply_free(r);
  return v;
}

/* Every try the client sent has run on the server (its answer may be held). */
typedef struct {
  rlock_client_t *c;
  long long base; /* script calls before the client's first */
} tries_t;
static int tries_ran(void *arg) {
  tries_t *t = arg;
  long long ran = script_calls() - t->base; /* first: the count of tries sent is read after it */
  rlock_stats_t st;
  rlock_client_stats(t->c, &st);
  return ran >= (long long)st.acquire_attempts;
}

TEST(two_in_flight) {
  const char *name = "seminflight:two", *chan = "redisson_sc:{seminflight:two}";
  th_cmd_int(srv, "DEL", name, NULL);
  rlock_client_t *c = client();
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
  atomic_store(&done, 0), atomic_store(&ok, 0);
  tries_t tr = {c, script_calls()};
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, NULL, on_done, NULL));
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, NULL, on_done, NULL));
  CHECK_MSG(th_wait_until(numsub_is_1, (void *)chan, 5000), "the waiters did not subscribe");
  /* each tried once subscribed (2 tries before, 2 after; the subscription's
   * wake-all may leave a spare wake token: a fifth try) */
  CHECK_MSG(TH_STAT_REACHES(c, acquire_attempts, 4, 5000), "the waiters did not try");
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  int port = cmd_port();
  fp_hold_conn(px, port, FP_DOWN); /* answers held back; requests go on */
  /* a message while nothing was released: every parked waiter wakes and
   * tries (too few); then no waiter is parked, each has its try in flight */
  th_reply_free(th_cmd(srv, "PUBLISH", chan, "2", NULL));
  CHECK_MSG(TH_STAT_REACHES(c, messages, st.messages + 1, 5000), "the message did not come");
  CHECK_MSG(th_wait_until(tries_ran, &tr, 10000), "the tries did not run");
  /* now the permits come, their message before the tries' answers */
  long long avail = th_cmd_int(srv, "INCRBY", name, "2", NULL);
  CHECK_EQ(avail, 2);
  th_reply_free(th_cmd(srv, "PUBLISH", chan, "2", NULL)); /* what release(2) publishes */
  CHECK_MSG(TH_STAT_REACHES(c, messages, st.messages + 2, 5000), "the release's message did not come");
  fp_hold_conn(px, port, 0);
  int two = 2;
  int all = th_wait_until(both_done, &two, 5000);
  char *v = th_cmd_str(srv, "GET", name, NULL);
  printf("waiters done %d, taken %d; available %s\n", atomic_load(&done), atomic_load(&ok), v ? v : "(nil)");
  CHECK_MSG(all, "a waiter sleeps while %s permit(s) are available", v ? v : "(nil)");
  free(v);
  CHECK_EQ(atomic_load(&ok), 2);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

static atomic_int free_done, free_rc, acq_done, acq_rc;
static void on_acquired(rlock_lock_t *l, int status, int64_t v, void *arg) {
  (void)l, (void)v, (void)arg;
  atomic_store(&acq_rc, status);
  atomic_store(&acq_done, 1);
}
static void *free_waiter(void *arg) {
  atomic_store(&free_rc, rlock_lock_await_free(arg, RLOCK_WAIT_FOREVER, NULL));
  atomic_store(&free_done, 1);
  return NULL;
}
static int flag_set(void *arg) { return atomic_load((atomic_int *)arg); }

typedef struct {
  const char *cmd;
  long long want;
} cmdstat_t;
static int cmdstat_reach(void *arg) {
  cmdstat_t *c = arg;
  return th_cmdstat(srv, c->cmd) >= c->want;
}

/* Returns once every waiter of c is parked: the answer to a try or a look
 * either parks its waiter or sends another request, and the answers of every
 * request sent before a GET on the command connection come before the GET's.
 * (A try counts when it is sent: its answer may still be on its way, and a
 * hold of the answers would then keep that waiter in flight, not parked.) */
static void parked_all(rlock_client_t *c) {
  rlock_semaphore_t *b = NULL;
  CHECK_OK(rlock_semaphore_new(c, "seminflight:barrier", strlen("seminflight:barrier"), &b));
  for (int i = 0; i < 100; i++) {
    rlock_stats_t x, y;
    int64_t v;
    rlock_client_stats(c, &x);
    CHECK_OK(rlock_semaphore_available(b, &v));
    rlock_client_stats(c, &y);
    if (y.commands_sent == x.commands_sent + 1) {
      rlock_semaphore_free(b);
      return;
    }
  }
  CHECK_MSG(0, "the waiters kept sending");
}

TEST(free_waiter_beside_inflight_acquire) {
  const char *name = "seminflight:free", *chan = "redisson_lock__channel:{seminflight:free}";
  rlock_client_t *h = th_client(srv->url, 0), *c = client();
  rlock_lock_t *hl = th_lock(h, name), *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(hl, 60000));
  atomic_store(&free_done, 0), atomic_store(&acq_done, 0);
  CHECK_OK(rlock_lock_acquire_async(l, 7, RLOCK_WAIT_FOREVER, 60000, NULL, on_acquired, NULL));
  CHECK_MSG(th_wait_until(numsub_is_1, (void *)chan, 5000), "the acquirer did not subscribe");
  /* the acquirer parked: a try before it joined, one after */
  CHECK_MSG(TH_STAT_REACHES(c, acquire_attempts, 2, 5000), "the acquirer did not try");
  cmdstat_t pttl = {"pttl", th_cmdstat(srv, "pttl") + 2};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_waiter, l) == 0);
  /* the free-waiter parked behind it: a look before it joined, one after */
  CHECK_MSG(th_wait_until(cmdstat_reach, &pttl, 5000), "the free-waiter did not look");
  parked_all(c);
  int port = cmd_port();
  fp_hold_conn(px, port, FP_DOWN); /* answers held back; requests go on */
  calls_t tries = {script_calls() + 1};
  /* a message while the lock is still held: it wakes one waiter, the
   * acquirer (the first parked), whose try is then in flight */
  th_reply_free(th_cmd(srv, "PUBLISH", chan, "0", NULL));
  CHECK_MSG(th_wait_until(calls_reach, &tries, 5000), "the acquirer did not try");
  /* now the real unlock: its one wake-up comes before the tries' answers */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_OK(rlock_lock_unlock(hl));
  CHECK_MSG(TH_STAT_REACHES(c, messages, st.messages + 1, 5000), "the unlock's message did not come");
  fp_hold_conn(px, port, 0);
  int got = th_wait_until(flag_set, &acq_done, 5000);
  printf("acquirer done %d (%s), free-waiter done %d; key exists %lld\n", got,
         got ? rlock_err_name(atomic_load(&acq_rc)) : "-", atomic_load(&free_done),
         th_cmd_int(srv, "EXISTS", name, NULL));
  CHECK_MSG(got, "the acquirer sleeps while the lock is free");
  CHECK_OK(atomic_load(&acq_rc));
  CHECK_OK(rlock_lock_release(l, 7));
  CHECK_MSG(th_wait_until(flag_set, &free_done, 5000), "the free-waiter did not return");
  pthread_join(t, NULL);
  CHECK_OK(atomic_load(&free_rc));
  rlock_lock_free(l);
  rlock_lock_free(hl);
  rlock_client_free(c);
  rlock_client_free(h);
}

/* The server-side port of the client's subscriber connection. */
static int sub_port(void) {
  redisReply *r = th_cmd(srv, "CLIENT", "LIST", NULL);
  CHECK(r->type == REDIS_REPLY_STRING);
  int port = 0, n = 0;
  for (char *line = r->str, *end; line && *line; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = 0;
    char *a = strstr(line, " addr=");
    if (strstr(line, " name=" CNAME " ") && strstr(line, " sub=1 ") && a) {
      char *colon = strchr(a + 6, ':');
      if (colon) port = atoi(colon + 1), n++;
    }
  }
  th_reply_free(r);
  CHECK_MSG(n == 1, "%d subscriber connections named " CNAME " (1 expected)", n);
  return port;
}

TEST(token_then_message) {
  const char *name = "seminflight:token", *chan = "redisson_sc:{seminflight:token}";
  th_cmd_int(srv, "DEL", name, NULL);
  rlock_client_t *c = client();
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
  atomic_store(&done, 0), atomic_store(&ok, 0);
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, NULL, on_done, NULL)); /* X */
  CHECK_MSG(th_wait_until(numsub_is_1, (void *)chan, 5000), "X did not subscribe");
  CHECK_MSG(TH_STAT_REACHES(c, acquire_attempts, 2, 5000), "X did not try twice");
  CHECK_OK(rlock_semaphore_acquire_async(s, 1, RLOCK_WAIT_FOREVER, NULL, on_done, NULL)); /* Z */
  CHECK_MSG(TH_STAT_REACHES(c, acquire_attempts, 4, 5000), "Z did not try twice");
  /* a try counts when it is sent: Z's second may still wait for its answer,
   * which the hold below would keep back (Z in flight, not parked: seen once
   * under valgrind in CI) */
  parked_all(c);
  int port = cmd_port(), sport = sub_port();
  fp_hold_conn(px, port, FP_DOWN); /* answers held back; requests go on */
  calls_t want = {script_calls() + 1};
  th_reply_free(th_cmd(srv, "PUBLISH", chan, "1", NULL)); /* wakes X, the first parked */
  CHECK_MSG(th_wait_until(calls_reach, &want, 5000), "X's try did not run");
  /* the subscriber connection drops: its resubscription wakes everyone */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", sport);
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "ADDR", addr, NULL));
  want.want++;
  CHECK_MSG(th_wait_until(calls_reach, &want, 10000), "Z's try did not run after the resubscription");
  CHECK_MSG(th_wait_until(numsub_is_1, (void *)chan, 5000), "the channel was not subscribed again");
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  /* now the permits come, their message before the tries' answers */
  CHECK_EQ(th_cmd_int(srv, "INCRBY", name, "2", NULL), 2);
  th_reply_free(th_cmd(srv, "PUBLISH", chan, "2", NULL)); /* what release(2) publishes */
  CHECK_MSG(TH_STAT_REACHES(c, messages, st.messages + 1, 5000), "the release's message did not come");
  fp_hold_conn(px, port, 0);
  int two = 2;
  int all = th_wait_until(both_done, &two, 5000);
  char *v = th_cmd_str(srv, "GET", name, NULL);
  printf("waiters done %d, taken %d; available %s\n", atomic_load(&done), atomic_load(&ok), v ? v : "(nil)");
  CHECK_MSG(all, "a waiter sleeps while %s permit(s) are available", v ? v : "(nil)");
  free(v);
  CHECK_EQ(atomic_load(&ok), 2);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

/* Drops every connection of the client for good; returns their number. */
static int drop_all(int *ports) {
  int n = all_ports(ports, 16);
  CHECK(n > 0);
  for (int i = 0; i < n; i++) fp_drop_conn(px, ports[i], FP_BOTH);
  return n;
}
static void undrop(const int *ports, int n) {
  for (int i = 0; i < n; i++) fp_drop_conn(px, ports[i], 0); /* (closed by now: nothing flows) */
}

TEST(release_on_dead_connection) {
  const char *name = "seminflight:dead";
  th_cmd_int(srv, "DEL", name, NULL);
  rlock_client_t *c = client_timeout(500);
  rlock_semaphore_t *s = NULL;
  CHECK_OK(rlock_semaphore_new(c, name, strlen(name), &s));
  int set = 0;
  CHECK_OK(rlock_semaphore_try_set_permits(s, 1, &set));
  CHECK_OK(rlock_semaphore_acquire(s, 1, 0, NULL));
  int ports[16], n = drop_all(ports);
  int64_t t0 = th_now_ms();
  int rc = rlock_semaphore_release(s, 1, NULL);
  int64_t took = th_now_ms() - t0;
  char *v = th_cmd_str(srv, "GET", name, NULL);
  printf("%d connections dropped; release: %s after %lld ms; available on the server: %s\n", n, rlock_err_name(rc),
         (long long)took, v ? v : "(nil)");
  CHECK_OK(rc);
  CHECK_MSG(v && strcmp(v, "1") == 0, "the permit is lost: available %s", v ? v : "(nil)");
  free(v);
  undrop(ports, n);
  /* the latch: a count-down on dead connections lands, once */
  rlock_latch_t *l = NULL;
  const char *lname = "seminflight:deadlatch";
  th_cmd_int(srv, "DEL", lname, NULL);
  CHECK_OK(rlock_latch_new(c, lname, strlen(lname), &l));
  CHECK_OK(rlock_latch_try_set_count(l, 2, &set));
  n = drop_all(ports);
  t0 = th_now_ms();
  int64_t left = -1;
  rc = rlock_latch_count_down(l, &left);
  took = th_now_ms() - t0;
  v = th_cmd_str(srv, "GET", lname, NULL);
  printf("%d connections dropped; count-down: %s after %lld ms; count on the server: %s\n", n, rlock_err_name(rc),
         (long long)took, v ? v : "(nil)");
  CHECK_OK(rc);
  CHECK_MSG(v && strcmp(v, "1") == 0, "the count-down is lost (or counted twice): count %s", v ? v : "(nil)");
  free(v);
  undrop(ports, n);
  rlock_latch_free(l);
  rlock_semaphore_free(s);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  RUN(two_in_flight);
  RUN(free_waiter_beside_inflight_acquire);
  RUN(release_on_dead_connection);
  RUN(token_then_message);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
