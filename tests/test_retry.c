/* test_retry.c -- idempotent retries: the server is paused (CLIENT PAUSE
 * WRITE, which holds back scripts) longer than the command timeout, so the
 * client re-sends its unlock or acquire; when the server resumes it runs
 * every copy, and the request latches must make the operation count once:
 * one unlock of a twice-held lock leaves exactly one hold, one acquire adds
 * exactly one hold (or, if the client gave up, none: undone). A connection
 * killed while a request waits is re-sent on the new connection. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

static rlock_client_t *retry_client(int64_t timeout_ms, int attempts) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.command_timeout_ms = timeout_ms;
  o.retry_attempts = attempts;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 200;
  o.client_name = "retry-client";
  /* These tests count the copies the server runs after a pause: a connection
   * replaced for too many timeouts in a row (fault_liveness tests that) would
   * take its unanswered copies with it. */
  o.dead_after_timeouts = 0;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static void pause_scripts(const char *ms) {
  redisReply *r = th_cmd(srv, "CLIENT", "PAUSE", ms, "WRITE", NULL);
  CHECK_MSG(r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE: %s", r->str);
  th_reply_free(r);
}

static void unpause(void) { th_reply_free(th_cmd(srv, "CLIENT", "UNPAUSE", NULL)); }

/* Returns once the pause is over: a raw script is held back like the client's. */
static void wait_pause_over(void) { th_reply_free(th_cmd(srv, "EVAL", "return 1", "0", NULL)); }

static const char *undo_key, *undo_owner;
static int hold_gone(void *arg) {
  (void)arg;
  return th_hget_num(srv, undo_key, undo_owner) == -1000;
}

/* What the server has run against what the client sent: a pause holds
 * back every copy of a re-sent script, the server runs them when it ends. */
typedef struct scripts_mark {
  rlock_client_t *c;
  long long srv; /* INFO commandstats evalsha calls */
  uint64_t cli;  /* the client's scripts_sent */
} scripts_mark_t;

static scripts_mark_t scripts_mark(rlock_client_t *c) {
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  scripts_mark_t m = {c, th_cmdstat(srv, "evalsha"), st.scripts_sent};
  return m;
}

/* Every script the client sent since the mark has run on the server. */
static int scripts_ran(void *arg) {
  const scripts_mark_t *m = arg;
  rlock_stats_t st;
  rlock_client_stats(m->c, &st);
  return th_cmdstat(srv, "evalsha") - m->srv >= (long long)(st.scripts_sent - m->cli);
}

static void wait_scripts_ran(scripts_mark_t *m) {
  CHECK_MSG(th_wait_until(scripts_ran, m, 10000), "the server did not run every copy the client sent");
}

TEST(unlock_resent_counts_once) {
  rlock_client_t *c = retry_client(400, 3);
  rlock_lock_t *l = th_lock(c, "retry:unlock");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(l, 1, 0, 60000, NULL));
  CHECK_EQ(th_hget_num(srv, "retry:unlock", owner), 2);
  rlock_stats_t s0, s1;
  rlock_client_stats(c, &s0);
  scripts_mark_t m = scripts_mark(c);

  /* Paused for 1000 ms: attempts at ~0, 400, 800 time out and are re-sent;
   * all of them run when the pause ends. */
  pause_scripts("1000");
  int rc = rlock_lock_release(l, 1);
  rlock_client_stats(c, &s1);
  printf("# release: %s, timeouts %llu\n", rlock_err_name(rc), (unsigned long long)(s1.timeouts - s0.timeouts));
  CHECK_MSG(s1.timeouts > s0.timeouts, "no request timed out: the pause did not bite");
  wait_pause_over();
  wait_scripts_ran(&m); /* every queued copy has run */
  CHECK_MSG(s1.scripts_sent - s0.scripts_sent >= 2, "the unlock was not re-sent");
  /* Whatever the outcome, never released twice. */
  CHECK_EQ(th_hget_num(srv, "retry:unlock", owner), 1);
  /* 400 ms x 4 sends outlast the 1000 ms pause: the answer comes. */
  CHECK_OK(rc);
  CHECK_OK(rlock_lock_release(l, 1));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "retry:unlock", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* One acquire under a 1000 ms pause with a command timeout of timeout_ms
 * and `attempts` re-sends. With 400 ms x 3 the client outlasts the pause:
 * re-sent (the wait bound is not a transport bound, so also with wait 0),
 * it succeeds with exactly one hold. With 200 ms x 1 it gives up first:
 * RLOCK_ETIMEDOUT, and once the server has run every copy (and the undo),
 * no hold is left. */
static void acquire_under_pause(const char *name, int64_t wait_ms, int64_t timeout_ms, int attempts, int want_rc) {
  rlock_client_t *c = retry_client(timeout_ms, attempts);
  rlock_lock_t *l = th_lock(c, name);
  char owner[128];
  th_owner_id(c, 2, owner, sizeof owner);
  scripts_mark_t m = scripts_mark(c);
  pause_scripts("1000");
  int rc = rlock_lock_acquire(l, 2, wait_ms, 60000, NULL);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  printf("# acquire(wait %lld, timeout %lld x %d): %s, timeouts %llu, attempts %llu\n", (long long)wait_ms,
         (long long)timeout_ms, attempts, rlock_err_name(rc), (unsigned long long)st.timeouts,
         (unsigned long long)st.acquire_attempts);
  CHECK(st.timeouts >= 1);
  CHECK_RC(rc, want_rc);
  wait_pause_over();
  if (rc == 0) {
    wait_scripts_ran(&m); /* every queued copy has run */
    CHECK_EQ(th_hget_num(srv, name, owner), 1);
    int64_t n = 0;
    CHECK_OK(rlock_lock_hold_count(l, 2, &n));
    CHECK_EQ(n, 1);
    CHECK_OK(rlock_lock_release(l, 2));
    CHECK_EQ(th_cmd_int(srv, "EXISTS", name, NULL), 0);
  } else {
    /* Gave up: once every copy and the undo have run, no hold is left. */
    undo_key = name;
    undo_owner = owner;
    CHECK_MSG(th_wait_until(hold_gone, NULL, 5000), "a given-up acquire left its hold");
    wait_scripts_ran(&m);
    CHECK_MSG(hold_gone(NULL), "a given-up acquire left its hold after all copies ran");
    rlock_client_stats(c, &st);
    CHECK_EQ(st.held, 0);
  }
  rlock_lock_free(l);
  rlock_client_free(c);
}

TEST(acquire_resent_counts_once) {
  acquire_under_pause("retry:acquire:wait", 5000, 400, 3, 0);
  acquire_under_pause("retry:acquire:try", 0, 400, 3, 0);
}

TEST(acquire_with_wait_gives_up_and_undoes) {
  /* A wait bound (5 s) outlasts the pause, but the transport gives up
   * first (200 ms x 2 sends < 1000 ms): the wait is not a licence to
   * re-send forever, and what the copies took is given back. */
  acquire_under_pause("retry:acquire:giveup", 5000, 200, 1, RLOCK_ETIMEDOUT);
}

TEST(acquire_gives_up_and_undoes) {
  /* Paused far longer than all attempts: the client must give up with
   * RLOCK_ETIMEDOUT, and once the server runs the queued copies, none of
   * them may leave a hold behind. */
  rlock_client_t *c = retry_client(200, 1);
  rlock_lock_t *l = th_lock(c, "retry:undo");
  char owner[128];
  th_owner_id(c, 3, owner, sizeof owner);
  scripts_mark_t m = scripts_mark(c);
  pause_scripts("3000");
  int64_t t0 = th_now_ms();
  int rc = rlock_lock_acquire(l, 3, 0, 60000, NULL);
  int64_t took = th_now_ms() - t0;
  CHECK_RC(rc, RLOCK_ETIMEDOUT);
  /* It gave up by itself (2 sends x 200 ms), well before the pause ended. */
  CHECK_MSG(took < 2500, "gave up after %lld ms (timeout 200 x 2 sends, pause 3000)", (long long)took);
  /* When the server resumes it runs the queued acquire copies; the undo
   * must follow and give the hold back (well before the 60 s lease). */
  wait_pause_over();
  undo_key = "retry:undo";
  undo_owner = owner;
  CHECK_MSG(th_wait_until(hold_gone, NULL, 5000), "a given-up acquire left its hold (%lld)",
            th_hget_num(srv, "retry:undo", owner));
  wait_scripts_ran(&m); /* the copies and the undo all ran: gone for good */
  CHECK_MSG(hold_gone(NULL), "a given-up acquire left its hold after all copies ran");
  int v = 1;
  CHECK_OK(rlock_lock_is_held(l, 3, &v));
  CHECK_EQ(v, 0);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

struct bg {
  rlock_lock_t *lock;
  int rc;
};

static void *release_bg(void *p) {
  struct bg *b = p;
  b->rc = rlock_lock_release(b->lock, 4);
  return NULL;
}

static int retry_client_blocked(void *arg) {
  (void)arg;
  /* A connection of the client held back by the pause (flag b, blocked). */
  char *list = th_cmd_str(srv, "CLIENT", "LIST", NULL);
  int found = 0;
  for (char *line = list; line && *line && !found;) {
    char *eol = strchr(line, '\n');
    if (eol) *eol = 0;
    found = strstr(line, "name=retry-client") && strstr(line, " flags=b");
    line = eol ? eol + 1 : NULL;
  }
  free(list);
  return found;
}

TEST(connection_killed_while_paused) {
  rlock_client_t *c = retry_client(3000, 3);
  rlock_lock_t *l = th_lock(c, "retry:kill");
  char owner[128];
  th_owner_id(c, 4, owner, sizeof owner);
  CHECK_OK(rlock_lock_acquire(l, 4, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(l, 4, 0, 60000, NULL));
  pause_scripts("10000");
  struct bg b = {.lock = l};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, release_bg, &b), 0);
  /* Wait until the unlock sits blocked on the server, then kill that
   * connection: the request never ran; the client re-sends it. */
  CHECK_MSG(th_wait_until(retry_client_blocked, NULL, 5000), "unlock never blocked");
  th_reply_free(th_cmd(srv, "CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", NULL));
  /* The re-send on a new connection is held back by the pause too. */
  CHECK_MSG(th_wait_until(retry_client_blocked, NULL, 5000), "unlock not re-sent");
  unpause();
  pthread_join(t, NULL);
  CHECK_OK(b.rc);
  CHECK_EQ(th_hget_num(srv, "retry:kill", owner), 1);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK(st.reconnects >= 1);
  CHECK_OK(rlock_lock_release(l, 4));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "retry:kill", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(unlock_resent_counts_once);
  RUN(acquire_resent_counts_once);
  RUN(acquire_with_wait_gives_up_and_undoes);
  RUN(acquire_gives_up_and_undoes);
  RUN(connection_killed_while_paused);
  th_server_stop(srv);
  return th_done();
}
