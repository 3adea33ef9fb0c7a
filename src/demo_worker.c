/* demo_worker.c -- one worker process of `rlock demo`: its own client; loops
 * lock -> read stock -> sell one if any is left -> unlock, and reports its
 * sales, handoffs and acquire waits to the parent over a pipe. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"

volatile sig_atomic_t demo_stop;

void demo_on_stop(int sig) { demo_stop = sig; }

int64_t demo_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n, len -= (size_t)n;
  }
  return 0;
}

/* Sends argv; 0 and *reply if the server did not answer an error. */
static int command(rlock_client_t *c, int argc, const char *const *argv, rlock_reply_t **reply) {
  int rc = rlock_client_command(c, argc, argv, NULL, reply);
  if (rc) return cli_fail(rc, argv[0]);
  if ((*reply)->type == RLOCK_REPLY_ERROR) {
    cli_err("%s: %s", argv[0], (*reply)->str);
    rlock_reply_free(*reply);
    return EX_SOFTWARE;
  }
  return 0;
}

/* One critical section: reads stock and last holder, sells one unit if any is
 * left. *stock is set to the stock seen. */
static int sell_one(rlock_client_t *c, const char *me, demo_report_t *r, long long *stock) {
  static const char *const mget[] = {"MGET", DEMO_STOCK, DEMO_LAST};
  rlock_reply_t *rep;
  int ex = command(c, 3, mget, &rep);
  if (ex) return ex;
  if (rep->type != RLOCK_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->type != RLOCK_REPLY_STRING) {
    cli_err("unexpected reply to MGET %s", DEMO_STOCK);
    rlock_reply_free(rep);
    return EX_SOFTWARE;
  }
  *stock = strtoll(rep->element[0]->str, NULL, 10);
  const rlock_reply_t *last = rep->element[1];
  if (last->type == RLOCK_REPLY_STRING && strcmp(last->str, me) != 0) r->handoffs++;
  rlock_reply_free(rep);
  char left[32];
  snprintf(left, sizeof left, "%lld", *stock - 1);
  const char *const mset[] = {"MSET", DEMO_LAST, me, DEMO_STOCK, left};
  ex = command(c, *stock > 0 ? 5 : 3, mset, &rep);
  if (ex) return ex;
  rlock_reply_free(rep);
  if (*stock > 0) r->sales++;
  return 0;
}

static int work(rlock_client_t *c, rlock_lock_t *lock, const char *me, demo_report_t *r, int64_t **waits, size_t *cap) {
  for (long long stock = 1; stock > 0 && !demo_stop;) {
    int64_t t0 = demo_now_us();
    int rc = rlock_lock_lock(lock, RLOCK_LEASE_WATCHDOG);
    int64_t t1 = demo_now_us();
    if (rc) return cli_fail(rc, "lock");
    if ((size_t)r->acquisitions == *cap) {
      *cap = *cap ? *cap * 2 : 1024;
      int64_t *grown = realloc(*waits, *cap * sizeof **waits);
      if (!grown) return EX_OSERR;
      *waits = grown;
    }
    (*waits)[r->acquisitions++] = t1 - t0;
    int ex = sell_one(c, me, r, &stock);
    rc = rlock_lock_unlock(lock);
    if (ex) return ex;
    if (rc) return cli_fail(rc, "unlock");
  }
  return 0;
}

int demo_worker(const cli_global_t *g, int id, int go_fd, int out_fd) {
  rlock_client_t *c;
  rlock_lock_t *lock = NULL;
  int ex = cli_connect(g, NULL, &c);
  if (ex) return ex;
  if ((ex = cli_lock(c, DEMO_LOCK, &lock)) == 0) {
    char me[16], go;
    snprintf(me, sizeof me, "%d", id);
    demo_report_t r = {0};
    int64_t *waits = NULL;
    size_t cap = 0;
    ssize_t n;
    if (write_all(out_fd, "R", 1) < 0) ex = EX_IOERR;
    while (!ex && (n = read(go_fd, &go, 1)) < 0 && errno == EINTR) {
    }
    if (!ex) ex = work(c, lock, me, &r, &waits, &cap);
    if (!ex &&
        (write_all(out_fd, &r, sizeof r) < 0 || write_all(out_fd, waits, (size_t)r.acquisitions * sizeof *waits) < 0))
      ex = EX_IOERR;
    free(waits);
    rlock_lock_free(lock);
  }
  rlock_client_free(c);
  return ex;
}
