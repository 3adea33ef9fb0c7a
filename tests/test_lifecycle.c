/* test_lifecycle.c -- a client's life around the process (issue 7, items 6f,
 * 9, 10, 4): a forked child that uses the parent's client gets a clear error
 * instead of hanging; a program exec'd while a client is connected inherits
 * none of its descriptors; connections have TCP keepalive; the latch keys of
 * a short-lived process are gone when rlock_client_free returns. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

/* ------------------------------------------------------------ descriptors */

typedef struct fdent {
  int fd;
  char target[64]; /* readlink of /proc/self/fd/N: "socket:[123]", "anon_inode:[eventfd]" */
} fdent_t;

static int list_fds(fdent_t *out, int max) {
  DIR *d = opendir("/proc/self/fd");
  CHECK(d);
  int n = 0, skip = dirfd(d);
  for (struct dirent *e; (e = readdir(d)) && n < max;) {
    if (e->d_name[0] == '.') continue;
    int fd = atoi(e->d_name);
    if (fd == skip) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(path, out[n].target, sizeof out[n].target - 1);
    if (k < 0) continue;
    out[n].target[k] = 0;
    out[n++].fd = fd;
  }
  closedir(d);
  return n;
}

/* Descriptors in `after` that are not in `before` (same number and target). */
static int new_fds(const fdent_t *before, int nb, const fdent_t *after, int na, fdent_t *out) {
  int n = 0;
  for (int i = 0; i < na; i++) {
    int seen = 0;
    for (int j = 0; j < nb && !seen; j++)
      seen = before[j].fd == after[i].fd && !strcmp(before[j].target, after[i].target);
    if (!seen) out[n++] = after[i];
  }
  return n;
}

/* Runs `ls -l /proc/self/fd` in a child exec'd now; its output into buf. */
static void exec_ls_fds(char *buf, size_t cap) {
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    execl("/bin/ls", "ls", "-l", "/proc/self/fd", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  size_t n = 0;
  ssize_t k;
  while (n + 1 < cap && (k = read(p[0], buf + n, cap - 1 - n)) != 0) {
    if (k < 0 && errno == EINTR) continue;
    CHECK(k > 0);
    n += (size_t)k;
  }
  buf[n] = 0;
  close(p[0]);
  CHECK_EQ(th_wait_child(pid), 0);
}

/* Item 9: every socket and eventfd of a client is close-on-exec. The check can
 * fail: a socket made without SOCK_CLOEXEC does show up in the child. */
TEST(exec_child_inherits_no_fds) {
  fdent_t before[256], after[256], mine[64];
  int nb = list_fds(before, 256);
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "life:exec");
  rlock_cancel_t *cancel = NULL;
  CHECK_OK(rlock_cancel_new(&cancel));
  CHECK_OK(rlock_lock_acquire(l, RLOCK_OWNER_SELF, 0, 30000, cancel)); /* both connections in use */
  int na = list_fds(after, 256);
  int n = new_fds(before, nb, after, na, mine);
  int sockets = 0;
  for (int i = 0; i < n; i++) sockets += !strncmp(mine[i].target, "socket:", 7);
  CHECK_MSG(sockets >= 2, "expected the client's 2 sockets among its %d new descriptors", n);
  int leaky = socket(AF_INET, SOCK_STREAM, 0); /* the control: inherited */
  CHECK(leaky >= 0);
  char leaky_target[64], path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", leaky);
  ssize_t k = readlink(path, leaky_target, sizeof leaky_target - 1);
  CHECK(k > 0);
  leaky_target[k] = 0;
  static char out[65536];
  exec_ls_fds(out, sizeof out);
  CHECK_MSG(strstr(out, leaky_target), "the control socket %s is not seen in the child:\n%s", leaky_target, out);
  close(leaky);
  for (int i = 0; i < n; i++) {
    int flags = fcntl(mine[i].fd, F_GETFD);
    printf("client fd %d %s%s\n", mine[i].fd, mine[i].target, flags & FD_CLOEXEC ? " (cloexec)" : " (INHERITED)");
    CHECK_MSG(!strstr(out, mine[i].target), "the exec'd child inherited fd %d %s:\n%s", mine[i].fd, mine[i].target,
              out);
    CHECK_MSG(flags & FD_CLOEXEC, "fd %d %s is not close-on-exec", mine[i].fd, mine[i].target);
  }
  CHECK_OK(rlock_lock_unlock(l));
  rlock_cancel_free(cancel);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* Item 4: TCP keepalive on every connection (default 60 s idle), off with 0. */
static void check_keepalive(int64_t ka_ms, int want_on, int want_idle) {
  fdent_t before[256], after[256], mine[64];
  int nb = list_fds(before, 256);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = srv->url;
  if (ka_ms >= 0) o.tcp_keepalive_ms = ka_ms;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "life:ka");
  int on = 0;
  CHECK_OK(rlock_lock_is_locked(l, &on));
  int n = new_fds(before, nb, after, list_fds(after, 256), mine), tcp = 0;
  for (int i = 0; i < n; i++) {
    if (strncmp(mine[i].target, "socket:", 7)) continue;
    int v = 0, idle = 0;
    socklen_t len = sizeof v;
    if (getsockopt(mine[i].fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len) != 0) continue;
    len = sizeof idle;
    if (getsockopt(mine[i].fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &len) != 0) continue; /* not TCP */
    tcp++;
    printf("fd %d: SO_KEEPALIVE %d, TCP_KEEPIDLE %d s\n", mine[i].fd, v, idle);
    CHECK_EQ(!!v, want_on);
    if (want_on) CHECK_EQ(idle, want_idle);
  }
  CHECK(tcp >= 2);
  rlock_lock_free(l);
  rlock_client_free(c);
}
TEST(tcp_keepalive) {
  check_keepalive(-1, 1, 60);
  check_keepalive(10500, 1, 11);
  check_keepalive(0, 0, 0);
}

