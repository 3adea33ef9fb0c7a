/* test_multilock_hosts.c -- the MultiLock's canonical order on a dual-stack
 * host: /etc/hosts as Debian ships it ("127.0.0.1 localhost" and
 * "::1 localhost ip6-localhost ip6-loopback"), where getaddrinfo's first
 * answer for localhost is ::1. The process runs in a mount namespace of its
 * own with such a file bound over /etc/hosts (nothing outside it changes);
 * without the privilege for that it exits 77 (ctest: skipped).
 *
 *   localhost_is_127_0_0_1  "redis://localhost:P" and "redis://127.0.0.1:P"
 *                         are one server (rlock.h's own example): one name on
 *                         both is a member twice (RLOCK_EINVAL), and two
 *                         processes spelling two servers the opposite ways
 *                         take one name's members in the same order (with the
 *                         first answer, "[::1]:P" sorted after "127.0.0.1:Q":
 *                         opposite orders, a deadlock between them)
 *   name_answers_change   a host name whose answer changes (a DNS failover
 *                         endpoint that names the new master: here the hosts
 *                         file rewritten between two MultiLocks) orders its
 *                         members as before: the deployment as its URL spells
 *                         it, never the address serving it now (before: the
 *                         name resolved at creation, 127.0.0.3 then 127.0.0.1,
 *                         took opposite members first: a deadlock between a
 *                         MultiLock made before the change and one made after) */
#include "harness.h"

#include <netdb.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

static th_server_t *s1, *s2;

static const char base_hosts[] = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n";

/* /etc/hosts (this process's own, bound in dual_stack_hosts) is now the
 * base lines and extra. */
static int set_hosts(const char *extra) {
  int fd = open("/etc/hosts", O_WRONLY | O_TRUNC);
  if (fd < 0) return -1;
  char text[512];
  int n = snprintf(text, sizeof text, "%s%s", base_hosts, extra);
  int ok = write(fd, text, (size_t)n) == n;
  close(fd);
  return ok ? 0 : -1;
}

/* 0 once /etc/hosts is the dual-stack one (in this process's own mount
 * namespace) and localhost's first answer is ::1; else why not. */
static const char *dual_stack_hosts(void) {
  char path[] = "/tmp/rlock-hosts-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  int ok = write(fd, base_hosts, sizeof base_hosts - 1) == (ssize_t)(sizeof base_hosts - 1);
  close(fd);
  const char *why = NULL;
  if (!ok) why = "cannot write the hosts file";
  else if (unshare(CLONE_NEWNS)) why = "unshare(CLONE_NEWNS) failed (no CAP_SYS_ADMIN?)";
  else if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL)) why = "cannot make / private";
  else if (mount(path, "/etc/hosts", "none", MS_BIND, NULL)) why = "cannot bind a file over /etc/hosts";
  unlink(path);
  if (why) return why;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo("localhost", NULL, &hints, &res)) return "localhost does not resolve";
  int v6_first = res->ai_family == AF_INET6;
  freeaddrinfo(res);
  return v6_first ? NULL : "localhost's first answer is not ::1 (no IPv6 loopback?)";
}

