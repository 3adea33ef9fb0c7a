/* test_rwkill.c -- the read-write lock under process faults, with the
 * history checker in HIST_RW (readers together, a writer alone):
 *   kill9_reader   three reader processes inside at once (watchdog 1000 ms),
 *                  a writer process waiting; one reader is killed -9 inside,
 *                  the other two leave: the writer enters once the dead
 *                  reader's own lease ran out (its timeout key expires and the
 *                  hash TTL was recomputed from it), never beside a reader
 *   kill9_writer   a writer killed -9 inside; three readers waiting enter
 *                  together once its lease ran out
 * Each history is checked twice: HIST_RW clean, and as a mutex (HIST_MUTEX)
 * it shows the readers' overlaps, so the checker did see them. */
#include <stdio.h>
#include <string.h>

#include "fault_harness.h"

#define WATCHDOG_MS 1000

static fh_worker_spec_t spec(const char *url, const fh_kind_t *kind, const char *name) {
  fh_worker_spec_t s = {.url = url,
                        .kind = kind,
                        .lock_name = name,
                        .lease_ms = RLOCK_LEASE_WATCHDOG,
                        .watchdog_ms = WATCHDOG_MS,
                        .wait_ms = RLOCK_WAIT_FOREVER,
                        .hold_ms = -1,
                        .iterations = 1};
  return s;
}

static void kill9_reader(const fh_deploy_t *dep) {
  void *d = dep->start(NULL);
  const char *name = "rwkill:reader";
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t rs = spec(dep->url(d), &fh_kind_read, name);
  fh_worker_spec_t ws = spec(dep->url(d), &fh_kind_write, name);
  int r[3];
  for (int i = 0; i < 3; i++) r[i] = fh_spawn(&p, &rs);
  for (int i = 0; i < 3; i++) fh_await(&p, r[i], HK_ENTER, 10000); /* all three inside at once */
  int w = fh_spawn(&p, &ws);
  fh_await(&p, w, HK_ATTEMPT, 10000);
  fh_kill9(&p, r[0]);
  int64_t t_kill = hist_now_ns();
  for (int i = 1; i < 3; i++) {
    fh_send(&p, r[i], FH_CMD_EXIT);
    CHECK_OK(fh_await(&p, r[i], HK_RELEASE, 5000).rc);
  }
  fh_event_t e = fh_await_since(&p, w, HK_ENTER, t_kill, WATCHDOG_MS + 5000);
  int64_t lat = (e.t_ns - t_kill) / 1000000;
  printf("reader killed; the writer entered %lld ms later\n", (long long)lat);
  CHECK_MSG(lat <= 2 * WATCHDOG_MS, "the writer waited %lld ms (watchdog %d)", (long long)lat, WATCHDOG_MS);
  fh_send(&p, w, FH_CMD_EXIT);
  CHECK_OK(fh_await(&p, w, HK_RELEASE, 5000).rc);
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  CHECK_EQ(fh_check(&p, HIST_RW, &rep), HIST_OK);
  CHECK_EQ(rep.died, 1);
  CHECK_EQ(rep.sections, 4);
  size_t viol = rep.violations;
  hist_report_free(&rep);
  CHECK_EQ(fh_check(&p, HIST_MUTEX, &rep), HIST_VIOLATION); /* the readers overlapped */
  CHECK_EQ(rep.overlaps, 3);
  hist_report_free(&rep);
  char outcome[200];
  snprintf(outcome, sizeof outcome,
           "3 readers inside at once; one killed -9: the writer entered %lld ms after the kill "
           "(watchdog %d); HIST_RW clean",
           (long long)lat, WATCHDOG_MS);
  fh_result("kill-9-reader", dep->name, "read-write", outcome, viol);
  dep->stop(d);
}

static void kill9_writer(const fh_deploy_t *dep) {
  void *d = dep->start(NULL);
  const char *name = "rwkill:writer";
  fh_pool_t p;
  fh_pool_init(&p);
  fh_worker_spec_t rs = spec(dep->url(d), &fh_kind_read, name);
  fh_worker_spec_t ws = spec(dep->url(d), &fh_kind_write, name);
  int w = fh_spawn(&p, &ws);
  fh_await(&p, w, HK_ENTER, 10000);
  int r[3];
  for (int i = 0; i < 3; i++) {
    r[i] = fh_spawn(&p, &rs);
    fh_await(&p, r[i], HK_ATTEMPT, 10000);
  }
  fh_kill9(&p, w);
  int64_t t_kill = hist_now_ns();
  int64_t worst = 0;
  for (int i = 0; i < 3; i++) {
    fh_event_t e = fh_await_since(&p, r[i], HK_ENTER, t_kill, WATCHDOG_MS + 5000);
    int64_t lat = (e.t_ns - t_kill) / 1000000;
    if (lat > worst) worst = lat;
  }
  printf("writer killed; the 3 readers entered within %lld ms\n", (long long)worst);
  CHECK_MSG(worst <= 2 * WATCHDOG_MS, "the readers waited %lld ms (watchdog %d)", (long long)worst, WATCHDOG_MS);
  for (int i = 0; i < 3; i++) {
    fh_send(&p, r[i], FH_CMD_EXIT);
    CHECK_OK(fh_await(&p, r[i], HK_RELEASE, 5000).rc);
  }
  fh_pool_finish(&p, 10000);
  hist_report_t rep;
  CHECK_EQ(fh_check(&p, HIST_RW, &rep), HIST_OK);
  CHECK_EQ(rep.died, 1);
  size_t viol = rep.violations;
  hist_report_free(&rep);
  char outcome[200];
  snprintf(outcome, sizeof outcome,
           "writer killed -9 inside: the 3 waiting readers entered within %lld ms (watchdog %d), "
           "together; HIST_RW clean",
           (long long)worst, WATCHDOG_MS);
  fh_result("kill-9-writer", dep->name, "read-write", outcome, viol);
  dep->stop(d);
}

TEST(kill9_reader) {
  for (const fh_deploy_t *const *d = fh_deployments; *d; d++) kill9_reader(*d);
}

TEST(kill9_writer) {
  for (const fh_deploy_t *const *d = fh_deployments; *d; d++) kill9_writer(*d);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 200);
  RUN(kill9_reader);
  RUN(kill9_writer);
  return th_done();
}
