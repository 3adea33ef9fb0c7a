/* test_sentinel_event.c -- the +switch-master event on its own (internal
 * API: the poll is switched off with rlock__sentinel_poll_ms). In
 * test_sentinel.c every failover test also passes on the 1 s poll alone, or
 * on the reconnect that a killed master forces, so none of them proves the
 * event path. Here the master is frozen (SIGSTOP: its connections stay open,
 * nothing drops) and the client sends nothing (no PING, no lock held): once
 * Sentinel fails over, only the event can move it. A waiter subscribed there
 * would otherwise sleep on the frozen node while the lock is free on the new
 * master. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "harness_sentinel.h"
#include "internal.h"

static th_server_t *watched;

/* The quiet client's command and subscriber connections are on `watched`. */
static int client_there(void *arg) {
  (void)arg;
  char *list = th_cmd_str(watched, "CLIENT", "LIST", NULL);
  int n = 0;
  for (const char *p = list; p && (p = strstr(p, "name=quiet ")); p += 5) n++;
  free(list);
  return n >= 2;
}

static void lock_on(rlock_client_t *c, th_server_t *m, const char *name) {
  rlock_lock_t *l = th_lock(c, name);
  CHECK_OK(rlock_lock_lock(l, 10000));
  CHECK_EQ(th_cmd_int(m, "EXISTS", name, NULL), 1);
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
}

TEST(switch_master_event_moves_a_quiet_client) {
  th_sentinels_t *d = th_sentinels_start("frozen", 1, 1);
  int64_t saved = rlock__sentinel_poll_ms;
  rlock__sentinel_poll_ms = 3600 * 1000; /* no poll: only the event can tell */
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = d->url;
  o.client_name = "quiet";
  o.ping_interval_ms = 0; /* nothing on the wire finds the frozen master */
  o.reconnect_min_ms = 50;
  o.reconnect_max_ms = 1000;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  th_server_t *old = d->nodes[0];
  lock_on(c, old, "sentinel:event");
  watched = old;
  CHECK_MSG(th_wait_until(client_there, NULL, 30000), "the client is not on the master");

  CHECK(kill(old->pid, SIGSTOP) == 0);
  th_server_t *m = th_sentinels_wait_failover(d, old->port, 60000);
  CHECK_MSG(m, "no failover within 60 s");
  watched = m;
  CHECK_MSG(th_wait_until(client_there, NULL, 30000), "+switch-master did not move the client to the new master");
  lock_on(c, m, "sentinel:event");
  rlock_client_free(c);
  rlock__sentinel_poll_ms = saved;
  kill(old->pid, SIGCONT);
  th_sentinels_stop(d);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 120);
  RUN(switch_master_event_moves_a_quiet_client);
  return th_done();
}
