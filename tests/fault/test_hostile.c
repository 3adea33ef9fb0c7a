/* test_hostile.c -- hostile input. A fake server (a thread on a loopback
 * port, parsing the client's requests with hiredis) answers the handshake
 * (CLIENT SETNAME, INFO replication, SCRIPT LOAD of every embedded script; SETNAME + SUBSCRIBE on the subscriber
 * connection) and then sends malformed, truncated, oversized, wrongly typed
 * and unsolicited replies: the client must report an error (RLOCK_EPROTO,
 * RLOCK_ECONNLOST, RLOCK_ETIMEDOUT...), never crash, never allocate without
 * bound (run under ASan). Then, against a real server: lock names with any
 * bytes, the largest name, and hold counts at the int64 limit. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fault_harness.h"
#include "../../lib/scripts.h"

/* ------------------------------------------------------------ the fake server */

/* A command connection's handshake ends with SCRIPT EXISTS of every embedded
 * script (one per row of lib/scripts.h), answered "all loaded" here, so no
 * SCRIPT LOAD follows: the unsolicited reply comes right after it. */
#define ONE_SCRIPT(e, file) +1
#define HANDSHAKE_SCRIPTS (0 RLOCK__SCRIPT_MAP(ONE_SCRIPT))

typedef struct fake_cfg {
  const char *first;       /* reply to the first non-handshake command of a command connection */
  size_t first_len;        /* 0: strlen */
  const char *rest;        /* reply to the later ones (NULL: same as first) */
  int close_after;         /* close the connection after sending `first` */
  const char *setname;     /* reply to CLIENT SETNAME (NULL: +OK) */
  const char *subscribe;   /* reply to SUBSCRIBE (NULL: a proper confirmation) */
  const char *unsolicited; /* sent right after the handshake of a command connection */
  int silent;              /* never answer anything */
} fake_cfg_t;

typedef struct fake {
  fake_cfg_t cfg;
  int lfd, port, wake[2];
  pthread_t th;
  atomic_int commands;
} fake_t;

#define MAXC 16

static void send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      if (poll(&pfd, 1, 1000) <= 0) return;
      continue;
    }
    if (w <= 0) return;
    p += w, n -= (size_t)w;
  }
}

typedef struct fconn {
  int fd;
  redisReader *rd;
  int is_cmd, handshake_left, sent_first;
} fconn_t;

/* Answers one request; returns -1 to close the connection. */
static int answer(fake_t *f, fconn_t *c, redisReply *req) {
  if (req->type != REDIS_REPLY_ARRAY || req->elements < 1) return -1;
  atomic_fetch_add(&f->commands, 1);
  if (f->cfg.silent) return 0;
  const char *v = req->element[0]->str;
  char buf[512];
  if (!strcasecmp(v, "CLIENT")) {
    const char *r = f->cfg.setname ? f->cfg.setname : "+OK\r\n";
    send_all(c->fd, r, strlen(r));
    return 0;
  }
  if (!strcasecmp(v, "SCRIPT")) {
    c->is_cmd = 1;
    if (req->elements >= 2 && !strcasecmp(req->element[1]->str, "EXISTS")) {
      if (req->elements - 2 != HANDSHAKE_SCRIPTS) return -1; /* not every script asked about */
      int n = snprintf(buf, sizeof buf, "*%zu\r\n", req->elements - 2);
      send_all(c->fd, buf, (size_t)n);
      for (size_t i = 2; i < req->elements; i++) send_all(c->fd, ":1\r\n", 4);
      c->handshake_left = 0;
      if (f->cfg.unsolicited) send_all(c->fd, f->cfg.unsolicited, strlen(f->cfg.unsolicited));
      return 0;
    }
    send_all(c->fd, "$40\r\n0123456789012345678901234567890123456789\r\n", 47);
    return 0;
  }
  if (!strcasecmp(v, "SUBSCRIBE") || !strcasecmp(v, "UNSUBSCRIBE")) {
    for (size_t i = 1; i < req->elements; i++) {
      if (f->cfg.subscribe && !strcasecmp(v, "SUBSCRIBE")) {
        send_all(c->fd, f->cfg.subscribe, strlen(f->cfg.subscribe));
        continue;
      }
      int n = snprintf(buf, sizeof buf, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%.*s\r\n:1\r\n", strlen(v), v,
                       req->element[i]->len, (int)(req->element[i]->len > 400 ? 400 : req->element[i]->len),
                       req->element[i]->str);
      if (req->element[i]->len <= 400) send_all(c->fd, buf, (size_t)n);
    }
    return 0;
  }
  if (!strcasecmp(v, "INFO")) { /* the replica-sync check's handshake: no replicas */
    static const char info[] = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n";
    int n = snprintf(buf, sizeof buf, "$%zu\r\n%s\r\n", sizeof info - 1, info);
    send_all(c->fd, buf, (size_t)n);
    return 0;
  }
  if (!strcasecmp(v, "DEL")) { /* latch clean-up */
    send_all(c->fd, ":0\r\n", 4);
    return 0;
  }
  const char *r = !c->sent_first || !f->cfg.rest ? f->cfg.first : f->cfg.rest;
  size_t n = !c->sent_first && f->cfg.first_len ? f->cfg.first_len : strlen(r);
  c->sent_first = 1;
  send_all(c->fd, r, n);
  return f->cfg.close_after ? -1 : 0;
}

