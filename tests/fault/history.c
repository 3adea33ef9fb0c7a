/* history.c -- recording and checking lock histories (see history.h): the
 * fixed-size record writer used by worker processes, and the checker that
 * rebuilds every critical section from the records and reports overlaps. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "history.h"

#include "rlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(hist_rec_t) == 128, "history records are 128 bytes");

static atomic_uint seq_counter;

int64_t hist_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *hist_kind_name(int kind) {
  static const char *names[HK_MAX] = {"?",       "attempt", "grant", "enter", "exit",
                                      "release", "lost",    "fail",  "valid", "died"};
  return kind > 0 && kind < HK_MAX ? names[kind] : "?";
}

int hist_create(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

int hist_open(const char *path) { return open(path, O_WRONLY | O_APPEND | O_CLOEXEC); }

int hist_log_at(int fd, int64_t t_ns, int kind, int worker, const void *name, size_t name_len, int status,
                int64_t valid_until_ns, uint64_t token) {
  hist_rec_t r;
  memset(&r, 0, sizeof r);
  r.magic = HIST_MAGIC;
  r.kind = (uint16_t)kind;
  r.worker = (uint16_t)worker;
  r.seq = atomic_fetch_add(&seq_counter, 1);
  r.status = status;
  r.t_ns = t_ns;
  r.valid_until_ns = valid_until_ns;
  r.token = token;
  if (name_len > HIST_NAME_MAX) name_len = HIST_NAME_MAX;
  r.name_len = (uint16_t)name_len;
  if (name_len) memcpy(r.name, name, name_len);
  ssize_t w;
  do {
    w = write(fd, &r, sizeof r);
  } while (w < 0 && errno == EINTR);
  return w == (ssize_t)sizeof r ? 0 : -1;
}

int hist_log(int fd, int kind, int worker, const void *name, size_t name_len, int status, int64_t valid_until_ns,
             uint64_t token) {
  return hist_log_at(fd, hist_now_ns(), kind, worker, name, name_len, status, valid_until_ns, token);
}

/* ------------------------------------------------------------ checker */

