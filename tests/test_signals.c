/* test_signals.c -- the client's I/O thread runs with every signal blocked:
 * a write to a connection the server closed must give EPIPE, never a SIGPIPE
 * that kills the application (which keeps SIGPIPE at its default here), and
 * the application's signals must reach its own threads. Checked through
 * /proc/self/task/<tid>/status (SigBlk), then for real: with SIGPIPE at its
 * default action, the client's I/O thread is held in a callback while a
 * relay closes the client's socket (FIN, then RST); in the same pass it
 * writes (a NOSCRIPT re-send), the write fails with EPIPE, the kernel raises
 * SIGPIPE (seen pending, blocked, on the I/O thread: SigPnd) and the process
 * lives on. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static th_server_t *srv;

/* SigBlk mask of thread tid. */
static unsigned long long sigblk(long tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  FILE *f = fopen(path, "r");
  unsigned long long m = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "SigBlk:", 7)) m = strtoull(line + 7, NULL, 16);
  fclose(f);
  return m;
}

TEST(io_thread_blocks_signals) {
  long self = (long)syscall(SYS_gettid);
  rlock_client_t *c = th_client(srv->url, 0);
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL);
  int others = 0, blocked = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    long tid = atol(e->d_name);
    if (tid <= 0 || tid == self) continue;
    others++;
    unsigned long long m = sigblk(tid);
    if ((m >> (SIGPIPE - 1)) & 1 && (m >> (SIGINT - 1)) & 1 && (m >> (SIGTERM - 1)) & 1) blocked++;
  }
  if (d) closedir(d);
  CHECK(others >= 1);        /* the client's I/O thread */
  CHECK_EQ(blocked, others); /* ...with SIGPIPE, SIGINT, SIGTERM blocked */
  /* The caller's own mask is left as it was. */
  CHECK_EQ((sigblk(self) >> (SIGPIPE - 1)) & 1, 0);
  rlock_client_free(c);
}

/* ---- a relay between the client and redis-server whose client-side
 * sockets the test can close with FIN then RST while the client's I/O thread
 * is busy: the client's next write then fails with EPIPE, which is exactly
 * when the kernel raises SIGPIPE (unless the writing thread blocks it). */

#define RELAY_MAX 8

typedef struct relay {
  int lfd, port, upstream_port;
  int ctl[2], ack[2];
  int cli[RELAY_MAX], up[RELAY_MAX], cli_port[RELAY_MAX];
  int n;
  pthread_mutex_t mu; /* guards reset_port / nreset (read by the test thread) */
  int reset_port[RELAY_MAX], nreset;
  pthread_t thread;
} relay_t;

static int connect_upstream(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
    th_fail(__FILE__, __LINE__, "relay: connect upstream: %s", strerror(errno));
  return fd;
}

static void relay_drop(relay_t *r, int i) {
  close(r->cli[i]);
  close(r->up[i]);
  r->n--;
  r->cli[i] = r->cli[r->n], r->up[i] = r->up[r->n], r->cli_port[i] = r->cli_port[r->n];
}

/* Forwards what is readable on from to to; 0 on EOF or error. MSG_NOSIGNAL:
 * this test runs with SIGPIPE at its default action. */
static int forward(int from, int to) {
  char buf[65536];
  ssize_t n = read(from, buf, sizeof buf);
  if (n <= 0) return 0;
  for (ssize_t off = 0; off < n;) {
    ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
    if (w <= 0) return 0;
    off += w;
  }
  return 1;
}

/* Closes every client-side socket with FIN (shutdown) and then RST (linger
 * 0), and the upstream ones; answers how many there were. */
static void relay_reset_all(relay_t *r) {
  int n = r->n;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < n; i++) r->reset_port[i] = r->cli_port[i];
  r->nreset = n;
  pthread_mutex_unlock(&r->mu);
  while (r->n > 0) {
    struct linger lg = {1, 0};
    shutdown(r->cli[0], SHUT_WR);
    setsockopt(r->cli[0], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    relay_drop(r, 0);
  }
  if (write(r->ack[1], &n, sizeof n) != (ssize_t)sizeof n) th_fail(__FILE__, __LINE__, "relay ack");
}

