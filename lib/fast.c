/* fast.c -- the fast path: a blocking lock or unlock done on the calling
 * thread, with no hand-off to the I/O thread.
 *
 * A sync call through the I/O thread costs two thread hand-offs (a wake-up of
 * the I/O thread, a futex wake of the caller). When the client is otherwise
 * idle for a lock name, the calling thread instead writes the request on the
 * client's fast connection (one per client, a blocking socket used by one
 * thread at a time: a thread that finds it taken goes through the I/O thread)
 * and reads the answer itself: the system calls of a bare blocking client.
 *
 * What it covers: rlock_lock_acquire (lock, trylock) and rlock_lock_release
 * (unlock) of a reentrant lock, owner RLOCK_OWNER_SELF (or the calling
 * thread's own id), watchdog lease, no cancel token; on one server or a
 * Sentinel master (slots do not matter), plain TCP or unix socket (not TLS),
 * no replica-sync WAIT needed (policy off, or the node reported no replica),
 * the command connection up. Anything else, and a name the client is busy
 * with (an op of any thread submitted and not finished, an undo in flight, a
 * handoff mark: counted per slot, a hash of the name), goes through the I/O
 * thread as before.
 *
 * The I/O thread still owns every piece of engine state. What it must know is
 * posted (a buffer under pmu) and applied in order by rlock__fast_drain: a
 * hold to renew (the watchdog), an unlock in flight
 * (a renewal that finds the hold gone meanwhile is not a loss), an unlock's
 * outcome, a handoff mark. The drain runs before the I/O thread starts any op
 * submitted later (so a thread's later calls see its earlier fast ones),
 * before it reads a renewal's answer, when the client closes, and at most
 * drain_ms after the first post (a timer: min(20 ms, watchdog lease / 10),
 * well inside the first renewal's deadline).
 *
 * A release checks the server's count against the client's (the unlock
 * script's expected count). The calling thread knows the count of the holds
 * it took on the fast path (a small per-thread table); the entry is trusted
 * only while no hold change of the I/O thread's own touched the name's slot
 * (an epoch per slot: slow acquires and releases, losses, relets bump it):
 * otherwise the release goes through the I/O thread, which knows. A fast
 * call learns a count only if the epoch did not move while it ran (a force
 * unlock or a loss meanwhile is not in the count it computed).
 *
 * Its requests write no latch (the scripts' check-only form, op->unlatched):
 * the calling thread reads the answer at once, so nothing needs one unless
 * the answer is lost; the scripts only check that no latch of the id exists
 * (one that does was written by a later request of the same id: the copy is
 * late and changes nothing). A request whose answer is lost (timeout,
 * connection error) is handed to the I/O thread (op->fast_lost) with the
 * count it started from (op->fast_count):
 *   - a first acquire (count 0) is undone (reentrant_acquire_undo.lua: its
 *     tombstone stops the copy for good, and a count above fast_count is the
 *     copy's hold, given back), then tried again with a fresh id, as any try;
 *     a re-entry is latched (see call_begin): re-sent with the same id;
 *   - an unlock is re-sent with the same id and the re-send mark: a count one
 *     below fast_count (the field gone for the last hold) says the copy was
 *     applied, and the latch the re-send writes stops the copy if it comes
 *     later. The first copy does latch the answers a count cannot tell
 *     (not held, a count mismatch, waiters notified): the re-send reads them.
 * A copy that lands after its latch expired is the same hazard as for a copy
 * of the command connection (the latch TTL is sized for it).
 *
 * Closing: a fast call runs in a window (rlock__fast_begin/_end, api.c) that
 * covers the submit of the op it hands over. rlock_client_free lets the I/O
 * thread close only once every window closed (rlock__fast_close_wait: past
 * min(command timeout, 500 ms) it cuts the connection, and the call's answer
 * is lost), so its posts are drained and an acquire whose answer was lost is
 * undone (rlock__op_end_unstarted). */
#include "client.h"
#include "hooks.h"
#include "op.h"
#include "resp.h"

#include <event2/bufferevent.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define ACQUIRE_LATCH "rlock_acquire_latch"
#define UNLOCK_LATCH "redisson_unlock_latch"
#define LATCH_ROOM 256
#define DRAIN_MS 20

/* ------------------------------------------------------------ slots */

unsigned rlock__fast_slot(const char *name, size_t len) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
  return (h ^ (h >> 16)) & (FAST_SLOTS - 1);
}

void rlock__fast_bump(client_t *cl, const char *name, size_t len) {
  atomic_fetch_add(&cl->fast.epoch[rlock__fast_slot(name, len)], 1);
}

void rlock__fast_busy(client_t *cl, int slot, int delta) {
  if (slot >= 0) atomic_fetch_add(&cl->fast.busy[slot], delta);
}

/* ------------------------------------------------------------ per-thread table
 * The count of the holds this thread took on the fast path, per (client,
 * name): count >= 0 known (valid while the slot's epoch is `epoch`), -1 not. */
#define FTAB 16
typedef struct fent {
  uint64_t serial; /* the client's (0: free) */
  size_t len, cap;
  char *name;
  int64_t count;
  uint32_t epoch;
  uint64_t used;
} fent_t;
typedef struct ftab {
  fent_t e[FTAB];
  uint64_t tick;
  rlock__prng_t prng; /* request ids of this thread's fast calls */
  unsigned fork_gen;  /* seeded in this process (a forked child seeds again: two
                         children of one thread must never draw the same ids) */
  bool seeded;
} ftab_t;

static pthread_key_t ftab_key;
static pthread_once_t ftab_once = PTHREAD_ONCE_INIT;
static _Thread_local ftab_t *ftab_mine;
static _Atomic uint64_t next_serial = 1;

