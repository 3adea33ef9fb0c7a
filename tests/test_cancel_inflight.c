/* test_cancel_inflight.c -- a cancel that arrives while an acquire try is in
 * flight: the server holds the try back (CLIENT PAUSE WRITE holds scripts),
 * the token is triggered, then the server runs the try. The wait must end
 * with RLOCK_ECANCELED and, if the try took the lock, the hold must be given
 * back. Proven by the server's script count (the try ran, then the undo ran:
 * 2 script calls) and its state, not by "the key is gone" alone, which is
 * also true when no copy of the try ever ran. */
#include <pthread.h>
#include <string.h>

#include "harness.h"

#define CLIENT_NAME "cancel-inflight"

static th_server_t *srv;

/* ------------------------------------------------------------ completion */

typedef struct done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls, status;
} done_t;

static void done_init(done_t *d) {
  memset(d, 0, sizeof *d);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
}

static void on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  d->calls++;
  d->status = status;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static int calls_of(done_t *d) {
  pthread_mutex_lock(&d->mu);
  int n = d->calls;
  pthread_mutex_unlock(&d->mu);
  return n;
}

static int called(void *d) { return calls_of(d) > 0; }

/* ------------------------------------------------------------ helpers */

static rlock_client_t *paused_client(void) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.client_name = CLIENT_NAME;
  o.command_timeout_ms = 10000; /* the held-back try must not time out */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  return c;
}

static int try_blocked(void *arg) { return th_client_blocked(srv, CLIENT_NAME); }

static long long scripts_base;
static long long want_scripts;
static int scripts_reached(void *arg) { return th_scripts_run(srv) - scripts_base >= want_scripts; }

/* A round trip on the client's command connection (a lock query: user
 * commands have a connection of their own): replies come in order, so once
 * it answers, every request written before it has been answered. */
static void ping(rlock_client_t *c) {
  rlock_lock_t *l = th_lock(c, "inflight:barrier");
  int locked = -1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_lock_free(l);
}

/* Pauses scripts, starts an acquire of owner 1 that the server holds back,
 * cancels it, resumes the server and returns the wait's status. */
static int cancel_held_back_try(rlock_client_t *c, rlock_lock_t *l) {
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));
  done_t d;
  done_init(&d);
  th_reply_free(th_cmd(srv, "CLIENT", "PAUSE", "20000", "WRITE", NULL));
  CHECK_OK(rlock_lock_acquire_async(l, 1, RLOCK_WAIT_FOREVER, 60000, tok, on_done, &d));
  CHECK_MSG(th_wait_until(try_blocked, NULL, 5000), "the try was never held back by the pause");
  rlock_cancel_trigger(tok);
  th_reply_free(th_cmd(srv, "CLIENT", "UNPAUSE", NULL));
  CHECK_MSG(th_wait_until(called, &d, 5000), "the cancelled wait did not end after the resume");
  ping(c);
  CHECK_EQ(calls_of(&d), 1);
  rlock_cancel_free(tok);
  return d.status;
}

/* ------------------------------------------------------------ tests */

/* The lock is free: the held-back try takes it when the server resumes; the
 * cancelled wait must give that hold back (one undo script). */
TEST(cancel_while_try_takes_the_lock) {
  rlock_client_t *c = paused_client();
  rlock_lock_t *l = th_lock(c, "inflight:free");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  scripts_base = th_scripts_run(srv);
  int rc = cancel_held_back_try(c, l);
  CHECK_MSG(rc == RLOCK_ECANCELED, "cancelled wait ended with %s", rlock_err_name(rc));
  /* the try ran (it took the lock), then the undo ran (it gave it back) */
  want_scripts = 2;
  CHECK_MSG(th_wait_until(scripts_reached, NULL, 5000), "%lld script calls, want 2 (try + undo)",
            th_scripts_run(srv) - scripts_base);
  ping(c);
  CHECK_EQ(th_scripts_run(srv) - scripts_base, 2);
  CHECK_EQ(th_hget_num(srv, "inflight:free", owner), -1000);
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "inflight:free", NULL), 0);
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 0);
  CHECK_EQ(st.acquire_attempts, 1);
  int held = 1;
  CHECK_OK(rlock_lock_is_held(l, 1, &held));
  CHECK_EQ(held, 0);
  /* nothing of it is left: another owner gets the lock at once */
  CHECK_OK(rlock_lock_acquire(l, 2, 0, 10000, NULL));
  CHECK_OK(rlock_lock_release(l, 2));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* The lock is busy: the held-back try answers with the holder's TTL; the
 * cancelled wait ends, nothing to undo (one script), the holder untouched. */
