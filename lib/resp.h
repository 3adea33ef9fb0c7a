/* resp.h -- commands written in RESP (resp.c). */
#ifndef RLOCK_RESP_H
#define RLOCK_RESP_H

#include "util.h"

#include <string.h>

/* Commands in RESP, written straight into a buffer sized beforehand (no
 * printf): rlock__resp_size bytes, then rlock__resp_write (returns the bytes
 * written). argvlen NULL: strlen of each argument. The pieces, for writers
 * of their own (script.c): "*n\r\n" / "$n\r\n" (type '*' or '$') and one
 * bulk string; each returns the end of what it wrote. */
size_t rlock__resp_size(int argc, const char *const *argv, const size_t *argvlen);
size_t rlock__resp_write(char *out, int argc, const char *const *argv, const size_t *argvlen);
/* Inline: a request is a dozen of them (script.c). */
static inline size_t rlock__resp_digits(size_t n) {
  size_t d = 1;
  while (n >= 10) n /= 10, d++;
  return d;
}
static inline size_t rlock__resp_head_size(size_t n) { return 1 + rlock__resp_digits(n) + 2; }
static inline char *rlock__resp_head(char *p, char type, size_t n) {
  p[0] = type;
  if (n < 10) { /* most lengths and counts: one or two digits */
    p[1] = (char)('0' + n), p[2] = '\r', p[3] = '\n';
    return p + 4;
  }
  if (n < 100) {
    p[1] = (char)('0' + n / 10), p[2] = (char)('0' + n % 10), p[3] = '\r', p[4] = '\n';
    return p + 5;
  }
  size_t d = rlock__resp_digits(n);
  for (size_t i = d; i > 0; i--, n /= 10) p[i] = (char)('0' + n % 10);
  p[d + 1] = '\r';
  p[d + 2] = '\n';
  return p + d + 3;
}
static inline size_t rlock__resp_bulk_size(size_t n) { return rlock__resp_head_size(n) + n + 2; }
static inline char *rlock__resp_bulk(char *p, const void *s, size_t n) {
  p = rlock__resp_head(p, '$', n);
  if (n) memcpy(p, s, n);
  p[n] = '\r';
  p[n + 1] = '\n';
  return p + n + 2;
}

#endif