static void ftab_free(void *p) {
  ftab_t *t = p;
  for (int i = 0; i < FTAB; i++) free(t->e[i].name);
  free(t);
  ftab_mine = NULL;
}

static void ftab_key_make(void) { pthread_key_create(&ftab_key, ftab_free); }

static ftab_t *ftab_get(void) {
  ftab_t *m = ftab_mine;
  if (m && m->seeded && m->fork_gen != rlock__fork_generation()) {
    /* a forked child: its parent's clients are not its own, and its ids
     * must differ from its parent's and its siblings' */
    for (int i = 0; i < FTAB; i++) m->e[i].serial = 0;
    m->seeded = false;
  }
  if (m && !m->seeded) {
    rlock__prng_seed(&m->prng);
    m->fork_gen = rlock__fork_generation();
    m->seeded = true;
  }
  if (m) return m;
  pthread_once(&ftab_once, ftab_key_make);
  ftab_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  if (pthread_setspecific(ftab_key, t)) {
    free(t);
    return NULL;
  }
  rlock__prng_seed(&t->prng);
  t->fork_gen = rlock__fork_generation();
  t->seeded = true;
  return ftab_mine = t;
}

static fent_t *ftab_find(ftab_t *t, const client_t *cl, const char *name, size_t len) {
  for (int i = 0; i < FTAB; i++) {
    fent_t *e = &t->e[i];
    if (e->serial == cl->fast.serial && e->len == len && !memcmp(e->name, name, len)) {
      e->used = ++t->tick;
      return e;
    }
  }
  return NULL;
}

/* The entry of (cl, name), made (the least recently used one replaced) if
 * missing, count unknown. NULL: out of memory. */
static fent_t *ftab_put(ftab_t *t, const client_t *cl, const char *name, size_t len) {
  fent_t *e = ftab_find(t, cl, name, len);
  if (e) return e;
  e = &t->e[0];
  for (int i = 1; i < FTAB; i++)
    if (t->e[i].used < e->used) e = &t->e[i];
  if (e->cap < len) {
    char *p = realloc(e->name, len);
    if (!p) return NULL;
    e->name = p;
    e->cap = len;
  }
  memcpy(e->name, name, len);
  e->len = len;
  e->serial = cl->fast.serial;
  e->count = -1;
  e->used = ++t->tick;
  return e;
}

/* The known count of e (-1: unknown): its epoch must still be the slot's. */
static int64_t fent_count(const client_t *cl, const fent_t *e, unsigned slot) {
  if (!e || e->count < 0) return -1;
  return e->epoch == atomic_load(&cl->fast.epoch[slot]) ? e->count : -1;
}

static void fent_set(client_t *cl, fent_t *e, unsigned slot, int64_t count) {
  if (!e) return;
  e->count = count;
  e->epoch = atomic_load(&cl->fast.epoch[slot]);
}

/* After a call made when the slot's epoch was `seen`: the count it gives is
 * known only if no hold change of the I/O thread's touched the slot since
 * (one made meanwhile, e.g. a hold taken for this thread by another thread,
 * is not in `count`), else unknown. */
static void fent_after(client_t *cl, fent_t *e, unsigned slot, int64_t count, uint32_t seen) {
  if (!e) return;
  e->epoch = atomic_load(&cl->fast.epoch[slot]);
  e->count = e->epoch == seen ? count : -1;
}

/* ------------------------------------------------------------ posts */

enum { P_ACQUIRED = 1, P_DEL, P_RELEASING, P_RELEASED, P_ABANDONED };

typedef struct post {
  uint8_t type;
  bool notified; /* P_RELEASED: the unlock reached subscribers (handoff) */
  int8_t held;   /* what the caller added to ST_HELD for it (the drain takes it back) */
  uint8_t skip;  /* the drain: SKIP_ALL, SKIP_MARK (see cancel_pairs) */
  uint16_t slot;
  uint32_t len;  /* name (P_DEL: the latch key) */
  uint32_t olen; /* owner id */
  int32_t how;   /* P_RELEASED: release_t */
  int64_t at;    /* P_ACQUIRED: sent_at */
  uint64_t owner;
  /* then len bytes of name, olen bytes of owner id, padded to 8 */
} post_t;

static size_t post_size(size_t len, size_t olen) { return (sizeof(post_t) + len + olen + 7) & ~(size_t)7; }

enum { SKIP_ALL = 1, SKIP_MARK = 2 };
#define LOOKAHEAD 8

static bool same_hold(const post_t *a, const post_t *b) {
  return a->len == b->len && a->olen == b->olen && !memcmp(a + 1, b + 1, a->len + a->olen);
}

/* The next post of the same hold as p after offset off (latch DELs and other
 * holds passed over, at most LOOKAHEAD posts), or NULL. *at: its offset. */
static post_t *next_of(const fast_buf_t *b, size_t off, const post_t *p, size_t *at) {
  for (int i = 0; i < LOOKAHEAD && off < b->n; i++) {
    post_t *q = (post_t *)(void *)(b->p + off);
    *at = off + post_size(q->len, q->olen);
    if (q->type != P_DEL && same_hold(p, q)) return q;
    off = *at;
  }
  return NULL;
}

/* Pairs inside one batch need no bookkeeping: an unlock-in-flight mark whose
 * outcome is in the same batch protects nothing any more (SKIP_MARK on both:
 * the outcome still applies), and a hold taken from nothing and given back
 * entirely in the same batch was never known to the watchdog: nothing to
 * track, nothing to release (SKIP_ALL on the three; a handoff mark
 * stays). In steady lock/unlock loops the drain then touches no
 * hold at all. */