/* ------------------------------------------------------------ fork */

/* Waits at most ms for the child; kills it (and fails) if it hangs. */
static int wait_child_bounded(pid_t pid, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(r == 0);
    if (th_now_ms() > end) {
      kill(pid, SIGKILL);
      th_wait_child(pid);
      th_fail(__FILE__, __LINE__, "the forked child hangs on the inherited client");
    }
    th_sleep_ms(10); /* no event announces a child that hangs */
  }
}

/* In the child: every call on the inherited client fails with RLOCK_ESYS and
 * says why. Exit status = the number of the first failed check. */
static int child_checks(rlock_client_t *c, rlock_lock_t *l) {
  if (rlock_lock_trylock(l, 0, 30000) != RLOCK_ESYS) return 1;
  if (!strstr(rlock_last_error(), "forked child")) return 2;
  if (rlock_lock_unlock(l) != RLOCK_ESYS) return 3;
  int on = 0;
  if (rlock_lock_is_locked(l, &on) != RLOCK_ESYS) return 4;
  const char *argv[1] = {"PING"};
  rlock_reply_t *r = NULL;
  if (rlock_client_command(c, 1, argv, NULL, &r) != RLOCK_ESYS || r) return 5;
  if (rlock_lock_release_async(l, 5, NULL, NULL) != RLOCK_ESYS) return 6;
  rlock_lock_free(l);
  rlock_client_free(c); /* must neither hang nor disturb the parent's connections */
  return 0;
}

/* Item 6f: a forked child that uses the parent's client fails fast with a
 * clear message; the parent's client is untouched. */
TEST(forked_child_fails_fast) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "life:fork");
  CHECK_OK(rlock_lock_lock(l, 30000));
  pid_t pid = th_fork();
  if (pid == 0) {
    /* The child must not free the parent's client (rlock.h), so it leaves by
     * exec with its result: a leak checker (valgrind) judges the exec'd
     * program, not the copy of the client this process inherited. */
    char code[16];
    snprintf(code, sizeof code, "exit %d", child_checks(c, l));
    execl("/bin/sh", "sh", "-c", code, (char *)NULL);
    _exit(127);
  }
  int st = wait_child_bounded(pid, 10000);
  CHECK_MSG(st == 0, "child check %d failed", st);
  /* the parent's client still works, and still holds the lock */
  int held = 0;
  CHECK_OK(rlock_lock_is_held(l, RLOCK_OWNER_SELF, &held));
  CHECK_EQ(held, 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "life:fork", NULL), 0);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A fork while other threads are in the middle of calls on the client (ops
 * taken from and given back to the client's spare list, under its mutex):
 * the child's calls must still fail at once with RLOCK_ESYS. A child that
 * inherited the spare list's mutex locked (held by a thread that does not
 * exist in the child) hangs in its first call if the call takes an op
 * before it looks at the fork. The mutex is held for a few instructions
 * per call: many forks (at most BUSY_FORKS, for at most BUSY_MS: fewer under
 * valgrind) while three threads call without pause. */
#define BUSY_FORKS 2000
#define BUSY_MS 8000
static atomic_int busy_stop;
static atomic_int busy_outstanding;
static void busy_cb(rlock_lock_t *l, int status, int64_t value, void *arg) { atomic_fetch_sub(&busy_outstanding, 1); }
static void *busy_main(void *arg) {
  rlock_lock_t *l = arg;
  while (!atomic_load(&busy_stop)) {
    if (atomic_load(&busy_outstanding) > 2000) {
      sched_yield();
      continue;
    }
    atomic_fetch_add(&busy_outstanding, 1);
    if (rlock_lock_is_locked_async(l, busy_cb, NULL)) atomic_fetch_sub(&busy_outstanding, 1);
  }
  return NULL;
}
static int busy_all_done(void *arg) { return atomic_load(&busy_outstanding) == 0; }

/* The child's exit status, polled every millisecond (a child that does not
 * hang is gone in about one); a child alive after ms is killed: -1. */
static int reap_fast(pid_t pid, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  int st;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    CHECK(r == 0);
    if (th_now_ms() > end) {
      kill(pid, SIGKILL);
      th_wait_child(pid);
      return -1;
    }
    th_sleep_ms(1); /* no event announces a child that hangs */
  }
}

