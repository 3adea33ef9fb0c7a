/* names.c -- Redisson's key and channel names (prefix form "P:{NAME}") and
 * the Redis Cluster hash slot of a key (CRC16/XMODEM with hash tags). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static bool has_brace(const char *name, size_t len) { return memchr(name, '{', len) != NULL; }

int names_prefixed_suffix(bytes_t *out, const char *prefix, const char *name, size_t len,
                          const char *suffix) {
  size_t pl = strlen(prefix), sl = suffix ? strlen(suffix) + 1 : 0;
  bool wrap = !has_brace(name, len);
  size_t n = pl + 1 + len + (wrap ? 2 : 0) + sl;
  char *p = malloc(n + 1);
  if (!p) return RLOCK_ENOMEM;
  size_t o = 0;
  memcpy(p, prefix, pl), o += pl;
  p[o++] = ':';
  if (wrap) p[o++] = '{';
  memcpy(p + o, name, len), o += len;
  if (wrap) p[o++] = '}';
  if (suffix) {
    p[o++] = ':';
    memcpy(p + o, suffix, sl - 1), o += sl - 1;
  }
  p[o] = 0;
  out->p = p;
  out->n = o;
  return 0;
}

int names_prefixed(bytes_t *out, const char *prefix, const char *name, size_t len) {
  return names_prefixed_suffix(out, prefix, name, len, NULL);
}

uint16_t names_crc16(const char *p, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)((unsigned char)p[i] << 8);
    for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
  }
  return crc;
}

uint16_t names_slot(const char *key, size_t n) {
  const char *open = memchr(key, '{', n);
  if (open) {
    size_t rest = n - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) return names_crc16(open + 1, (size_t)(close - open - 1)) & 16383;
  }
  return names_crc16(key, n) & 16383;
}
