/* proxy.c -- the loopback TCP fault proxy (see proxy.h): one thread, one
 * poll(2) loop over the listening socket, a wake pipe and every (client,
 * server) socket pair, with per-direction queues of time-stamped chunks. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define MAX_PAIRS 64
#define QUEUE_MAX (4u << 20) /* stop reading a side when this much waits */

typedef struct chunk {
  struct chunk *next;
  size_t len, off;
  int64_t release_ms;
  char data[];
} chunk_t;

typedef struct dirq {
  chunk_t *head, *tail;
  size_t bytes;
} dirq_t;

typedef struct pair {
  int fd[2];      /* 0 client, 1 server */
  int port;       /* local port of fd[1]: how the server names this connection */
  dirq_t q[2];    /* q[0]: client -> server (UP), q[1]: server -> client (DOWN) */
  int late;       /* was held (fp_hold_conn): bytes written before the client's close still go up */
  int client_eof; /* 1: the client closed its side; the pair lives until q[0] is delivered;
                     2: delivered, FIN sent upstream: waiting for the server to close */
} pair_t;

struct conn_dirs {
  int port, dirs;
};

struct fp_proxy {
  int lfd, port, upstream;
  int wake[2];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  /* config (mu) */
  int64_t delay_ms;
  size_t trickle[2]; /* fp_trickle: at most this many bytes per write and per ms in a direction (0: no bound) */
  int blackhole, refuse, quit;
  struct conn_dirs drops[16]; /* per-connection silent drops (fp_drop_conn) */
  int ndrops;
  struct conn_dirs holds[16]; /* per-connection held bytes (fp_hold_conn) */
  int nholds;
  uint64_t cut_req, cut_done;
  /* stats (mu) */
  int nconn;
  uint64_t accepted, bytes[2];
  uint64_t loops; /* passes of the thread's loop done (fp_sync) */
  /* thread only */
  pair_t pairs[MAX_PAIRS];
  int npairs;
  size_t pieces; /* trickled writes so far */
};

static void wake(fp_proxy_t *p) {
  char c = 1;
  ssize_t n = write(p->wake[1], &c, 1);
  (void)n;
}

static void q_clear(dirq_t *q) {
  chunk_t *c = q->head;
  while (c) {
    chunk_t *n = c->next;
    free(c);
    c = n;
  }
  q->head = q->tail = NULL;
  q->bytes = 0;
}

static void pair_close(fp_proxy_t *p, int i) {
  pair_t *pr = &p->pairs[i];
  close(pr->fd[0]);
  close(pr->fd[1]);
  q_clear(&pr->q[0]);
  q_clear(&pr->q[1]);
  p->pairs[i] = p->pairs[--p->npairs];
}

