/* redlock.c -- RedLock over N independent masters (rlock_redlock_t), as the
 * Redis documentation describes it: one client per node (their own I/O
 * threads, so the nodes are asked in parallel), one lock handle per node
 * (Redisson's reentrant hash, or the simple SET NX PX format), and on top:
 *
 *   acquire  send a try (wait 0) to every node at once; wait at most the
 *            per-node timeout (lease/100 clamped to 5..50 ms); a node that
 *            has not answered by then counts as failed (its try is cancelled:
 *            a late grant is given back). Success = a majority granted AND
 *            validity = lease - elapsed - drift (lease/100 + 2 ms) > 0.
 *            Otherwise every node is released (the unanswered ones by their
 *            cancel) and the round is retried after a random delay, within
 *            the wait budget.
 *   renewal  each node's client renews its own hold (watchdog.c), so the
 *            nodes are extended in parallel; the RedLock's validity is the
 *            time until which a majority of nodes is valid, minus the drift.
 *   lost     each node's client reports its node's loss here; when fewer
 *            than a majority still hold, the RedLock is lost: the user's
 *            callback runs once and the remaining nodes are released. A
 *            node whose hold is lost while its round is still under way
 *            (waiting for slower nodes) does not count as granted.
 *   revive   a node whose client could not be made (down when the RedLock
 *            was made) counts as failed; each round (and node_status) starts
 *            a thread that tries to make it again, at most once a second,
 *            so a node that comes up later joins the next rounds.
 *
 * Locking: r->op_mu serializes the user's calls (acquire, release) and is
 * never taken by a callback; r->mu guards the hold's state and is held only
 * briefly, never across a sync call (a node's I/O thread may wait for it in
 * its lost callback).
 *
 * Fork: the RedLock belongs to the process that made it (as its clients).
 * A forked child inherits op_mu and mu as they were at the fork: op_mu is
 * held for a whole acquire or release by the thread making it, which does
 * not exist in the child. Every call looks at the fork before it takes one:
 * RLOCK_ESYS; rlock_redlock_free touches nothing there. */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES_MAX 64
#define NODE_TIMEOUT_MIN_MS 5
#define NODE_TIMEOUT_MAX_MS 50
#define DRIFT_MS 2       /* drift = lease / 100 + DRIFT_MS */
#define RETRY_MIN_MS 10  /* a failed round is retried after a random delay in */
#define RETRY_MAX_MS 200 /* [RETRY_MIN_MS, RETRY_MAX_MS], never past the wait budget */
#define REVIVE_MS 1000   /* a missing node's client is tried again at most this often */

typedef struct node {
  rlock_redlock_t *r;
  size_t idx;
  rlock_client_t *cl; /* NULL: not made yet (unreachable so far); set under r->mu */
  rlock_lock_t *lock; /* set with cl */
  char err[160];      /* why the client could not be made (r->mu) */
  char *url;          /* owned copy, to make the client again */
  pthread_t reviver;  /* making the client again (r->mu: reviving, joinable) */
  bool reviving, joinable;
  int64_t next_try; /* monotonic ms: the next attempt at the earliest */
} node_t;

struct rlock_redlock {
  size_t n, majority;
  node_t *nodes;
  int64_t node_timeout_ms; /* 0: lease/100 clamped to 5..50 ms */
  int64_t watchdog_ms, command_timeout_ms;
  pthread_mutex_t op_mu; /* one acquire or release at a time */
  pthread_mutex_t mu;    /* the hold's state below */
  bool holding, lost_told;
  bool *held; /* held[i]: node i grants the current hold */
  size_t nheld;
  bool acquiring; /* a round is under way (for acq_owner) */
  uint64_t acq_owner;
  bool *gone; /* gone[i]: node i lost the round's hold before the round was decided */
  uint64_t owner;
  int64_t lease_ms;
  rlock_lost_cb lost_cb;
  void *lost_arg;
  /* to make a missing node's client again: the options (strings owned), the
   * name and the flags */
  rlock_options_t opts;
  char *s_name, *s_ca, *s_cert, *s_key, *s_sni;
  char *name;
  size_t len;
  unsigned flags;
  bool closing;      /* rlock_redlock_free: no new reviver (r->mu) */
  unsigned fork_gen; /* rlock__fork_generation() at creation: another = a forked child */
};

