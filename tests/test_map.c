/* test_map.c -- the hash map (lib/map.c, internal API) against a plain
 * array as the reference: random puts, put_slots, gets and deletes of keys
 * of every length from 0 to 300 bytes (binary, with shared prefixes), so
 * that deleted entries are reused for keys longer and shorter than theirs,
 * buckets grow, and iteration with deletion sees every entry once. No
 * server needed. */
#include "harness.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define NKEYS 200

static char keys[NKEYS][300];
static size_t klens[NKEYS];
static void *values[NKEYS]; /* the reference: NULL = absent */

static void make_keys(void) {
  for (int i = 0; i < NKEYS; i++) {
    klens[i] = (size_t)(i == 0 ? 0 : rand() % 300);
    for (size_t j = 0; j < klens[i]; j++) keys[i][j] = (char)(j < 8 ? 'p' : rand() % 256);
    for (int k = 0; k < i; k++) /* distinct keys: make a duplicate longer by one byte */
      if (klens[k] == klens[i] && !memcmp(keys[k], keys[i], klens[i])) keys[i][klens[i]++] = (char)i, k = -1;
  }
}

static void check_all(const map_t *m) {
  size_t n = 0;
  for (int i = 0; i < NKEYS; i++) {
    CHECK(rlock__map_get(m, keys[i], klens[i]) == values[i]);
    n += values[i] != NULL;
  }
  CHECK_EQ(m->count, n);
}

TEST(random_operations) {
  srand(12);
  make_keys();
  map_t m;
  rlock__map_init(&m);
  for (int round = 0; round < 50000; round++) {
    int i = rand() % NKEYS;
    void *v = (void *)(uintptr_t)(round + 1);
    switch (rand() % 4) {
    case 0:
      CHECK_OK(rlock__map_put(&m, keys[i], klens[i], v));
      values[i] = v;
      break;
    case 1: {
      bool added;
      void **slot = rlock__map_put_slot(&m, keys[i], klens[i], v, &added);
      CHECK(slot);
      CHECK(added == (values[i] == NULL));
      if (added) values[i] = v;
      CHECK(*slot == values[i]);
      break;
    }
    default: CHECK(rlock__map_del(&m, keys[i], klens[i]) == values[i]); values[i] = NULL;
    }
    if (round % 1000 == 0) check_all(&m);
  }
  check_all(&m);
  /* iteration that deletes as it goes sees every entry once */
  map_iter_t it;
  rlock__map_iter_init(&it, &m);
  size_t seen = 0, count = m.count;
  for (map_entry_t *e; (e = rlock__map_iter_next(&it));) {
    int i = 0;
    while (i < NKEYS && !(klens[i] == e->klen && !memcmp(keys[i], e->key, e->klen))) i++;
    CHECK(i < NKEYS && values[i] == e->value);
    CHECK(rlock__map_del(&m, e->key, e->klen) == values[i]);
    values[i] = NULL;
    seen++;
  }
  CHECK_EQ(seen, count);
  CHECK_EQ(m.count, 0);
  rlock__map_free(&m);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 110);
  RUN(random_operations);
  return th_done();
}
