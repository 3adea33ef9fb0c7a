/* test_history.c -- the history checker can fail: synthetic histories
 * (clean, overlapping, stale holder with and without the lost notification,
 * malformed records and record sequences, FIFO order) and
 * real worker processes running two deliberately broken locks (one that
 * skips locking, one built from a non-atomic GET then SET): the checker must
 * report their overlaps. */
#include <string.h>

#include "fault_harness.h"

static th_server_t *srv;

/* ------------------------------------------------------------ synthetic */

typedef struct hb {
  hist_rec_t r[64];
  size_t n;
} hb_t;

static void add(hb_t *h, int64_t t_ms, int kind, int worker, int64_t vu_ms) {
  hist_rec_t *r = &h->r[h->n++];
  memset(r, 0, sizeof *r);
  r->magic = HIST_MAGIC;
  r->kind = (uint16_t)kind;
  r->worker = (uint16_t)worker;
  r->seq = (uint32_t)h->n;
  r->t_ns = t_ms * 1000000;
  r->valid_until_ns = vu_ms * 1000000;
  r->name_len = 1;
  r->name[0] = 'L';
}

/* worker w attempts and is granted at t, with lease valid until vu */
static void grant(hb_t *h, int64_t t, int w, int64_t vu) {
  add(h, t, HK_ATTEMPT, w, 0);
  add(h, t, HK_GRANT, w, vu);
}

/* worker w holds [grant, exit] with lease valid until vu */
static void section(hb_t *h, int w, int64_t t_grant, int64_t exit, int64_t vu) {
  grant(h, t_grant, w, vu);
  add(h, t_grant, HK_ENTER, w, 0);
  add(h, exit, HK_EXIT, w, 0);
  add(h, exit + 1, HK_RELEASE, w, 0);
}

static int check(hb_t *h, hist_mode_t mode, hist_report_t *rep) {
  hist_check_opts_t o = {.mode = mode};
  int v = hist_check(h->r, h->n, &o, rep);
  hist_report_print(stdout, rep);
  return v;
}

TEST(synthetic_clean) {
  hb_t h = {.n = 0};
  section(&h, 0, 100, 200, 1100);
  section(&h, 1, 201, 300, 1201);
  section(&h, 0, 301, 400, 1301);
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_OK);
  CHECK_EQ(rep.sections, 3);
  CHECK_EQ(rep.overlaps, 0);
  hist_report_free(&rep);
}