TEST(cancel_while_try_finds_it_busy) {
  rlock_client_t *h = th_client(srv->url, 0), *c = paused_client();
  rlock_lock_t *lh = th_lock(h, "inflight:busy"), *l = th_lock(c, "inflight:busy");
  CHECK_OK(rlock_lock_acquire(lh, 7, 0, 60000, NULL));
  char owner[128], holder[128];
  th_owner_id(c, 1, owner, sizeof owner);
  th_owner_id(h, 7, holder, sizeof holder);
  scripts_base = th_scripts_run(srv);
  int rc = cancel_held_back_try(c, l);
  CHECK_MSG(rc == RLOCK_ECANCELED, "cancelled wait ended with %s", rlock_err_name(rc));
  CHECK_EQ(th_scripts_run(srv) - scripts_base, 1);
  CHECK_EQ(th_hget_num(srv, "inflight:busy", owner), -1000);
  CHECK_EQ(th_hget_num(srv, "inflight:busy", holder), 1);
  CHECK_EQ(th_cmd_int(srv, "HLEN", "inflight:busy", NULL), 1);
  CHECK_OK(rlock_lock_release(lh, 7));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "inflight:busy", NULL), 0);
  rlock_lock_free(lh), rlock_lock_free(l);
  rlock_client_free(h), rlock_client_free(c);
}

/* The cancel is triggered on the I/O thread itself, from the completion of
 * an earlier acquire whose reply came in the same read as the cancelled
 * try's reply: the token is triggered before that reply is handled, but its
 * event has not been dispatched yet. The wait must still end cancelled and
 * give the hold back (rlock.h: "every wait using the token ends with
 * RLOCK_ECANCELED, now or when it starts"). */
typedef struct trigger_ctx {
  rlock_cancel_t *tok;
  done_t d;
} trigger_ctx_t;

static void trigger_on_done(rlock_lock_t *lock, int status, int64_t value, void *arg) {
  trigger_ctx_t *t = arg;
  rlock_cancel_trigger(t->tok);
  on_done(lock, status, value, &t->d);
}

TEST(cancel_triggered_just_before_the_reply) {
  rlock_client_t *c = paused_client();
  rlock_lock_t *first = th_lock(c, "inflight:first"), *l = th_lock(c, "inflight:second");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  trigger_ctx_t t;
  done_init(&t.d);
  CHECK_OK(rlock_cancel_new(&t.tok));
  done_t d;
  done_init(&d);
  th_reply_free(th_cmd(srv, "CLIENT", "PAUSE", "20000", "WRITE", NULL));
  /* both tries are held back on the one command connection: the server
   * answers them back to back when it resumes */
  CHECK_OK(rlock_lock_acquire_async(first, 2, 0, 60000, NULL, trigger_on_done, &t));
  CHECK_OK(rlock_lock_acquire_async(l, 1, RLOCK_WAIT_FOREVER, 60000, t.tok, on_done, &d));
  CHECK_MSG(th_wait_until(try_blocked, NULL, 5000), "the tries were never held back by the pause");
  th_reply_free(th_cmd(srv, "CLIENT", "UNPAUSE", NULL));
  CHECK_MSG(th_wait_until(called, &d, 5000), "the cancelled wait did not end after the resume");
  CHECK_OK(t.d.status);
  CHECK_MSG(d.status == RLOCK_ECANCELED, "wait cancelled before its reply was handled ended with %s",
            rlock_err_name(d.status));
  ping(c);
  CHECK_EQ(th_hget_num(srv, "inflight:second", owner), -1000); /* given back */
  rlock_stats_t st;
  rlock_client_stats(c, &st);
  CHECK_EQ(st.held, 1); /* the first one only */
  CHECK_OK(rlock_lock_release(first, 2));
  rlock_cancel_free(t.tok);
  rlock_lock_free(first), rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(cancel_while_try_takes_the_lock);
  RUN(cancel_while_try_finds_it_busy);
  RUN(cancel_triggered_just_before_the_reply);
  th_server_stop(srv);
  return th_done();
}
