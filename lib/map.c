/* map.c -- a small chained hash map from byte strings to pointers, used for
 * the channel table (pubsub.c), the watchdog's owner ids and residue
 * (watchdog.c; its hold registry is its own intrusive table, with this hash)
 * and the ops by lock name and handoff table (lock.c). Keys are hashed 8 bytes at a time;
 * the last deleted entry is kept as a spare for the next put of a key no
 * longer than its own, so a key put and deleted again and again (an op's
 * name) allocates nothing. Entries are sized exactly. */
#include "map.h"

#include <stdlib.h>
#include <string.h>

#define MIX 0xff51afd7ed558ccdULL

static uint64_t rotl5(uint64_t x) { return (x << 5) | (x >> 59); }

/* A word at a time (multiply and rotate, as FxHash), the tail as one more
 * word, then a final mix so the bucket bits depend on every byte. */
static uint64_t hash_bytes(const void *k, size_t n) {
  const unsigned char *p = k;
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
  for (; n >= 8; p += 8, n -= 8) {
    memcpy(&w, p, 8);
    h = (rotl5(h) ^ w) * MIX;
  }
  w = 0;
  memcpy(&w, p, n);
  h = (rotl5(h) ^ w) * MIX;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 33);
}

uint64_t rlock__map_hash(const void *key, size_t klen) { return hash_bytes(key, klen); }

void rlock__map_init(map_t *m) { memset(m, 0, sizeof *m); }

void rlock__map_free(map_t *m) {
  for (size_t i = 0; i < m->nbuckets; i++) {
    map_entry_t *e = m->buckets[i];
    while (e) {
      map_entry_t *n = e->next;
      free(e);
      e = n;
    }
  }
  free(m->buckets);
  free(m->spare);
  rlock__map_init(m);
}

static map_entry_t **find(const map_t *m, const void *key, size_t klen, uint64_t h) {
  if (!m->nbuckets) return NULL;
  map_entry_t **pp = &m->buckets[h & (m->nbuckets - 1)];
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->hash == h && (*pp)->klen == klen && !memcmp((*pp)->key, key, klen)) return pp;
  return pp;
}

void *rlock__map_get(const map_t *m, const void *key, size_t klen) {
  map_entry_t **pp = find(m, key, klen, hash_bytes(key, klen));
  return pp && *pp ? (*pp)->value : NULL;
}

void **rlock__map_slot(const map_t *m, const void *key, size_t klen) {
  map_entry_t **pp = find(m, key, klen, hash_bytes(key, klen));
  return pp && *pp ? &(*pp)->value : NULL;
}

static int grow(map_t *m) {
  size_t nb = m->nbuckets ? m->nbuckets * 2 : 16;
  map_entry_t **b = calloc(nb, sizeof *b);
  if (!b) return RLOCK_ENOMEM;
  for (size_t i = 0; i < m->nbuckets; i++) {
    map_entry_t *e = m->buckets[i];
    while (e) {
      map_entry_t *n = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = n;
    }
  }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = nb;
  return 0;
}

void **rlock__map_put_slot(map_t *m, const void *key, size_t klen, void *value, bool *added) {
  *added = false;
  if (m->count + 1 > m->nbuckets && grow(m)) return NULL;
  uint64_t h = hash_bytes(key, klen);
  map_entry_t **pp = find(m, key, klen, h);
  if (*pp) return &(*pp)->value;
  map_entry_t *e = m->spare; /* its room: at least its last key's length */
  if (e && e->klen >= klen) m->spare = NULL;
  else if (!(e = malloc(sizeof *e + klen))) return NULL;
  e->next = NULL;
  e->hash = h;
  e->klen = klen;
  e->value = value;
  memcpy(e->key, key, klen);
  *pp = e;
  m->count++;
  *added = true;
  return &e->value;
}

int rlock__map_put(map_t *m, const void *key, size_t klen, void *value) {
  bool added;
  void **slot = rlock__map_put_slot(m, key, klen, value, &added);
  if (!slot) return RLOCK_ENOMEM;
  *slot = value;
  return 0;
}

void *rlock__map_del(map_t *m, const void *key, size_t klen) {
  map_entry_t **pp = find(m, key, klen, hash_bytes(key, klen));
  if (!pp || !*pp) return NULL;
  map_entry_t *e = *pp;
  void *v = e->value;
  *pp = e->next;
  if (!m->spare) m->spare = e;
  else free(e);
  m->count--;
  return v;
}

void rlock__map_iter_init(map_iter_t *it, const map_t *m) {
  it->m = m;
  it->bucket = 0;
  it->next = NULL;
}

map_entry_t *rlock__map_iter_next(map_iter_t *it) {
  while (!it->next) {
    if (it->bucket >= it->m->nbuckets) return NULL;
    it->next = it->m->buckets[it->bucket++];
  }
  map_entry_t *e = it->next;
  it->next = e->next;
  return e;
}