static void *fake_run(void *arg) {
  fake_t *f = arg;
  fconn_t cs[MAXC];
  int n = 0;
  for (;;) {
    struct pollfd pfd[MAXC + 2];
    pfd[0] = (struct pollfd){.fd = f->wake[0], .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
    for (int i = 0; i < n; i++) pfd[2 + i] = (struct pollfd){.fd = cs[i].fd, .events = POLLIN};
    if (poll(pfd, (nfds_t)(n + 2), -1) < 0 && errno != EINTR) break;
    if (pfd[0].revents) break;
    for (int i = n - 1; i >= 0; i--) {
      if (!pfd[2 + i].revents) continue;
      char buf[65536];
      ssize_t r = read(cs[i].fd, buf, sizeof buf);
      int dead = r <= 0 || redisReaderFeed(cs[i].rd, buf, (size_t)r) != REDIS_OK;
      while (!dead) {
        void *req = NULL;
        if (redisReaderGetReply(cs[i].rd, &req) != REDIS_OK) dead = 1;
        if (!req) break;
        if (answer(f, &cs[i], req) < 0) dead = 1;
        freeReplyObject(req);
      }
      if (dead) {
        close(cs[i].fd);
        redisReaderFree(cs[i].rd);
        cs[i] = cs[--n];
      }
    }
    if (pfd[1].revents & POLLIN) {
      int fd = accept(f->lfd, NULL, NULL);
      if (fd >= 0 && n < MAXC) {
        cs[n] = (fconn_t){.fd = fd, .rd = redisReaderCreate(), .handshake_left = HANDSHAKE_SCRIPTS};
        n++;
      } else if (fd >= 0) {
        close(fd);
      }
    }
  }
  for (int i = 0; i < n; i++) close(cs[i].fd), redisReaderFree(cs[i].rd);
  return NULL;
}

static fake_t *fake_start(const fake_cfg_t *cfg) {
  fake_t *f = calloc(1, sizeof *f);
  CHECK(f);
  f->cfg = *cfg;
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  CHECK(f->lfd >= 0 && bind(f->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f->lfd, 16) == 0 &&
        getsockname(f->lfd, (struct sockaddr *)&a, &len) == 0);
  f->port = ntohs(a.sin_port);
  CHECK(pipe(f->wake) == 0);
  CHECK(pthread_create(&f->th, NULL, fake_run, f) == 0);
  return f;
}

static void fake_stop(fake_t *f) {
  CHECK(write(f->wake[1], "x", 1) == 1);
  pthread_join(f->th, NULL);
  close(f->lfd), close(f->wake[0]), close(f->wake[1]);
  free(f);
}

static int fake_client(fake_t *f, rlock_client_t **out, int64_t watchdog_ms) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", f->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 400;
  o.retry_attempts = 1;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  if (watchdog_ms) o.watchdog_timeout_ms = watchdog_ms;
  return rlock_client_new(out, &o);
}

/* ------------------------------------------------------------ scenarios */

enum { OP_ACQ, OP_ACQ_WAIT, OP_UNLOCK, OP_COUNT, OP_HOLDERS, OP_TTL };

typedef struct scen {
  const char *what;
  fake_cfg_t cfg;
  int op;
  int ok[4]; /* accepted results (0 = RLOCK_OK is listed explicitly via `ok0`) */
  int ok0;
} scen_t;

