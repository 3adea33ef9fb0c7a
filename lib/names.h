/* names.h -- key and channel names derived from a lock name, in its Cluster slot (names.c). */
#ifndef RLOCK_NAMES_H
#define RLOCK_NAMES_H

#include "util.h"

/* A byte buffer for key names built from the lock name. */
typedef struct bytes {
  char *p;
  size_t n;
} bytes_t;
/* Key names derived from a lock NAME, always in NAME's Cluster slot:
 * Redisson's form when it lands there, else the slot-tag form (names.c).
 * Prefix form: "P:{NAME}" ("P:NAME" when NAME holds '{'), else "P:{T}NAME". */
int rlock__names_prefixed(bytes_t *out, const char *prefix, const char *name, size_t len);
/* Two prefix forms of NAME (pa, pb) into a and b, both or neither: 0 or
 * RLOCK_ENOMEM (a queue and its deadlines). */
int rlock__names_prefixed2(bytes_t *a, const char *pa, bytes_t *b, const char *pb, const char *name, size_t len);
/* prefix form plus ":" suffix: "P:{NAME}:S" (else "P:NAME:S", "P:{T}NAME:S"). */
int rlock__names_prefixed_suffix(bytes_t *out, const char *prefix, const char *name, size_t len, const char *suffix);
/* The same in buf when it fits (cap bytes, its NUL included: out->p == buf),
 * else malloc'd; prefix and suffix plen and slen bytes (no NUL needed). */
int rlock__names_prefixed_suffix_in(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen,
                                    const char *name, size_t len, const char *suffix, size_t slen);
/* suffix form: "{NAME}:S" ("NAME:S" when NAME holds '{'), else "{T}NAME:S". */
int rlock__names_suffixed(bytes_t *out, const char *name, size_t len, const char *suffix);
/* rlock__names_prefixed_suffix_in for a NAME known to hold no brace:
 * "P:{NAME}:S" (prefix and suffix NULL: absent). */
int rlock__names_plain_in(bytes_t *out, char *buf, size_t cap, const char *prefix, size_t plen, const char *name,
                          size_t len, const char *suffix, size_t slen);
uint16_t rlock__names_crc16(const char *p, size_t n);
uint16_t rlock__names_slot(const char *key, size_t n); /* Redis Cluster hash slot */
const char *rlock__names_tag(uint16_t slot);           /* the shortest [0-9a-z] tag T hashing to slot */

#endif
