/* multilock.c -- MultiLock (rlock_multilock_t): several locks taken as one,
 * all or nothing, possibly on different clients (servers, deployments).
 *
 * Acquire: the members in one canonical order, (name, deployment) ascending,
 * each waiting within what is left of the one wait budget: every process
 * orders the same members the same way at any time (the deployment as its
 * URL names it, never the node serving it now), so two MultiLocks over
 * overlapping sets never wait for each other in a cycle. A member that cannot be had (the
 * budget ran out, an error, a cancel) releases the members already taken (in
 * parallel); a transient error (connection, timeout, replica sync) then
 * starts a new round after a short backoff while the budget lasts, anything
 * else ends the acquire with that member's error: nothing is left behind.
 * Release: every member in parallel.
 * Lease: every member is taken with the watchdog, so none runs out while
 * later ones are awaited (however long the wait); a fixed lease is then set
 * on all of them at the end, in parallel (relet_all, OP_RELET), so every
 * member lasts the lease from the end of the acquire. A transient error's
 * backoff is 5-10 ms, the bound doubling each round to 200 ms. */
#include "internal.h"

#include <errno.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rlock_multilock {
  size_t n;
  rlock_lock_t **locks; /* the members, in canonical order */
  char **keys;          /* each member's deployment key (canonical order) */
  pthread_mutex_t mu;   /* guards armed: the lost listener runs on I/O threads */
  struct armed *armed;  /* per owner: from acquire to release (several owners
                           may use one MultiLock: one's failed acquire must not
                           silence another's hold) */
  size_t narmed, cap;
  pthread_mutex_t cbmu; /* guards cb, cb_arg; held while cb runs (not mu: cb may
                           call rlock_multilock_release/acquire, which take mu) */
  rlock_lost_cb cb;     /* rlock_multilock_on_lost */
  void *cb_arg;
};

struct armed {
  uint64_t who;
  size_t depth; /* acquires of who not yet released or failed */
  bool fired;   /* the loss of this acquire was reported */
};

static int listen_all(rlock_multilock_t *m);
static int check_fork(rlock_lock_t *const *locks, size_t n);
static bool forked(const rlock_multilock_t *m);
static void unlisten_first(rlock_multilock_t *m, size_t n);
static int arm(rlock_multilock_t *m, bool on, uint64_t who);
static void multilock_destroy(rlock_multilock_t *m);

/* ------------------------------------------------------------ canonical order
 * (name, deployment): the name first, so spellings of a server never matter
 * for members of different names; for one name on several deployments, the
 * deployment as its URL names it, never the node serving it now (a Cluster
 * failover or slot move, a Sentinel failover, a DNS name that answers
 * another address change that node, and a MultiLock made before it would
 * order its members otherwise than one made after: two of them then wait
 * for each other for ever):
 *   one server   "host:port/db" ("[ip6]:port/db", a unix socket "path/db"),
 *                so "redis://localhost:6379" and "redis://127.0.0.1:6379/0"
 *                are one server
 *   Sentinel     "sentinel:<least sentinel>/<master name>/db"
 *   Cluster      "cluster:<least seed>"
 * with hosts as host_port_key spells them (never resolved). Every process
 * that names a deployment with the same least seed (the same seeds, in any
 * order, do) orders its members the same way, at any time. The node serving
 * a member now only tells one lock given twice (RLOCK_EINVAL). */

typedef struct member {
  rlock_lock_t *l;
  char key[360];  /* the deployment, as above */
  char node[320]; /* the node serving it at creation, resolved ("": not known) */
} member_t;

/* node ("host:port", "[v6]:port" or a path) with the host resolved (a
 * path: realpath, when the socket is there to be resolved): the
 * least of getaddrinfo's answers (as "ip" or "[ip6]"), never the first, whose
 * choice depends on the host (a dual-stack one answers ::1 first for
 * localhost, where 127.0.0.1 is the same server) and on the resolver's order
 * (a name's addresses rotated by DNS): every process picks the same one. */
