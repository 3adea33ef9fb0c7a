/* resp.c -- writes commands in RESP, the form Redis reads requests in: an
 * array of bulk strings, "*<argc>\r\n" then "$<len>\r\n<bytes>\r\n" per
 * argument. The sizes are counted first so a request is written once, into
 * a buffer of the right size (conn.c, script.c); no printf on the way. The
 * replies are read by hiredis's reader (reply.c). */
#include "internal.h"

#include <string.h>

/* Decimal digits of n. */
static size_t digits(size_t n) {
  size_t d = 1;
  while (n >= 10) n /= 10, d++;
  return d;
}

size_t rlock__resp_head_size(size_t n) { return 1 + digits(n) + 2; }

char *rlock__resp_head(char *p, char type, size_t n) {
  p[0] = type;
  if (n < 10) { /* most lengths and counts: one or two digits */
    p[1] = (char)('0' + n), p[2] = '\r', p[3] = '\n';
    return p + 4;
  }
  if (n < 100) {
    p[1] = (char)('0' + n / 10), p[2] = (char)('0' + n % 10), p[3] = '\r', p[4] = '\n';
    return p + 5;
  }
  size_t d = digits(n);
  for (size_t i = d; i > 0; i--, n /= 10) p[i] = (char)('0' + n % 10);
  p[d + 1] = '\r';
  p[d + 2] = '\n';
  return p + d + 3;
}

size_t rlock__resp_bulk_size(size_t n) { return rlock__resp_head_size(n) + n + 2; }

char *rlock__resp_bulk(char *p, const void *s, size_t n) {
  p = rlock__resp_head(p, '$', n);
  if (n) memcpy(p, s, n);
  p[n] = '\r';
  p[n + 1] = '\n';
  return p + n + 2;
}

/* The length of argument i (strlen without argvlen). */
static size_t arg_len(const char *const *argv, const size_t *argvlen, int i) {
  return argvlen ? argvlen[i] : strlen(argv[i]);
}

size_t rlock__resp_size(int argc, const char *const *argv, const size_t *argvlen) {
  size_t n = rlock__resp_head_size((size_t)argc);
  for (int i = 0; i < argc; i++) n += rlock__resp_bulk_size(arg_len(argv, argvlen, i));
  return n;
}

size_t rlock__resp_write(char *out, int argc, const char *const *argv, const size_t *argvlen) {
  char *p = rlock__resp_head(out, '*', (size_t)argc);
  for (int i = 0; i < argc; i++) p = rlock__resp_bulk(p, argv[i], arg_len(argv, argvlen, i));
  return (size_t)(p - out);
}
