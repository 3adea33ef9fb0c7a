/* demo.h -- what the `rlock demo` parent (cmd_demo.c) and its worker
 * processes (demo_worker.c) share: key names and the report a worker sends
 * over its pipe when it is done. */
#ifndef RLOCK_DEMO_H
#define RLOCK_DEMO_H

#include <stdint.h>

#define DEMO_LOCK "rlock:demo:lock"
/* The data keys share one hash tag, so the workers' MGET / MSET of both
 * run on one Cluster slot's master (on one server the tag changes nothing). */
#define DEMO_STOCK "{rlock:demo}:stock"
#define DEMO_LAST "{rlock:demo}:last" /* id of the worker that held the lock last */
#define DEMO_MAX_WORKERS 256

/* Sent once at the end, followed by `acquisitions` int64_t waits in µs. */
typedef struct demo_report {
  int64_t sales;        /* units this worker sold */
  int64_t acquisitions; /* times it took the lock */
  int64_t handoffs;     /* of those, times the previous holder was another worker */
} demo_report_t;

/* The parent's view of one worker process. */
typedef struct worker {
  int pid;
  int fd;    /* read end of the worker's pipe */
  char *buf; /* everything read from the worker after its ready byte */
  size_t len, cap;
  int status; /* its wait status */
} worker_t;

/* Checks and prints the outcome (final: stock left, -1 unknown); returns 0
 * for PASS, 1 for FAIL. */
int demo_report(const char *url, const worker_t *w, int n, long stock, long long final, double secs);
/* After an interruption by signal sig: the summary so far; 0 if what was
 * sold matches the stock left (no oversell, no lost sale), else 1. */
int demo_report_interrupted(const char *url, const worker_t *w, int n, long stock, long long final, double secs,
                            int sig);

/* SIGINT / SIGTERM: set to the signal; the workers stop after their current
 * sale and send their report, the parent prints the summary so far. */
#include <signal.h>
extern volatile sig_atomic_t demo_stop;
void demo_on_stop(int sig);

/* A worker process: connects as g says, writes one byte to out_fd when ready,
 * starts when go_fd reaches end of file, sells until the stock is gone, then
 * writes its report to out_fd. Returns the process exit code. */
struct cli_global;
int demo_worker(const struct cli_global *g, int id, int go_fd, int out_fd);

/* CLOCK_MONOTONIC in microseconds. */
int64_t demo_now_us(void);

#endif /* RLOCK_DEMO_H */