static int by_time(const void *pa, const void *pb) {
  const hist_rec_t *a = pa, *b = pb;
  if (a->t_ns != b->t_ns) return a->t_ns < b->t_ns ? -1 : 1;
  /* same stamp: keep a worker's own order (exit before enter, etc.) */
  if (a->worker != b->worker) return a->worker < b->worker ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int by_enter(const void *pa, const void *pb) {
  const hist_section_t *a = pa, *b = pb;
  if (a->name_len != b->name_len) return a->name_len < b->name_len ? -1 : 1;
  int c = memcmp(a->name, b->name, a->name_len);
  if (c) return c;
  return a->enter_ns < b->enter_ns ? -1 : a->enter_ns > b->enter_ns;
}

static int bad(hist_report_t *rep, const char *msg) {
  snprintf(rep->msg, sizeof rep->msg, "malformed history: %s", msg);
  rep->verdict = HIST_BADHIST;
  return rep->verdict;
}

/* ---- the record sequence (history.h: what a malformed history is) */

/* Orders one writer's records: worker, then its sequence number. */
static int by_writer(const void *pa, const void *pb) {
  const hist_rec_t *a = pa, *b = pb;
  if (a->worker != b->worker) return a->worker < b->worker ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int bad_rec(hist_report_t *rep, const hist_rec_t *e, const char *what) {
  char msg[300];
  snprintf(msg, sizeof msg, "worker %d, '%.*s', %s record seq %u at %.3f ms: %s", e->worker, (int)e->name_len, e->name,
           hist_kind_name(e->kind), e->seq, (double)e->t_ns / 1e6, what);
  return bad(rep, msg);
}

/* Per writer (a worker process; HK_DIED is the parent's and HK_LOST comes
 * from the worker's I/O thread, so neither is ordered with the rest): no
 * sequence number twice, and time never goes back in sequence order. */
static int check_writers(const hist_rec_t *in, size_t n, hist_report_t *rep) {
  hist_rec_t *r = malloc((n ? n : 1) * sizeof *r);
  size_t m = 0;
  int v = HIST_OK;
  if (!r) return bad(rep, "out of memory");
  for (size_t i = 0; i < n; i++)
    if (in[i].kind != HK_DIED) r[m++] = in[i];
  qsort(r, m, sizeof *r, by_writer);
  const hist_rec_t *prev = NULL; /* the writer's last record other than HK_LOST */
  for (size_t i = 0; i < m && v == HIST_OK; i++) {
    if (i > 0 && r[i - 1].worker != r[i].worker) prev = NULL;
    if (i > 0 && r[i - 1].worker == r[i].worker && r[i - 1].seq == r[i].seq)
      v = bad_rec(rep, &r[i], "the same sequence number twice");
    else if (r[i].kind != HK_LOST && prev && r[i].t_ns < prev->t_ns)
      v = bad_rec(rep, &r[i], "time goes back from the writer's previous record");
    if (r[i].kind != HK_LOST) prev = &r[i];
  }
  free(r);
  return v;
}

/* Where one worker is with one lock: the legal order is
 * attempt -> (fail | grant -> enter -> exit -> release) -> attempt ...;
 * valid and lost may come at any point. */
typedef enum { ST_IDLE, ST_TRYING, ST_GRANTED, ST_INSIDE, ST_LEFT } hold_state_t;

/* Advances *st by the record's kind; returns NULL, or what is illegal. */
static const char *step(hold_state_t *st, const hist_rec_t *e) {
  switch (e->kind) {
  case HK_ATTEMPT:
    if (*st != ST_IDLE) return "an attempt while the previous one has not ended";
    *st = ST_TRYING;
    return NULL;
  case HK_FAIL:
    if (*st != ST_TRYING) return "a failed acquire without an attempt";
    if (e->status == 0) return "a failed acquire with status 0";
    *st = ST_IDLE;
    return NULL;
  case HK_GRANT:
    if (*st != ST_TRYING) return "a grant without an attempt";
    *st = ST_GRANTED;
    return NULL;
  case HK_ENTER:
    if (*st == ST_INSIDE) return "entered twice without an exit";
    if (*st != ST_GRANTED) return "entered without a grant";
    *st = ST_INSIDE;
    return NULL;
  case HK_EXIT:
    if (*st != ST_INSIDE) return "left without entering";
    *st = ST_LEFT;
    return NULL;
  case HK_RELEASE:
    if (*st == ST_INSIDE) return "released inside the critical section (no exit)";
    if (*st != ST_LEFT) return "released without a grant, entry and exit";
    *st = ST_IDLE;
    return NULL;
  default: return NULL;
  }
}

/* Per (worker, lock) state while scanning. */
typedef struct cur {
  int worker;
  char name[HIST_NAME_MAX];
  size_t name_len;
  hold_state_t state;
  int64_t grant_ns, valid_until_ns, attempt_ns;
  uint64_t token;
  long open; /* index of the open section, -1 none */
  long last; /* index of the last section of the current hold, -1 none */
} cur_t;

static cur_t *find_cur(cur_t **curs, size_t *n, size_t *cap, const hist_rec_t *r) {
  for (size_t i = 0; i < *n; i++)
    if ((*curs)[i].worker == r->worker && (*curs)[i].name_len == r->name_len &&
        memcmp((*curs)[i].name, r->name, r->name_len) == 0)
      return &(*curs)[i];
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    cur_t *p = realloc(*curs, nc * sizeof *p);
    if (!p) return NULL;
    *curs = p, *cap = nc;
  }
  cur_t *c = &(*curs)[(*n)++];
  memset(c, 0, sizeof *c);
  c->worker = r->worker;
  c->name_len = r->name_len;
  memcpy(c->name, r->name, r->name_len);
  c->open = c->last = -1;
  return c;
}

static int same_name(const hist_section_t *a, const hist_section_t *b) {
  return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0;
}

/* A's permit may be counted again once B was granted after A's lease ran out
 * and A was told (as HIST_MUTEX_LEASE's permitted overlap). */
static int stale_for(const hist_section_t *a, const hist_section_t *b) {
  return a->valid_until_ns > 0 && b->grant_ns >= a->valid_until_ns && a->lost_ns > 0;
}

/* HIST_PERMITS on sections sorted by name, then entry: when section b
 * enters, the sections of its name still inside (entered before, not left)
 * hold permits; if they are `permits` or more, b's entry is an excess. It is
 * permitted only if enough of them are stale for b (lease ran out before b's
 * grant, holder told) to leave fewer than `permits` live ones; else it is a
 * violation (a permit counted twice). One overlap is listed per excess: a
 * is a stale section inside if it is permitted, else the latest live one. */
static int check_permits(hist_section_t *secs, size_t nsecs, int permits, hist_report_t *rep) {
  size_t capo = 0;
  for (size_t j = 0; j < nsecs; j++) {
    const hist_section_t *b = &secs[j];
    size_t first = j;
    while (first > 0 && same_name(&secs[first - 1], b)) first--;
    if (first == j) rep->locks++;
    int inside = 0, stale = 0;
    long live_a = -1, stale_a = -1;
    int64_t to = INT64_MAX;
    for (size_t i = first; i < j; i++) {
      const hist_section_t *a = &secs[i];
      if (a->exit_ns <= b->enter_ns || a->worker == b->worker) continue;
      inside++;
      if (stale_for(a, b)) stale++, stale_a = (long)i;
      else live_a = (long)i;
      if (a->exit_ns < to) to = a->exit_ns;
    }
    if (inside < permits) continue;
    hist_overlap_t o;
    memset(&o, 0, sizeof o);
    o.permitted = inside - stale < permits;
    o.a = secs[o.permitted ? stale_a : live_a >= 0 ? live_a : stale_a], o.b = *b;
    o.from_ns = b->enter_ns;
    o.to_ns = b->exit_ns < to ? b->exit_ns : to;
    snprintf(o.why, sizeof o.why, "%s: %d holders inside when B entered (bound %d), %d of them stale and told",
             o.permitted ? "permitted" : "VIOLATION: a permit counted twice", inside, permits, stale);
    if (rep->nlist == capo) {
      size_t nc = capo ? capo * 2 : 8;
      hist_overlap_t *p = realloc(rep->list, nc * sizeof *p);
      if (!p) return bad(rep, "out of memory");
      rep->list = p, capo = nc;
    }
    rep->list[rep->nlist++] = o;
    rep->overlaps++;
    if (o.permitted) rep->permitted++;
    else rep->violations++;
  }
  snprintf(rep->msg, sizeof rep->msg,
           "%zu records, %zu workers, %zu semaphores, %zu holds, %zu grants, %zu failed acquires, %zu lost, "
           "%zu died: %zu entries past the bound of %d (%zu permitted, %zu violations)",
           rep->records, rep->workers, rep->locks, rep->sections, rep->grants, rep->fails, rep->lost, rep->died,
           rep->overlaps, permits, rep->permitted, rep->violations);
  return rep->violations ? HIST_VIOLATION : HIST_OK;
}

/* ---- HIST_FIFO: one acquire attempt of a worker on a lock, from its
 * HK_ATTEMPT to its grant, HK_FAIL or the worker's death (INT64_MAX: the
 * history ends while it waits). */
typedef struct attempt {
  int worker;
  char name[HIST_NAME_MAX];
  size_t name_len;
  int64_t begin_ns, end_ns;
  int granted; /* ended by a grant (end_ns is the grant) */
  int status;  /* ended by HK_FAIL: its status (the acquire's rc); by HK_GRANT: the grant's status */
} attempt_t;

typedef struct attempts {
  attempt_t *a;
  size_t n, cap;
} attempts_t;

static int attempt_add(attempts_t *l, const cur_t *c, int64_t end_ns, int granted, int status) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 64;
    attempt_t *p = realloc(l->a, nc * sizeof *p);
    if (!p) return -1;
    l->a = p, l->cap = nc;
  }
  attempt_t *a = &l->a[l->n++];
  a->worker = c->worker;
  memcpy(a->name, c->name, c->name_len);
  a->name_len = c->name_len;
  a->begin_ns = c->attempt_ns;
  a->end_ns = end_ns;
  a->granted = granted;
  a->status = status;
  return 0;
}