static int check_fork(const rlock_redlock_t *r) {
  if (r->fork_gen != rlock__fork_generation())
    return rlock__fail(RLOCK_ESYS, "RedLock used in a forked child: create a new one after fork");
  return 0;
}

/* ------------------------------------------------------------ fan-out
 * One request per node, answered on the nodes' I/O threads; the caller waits
 * for the answers until a deadline, then closes the fan-out: answers after
 * that are late (a late grant is given back). Freed by its last reference. */

typedef struct fanout fanout_t;
typedef struct slot {
  fanout_t *f;
  size_t i;
} slot_t;

struct fanout {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rlock_redlock_t *r;
  uint64_t owner;
  size_t n, answered;
  int refs;
  bool closed;
  int *status;             /* 1: no answer yet */
  rlock_cancel_t **cancel; /* acquire: one token per node */
  slot_t *slots;
};

static void fanout_unref(fanout_t *f) {
  pthread_mutex_lock(&f->mu);
  bool last = --f->refs == 0;
  pthread_mutex_unlock(&f->mu);
  if (!last) return;
  for (size_t i = 0; f->cancel && i < f->n; i++) rlock_cancel_free(f->cancel[i]);
  free(f->cancel);
  free(f->status);
  free(f->slots);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

static fanout_t *fanout_new(rlock_redlock_t *r, uint64_t owner, bool cancels) {
  fanout_t *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->r = r, f->owner = owner, f->n = r->n, f->refs = 1;
  pthread_mutex_init(&f->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&f->cv, &ca);
  pthread_condattr_destroy(&ca);
  f->status = malloc(r->n * sizeof *f->status);
  f->slots = malloc(r->n * sizeof *f->slots);
  f->cancel = cancels ? calloc(r->n, sizeof *f->cancel) : NULL;
  bool ok = f->status && f->slots && (!cancels || f->cancel);
  for (size_t i = 0; ok && i < r->n; i++) {
    f->status[i] = 1;
    f->slots[i] = (slot_t){f, i};
    if (cancels && rlock_cancel_new(&f->cancel[i])) ok = false;
  }
  if (!ok) fanout_unref(f), f = NULL;
  return f;
}

/* Node i's answer. false: the fan-out was closed already (a late answer). */
static bool fanout_answer(fanout_t *f, size_t i, int status) {
  pthread_mutex_lock(&f->mu);
  bool in_time = !f->closed;
  if (in_time) {
    f->status[i] = status;
    f->answered++;
    pthread_cond_signal(&f->cv);
  }
  pthread_mutex_unlock(&f->mu);
  return in_time;
}

/* Waits until every node answered or the monotonic deadline (ms) passed,
 * then closes: the nodes still silent get RLOCK_ETIMEDOUT (and their try is
 * cancelled). */
static void fanout_wait(fanout_t *f, int64_t deadline) {
  struct timespec ts = {(time_t)(deadline / 1000), (long)(deadline % 1000) * 1000000};
  pthread_mutex_lock(&f->mu);
  while (f->answered < f->n && pthread_cond_timedwait(&f->cv, &f->mu, &ts) != ETIMEDOUT) {
  }
  f->closed = true;
  for (size_t i = 0; i < f->n; i++) {
    if (f->status[i] != 1) continue;
    f->status[i] = RLOCK_ETIMEDOUT;
    if (f->cancel) rlock_cancel_trigger(f->cancel[i]);
  }
  pthread_mutex_unlock(&f->mu);
}

static void ignore_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)status, (void)value, (void)arg;
}

static void acquire_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)value;
  slot_t *s = arg;
  fanout_t *f = s->f;
  if (!fanout_answer(f, s->i, status) && status == 0) /* granted after the round was decided */
    rlock_lock_release_async(l, f->owner, ignore_cb, NULL);
  fanout_unref(f);
}

