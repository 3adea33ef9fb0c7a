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
 * of all 16384 is built once, on first use). docs/internals/key-names.md states the
 * rule for other implementations. */
#include "names.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 16384
#define TAG_ALPHABET "0123456789abcdefghijklmnopqrstuvwxyz"

/* CRC16/XMODEM (polynomial 0x1021, init 0), a byte at a time: crc_table[b]
 * is the CRC of byte b, written out here (tests/test_names.c checks slots
 * against a bit-by-bit CRC and a server's CLUSTER KEYSLOT). */
static const uint16_t crc_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7, 0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad,
    0xe1ce, 0xf1ef, 0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6, 0x9339, 0x8318, 0xb37b, 0xa35a,
    0xd3bd, 0xc39c, 0xf3ff, 0xe3de, 0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485, 0xa56a, 0xb54b,
    0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d, 0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc, 0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861,
    0x2802, 0x3823, 0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b, 0x5af5, 0x4ad4, 0x7ab7, 0x6a96,
    0x1a71, 0x0a50, 0x3a33, 0x2a12, 0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a, 0x6ca6, 0x7c87,
    0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41, 0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70, 0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a,
    0x9f59, 0x8f78, 0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f, 0x1080, 0x00a1, 0x30c2, 0x20e3,
    0x5004, 0x4025, 0x7046, 0x6067, 0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e, 0x02b1, 0x1290,
    0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256, 0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405, 0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e,
    0xc71d, 0xd73c, 0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634, 0xd94c, 0xc96d, 0xf90e, 0xe92f,
    0x99c8, 0x89e9, 0xb98a, 0xa9ab, 0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3, 0xcb7d, 0xdb5c,
    0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a, 0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9, 0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83,
    0x1ce0, 0x0cc1, 0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8, 0x6e17, 0x7e36, 0x4e55, 0x5e74,
    0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

static uint16_t crc_update(uint16_t crc, const char *p, size_t n) {
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

/* The usual name, with no brace: "P:{NAME}:S" (parts absent when NULL)
 * written at once, its tag exactly NAME (so in NAME's slot). */
int rlock__names_plain_in(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen, const char *name,
                          size_t len, const char *suffix, size_t slen) {
  size_t total = (prefix ? plen + 1 : 0) + len + 2 + (suffix ? slen + 1 : 0);
  char *p = total < cap ? buf : malloc(total + 1);
  if (!p) return RLOCK_ENOMEM;
  char *o = p;
  if (prefix) memcpy(o, prefix, plen), o += plen, *o++ = ':';
  *o++ = '{';
  memcpy(o, name, len), o += len;
  *o++ = '}';
  if (suffix) *o++ = ':', memcpy(o, suffix, slen), o += slen;
  *o = 0;
  out->p = p;
  out->n = total;
  return 0;
}

/* Redisson's form of the key, or the slot-tag form when Redisson's would not
 * land in NAME's slot. prefix and suffix must hold no brace (ours never do). */
static int build(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen, const char *name, size_t len,
                 const char *suffix, size_t slen) {
  bool braces = memchr(name, '{', len) != NULL;
  /* no brace in NAME: the key's tag is exactly NAME, so it is in NAME's slot */
  if (!braces && len && !memchr(name, '}', len))
    return rlock__names_plain_in(out, buf, cap, prefix, plen, name, len, suffix, slen);
  const char *pre = prefix ? ":" : NULL, *sep = suffix ? ":" : NULL;
  const char *open = braces ? NULL : "{", *close = braces ? NULL : "}";
  const char *piece[8] = {prefix, pre, open, name, close, sep, suffix};
  size_t plens[8] = {plen, 1, 1, len, 1, 1, slen};
  int rc = join(out, buf, cap, piece, plens, 7);
  if (rc) return rc;
  uint16_t slot = rlock__names_slot(name, len);
  if (rlock__names_slot(out->p, out->n) == slot) return 0;
  if (out->p != buf) free(out->p);
  const char *tag = rlock__names_tag(slot);
  const char *alt[8] = {prefix, pre, "{", tag, "}", name, sep, suffix};
  size_t alen[8] = {plen, 1, 1, strlen(tag), 1, len, 1, slen};
  if ((rc = join(out, buf, cap, alt, alen, 8))) return rc;
  if (rlock__names_slot(out->p, out->n) == slot) return 0;
  if (out->p != buf) free(out->p); /* a brace in prefix or suffix: a bug of the caller */
  out->p = NULL;
  return RLOCK_EINVAL;
}

static size_t len_of(const char *s) { return s ? strlen(s) : 0; }

int rlock__names_prefixed_suffix(bytes_t *out, const char *prefix, const char *name, size_t len, const char *suffix) {
  return build(out, NULL, 0, prefix, len_of(prefix), name, len, suffix, len_of(suffix));
}

int rlock__names_prefixed_suffix_in(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen,
                                    const char *name, size_t len, const char *suffix, size_t slen) {
  return build(out, buf, cap, prefix, plen, name, len, suffix, slen);
}

int rlock__names_prefixed(bytes_t *out, const char *prefix, const char *name, size_t len) {
  return build(out, NULL, 0, prefix, len_of(prefix), name, len, NULL, 0);
}

int rlock__names_prefixed2(bytes_t *a, const char *pa, bytes_t *b, const char *pb, const char *name, size_t len) {
  a->p = b->p = NULL;
  if (rlock__names_prefixed(a, pa, name, len) || rlock__names_prefixed(b, pb, name, len)) {
    free(a->p);
    free(b->p);
    a->p = b->p = NULL;
    return RLOCK_ENOMEM;
  }
  return 0;
}

int rlock__names_suffixed(bytes_t *out, const char *name, size_t len, const char *suffix) {
  return build(out, NULL, 0, NULL, 0, name, len, suffix, len_of(suffix));
}
