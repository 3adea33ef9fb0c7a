/* ping_rtt.c -- the loopback round-trip limit for the benchmark harness
 * (issue 3): a plain hiredis PING loop on one blocking connection, one command
 * in flight at a time. Usage: ping_rtt HOST PORT COUNT WARMUP SAMPLES
 * Prints {"pings":N,"elapsed_s":S} and writes one round trip (us) per line. */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int ping(redisContext *c) {
  redisReply *r = redisCommand(c, "PING");
  int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
  if (r) freeReplyObject(r);
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: ping_rtt HOST PORT COUNT WARMUP SAMPLES\n");
    return 64;
  }
  long n = atol(argv[3]), warm = atol(argv[4]);
  redisContext *c = redisConnect(argv[1], atoi(argv[2]));
  if (!c || c->err) {
    fprintf(stderr, "ping_rtt: connect: %s\n", c ? c->errstr : "out of memory");
    return 2;
  }
  for (long i = 0; i < warm; i++)
    if (!ping(c)) return 2;
  long long *s = malloc((size_t)n * sizeof *s);
  if (!s) return 2;
  long long t0 = now_ns();
  for (long i = 0; i < n; i++) {
    long long a = now_ns();
    if (!ping(c)) {
      fprintf(stderr, "ping_rtt: PING failed\n");
      return 2;
    }
    s[i] = now_ns() - a;
  }
  long long t1 = now_ns();
  FILE *f = fopen(argv[5], "w");
  if (!f) return 2;
  for (long i = 0; i < n; i++) fprintf(f, "%.3f\n", (double)s[i] / 1000.0);
  fclose(f);
  printf("{\"pings\":%ld,\"elapsed_s\":%.6f}\n", n, (double)(t1 - t0) / 1e9);
  redisFree(c);
  return 0;
}
