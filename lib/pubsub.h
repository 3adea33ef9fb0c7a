/* pubsub.h -- the subscriber connection and the waiters parked on channels (pubsub.c). */
#ifndef RLOCK_PUBSUB_H
#define RLOCK_PUBSUB_H

#include "conn.h"
#include "map.h"

typedef struct rlock_client client_t;

typedef struct waiter waiter_t;
typedef struct channel channel_t;
/* A lock waiter parked on a channel. */
struct waiter {
  waiter_t *prev, *next;
  channel_t *ch;
  bool parked;                  /* waiting for a message (vs. an attempt in flight) */
  bool token;                   /* a message that wakes all came while its attempt was in flight:
                                   it tries again instead of parking (pubsub.c) */
  int refused;                  /* RLOCK_ENOPERM: its channel's SUBSCRIBE was refused (an ACL):
                                   the wait ends (rlock__pubsub_refused says why) */
  bool observer;                /* only looks (rlock_lock_await_free): woken by every message,
                                   never counted by the kind's policy nor given the channel's
                                   wake tokens, so it takes no wake-up from a real waiter.
                                   Set before rlock__pubsub_join. */
  void (*on_wake)(waiter_t *w); /* a message arrived / resubscribed / subscribed */
  /* How many parked waiters a message (its payload) wakes: the lock kind's
   * policy, taken by the channel from its first waiter. NULL: one. */
  int (*wake)(const rlock_reply_t *msg);
  /* Optional: a handoff message "g:<id>" (the fair lock: the unlock granted
   * the lock to the owner's try of that id). true: it was this waiter's.
   * When no waiter of the channel takes it, it wakes one like any message. */
  bool (*on_grant)(waiter_t *w, const char *id, size_t n);
};
typedef struct pubsub {
  client_t *cl;
  conn_t conn;
  map_t channels;
  uint64_t next_gen;   /* channel generations: a late reply never touches a newer channel */
  struct event *resub; /* re-sends SUBSCRIBEs that failed (timeout, error reply) */
  int64_t resub_ms;    /* its backoff: reconnect_min_ms .. reconnect_max_ms */
} pubsub_t;
int rlock__pubsub_init(pubsub_t *ps, client_t *cl);
/* c (CONN_SUB, another node's subscriber connection: sharded pub/sub in
 * Cluster) reports its messages, drops and reconnects to ps. */
void rlock__pubsub_attach(pubsub_t *ps, conn_t *c);
/* Subscribe now every channel that is not subscribed (the slot map changed). */
void rlock__pubsub_resubscribe(pubsub_t *ps);
void rlock__pubsub_close(pubsub_t *ps);
/* Join the channel: subscribes if first; w->on_wake is called once the
 * subscription is confirmed (or failed: the waiter then falls back to its
 * TTL-bounded retries). */
int rlock__pubsub_join(pubsub_t *ps, waiter_t *w, const char *chan, size_t len);
void rlock__pubsub_leave(pubsub_t *ps, waiter_t *w);
/* Why w->refused: the channel and the server's refusal. */
const char *rlock__pubsub_refused(const waiter_t *w);
bool rlock__pubsub_park(waiter_t *w); /* true: a wake token was waiting: retry now */
/* w got a wake-up it did not use (ends without the lock): wake the next
 * parked waiter of its channel, or leave a wake token. */
void rlock__pubsub_pass_wake(waiter_t *w);

#endif
