/* names.c -- the names of a lock's keys and channels, and the Redis Cluster
 * hash slot of a key (CRC16/XMODEM mod 16384 with Redis's hash-tag rule).
 *
 * Every key of one lock must live in the slot of the lock's NAME: Cluster
 * refuses a script whose keys span slots. Redisson's forms are kept whenever
 * they do (wire compatibility with Java services):
 *   prefix form  "P:{NAME}"  ("P:NAME" when NAME holds '{'), then ":S" if any
 *   suffix form  "{NAME}:S"  ("NAME:S" when NAME holds '{')
 * That is every name without braces and every name whose first '{' opens a
 * non-empty tag closed later. For the other names ("a{b", "{}x", "x}y",
 * "}", ...) Redisson's form would hash elsewhere, so the tag is replaced by
 * the slot's own tag T, the full name following it so keys stay distinct:
 *   prefix form  "P:{T}NAME" (then ":S")      suffix form  "{T}NAME:S"
 * T is the first string over [0-9a-z], shortest first and then in that
 * alphabet's order, whose slot is NAME's slot (1 to 4 characters; the table
 * of all 16384 is built once, on first use). docs/architecture.md states the
 * rule for other implementations. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 16384
#define TAG_ALPHABET "0123456789abcdefghijklmnopqrstuvwxyz"

/* CRC16/XMODEM (polynomial 0x1021, init 0), a byte at a time: the table
 * (256 entries, crc_table[b] = the CRC of byte b) is built once, on first use. */
static uint16_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void build_crc_table(void) {
  for (unsigned b = 0; b < 256; b++) {
    uint16_t crc = (uint16_t)(b << 8);
    for (int i = 0; i < 8; i++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    crc_table[b] = crc;
  }
}

static uint16_t crc_update(uint16_t crc, const char *p, size_t n) {
  pthread_once(&crc_once, build_crc_table);
  for (size_t i = 0; i < n; i++) crc = (uint16_t)((crc << 8) ^ crc_table[(crc >> 8) ^ (unsigned char)p[i]]);
  return crc;
}

uint16_t rlock__names_crc16(const char *p, size_t n) { return crc_update(0, p, n); }

uint16_t rlock__names_slot(const char *key, size_t n) {
  const char *open = memchr(key, '{', n);
  if (open) {
    size_t rest = n - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) return rlock__names_crc16(open + 1, (size_t)(close - open - 1)) & (SLOTS - 1);
  }
  return rlock__names_crc16(key, n) & (SLOTS - 1);
}

/* ------------------------------------------------------------ slot tags */

static char tags[SLOTS][5];
static pthread_once_t tags_once = PTHREAD_ONCE_INIT;

/* Walks the strings over TAG_ALPHABET, shortest first, until every slot has
 * its first one (60 822 strings: about a millisecond, once per process). */
static void build_tags(void) {
  const size_t k = sizeof TAG_ALPHABET - 1;
  size_t left = SLOTS;
  char s[4];
  for (size_t len = 1; len <= 4 && left; len++) {
    size_t total = 1;
    for (size_t i = 0; i < len; i++) total *= k;
    for (size_t v = 0; v < total && left; v++) {
      size_t x = v;
      for (size_t i = len; i-- > 0; x /= k) s[i] = TAG_ALPHABET[x % k];
      uint16_t slot = rlock__names_crc16(s, len) & (SLOTS - 1);
      if (tags[slot][0]) continue;
      memcpy(tags[slot], s, len);
      left--;
    }
  }
}

const char *rlock__names_tag(uint16_t slot) {
  pthread_once(&tags_once, build_tags);
  return tags[slot & (SLOTS - 1)];
}

/* ------------------------------------------------------------ key names */

/* out = concatenation of the n pieces (NULL pieces are skipped), in buf if
 * it fits (cap bytes, NUL included), else malloc'd. */
static int join(bytes_t *out, char *buf, size_t cap, const char *const *piece, const size_t *len, int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += piece[i] ? len[i] : 0;
  char *p = total < cap ? buf : malloc(total + 1);
  if (!p) return RLOCK_ENOMEM;
  size_t o = 0;
  for (int i = 0; i < n; i++)
    if (piece[i]) memcpy(p + o, piece[i], len[i]), o += len[i];
  p[o] = 0;
  out->p = p;
  out->n = o;
  return 0;
}

/* Redisson's form of the key, or the slot-tag form when Redisson's would not
 * land in NAME's slot. prefix and suffix must hold no brace (ours never do). */
static int build(bytes_t *out, char *buf, size_t cap, const char *prefix, const char *name, size_t len,
                 const char *suffix) {
  bool braces = memchr(name, '{', len) != NULL;
  const char *pre = prefix ? ":" : NULL, *sep = suffix ? ":" : NULL;
  const char *open = braces ? NULL : "{", *close = braces ? NULL : "}";
  const char *piece[8] = {prefix, pre, open, name, close, sep, suffix};
  size_t plen[8] = {prefix ? strlen(prefix) : 0, 1, 1, len, 1, 1, suffix ? strlen(suffix) : 0};
  int rc = join(out, buf, cap, piece, plen, 7);
  if (rc) return rc;
  /* no brace in NAME: the key's tag is exactly NAME, so it is in NAME's slot */
  if (!braces && len && !memchr(name, '}', len)) return 0;
  uint16_t slot = rlock__names_slot(name, len);
  if (rlock__names_slot(out->p, out->n) == slot) return 0;
  if (out->p != buf) free(out->p);
  const char *tag = rlock__names_tag(slot);
  const char *alt[8] = {prefix, pre, "{", tag, "}", name, sep, suffix};
  size_t alen[8] = {plen[0], 1, 1, strlen(tag), 1, len, 1, plen[6]};
  if ((rc = join(out, buf, cap, alt, alen, 8))) return rc;
  if (rlock__names_slot(out->p, out->n) == slot) return 0;
  if (out->p != buf) free(out->p); /* a brace in prefix or suffix: a bug of the caller */
  out->p = NULL;
  return RLOCK_EINVAL;
}

int rlock__names_prefixed_suffix(bytes_t *out, const char *prefix, const char *name, size_t len,
                          const char *suffix) {
  return build(out, NULL, 0, prefix, name, len, suffix);
}

int rlock__names_prefixed_suffix_in(bytes_t *out, char *buf, size_t cap, const char *prefix, const char *name,
                                    size_t len, const char *suffix) {
  return build(out, buf, cap, prefix, name, len, suffix);
}

int rlock__names_prefixed(bytes_t *out, const char *prefix, const char *name, size_t len) {
  return build(out, NULL, 0, prefix, name, len, NULL);
}

int rlock__names_suffixed(bytes_t *out, const char *name, size_t len, const char *suffix) {
  return build(out, NULL, 0, NULL, name, len, suffix);
}