TEST(synthetic_overlap_is_a_violation) {
  hb_t h = {.n = 0};
  section(&h, 0, 100, 200, 1100);
  section(&h, 1, 150, 300, 1150); /* B enters while A is inside and A's lease runs */
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.violations, 1);
  CHECK_EQ(rep.list[0].a.worker, 0);
  CHECK_EQ(rep.list[0].b.worker, 1);
  CHECK_EQ(rep.list[0].from_ns, 150 * 1000000LL);
  CHECK_EQ(rep.list[0].to_ns, 200 * 1000000LL);
  hist_report_free(&rep);
  /* the lease mode does not excuse it either: B came before A's lease ran out */
  CHECK_EQ(check(&h, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  CHECK(strstr(rep.list[0].why, "BEFORE") != NULL);
  hist_report_free(&rep);
}

TEST(synthetic_stale_holder) {
  /* A's lease runs to 1100; A is paused; B is granted at 1200; A resumes,
   * is told at 2100 (lost), leaves at 2200. */
  hb_t h = {.n = 0};
  grant(&h, 100, 0, 1100);
  add(&h, 100, HK_ENTER, 0, 0);
  section(&h, 1, 1200, 3000, 2200);
  add(&h, 2100, HK_LOST, 0, 0);
  add(&h, 2200, HK_EXIT, 0, 0);
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX_LEASE, &rep), HIST_OK);
  CHECK_EQ(rep.overlaps, 1);
  CHECK_EQ(rep.permitted, 1);
  CHECK_EQ(rep.list[0].from_ns, 1200 * 1000000LL);
  CHECK_EQ(rep.list[0].to_ns, 2200 * 1000000LL);
  hist_report_free(&rep);
  /* strict mutual exclusion still sees the overlap */
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_VIOLATION);
  hist_report_free(&rep);
  /* the same history without the lost notification: A was never told */
  hb_t h2 = {.n = 0};
  for (size_t i = 0; i < h.n; i++)
    if (h.r[i].kind != HK_LOST) h2.r[h2.n++] = h.r[i];
  CHECK_EQ(check(&h2, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  CHECK(strstr(rep.list[0].why, "never told") != NULL);
  hist_report_free(&rep);
  /* B granted 1 ms before A's lease ran out, A told later: a violation */
  hb_t h3 = {.n = 0};
  grant(&h3, 100, 0, 1100);
  add(&h3, 100, HK_ENTER, 0, 0);
  section(&h3, 1, 1099, 3000, 2099);
  add(&h3, 2100, HK_LOST, 0, 0);
  add(&h3, 2200, HK_EXIT, 0, 0);
  CHECK_EQ(check(&h3, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  CHECK(strstr(rep.list[0].why, "BEFORE") != NULL);
  hist_report_free(&rep);
}

TEST(synthetic_renewed_lease) {
  /* A's grant says 1100 but a later HK_VALID says renewed to 5000: B at 1200 is a violation */
  hb_t h = {.n = 0};
  grant(&h, 100, 0, 1100);
  add(&h, 100, HK_ENTER, 0, 0);
  add(&h, 800, HK_VALID, 0, 5000);
  section(&h, 1, 1200, 1300, 2200);
  add(&h, 1250, HK_LOST, 0, 0);
  add(&h, 1400, HK_EXIT, 0, 0);
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  hist_report_free(&rep);
}

TEST(synthetic_killed_holder) {
  hb_t h = {.n = 0};
  grant(&h, 100, 0, 1100);
  add(&h, 100, HK_ENTER, 0, 0);
  add(&h, 150, HK_DIED, 0, 0);
  section(&h, 1, 1100, 1200, 2100);
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_OK);
  CHECK_EQ(rep.died, 1);
  hist_report_free(&rep);
  /* if the death were recorded after B entered, that would be an overlap */
  CHECK_EQ(h.r[3].kind, HK_DIED);
  h.r[3].t_ns = 1150 * 1000000LL;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_VIOLATION);
  hist_report_free(&rep);
}

/* A reader's section: HK_ENTER with status 1. */
static void shared_section(hb_t *h, int w, int64_t t_grant, int64_t exit, int64_t vu) {
  section(h, w, t_grant, exit, vu);
  CHECK_EQ(h->r[h->n - 3].kind, HK_ENTER);
  h->r[h->n - 3].status = 1;
}

/* HIST_RW: readers overlap each other freely; a writer overlaps nobody. */
TEST(synthetic_rw) {
  hb_t h = {.n = 0};
  shared_section(&h, 0, 100, 300, 5000);
  shared_section(&h, 1, 150, 350, 5000);
  section(&h, 2, 400, 500, 5000); /* the writer after both */
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_RW, &rep), HIST_OK);
  CHECK_EQ(rep.overlaps, 0);
  hist_report_free(&rep);
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_VIOLATION); /* as a mutex: the readers overlap */
  CHECK_EQ(rep.overlaps, 1);
  hist_report_free(&rep);
  section(&h, 3, 200, 250, 5000); /* a writer among the readers */
  CHECK_EQ(check(&h, HIST_RW, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.violations, 2);
  hist_report_free(&rep);
}

TEST(synthetic_malformed) {
  hb_t h = {.n = 0};
  add(&h, 100, HK_ENTER, 0, 0); /* no grant */
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_BADHIST);
  hist_report_free(&rep);
  h.n = 0;
  section(&h, 0, 100, 200, 1100);
  h.r[1].magic = 0;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_BADHIST);
  hist_report_free(&rep);
  h.r[1].magic = HIST_MAGIC;
  CHECK_EQ(check(&h, HIST_PERMITS, &rep), HIST_BADHIST); /* a permit bound of 0 */
}