/* Name, then worker, then begin: one worker's attempts on one lock are
 * consecutive and disjoint. */
static int by_lock_worker(const void *pa, const void *pb) {
  const attempt_t *a = pa, *b = pb;
  if (a->name_len != b->name_len) return a->name_len < b->name_len ? -1 : 1;
  int c = memcmp(a->name, b->name, a->name_len);
  if (c) return c;
  if (a->worker != b->worker) return a->worker < b->worker ? -1 : 1;
  return a->begin_ns < b->begin_ns ? -1 : a->begin_ns > b->begin_ns;
}

static int same_lock(const attempt_t *a, const attempt_t *b) {
  return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0;
}

/* For each grant B and each other worker of its lock: that worker's last
 * attempt A begun at least `slack` before B's (an earlier one ended before
 * it began); B overtook A if A was still waiting `slack` after B's grant. */
static void check_fifo(attempts_t *l, const hist_check_opts_t *opts, hist_report_t *rep) {
  int64_t slack = opts->fifo_slack_ns > 0 ? opts->fifo_slack_ns : HIST_FIFO_SLACK_NS;
  qsort(l->a, l->n, sizeof *l->a, by_lock_worker);
  for (size_t j = 0; j < l->n; j++) {
    const attempt_t *b = &l->a[j];
    if (!b->granted) continue;
    size_t lo = j;
    while (lo > 0 && same_lock(&l->a[lo - 1], b)) lo--;
    for (size_t i = lo; i < l->n && same_lock(&l->a[i], b);) {
      size_t end = i; /* [i, end): one worker's attempts */
      while (end < l->n && same_lock(&l->a[end], b) && l->a[end].worker == l->a[i].worker) end++;
      const attempt_t *a = NULL;
      for (size_t k = i; k < end && l->a[k].begin_ns <= b->begin_ns - slack; k++) a = &l->a[k];
      i = end;
      if (!a || a->worker == b->worker || a->end_ns < b->end_ns + slack) continue;
      /* A failed with every try's answer lost: its tries may never have
       * reached the server (a connection dropped for good), so it may never
       * have been queued. Counted apart, as a fault the history excuses. */
      int excused = !a->granted && a->end_ns != INT64_MAX &&
                    (a->status == RLOCK_ETIMEDOUT || a->status == RLOCK_ECONNLOST || a->status == RLOCK_ECONNECT);
      /* A granted in the end, but its client had a request time out or a
       * connection replaced meanwhile (HK_GRANT status 1): a try lost on a
       * connection dropped for good reached the server only when re-sent,
       * and queued from then on. */
      excused |= a->granted && a->status == 1;
      for (size_t w = 0; w < opts->nexcuse; w++)
        excused |= b->end_ns >= opts->excuse[2 * w] && b->end_ns <= opts->excuse[2 * w + 1];
      if (excused) {
        rep->overtakes_excused++;
        continue;
      }
      if (!rep->overtakes++)
        snprintf(rep->first_overtake, sizeof rep->first_overtake,
                 "on '%.*s': worker %d (attempt at %.3f ms) granted at %.3f ms while worker %d waited since "
                 "%.3f ms (%s at %.3f ms)",
                 (int)b->name_len, b->name, b->worker, (double)b->begin_ns / 1e6, (double)b->end_ns / 1e6, a->worker,
                 (double)a->begin_ns / 1e6,
                 a->end_ns == INT64_MAX ? "still waiting"
                 : a->granted           ? "granted"
                                        : "gave up or died",
                 a->end_ns == INT64_MAX ? -1.0 : (double)a->end_ns / 1e6);
    }
  }
}

