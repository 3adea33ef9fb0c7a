/* test_history.c -- the history checker can fail: synthetic histories
 * (clean, overlapping, stale holder with and without the lost notification,
 * malformed, not-yet-implemented modes) and real worker processes running
 * two deliberately broken locks (one that skips locking, one built from a
 * non-atomic GET then SET): the checker must report their overlaps. */
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

/* worker w holds [grant, exit] with lease valid until vu */
static void section(hb_t *h, int w, int64_t grant, int64_t exit, int64_t vu) {
  add(h, grant, HK_GRANT, w, vu);
  add(h, grant, HK_ENTER, w, 0);
  add(h, exit, HK_EXIT, w, 0);
  add(h, exit + 1, HK_RELEASE, w, 0);
}

static int check(hb_t *h, hist_mode_t mode, hist_report_t *rep) {
  hist_check_opts_t o = {mode, 0};
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
  add(&h, 100, HK_GRANT, 0, 1100);
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
}

TEST(synthetic_renewed_lease) {
  /* A's grant says 1100 but a later HK_VALID says renewed to 5000: B at 1200 is a violation */
  hb_t h = {.n = 0};
  add(&h, 100, HK_GRANT, 0, 1100);
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
  add(&h, 100, HK_GRANT, 0, 1100);
  add(&h, 100, HK_ENTER, 0, 0);
  add(&h, 150, HK_DIED, 0, 0);
  section(&h, 1, 1100, 1200, 2100);
  hist_report_t rep;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_OK);
  CHECK_EQ(rep.died, 1);
  hist_report_free(&rep);
  /* if the death were recorded after B entered, that would be an overlap */
  h.r[2].t_ns = 1150 * 1000000LL;
  CHECK_EQ(check(&h, HIST_MUTEX, &rep), HIST_VIOLATION);
  hist_report_free(&rep);
}

TEST(synthetic_malformed_and_notyet) {
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
  CHECK_EQ(check(&h, HIST_FIFO, &rep), HIST_NOTYET);
  CHECK(strstr(rep.msg, "not implemented yet") != NULL);
  CHECK_EQ(check(&h, HIST_RW, &rep), HIST_NOTYET);
  CHECK_EQ(check(&h, HIST_PERMITS, &rep), HIST_NOTYET);
}

/* ------------------------------------------------------------ broken locks, real processes */

/* "skip": no lock at all. */
static int skip_open(fh_worker_ctx_t *w) { return 0; }
static int skip_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu,
                        uint64_t *token) {
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
static const fh_kind_t kind_skip = {"broken-skip", HIST_MUTEX_LEASE, skip_open, skip_acquire,
                                    skip_valid, skip_release, skip_close};

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
static int gs_acquire(fh_worker_ctx_t *w, int64_t wait_ms, int64_t lease_ms, int64_t *vu,
                      uint64_t *token) {
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
static const fh_kind_t kind_getset = {"broken-getset", HIST_MUTEX_LEASE, skip_open, gs_acquire,
                                      skip_valid, gs_release, skip_close};

TEST(broken_skip_lock_is_caught) {
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t s = {.url = srv->url, .kind = &kind_skip, .lock_name = "skip",
                        .lease_ms = 1000, .wait_ms = RLOCK_WAIT_FOREVER, .hold_ms = -1,
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
  fh_worker_spec_t s = {.url = srv->url, .kind = &kind_getset, .lock_name = "getset",
                        .lease_ms = 1000, .wait_ms = RLOCK_WAIT_FOREVER, .hold_ms = 2,
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
  fh_worker_spec_t s = {.url = srv->url, .kind = &fh_kind_reentrant, .lock_name = "real",
                        .lease_ms = RLOCK_LEASE_WATCHDOG, .watchdog_ms = 3000,
                        .wait_ms = RLOCK_WAIT_FOREVER, .hold_ms = 2, .iterations = 40};
  for (int i = 0; i < 4; i++) fh_spawn(&p, &s);
  for (int i = 0; i < 4; i++) fh_await(&p, i, HK_MAX, 60000); /* loops done */
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  CHECK_EQ(fh_check(&p, HIST_MUTEX, &rep), HIST_OK);
  CHECK_EQ(rep.sections, 160);
  hist_report_free(&rep);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 240);
  RUN(synthetic_clean);
  RUN(synthetic_overlap_is_a_violation);
  RUN(synthetic_stale_holder);
  RUN(synthetic_renewed_lease);
  RUN(synthetic_killed_holder);
  RUN(synthetic_malformed_and_notyet);
  srv = th_server_start(NULL);
  RUN(broken_skip_lock_is_caught);
  RUN(broken_getset_lock_is_caught);
  RUN(real_lock_same_loop_is_clean);
  th_server_stop(srv);
  return th_done();
}