static void release_cb(rlock_lock_t *l, int status, int64_t value, void *arg) {
  (void)l, (void)value;
  slot_t *s = arg;
  fanout_answer(s->f, s->i, status);
  fanout_unref(s->f);
}

/* Sends node i's request (acquire: a try with wait 0; else a release). */
static void fanout_send(fanout_t *f, size_t i, bool acquire, int64_t lease_ms) {
  node_t *nd = &f->r->nodes[i];
  int rc = RLOCK_ECONNECT;
  pthread_mutex_lock(&f->r->mu);
  rlock_lock_t *lock = nd->cl ? nd->lock : NULL;
  pthread_mutex_unlock(&f->r->mu);
  if (lock) {
    pthread_mutex_lock(&f->mu);
    f->refs++;
    pthread_mutex_unlock(&f->mu);
    rc = acquire ? rlock_lock_acquire_async(lock, f->owner, 0, lease_ms, f->cancel[i], acquire_cb, &f->slots[i])
                 : rlock_lock_release_async(lock, f->owner, release_cb, &f->slots[i]);
    if (rc) fanout_unref(f); /* the callback will not run */
  }
  if (rc) fanout_answer(f, i, rc);
}

/* Releases the nodes in which[] (NULL: all) and waits for their answers at
 * most the command timeout; silent nodes free the lock when their lease runs
 * out. Returns how many answered 0 (released). */
static size_t release_nodes(rlock_redlock_t *r, uint64_t owner, const bool *which) {
  fanout_t *f = fanout_new(r, owner, false);
  if (!f) return 0;
  for (size_t i = 0; i < r->n; i++) {
    if (which && !which[i]) fanout_answer(f, i, RLOCK_ENOTHELD);
    else fanout_send(f, i, false, 0);
  }
  fanout_wait(f, rlock_now_ms() + r->command_timeout_ms);
  size_t ok = 0;
  for (size_t i = 0; i < r->n; i++) ok += (!which || which[i]) && f->status[i] == 0;
  fanout_unref(f);
  return ok;
}

/* ------------------------------------------------------------ lost */

/* A node's client lost its hold of the lock (I/O thread of that node). */
static void node_lost(const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason, void *arg) {
  node_t *nd = arg;
  rlock_redlock_t *r = nd->r;
  bool tell = false;
  bool *rest = NULL;
  pthread_mutex_lock(&r->mu);
  if (!r->holding && r->acquiring && owner == r->acq_owner) {
    r->gone[nd->idx] = true; /* granted in the round under way, lost already: judge() does not count it */
  } else if (r->holding && owner == r->owner && r->held[nd->idx]) {
    r->held[nd->idx] = false;
    r->nheld--;
    if (r->nheld < r->majority && !r->lost_told) {
      tell = r->lost_told = true;
      rest = malloc(r->n * sizeof *rest);
      for (size_t i = 0; rest && i < r->n; i++) rest[i] = r->held[i], r->held[i] = false;
      r->nheld = 0;
    }
  }
  rlock_lost_cb cb = r->lost_cb;
  void *cb_arg = r->lost_arg;
  pthread_mutex_unlock(&r->mu);
  if (!tell) return;
  for (size_t i = 0; rest && i < r->n; i++) /* a minority is no lock: free it now */
    if (rest[i]) rlock_lock_release_async(r->nodes[i].lock, owner, ignore_cb, NULL);
  free(rest);
  if (cb) cb(name, len, owner, reason, cb_arg);
}

/* ------------------------------------------------------------ acquire */

static int64_t node_timeout(const rlock_redlock_t *r, int64_t lease_ms) {
  if (r->node_timeout_ms) return r->node_timeout_ms;
  int64_t t = lease_ms / 100;
  return t < NODE_TIMEOUT_MIN_MS ? NODE_TIMEOUT_MIN_MS : t > NODE_TIMEOUT_MAX_MS ? NODE_TIMEOUT_MAX_MS : t;
}

static int64_t drift(int64_t lease_ms) { return lease_ms / 100 + DRIFT_MS; }

static bool unreachable(int status) {
  return status == RLOCK_ECONNECT || status == RLOCK_ETIMEDOUT || status == RLOCK_ECONNLOST ||
         status == RLOCK_ECLOSED || status == RLOCK_ECANCELED;
}

