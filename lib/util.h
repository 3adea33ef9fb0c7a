/* util.h -- the helpers every module uses (util.c): the export macro, assertions,
 * errors and messages, ids, numbers in decimal, the PRNG, futexes, time. */
#ifndef RLOCK_UTIL_H
#define RLOCK_UTIL_H

#include "rlock.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#define RLOCK_API __attribute__((visibility("default")))

/* RLOCK__ASSERT(cond): an invariant the code relies on. Live when built with
 * RLOCK_ASSERTS (debug, sanitizer and test builds): a false one prints the
 * condition and its place on stderr and aborts. Gone otherwise: cond must
 * have no side effect. */
#ifdef RLOCK_ASSERTS
#define RLOCK__ASSERT(cond) ((cond) ? (void)0 : rlock__assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define RLOCK__ASSERT(cond) ((void)sizeof((cond) ? 1 : 0)) /* not run; keeps what it names used */
#endif
void rlock__assert_fail(const char *cond, const char *file, int line, const char *func) __attribute__((noreturn));

int rlock__fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rlock__fail_keep(int err); /* err, keeping the detailed message already set */
void rlock__uuid(char out[37]);
void rlock__random_hex(char *out, size_t nbytes); /* 2*nbytes hex chars + NUL */
void rlock__random_bytes(void *out, size_t n);
size_t rlock__i64toa(int64_t v, char *out); /* decimal, NUL-terminated; returns length */
size_t rlock__u64toa(uint64_t v, char *out);
/* A value in decimal, written once (rlock__dec_set, at client creation)
 * and read from any thread: rlock__dec gives its text when v is that
 * value, else writes v into buf (>= 24 bytes); *n its length. */
typedef struct dec_cache {
  int64_t v;
  size_t n; /* 0: empty */
  char s[24];
} dec_cache_t;
static inline void rlock__dec_set(dec_cache_t *c, int64_t v) {
  c->n = rlock__i64toa(v, c->s);
  c->v = v;
}
static inline const char *rlock__dec(const dec_cache_t *c, int64_t v, char *buf, size_t *n) {
  if (c->n && c->v == v) {
    *n = c->n;
    return c->s;
  }
  *n = rlock__i64toa(v, buf);
  return buf;
}
typedef struct rlock__prng {
  uint64_t s[4];
} rlock__prng_t;
void rlock__prng_seed(rlock__prng_t *p);
uint64_t rlock__prng_next(rlock__prng_t *p);
void rlock__prng_hex(rlock__prng_t *p, char out[33]); /* 128 random bits as 32 hex chars */
uint64_t rlock__gettid(void);                         /* cached per thread (reset in a forked child) */
size_t rlock__tid_dec(uint64_t tid, char *out);       /* rlock__u64toa, the calling thread's last one kept */
unsigned rlock__fork_generation(void);                /* +1 in each forked child (pthread_atfork) */
void rlock__futex_wait(_Atomic uint32_t *word, uint32_t while_value);
void rlock__futex_wake(_Atomic uint32_t *word);
/* Sync over async (util.c): the states of a sync call's word, the wait and
 * the I/O thread's signal (FUTEX_WAKE only for a waiter that sleeps). */
enum { SYNC_PENDING = 0, SYNC_DONE = 1, SYNC_SLEEPING = 2 };
void rlock__sync_wait(_Atomic uint32_t *word);
void rlock__sync_signal(_Atomic uint32_t *word);
char *rlock__strndup(const char *s, size_t n);
/* The first n bytes of a and b (or up to a NUL in both) are equal, ASCII
 * letters compared without case whatever the locale (strncasecmp follows
 * the application's locale: in Turkish 'I' and 'i' differ). */
bool rlock__ascii_ncaseeq(const char *a, const char *b, size_t n);
void rlock__tv_from_ms(struct timeval *tv, int64_t ms);
/* Per-thread detailed message, copied to the waiting user thread by sync calls. */
void rlock__set_msg(const char *msg);
const char *rlock__msg(void);

#endif