static int connect_upstream(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

static void do_accept(fp_proxy_t *p, int refuse) {
  int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  pthread_mutex_lock(&p->mu);
  p->accepted++;
  pthread_mutex_unlock(&p->mu);
  int up = refuse || p->npairs == MAX_PAIRS ? -1 : connect_upstream(p->upstream);
  if (up < 0) {
    close(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  pair_t *pr = &p->pairs[p->npairs++];
  memset(pr, 0, sizeof *pr);
  pr->fd[0] = fd;
  pr->fd[1] = up;
  struct sockaddr_in la;
  socklen_t ll = sizeof la;
  if (getsockname(up, (struct sockaddr *)&la, &ll) == 0) pr->port = ntohs(la.sin_port);
}

/* The directions pair i discards (fp_drop_conn); mu held. */
static int drops_of(fp_proxy_t *p, int i) {
  for (int k = 0; k < p->ndrops; k++)
    if (p->drops[k].port == p->pairs[i].port) return p->drops[k].dirs;
  return 0;
}

/* The directions pair i holds back (fp_hold_conn); mu held. */
static int holds_of(fp_proxy_t *p, int i) {
  for (int k = 0; k < p->nholds; k++)
    if (p->holds[k].port == p->pairs[i].port) return p->holds[k].dirs;
  return 0;
}

/* Reads what side `from` of pair i has into its queue. -1: the pair is gone. */
static int do_read(fp_proxy_t *p, int i, int from, int64_t delay) {
  pair_t *pr = &p->pairs[i];
  char buf[65536];
  ssize_t n = read(pr->fd[from], buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (n <= 0 && from == 0 && pr->late && pr->q[0].head) {
    /* the client closed: what it wrote before still travels (an orphaned
     * TCP socket keeps retransmitting); replies have nowhere to go */
    pr->client_eof = 1;
    q_clear(&pr->q[1]);
    return 0;
  }
  if (n <= 0) return -1;
  pthread_mutex_lock(&p->mu);
  int dropped = drops_of(p, i) & (1 << from);
  pthread_mutex_unlock(&p->mu);
  if (dropped) return 0;                     /* the flow is forgotten: the bytes vanish */
  if (from == 1 && pr->client_eof) return 0; /* a reply for a client that is gone */
  chunk_t *c = malloc(sizeof *c + (size_t)n);
  if (!c) return -1;
  c->next = NULL;
  c->len = (size_t)n;
  c->off = 0;
  c->release_ms = th_now_ms() + delay;
  memcpy(c->data, buf, (size_t)n);
  dirq_t *q = &pr->q[from];
  if (q->tail) q->tail->next = c;
  else q->head = c;
  q->tail = c;
  q->bytes += (size_t)n;
  return 0;
}

/* Writes the due chunks of direction d (0 up, 1 down) of pair i; trickle
 * (non-zero): one piece of at most that many bytes, the rest 1 ms later. */
static int do_write(fp_proxy_t *p, int i, int d, size_t trickle) {
  pair_t *pr = &p->pairs[i];
  dirq_t *q = &pr->q[d];
  int64_t now = th_now_ms();
  while (q->head && q->head->release_ms <= now) {
    chunk_t *c = q->head;
    size_t want = c->len - c->off;
    if (trickle) { /* pieces of 1, 2, ... trickle bytes in turn: cuts at every offset of a reply */
      size_t piece = 1 + p->pieces++ % trickle;
      if (want > piece) want = piece;
    }
    ssize_t n = write(pr->fd[1 - d], c->data + c->off, want);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (n <= 0) return -1;
    pthread_mutex_lock(&p->mu);
    p->bytes[d] += (uint64_t)n;
    pthread_mutex_unlock(&p->mu);
    c->off += (size_t)n;
    q->bytes -= (size_t)n;
    if (c->off < c->len) {
      if (trickle) c->release_ms = now + 1; /* a separate segment, read apart */
      return 0;
    }
    q->head = c->next;
    if (!q->head) q->tail = NULL;
    free(c);
    if (trickle) { /* the next chunk in a later segment too */
      if (q->head && q->head->release_ms <= now) q->head->release_ms = now + 1;
      return 0;
    }
  }
  return 0;
}

static int pr_done(const pair_t *pr) { return pr->client_eof == 1 && !pr->q[0].head; }

static void *run(void *arg) {
  fp_proxy_t *p = arg;
  struct pollfd pfd[2 + 2 * MAX_PAIRS];
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int64_t delay = p->delay_ms;
    size_t trickle[2] = {p->trickle[0], p->trickle[1]};
    int bh = p->blackhole, refuse = p->refuse, quit = p->quit;
    uint64_t cut = p->cut_req;
    int held[MAX_PAIRS];
    for (int i = 0; i < p->npairs; i++)
      if ((held[i] = holds_of(p, i))) p->pairs[i].late = 1;
    pthread_mutex_unlock(&p->mu);
    if (cut != p->cut_done || quit) {
      while (p->npairs) pair_close(p, p->npairs - 1);
      pthread_mutex_lock(&p->mu);
      p->cut_done = cut;
      p->nconn = 0;
      pthread_cond_broadcast(&p->cond);
      pthread_mutex_unlock(&p->mu);
      if (quit) return NULL;
    }
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
    int64_t now = th_now_ms(), next = -1;
    for (int i = 0; i < p->npairs; i++) {
      pair_t *pr = &p->pairs[i];
      for (int side = 0; side < 2; side++) {
        /* side s reads into q[s] (direction s) and writes q[1-s] */
        int dir_in = side, dir_out = 1 - side;
        int closed = side == 0 && pr->client_eof;
        short ev = 0;
        if (!closed && !(bh & (1 << dir_in)) && pr->q[dir_in].bytes < QUEUE_MAX) ev |= POLLIN;
        if (!(bh & (1 << dir_out)) && !(held[i] & (1 << dir_out)) && pr->q[dir_out].head) {
          if (pr->q[dir_out].head->release_ms <= now) ev |= POLLOUT;
          else if (next < 0 || pr->q[dir_out].head->release_ms < next) next = pr->q[dir_out].head->release_ms;
        }
        pfd[n++] = (struct pollfd){.fd = closed ? -1 : pr->fd[side], .events = ev};
      }
    }
    int timeout = next < 0 ? -1 : (int)(next - now + 1);
    if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR) return NULL;
    if (pfd[0].revents) {
      char b[64];
      while (read(p->wake[0], b, sizeof b) > 0) {
      }
    }
    /* a setting changed while we polled applies to what is read and written
     * now: the caller may have written right after its call returned (a
     * blackhole set as poll woke with a request readable forwarded it) */
    pthread_mutex_lock(&p->mu);
    delay = p->delay_ms;
    trickle[0] = p->trickle[0], trickle[1] = p->trickle[1];
    bh = p->blackhole, refuse = p->refuse;
    for (int i = 0; i < p->npairs; i++)
      if ((held[i] = holds_of(p, i))) p->pairs[i].late = 1;
    pthread_mutex_unlock(&p->mu);
    /* pairs first (their pollfd indexes), then accept */
    for (int i = p->npairs - 1; i >= 0; i--) {
      int dead = 0;
      for (int side = 0; side < 2 && !dead; side++) {
        short re = pfd[2 + 2 * i + side].revents;
        if (re & (POLLERR | POLLNVAL)) dead = 1;
        else if ((re & (POLLIN | POLLHUP)) && !(bh & (1 << side))) dead = do_read(p, i, side, delay) < 0;
      }
      for (int d = 0; d < 2 && !dead; d++)
        if (!(bh & (1 << d)) && !(held[i] & (1 << d))) dead = do_write(p, i, d, trickle[d]) < 0;
      if (!dead && pr_done(&p->pairs[i])) {   /* the closed client's last bytes are delivered: */
        shutdown(p->pairs[i].fd[1], SHUT_WR); /* FIN after them, as its kernel would send; the */
        p->pairs[i].client_eof = 2;           /* pair closes when the server closes its side */
      }
      if (dead) pair_close(p, i);
    }
    if (pfd[1].revents & POLLIN) do_accept(p, refuse);
    pthread_mutex_lock(&p->mu);
    p->nconn = p->npairs;
    p->loops++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
  }
}

fp_proxy_t *fp_start(int upstream_port) {
  fp_proxy_t *p = calloc(1, sizeof *p);
  if (!p) th_fail(__FILE__, __LINE__, "out of memory");
  p->upstream = upstream_port;
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->lfd, 64) != 0 ||
      getsockname(p->lfd, (struct sockaddr *)&a, &len) != 0)
    th_fail(__FILE__, __LINE__, "proxy listen: %s", strerror(errno));
  p->port = ntohs(a.sin_port);
  if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) th_fail(__FILE__, __LINE__, "pipe");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cond, NULL);
  if (pthread_create(&p->thread, NULL, run, p) != 0) th_fail(__FILE__, __LINE__, "proxy thread");
  return p;
}