/* The outcome of a round whose nodes answered (status[]): the RedLock's
 * hold, or why not (its message set). */
static int judge(rlock_redlock_t *r, const int *status, int64_t validity, uint64_t owner, int64_t lease_ms) {
  size_t granted = 0, down = 0, busy = 0;
  pthread_mutex_lock(&r->mu); /* a node's loss is either in gone[] or finds the hold set */
  r->acquiring = false;
  for (size_t i = 0; i < r->n; i++) {
    granted += status[i] == 0 && !r->gone[i];
    down += unreachable(status[i]);
    busy += status[i] == RLOCK_EBUSY;
  }
  bool won = granted >= r->majority && validity > 0;
  if (won) {
    for (size_t i = 0; i < r->n; i++) r->held[i] = status[i] == 0 && !r->gone[i];
    r->nheld = granted;
    r->holding = true;
    r->lost_told = false;
    r->owner = owner;
    r->lease_ms = lease_ms;
  }
  pthread_mutex_unlock(&r->mu);
  if (won) return 0;
  if (down > r->n - r->majority)
    return rlock__fail(RLOCK_ECONNECT, "%zu of %zu nodes unreachable or too slow: no majority (%zu) possible", down,
                       r->n, r->majority);
  if (granted >= r->majority)
    return rlock__fail(RLOCK_EBUSY, "a majority granted, but too late: the lease was spent (validity %lld ms)",
                       (long long)validity);
  return rlock__fail(RLOCK_EBUSY, "%zu of %zu nodes granted, %zu busy: no majority (%zu)", granted, r->n, busy,
                     r->majority);
}

static void revive_missing(rlock_redlock_t *r);

/* One round: every node at once, at most the per-node timeout. */
static int round_once(rlock_redlock_t *r, uint64_t owner, int64_t lease_ms, int64_t *valid_until) {
  int64_t lease = lease_ms == RLOCK_LEASE_WATCHDOG ? r->watchdog_ms : lease_ms;
  revive_missing(r); /* for the next rounds: a client being made counts as failed in this one */
  fanout_t *f = fanout_new(r, owner, true);
  if (!f) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  pthread_mutex_lock(&r->mu);
  r->acquiring = true;
  r->acq_owner = owner;
  for (size_t i = 0; i < r->n; i++) r->gone[i] = false;
  pthread_mutex_unlock(&r->mu);
  int64_t t0 = rlock_now_ms();
  for (size_t i = 0; i < r->n; i++) fanout_send(f, i, true, lease_ms);
  fanout_wait(f, t0 + node_timeout(r, lease));
  int64_t validity = lease - (rlock_now_ms() - t0) - drift(lease);
  int rc = judge(r, f->status, validity, owner, lease_ms);
  if (rc == 0) {
    *valid_until = t0 + lease - drift(lease);
  } else {
    bool *granted = malloc(r->n * sizeof *granted);
    for (size_t i = 0; granted && i < r->n; i++) granted[i] = f->status[i] == 0;
    if (granted) release_nodes(r, owner, granted); /* the unanswered ones: their cancel */
    free(granted);
  }
  fanout_unref(f);
  return rc;
}

/* Sleeps ms or until cancel is triggered: RLOCK_ECANCELED then. */
static int pause_ms(int64_t ms, rlock_cancel_t *cancel) {
  struct pollfd p = {cancel ? cancel->fd : -1, POLLIN, 0};
  int64_t until = rlock_now_ms() + ms;
  for (int64_t left = ms; left > 0; left = until - rlock_now_ms()) {
    if (cancel && atomic_load(&cancel->triggered)) break;
    poll(&p, cancel ? 1 : 0, (int)left);
  }
  return cancel && atomic_load(&cancel->triggered) ? rlock__fail(RLOCK_ECANCELED, "wait for the lock cancelled") : 0;
}

static int64_t retry_delay(void) {
  uint32_t x;
  rlock__random_bytes(&x, sizeof x);
  return RETRY_MIN_MS + (int64_t)(x % (RETRY_MAX_MS - RETRY_MIN_MS + 1));
}