static int run_op(rlock_lock_t *l, int op, int64_t *val) {
  switch (op) {
  case OP_ACQ: return rlock_lock_trylock(l, 0, 10000);
  case OP_ACQ_WAIT: return rlock_lock_trylock(l, 300, 10000);
  case OP_UNLOCK: return rlock_lock_release(l, 42);
  case OP_COUNT: return rlock_lock_hold_count(l, 42, val);
  case OP_HOLDERS: {
    rlock_holder_t *h = NULL;
    size_t n = 0;
    int rc = rlock_lock_holders(l, &h, &n);
    if (rc == 0) rlock_holders_free(h, n);
    *val = (int64_t)n;
    return rc;
  }
  default: return rlock_lock_ttl(l, val);
  }
}

static const char *op_name(int op) {
  static const char *n[] = {"trylock", "trylock(300ms)", "release", "hold_count", "holders", "ttl"};
  return n[op];
}

static void run_scenario(const scen_t *s) {
  fake_t *f = fake_start(&s->cfg);
  rlock_client_t *c = NULL;
  int rc = fake_client(f, &c, 0);
  CHECK_MSG(rc == 0, "%s: client: %s (%s)", s->what, rlock_err_name(rc), rlock_last_error());
  rlock_lock_t *l = th_lock(c, "hostile");
  int64_t val = 0, t0 = rlock_now_ms();
  rc = run_op(l, s->op, &val);
  int64_t took = rlock_now_ms() - t0;
  int accepted = s->ok0 && rc == 0;
  for (int i = 0; i < 4 && s->ok[i]; i++) accepted |= rc == s->ok[i];
  printf("HOSTILE %-44s %-15s -> %-16s in %5lld ms (%s)\n", s->what, op_name(s->op), rlock_err_name(rc),
         (long long)took, rc ? rlock_last_error() : "ok");
  CHECK_MSG(accepted, "%s: unexpected %s (%s)", s->what, rlock_err_name(rc), rlock_last_error());
  CHECK_MSG(took < 5000, "%s: took %lld ms", s->what, (long long)took);
  rlock_lock_free(l);
  rlock_client_free(c);
  fake_stop(f);
}

#define NEST "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"