TEST(localhost_is_127_0_0_1) {
  char lo1[64], ip1[64], lo2[64], ip2[64];
  snprintf(lo1, sizeof lo1, "redis://localhost:%d", s1->port);
  snprintf(ip1, sizeof ip1, "redis://127.0.0.1:%d/0", s1->port);
  snprintf(lo2, sizeof lo2, "redis://localhost:%d", s2->port);
  snprintf(ip2, sizeof ip2, "redis://127.0.0.1:%d/0", s2->port);

  /* one lock spelled two ways: a member twice */
  rlock_client_t *c1 = th_client(lo1, 0), *c2 = th_client(ip1, 0);
  rlock_lock_t *x = th_lock(c1, "mh:twice"), *y = th_lock(c2, "mh:twice");
  rlock_lock_t *members[2] = {x, y};
  rlock_multilock_t *m = NULL;
  int rc = rlock_multilock_new(&m, members, 2);
  if (!rc) rlock_multilock_free(m);
  CHECK_MSG(rc == RLOCK_EINVAL, "%s and %s: one lock, accepted as two members (%s)", lo1, ip1, rlock_err_name(rc));
  rlock_lock_free(x), rlock_lock_free(y);
  rlock_client_free(c1), rlock_client_free(c2);

  /* one name on two servers, spelled the opposite ways by two processes */
  rlock_client_t *o1 = th_client(ip1, 0), *o2 = th_client(ip2, 0);
  rlock_lock_t *oa = th_lock(o1, "mh:spell"), *ob = th_lock(o2, "mh:spell");
  CHECK_OK(rlock_lock_acquire(oa, 3, 0, 60000, NULL));
  CHECK_OK(rlock_lock_acquire(ob, 3, 0, 60000, NULL));
  char one = th_multilock_first_taken(lo1, "mh:spell", ip2, "mh:spell"); /* 'a': the member on s1 */
  char two = th_multilock_first_taken(ip1, "mh:spell", lo2, "mh:spell");
  printf("first: '%c' with %s, %s; '%c' with %s, %s\n", one, lo1, ip2, two, ip1, lo2);
  CHECK(one != '?' && two != '?');
  CHECK_MSG(one == two, "the two spellings take opposite members first: a deadlock between two processes");
  CHECK_OK(rlock_lock_release(oa, 3));
  CHECK_OK(rlock_lock_release(ob, 3));
  rlock_lock_free(oa), rlock_lock_free(ob);
  rlock_client_free(o1), rlock_client_free(o2);
}

TEST(name_answers_change) {
  /* the endpoint's server also listens on 127.0.0.3, the other deployment on 127.0.0.2 */
  static const char *const b3[] = {"--bind", "127.0.0.1", "127.0.0.3", NULL};
  static const char *const b2[] = {"--bind", "127.0.0.1", "127.0.0.2", NULL};
  th_server_t *e = th_server_start(&(th_server_opts_t){.extra_args = b3});
  th_server_t *o = th_server_start(&(th_server_opts_t){.extra_args = b2});
  const char *name = "mh:dns";
  char ep[64], other[64];
  snprintf(ep, sizeof ep, "redis://rl-endpoint:%d", e->port);
  snprintf(other, sizeof other, "redis://127.0.0.2:%d", o->port);
  rlock_client_t *ce = th_client(e->url, 0), *co = th_client(o->url, 0);
  rlock_lock_t *he = th_lock(ce, name), *ho = th_lock(co, name);
  CHECK_OK(rlock_lock_acquire(he, 3, 0, 60000, NULL)); /* both held elsewhere */
  CHECK_OK(rlock_lock_acquire(ho, 3, 0, 60000, NULL));
  CHECK(set_hosts("127.0.0.3 rl-endpoint\n") == 0);
  char before = th_multilock_first_taken(ep, name, other, name);
  CHECK(set_hosts("127.0.0.1 rl-endpoint\n") == 0); /* the name answers another address now */
  char after = th_multilock_first_taken(ep, name, other, name);
  printf("first: '%c' with rl-endpoint at 127.0.0.3, '%c' at 127.0.0.1 (%s, %s)\n", before, after, ep, other);
  CHECK(before != '?' && after != '?');
  CHECK_MSG(before == after,
            "one MultiLock before the name's answer changed and one after take opposite members "
            "first: they deadlock");
  CHECK(set_hosts("") == 0);
  CHECK_OK(rlock_lock_release(he, 3));
  CHECK_OK(rlock_lock_release(ho, 3));
  rlock_lock_free(he), rlock_lock_free(ho);
  rlock_client_free(ce), rlock_client_free(co);
  th_server_stop(o);
  th_server_stop(e);
}

int main(int argc, char **argv) {
  const char *why = dual_stack_hosts(); /* before any thread: the namespace is the process's */
  if (why) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  th_init(argc, argv, 120);
  s1 = th_server_start(NULL);
  s2 = th_server_start(NULL);
  RUN(localhost_is_127_0_0_1);
  RUN(name_answers_change);
  th_server_stop(s1);
  th_server_stop(s2);
  return th_done();
}