static int acquire_rounds(rlock_redlock_t *r, uint64_t owner, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                          int64_t *valid_until) {
  int64_t deadline = wait_ms < 0 ? -1 : rlock_now_ms() + wait_ms;
  for (;;) {
    if (cancel && atomic_load(&cancel->triggered)) return rlock__fail(RLOCK_ECANCELED, "wait for the lock cancelled");
    int rc = round_once(r, owner, lease_ms, valid_until);
    if (rc == 0 || (rc != RLOCK_EBUSY && rc != RLOCK_ECONNECT)) return rc;
    int64_t delay = retry_delay(), now = rlock_now_ms();
    if (deadline >= 0 && now + delay >= deadline) return rlock__fail_keep(rc); /* no time for another round */
    int crc = pause_ms(delay, cancel);
    if (crc) return crc;
  }
}

/* ------------------------------------------------------------ public */

RLOCK_API int rlock_redlock_acquire(rlock_redlock_t *r, int64_t wait_ms, int64_t lease_ms, rlock_cancel_t *cancel,
                                    int64_t *valid_until) {
  if (!r) return rlock__fail(RLOCK_EINVAL, "redlock is NULL");
  if ((wait_ms < 0 && wait_ms != RLOCK_WAIT_FOREVER) || wait_ms > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "wait time %lld ms is out of range", (long long)wait_ms);
  if ((lease_ms <= 0 && lease_ms != RLOCK_LEASE_WATCHDOG) || lease_ms > RLOCK_DURATION_MAX)
    return rlock__fail(RLOCK_EINVAL, "lease %lld ms is out of range", (long long)lease_ms);
  int frc = check_fork(r);
  if (frc) return frc;
  pthread_mutex_lock(&r->op_mu);
  pthread_mutex_lock(&r->mu);
  if (r->holding && r->lost_told) r->holding = false; /* lost: its nodes were released */
  bool held = r->holding;
  pthread_mutex_unlock(&r->mu);
  int64_t vu = 0;
  int rc = held ? rlock__fail(RLOCK_EBUSY, "this RedLock is held already (release it first)")
                : acquire_rounds(r, RLOCK_OWNER_THREAD | rlock__gettid(), wait_ms, lease_ms, cancel, &vu);
  pthread_mutex_unlock(&r->op_mu);
  if (rc == 0 && valid_until) *valid_until = vu;
  return rc;
}