static void resolve_node(const char *node, char *out, size_t n) {
  snprintf(out, n, "%s", node);
  if (node[0] == '/') { /* a unix socket: its canonical path ("/a/./s", a symlink: one socket) */
    char *real = realpath(node, NULL);
    if (real) snprintf(out, n, "%s", real);
    free(real);
    return;
  }
  const char *colon = strrchr(node, ':');
  if (!colon) return;
  char host[300];
  const char *h = node[0] == '[' ? node + 1 : node;
  size_t hl = (size_t)(colon - h) - (node[0] == '[');
  if (hl == 0 || hl >= sizeof host) return;
  memcpy(host, h, hl), host[hl] = 0;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  char ip[INET6_ADDRSTRLEN], one[INET6_ADDRSTRLEN + 2], least[INET6_ADDRSTRLEN + 2] = "";
  if (getaddrinfo(host, NULL, &hints, &res) != 0) return;
  for (const struct addrinfo *a = res; a; a = a->ai_next) {
    if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof ip, NULL, 0, NI_NUMERICHOST) != 0) continue;
    snprintf(one, sizeof one, a->ai_family == AF_INET6 ? "[%s]" : "%s", ip);
    if (!least[0] || strcmp(one, least) < 0) memcpy(least, one, sizeof least);
  }
  freeaddrinfo(res);
  if (least[0]) snprintf(out, n, "%s%s", least, colon);
}

/* "host:port" of a URL host as the URL spells it, never resolved: a name's
 * answer changes (a DNS failover endpoint names the new master), and a
 * MultiLock made before the change would order its members otherwise than
 * one made after. A numeric address in its canonical form ("[v6]:port"),
 * localhost as 127.0.0.1 (RFC 6761: the loopback; rlock.h's example), any
 * other name in lower case without a trailing dot. */
static void host_port_key(const char *host, size_t hl, int port, char *out, size_t n) {
  char h[300], ip[INET6_ADDRSTRLEN];
  unsigned char a[16];
  if (hl >= sizeof h) hl = sizeof h - 1;
  for (size_t i = 0; i < hl; i++) h[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] - 'A' + 'a' : host[i]);
  h[hl] = 0;
  if (hl > 1 && h[hl - 1] == '.') h[--hl] = 0;
  if (!strcmp(h, "localhost")) snprintf(h, sizeof h, "127.0.0.1");
  if (inet_pton(AF_INET, h, a) == 1 && inet_ntop(AF_INET, a, ip, sizeof ip)) snprintf(out, n, "%s:%d", ip, port);
  else if (inet_pton(AF_INET6, h, a) == 1 && inet_ntop(AF_INET6, a, ip, sizeof ip))
    snprintf(out, n, "[%s]:%d", ip, port);
  else snprintf(out, n, strchr(h, ':') ? "[%s]:%d" : "%s:%d", h, port);
}

/* host_port_key of a seed "host:port" or "[v6]:port" (validated by url.c). */
static void seed_key(const char *node, size_t len, char *out, size_t n) {
  const char *colon = NULL;
  for (size_t i = 0; i < len; i++)
    if (node[i] == ':') colon = node + i;
  if (!colon) {
    snprintf(out, n, "%.*s", (int)len, node);
    return;
  }
  const char *h = node;
  size_t hl = (size_t)(colon - node);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2;
  host_port_key(h, hl, atoi(colon + 1), out, n);
}

/* The least of a and b: a keeps it. */
static void keep_least(char *a, size_t n, const char *b) {
  if (!a[0] || strcmp(b, a) < 0) snprintf(a, n, "%s", b);
}

/* The member's deployment, from its client's URL only (see above). */
static void deployment_key(const client_t *cl, char *out, size_t n) {
  const url_t *u = &cl->url;
  char least[310] = "", one[310];
  if (u->kind == URL_UNIX) {
    resolve_node(u->path, one, sizeof one);
    snprintf(out, n, "%s/%d", one, u->db);
  } else if (u->sentinel) {
    for (int i = 0; i < u->nsentinels; i++) {
      host_port_key(u->sentinels[i].host, strlen(u->sentinels[i].host), u->sentinels[i].port, one, sizeof one);
      keep_least(least, sizeof least, one);
    }
    snprintf(out, n, "sentinel:%s/%s/%d", least, u->master ? u->master : "", u->db);
  } else if (u->cluster) {
    host_port_key(u->host, strlen(u->host), u->port, least, sizeof least);
    for (const char *s = u->seeds; s && *s;) { /* "h2:p2,h3:p3" (validated by url.c) */
      size_t len = strcspn(s, ",");
      seed_key(s, len, one, sizeof one);
      keep_least(least, sizeof least, one);
      s += len + (s[len] == ',');
    }
    snprintf(out, n, "cluster:%s", least);
  } else {
    host_port_key(u->host, strlen(u->host), u->port, one, sizeof one);
    snprintf(out, n, "%s/%d", one, u->db);
  }
}

