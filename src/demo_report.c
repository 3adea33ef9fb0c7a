/* demo_report.c -- the end of `rlock demo`: decodes the workers' reports,
 * checks that the units sold equal the initial stock and that the final
 * stock is 0, and prints throughput and acquire-wait percentiles. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli.h"
#include "demo.h"

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n), in ms. */
static double pct_ms(const int64_t *v, size_t n, double p) {
  size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  return (double)v[rank - 1] / 1000.0;
}

/* The worker's report if it exited cleanly and sent a complete one, else NULL. */
static const demo_report_t *report_of(const worker_t *w) {
  if (!WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0 || w->len < sizeof(demo_report_t)) return NULL;
  const demo_report_t *r = (const demo_report_t *)w->buf;
  if (r->acquisitions < 0 || w->len != sizeof *r + (size_t)r->acquisitions * sizeof(int64_t)) return NULL;
  return r;
}

static int report(const char *url, const worker_t *w, int n, long stock, long long final, double secs, int sig);

int demo_report(const char *url, const worker_t *w, int n, long stock, long long final, double secs) {
  return report(url, w, n, stock, final, secs, 0);
}

int demo_report_interrupted(const char *url, const worker_t *w, int n, long stock, long long final, double secs,
                            int sig) {
  return report(url, w, n, stock, final, secs, sig);
}

static int report(const char *url, const worker_t *w, int n, long stock, long long final, double secs, int sig) {
  char shown[512];
  rlock_url_redact(url, shown, sizeof shown);
  printf("rlock demo: %d workers, stock %ld, lock %s on %s\n", n, stock, DEMO_LOCK, shown);
  int64_t sales = 0, acq = 0, handoffs = 0;
  int broken = 0;
  fputs("sales per worker:", stdout);
  for (int i = 0; i < n; i++) {
    const demo_report_t *r = report_of(&w[i]);
    if (!r) {
      printf(" (worker %d failed)", i + 1);
      broken++;
      continue;
    }
    printf(" %lld", (long long)r->sales);
    sales += r->sales, acq += r->acquisitions, handoffs += r->handoffs;
  }
  putchar('\n');
  int64_t *waits = malloc((size_t)(acq ? acq : 1) * sizeof *waits);
  size_t k = 0;
  for (int i = 0; i < n && waits; i++) {
    const demo_report_t *r = report_of(&w[i]);
    if (r) memcpy(waits + k, r + 1, (size_t)r->acquisitions * sizeof *waits), k += (size_t)r->acquisitions;
  }
  int pass = !broken && waits && sales == stock && final == 0;
  if (sig) { /* the sales so far must match the stock left */
    pass = !broken && waits && final >= 0 && sales == stock - final;
    printf("interrupted by signal %d: sold %lld of %ld so far, stock left %lld: %s", sig, (long long)sales, stock,
           final, pass ? "consistent" : "FAIL");
  } else {
    printf("sold %lld of %ld, final stock %lld: %s", (long long)sales, stock, final, pass ? "PASS" : "FAIL");
  }
  if (pass) fputs(" (no oversell, no lost sale)\n", stdout);
  else
    printf(" (%s)\n", broken                              ? "a worker failed"
                      : sales > stock - (sig ? final : 0) ? "oversold"
                      : sales < stock - (sig ? final : 0) ? "sales lost"
                                                          : "final stock is not 0");
  if (secs <= 0) secs = 1e-6;
  printf("%.2f s: %lld lock acquisitions (%.0f/s), %lld handoffs to another worker (%.0f/s)\n", secs, (long long)acq,
         (double)acq / secs, (long long)handoffs, (double)handoffs / secs);
  if (waits && k) {
    qsort(waits, k, sizeof *waits, cmp_i64);
    printf("wait to acquire: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", pct_ms(waits, k, 50), pct_ms(waits, k, 99),
           (double)waits[k - 1] / 1000.0);
  }
  free(waits);
  return pass ? 0 : 1;
}