RLOCK_API int rlock_redlock_release(rlock_redlock_t *r) {
  if (!r) return rlock__fail(RLOCK_EINVAL, "redlock is NULL");
  int frc = check_fork(r);
  if (frc) return frc;
  pthread_mutex_lock(&r->op_mu);
  pthread_mutex_lock(&r->mu);
  bool held = r->holding, lost = r->lost_told;
  bool *which = malloc(r->n * sizeof *which);
  for (size_t i = 0; which && i < r->n; i++) which[i] = r->held[i], r->held[i] = false;
  uint64_t owner = r->owner;
  r->holding = false;
  r->nheld = 0;
  pthread_mutex_unlock(&r->mu);
  int rc = 0;
  if (!held) rc = rlock__fail(RLOCK_ENOTHELD, "this RedLock is not held");
  else if (!which) rc = rlock__fail(RLOCK_ENOMEM, "out of memory"); /* the leases free the nodes */
  else release_nodes(r, owner, which); /* a node that does not answer frees it by its lease */
  if (held && lost && !rc) rc = rlock__fail(RLOCK_ENOTHELD, "the RedLock was lost (no majority held it)");
  free(which);
  pthread_mutex_unlock(&r->op_mu);
  return rc;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

RLOCK_API int rlock_redlock_valid_until(rlock_redlock_t *r, int64_t *out) {
  if (!r || !out) return rlock__fail(RLOCK_EINVAL, "redlock or out is NULL");
  int frc = check_fork(r);
  if (frc) return frc;
  int64_t *vu = calloc(r->n, sizeof *vu);
  if (!vu) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  pthread_mutex_lock(&r->mu);
  bool held = r->holding && !r->lost_told;
  uint64_t owner = r->owner;
  int64_t lease = r->lease_ms == RLOCK_LEASE_WATCHDOG ? r->watchdog_ms : r->lease_ms;
  bool *which = malloc(r->n * sizeof *which);
  for (size_t i = 0; which && i < r->n; i++) which[i] = r->held[i];
  pthread_mutex_unlock(&r->mu);
  size_t valid = 0;
  for (size_t i = 0; held && which && i < r->n; i++) /* no r->mu across a sync call */
    if (which[i] && rlock_lock_valid_until(r->nodes[i].lock, owner, &vu[valid]) == 0) valid++;
  free(which);
  int rc = 0;
  if (!held || valid < r->majority) {
    rc = rlock__fail(RLOCK_ENOTHELD, "this RedLock is not held by a majority of its nodes");
  } else {
    qsort(vu, valid, sizeof *vu, cmp_desc);
    *out = vu[r->majority - 1] - drift(lease); /* a majority is valid until then */
  }
  free(vu);
  return rc;
}

RLOCK_API int rlock_redlock_node_status(rlock_redlock_t *r, size_t i, int *held, int64_t *ttl_ms) {
  if (!r || i >= r->n || !held || !ttl_ms) return rlock__fail(RLOCK_EINVAL, "bad arguments");
  int frc = check_fork(r);
  if (frc) return frc;
  revive_missing(r);
  char err[sizeof r->nodes[i].err];
  pthread_mutex_lock(&r->mu);
  rlock_lock_t *lock = r->nodes[i].cl ? r->nodes[i].lock : NULL;
  snprintf(err, sizeof err, "%s", r->nodes[i].err);
  *held = r->holding && r->held[i];
  pthread_mutex_unlock(&r->mu);
  if (!lock) return rlock__fail(RLOCK_ECONNECT, "%s", err);
  return rlock_lock_ttl(lock, ttl_ms);
}

RLOCK_API void rlock_redlock_on_lost(rlock_redlock_t *r, rlock_lost_cb cb, void *arg) {
  if (!r || check_fork(r)) return;
  pthread_mutex_lock(&r->mu);
  r->lost_cb = cb;
  r->lost_arg = arg;
  pthread_mutex_unlock(&r->mu);
}

RLOCK_API size_t rlock_redlock_nodes(const rlock_redlock_t *r) { return r ? r->n : 0; }

RLOCK_API int rlock_redlock_set_node_timeout(rlock_redlock_t *r, int64_t ms) {
  if (!r || ms < 0 || ms > RLOCK_DURATION_MAX) return rlock__fail(RLOCK_EINVAL, "node timeout out of range");
  int frc = check_fork(r);
  if (frc) return frc;
  pthread_mutex_lock(&r->op_mu);
  r->node_timeout_ms = ms;
  pthread_mutex_unlock(&r->op_mu);
  return 0;
}

/* ------------------------------------------------------------ new, free */

typedef struct maker {
  rlock_options_t opts;
  node_t *nd;
  int rc;
} maker_t;

/* Makes one node's client (a thread each: the nodes connect in parallel). */
static void *make_client(void *arg) {
  maker_t *m = arg;
  m->rc = rlock_client_new(&m->nd->cl, &m->opts);
  if (m->rc) {
    snprintf(m->nd->err, sizeof m->nd->err, "%s", rlock_last_error());
    m->nd->cl = NULL;
    m->nd->next_try = rlock_now_ms() + REVIVE_MS;
  }
  return NULL;
}

/* A bad URL or option is the caller's mistake: no RedLock. A node that
 * cannot be reached (or refuses the credentials) is a failed node. */
static bool config_error(int rc) { return rc == RLOCK_EURL || rc == RLOCK_EINVAL || rc == RLOCK_ENOMEM; }

static int make_clients(rlock_redlock_t *r, const rlock_options_t *opts, const char *const *urls) {
  maker_t *m = calloc(r->n, sizeof *m);
  pthread_t *t = calloc(r->n, sizeof *t);
  bool *started = calloc(r->n, sizeof *started);
  int rc = m && t && started ? 0 : rlock__fail(RLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < r->n; i++) {
    m[i] = (maker_t){*opts, &r->nodes[i], 0};
    m[i].opts.url = urls[i];
    started[i] = pthread_create(&t[i], NULL, make_client, &m[i]) == 0;
    if (!started[i]) make_client(&m[i]);
  }
  /* join every thread, even after an error: each writes into r */
  for (size_t i = 0; m && t && started && i < r->n; i++) {
    if (started[i]) pthread_join(t[i], NULL);
    if (config_error(m[i].rc) && !rc) {
      char shown[256];
      rlock_url_redact(urls[i], shown, sizeof shown);
      rc = rlock__fail(m[i].rc, "node %zu (%s): %s", i + 1, shown, r->nodes[i].err);
    }
  }
  free(m), free(t), free(started);
  return rc;
}

/* Node nd's lock handle on its client cl, its loss reported to node_lost. */
static int open_lock(rlock_redlock_t *r, node_t *nd, rlock_client_t *cl, rlock_lock_t **lock) {
  int rc = r->flags & RLOCK_REDLOCK_SIMPLE ? rlock_lock_new_simple(cl, r->name, r->len, lock)
                                           : rlock_lock_new(cl, r->name, r->len, lock);
  if (!rc) rlock_client_on_lost(cl, node_lost, nd);
  return rc;
}

static int open_locks(rlock_redlock_t *r) {
  for (size_t i = 0; i < r->n; i++) {
    node_t *nd = &r->nodes[i];
    int rc = nd->cl ? open_lock(r, nd, nd->cl, &nd->lock) : 0;
    if (rc) return rc;
  }
  return 0;
}

/* A reviver thread: makes node nd's client again; on success the node takes
 * part from the next round on. */
static void *revive(void *arg) {
  node_t *nd = arg;
  rlock_redlock_t *r = nd->r;
  rlock_options_t o = r->opts;
  o.url = nd->url;
  rlock_client_t *cl = NULL;
  rlock_lock_t *lock = NULL;
  int rc = rlock_client_new(&cl, &o);
  if (!rc) rc = open_lock(r, nd, cl, &lock);
  pthread_mutex_lock(&r->mu);
  if (!rc) {
    nd->cl = cl, nd->lock = lock;
  } else {
    snprintf(nd->err, sizeof nd->err, "%s", rlock_last_error());
    nd->next_try = rlock_now_ms() + REVIVE_MS;
  }
  nd->reviving = false;
  pthread_mutex_unlock(&r->mu);
  if (rc) rlock_lock_free(lock), rlock_client_free(cl);
  return NULL;
}

/* Starts a reviver for every node without a client whose next try is due. */
static void revive_missing(rlock_redlock_t *r) {
  int64_t now = rlock_now_ms();
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->n; i++) {
    node_t *nd = &r->nodes[i];
    if (nd->cl || nd->reviving || r->closing || now < nd->next_try) continue;
    if (nd->joinable) pthread_join(nd->reviver, NULL); /* ended: it cleared reviving */
    nd->reviving = nd->joinable = pthread_create(&nd->reviver, NULL, revive, nd) == 0;
    if (!nd->reviving) nd->next_try = now + REVIVE_MS;
  }
  pthread_mutex_unlock(&r->mu);
}