/* The member's node: rlock_lock_node, or, on its client's I/O thread (made
 * in a callback, where a sync call is RLOCK_EDEADLK), read there directly:
 * the same answer whatever thread makes the MultiLock. */
static int member_node(rlock_lock_t *l, char *buf, size_t n) {
  if (!rlock__client_on_io_thread(l->cl)) return rlock_lock_node(l, buf, n);
  char *s = NULL;
  size_t len = 0;
  int rc = rlock__lock_node_here(l, &s, &len);
  if (!rc && len >= n) rc = RLOCK_EINVAL;
  if (!rc) memcpy(buf, s, len + 1);
  free(s);
  return rc;
}

static void member_key(member_t *mb) {
  char node[300], resolved[310];
  deployment_key(mb->l->cl, mb->key, sizeof mb->key);
  mb->node[0] = 0;
  if (member_node(mb->l, node, sizeof node) != 0) return; /* not known yet (a Sentinel master not named) */
  resolve_node(node, resolved, sizeof resolved);
  snprintf(mb->node, sizeof mb->node, "%s/%d", resolved, mb->l->cl->url.db);
}

static int by_name(const rlock_lock_t *x, const rlock_lock_t *y) {
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->name, y->name, n);
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The canonical order: name, then deployment. Two members equal here are one
 * lock (same_lock); qsort's order among them does not matter, as they are
 * refused. */
static int by_name_deployment(const void *a, const void *b) {
  const member_t *p = a, *q = b;
  int c = by_name(p->l, q->l);
  return c ? c : strcmp(p->key, q->key);
}

/* The same lock twice: one name on one deployment (however spelled), or on
 * the node serving both now (one Cluster named by two sets of seeds). */
static bool same_lock(const member_t *p, const member_t *q) {
  if (by_name(p->l, q->l)) return false;
  return !strcmp(p->key, q->key) || (p->node[0] && !strcmp(p->node, q->node));
}

/* Sorts locks into m->locks (keeping each member's deployment key in
 * m->keys); RLOCK_EINVAL for a lock given twice. */
static int sort_members(rlock_multilock_t *m, rlock_lock_t *const *locks) {
  member_t *mb = calloc(m->n, sizeof *mb);
  if (!mb) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; i < m->n; i++) mb[i].l = locks[i], member_key(&mb[i]);
  qsort(mb, m->n, sizeof *mb, by_name_deployment);
  int rc = 0;
  for (size_t i = 0; i < m->n; i++) {
    m->locks[i] = mb[i].l;
    m->keys[i] = rlock__strndup(mb[i].key, strlen(mb[i].key));
    if (!m->keys[i] && !rc) rc = rlock__fail(RLOCK_ENOMEM, "out of memory");
    for (size_t j = i; j-- > 0 && !rc && !by_name(mb[j].l, mb[i].l);) { /* the same name: sorted together */
      if (!same_lock(&mb[j], &mb[i])) continue;
      const rlock_lock_t *d = mb[i].l;
      rc = rlock__fail(RLOCK_EINVAL, "lock '%.*s' is a member twice (one name on one server)",
                       (int)(d->len > 100 ? 100 : d->len), d->name);
    }
  }
  free(mb);
  return rc;
}

/* The members are in canonical order, each deployment key as at creation
 * (checked before every acquire: the order never changes). */
static bool in_canonical_order(const rlock_multilock_t *m) {
  for (size_t i = 1; i < m->n; i++) {
    int c = by_name(m->locks[i - 1], m->locks[i]);
    if (c > 0 || (c == 0 && strcmp(m->keys[i - 1], m->keys[i]) >= 0)) return false;
  }
  return true;
}

