/* harness_redisson.c -- the Redisson peer (harness_redisson.h): a JVM on
 * pipes, answers matched to their workers. */
#include "harness_redisson.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RLOCK_REDISSON_PEER
#define RLOCK_REDISSON_PEER ""
#endif
#ifndef RLOCK_JAVA
#define RLOCK_JAVA ""
#endif

const char *th_peer_unavailable(void) {
  struct stat st;
  if (!*RLOCK_JAVA || !*RLOCK_REDISSON_PEER)
    return "java or mvn was not found when the build was configured (apt-get install default-jdk-headless maven)";
  if (stat(RLOCK_JAVA, &st) != 0) return "java (found at configure time) is gone: " RLOCK_JAVA;
  if (stat(RLOCK_REDISSON_PEER, &st) != 0) return "the peer jar was not built: " RLOCK_REDISSON_PEER;
  return NULL;
}

th_peer_t *th_peer_start(const char *mode, const char *addresses, int64_t watchdog_ms, int64_t scan_ms) {
  const char *why = th_peer_unavailable();
  if (why) th_fail(__FILE__, __LINE__, "Redisson peer: %s", why);
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) th_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
  char wd[32], sc[32];
  snprintf(wd, sizeof wd, "%lld", (long long)watchdog_ms);
  snprintf(sc, sizeof sc, "%lld", (long long)scan_ms);
  pid_t pid = th_fork();
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    /* a quick start: C1 only, the serial GC, no hsperfdata file in /tmp */
    execl(RLOCK_JAVA, RLOCK_JAVA, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Xshare:auto",
          "-jar", RLOCK_REDISSON_PEER, mode, addresses, "--watchdog", wd, "--scan", sc, (char *)NULL);
    _exit(127);
  }
  close(to[0]), close(from[1]);
  th_peer_t *p = calloc(1, sizeof *p);
  if (!p) th_fail(__FILE__, __LINE__, "out of memory");
  p->pid = pid;
  p->in = fdopen(to[1], "w");
  p->out = from[0];
  char *id = th_peer_answer(p, "ready", 60000);
  snprintf(p->id, sizeof p->id, "%s", id);
  free(id);
  return p;
}

void th_peer_send(th_peer_t *p, const char *worker, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(p->in, "%s ", worker);
  vfprintf(p->in, fmt, ap);
  fputc('\n', p->in);
  va_end(ap);
  if (fflush(p->in) != 0) th_fail(__FILE__, __LINE__, "Redisson peer: write: %s", strerror(errno));
}

/* The pending answer of worker, taken out of the list (NULL: none). */
static char *take_pending(th_peer_t *p, const char *worker) {
  size_t wl = strlen(worker);
  for (int i = 0; i < p->npending; i++) {
    char *l = p->pending[i];
    if (!strncmp(l, worker, wl) && l[wl] == ' ') {
      char *a = strdup(l + wl + 1);
      free(l);
      memmove(p->pending + i, p->pending + i + 1, (size_t)(p->npending - i - 1) * sizeof *p->pending);
      p->npending--;
      return a;
    }
  }
  return NULL;
}

/* Moves the complete lines of buf to pending. */
static void split_lines(th_peer_t *p) {
  char *nl;
  while ((nl = memchr(p->buf, '\n', p->len))) {
    size_t n = (size_t)(nl - p->buf);
    if (p->npending == TH_PEER_PENDING) th_fail(__FILE__, __LINE__, "Redisson peer: too many answers unread");
    p->pending[p->npending++] = strndup(p->buf, n);
    memmove(p->buf, nl + 1, p->len - n - 1);
    p->len -= n + 1;
  }
}

int th_peer_poll(th_peer_t *p, const char *worker, int64_t timeout_ms, char **out) {
  int64_t deadline = th_now_ms() + timeout_ms;
  for (;;) {
    if ((*out = take_pending(p, worker))) return 1;
    int64_t left = deadline - th_now_ms();
    if (left < 0) return 0;
    struct pollfd pfd = {.fd = p->out, .events = POLLIN};
    int r = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
    if (r < 0 && errno != EINTR) th_fail(__FILE__, __LINE__, "poll: %s", strerror(errno));
    if (r <= 0) continue;
    if (p->len == sizeof p->buf) th_fail(__FILE__, __LINE__, "Redisson peer: line too long");
    ssize_t n = read(p->out, p->buf + p->len, sizeof p->buf - p->len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) th_fail(__FILE__, __LINE__, "Redisson peer ended (waiting for worker %s)", worker);
    p->len += (size_t)n;
    split_lines(p);
  }
}