int fp_port(const fp_proxy_t *p) { return p->port; }

void fp_trickle(fp_proxy_t *p, int dirs, size_t bytes) {
  pthread_mutex_lock(&p->mu);
  for (int d = 0; d < 2; d++)
    if (dirs & (1 << d)) p->trickle[d] = bytes;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void fp_delay(fp_proxy_t *p, int64_t ms) {
  pthread_mutex_lock(&p->mu);
  p->delay_ms = ms;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void fp_blackhole(fp_proxy_t *p, int dirs) {
  pthread_mutex_lock(&p->mu);
  p->blackhole = dirs & FP_BOTH;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void fp_refuse(fp_proxy_t *p, int on) {
  pthread_mutex_lock(&p->mu);
  p->refuse = on;
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void fp_cut(fp_proxy_t *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t want = ++p->cut_req;
  wake(p);
  while (p->cut_done < want) pthread_cond_wait(&p->cond, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

/* Sets the directions of one port in a per-connection table (drops, holds):
 * 0 removes its entry (a port healed takes no room: a long test run heals
 * far more than 16 connections); a full table fails the test (a setting
 * silently ignored would make the test pass without its fault). mu held. */
static void conn_set(struct conn_dirs *t, int *n, int server_port, int dirs) {
  int k = 0;
  while (k < *n && t[k].port != server_port) k++;
  if (!(dirs & FP_BOTH)) {
    if (k < *n) t[k] = t[--*n];
    return;
  }
  if (k == *n) {
    if (*n == 16) th_fail(__FILE__, __LINE__, "fault proxy: more than 16 connections dropped or held at once");
    (*n)++;
  }
  t[k].port = server_port;
  t[k].dirs = dirs & FP_BOTH;
}

void fp_drop_conn(fp_proxy_t *p, int server_port, int dirs) {
  pthread_mutex_lock(&p->mu);
  conn_set(p->drops, &p->ndrops, server_port, dirs);
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void fp_hold_conn(fp_proxy_t *p, int server_port, int dirs) {
  pthread_mutex_lock(&p->mu);
  conn_set(p->holds, &p->nholds, server_port, dirs);
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

int fp_connections(fp_proxy_t *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->nconn;
  pthread_mutex_unlock(&p->mu);
  return n;
}

uint64_t fp_accepted(fp_proxy_t *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = p->accepted;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void fp_sync(fp_proxy_t *p) {
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < 2; i++) {
    uint64_t start = p->loops;
    wake(p);
    while (p->loops == start && !p->quit) pthread_cond_wait(&p->cond, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
}

uint64_t fp_bytes(fp_proxy_t *p, int dir) {
  pthread_mutex_lock(&p->mu);
  uint64_t n = p->bytes[dir == FP_DOWN ? 1 : 0];
  pthread_mutex_unlock(&p->mu);
  return n;
}

void fp_stop(fp_proxy_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_mutex_unlock(&p->mu);
  wake(p);
  pthread_join(p->thread, NULL);
  close(p->lfd);
  close(p->wake[0]);
  close(p->wake[1]);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cond);
  free(p);
}

/* fp_start in two steps, for tests that fork worker processes which must
 * know the port: no thread may run in the parent at the fork. */
fp_proxy_t *fp_listen(int upstream_port) {
  fp_proxy_t *p = calloc(1, sizeof *p);
  if (!p) th_fail(__FILE__, __LINE__, "out of memory");
  p->upstream = upstream_port;
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->lfd, 64) != 0 ||
      getsockname(p->lfd, (struct sockaddr *)&a, &len) != 0)
    th_fail(__FILE__, __LINE__, "proxy listen: %s", strerror(errno));
  p->port = ntohs(a.sin_port);
  if (pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) th_fail(__FILE__, __LINE__, "pipe");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cond, NULL);
  return p;
}

void fp_run(fp_proxy_t *p) {
  if (pthread_create(&p->thread, NULL, run, p) != 0) th_fail(__FILE__, __LINE__, "proxy thread");
}