RLOCK_API int rlock_multilock_new(rlock_multilock_t **out, rlock_lock_t *const *locks, size_t n) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!locks || n == 0) return rlock__fail(RLOCK_EINVAL, "a MultiLock needs at least one lock");
  for (size_t i = 0; i < n; i++)
    if (!locks[i]) return rlock__fail(RLOCK_EINVAL, "lock %zu is NULL", i + 1);
  int rc = check_fork(locks, n);
  if (rc) return rc;
  rlock_multilock_t *m = calloc(1, sizeof *m);
  if (m) m->locks = malloc(n * sizeof *m->locks), m->keys = calloc(n, sizeof *m->keys);
  if (!m || !m->locks || !m->keys) {
    if (m) free(m->locks), free(m->keys);
    free(m);
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  m->n = n;
  rc = sort_members(m, locks);
  if (rc) {
    multilock_destroy(m);
    return rc;
  }
  pthread_mutex_init(&m->mu, NULL);
  pthread_mutex_init(&m->cbmu, NULL);
  if (listen_all(m)) {
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->cbmu);
    multilock_destroy(m);
    return rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  *out = m;
  return 0;
}

static void multilock_destroy(rlock_multilock_t *m) {
  for (size_t i = 0; i < m->n; i++) free(m->keys[i]);
  free(m->keys);
  free(m->locks);
  free(m);
}

/* Once unlisten returned no listener call of m runs or will run. */
RLOCK_API void rlock_multilock_free(rlock_multilock_t *m) {
  if (!m) return;
  if (forked(m)) return; /* touch nothing (as rlock_client_free): the listeners are the parent's */
  unlisten_first(m, m->n);
  pthread_mutex_destroy(&m->mu);
  pthread_mutex_destroy(&m->cbmu);
  free(m->armed);
  multilock_destroy(m);
}

/* ------------------------------------------------------------ fork
 * A forked child inherits m->mu, m->cbmu and the member clients' listener
 * mutexes as they were at the fork: one held by another thread then (a
 * lost callback running under cbmu, a listener being added) stays locked
 * for ever in the child. Every call looks at the fork before it takes one:
 * RLOCK_ESYS, as the member clients' own calls. */
static int check_fork(rlock_lock_t *const *locks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int rc = rlock__client_check_fork(locks[i]->cl);
    if (rc) return rc;
  }
  return 0;
}

static bool forked(const rlock_multilock_t *m) {
  for (size_t i = 0; i < m->n; i++)
    if (m->locks[i]->cl->fork_gen != rlock__fork_generation()) return true;
  return false;
}

/* ------------------------------------------------------------ release in parallel */

typedef struct fan {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t left;
  int rc; /* the first error (RLOCK_ENOTHELD if only that) */
} fan_t;

static void release_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  fan_t *f = arg;
  pthread_mutex_lock(&f->mu);
  if (status && (!f->rc || f->rc == RLOCK_ENOTHELD)) f->rc = status;
  if (--f->left == 0) pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Releases the first n members (owner) in parallel and waits for every
 * answer (each bounded by its client's retries and command timeout). */
static int release_first(rlock_multilock_t *m, size_t n, uint64_t owner) {
  fan_t f = {.left = n};
  pthread_mutex_init(&f.mu, NULL);
  pthread_cond_init(&f.cv, NULL);
  for (size_t i = 0; i < n; i++) {
    int rc = rlock_lock_release_async(m->locks[i], owner, release_cb, &f);
    if (rc) release_cb(m->locks[i], rc, 0, &f); /* the callback will not run */
  }
  pthread_mutex_lock(&f.mu);
  while (f.left) pthread_cond_wait(&f.cv, &f.mu);
  pthread_mutex_unlock(&f.mu);
  pthread_cond_destroy(&f.cv);
  pthread_mutex_destroy(&f.mu);
  return f.rc;
}

/* ------------------------------------------------------------ acquire */

static int check_acquire(rlock_multilock_t *m, int64_t wait_ms, int64_t lease_ms) {
  if (!m) return rlock__fail(RLOCK_EINVAL, "multilock is NULL");
  if ((wait_ms < 0 && wait_ms != RLOCK_WAIT_FOREVER) || wait_ms > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "wait time %lld ms is out of range", (long long)wait_ms);
  if ((lease_ms <= 0 && lease_ms != RLOCK_LEASE_WATCHDOG) || lease_ms > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "lease %lld ms is out of range", (long long)lease_ms);
  return 0;
}

/* The first member's error in canonical order (i < *first), with its message. */
typedef struct relet_fan {
  fan_t f;
  rlock_multilock_t *m;
  size_t first;
  char why[256];
} relet_fan_t;

static void relet_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)value;
  relet_fan_t *rf = arg;
  pthread_mutex_lock(&rf->f.mu);
  size_t i = 0;
  while (rf->m->locks[i] != l) i++;
  if (status && i < rf->first) {
    rf->first = i;
    rf->f.rc = status;
    snprintf(rf->why, sizeof rf->why, "%s", rlock_last_error());
  }
  if (--rf->f.left == 0) pthread_cond_signal(&rf->f.cv);
  pthread_mutex_unlock(&rf->f.mu);
}

