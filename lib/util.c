/* util.c -- small helpers: monotonic clock, per-thread error messages, uuid,
 * thread ids, durations, allocation. */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <openssl/rand.h>

static _Thread_local char tls_msg[512];

RLOCK_API const char *rlock_version(void) { return RLOCK_VERSION_STRING; }

RLOCK_API int64_t rlock_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rlock__set_msg(const char *msg) {
  snprintf(tls_msg, sizeof tls_msg, "%s", msg ? msg : "");
}
const char *rlock__msg(void) { return tls_msg; }

RLOCK_API const char *rlock_last_error(void) { return tls_msg; }

int rlock__fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
  va_end(ap);
  return err;
}

int rlock__fail_keep(int err) {
  if (!tls_msg[0]) rlock__set_msg(rlock_strerror(err));
  return err;
}

void rlock__random_hex(char *out, size_t nbytes) {
  unsigned char buf[64];
  static const char hx[] = "0123456789abcdef";
  if (nbytes > sizeof buf) nbytes = sizeof buf;
  if (RAND_bytes(buf, (int)nbytes) != 1) {
    /* OpenSSL's RNG failing is fatal for uniqueness; fall back to the kernel */
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(buf, 1, nbytes, f) != nbytes) memset(buf, 0x5a, nbytes);
    if (f) fclose(f);
  }
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = hx[buf[i] >> 4];
    out[2 * i + 1] = hx[buf[i] & 15];
  }
  out[2 * nbytes] = 0;
}

void rlock__uuid(char out[37]) {
  char h[33];
  rlock__random_hex(h, 16);
  h[12] = '4';                                /* version 4 */
  h[16] = "89ab"[(h[16] - (h[16] >= 'a' ? 'a' - 10 : '0')) & 3]; /* RFC 4122 variant */
  snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

uint64_t rlock__gettid(void) { return (uint64_t)syscall(SYS_gettid); }

void *rlock__xmalloc(size_t n) { return malloc(n ? n : 1); }

char *rlock__strndup(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

void rlock__tv_from_ms(struct timeval *tv, int64_t ms) {
  if (ms < 0) ms = 0;
  tv->tv_sec = ms / 1000;
  tv->tv_usec = (ms % 1000) * 1000;
}

RLOCK_API int rlock_duration_parse(const char *s, int64_t *out_ms) {
  if (!s || !out_ms) return rlock__fail(RLOCK_EINVAL, "duration: NULL argument");
  const char *p = s;
  if (*p < '0' || *p > '9') return rlock__fail(RLOCK_EINVAL, "invalid duration '%s' (expected e.g. 500ms, 3s, 2m)", s);
  int64_t v = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (INT64_MAX - (*p - '0')) / 10)
      return rlock__fail(RLOCK_EINVAL, "duration '%s' is too large", s);
    v = v * 10 + (*p - '0');
  }
  int64_t mul;
  if (!*p || !strcmp(p, "ms")) mul = 1;
  else if (!strcmp(p, "s")) mul = 1000;
  else if (!strcmp(p, "m")) mul = 60000;
  else return rlock__fail(RLOCK_EINVAL, "invalid duration '%s' (units: ms, s, m)", s);
  if (v > INT64_MAX / mul) return rlock__fail(RLOCK_EINVAL, "duration '%s' is too large", s);
  *out_ms = v * mul;
  return 0;
}