static const scen_t scens[] = {
    {"malformed type byte", {.first = "?garbage\r\n"}, OP_ACQ, {RLOCK_ECONNLOST, RLOCK_EPROTO}, 0},
    {"malformed bulk length", {.first = "$abc\r\n"}, OP_ACQ, {RLOCK_ECONNLOST, RLOCK_EPROTO}, 0},
    {"truncated bulk, connection kept", {.first = "$10\r\nabc"}, OP_ACQ, {RLOCK_ETIMEDOUT}, 0},
    {"truncated bulk, then closed", {.first = "$10\r\nabc", .close_after = 1}, OP_ACQ, {RLOCK_ECONNLOST}, 0},
    {"array of 2e9 elements",
     {.first = "*2000000000\r\n"},
     OP_ACQ,
     {RLOCK_ECONNLOST, RLOCK_EPROTO, RLOCK_ETIMEDOUT},
     0},
    {"bulk of 1e11 bytes announced",
     {.first = "$99999999999\r\nxxxxxxxx"},
     OP_ACQ,
     {RLOCK_ETIMEDOUT, RLOCK_ECONNLOST, RLOCK_EPROTO},
     0},
    {"negative array length -5", {.first = "*-5\r\n"}, OP_ACQ, {RLOCK_ECONNLOST, RLOCK_EPROTO, RLOCK_ETIMEDOUT}, 0},
    {"nesting depth 10", {.first = NEST}, OP_ACQ, {RLOCK_ECONNLOST, RLOCK_EPROTO}, 0},
    {"integer overflow", {.first = ":99999999999999999999\r\n"}, OP_ACQ, {RLOCK_ECONNLOST, RLOCK_EPROTO}, 0},
    {"acquire answered +OK", {.first = "+OK\r\n"}, OP_ACQ, {RLOCK_EPROTO}, 0},
    {"acquire answered an array", {.first = "*2\r\n:1\r\n:2\r\n"}, OP_ACQ, {RLOCK_EPROTO}, 0},
    {"acquire answered -3", {.first = ":-3\r\n"}, OP_ACQ, {RLOCK_EPROTO}, 0},
    {"acquire answered an error", {.first = "-ERR boom\r\n"}, OP_ACQ, {RLOCK_ESERVER}, 0},
    {"acquire answered INT64_MAX ttl", {.first = ":9223372036854775807\r\n"}, OP_ACQ_WAIT, {RLOCK_EBUSY}, 0},
    {"acquire answered negative ttl", {.first = ":-5\r\n"}, OP_ACQ_WAIT, {RLOCK_EBUSY}, 0},
    {"subscribe answered garbage", {.first = ":1000\r\n", .subscribe = "?x\r\n"}, OP_ACQ_WAIT, {RLOCK_EBUSY}, 0},
    {"subscribe answered +OK", {.first = ":1000\r\n", .subscribe = "+OK\r\n"}, OP_ACQ_WAIT, {RLOCK_EBUSY}, 0},
    {"unlock answered +OK", {.first = "+OK\r\n"}, OP_UNLOCK, {RLOCK_EPROTO}, 0},
    {"unlock answered 7", {.first = ":7\r\n"}, OP_UNLOCK, {RLOCK_EPROTO}, 0},
    {"unlock answered nil", {.first = "$-1\r\n"}, OP_UNLOCK, {RLOCK_ENOTHELD}, 0},
    {"unlock answered an array", {.first = "*1\r\n$1\r\n1\r\n"}, OP_UNLOCK, {RLOCK_EPROTO}, 0},
    {"hold count answered an integer", {.first = ":5\r\n"}, OP_COUNT, {RLOCK_EPROTO}, 0},
    {"hold count answered text", {.first = "$3\r\nabc\r\n"}, OP_COUNT, {RLOCK_EPROTO}, 0},
    {"hold count answered empty string", {.first = "$0\r\n\r\n"}, OP_COUNT, {RLOCK_EPROTO}, 0},
    {"holders answered an odd array",
     {.first = "*3\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n"},
     OP_HOLDERS,
     {RLOCK_EPROTO},
     0},
    {"holders answered integers", {.first = "*2\r\n:1\r\n:2\r\n"}, OP_HOLDERS, {RLOCK_EPROTO}, 0},
    {"holders answered nil elements", {.first = "*2\r\n$-1\r\n$-1\r\n"}, OP_HOLDERS, {RLOCK_EPROTO}, 0},
    {"ttl answered a string", {.first = "$2\r\n10\r\n"}, OP_TTL, {RLOCK_EPROTO}, 0},
    {"reply without a request, then sane",
     {.first = "$-1\r\n", .unsolicited = "+SURPRISE\r\n"},
     OP_ACQ,
     {RLOCK_ECONNLOST, RLOCK_EPROTO},
     1},
    {"pub/sub message on the command connection",
     {.first = "$-1\r\n", .unsolicited = "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\n0\r\n"},
     OP_ACQ,
     {RLOCK_ECONNLOST, RLOCK_EPROTO},
     1},
    {"unlock reply split in pieces then silence", {.first = ":", .rest = ":"}, OP_UNLOCK, {RLOCK_ETIMEDOUT}, 0},
};

TEST(fake_server_replies) {
  for (size_t i = 0; i < sizeof scens / sizeof scens[0]; i++) run_scenario(&scens[i]);
}

TEST(fake_server_handshake) {
  struct {
    const char *what;
    fake_cfg_t cfg;
    int want[3];
  } hs[] = {
      {"SETNAME answered *2000000000", {.setname = "*2000000000\r\n"}, {RLOCK_ECONNECT, RLOCK_EPROTO, RLOCK_ECONNLOST}},
      {"SETNAME answered garbage", {.setname = "!!!\r\n"}, {RLOCK_ECONNECT, RLOCK_EPROTO, RLOCK_ECONNLOST}},
      {"SETNAME answered NOAUTH", {.setname = "-NOAUTH Authentication required.\r\n"}, {RLOCK_EAUTH}},
      {"never answers", {.silent = 1}, {RLOCK_ECONNECT}},
  };
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
    fake_t *f = fake_start(&hs[i].cfg);
    rlock_client_t *c = NULL;
    int64_t t0 = rlock_now_ms();
    int rc = fake_client(f, &c, 0);
    int64_t took = rlock_now_ms() - t0;
    printf("HOSTILE handshake: %-38s -> %-16s in %5lld ms (%s)\n", hs[i].what, rlock_err_name(rc), (long long)took,
           rlock_last_error());
    if (c) rlock_client_free(c);
    CHECK_MSG(rc == hs[i].want[0] || rc == hs[i].want[1] || rc == hs[i].want[2], "%s: %s", hs[i].what,
              rlock_err_name(rc));
    CHECK(took < 3000);
    fake_stop(f);
  }
}