/* One lease for all, applied at the end: every member's TTL set to lease_ms
 * in parallel (each was taken with the watchdog, so none ran out during the
 * wait). 0, or the failing member's error (its index in *bad). */
static int relet_all(rlock_multilock_t *m, uint64_t who, int64_t lease_ms, size_t *bad, char *why, size_t whylen) {
  relet_fan_t rf = {.f = {.left = m->n}, .m = m, .first = m->n};
  pthread_mutex_init(&rf.f.mu, NULL);
  pthread_cond_init(&rf.f.cv, NULL);
  for (size_t i = 0; i < m->n; i++) {
    int rc = rlock__lock_relet_async(m->locks[i], who, lease_ms, relet_cb, &rf);
    if (rc) relet_cb(m->locks[i], rc, 0, &rf); /* the callback will not run */
  }
  pthread_mutex_lock(&rf.f.mu);
  while (rf.f.left) pthread_cond_wait(&rf.f.cv, &rf.f.mu);
  pthread_mutex_unlock(&rf.f.mu);
  pthread_cond_destroy(&rf.f.cv);
  pthread_mutex_destroy(&rf.f.mu);
  *bad = rf.first;
  snprintf(why, whylen, "%s", rf.why);
  return rf.f.rc;
}

/* A blocking MultiLock call from a member client's I/O thread (a callback)
 * would wait for that thread's own answers forever: RLOCK_EDEADLK. */
static int check_thread(const rlock_multilock_t *m) {
  for (size_t i = 0; i < m->n; i++)
    if (rlock__client_on_io_thread(m->locks[i]->cl))
      return rlock__fail(RLOCK_EDEADLK, "blocking MultiLock call from a member client's I/O thread (a callback)");
  return 0;
}

/* With the watchdog lease: a member taken first may have been lost (its
 * client saw the hold gone) while later ones were awaited; the fixed lease's
 * final step finds that itself. 0, or RLOCK_ENOTHELD and its index. */
static int all_still_held(rlock_multilock_t *m, uint64_t who, size_t *bad, char *why, size_t whylen) {
  for (size_t i = 0; i < m->n; i++) {
    int64_t v;
    int rc = rlock_lock_valid_until(m->locks[i], who, &v);
    if (rc == RLOCK_ENOTHELD) {
      *bad = i;
      snprintf(why, whylen, "lost while later members were awaited");
      return rc;
    }
  }
  return 0;
}

/* Transient member errors: the member's server or its replicas did not
 * answer in time; a later round may well succeed. Anything else (EINVAL,
 * ENOMEM, ESERVER, EBUSY at the end of the wait, ECANCELED...) is final. */
static bool transient(int rc) {
  return rc == RLOCK_ECONNECT || rc == RLOCK_ETIMEDOUT || rc == RLOCK_ECONNLOST || rc == RLOCK_ENOSYNC;
}

/* One round: every member in canonical order within what is left of the
 * budget, then (fixed lease) the final step. 0 with all held, or the failing
 * member's error (its index in *bad, message in why) with the members this
 * round took released; *released_ok false if one of those releases failed
 * (its hold may still be on the server until its lease runs out). */