static void cancel_pairs(fast_buf_t *b) {
  for (size_t off = 0, next; off < b->n; off = next) {
    post_t *p = (post_t *)(void *)(b->p + off);
    next = off + post_size(p->len, p->olen);
    size_t at1, at2;
    post_t *r, *q;
    if (p->type == P_ACQUIRED && p->held == 1 && (r = next_of(b, next, p, &at1)) && r->type == P_RELEASING &&
        (q = next_of(b, at1, p, &at2)) && q->type == P_RELEASED && q->held == -1 && q->how == REL_ALL && !q->notified) {
      p->skip = r->skip = q->skip = SKIP_ALL;
    } else if (p->type == P_RELEASING && !p->skip && (q = next_of(b, next, p, &at1)) &&
               (q->type == P_RELEASED || q->type == P_ABANDONED)) {
      p->skip = SKIP_ALL;
      q->skip |= SKIP_MARK;
    }
  }
}

/* Appends posts (n of them, built by the caller in `items`). false: out of
 * memory (nothing appended). */
typedef struct post_item {
  uint8_t type;
  bool notified;
  int held;
  int how;
  int64_t at;
  uint64_t owner;
  const char *name, *owner_id;
  size_t len, olen;
} post_item_t;

static bool post_items(client_t *cl, const post_item_t *items, int n, unsigned slot) {
  fast_t *f = &cl->fast;
  /* only inside a fast call window: free's drain (begin_close) comes after
   * every window closed, so no post is left behind */
  RLOCK__ASSERT(atomic_load(&f->calls) > 0 && !atomic_load(&cl->stopping));
  size_t need = 0;
  for (int i = 0; i < n; i++) need += post_size(items[i].len, items[i].olen);
  pthread_mutex_lock(&f->pmu);
  if (f->posts.cap - f->posts.n < need) {
    size_t cap = f->posts.cap ? f->posts.cap : 4096;
    while (cap - f->posts.n < need) cap *= 2;
    unsigned char *p = realloc(f->posts.p, cap);
    if (!p) {
      pthread_mutex_unlock(&f->pmu);
      return false;
    }
    f->posts.p = p;
    f->posts.cap = cap;
  }
  for (int i = 0; i < n; i++) {
    const post_item_t *it = &items[i];
    post_t *p = (post_t *)(void *)(f->posts.p + f->posts.n);
    memset(p, 0, sizeof *p);
    p->type = it->type;
    p->notified = it->notified;
    p->held = (int8_t)it->held;
    p->slot = (uint16_t)slot;
    p->len = (uint32_t)it->len;
    p->olen = (uint32_t)it->olen;
    p->how = it->how;
    p->at = it->at;
    p->owner = it->owner;
    memcpy((char *)(p + 1), it->name, it->len);
    if (it->olen) memcpy((char *)(p + 1) + it->len, it->owner_id, it->olen);
    f->posts.n += post_size(it->len, it->olen);
  }
  for (int i = 0; i < n; i++)
    if (items[i].held) stat_add(cl, ST_HELD, items[i].held); /* `held` is exact at once */
  bool first = !atomic_load(&f->posted);
  atomic_store(&f->posted, true);
  pthread_mutex_unlock(&f->pmu);
  /* The first post wakes the I/O thread unless it is in a pass: a pass's end
   * (rlock__client_pass_end) clears cl->awake, then looks at `posted` (the
   * submit stack's protocol: either the pass sees the post, or the post sees
   * awake clear). Woken, it arms the drain timer (rlock__fast_wake). */
  if (first && !atomic_load(&cl->awake)) rlock__client_wake(cl);
  return true;
}

static void drain_cb(evutil_socket_t fd, short what, void *arg) {
  client_t *cl = arg;
  cl->fast.drain_armed = false;
  rlock__fast_drain(cl);
  rlock__client_flush(cl);
}

void rlock__fast_wake(client_t *cl) {
  fast_t *f = &cl->fast;
  if (!f->on || f->drain_armed || !f->drain_ev) return;
  if (!atomic_load(&f->posted)) return; /* seq_cst: the poster stores it, then reads cl->awake */
  struct timeval tv;
  rlock__tv_from_ms(&tv, f->drain_ms);
  if (!evtimer_add(f->drain_ev, &tv)) f->drain_armed = true;
}

/* The releasing table's key: name, a NUL, owner id; in buf (REL_ROOM bytes)
 * or, for a longer name, allocated (free it when *key != buf). NULL: out of
 * memory. */
#define REL_ROOM 1024
static char *rel_key(char *buf, const char *name, size_t len, const char *owner_id, size_t olen, size_t *klen) {
  char *k = len + 1 + olen <= REL_ROOM ? buf : malloc(len + 1 + olen);
  if (!k) return NULL;
  memcpy(k, name, len);
  k[len] = 0;
  memcpy(k + len + 1, owner_id, olen);
  *klen = len + 1 + olen;
  return k;
}

static void releasing_add(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen, int d) {
  char buf[REL_ROOM];
  size_t k;
  char *key = rel_key(buf, name, len, owner_id, olen, &k);
  if (!key) return; /* out of memory: a renewal racing with its unlock may report it lost */
  map_t *m = &cl->fast.releasing;
  void **slot = rlock__map_slot(m, key, k);
  intptr_t n = (slot ? (intptr_t)*slot : 0) + d;
  if (n <= 0) {
    if (slot) rlock__map_del(m, key, k);
  } else if (slot) {
    *slot = (void *)n;
  } else {
    rlock__map_put(m, key, k, (void *)n); /* out of memory: as above */
  }
  if (key != buf) free(key);
}

