/* test_killed_holder.c -- a holder process dies with SIGKILL while holding
 * a watchdog lock (watchdog 1000 ms): its renewals stop, the lease runs out
 * and a waiter in another process gets the lock within timeout + 2 s. The
 * child is forked before the parent creates any client or thread. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

static void child(int wfd, int rfd) {
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "killed:lock");
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  char owner[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), owner, sizeof owner);
  char msg[200];
  int n = snprintf(msg, sizeof msg, "locked %s\n", owner);
  CHECK(write(wfd, msg, (size_t)n) == n);
  /* Block until killed (the parent never writes). */
  char b;
  while (read(rfd, &b, 1) != 0) {
  }
  _exit(0);
}

TEST(killed_holder) {
  int up[2], down[2];
  CHECK(pipe(up) == 0 && pipe(down) == 0);
  pid_t pid = th_fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    child(up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  char buf[256] = {0};
  size_t got = 0;
  while (got < sizeof buf - 1 && !memchr(buf, '\n', got)) {
    ssize_t r = read(up[0], buf + got, sizeof buf - 1 - got);
    CHECK_MSG(r > 0, "child died before it locked");
    got += (size_t)r;
  }
  CHECK(strncmp(buf, "locked ", 7) == 0);
  char *owner = buf + 7;
  owner[strcspn(owner, "\n")] = 0;

  /* The child holds it, as Redisson would store it. */
  CHECK_EQ(th_hget_num(srv, "killed:lock", owner), 1);
  long long pttl = th_cmd_int(srv, "PTTL", "killed:lock", NULL);
  CHECK(pttl > 0 && pttl <= 1000);

  /* Now the parent makes its client (after the fork). */
  rlock_client_t *c = th_client(srv->url, 1000);
  rlock_lock_t *l = th_lock(c, "killed:lock");
  CHECK_RC(rlock_lock_trylock(l, 0, RLOCK_LEASE_WATCHDOG), RLOCK_EBUSY);

  CHECK(kill(pid, SIGKILL) == 0);
  CHECK_EQ(th_wait_child(pid), 128 + SIGKILL);
  int64_t t0 = th_now_ms();
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 10000, RLOCK_LEASE_WATCHDOG, NULL));
  int64_t took = th_now_ms() - t0;
  CHECK_MSG(took < 1000 + 2000, "acquired %lld ms after the kill", (long long)took);
  char mine[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), mine, sizeof mine);
  CHECK_EQ(th_hget_num(srv, "killed:lock", mine), 1);
  CHECK_EQ(th_hget_num(srv, "killed:lock", owner), -1000);
  CHECK_OK(rlock_lock_unlock(l));
  close(up[0]);
  close(down[1]);
  rlock_lock_free(l);
  rlock_client_free(c);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  srv = th_server_start(NULL);
  RUN(killed_holder);
  th_server_stop(srv);
  return th_done();
}