static int take_all(rlock_multilock_t *m, uint64_t who, int64_t deadline, int64_t lease_ms, rlock_cancel_t *cancel,
                    size_t *bad, char *why, size_t whylen, bool *released_ok) {
  int rc = 0;
  size_t taken = 0;
  *released_ok = true;
  RLOCK__ASSERT(in_canonical_order(m)); /* the order of creation, by deployment, never by node */
  if (arm(m, true, who)) return *bad = 0, snprintf(why, whylen, "out of memory"), RLOCK_ENOMEM;
  for (; taken < m->n; taken++) {
    int64_t left = RLOCK_WAIT_FOREVER;
    if (deadline >= 0) left = deadline > rlock_now_ms() ? deadline - rlock_now_ms() : 0;
    /* the watchdog keeps the members taken first while later ones are awaited */
    rc = rlock_lock_acquire(m->locks[taken], who, left, RLOCK_LEASE_WATCHDOG, cancel);
    if (rc) {
      *bad = taken;
      snprintf(why, whylen, "%s", rlock_last_error());
      break;
    }
  }
  if (!rc && lease_ms != RLOCK_LEASE_WATCHDOG) rc = relet_all(m, who, lease_ms, bad, why, whylen);
  if (!rc && lease_ms == RLOCK_LEASE_WATCHDOG) rc = all_still_held(m, who, bad, why, whylen);
  if (!rc) return 0;
  arm(m, false, who);                     /* the caller is told: no lost callback for a failed round */
  int rel = release_first(m, taken, who); /* all or nothing */
  *released_ok = rel == 0 || rel == RLOCK_ENOTHELD;
  return rc;
}

/* The pause before round `round` + 1: 10 ms doubling to 200 ms, drawn from
 * [c/2, c], never past the deadline. 0, or why not to go on: rc when no time
 * is left, RLOCK_ECANCELED when the cancel token was triggered. */
static int backoff(int round, int64_t deadline, rlock_cancel_t *cancel, int rc) {
  int64_t cap = round < 5 ? (int64_t)10 << round : 200;
  uint32_t r;
  rlock__random_bytes(&r, sizeof r);
  int64_t ms = cap / 2 + (int64_t)(r % (uint32_t)(cap / 2 + 1));
  if (deadline >= 0) {
    int64_t left = deadline - rlock_now_ms();
    if (left <= 0) return rc;
    if (ms > left) ms = left;
  }
  if (!cancel) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
    return 0;
  }
  struct pollfd p = {.fd = cancel->fd, .events = POLLIN}; /* readable once triggered */
  int64_t until = rlock_now_ms() + ms;
  for (int64_t now = rlock_now_ms(); now < until && !rlock_cancel_is_triggered(cancel); now = rlock_now_ms())
    poll(&p, 1, (int)(until - now));
  return rlock_cancel_is_triggered(cancel) ? RLOCK_ECANCELED : 0;
}

RLOCK_API int rlock_multilock_acquire(rlock_multilock_t *m, rlock_owner_t owner, int64_t wait_ms, int64_t lease_ms,
                                      rlock_cancel_t *cancel) {
  int rc = check_acquire(m, wait_ms, lease_ms);
  if (rc || (rc = check_fork(m->locks, m->n)) || (rc = check_thread(m))) return rc;
  uint64_t who = owner == RLOCK_OWNER_SELF ? RLOCK_OWNER_THREAD | rlock__gettid() : owner;
  int64_t deadline = wait_ms < 0 ? -1 : rlock_now_ms() + wait_ms;
  char why[256];
  size_t bad = 0;
  bool released_ok;
  /* A transient error gives back what the round took and tries again while
   * the budget lasts; not when a give-back failed (that member's hold may
   * still be on its server: taking it again would stack on it). */
  for (int round = 0;; round++) {
    rc = take_all(m, who, deadline, lease_ms, cancel, &bad, why, sizeof why, &released_ok);
    if (!rc || !transient(rc) || !released_ok) break;
    int stop = backoff(round, deadline, cancel, rc);
    if (stop == RLOCK_ECANCELED) snprintf(why, sizeof why, "cancelled while retrying after a transient error");
    if (stop) {
      rc = stop;
      break;
    }
  }
  if (!rc) return 0;
  rlock_lock_t *l = m->locks[bad];
  return rlock__fail(rc, "member '%.*s': %s", (int)(l->len > 100 ? 100 : l->len), l->name, why);
}

RLOCK_API int rlock_multilock_release(rlock_multilock_t *m, rlock_owner_t owner) {
  if (!m) return rlock__fail(RLOCK_EINVAL, "multilock is NULL");
  int rc = check_fork(m->locks, m->n);
  if (rc || (rc = check_thread(m))) return rc;
  uint64_t who = owner == RLOCK_OWNER_SELF ? RLOCK_OWNER_THREAD | rlock__gettid() : owner;
  rc = release_first(m, m->n, who);
  arm(m, false, who);
  return rc ? rlock__fail(rc, "%s",
                          rc == RLOCK_ENOTHELD ? "a member was not held (the others were released)"
                                               : "a member's release failed (the others were released)")
            : 0;
}