int64_t rlock__fast_releasing_n(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen) {
  if (!cl->fast.releasing.count) return 0;
  char buf[REL_ROOM];
  size_t k;
  char *key = rel_key(buf, name, len, owner_id, olen, &k);
  void *n = key ? rlock__map_get(&cl->fast.releasing, key, k) : NULL;
  if (key != buf) free(key);
  return (int64_t)(intptr_t)n;
}

bool rlock__fast_releasing(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen) {
  return rlock__fast_releasing_n(cl, name, len, owner_id, olen) > 0;
}

void rlock__fast_release_ended(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen) {
  releasing_add(cl, name, len, owner_id, olen, -1);
}

void rlock__fast_release_began(client_t *cl, const char *name, size_t len, const char *owner_id, size_t olen) {
  releasing_add(cl, name, len, owner_id, olen, 1);
}

void rlock__fast_drain(client_t *cl) {
  fast_t *f = &cl->fast;
  RLOCK__ASSERT(rlock__client_on_io_thread(cl)); /* the engine's state is the I/O thread's */
  /* nothing posted: no mutex (the check every pass that starts ops makes) */
  if (!f->on || !atomic_load(&f->posted)) return;
  pthread_mutex_lock(&f->pmu);
  if (!atomic_load(&f->posted)) {
    pthread_mutex_unlock(&f->pmu);
    return;
  }
  fast_buf_t b = f->posts;
  f->posts = f->spare;
  f->posts.n = 0;
  f->spare = (fast_buf_t){0};
  atomic_store(&f->posted, false);
  pthread_mutex_unlock(&f->pmu);
  watchdog_t *wd = &cl->wd;
  cancel_pairs(&b);
  for (size_t off = 0; off < b.n;) {
    post_t *p = (post_t *)(void *)(b.p + off);
    off += post_size(p->len, p->olen);
    if (p->skip & SKIP_ALL) continue; /* the caller's share of ST_HELD cancels out too */
    const char *name = (const char *)(p + 1), *oid = name + p->len;
    char owner_id[64];
    size_t olen = p->olen < sizeof owner_id ? p->olen : sizeof owner_id - 1;
    memcpy(owner_id, oid, olen);
    owner_id[olen] = 0;
    /* a post the caller counted in ST_HELD: the watchdog counts it now, the
     * caller's share goes; rlock_client_stats never sees both (statmu) */
    if (p->held) pthread_mutex_lock(&f->statmu);
    switch (p->type) {
    case P_ACQUIRED:
      if (rlock__watchdog_acquired(wd, name, p->len, p->owner, owner_id, cl->opt.watchdog_timeout_ms, true, p->at))
        rlock__client_lost(cl, name, p->len, p->owner, RLOCK_LOST_RENEWAL_FAILED); /* cannot renew it */
      break;
    case P_DEL: rlock__client_queue_del(cl, name, p->len); break;
    case P_RELEASING: releasing_add(cl, name, p->len, owner_id, olen, 1); break;
    case P_RELEASED:
      if (!(p->skip & SKIP_MARK)) releasing_add(cl, name, p->len, owner_id, olen, -1);
      if (rlock__watchdog_kind_is(wd, name, p->len, owner_id, 0))
        rlock__watchdog_released(wd, name, p->len, owner_id, (release_t)p->how, cl->opt.watchdog_timeout_ms);
      if (p->notified) {
        cl->lock_up->handoff_mark(cl, name, p->len);
        atomic_fetch_sub(&f->hand[p->slot], 1); /* the mark counts from now on */
      }
      break;
    case P_ABANDONED:
      if (!(p->skip & SKIP_MARK)) releasing_add(cl, name, p->len, owner_id, olen, -1);
      break;
    }
    if (p->held) {
      stat_add(cl, ST_HELD, -p->held);
      pthread_mutex_unlock(&f->statmu);
    }
  }
  b.n = 0;
  pthread_mutex_lock(&f->pmu);
  if (!f->spare.p) f->spare = b;
  else free(b.p);
  pthread_mutex_unlock(&f->pmu);
}

/* ------------------------------------------------------------ the I/O thread's side */

void rlock__fast_cmd_ready(client_t *cl) {
  fast_t *f = &cl->fast;
  if (!f->on) return;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  conn_t *c = &cl->cmd;
  int fd = c->bev ? bufferevent_getfd(c->bev) : -1;
  if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) {
    atomic_store(&f->gen, 0);
    return;
  }
  bool nowait = cl->opt.replica_sync == RLOCK_REPLICA_SYNC_OFF || rlock__sync_replicas(c) <= 0;
  pthread_mutex_lock(&f->amu);
  bool same = f->addrlen == sl && !memcmp(&f->addr, &ss, sl) && atomic_load(&f->gen);
  if (!same) {
    memcpy(&f->addr, &ss, sl);
    f->addrlen = sl;
    if (++f->next_gen == 0) f->next_gen = 1;
  }
  atomic_store(&f->nowait, nowait);
  atomic_store(&f->gen, f->next_gen);
  pthread_mutex_unlock(&f->amu);
}

void rlock__fast_cmd_down(client_t *cl) {
  if (!cl->fast.on) return;
  atomic_store(&cl->fast.gen, 0);
}

/* ------------------------------------------------------------ lifecycle */

int rlock__fast_init(client_t *cl) {
  fast_t *f = &cl->fast;
  f->fd = -1;
  f->serial = atomic_fetch_add(&next_serial, 1);
  pthread_mutex_init(&f->mu, NULL);
  pthread_mutex_init(&f->amu, NULL);
  pthread_mutex_init(&f->pmu, NULL);
  pthread_mutexattr_t ra;
  pthread_mutexattr_init(&ra);
  pthread_mutexattr_settype(&ra, PTHREAD_MUTEX_RECURSIVE); /* a lost callback may read the stats */
  pthread_mutex_init(&f->statmu, &ra);
  pthread_mutexattr_destroy(&ra);
  rlock__map_init(&f->releasing);
  f->on = cl->opt.fast_path && !cl->topo->slots_matter && cl->url.kind != URL_TLS;
  int64_t ms = cl->opt.watchdog_timeout_ms / 10;
  f->drain_ms = ms < 1 ? 1 : ms > DRAIN_MS ? DRAIN_MS : ms;
  if (f->on && !(f->drain_ev = evtimer_new(cl->base, drain_cb, cl))) return RLOCK_ENOMEM;
  return 0;
}

