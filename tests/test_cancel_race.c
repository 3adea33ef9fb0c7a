/* test_cancel_race.c -- rlock.h: rlock_cancel_trigger "makes every wait
 * using the token end with RLOCK_ECANCELED, now or when it starts". When the
 * reply of the try in flight is handled before the token's event is
 * dispatched, the wait must still end cancelled (lib/lock.c reads the
 * token's flag when the reply comes; before that fix the wait ended with
 * status 0 and kept the hold). Made deterministic here: the client's I/O
 * thread is held in a lock-lost callback while the server answers the try
 * (the answer waits in the socket), then the token is triggered, then the
 * I/O thread goes on: it sees the answer first. The wait must end with
 * RLOCK_ECANCELED and the hold must be given back (the undo script runs). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define CLIENT_NAME "cancel-race"

static th_server_t *srv;

/* ------------------------------------------------------------ the held I/O thread */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stalled, released, done_calls, done_status;

/* The lock-lost callback (on the I/O thread) of the hold that times out:
 * it holds the I/O thread until the test releases it. */
static void stall(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)name, (void)len, (void)owner, (void)reason, (void)arg;
  pthread_mutex_lock(&mu);
  stalled = 1;
  pthread_cond_broadcast(&cv);
  while (!released) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}

static void on_done(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value, (void)arg;
  pthread_mutex_lock(&mu);
  done_calls++;
  done_status = status;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static int flag(int *f) {
  pthread_mutex_lock(&mu);
  int v = *f;
  pthread_mutex_unlock(&mu);
  return v;
}
static int is_stalled(void *arg) { return flag(&stalled); }
static int is_done(void *arg) { return flag(&done_calls); }

/* ------------------------------------------------------------ server side */

/* The local port (CLIENT LIST addr=) of the client's connection that the
 * server holds back (flags=b), 0 if none. */
static int blocked_port(void *arg) {
  char *list = th_cmd_str(srv, "CLIENT", "LIST", NULL);
  int port = 0;
  for (char *line = list; line && *line && !port;) {
    char *eol = strchr(line, '\n');
    if (eol) *eol = 0;
    char *a = strstr(line, " addr=");
    if (a && strstr(line, " name=" CLIENT_NAME " ") && strstr(line, " flags=b")) {
      char *colon = strchr(a + 6, ':');
      if (colon) port = atoi(colon + 1);
    }
    line = eol ? eol + 1 : NULL;
  }
  free(list);
  return port;
}

static int answer_waiting;
/* The server's answer is in the client's receive queue, unread. */
static int answer_unread(void *port) {
  long rx = 0;
  return th_tcp_queues(*(int *)port, srv->port, NULL, &rx) && rx > 0;
}

static long long scripts_base, scripts_want;
static int scripts_reached(void *arg) { return th_scripts_run(srv) - scripts_base >= scripts_want; }

TEST(cancel_before_the_answer_is_read) {
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  o.client_name = CLIENT_NAME;
  o.command_timeout_ms = 20000; /* the held-back try must not time out */
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_client_on_lost(c, stall, NULL);
  rlock_lock_t *timer = th_lock(c, "race:timer"), *l = th_lock(c, "race:lock");
  char owner[128];
  th_owner_id(c, 1, owner, sizeof owner);
  rlock_cancel_t *tok = NULL;
  CHECK_OK(rlock_cancel_new(&tok));

  /* a hold whose fixed lease runs out in a moment: its lost callback holds the I/O thread */
  CHECK_OK(rlock_lock_trylock(timer, 0, 1000));
  scripts_base = th_scripts_run(srv);
  th_reply_free(th_cmd(srv, "CLIENT", "PAUSE", "20000", "WRITE", NULL));
  CHECK_OK(rlock_lock_acquire_async(l, 1, RLOCK_WAIT_FOREVER, 60000, tok, on_done, NULL));
  CHECK_MSG(th_wait_until(blocked_port, NULL, 5000), "the try was never held back by the pause");
  answer_waiting = blocked_port(NULL);
  CHECK_MSG(th_wait_until(is_stalled, NULL, 10000), "the lost callback never ran");
  th_reply_free(th_cmd(srv, "CLIENT", "UNPAUSE", NULL));
  CHECK_MSG(th_wait_until(answer_unread, &answer_waiting, 5000), "the try's answer never reached the client");
  rlock_cancel_trigger(tok); /* before the I/O thread has read the answer */
  pthread_mutex_lock(&mu);
  released = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);

  CHECK_MSG(th_wait_until(is_done, NULL, 5000), "the cancelled wait did not end");
  int status = flag(&done_status);
  scripts_want = 2; /* the try took the lock; the undo must give it back */
  int undone = th_wait_until(scripts_reached, NULL, 5000);
  long long held = th_hget_num(srv, "race:lock", owner);
  CHECK_MSG(status == RLOCK_ECANCELED,
            "the token was triggered before the try's answer was read, yet the wait ended with %s "
            "(the hold %s on the server)",
            rlock_err_name(status), held > 0 ? "stays" : "was given back");
  CHECK_MSG(undone && held == -1000, "cancelled, but the hold stays on the server (count %lld)", held);
  CHECK_EQ(flag(&done_calls), 1);
  rlock_cancel_free(tok);
  rlock_lock_free(timer), rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 50);
  srv = th_server_start(NULL);
  RUN(cancel_before_the_answer_is_read);
  th_server_stop(srv);
  return th_done();
}