RLOCK_API int rlock_multilock_valid_until(rlock_multilock_t *m, rlock_owner_t owner, int64_t *out) {
  if (!m || !out) return rlock__fail(RLOCK_EINVAL, "multilock or out is NULL");
  int rc = check_fork(m->locks, m->n);
  if (rc) return rc;
  int64_t least = INT64_MAX;
  for (size_t i = 0; i < m->n; i++) {
    int64_t v;
    if ((rc = rlock_lock_valid_until(m->locks[i], owner, &v))) return rc;
    if (v < least) least = v;
  }
  *out = least;
  return 0;
}

/* ------------------------------------------------------------ lock lost */

/* Every member's client tells the MultiLock of each lost hold (a second
 * listener beside the client's own callback, watchdog.c); the first loss of
 * a member held by the MultiLock's owner since the acquire is passed on. */
static bool is_member(const rlock_multilock_t *m, client_t *cl, const char *name, size_t len) {
  for (size_t i = 0; i < m->n; i++) {
    const rlock_lock_t *l = m->locks[i];
    if (l->cl == cl && l->len == len && !memcmp(l->name, name, len)) return true;
  }
  return false;
}

static struct armed *armed_of(rlock_multilock_t *m, uint64_t who) {
  for (size_t i = 0; i < m->narmed; i++)
    if (m->armed[i].who == who) return &m->armed[i];
  return NULL;
}

static void member_lost(client_t *cl, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason,
                        void *arg) {
  rlock_multilock_t *m = arg;
  if (!is_member(m, cl, name, len)) return;
  pthread_mutex_lock(&m->mu);
  struct armed *a = armed_of(m, owner);
  bool fire = a && !a->fired;
  if (fire) a->fired = true; /* once per acquire */
  pthread_mutex_unlock(&m->mu);
  if (!fire) return;
  pthread_mutex_lock(&m->cbmu);
  if (m->cb) m->cb(name, len, owner, reason, m->cb_arg);
  pthread_mutex_unlock(&m->cbmu);
}

/* on: an acquire of who begins (re-arms its report); off: one ends (released
 * or failed). RLOCK_ENOMEM. */
static int arm(rlock_multilock_t *m, bool on, uint64_t who) {
  int rc = 0;
  pthread_mutex_lock(&m->mu);
  struct armed *a = armed_of(m, who);
  if (on && !a && m->narmed == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 2;
    struct armed *more = realloc(m->armed, cap * sizeof *more);
    if (more) m->armed = more, m->cap = cap;
    else rc = RLOCK_ENOMEM;
  }
  if (on && !rc) {
    if (!a) (a = &m->armed[m->narmed++])->depth = 0, a->who = who;
    a->depth++;
    a->fired = false;
  } else if (!on && a && --a->depth == 0) {
    *a = m->armed[--m->narmed];
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* The member clients, each once (two members may share a client, and two
 * clients may share one URL). */
static bool client_seen_before(const rlock_multilock_t *m, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (m->locks[j]->cl == m->locks[i]->cl) return true;
  return false;
}

static void unlisten_first(rlock_multilock_t *m, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!client_seen_before(m, i)) rlock__watchdog_unlisten(&m->locks[i]->cl->wd, member_lost, m);
}

static int listen_all(rlock_multilock_t *m) {
  for (size_t i = 0; i < m->n; i++) {
    if (client_seen_before(m, i)) continue;
    if (rlock__watchdog_listen(&m->locks[i]->cl->wd, member_lost, m)) {
      unlisten_first(m, i);
      return RLOCK_ENOMEM;
    }
  }
  return 0;
}

RLOCK_API void rlock_multilock_on_lost(rlock_multilock_t *m, rlock_lost_cb cb, void *arg) {
  if (!m || check_fork(m->locks, m->n)) return; /* a forked child: cbmu may be held for ever */
  pthread_mutex_lock(&m->cbmu);
  m->cb = cb;
  m->cb_arg = arg;
  pthread_mutex_unlock(&m->cbmu);
}