static void fast_close_fd(fast_t *f) {
  pthread_mutex_lock(&f->amu); /* not under a cut (rlock__fast_close_wait): its fd stays this one */
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  pthread_mutex_unlock(&f->amu);
  if (f->reader) redisReaderFree(f->reader);
  f->reader = NULL;
}

void rlock__fast_destroy(client_t *cl) {
  fast_t *f = &cl->fast;
  fast_close_fd(f);
  free(f->posts.p);
  free(f->spare.p);
  f->posts = f->spare = (fast_buf_t){0};
  rlock__map_free(&f->releasing);
  pthread_mutex_destroy(&f->mu);
  pthread_mutex_destroy(&f->amu);
  pthread_mutex_destroy(&f->pmu);
  pthread_mutex_destroy(&f->statmu);
}

/* ------------------------------------------------------------ the fast connection */

static int64_t ms_left(int64_t deadline) {
  int64_t l = deadline - rlock_now_ms();
  return l > 0 ? l : 0;
}

/* Writes all of buf (blocking socket, SO_SNDTIMEO). 0, or -1 with
 * *sent: whether any byte left. */
static int send_all(int fd, const char *buf, size_t len, bool *sent) {
  *sent = false;
  while (len) {
    ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    *sent = true;
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

/* The next reply (owned by the caller), reading as needed; NULL: timeout,
 * connection error or protocol error (the connection is then unusable). */
static rlock_reply_t *read_reply(fast_t *f) {
  for (;;) {
    void *reply = NULL;
    if (redisReaderGetReply(f->reader, &reply) != REDIS_OK) return NULL;
    if (reply) return reply;
    char buf[4096];
    ssize_t n = recv(f->fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return NULL; /* closed, error, or SO_RCVTIMEO: EAGAIN */
    if (redisReaderFeed(f->reader, buf, (size_t)n) != REDIS_OK) return NULL;
  }
}

/* The handshake of a command connection, blocking: the list conn.c sends
 * too (handshake.c). An error reply fails it, and so does a reply the
 * topology's check refuses (Sentinel's ROLE: a master only). */
static int handshake(client_t *cl, fast_t *f) {
  hs_list_t hs;
  rlock__handshake_list(&cl->net, NULL, &hs);
  char *cmds[HS_MAX];
  size_t lens[HS_MAX];
  int n = 0, rc = 0;
  for (; n < hs.n; n++) {
    lens[n] = rlock__resp_size(hs.cmd[n].argc, hs.cmd[n].argv, NULL);
    if (!(cmds[n] = malloc(lens[n]))) {
      rc = -1;
      break;
    }
    rlock__resp_write(cmds[n], hs.cmd[n].argc, hs.cmd[n].argv, NULL);
  }
  for (int i = 0; i < n && !rc; i++) {
    bool sent;
    if (send_all(f->fd, cmds[i], lens[i], &sent)) rc = -1;
  }
  for (int i = 0; i < n && !rc; i++) {
    rlock_reply_t *r = read_reply(f);
    char why[120];
    if (!r) rc = -1;
    else if (hs.cmd[i].kind == HS_CHECKED) rc = cl->topo->handshake_check(cl, r, why, sizeof why) ? -1 : 0;
    else if (r->type == RLOCK_REPLY_ERROR) rc = -1;
    rlock_reply_free(r);
  }
  for (int i = 0; i < n; i++) free(cmds[i]);
  return rc;
}

static void set_timeout(int fd, int opt, int64_t ms) {
  struct timeval tv;
  rlock__tv_from_ms(&tv, ms);
  setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

/* Connects the fast connection to where the command connection is (gen). */
static int fast_connect(client_t *cl, fast_t *f, unsigned gen) {
  struct sockaddr_storage ss;
  socklen_t sl;
  pthread_mutex_lock(&f->amu);
  if (atomic_load(&f->gen) != gen) {
    pthread_mutex_unlock(&f->amu);
    return -1;
  }
  ss = f->addr;
  sl = f->addrlen;
  pthread_mutex_unlock(&f->amu);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  pthread_mutex_lock(&f->amu); /* published at once: closing can cut it (rlock__fast_close_wait) */
  bool cut = f->cut;
  if (!cut) f->fd = fd;
  pthread_mutex_unlock(&f->amu);
  if (cut) {
    close(fd);
    return -1;
  }
  int64_t deadline = rlock_now_ms() + cl->opt.connect_timeout_ms;
  if (connect(fd, (struct sockaddr *)&ss, sl) != 0) {
    if (errno != EINPROGRESS) goto fail;
    struct pollfd p = {fd, POLLOUT, 0};
    int err = 0;
    socklen_t el = sizeof err;
    if (poll(&p, 1, (int)ms_left(deadline)) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) goto fail;
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) goto fail;
  if (ss.ss_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  set_timeout(fd, SO_RCVTIMEO, ms_left(deadline) + 1);
  set_timeout(fd, SO_SNDTIMEO, ms_left(deadline) + 1);
  if (!(f->reader = rlock__reply_reader_new(true)) || handshake(cl, f)) {
    fast_close_fd(f);
    return -1;
  }
  set_timeout(fd, SO_RCVTIMEO, cl->opt.command_timeout_ms);
  set_timeout(fd, SO_SNDTIMEO, cl->opt.command_timeout_ms);
  f->fd_gen = gen;
  return 0;
fail:
  fast_close_fd(f);
  return -1;
}

/* ------------------------------------------------------------ calls */

/* Whether op may take the fast path at all (before the connection is taken). */
static bool eligible(const op_t *op, unsigned *slot) {
  client_t *cl = op->cl;
  fast_t *f = &cl->fast;
  if (!f->on || !cl->lock_up->fast_fits(op->lock) || op->cancel) return false;
  if (op->owner != (RLOCK_OWNER_THREAD | rlock__gettid())) return false;
  if (op->kind == OP_ACQUIRE && op->lease_ms != RLOCK_LEASE_WATCHDOG) return false;
  if (!atomic_load(&f->gen) || !atomic_load(&f->nowait) || atomic_load(&cl->closing)) return false;
  if (rlock__client_on_io_thread(cl)) return false;
  *slot = rlock__fast_slot(op->lock->name, op->lock->len);
  return !atomic_load(&f->busy[*slot]) && !atomic_load(&f->hand[*slot]);
}

/* Takes the fast connection, connected (false: not now). */
static bool take_conn(client_t *cl) {
  fast_t *f = &cl->fast;
  if (pthread_mutex_trylock(&f->mu)) return false;
  unsigned gen = atomic_load(&f->gen);
  if (f->fd >= 0 && f->fd_gen != gen) fast_close_fd(f); /* the command connection moved: follow it */
  if (f->fd < 0 && (!gen || f->failed_gen == gen || fast_connect(cl, f, gen))) {
    if (gen) f->failed_gen = gen;
    pthread_mutex_unlock(&f->mu);
    return false;
  }
  return true;
}

/* What a round trip on the fast connection gave. */
typedef enum { RT_REPLY, RT_UNSENT, RT_LOST } rt_t;

/* Sends r and reads its reply (NOSCRIPT: once more as EVAL). RT_UNSENT:
 * nothing reached the socket, or the server refused it before it ran or
 * wrote (rlock__reply_not_run, READONLY: nothing applied); RT_LOST: the answer is unknown
 * (the connection is closed: unusable). */
static rt_t round_trip(client_t *cl, req_t *r, rlock_reply_t **out) {
  fast_t *f = &cl->fast;
  for (int pass = 0;; pass++) {
    bool sent;
    if (send_all(f->fd, r->cmd, r->len, &sent)) {
      fast_close_fd(f);
      return sent || pass ? RT_LOST : RT_UNSENT;
    }
    stat_add(cl, ST_COMMANDS, 1);
    stat_add(cl, ST_WRITES, 1);
    stat_add(cl, ST_SCRIPTS, 1);
    rlock_reply_t *reply = read_reply(f);
    if (!reply) {
      fast_close_fd(f);
      return RT_LOST;
    }
    if (pass == 0 && r->script && rlock__reply_is_error(reply, "NOSCRIPT")) {
      rlock_reply_free(reply);
      stat_add(cl, ST_NOSCRIPT, 1);
      if (rlock__script_to_eval(r)) return RT_UNSENT; /* out of memory: nothing applied */
      continue;
    }
    /* refused before it ran (BUSY, LOADING...: the I/O thread sends it again
     * after a backoff, conn.c) or before it wrote (READONLY, a demoted master:
     * under Sentinel the I/O thread holds it until back on the master) */
    if (rlock__reply_not_run(reply) || rlock__reply_is_error(reply, "READONLY")) {
      rlock_reply_free(reply);
      return RT_UNSENT;
    }
    *out = reply;
    return RT_REPLY;
  }
}

static void no_done(req_t *r, int status, rlock_reply_t *reply) { (void)r, (void)status, (void)reply; }

/* What a fast call starts with. */
typedef struct call {
  unsigned slot; /* the name's */
  ftab_t *t;     /* the calling thread's table */
  fent_t *e;     /* the name's entry in it (NULL: none) */
  int64_t count; /* the hold count it knows */
  char buf[LATCH_ROOM];
  bytes_t latch; /* the new request id's latch key (p NULL: out of memory) */
} call_t;

/* Whether op goes fast now: eligible, the count known and at least `least`,
 * the fast connection taken (then a fresh request id, its latch key with
 * prefix in c). false: nothing was taken. */
static bool call_begin(op_t *op, call_t *c, int64_t least, const char *prefix, size_t plen) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  if (!eligible(op, &c->slot)) return false;
  c->t = ftab_get();
  c->e = c->t ? ftab_find(c->t, cl, l->name, l->len) : NULL;
  c->count = fent_count(cl, c->e, c->slot);
  if (c->count < least || !take_conn(cl)) return false;
  if (atomic_load(&cl->closing)) { /* free began: send nothing more */
    pthread_mutex_unlock(&cl->fast.mu);
    return false;
  }
  rlock__prng_hex(&c->t->prng, op->reqid);
  /* the first copy writes no latch (see the top), but for a re-entry: if the
   * thread's hold was lost behind its back (a force unlock, its lease ran
   * out), the copy takes the lock afresh, and an undo that keeps `count`
   * holds would keep the copy's hold for the lost one (the loss then never
   * reported); its latch tells them apart. A first hold (count 0) has no such
   * ambiguity: all the owner holds above 0 is the copy's. */
  op->unlatched = op->kind == OP_RELEASE || c->count == 0;
  op->fast_count = c->count;
  op->latch_n = 0; /* the op's cached latch key (lock.c) was another id's */
  c->latch = (bytes_t){c->buf, 0};
  if (rlock__names_prefixed_suffix_in(&c->latch, c->buf, sizeof c->buf, prefix, plen, l->name, l->len, op->reqid,
                                      sizeof op->reqid - 1))
    c->latch.p = NULL;
  return true;
}

static void call_latch_free(call_t *c) {
  if (c->latch.p && c->latch.p != c->buf) free(c->latch.p);
}

/* Gives up before anything was sent: op goes to the I/O thread as it came. */
static bool call_abort(op_t *op, call_t *c) {
  call_latch_free(c);
  pthread_mutex_unlock(&op->cl->fast.mu);
  op->reqid[0] = 0, op->latch_n = 0;
  op->unlatched = false;
  return false;
}

static bool fast_acquire(op_t *op, int *rc) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  call_t c;
  /* the count must be known: the hold it adds is then exactly this thread's
   * knowledge (a first acquire of a name goes through the I/O thread) */
  if (!call_begin(op, &c, 0, ACQUIRE_LATCH, sizeof ACQUIRE_LATCH - 1)) return false;
  unsigned slot = c.slot;
  fent_t *e = c.e;
  int64_t count = c.count;
  bytes_t latch = c.latch;
  op->retries = 0;
  op->sent_at = rlock_now_ms();
  op->id_written = false;
  req_t *r = latch.p ? cl->lock_up->fast_try_req(op, &latch, no_done) : NULL;
  if (!r) return call_abort(op, &c);
  stat_add(cl, ST_ATTEMPTS, 1);
  rlock_reply_t *reply = NULL;
  rt_t rt = round_trip(cl, r, &reply);
  rlock__req_free(r);
  pthread_mutex_unlock(&cl->fast.mu);
  bool done = false;
  if (rt == RT_LOST) {
    op->id_written = true; /* the I/O thread undoes it (see the top), then a fresh try;
                              latched (a re-entry): re-sent with the same id */
    op->fast_lost = true;
  } else if (rt == RT_REPLY) {
    int64_t ttl = -1;
    bool err = reply->type == RLOCK_REPLY_ERROR;
    int k = err ? KIND_BUSY : cl->lock_up->fast_try_reply(op, reply, &ttl);
    if (k == KIND_GRANTED) {
      post_item_t it[2] = {{.type = P_ACQUIRED,
                            .held = count == 0,
                            .at = op->sent_at,
                            .owner = op->owner,
                            .name = l->name,
                            .len = l->len,
                            .owner_id = op->owner_id,
                            .olen = op->owner_len},
                           {.type = P_DEL, .name = latch.p, .len = latch.n}};
      if (!post_items(cl, it, op->unlatched ? 1 : 2, slot)) {
        /* cannot tell the watchdog: the I/O thread takes it from here
         * (unlatched: it gives the hold back, then tries again with a fresh
         * id; latched: the same id again, its latch answers "applied") */
        op->id_written = true;
        op->fast_lost = true;
      } else {
        fent_after(cl, e, slot, count + 1, e->epoch);
        stat_add(cl, ST_FAST, 1);
        *rc = 0;
        done = true;
      }
    } else if (k == KIND_BUSY && !err && op->wait_ms == 0) {
      stat_add(cl, ST_FAST, 1);
      *rc = rlock__fail(RLOCK_EBUSY, "timed out waiting for the lock");
      done = true;
    } else if (k < 0) {
      *rc = k; /* try_reply set the message */
      done = true;
    }
    /* busy with a wait, or an error reply (nothing applied): the I/O thread
     * starts over (a fresh try; it waits on the lock's channel) */
  }
  rlock_reply_free(reply);
  call_latch_free(&c);
  if (done) cl->lock_up->op_recycle(cl, op);
  else if (!op->fast_lost) op->reqid[0] = 0, op->latch_n = 0, op->unlatched = false;
  return done;
}

static bool fast_release(op_t *op, int *rc) {
  client_t *cl = op->cl;
  rlock_lock_t *l = op->lock;
  call_t c;
  if (!call_begin(op, &c, 1, UNLOCK_LATCH, sizeof UNLOCK_LATCH - 1)) return false;
  unsigned slot = c.slot;
  fent_t *e = c.e;
  int64_t count = c.count;
  bytes_t latch = c.latch;
  op->lease_ms = cl->opt.watchdog_timeout_ms; /* the TTL the holds left need */
  req_t *r = latch.p ? cl->lock_up->fast_release_req(op, &latch, count - 1, no_done) : NULL;
  /* the I/O thread learns of the unlock before it leaves: a renewal that
   * finds the hold gone meanwhile is not a loss */
  post_item_t it[1] = {
      {.type = P_RELEASING, .name = l->name, .len = l->len, .owner_id = op->owner_id, .olen = op->owner_len}};
  if (!r || !post_items(cl, it, 1, slot)) {
    rlock__req_free(r);
    return call_abort(op, &c);
  }
  rlock_reply_t *reply = NULL;
  rt_t rt = round_trip(cl, r, &reply);
  rlock__req_free(r);
  pthread_mutex_unlock(&cl->fast.mu);
  release_t how = REL_UNKNOWN;
  bool notified = false, done = false;
  int k = 0;
  if (rt == RT_REPLY && reply->type == RLOCK_REPLY_ERROR) {
    k = rlock__fail(rlock__reply_error_code(reply), "unlock: %.200s", reply->str); /* nothing applied */
    how = REL_UNKNOWN;
  } else if (rt == RT_REPLY && (k = cl->lock_up->fast_release_reply(op, reply, &how, &notified))) {
    how = REL_UNKNOWN;
  }
  rlock_reply_free(reply);
  if (rt == RT_REPLY) {
    if (!k && how == REL_NOTHELD)
      k = rlock__fail(RLOCK_ENOTHELD, "lock '%.*s' is not held by owner %s", (int)(l->len > 100 ? 100 : l->len),
                      l->name, op->owner_id);
    if (notified) atomic_fetch_add(&cl->fast.hand[slot], 1); /* waiters go first: no fast acquire meanwhile */
    post_item_t its[2] = {{.type = P_RELEASED,
                           .how = how,
                           .notified = notified,
                           .held = -(how == REL_ALL && count == 1),
                           .name = l->name,
                           .len = l->len,
                           .owner_id = op->owner_id,
                           .olen = op->owner_len},
                          {.type = P_DEL, .name = latch.p, .len = latch.n}};
    /* the answers the first copy latched (for a re-send that never comes now:
     * its only copy was applied and answered) lose their latch at once, not
     * after its TTL (a contended lock answers 2 to every unlock) */
    bool latched = how == REL_NOTHELD || how == REL_MISMATCH || notified; /* (k: ENOTHELD for the first) */
    while (!post_items(cl, its, latched ? 2 : 1, slot)) {                 /* must reach the I/O thread: it holds the
                                                                              releasing mark; out of memory: wait */
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    fent_after(cl, e, slot, how == REL_ONE ? count - 1 : how == REL_ALL ? 0 : -1, e->epoch);
    stat_add(cl, ST_FAST, 1);
    *rc = k;
    done = true;
  } else if (rt == RT_LOST) {
    /* lost: the I/O thread sends it again (the same id, with the re-send
     * mark: the count tells whether this copy was applied, and the latch the
     * re-send writes stops this copy if it lands later); the first copy may
     * have freed the hold already, so the releasing mark stays until that op
     * ends (rlock__fast_release_ended) */
    fent_set(cl, e, slot, -1);
    op->fast_lost = true;
    op->fast_releasing = true;
  } else {
    /* unsent: nothing reached the server; the I/O thread sends it, the
     * releasing mark goes first */
    post_item_t ab[1] = {
        {.type = P_ABANDONED, .name = l->name, .len = l->len, .owner_id = op->owner_id, .olen = op->owner_len}};
    while (!post_items(cl, ab, 1, slot)) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    fent_set(cl, e, slot, -1);
    op->reqid[0] = 0, op->latch_n = 0, op->unlatched = false;
  }
  call_latch_free(&c);
  if (done) cl->lock_up->op_recycle(cl, op);
  return done;
}

static void released_slow(client_t *cl, const rlock_lock_t *l, uint64_t owner, int rc, int64_t value) {
  if (owner != (RLOCK_OWNER_THREAD | rlock__gettid())) return;
  ftab_t *t = ftab_get();
  if (!t) return;
  unsigned slot = rlock__fast_slot(l->name, l->len);
  if (rc == 0 && value == 1) fent_set(cl, ftab_put(t, cl, l->name, l->len), slot, 0); /* the last hold went */
  else fent_set(cl, ftab_find(t, cl, l->name, l->len), slot, -1);
}

/* The calls from api.c. The caller is inside the client (api.c: from its
 * first touch to its last), and a fast call runs in a window
 * (rlock__fast_begin/_end) that also covers the submit of the op it hands
 * to the I/O thread: rlock_client_free lets the I/O thread close only once
 * every window closed, so a fast call's posts are drained and its op (its
 * answer lost: its try may be on the server) is undone. */
bool rlock__fast_begin(client_t *cl) {
  fast_t *f = &cl->fast;
  if (!f->on) return false;
  RLOCK__ASSERT(atomic_load(&cl->inside) > 0);
  atomic_fetch_add(&f->calls, 1); /* seq_cst both sides: free sees it, or it sees closing */
  RLOCK__TEST_HOOK(rlock__test_call_hook, cl, RLOCK__AT_FAST_COUNTED); /* tests */
  if (!atomic_load(&cl->closing)) return true;
  atomic_fetch_sub(&f->calls, 1);
  return false;
}

void rlock__fast_end(client_t *cl) {
  /* a window opened (before `closing`) ends before `stopping`: free waited */
  RLOCK__ASSERT(atomic_load(&cl->fast.calls) > 0 && !atomic_load(&cl->stopping));
  atomic_fetch_sub(&cl->fast.calls, 1);
}

void rlock__fast_close_wait(client_t *cl, int64_t ms) {
  fast_t *f = &cl->fast;
  RLOCK__ASSERT(atomic_load(&cl->closing) && !rlock__client_on_io_thread(cl));
  int64_t deadline = rlock_now_ms() + ms;
  bool cut = false;
  while (atomic_load(&f->calls) > 0) {
    if (!cut && rlock_now_ms() >= deadline) {
      /* a call still waiting for its answer (or a handshake's) gets an
       * error at once: shutdown, not close (the fd number stays its own) */
      cut = true;
      pthread_mutex_lock(&f->amu);
      f->cut = true;
      if (f->fd >= 0) shutdown(f->fd, SHUT_RDWR);
      pthread_mutex_unlock(&f->amu);
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

bool rlock__fast_acquire(op_t *op, int *rc) {
  RLOCK__ASSERT(atomic_load(&op->cl->fast.calls) > 0);
  return fast_acquire(op, rc);
}

bool rlock__fast_release(op_t *op, int *rc) {
  RLOCK__ASSERT(atomic_load(&op->cl->fast.calls) > 0);
  return fast_release(op, rc);
}

void rlock__fast_released_slow(client_t *cl, const rlock_lock_t *l, uint64_t owner, int rc, int64_t value) {
  if (!cl->fast.on) return;
  RLOCK__ASSERT(atomic_load(&cl->inside) > 0); /* api.c leaves only after this */
  released_slow(cl, l, owner, rc, value);
}