RLOCK_API void rlock_redlock_free(rlock_redlock_t *r) {
  if (!r) return;
  if (r->fork_gen != rlock__fork_generation()) return; /* touch nothing: its threads and clients are the parent's */
  /* no loss counts from now on: node_lost() of a client not yet freed would
   * release the nodes still held, on clients already freed */
  pthread_mutex_lock(&r->mu);
  r->holding = r->acquiring = false;
  r->closing = true;
  pthread_mutex_unlock(&r->mu);
  for (size_t i = 0; r->nodes && i < r->n; i++) /* a reviver still connecting: at most connect_timeout_ms */
    if (r->nodes[i].joinable) pthread_join(r->nodes[i].reviver, NULL);
  /* clients first: their outstanding callbacks end (RLOCK_ECLOSED) while the
   * lock handles and the fan-outs they use still exist */
  for (size_t i = 0; r->nodes && i < r->n; i++) rlock_client_free(r->nodes[i].cl);
  for (size_t i = 0; r->nodes && i < r->n; i++) rlock_lock_free(r->nodes[i].lock), free(r->nodes[i].url);
  free(r->nodes);
  free(r->s_name), free(r->s_ca), free(r->s_cert), free(r->s_key), free(r->s_sni), free(r->name);
  free(r->held);
  free(r->gone);
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->op_mu);
  free(r);
}