/* worker w attempts at t (a waiter: granted later, or not at all) */
static void attempt(hb_t *h, int64_t t, int w) { add(h, t, HK_ATTEMPT, w, 0); }
/* worker w, waiting since its attempt, is granted at g and holds until exit */
static void granted(hb_t *h, int w, int64_t g, int64_t exit) {
  add(h, g, HK_GRANT, w, g + 10000);
  add(h, g, HK_ENTER, w, 0);
  add(h, exit, HK_EXIT, w, 0);
  add(h, exit + 1, HK_RELEASE, w, 0);
}

static int check_fifo(hb_t *h, const int64_t *excuse, size_t nexcuse, hist_report_t *rep) {
  hist_check_opts_t o = {.mode = HIST_FIFO, .fifo_slack_ns = 100 * 1000000LL, .excuse = excuse, .nexcuse = nexcuse};
  int v = hist_check(h->r, h->n, &o, rep);
  hist_report_print(stdout, rep);
  return v;
}

/* HIST_FIFO (slack 100 ms): grants in the order of attempts; an attempt
 * within the slack of another may go either way; a waiter that gave up or
 * died leaves the queue; an excused window excuses; an overlap still counts. */
TEST(synthetic_fifo) {
  hb_t h = {.n = 0};
  hist_report_t rep;
  section(&h, 0, 0, 1000, 20000); /* 0 holds; 1, 2, 3 queue in that order */
  attempt(&h, 100, 1), attempt(&h, 300, 2), attempt(&h, 500, 3);
  granted(&h, 1, 1002, 1100);
  granted(&h, 2, 1102, 1200);
  granted(&h, 3, 1202, 1300);
  CHECK_EQ(check_fifo(&h, NULL, 0, &rep), HIST_OK);
  CHECK_EQ(rep.overtakes, 0);
  hist_report_free(&rep);

  h.n = 0; /* 3 granted before 2, which queued 200 ms earlier and still waits */
  section(&h, 0, 0, 1000, 20000);
  attempt(&h, 100, 1), attempt(&h, 300, 2), attempt(&h, 500, 3);
  granted(&h, 1, 1002, 1100);
  granted(&h, 3, 1102, 1200);
  granted(&h, 2, 1202, 1300);
  CHECK_EQ(check_fifo(&h, NULL, 0, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.overtakes, 1);
  CHECK_EQ(rep.violations, 0); /* no overlap: the order alone */
  CHECK(strstr(rep.first_overtake, "worker 3") != NULL && strstr(rep.first_overtake, "worker 2") != NULL);
  hist_report_free(&rep);
  int64_t window[2] = {1050 * 1000000LL, 1150 * 1000000LL}; /* 3's grant inside it: excused */
  CHECK_EQ(check_fifo(&h, window, 1, &rep), HIST_OK);
  CHECK_EQ(rep.overtakes_excused, 1);
  hist_report_free(&rep);

  h.n = 0; /* 2 and 3 attempt within the slack: either order */
  section(&h, 0, 0, 1000, 20000);
  attempt(&h, 300, 2), attempt(&h, 350, 3);
  granted(&h, 3, 1002, 1100);
  granted(&h, 2, 1102, 1200);
  CHECK_EQ(check_fifo(&h, NULL, 0, &rep), HIST_OK);
  hist_report_free(&rep);

  h.n = 0; /* 2 gives up at 900, 1 dies at 950: 3 overtakes neither */
  section(&h, 0, 0, 1000, 20000);
  attempt(&h, 100, 1), attempt(&h, 300, 2), attempt(&h, 500, 3);
  add(&h, 900, HK_FAIL, 2, 0);
  h.r[h.n - 1].status = -1;
  add(&h, 950, HK_DIED, 1, 0);
  granted(&h, 3, 1002, 1100);
  CHECK_EQ(check_fifo(&h, NULL, 0, &rep), HIST_OK);
  hist_report_free(&rep);

  /* 2 fails after 3 is granted: with every answer lost (its tries may
   * never have reached the queue) the overtake is excused; failed any other
   * way (a refusal: it was queued) it is a violation */
  int fails[] = {RLOCK_ETIMEDOUT, RLOCK_ECONNLOST, RLOCK_ECONNECT, RLOCK_EINVAL};
  for (int i = 0; i < 4; i++) {
    h.n = 0;
    section(&h, 0, 0, 1000, 20000);
    attempt(&h, 100, 1), attempt(&h, 300, 2), attempt(&h, 500, 3);
    granted(&h, 1, 1002, 1100);
    granted(&h, 3, 1102, 1200);
    add(&h, 1500, HK_FAIL, 2, 0);
    h.r[h.n - 1].status = fails[i];
    int v = check_fifo(&h, NULL, 0, &rep);
    CHECK_EQ(v, i < 3 ? HIST_OK : HIST_VIOLATION);
    CHECK_EQ(rep.overtakes, i < 3 ? 0 : 1);
    CHECK_EQ(rep.overtakes_excused, i < 3 ? 1 : 0);
    hist_report_free(&rep);
  }

  /* 2 is granted after 3 although it asked first: excused only when its
   * client had a request time out or a connection replaced meanwhile (its
   * grant's status 1: its try may have reached the queue only when re-sent) */
  for (int lost = 0; lost < 2; lost++) {
    h.n = 0;
    section(&h, 0, 0, 1000, 20000);
    attempt(&h, 300, 2), attempt(&h, 500, 3);
    granted(&h, 3, 1002, 1100);
    granted(&h, 2, 1102, 1200);
    h.r[h.n - 4].status = lost; /* 2's HK_GRANT */
    int v = check_fifo(&h, NULL, 0, &rep);
    CHECK_EQ(v, lost ? HIST_OK : HIST_VIOLATION);
    CHECK_EQ(rep.overtakes, lost ? 0 : 1);
    CHECK_EQ(rep.overtakes_excused, lost ? 1 : 0);
    hist_report_free(&rep);
  }

  h.n = 0; /* an overlap is still a violation in HIST_FIFO */
  section(&h, 0, 100, 300, 5000);
  section(&h, 1, 200, 400, 5000);
  CHECK_EQ(check_fifo(&h, NULL, 0, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.violations, 1);
  CHECK_EQ(rep.overtakes, 0);
  hist_report_free(&rep);
}

static int check_permits(hb_t *h, int permits, hist_report_t *rep) {
  hist_check_opts_t o = {.mode = HIST_PERMITS, .permits = permits};
  int v = hist_check(h->r, h->n, &o, rep);
  hist_report_print(stdout, rep);
  return v;
}

/* HIST_PERMITS: at most N holders at once; a stale, told holder's permit may
 * be counted again once its lease ran out, never before. */
TEST(synthetic_permits) {
  hb_t h = {.n = 0};
  section(&h, 0, 100, 300, 5000);
  section(&h, 1, 150, 350, 5000);
  section(&h, 2, 300, 500, 5000); /* enters as worker 0 leaves: 2 inside at most */
  hist_report_t rep;
  CHECK_EQ(check_permits(&h, 2, &rep), HIST_OK);
  CHECK_EQ(rep.overlaps, 0);
  hist_report_free(&rep);
  CHECK_EQ(check_permits(&h, 1, &rep), HIST_VIOLATION); /* bound 1: two excess entries */
  CHECK_EQ(rep.violations, 2);
  hist_report_free(&rep);
  section(&h, 3, 200, 250, 5000); /* a third holder beside 0 and 1 */
  CHECK_EQ(check_permits(&h, 2, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.violations, 1);
  CHECK_EQ(rep.list[0].b.worker, 3);
  hist_report_free(&rep);
  CHECK_EQ(check_permits(&h, 3, &rep), HIST_OK);
  hist_report_free(&rep);
  /* worker 4 (lease to 1000) told lost at 1200; worker 5 granted at 1100
   * beside worker 6 with a bound of 2: permitted; granted at 900: not */
  hb_t g = {.n = 0};
  grant(&g, 800, 4, 1000);
  add(&g, 800, HK_ENTER, 4, 0);
  section(&g, 6, 850, 1500, 9000);
  section(&g, 5, 1100, 1300, 9000);
  add(&g, 1200, HK_LOST, 4, 0);
  add(&g, 1400, HK_EXIT, 4, 0);
  add(&g, 1401, HK_RELEASE, 4, 0);
  CHECK_EQ(check_permits(&g, 2, &rep), HIST_OK);
  CHECK_EQ(rep.permitted, 1);
  hist_report_free(&rep);
  g.r[g.n - 8].t_ns = 900 * 1000000LL; /* worker 5's attempt, grant and entry at 900 */
  g.r[g.n - 7].t_ns = 900 * 1000000LL;
  g.r[g.n - 6].t_ns = 900 * 1000000LL;
  CHECK_EQ(g.r[g.n - 6].kind, HK_ENTER);
  CHECK_EQ(check_permits(&g, 2, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.violations, 1);
  hist_report_free(&rep);
}

/* A record of a synthetic sequence: time (ms), kind, worker, status, and a
 * sequence number (0: its index + 1). */
typedef struct srec {
  int64_t t;
  int kind, worker, status;
  uint32_t seq;
} srec_t;

typedef struct seq_case {
  const char *what;
  srec_t recs[8];
  const char *want; /* NULL: a legal history; else a piece of the malformed message */
} seq_case_t;

/* One record of worker 0: REC(time, kind), RECS(time, kind, status, seq). */
#define RECS(t, kind, status, seq) \
  { t, kind, 0, status, seq }
#define REC(t, kind) RECS(t, kind, 0, 0)
#define A(t) REC(t, HK_ATTEMPT)
#define G(t) REC(t, HK_GRANT)
#define E(t) REC(t, HK_ENTER)
#define X(t) REC(t, HK_EXIT)
#define R(t) REC(t, HK_RELEASE)
static const seq_case_t seq_cases[] = {
    {"grant without an attempt", {G(100), E(100), X(200), R(201)}, "a grant without an attempt"},
    {"enter without a grant", {A(100), E(100)}, "entered without a grant"},
    {"enter twice", {A(100), G(100), E(100), E(150)}, "entered twice"},
    {"exit without an enter", {A(100), G(100), X(200)}, "left without entering"},
    {"release inside the section", {A(100), G(100), E(100), R(200)}, "released inside"},
    {"release without an exit", {A(100), G(100), R(200)}, "released without"},
    {"second attempt before the first ended", {A(100), A(150)}, "an attempt while"},
    {"a new grant needs a new attempt", {A(100), G(100), E(100), X(200), R(201), G(300)}, "a grant without an attempt"},
    {"fail without an attempt", {RECS(100, HK_FAIL, RLOCK_EBUSY, 0)}, "failed acquire without"},
    {"fail with status 0", {A(100), RECS(200, HK_FAIL, 0, 0)}, "status 0"},
    {"time goes back for one writer", {A(100), G(90), E(110)}, "time goes back"},
    {"a sequence number twice", {RECS(100, HK_ATTEMPT, 0, 7), RECS(100, HK_GRANT, 0, 7)}, "sequence number twice"},
    {"a record after the worker died", {A(100), G(100), E(100), REC(150, HK_DIED), X(200)}, "after its death"},
    {"a worker dies twice", {A(100), REC(150, HK_DIED), REC(160, HK_DIED)}, "after its death"},
    /* legal: a failed attempt, then a full hold; valid at any point; the I/O
     * thread's lost record stamped before the main thread's previous one */
    {"legal: fail, then a hold with valid and lost",
     {RECS(50, HK_VALID, RLOCK_ENOTHELD, 0), A(100), RECS(110, HK_FAIL, RLOCK_EBUSY, 0), A(120), G(130), E(200),
      REC(150, HK_LOST), X(300)},
     NULL},
};
#undef A
#undef G
#undef E
#undef X
#undef R
#undef REC
#undef RECS

TEST(synthetic_malformed_sequences) {
  for (size_t i = 0; i < sizeof seq_cases / sizeof seq_cases[0]; i++) {
    const seq_case_t *sc = &seq_cases[i];
    hb_t h = {.n = 0};
    for (size_t k = 0; k < 8 && sc->recs[k].kind; k++) {
      add(&h, sc->recs[k].t, sc->recs[k].kind, sc->recs[k].worker, 0);
      h.r[h.n - 1].status = sc->recs[k].status;
      if (sc->recs[k].seq) h.r[h.n - 1].seq = sc->recs[k].seq;
    }
    printf("case: %s\n", sc->what);
    hist_report_t rep;
    int v = check(&h, HIST_MUTEX_LEASE, &rep);
    if (!sc->want) {
      CHECK_MSG(v == HIST_OK, "%s: verdict %d (%s)", sc->what, v, rep.msg);
    } else {
      CHECK_MSG(v == HIST_BADHIST, "%s: verdict %d, want malformed (%s)", sc->what, v, rep.msg);
      CHECK_MSG(strstr(rep.msg, sc->want) != NULL, "%s: message \"%s\" lacks \"%s\"", sc->what, rep.msg, sc->want);
    }
    hist_report_free(&rep);
  }
}

/* ------------------------------------------------------------ broken locks, real processes */

/* "skip": no lock at all. */
static int skip_open(fh_worker_ctx_t *w) { return 0; }
static int skip_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  *vu = rlock_now_ms() + 3600 * 1000;
  *token = 0;
  return 0;
}
static int skip_valid(fh_worker_ctx_t *w, int64_t *out) {
  *out = rlock_now_ms() + 3600 * 1000;
  return 0;
}
static int skip_release(fh_worker_ctx_t *w) { return 0; }
static void skip_close(fh_worker_ctx_t *w) {}
static const fh_kind_t kind_skip = {
    "broken-skip", HIST_MUTEX_LEASE, skip_open, skip_acquire, skip_valid, skip_release, skip_close, NULL, 0};

/* "getset": GET the key; if empty, (think 1 ms, then) SET it. Not atomic. */
static int gs_cmd(fh_worker_ctx_t *w, const char *verb, rlock_reply_type_t *type) {
  char key[128];
  snprintf(key, sizeof key, "broken:%s", w->spec->lock_name);
  const char *argv[3] = {verb, key, "x"};
  rlock_reply_t *r = NULL;
  int rc = rlock_client_command(w->client, strcmp(verb, "SET") == 0 ? 3 : 2, argv, NULL, &r);
  if (rc == 0 && type) *type = r->type;
  rlock_reply_free(r);
  return rc;
}
static int gs_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu, uint64_t *token) {
  for (;;) {
    rlock_reply_type_t t = RLOCK_REPLY_ERROR;
    int rc = gs_cmd(w, "GET", &t);
    if (rc) return rc;
    if (t == RLOCK_REPLY_NIL) {
      th_sleep_ms(1); /* the window that makes it broken */
      if ((rc = gs_cmd(w, "SET", NULL))) return rc;
      return skip_acquire(w, wait_ms, lease_ms, vu, token);
    }
    th_sleep_ms(1);
  }
}
static int gs_release(fh_worker_ctx_t *w) { return gs_cmd(w, "DEL", NULL); }
static const fh_kind_t kind_getset = {"broken-getset", HIST_MUTEX_LEASE, skip_open, gs_acquire, skip_valid,
                                      gs_release,      skip_close,       NULL,      0};

TEST(broken_skip_lock_is_caught) {
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = srv->url,
                        .kind = &kind_skip,
                        .lock_name = "skip",
                        .lease_ms = 1000,
                        .wait_ms = RLOCK_WAIT_FOREVER,
                        .hold_ms = -1,
                        .iterations = 1};
  int a = fh_spawn(&p, &s), b = fh_spawn(&p, &s);
  fh_await(&p, a, HK_ENTER, 10000);
  fh_await(&p, b, HK_ENTER, 10000); /* both inside at once: nothing stopped b */
  fh_send(&p, a, FH_CMD_EXIT);
  fh_send(&p, b, FH_CMD_EXIT);
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  CHECK_EQ(fh_check(&p, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  CHECK_EQ(rep.overlaps, 1);
  CHECK_EQ(rep.violations, 1);
  hist_report_free(&rep);
}

TEST(broken_getset_lock_is_caught) {
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = srv->url,
                        .kind = &kind_getset,
                        .lock_name = "getset",
                        .lease_ms = 1000,
                        .wait_ms = RLOCK_WAIT_FOREVER,
                        .hold_ms = 2,
                        .iterations = 40};
  for (int i = 0; i < 4; i++) fh_spawn(&p, &s);
  for (int i = 0; i < 4; i++) fh_await(&p, i, HK_MAX, 60000); /* loops done */
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  CHECK_EQ(fh_check(&p, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  CHECK(rep.violations >= 1);
  CHECK_EQ(rep.sections, 160);
  hist_report_free(&rep);
}

/* The same loop on the real reentrant lock: clean (the control experiment). */
TEST(real_lock_same_loop_is_clean) {
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = srv->url,
                        .kind = &fh_kind_reentrant,
                        .lock_name = "real",
                        .lease_ms = RLOCK_LEASE_WATCHDOG,
                        .watchdog_ms = 3000,
                        .wait_ms = RLOCK_WAIT_FOREVER,
                        .hold_ms = 2,
                        .iterations = 40};
  for (int i = 0; i < 4; i++) fh_spawn(&p, &s);
  for (int i = 0; i < 4; i++) fh_await(&p, i, HK_MAX, 60000); /* loops done */
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  CHECK_EQ(fh_check(&p, HIST_MUTEX, &rep), HIST_OK);
  CHECK_EQ(rep.sections, 160);
  hist_report_free(&rep);
}

/* fh_violations_split (the Sentinel history tests): only an overlap of the
 * hold kept across the fault may be excused as the failover hazard; two
 * other workers overlapping inside the window are a plain violation. */
TEST(synthetic_failover_window_split) {
  hb_t h = {.n = 0};
  grant(&h, 100, 0, 20100); /* the holder, inside across the fault (at 500) */
  add(&h, 100, HK_ENTER, 0, 0);
  section(&h, 1, 1000, 1100, 21000); /* a waiter enters on the promoted node: the hazard */
  section(&h, 2, 2000, 2200, 22000);
  section(&h, 3, 2100, 2300, 22100); /* 3 enters while 2 is inside: not the hazard */
  add(&h, 3000, HK_LOST, 0, 0);
  add(&h, 3100, HK_EXIT, 0, 0);
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX_LEASE, &rep), HIST_VIOLATION);
  size_t inside, outside;
  fh_violations_split(&rep, 0, 500 * 1000000LL, 30000 * 1000000LL, &inside, &outside);
  CHECK_EQ(inside, 3);  /* the holder overlapped by workers 1, 2 and 3 */
  CHECK_EQ(outside, 1); /* workers 2 and 3: excused by nothing */
  fh_violations_split(&rep, 0, 5000 * 1000000LL, 30000 * 1000000LL, &inside, &outside);
  CHECK_EQ(inside, 0); /* granted before the window */
  CHECK_EQ(outside, 4);
  hist_report_free(&rep);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  RUN(synthetic_clean);
  RUN(synthetic_overlap_is_a_violation);
  RUN(synthetic_stale_holder);
  RUN(synthetic_renewed_lease);
  RUN(synthetic_killed_holder);
  RUN(synthetic_rw);
  RUN(synthetic_malformed);
  RUN(synthetic_permits);
  RUN(synthetic_fifo);
  RUN(synthetic_malformed_sequences);
  RUN(synthetic_failover_window_split);
  if (argc > 1 && strcmp(argv[1], "synthetic") == 0) return th_done(); /* no server */
  srv = th_server_start(NULL);
  RUN(broken_skip_lock_is_caught);
  RUN(broken_getset_lock_is_caught);
  RUN(real_lock_same_loop_is_clean);
  th_server_stop(srv);
  return th_done();
}
