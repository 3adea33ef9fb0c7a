/* util.c -- small helpers: monotonic clock, per-thread error messages, uuid,
 * thread ids, durations, allocation. */
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
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

void rlock__set_msg(const char *msg) { snprintf(tls_msg, sizeof tls_msg, "%s", msg ? msg : ""); }
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

void rlock__random_bytes(void *out, size_t n) {
  if (RAND_bytes(out, (int)n) != 1) {
    /* OpenSSL's RNG failed: fall back to the kernel's */
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(out, 1, n, f) != n) memset(out, 0x5a, n);
    if (f) fclose(f);
  }
}

void rlock__random_hex(char *out, size_t nbytes) {
  unsigned char buf[64];
  static const char hx[] = "0123456789abcdef";
  if (nbytes > sizeof buf) nbytes = sizeof buf;
  rlock__random_bytes(buf, nbytes);
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = hx[buf[i] >> 4];
    out[2 * i + 1] = hx[buf[i] & 15];
  }
  out[2 * nbytes] = 0;
}

/* Two decimal digits per step (the pairs "00".."99"): no division per digit. */
static const char dec2[201] =
    "000102030405060708091011121314151617181920212223242526272829303132333435363738394041424344454647484950515253545556"
    "57585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

size_t rlock__u64toa(uint64_t u, char *out) {
  size_t n = 1;
  for (uint64_t t = u; t >= 10; t /= 10) n++;
  char *p = out + n;
  *p = 0;
  while (u >= 100) {
    unsigned i = (unsigned)(u % 100) * 2;
    u /= 100;
    p -= 2;
    p[0] = dec2[i], p[1] = dec2[i + 1];
  }
  if (u >= 10) {
    p -= 2;
    p[0] = dec2[u * 2], p[1] = dec2[u * 2 + 1];
  } else {
    *--p = (char)('0' + u);
  }
  return n;
}

size_t rlock__i64toa(int64_t v, char *out) {
  if (v >= 0) return rlock__u64toa((uint64_t)v, out);
  out[0] = '-';
  return 1 + rlock__u64toa((uint64_t)0 - (uint64_t)v, out + 1);
}

/* xoshiro256** (Blackman & Vigna), seeded from OpenSSL's RNG: request ids must
 * be unique, not secret, and RAND_bytes costs thousands of instructions. */
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rlock__prng_seed(rlock__prng_t *p) {
  rlock__random_bytes(p->s, sizeof p->s);
  if (!(p->s[0] | p->s[1] | p->s[2] | p->s[3])) p->s[0] = 0x9e3779b97f4a7c15ULL;
}

uint64_t rlock__prng_next(rlock__prng_t *p) {
  uint64_t *s = p->s;
  uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

/* 8 nibbles of x (its low 32 bits) as 8 lowercase hex digits at out, the
 * lowest first: each nibble spread to a byte, then to '0'..'9' or 'a'..'f'
 * with no table and no branch. */
static void hex8(char *out, uint64_t x) {
  x &= 0xffffffffULL;
  x = (x | (x << 16)) & 0x0000ffff0000ffffULL;
  x = (x | (x << 8)) & 0x00ff00ff00ff00ffULL;
  x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0fULL;
  uint64_t letters = ((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL; /* 1 where >= 10 */
  x += 0x3030303030303030ULL + letters * ('a' - '0' - 10);
  memcpy(out, &x, 8); /* byte i (little- or big-endian alike: any order of a random id is one) */
}

void rlock__prng_hex(rlock__prng_t *p, char out[33]) {
  uint64_t a = rlock__prng_next(p), b = rlock__prng_next(p);
  hex8(out, a);
  hex8(out + 8, a >> 32);
  hex8(out + 16, b);
  hex8(out + 24, b >> 32);
  out[32] = 0;
}

void rlock__uuid(char out[37]) {
  char h[33];
  rlock__random_hex(h, 16);
  h[12] = '4';                                                   /* version 4 */
  h[16] = "89ab"[(h[16] - (h[16] >= 'a' ? 'a' - 10 : '0')) & 3]; /* RFC 4122 variant */
  snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

/* gettid is a system call; the owner id of every call needs it. */
static _Thread_local uint64_t cached_tid;
static atomic_uint fork_gen; /* forks this process descends from (counted from the first client) */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void in_child(void) {
  cached_tid = 0; /* the forking thread's copy in the child */
  atomic_fetch_add(&fork_gen, 1);
}
static void register_atfork(void) { pthread_atfork(NULL, NULL, in_child); }

/* A client records it at creation; another value means the caller is a
 * forked child, where the client's I/O thread does not exist. */
unsigned rlock__fork_generation(void) {
  pthread_once(&atfork_once, register_atfork);
  return atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

static _Thread_local struct {
  uint64_t tid; /* the thread id tid_s spells (0: none yet) */
  size_t n;
  char s[24];
} tid_dec;

uint64_t rlock__gettid(void) {
  if (!cached_tid) {
    pthread_once(&atfork_once, register_atfork);
    cached_tid = (uint64_t)syscall(SYS_gettid);
  }
  return cached_tid;
}

/* A thread's owner ids spell its own id again and again: the last one
 * written by this thread is kept in decimal. */
size_t rlock__tid_dec(uint64_t tid, char *out) {
  if (tid_dec.tid != tid || !tid) {
    tid_dec.n = rlock__u64toa(tid, tid_dec.s);
    tid_dec.tid = tid;
  }
  memcpy(out, tid_dec.s, tid_dec.n + 1);
  return tid_dec.n;
}

void rlock__futex_wait(_Atomic uint32_t *word, uint32_t while_value) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, while_value, NULL, NULL, 0);
}

void rlock__futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The waiter's side of a sync call (the word's states: SYNC_PENDING,
 * SYNC_SLEEPING, SYNC_DONE): it announces its sleep with one
 * compare-and-swap PENDING -> SLEEPING and sleeps on the futex while the word
 * says SLEEPING. rlock__sync_signal swaps DONE in and calls FUTEX_WAKE only
 * when it took SLEEPING out: whichever of the two steps comes first, the
 * waiter either sees DONE or is woken; no wake-up is lost. (No spin before
 * the sleep: the answer is a network round trip away, and on a loaded
 * machine a spinning waiter takes the core the I/O thread and the server
 * need; measured in scenarios 1 and 2, it lost in both.) */
void rlock__sync_wait(_Atomic uint32_t *word) {
  uint32_t expect = SYNC_PENDING;
  if (!atomic_compare_exchange_strong(word, &expect, SYNC_SLEEPING)) return; /* DONE */
  while (atomic_load_explicit(word, memory_order_acquire) != SYNC_DONE) rlock__futex_wait(word, SYNC_SLEEPING);
}

/* The I/O thread's side: the result is filled in; publish it (release) and
 * wake the waiter only if it sleeps. After the swap the waiter may return at
 * once and its word be gone: the wake then hits a dead address, which is
 * harmless (a waiter there re-checks its own word). */
void rlock__sync_signal(_Atomic uint32_t *word) {
  if (atomic_exchange(word, SYNC_DONE) == SYNC_SLEEPING) rlock__futex_wake(word);
}

bool rlock__ascii_ncaseeq(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
    if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
    if (x != y) return false;
    if (!x) return true;
  }
  return true;
}

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

/* ms per unit: "ms", "s", "m", "h", "d"; 0: not a unit. *p moves past it. */
static int64_t duration_unit(const char **p) {
  static const struct {
    const char *name;
    int64_t ms;
  } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    size_t n = strlen(units[i].name);
    if (!strncmp(*p, units[i].name, n)) { /* "ms" is tried before "m" */
      *p += n;
      return units[i].ms;
    }
  }
  return 0;
}