/* Renewal replies of the wrong shape: the hold must end as lost (no crash, no
 * endless hold). */
static atomic_int lost_n;
static void on_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  (void)reason;
  atomic_fetch_add(&lost_n, 1);
}

TEST(fake_server_renewals) {
  const char *rests[] = {"+OK\r\n", "*1\r\n:0\r\n", "*5\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n", "*1\r\n$1\r\n1\r\n",
                         "-ERR no\r\n"};
  for (size_t i = 0; i < sizeof rests / sizeof rests[0]; i++) {
    fake_cfg_t cfg = {.first = "$-1\r\n", .rest = rests[i]};
    fake_t *f = fake_start(&cfg);
    rlock_client_t *c = NULL;
    CHECK_OK(fake_client(f, &c, 600));
    rlock_client_on_lost(c, on_lost, NULL);
    rlock_lock_t *l = th_lock(c, "hostile:renew");
    int before = atomic_load(&lost_n);
    CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG)); /* "$-1" = acquired */
    int64_t t0 = rlock_now_ms();
    while (atomic_load(&lost_n) == before && rlock_now_ms() - t0 < 3000) th_sleep_ms(10);
    printf("HOSTILE renewal answered %-40.*s -> lost after %lld ms\n", (int)strcspn(rests[i], "\r"), rests[i],
           (long long)(rlock_now_ms() - t0));
    CHECK_MSG(atomic_load(&lost_n) == before + 1, "renewal reply %zu: hold never reported lost", i);
    rlock_lock_free(l);
    rlock_client_free(c);
    fake_stop(f);
  }
}

/* ------------------------------------------------------------ names and counts, real server */

static th_server_t *srv;

TEST(names_any_bytes) {
  rlock_client_t *c = th_client(srv->url, 0);
  char name[256];
  for (int i = 0; i < 256; i++) name[i] = (char)i; /* NUL, CR LF, { } ... */
  size_t lens[] = {1, 2, 13, 123, 124, 125, 126, 256};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    for (size_t off = 0; off + lens[k] <= 256; off += lens[k] < 64 ? 61 : 256) {
      rlock_lock_t *l = NULL;
      CHECK_OK(rlock_lock_new(c, name + off, lens[k], &l));
      CHECK_OK(rlock_lock_lock(l, 10000));
      CHECK_OK(rlock_lock_lock(l, 10000));
      int64_t n = 0;
      CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
      CHECK_EQ(n, 2);
      const char *argv[2] = {"EXISTS", name + off};
      size_t al[2] = {6, lens[k]};
      redisReply *r = th_cmdv(srv, 2, argv, al);
      CHECK_EQ(r->integer, 1);
      th_reply_free(r);
      CHECK_OK(rlock_lock_unlock(l));
      CHECK_OK(rlock_lock_unlock(l));
      r = th_cmdv(srv, 2, argv, al);
      CHECK_EQ(r->integer, 0);
      th_reply_free(r);
      rlock_lock_free(l);
    }
  }
  rlock_client_free(c);
}

TEST(names_huge_and_empty) {
  rlock_client_t *c = th_client(srv->url, 0);
  char *big = malloc(RLOCK_NAME_MAX + 1);
  CHECK(big);
  for (size_t i = 0; i <= RLOCK_NAME_MAX; i++) big[i] = (char)('a' + i % 26);
  big[100] = '{', big[RLOCK_NAME_MAX - 3] = '}';
  rlock_lock_t *l = NULL;
  CHECK_RC(rlock_lock_new(c, big, RLOCK_NAME_MAX + 1, &l), RLOCK_EINVAL);
  CHECK_RC(rlock_lock_new(c, big, 0, &l), RLOCK_EINVAL);
  CHECK_OK(rlock_lock_new(c, big, RLOCK_NAME_MAX, &l));
  CHECK_OK(rlock_lock_lock(l, RLOCK_LEASE_WATCHDOG));
  int locked = 0;
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 1);
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_OK(rlock_lock_is_locked(l, &locked));
  CHECK_EQ(locked, 0);
  rlock_lock_free(l);
  free(big);
  rlock_client_free(c);
}

