/* resp.c -- writes commands in RESP, the form Redis reads requests in: an
 * array of bulk strings, "*<argc>\r\n" then "$<len>\r\n<bytes>\r\n" per
 * argument. The sizes are counted first so a request is written once, into
 * a buffer of the right size (conn.c, script.c); no printf on the way. The
 * replies are read by hiredis's reader (reply.c). */
#include "resp.h"

#include <string.h>

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