/* A copy of what a reviver needs later (the caller's strings need not outlive
 * rlock_redlock_new). RLOCK_ENOMEM. */
static char *dup_opt(const char *s, bool *ok) {
  char *d = s ? strdup(s) : NULL;
  if (s && !d) *ok = false;
  return d;
}

static int keep_options(rlock_redlock_t *r, const rlock_options_t *opts, const void *name, size_t len, unsigned flags) {
  bool ok = true;
  r->opts = *opts;
  r->opts.client_name = r->s_name = dup_opt(opts->client_name, &ok);
  r->opts.tls_ca_file = r->s_ca = dup_opt(opts->tls_ca_file, &ok);
  r->opts.tls_cert_file = r->s_cert = dup_opt(opts->tls_cert_file, &ok);
  r->opts.tls_key_file = r->s_key = dup_opt(opts->tls_key_file, &ok);
  r->opts.tls_server_name = r->s_sni = dup_opt(opts->tls_server_name, &ok);
  r->name = rlock__strndup(name, len);
  r->len = len;
  r->flags = flags;
  return ok && r->name ? 0 : RLOCK_ENOMEM;
}

RLOCK_API int rlock_redlock_new(rlock_redlock_t **out, const rlock_options_t *opts, const char *const *urls, size_t n,
                                const void *name, size_t len, unsigned flags) {
  if (!out) return rlock__fail(RLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!opts || !urls) return rlock__fail(RLOCK_EINVAL, "opts or urls is NULL");
  if (n < 1 || n > NODES_MAX) return rlock__fail(RLOCK_EINVAL, "a RedLock needs 1 to %d nodes, not %zu", NODES_MAX, n);
  for (size_t i = 0; i < n; i++)
    if (!urls[i]) return rlock__fail(RLOCK_EINVAL, "url %zu is NULL", i + 1);
  if (!name || len == 0 || len > RLOCK_NAME_MAX)
    return rlock__fail(RLOCK_EINVAL, "bad lock name (1 to %d bytes)", RLOCK_NAME_MAX);
  if (flags & ~RLOCK_REDLOCK_SIMPLE) return rlock__fail(RLOCK_EINVAL, "unknown RedLock flags 0x%x", flags);
  rlock_redlock_t *r = calloc(1, sizeof *r);
  if (!r) return rlock__fail(RLOCK_ENOMEM, "out of memory");
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->op_mu, NULL);
  r->fork_gen = rlock__fork_generation();
  r->n = n;
  r->majority = n / 2 + 1;
  r->watchdog_ms = opts->watchdog_timeout_ms;
  r->command_timeout_ms = opts->command_timeout_ms;
  r->nodes = calloc(n, sizeof *r->nodes);
  r->held = calloc(n, sizeof *r->held);
  r->gone = calloc(n, sizeof *r->gone);
  int rc = r->nodes && r->held && r->gone && !keep_options(r, opts, name, len, flags)
               ? 0
               : rlock__fail(RLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < n; i++) {
    r->nodes[i].r = r, r->nodes[i].idx = i;
    if (!(r->nodes[i].url = strdup(urls[i]))) rc = rlock__fail(RLOCK_ENOMEM, "out of memory");
  }
  if (!rc) rc = make_clients(r, &r->opts, urls);
  if (!rc && (rc = open_locks(r))) rc = rlock__fail(rc, "out of memory");
  if (rc) {
    char why[512];
    snprintf(why, sizeof why, "%s", rlock_last_error());
    rlock_redlock_free(r); /* freeing the clients sets messages of its own */
    rlock__set_msg(why);
    return rc;
  }
  *out = r;
  return 0;
}