/* Durations: "250" (ms), "250ms", "3s", "1.5s", "2m", "1h", "1d", or a sum
 * such as "1h30m" or "2m30.5s"; every part whole ms, the total within int64. */
RLOCK_API int rlock_duration_parse(const char *s, int64_t *out_ms) {
  if (!s || !out_ms) return rlock__fail(RLOCK_EINVAL, "duration: NULL argument");
  const char *p = s;
  int64_t total = 0;
  int parts = 0;
  if (!*p) return rlock__fail(RLOCK_EINVAL, "invalid duration '' (expected e.g. 500ms, 1.5s, 2m, 1h, 1d)");
  while (*p) {
    if (*p < '0' || *p > '9')
      return rlock__fail(RLOCK_EINVAL, "invalid duration '%s' (expected e.g. 500ms, 1.5s, 2m, 1h, 1d)", s);
    int64_t v = 0, frac = 0, scale = 1;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (v > (INT64_MAX - (*p - '0')) / 10) return rlock__fail(RLOCK_EINVAL, "duration '%s' is too large", s);
      v = v * 10 + (*p - '0');
    }
    if (*p == '.') {
      p++;
      if (*p < '0' || *p > '9') return rlock__fail(RLOCK_EINVAL, "invalid duration '%s' (a digit must follow '.')", s);
      for (; *p >= '0' && *p <= '9'; p++) {
        if (scale >= 1000000000) return rlock__fail(RLOCK_EINVAL, "duration '%s': too many decimals", s);
        frac = frac * 10 + (*p - '0'), scale *= 10;
      }
    }
    int64_t mul = *p ? duration_unit(&p) : (parts == 0 ? 1 : 0); /* a bare number alone: ms */
    if (!mul) return rlock__fail(RLOCK_EINVAL, "invalid duration '%s' (units: ms, s, m, h, d)", s);
    if (frac * mul % scale) return rlock__fail(RLOCK_EINVAL, "duration '%s' is not a whole number of ms", s);
    if (v > INT64_MAX / mul) return rlock__fail(RLOCK_EINVAL, "duration '%s' is too large", s);
    int64_t part = v * mul, fpart = frac * mul / scale;
    if (part > INT64_MAX - fpart || total > INT64_MAX - part - fpart)
      return rlock__fail(RLOCK_EINVAL, "duration '%s' is too large", s);
    total += part + fpart;
    parts++;
  }
  *out_ms = total;
  return 0;
}

void rlock__assert_fail(const char *cond, const char *file, int line, const char *func) {
  fprintf(stderr, "rlock: internal invariant broken: %s (%s:%d, %s)\n", cond, file, line, func);
  abort();
}
