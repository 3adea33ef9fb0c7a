/* map.h -- a hash map from byte strings to pointers (map.c). */
#ifndef RLOCK_MAP_H
#define RLOCK_MAP_H

#include "util.h"

/* Hash map from byte strings to pointers (chained, power-of-two buckets;
 * a deleted entry is kept as the next put's, so put/del cycles do not allocate). */
typedef struct map_entry {
  struct map_entry *next;
  uint64_t hash;
  size_t klen;
  void *value;
  char key[]; /* klen bytes */
} map_entry_t;
typedef struct map {
  map_entry_t **buckets;
  size_t nbuckets, count;
  map_entry_t *spare; /* the last deleted entry, reused by the next put */
} map_t;
void rlock__map_init(map_t *m);
uint64_t rlock__map_hash(const void *key, size_t klen); /* the map's hash (watchdog.c's own table) */
void rlock__map_free(map_t *m);                         /* frees entries, not values */
void *rlock__map_get(const map_t *m, const void *key, size_t klen);
/* Where key's value is stored (NULL: no such key): set it without allocating. */
void **rlock__map_slot(const map_t *m, const void *key, size_t klen);
int rlock__map_put(map_t *m, const void *key, size_t klen, void *value); /* replaces */
/* Where key's value is stored, after putting value there if key was absent
 * (*added; one lookup). NULL: out of memory. */
void **rlock__map_put_slot(map_t *m, const void *key, size_t klen, void *value, bool *added);
void *rlock__map_del(map_t *m, const void *key, size_t klen); /* returns old value */
/* Iteration that tolerates deleting the current entry. */
typedef struct map_iter {
  const map_t *m;
  size_t bucket;
  map_entry_t *next;
} map_iter_t;
void rlock__map_iter_init(map_iter_t *it, const map_t *m);
map_entry_t *rlock__map_iter_next(map_iter_t *it);

#endif