static void *relay_main(void *arg) {
  relay_t *r = arg;
  for (;;) {
    struct pollfd p[2 + 2 * RELAY_MAX];
    p[0] = (struct pollfd){.fd = r->ctl[0], .events = POLLIN};
    p[1] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
    for (int i = 0; i < r->n; i++) {
      p[2 + 2 * i] = (struct pollfd){.fd = r->cli[i], .events = POLLIN};
      p[3 + 2 * i] = (struct pollfd){.fd = r->up[i], .events = POLLIN};
    }
    if (poll(p, (nfds_t)(2 + 2 * r->n), -1) < 0) continue;
    if (p[0].revents) {
      char c = 0;
      if (read(r->ctl[0], &c, 1) != 1 || c == 'q') break;
      if (c == 'r') relay_reset_all(r);
      continue;
    }
    for (int i = r->n - 1; i >= 0; i--) {
      int ok = 1;
      if (p[2 + 2 * i].revents) ok = forward(r->cli[i], r->up[i]);
      if (ok && p[3 + 2 * i].revents) ok = forward(r->up[i], r->cli[i]);
      if (!ok) relay_drop(r, i);
    }
    if (p[1].revents && r->n < RELAY_MAX) {
      struct sockaddr_in a;
      socklen_t len = sizeof a;
      int fd = accept(r->lfd, (struct sockaddr *)&a, &len);
      if (fd < 0) continue;
      r->cli[r->n] = fd;
      r->cli_port[r->n] = ntohs(a.sin_port);
      r->up[r->n] = connect_upstream(r->upstream_port);
      r->n++;
    }
  }
  while (r->n > 0) relay_drop(r, 0);
  return NULL;
}

static relay_t *relay_start(int upstream_port) {
  relay_t *r = calloc(1, sizeof *r);
  CHECK(r != NULL);
  r->upstream_port = upstream_port;
  pthread_mutex_init(&r->mu, NULL);
  r->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  CHECK(bind(r->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(r->lfd, 16) == 0);
  CHECK(getsockname(r->lfd, (struct sockaddr *)&a, &len) == 0);
  r->port = ntohs(a.sin_port);
  CHECK(pipe(r->ctl) == 0 && pipe(r->ack) == 0);
  CHECK_EQ(pthread_create(&r->thread, NULL, relay_main, r), 0);
  return r;
}

/* FIN + RST on every client-side socket; returns how many (their ports in
 * r->reset_port). */
static int relay_reset(relay_t *r) {
  char c = 'r';
  int n = 0;
  CHECK(write(r->ctl[1], &c, 1) == 1);
  CHECK(read(r->ack[0], &n, sizeof n) == (ssize_t)sizeof n);
  return n;
}

static void relay_stop(relay_t *r) {
  char c = 'q';
  CHECK(write(r->ctl[1], &c, 1) == 1);
  pthread_join(r->thread, NULL);
  close(r->lfd), close(r->ctl[0]), close(r->ctl[1]), close(r->ack[0]), close(r->ack[1]);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* The client's sockets of the last reset are gone (closed by the RST). */
static int client_sockets_closed(void *arg) {
  relay_t *r = arg;
  int open = 0;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->nreset; i++) open |= th_tcp_queues(r->reset_port[i], r->port, NULL, NULL);
  pthread_mutex_unlock(&r->mu);
  return !open;
}

/* An async callback that holds the client's I/O thread until released. */
typedef struct stall {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int inside, release, status;
} stall_t;

static void stall_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  stall_t *s = arg;
  pthread_mutex_lock(&s->mu);
  s->inside = 1;
  s->status = status;
  pthread_cond_broadcast(&s->cv);
  while (!s->release) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static void stall_release(stall_t *s) {
  pthread_mutex_lock(&s->mu);
  s->release = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

typedef struct done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, status;
} done_t;

static void done_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  d->done = 1;
  d->status = status;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* Waits (bounded) until *flag is set under mu/cv. */
static int wait_set(pthread_mutex_t *mu, pthread_cond_t *cv, int *flag, int64_t timeout_ms) {
  int64_t deadline = th_now_ms() + timeout_ms;
  pthread_mutex_lock(mu);
  while (!*flag && th_now_ms() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
  }
  int v = *flag;
  pthread_mutex_unlock(mu);
  return v;
}

/* Pending-signal mask (SigPnd: signals sent to that thread) of thread tid. */
static unsigned long long sigpnd(long tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  FILE *f = fopen(path, "r");
  unsigned long long m = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "SigPnd:", 7)) m = strtoull(line + 7, NULL, 16);
  fclose(f);
  return m;
}

