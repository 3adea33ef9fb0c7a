/* test_sem_token.c -- a semaphore waiter's wake token (lib/pubsub.c) must not
 * cost another waiter its wake-up (break-it review), through the fault proxy:
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;
static char purl[64];

#define CNAME "semtoken"

static rlock_client_t *client(void) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = purl;
  o.client_name = CNAME;
  o.command_timeout_ms = 20000; /* the held answers are late, not lost */
  o.ping_interval_ms = 0;
  rlock_client_t *cl = NULL;
  int rc = rlock_client_new(&cl, &o);
  if (rc) th_fail(__FILE__, __LINE__, "client_new: %s: %s", rlock_err_name(rc), rlock_last_error());
  return cl;
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
  const char *name = "semtoken:x", *chan = "redisson_sc:{semtoken:x}";
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

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  snprintf(purl, sizeof purl, "redis://127.0.0.1:%d", fp_port(px));
  RUN(token_then_message);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