TEST(forked_while_busy_fails_fast) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "life:forkbusy");
  atomic_store(&busy_stop, 0);
  pthread_t th[3];
  for (int i = 0; i < 3; i++) CHECK_EQ(pthread_create(&th[i], NULL, busy_main, l), 0);
  int64_t end = th_now_ms() + BUSY_MS;
  int forks = 0;
  for (; forks < BUSY_FORKS && th_now_ms() < end; forks++) {
    pid_t pid = th_fork();
    if (pid == 0) { /* leaves by exec: a leak checker judges /bin/true, not this copy (see above) */
      int on = 0;
      execl(rlock_lock_is_locked(l, &on) == RLOCK_ESYS ? "/bin/true" : "/bin/false", "x", (char *)NULL);
      _exit(127);
    }
    int st = reap_fast(pid, 5000);
    CHECK_MSG(st != -1, "fork %d: the child hangs in its first call on the inherited client", forks);
    CHECK_MSG(st == 0, "fork %d: the child's call did not fail with RLOCK_ESYS (%d)", forks, st);
  }
  atomic_store(&busy_stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  CHECK_MSG(th_wait_until(busy_all_done, NULL, 10000), "async calls outstanding: %d", atomic_load(&busy_outstanding));
  printf("# %d forks\n", forks);
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* ------------------------------------------------------------ latches */

static long long count_keys(const char *pattern) {
  redisReply *r = th_cmd(srv, "KEYS", pattern, NULL);
  CHECK(r->type == REDIS_REPLY_ARRAY);
  long long n = (long long)r->elements;
  th_reply_free(r);
  return n;
}

/* Item 10: lock + unlock + client_free leaves no latch key behind. */
TEST(latches_deleted_on_free) {
  for (int round = 0; round < 3; round++) {
    rlock_client_t *c = th_client(srv->url, 0);
    rlock_lock_t *a = th_lock(c, "life:latch-a"), *b = th_lock(c, "life:latch-b");
    CHECK_OK(rlock_lock_lock(a, 30000));
    CHECK_OK(rlock_lock_lock(b, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_lock(b, RLOCK_LEASE_WATCHDOG));
    CHECK_OK(rlock_lock_unlock(b));
    CHECK_OK(rlock_lock_unlock(b));
    CHECK_OK(rlock_lock_unlock(a));
    rlock_lock_free(a), rlock_lock_free(b);
    int64_t t0 = rlock_now_ms();
    rlock_client_free(c);
    printf("client_free took %lld ms\n", (long long)(rlock_now_ms() - t0));
    CHECK_EQ(count_keys("rlock_acquire_latch:*"), 0);
    CHECK_EQ(count_keys("redisson_unlock_latch:*"), 0);
    CHECK_EQ(th_cmd_int(srv, "EXISTS", "life:latch-a", "life:latch-b", NULL), 0);
  }
}

/* Issue 23: an unlock by an owner that does not hold the lock (never took
 * it, or its hold was force-unlocked) answers RLOCK_ENOTHELD and writes its
 * latch ('n'); rlock_client_free deletes it like any other (rlock.h), on the
 * fast path and off it. */
TEST(notheld_latch_deleted_on_free) {
  for (int fast = 0; fast < 2; fast++) {
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = srv->url;
    o.fast_path = fast;
    rlock_client_t *c = NULL;
    CHECK_OK(rlock_client_new(&c, &o));
    rlock_lock_t *a = th_lock(c, "life:notheld");
    CHECK_RC(rlock_lock_unlock(a), RLOCK_ENOTHELD); /* never taken */
    CHECK_OK(rlock_lock_lock(a, 30000));
    int was = 0;
    CHECK_OK(rlock_lock_force_unlock(a, &was));
    CHECK_RC(rlock_lock_unlock(a), RLOCK_ENOTHELD); /* taken, then force-unlocked */
    rlock_lock_free(a);
    rlock_client_free(c);
    CHECK_MSG(count_keys("redisson_unlock_latch:*") == 0, "fast_path %d: %lld unlock latch(es) left", fast,
              count_keys("redisson_unlock_latch:*"));
    CHECK_EQ(count_keys("rlock_acquire_latch:*"), 0);
  }
}

/* ONLY=name[,name...] runs only those tests (to watch one fail on old code). */
static int selected(const char *name) {
  const char *only = getenv("ONLY");
  return !only || strstr(only, name) != NULL;
}
#define RUN_SELECTED(name)          \
  do {                              \
    if (selected(#name)) RUN(name); \
  } while (0)

int main(int argc, char **argv) {
  th_init(argc, argv, 100);
  srv = th_server_start(NULL);
  RUN_SELECTED(latches_deleted_on_free);
  RUN_SELECTED(notheld_latch_deleted_on_free);
  RUN_SELECTED(forked_child_fails_fast);
  RUN_SELECTED(forked_while_busy_fails_fast);
  RUN_SELECTED(exec_child_inherits_no_fds);
  RUN_SELECTED(tcp_keepalive);
  th_server_stop(srv);
  return th_done();
}
