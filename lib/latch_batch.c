/* latch_batch.c -- latch clean-up (LatchBatch): the keys of ended latches
 * are deleted in one DEL of many keys (one per slot where slots matter), sent
 * when RLOCK__DEL_BATCH have gathered or a short delay after the first.
 * Moved out of client.c as is; the client's pass and shutdown call in. */
#include "client.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ latch clean-up */

#define DEL_DELAY_MS 20

/* Room for one more key of len bytes in the DEL queue (both buffers grow by
 * doubling and are kept between DELs: no allocation in steady state). */
static bool del_room(client_t *cl, size_t len) {
  if (cl->ndels == cl->capdels) {
    size_t cap = cl->capdels ? cl->capdels * 2 : 64;
    size_t *d = realloc(cl->dels, cap * sizeof *d);
    if (!d) return false;
    cl->dels = d;
    cl->capdels = cap;
  }
  if (cl->delkeys_cap - cl->delkeys_n < len) {
    size_t cap = cl->delkeys_cap ? cl->delkeys_cap : 4096;
    while (cap - cl->delkeys_n < len) cap *= 2;
    char *k = realloc(cl->delkeys, cap);
    if (!k) return false;
    cl->delkeys = k;
    cl->delkeys_cap = cap;
  }
  return true;
}

/* Key i of the DEL queue and its length. */
static const char *del_key(const client_t *cl, size_t i, size_t *len) {
  size_t end = i + 1 < cl->ndels ? cl->dels[i + 1] : cl->delkeys_n;
  *len = end - cl->dels[i];
  return cl->delkeys + cl->dels[i];
}

void rlock__client_queue_del(client_t *cl, const char *key, size_t len) {
  if (!del_room(cl, len)) return; /* out of memory: the latch expires on its own */
  memcpy(cl->delkeys + cl->delkeys_n, key, len);
  cl->dels[cl->ndels++] = cl->delkeys_n;
  cl->delkeys_n += len;
  if (cl->ndels == 1 && cl->del_timer) {
    struct timeval tv = {0, DEL_DELAY_MS * 1000};
    evtimer_add(cl->del_timer, &tv);
  }
}

static void del_done(req_t *r, int status, rlock_reply_t *reply) {
  client_t *cl = r->ctx;
  rlock_reply_free(reply); /* the latches expire anyway */
  cl->dels_inflight--;
  rlock__client_linger_check(cl);
}

/* One DEL of the keys dels[idx[0..n)], awaited only when closing: the latches expire anyway. */
static void send_del(client_t *cl, const batcher_t *b, size_t first, size_t n) {
  const char **argv = malloc((n + 1) * sizeof *argv);
  size_t *lens = malloc((n + 1) * sizeof *lens);
  if (argv && lens) {
    argv[0] = "DEL", lens[0] = 3;
    for (size_t i = 0; i < n; i++) argv[i + 1] = del_key(cl, batcher_item(b, first + i), &lens[i + 1]);
    req_t *r = rlock__req_new((int)n + 1, argv, lens, cl->opt.command_timeout_ms, del_done, cl);
    if (r) {
      cl->dels_inflight++;
      rlock__client_send(cl, argv[1], lens[1], r); /* awaited only when closing */
    }
  }
  free(argv);
  free(lens);
}

/* The queued latch keys in one DEL (one per slot where slots matter). */
void rlock__latch_send_dels(client_t *cl) {
  if (cl->del_timer) evtimer_del(cl->del_timer);
  uint16_t *slots = NULL;
  if (cl->ndels && cl->cmd.state != CS_CLOSED) {
    if (cl->topo->slots_matter && (slots = malloc(cl->ndels * sizeof *slots)))
      for (size_t i = 0; i < cl->ndels; i++) {
        size_t len;
        const char *key = del_key(cl, i, &len);
        slots[i] = rlock__names_slot(key, len);
      }
    batcher_t b;
    size_t first, n;
    if ((slots || !cl->topo->slots_matter) && !rlock__batcher_init(&b, slots, cl->ndels, cl->ndels)) {
      while (rlock__batcher_next(&b, &first, &n)) send_del(cl, &b, first, n);
      rlock__batcher_free(&b);
    } /* out of memory: the latches expire on their own */
  }
  free(slots);
  cl->ndels = cl->delkeys_n = 0;
}

void rlock__latch_timer_cb(evutil_socket_t fd, short what, void *arg) { rlock__latch_send_dels(arg); }