TEST(hold_count_limits) {
  rlock_client_t *c = th_client(srv->url, 0);
  rlock_lock_t *l = th_lock(c, "hostile:count");
  char o[128];
  th_owner_id(c, RLOCK_OWNER_THREAD | (uint64_t)th_gettid(), o, sizeof o);
  th_reply_free(th_cmd(srv, "HSET", "hostile:count", o, "9223372036854775806", NULL));
  CHECK_OK(rlock_lock_lock(l, 30000)); /* -> INT64_MAX */
  char *v = th_cmd_str(srv, "HGET", "hostile:count", o, NULL);
  CHECK_STREQ(v, "9223372036854775807");
  free(v);
  int rc = rlock_lock_lock(l, 30000); /* one more: must be an error, not a wrap */
  printf("HOSTILE lock at INT64_MAX holds -> %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_RC(rc, RLOCK_ESERVER);
  v = th_cmd_str(srv, "HGET", "hostile:count", o, NULL);
  CHECK_STREQ(v, "9223372036854775807"); /* unchanged */
  free(v);
  int64_t n = 0;
  CHECK_OK(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n));
  CHECK_EQ(n, INT64_MAX);
  /* the client took 1 hold, the server counts INT64_MAX: a count mismatch,
   * the unlock removes the owner's field (and reports the loss) */
  CHECK_OK(rlock_lock_unlock(l));
  CHECK_EQ(th_cmd_int(srv, "EXISTS", "hostile:count", NULL), 0);
  /* a count that is not a number, and a key of the wrong type */
  th_reply_free(th_cmd(srv, "HSET", "hostile:count", o, "many", NULL));
  rc = rlock_lock_lock(l, 30000);
  printf("HOSTILE lock with count 'many' -> %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_RC(rc, RLOCK_ESERVER);
  rc = rlock_lock_unlock(l);
  printf("HOSTILE unlock with count 'many' -> %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_RC(rc, RLOCK_ESERVER);
  CHECK_RC(rlock_lock_hold_count(l, RLOCK_OWNER_SELF, &n), RLOCK_EPROTO);
  th_reply_free(th_cmd(srv, "DEL", "hostile:count", NULL));
  th_reply_free(th_cmd(srv, "SET", "hostile:count", "a string", NULL));
  rc = rlock_lock_lock(l, 30000);
  printf("HOSTILE lock on a string key -> %s (%s)\n", rlock_err_name(rc), rlock_last_error());
  CHECK_RC(rc, RLOCK_ESERVER);
  th_reply_free(th_cmd(srv, "DEL", "hostile:count", NULL));
  CHECK_OK(rlock_lock_lock(l, 30000)); /* and the client still works */
  CHECK_OK(rlock_lock_unlock(l));
  rlock_lock_free(l);
  rlock_client_free(c);
}

/* A cluster node whose CLUSTER SLOTS names a range starting far below slot 0
 * (a hostile or broken node): the client must not walk the range slot by
 * slot from there (the I/O thread would spin for ages, and
 * rlock_client_new would never return: the test's own alarm, th_init's,
 * fails it then). Its lock call answers and rlock_client_free returns.
 * (No child process: forking a threaded test is not possible under TSan.) */
TEST(fake_cluster_slots_range) {
  char slots[256];
  fake_cfg_t cfg = {.first = "*0\r\n"}; /* PUBSUB SHARDNUMSUB: an array (sharded pub/sub) */
  fake_t *f = fake_start(&cfg);
  snprintf(slots, sizeof slots, "*1\r\n*3\r\n:-9223372036854775807\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
           f->port);
  f->cfg.rest = slots; /* the CLUSTER SLOTS that follows the probe, and what comes after */
  char url[64];
  snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", f->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 400;
  o.retry_attempts = 1;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_lock_t *l = th_lock(c, "hostile:slots");
  int rc = rlock_lock_trylock(l, 0, 10000); /* the fake answers garbage: any error, but an answer */
  printf("HOSTILE cluster slots from -2^63: trylock -> %s\n", rlock_err_name(rc));
  CHECK(rc != 0);
  rlock_lock_free(l);
  rlock_client_free(c);
  fake_stop(f);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  RUN(fake_server_replies);
  RUN(fake_server_handshake);
  RUN(fake_server_renewals);
  RUN(fake_cluster_slots_range);
  srv = th_server_start(NULL);
  RUN(names_any_bytes);
  RUN(names_huge_and_empty);
  RUN(hold_count_limits);
  th_server_stop(srv);
  return th_done();
}
