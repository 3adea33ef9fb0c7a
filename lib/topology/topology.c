/* topology/topology.c -- what every deployment shares: the choice of the
 * topology for a URL and the batcher that cuts multi-key requests (renewals,
 * latch DELs) per slot when the topology says slots matter. */
#include "client.h"

#include <stdlib.h>

const topology_ops_t *rlock__topology_forced;

const topology_ops_t *rlock__topology_for(const url_t *u) {
  if (rlock__topology_forced) return rlock__topology_forced;
  if (u->sentinel) return &rlock__topology_sentinel;
  if (u->cluster) return &rlock__topology_cluster;
  return &rlock__topology_single;
}

static int by_key(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int rlock__batcher_init(batcher_t *b, const uint16_t *slots, size_t n, size_t max) {
  *b = (batcher_t){.slots = slots, .n = n, .max = max ? max : 1};
  if (!slots || n < 2) return 0;
  /* sort (slot, index) pairs: grouped by slot, stable within one */
  uint64_t *keys = malloc(n * sizeof *keys);
  if (!keys || !(b->order = malloc(n * sizeof *b->order))) {
    free(keys);
    return RLOCK_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) keys[i] = (uint64_t)slots[i] << 40 | i;
  qsort(keys, n, sizeof *keys, by_key);
  for (size_t i = 0; i < n; i++) b->order[i] = (size_t)(keys[i] & ((UINT64_C(1) << 40) - 1));
  free(keys);
  return 0;
}

bool rlock__batcher_next(batcher_t *b, size_t *first, size_t *count) {
  if (b->pos >= b->n) return false;
  size_t end = b->n - b->pos > b->max ? b->pos + b->max : b->n;
  if (b->slots) {
    uint16_t s = b->slots[batcher_item(b, b->pos)];
    size_t e = b->pos + 1;
    while (e < end && b->slots[batcher_item(b, e)] == s) e++;
    end = e;
  }
  *first = b->pos;
  *count = end - b->pos;
  b->pos = end;
  return true;
}

void rlock__batcher_free(batcher_t *b) {
  free(b->order);
  b->order = NULL;
}