int hist_check(const hist_rec_t *in, size_t n, const hist_check_opts_t *opts, hist_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->records = n;
  if (!opts) return bad(rep, "no options");
  if (opts->mode != HIST_MUTEX && opts->mode != HIST_MUTEX_LEASE && opts->mode != HIST_RW &&
      opts->mode != HIST_PERMITS && opts->mode != HIST_FIFO)
    return bad(rep, "unknown mode");
  int fifo = opts->mode == HIST_FIFO;
  attempts_t att = {NULL, 0, 0};
  if (opts->mode == HIST_PERMITS && opts->permits < 1) return bad(rep, "HIST_PERMITS needs a bound of 1 or more");

  hist_rec_t *r = malloc((n ? n : 1) * sizeof *r);
  hist_section_t *secs = NULL;
  size_t nsecs = 0, capsecs = 0;
  cur_t *curs = NULL;
  size_t ncurs = 0, capcurs = 0;
  int verdict = HIST_OK;
  if (!r) return bad(rep, "out of memory");
  memcpy(r, in, n * sizeof *r);
  for (size_t i = 0; i < n && verdict == HIST_OK; i++)
    if (r[i].magic != HIST_MAGIC || r[i].kind == 0 || r[i].kind >= HK_MAX || r[i].name_len > HIST_NAME_MAX)
      verdict = bad(rep, "bad record (magic/kind/name length)");
  if (verdict == HIST_OK) verdict = check_writers(r, n, rep);
  qsort(r, n, sizeof *r, by_time);
  int maxw = -1;
  unsigned char dead[65536 / 8] = {0}; /* workers with an HK_DIED record so far */

  for (size_t i = 0; i < n && verdict == HIST_OK; i++) {
    const hist_rec_t *e = &r[i];
    if (e->worker > maxw) maxw = e->worker;
    if (dead[e->worker / 8] & (1u << (e->worker % 8))) {
      verdict = bad_rec(rep, e, "a record of a worker after its death (HK_DIED)");
      break;
    }
    if (e->kind == HK_DIED) { /* closes every open section of that worker */
      dead[e->worker / 8] |= (unsigned char)(1u << (e->worker % 8));
      rep->died++;
      for (size_t k = 0; k < ncurs; k++) /* a waiter that dies leaves the queue */
        if (fifo && curs[k].worker == e->worker && curs[k].state == ST_TRYING) {
          if (attempt_add(&att, &curs[k], e->t_ns, 0, 0) != 0) verdict = bad(rep, "out of memory");
          curs[k].state = ST_IDLE; /* its attempt ended here */
        }
      for (size_t k = 0; k < ncurs; k++)
        if (curs[k].worker == e->worker && curs[k].open >= 0) {
          secs[curs[k].open].exit_ns = e->t_ns;
          secs[curs[k].open].died = 1;
          curs[k].open = -1;
        }
      continue;
    }
    cur_t *c = find_cur(&curs, &ncurs, &capcurs, e);
    if (!c) {
      verdict = bad(rep, "out of memory");
      break;
    }
    const char *illegal = step(&c->state, e);
    if (illegal) {
      verdict = bad_rec(rep, e, illegal);
      break;
    }
    if (fifo && (e->kind == HK_GRANT || e->kind == HK_FAIL) &&
        attempt_add(&att, c, e->t_ns, e->kind == HK_GRANT, e->status) != 0) {
      verdict = bad(rep, "out of memory");
      break;
    }
    switch (e->kind) {
    case HK_ATTEMPT: c->attempt_ns = e->t_ns; break;
    case HK_GRANT:
      rep->grants++;
      c->grant_ns = e->t_ns;
      c->valid_until_ns = e->valid_until_ns;
      c->token = e->token;
      c->last = -1;
      break;
    case HK_VALID:
      if (e->status == 0 && e->valid_until_ns > c->valid_until_ns) {
        c->valid_until_ns = e->valid_until_ns;
        if (c->last >= 0) secs[c->last].valid_until_ns = e->valid_until_ns;
      }
      break;
    case HK_ENTER: /* step(): granted, not inside */
      if (nsecs == capsecs) {
        size_t nc = capsecs ? capsecs * 2 : 64;
        hist_section_t *p = realloc(secs, nc * sizeof *p);
        if (!p) {
          verdict = bad(rep, "out of memory");
          break;
        }
        secs = p, capsecs = nc;
      }
      {
        hist_section_t *s = &secs[nsecs];
        memset(s, 0, sizeof *s);
        s->worker = e->worker;
        memcpy(s->name, e->name, e->name_len);
        s->name_len = e->name_len;
        s->grant_ns = c->grant_ns;
        s->enter_ns = e->t_ns;
        s->exit_ns = INT64_MAX;
        s->valid_until_ns = c->valid_until_ns;
        s->token = c->token;
        s->shared = e->status == 1;
        c->open = c->last = (long)nsecs++;
      }
      break;
    case HK_EXIT: /* step(): inside, so c->open is the section */
      secs[c->open].exit_ns = e->t_ns;
      secs[c->open].stale_exit = e->status == 1;
      c->open = -1;
      break;
    case HK_LOST:
      rep->lost++;
      if (c->last >= 0 && !secs[c->last].lost_ns) secs[c->last].lost_ns = e->t_ns;
      break;
    case HK_FAIL: rep->fails++; break;
    case HK_RELEASE:
      c->grant_ns = 0; /* a new grant is needed for the next section */
      break;
    default: break;
    }
  }
  rep->workers = (size_t)(maxw + 1);
  rep->sections = nsecs;
  for (size_t k = 0; fifo && verdict == HIST_OK && k < ncurs; k++) /* still waiting at the end */
    if (curs[k].state == ST_TRYING && attempt_add(&att, &curs[k], INT64_MAX, 0, 0) != 0)
      verdict = bad(rep, "out of memory");

  if (verdict == HIST_OK && opts->mode == HIST_PERMITS) {
    qsort(secs, nsecs, sizeof *secs, by_enter);
    verdict = check_permits(secs, nsecs, opts->permits, rep);
  } else if (verdict == HIST_OK) {
    qsort(secs, nsecs, sizeof *secs, by_enter);
    size_t capo = 0;
    for (size_t i = 0; i < nsecs; i++) {
      if (i == 0 || secs[i].name_len != secs[i - 1].name_len ||
          memcmp(secs[i].name, secs[i - 1].name, secs[i].name_len))
        rep->locks++;
      for (size_t j = i + 1; j < nsecs; j++) {
        hist_section_t *a = &secs[i], *b = &secs[j];
        if (b->name_len != a->name_len || memcmp(b->name, a->name, a->name_len)) break;
        if (b->enter_ns >= a->exit_ns) continue; /* sorted by enter: later ones may still overlap a */
        if (b->worker == a->worker) continue;    /* impossible (one open section per worker) */
        if (opts->mode == HIST_RW && a->shared && b->shared) continue; /* readers together */
        hist_overlap_t o;
        memset(&o, 0, sizeof o);
        o.a = *a, o.b = *b;
        o.from_ns = b->enter_ns;
        o.to_ns = a->exit_ns < b->exit_ns ? a->exit_ns : b->exit_ns;
        if (opts->mode != HIST_MUTEX && a->valid_until_ns > 0 && b->grant_ns >= a->valid_until_ns && a->lost_ns > 0) {
          o.permitted = 1;
          snprintf(o.why, sizeof o.why,
                   "permitted: B was granted %.3f ms after A's lease ran out; A was told %.3f ms "
                   "after B entered",
                   (double)(b->grant_ns - a->valid_until_ns) / 1e6, (double)(a->lost_ns - b->enter_ns) / 1e6);
        } else if (a->valid_until_ns > 0 && b->grant_ns < a->valid_until_ns) {
          snprintf(o.why, sizeof o.why, "VIOLATION: B was granted %.3f ms BEFORE A's lease ran out",
                   (double)(a->valid_until_ns - b->grant_ns) / 1e6);
        } else {
          snprintf(o.why, sizeof o.why, "VIOLATION: overlap%s%s",
                   opts->mode == HIST_MUTEX ? " (strict mutual exclusion)" : "",
                   opts->mode != HIST_MUTEX && !a->lost_ns ? ": A was never told its lock was lost" : "");
        }
        if (rep->nlist == capo) {
          size_t nc = capo ? capo * 2 : 8;
          hist_overlap_t *p = realloc(rep->list, nc * sizeof *p);
          if (!p) {
            verdict = bad(rep, "out of memory");
            goto done;
          }
          rep->list = p, capo = nc;
        }
        rep->list[rep->nlist++] = o;
        rep->overlaps++;
        if (o.permitted) rep->permitted++;
        else rep->violations++;
      }
    }
    if (fifo) check_fifo(&att, opts, rep);
    verdict = rep->violations || rep->overtakes ? HIST_VIOLATION : HIST_OK;
    int m = snprintf(rep->msg, sizeof rep->msg,
                     "%zu records, %zu workers, %zu locks, %zu critical sections, %zu grants, %zu "
                     "failed acquires, %zu lost, %zu died: %zu overlaps (%zu permitted, %zu violations)",
                     rep->records, rep->workers, rep->locks, rep->sections, rep->grants, rep->fails, rep->lost,
                     rep->died, rep->overlaps, rep->permitted, rep->violations);
    if (fifo && m > 0 && (size_t)m < sizeof rep->msg)
      snprintf(rep->msg + m, sizeof rep->msg - (size_t)m, "; FIFO: %zu overtakes%s%s%s, %zu excused", rep->overtakes,
               rep->overtakes ? " (VIOLATIONS: the first " : "", rep->first_overtake, rep->overtakes ? ")" : "",
               rep->overtakes_excused);
  }
done:
  rep->verdict = verdict;
  free(att.a);
  free(r);
  free(secs);
  free(curs);
  return verdict;
}

