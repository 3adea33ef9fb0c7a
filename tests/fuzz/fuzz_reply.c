/* fuzz_reply.c -- libFuzzer target for the RESP reader (lib/reply.c:
 * hiredis's parser building rlock_reply_t trees with size bounds). The input
 * is fed in pieces (split points taken from the first byte) as a socket would
 * deliver it; every reply produced must be a well-formed tree (no NULL
 * elements, string lengths matching), and nothing may leak or crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void walk(const rlock_reply_t *r, int depth) {
  if (!r || depth > 16) abort();
  switch (r->type) {
  case RLOCK_REPLY_ARRAY:
    for (size_t i = 0; i < r->elements; i++) walk(r->element[i], depth + 1);
    break;
  case RLOCK_REPLY_STRING:
  case RLOCK_REPLY_STATUS:
  case RLOCK_REPLY_ERROR:
    if (!r->str || r->str[r->len] != 0) abort();
    break;
  default: break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t step = (size_t)(data[0] % 16) + 1;
  bool shared = data[0] & 16; /* the command connection's reader (shared nil, small integers) */
  data++, size--;
  redisReader *rd = rlock__reply_reader_new(shared);
  if (!rd) return 0;
  size_t off = 0;
  int failed = 0;
  while (off < size && !failed) {
    size_t n = size - off < step ? size - off : step;
    if (redisReaderFeed(rd, (const char *)data + off, n) != REDIS_OK) break;
    off += n;
    for (;;) {
      void *reply = NULL;
      if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
        failed = 1;
        break;
      }
      if (!reply) break;
      walk(reply, 0);
      rlock_reply_free(reply);
    }
  }
  redisReaderFree(rd);
  return 0;
}