/* The thread ids of this process, into tids (at most max); returns the count. */
static int list_tids(long *tids, int max) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) && n < max;)
    if (atol(e->d_name) > 0) tids[n++] = atol(e->d_name);
  if (d) closedir(d);
  return n;
}

TEST(write_to_reset_socket_no_sigpipe) {
  /* As in an application that never heard of SIGPIPE: the default action
   * (kill the process) for the whole scenario. */
  signal(SIGPIPE, SIG_DFL);
  relay_t *r = relay_start(srv->port);
  long before[64], after[64];
  int nb = list_tids(before, 64);
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", r->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.reconnect_min_ms = 20;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  long io[8];
  int nio = 0, na = list_tids(after, 64);
  for (int i = 0; i < na; i++) {
    int old = 0;
    for (int k = 0; k < nb; k++) old |= after[i] == before[k];
    if (!old && nio < 8) io[nio++] = after[i];
  }
  CHECK(nio >= 1); /* the client's I/O thread */
  rlock_lock_t *l = th_lock(c, "signals:epipe");

  /* The client's write must come before it sees the reset, so it must be
   * made in the same pass of its I/O thread that we hold up: a reply
   * NOSCRIPT to an EVALSHA makes the client re-send the script as EVAL at
   * once, in the pass that read the reply. So:
   * 1. hold the I/O thread (callback of S0) while an is_locked (A, whose
   *    callback holds it again) and an acquire (B, EVALSHA after SCRIPT
   *    FLUSH) are queued: both leave in one write, both replies come back
   *    in one read; */
  th_reply_free(th_cmd(srv, "SCRIPT", "FLUSH", NULL));
  stall_t s0 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
  stall_t sa = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
  done_t b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  CHECK_OK(rlock_lock_is_locked_async(l, stall_cb, &s0));
  CHECK_MSG(wait_set(&s0.mu, &s0.cv, &s0.inside, 10000), "the stalling callback never ran");
  CHECK_OK(rlock_lock_is_locked_async(l, stall_cb, &sa));
  CHECK_OK(rlock_lock_acquire_async(l, 7, 0, 30000, NULL, done_cb, &b));
  stall_release(&s0);
  /* 2. A's callback holds the I/O thread; B's NOSCRIPT waits in its input. */
  CHECK_MSG(wait_set(&sa.mu, &sa.cv, &sa.inside, 10000), "the second stall never ran");
  CHECK_OK(sa.status);
  /* 3. The server side goes away meanwhile: FIN, then RST. The client's
   *    socket is now closed for writing without the client knowing. */
  CHECK_EQ(relay_reset(r), 2); /* the command and the subscriber connection */
  CHECK_MSG(th_wait_until(client_sockets_closed, r, 5000), "the client's socket did not see the reset");
  for (int i = 0; i < nio; i++) CHECK_MSG(!((sigpnd(io[i]) >> (SIGPIPE - 1)) & 1), "SIGPIPE pending before the write");
  /* 4. Let the I/O thread go: it reads NOSCRIPT and writes EVAL -> EPIPE. */
  stall_release(&sa);
  CHECK_MSG(wait_set(&b.mu, &b.cv, &b.done, 10000), "the acquire never completed");
  /* The acquire was re-sent on a new connection (same request id). */
  CHECK_OK(b.status);
  CHECK_OK(rlock_lock_release(l, 7));
  /* The kernel really raised SIGPIPE for the client's write (it waits,
   * blocked, on the I/O thread), and the process is still here. */
  int raised = 0;
  for (int i = 0; i < nio; i++) raised |= (int)((sigpnd(io[i]) >> (SIGPIPE - 1)) & 1);
  CHECK_MSG(raised, "the client never wrote to the reset socket: SIGPIPE was not provoked");
  CHECK_EQ((sigpnd(th_gettid()) >> (SIGPIPE - 1)) & 1, 0);
  /* The client works on. */
  int locked = 1;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_stats_t s;
  rlock_client_stats(c, &s);
  CHECK(s.reconnects >= 1);
  rlock_lock_free(l);
  rlock_client_free(c);
  relay_stop(r);
  signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 100);
  srv = th_server_start(NULL);
  RUN(io_thread_blocks_signals);
  RUN(write_to_reset_socket_no_sigpipe);
  th_server_stop(srv);
  return th_done();
}