char *th_peer_answer(th_peer_t *p, const char *worker, int64_t timeout_ms) {
  char *a;
  if (!th_peer_poll(p, worker, timeout_ms, &a))
    th_fail(__FILE__, __LINE__, "Redisson peer: no answer from worker %s within %lld ms", worker,
            (long long)timeout_ms);
  return a;
}

void th_peer_expect_at(const char *file, int line, th_peer_t *p, const char *worker, const char *want, const char *fmt,
                       ...) {
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  th_peer_send(p, worker, "%s", cmd);
  char *got = th_peer_answer(p, worker, 10000);
  if (strcmp(got, want) != 0) th_fail(file, line, "Redisson %s '%s': got '%s', want '%s'", worker, cmd, got, want);
  free(got);
}

long long th_peer_num(th_peer_t *p, const char *worker, const char *cmd) {
  th_peer_send(p, worker, "%s", cmd);
  char *got = th_peer_answer(p, worker, 10000), *end;
  errno = 0;
  long long v = strtoll(got, &end, 10);
  if (errno || end == got || *end)
    th_fail(__FILE__, __LINE__, "Redisson %s '%s': got '%s', want a number", worker, cmd, got);
  free(got);
  return v;
}

typedef struct parked_q {
  th_peer_t *p;
  const char *worker;
} parked_q_t;
static int is_parked(void *arg) {
  parked_q_t *q = arg;
  th_peer_send(q->p, "_parked", "parked %s", q->worker);
  char *a = th_peer_answer(q->p, "_parked", 10000);
  int yes = !strcmp(a, "true");
  free(a);
  return yes;
}

void th_peer_wait_parked(th_peer_t *p, const char *worker) {
  parked_q_t q = {p, worker};
  if (!th_wait_until(is_parked, &q, 20000))
    th_fail(__FILE__, __LINE__, "Redisson peer: worker %s never slept on its lock entry's latch", worker);
}

static void peer_free(th_peer_t *p) {
  if (p->in) fclose(p->in);
  close(p->out);
  for (int i = 0; i < p->npending; i++) free(p->pending[i]);
  free(p);
}

void th_peer_kill(th_peer_t *p) {
  kill(p->pid, SIGKILL);
  th_wait_child(p->pid);
  peer_free(p);
}

void th_peer_stop(th_peer_t *p) {
  fputs("quit\n", p->in);
  fclose(p->in);
  p->in = NULL;
  int rc = th_wait_child(p->pid);
  peer_free(p);
  if (rc != 0) th_fail(__FILE__, __LINE__, "Redisson peer exited with %d", rc);
}

/* ------------------------------------------------------------ the C side */

static void *cwaiter_run(void *arg) {
  th_cwaiter_t *w = arg;
  w->owner = RLOCK_OWNER_THREAD | (rlock_owner_t)th_gettid();
  w->rc = rlock_lock_acquire(w->l, RLOCK_OWNER_SELF, w->wait_ms, w->lease_ms, NULL);
  w->done_at = th_now_ms();
  atomic_store(&w->done, 1);
  return NULL;
}

void th_cwaiter_start(th_cwaiter_t *w) {
  atomic_store(&w->done, 0);
  CHECK(pthread_create(&w->t, NULL, cwaiter_run, w) == 0);
}

int th_cwaiter_done(void *arg) { return atomic_load(&((th_cwaiter_t *)arg)->done); }

static void res_set(void *arg, int status, int64_t value) {
  th_res_t *r = arg;
  r->status = status;
  r->value = value;
  atomic_store(&r->done, 1);
}
void th_res_sem(rlock_semaphore_t *s, int status, int64_t value, void *arg) {
  (void)s;
  res_set(arg, status, value);
}
void th_res_pes(rlock_permits_t *s, int status, int64_t value, void *arg) {
  (void)s;
  res_set(arg, status, value);
}
void th_res_latch(rlock_latch_t *l, int status, int64_t value, void *arg) {
  (void)l;
  res_set(arg, status, value);
}
int th_res_done(void *arg) { return atomic_load(&((th_res_t *)arg)->done); }
