/* redisson_ref.c -- the reference client of the limits table (issue 10): what
 * a minimal client in Redisson's wire format sends for one uncontended
 * lock+unlock pair, on one blocking hiredis connection, nothing else.
 * Acquire = Redisson's acquire script (KEYS NAME; ARGV lease, owner), unlock =
 * Redisson's unlock script without a latch key (KEYS NAME, channel; ARGV
 * message, lease, owner): 2 round trips per pair, EVALSHA, one in flight.
 * The scripts are written here from the wire description (docs/wire-format.md),
 * not copied from Redisson.
 *
 *   redisson_ref HOST PORT PAIRS WARMUP SAMPLES|-
 *
 * Prints {"pairs":N,"elapsed_s":S,"cpu_us_per_pair":C} and writes one pair
 * latency (us) per line to SAMPLES (not with "-": the callgrind / malloc /
 * strace runs). Exits 2 on any unexpected reply. */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Free, or already mine: +1 and the lease; else the holder's PTTL. */
static const char ACQUIRE[] =
    "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return nil\n"
    "end\n"
    "return redis.call('pttl', KEYS[1])\n";

/* Not mine: nil. Still held after -1: the lease again, 0. Else free it,
 * publish the message on the channel, 1. */
static const char UNLOCK[] =
    "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then\n"
    "  return nil\n"
    "end\n"
    "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  return 0\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', KEYS[2], ARGV[1])\n"
    "return 1\n";

#define NAME "bench:ref:redisson"
#define CHANNEL "redisson_lock__channel:{" NAME "}"
#define LEASE "30000"
#define OWNER "2f0b6c1e-7a59-4f7e-9a6e-3c1d2b1f0a9e:1"

static redisContext *ctx;
static char acquire_sha[41], unlock_sha[41];

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void fail(const char *what, redisReply *r) {
  fprintf(stderr, "redisson_ref: %s: %s\n", what,
          !r                             ? ctx->errstr
          : r->type == REDIS_REPLY_ERROR ? r->str
                                         : "unexpected reply type");
  exit(2);
}

static void load(const char *script, char sha[41]) {
  redisReply *r = redisCommand(ctx, "SCRIPT LOAD %s", script);
  if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) fail("SCRIPT LOAD", r);
  memcpy(sha, r->str, 41);
  freeReplyObject(r);
}

/* One EVALSHA; the reply must be of type want (and, for an integer, == ival). */
static void evalsha(int argc, const char **argv, int want, long long ival) {
  redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
  if (!r || r->type != want || (want == REDIS_REPLY_INTEGER && r->integer != ival)) fail(argv[1], r);
  freeReplyObject(r);
}

static void pair(void) {
  const char *acq[] = {"EVALSHA", acquire_sha, "1", NAME, LEASE, OWNER};
  const char *unl[] = {"EVALSHA", unlock_sha, "2", NAME, CHANNEL, "0", LEASE, OWNER};
  evalsha(6, acq, REDIS_REPLY_NIL, 0);
  evalsha(8, unl, REDIS_REPLY_INTEGER, 1);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: redisson_ref HOST PORT PAIRS WARMUP SAMPLES|-\n");
    return 64;
  }
  long n = atol(argv[3]), warm = atol(argv[4]);
  ctx = redisConnect(argv[1], atoi(argv[2]));
  if (!ctx || ctx->err) {
    fprintf(stderr, "redisson_ref: connect: %s\n", ctx ? ctx->errstr : "out of memory");
    return 2;
  }
  load(ACQUIRE, acquire_sha);
  load(UNLOCK, unlock_sha);
  for (long i = 0; i < warm; i++) pair();
  int keep = strcmp(argv[5], "-") != 0;
  long long *s = keep ? malloc((size_t)(n > 0 ? n : 1) * sizeof *s) : NULL;
  if (keep && !s) return 2;
  double cpu0 = cpu_s();
  long long t0 = now_ns();
  for (long i = 0; i < n; i++) {
    long long a = now_ns();
    pair();
    if (keep) s[i] = now_ns() - a;
  }
  long long t1 = now_ns();
  double cpu1 = cpu_s();
  if (keep) {
    FILE *f = fopen(argv[5], "w");
    if (!f) return 2;
    for (long i = 0; i < n; i++) fprintf(f, "%.3f\n", (double)s[i] / 1000.0);
    fclose(f);
    free(s);
  }
  printf("{\"pairs\":%ld,\"elapsed_s\":%.6f,\"cpu_us_per_pair\":%.2f}\n", n, (double)(t1 - t0) / 1e9,
         n ? (cpu1 - cpu0) * 1e6 / (double)n : 0.0);
  redisFree(ctx);
  return 0;
}