/* Reads a history file into *out (malloc'd; *n records); 0, or a bad() verdict. */
static int read_file(const char *path, hist_rec_t **out, size_t *nout, hist_report_t *rep) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bad(rep, "cannot open the history file");
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size % (off_t)sizeof(hist_rec_t) != 0) {
    close(fd);
    return bad(rep, "history file size is not a multiple of the record size");
  }
  size_t n = (size_t)st.st_size / sizeof(hist_rec_t);
  hist_rec_t *recs = malloc((n ? n : 1) * sizeof *recs);
  size_t got = 0;
  while (recs && got < n * sizeof *recs) {
    ssize_t k = read(fd, (char *)recs + got, n * sizeof *recs - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(fd);
  if (!recs || got != n * sizeof *recs) {
    free(recs);
    return bad(rep, "short read of the history file");
  }
  *out = recs, *nout = n;
  return 0;
}

int hist_check_file(const char *path, const hist_check_opts_t *opts, hist_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  hist_rec_t *recs = NULL;
  size_t n = 0;
  int v = read_file(path, &recs, &n, rep);
  if (v) return v;
  v = hist_check(recs, n, opts, rep);
  free(recs);
  return v;
}

static int named(const hist_rec_t *r, const char *name) {
  return r->name_len == strlen(name) && memcmp(r->name, name, r->name_len) == 0;
}

int hist_check_latch(const char *path, const char *down, const char *opened, int count, hist_report_t *rep) {
  hist_check_opts_t o = {.mode = HIST_MUTEX};
  hist_rec_t *recs = NULL;
  size_t n = 0;
  memset(rep, 0, sizeof *rep);
  int v = read_file(path, &recs, &n, rep);
  if (v) return v;
  /* well formed (the mutex verdict itself is meaningless here: awaits overlap) */
  if (hist_check(recs, n, &o, rep) == HIST_BADHIST) {
    free(recs);
    return HIST_BADHIST;
  }
  hist_report_free(rep);
  memset(rep, 0, sizeof *rep);
  rep->records = n;
  qsort(recs, n, sizeof *recs, by_time);
  size_t downs = 0, early = 0;
  int64_t first_early = 0;
  size_t at_first = 0;
  for (size_t i = 0; i < n; i++) {
    if (named(&recs[i], down) && recs[i].kind == HK_ATTEMPT) downs++;
    if (named(&recs[i], opened) && recs[i].kind == HK_GRANT) {
      rep->grants++;
      if (downs < (size_t)count) {
        if (!early++) first_early = recs[i].t_ns, at_first = downs;
      }
    }
    if (named(&recs[i], opened) && recs[i].kind == HK_FAIL) rep->fails++;
  }
  rep->sections = downs;
  rep->violations = early;
  if (early)
    snprintf(rep->msg, sizeof rep->msg,
             "%zu of %zu awaits returned open before %d count-downs had begun (the first at %.3f ms, after %zu)", early,
             rep->grants, count, (double)first_early / 1e6, at_first);
  else
    snprintf(rep->msg, sizeof rep->msg,
             "%zu records: %zu count-downs, %zu awaits returned open, none before %d count-downs had begun, %zu "
             "awaits failed",
             n, downs, rep->grants, count, rep->fails);
  free(recs);
  rep->verdict = early ? HIST_VIOLATION : HIST_OK;
  return rep->verdict;
}

void hist_report_print(FILE *f, const hist_report_t *rep) {
  static const char *verdicts[] = {"OK", "VIOLATION", "NOT YET IMPLEMENTED", "MALFORMED HISTORY"};
  fprintf(f, "history: %s: %s\n", verdicts[rep->verdict & 3], rep->msg);
  for (size_t i = 0; i < rep->nlist; i++) {
    const hist_overlap_t *o = &rep->list[i];
    fprintf(f,
            "  overlap on '%.*s': A=worker %d [%+.3f, %s) B=worker %d [%+.3f, %s) ms, shared "
            "%.3f ms: %s\n",
            (int)o->a.name_len, o->a.name, o->a.worker, 0.0, o->a.exit_ns == INT64_MAX ? "open" : "exit", o->b.worker,
            (double)(o->b.enter_ns - o->a.enter_ns) / 1e6, o->b.exit_ns == INT64_MAX ? "open" : "exit",
            o->to_ns == INT64_MAX ? -1.0 : (double)(o->to_ns - o->from_ns) / 1e6, o->why);
  }
}

void hist_report_free(hist_report_t *rep) {
  free(rep->list);
  rep->list = NULL;
  rep->nlist = 0;
}
