/* watchdog.h -- the hold registry: renewals, valid-until, lock-lost (watchdog.c). */
#ifndef RLOCK_WATCHDOG_H
#define RLOCK_WATCHDOG_H

#include "map.h"
#include "script.h"

#include <pthread.h>

typedef struct rlock_client client_t;

typedef struct hold hold_t;
typedef struct watchdog {
  client_t *cl;
  struct { /* (owner, name) -> hold_t, chained through the holds themselves */
    hold_t **buckets;
    size_t nbuckets, count;
  } holds;
  map_t owners;                    /* owner id -> its interned copy, shared by that owner's holds */
  struct owner_rec *last_owner;    /* the last one looked up */
  map_t residue;                   /* (name, owner) -> residue_t: unknown releases of a forgotten hold */
  struct event *tick;              /* renewal round every watchdog_timeout/3 */
  struct event *expire;            /* the expiry queue's one timer */
  int64_t armed_at;                /* when it fires (0: not armed) */
  hold_t *qhead, *qtail;           /* holds whose lease ends watchdog_timeout after their last renewal, in that order */
  struct event *spare_ev;          /* a freed timer of a hold with another deadline, for the next */
  hold_t *spare;                   /* a freed hold, for the next one whose name fits */
  struct batch *cur[SCRIPT_N + 1]; /* the round's renewal call being filled, per renew script */
  struct batch *cur_fixed[SCRIPT_N + 1]; /* a check round's call of fixed-lease holds (never extended) */
  size_t round_at;                       /* the round's next bucket */
  unsigned inflight;                     /* renewal calls awaiting their reply */
  bool round_on, round_again, stepping;  /* a round under way; another one due after it; in round_step */
  bool check;          /* the rounds under way check the holds after a reconnect (rlock__watchdog_check_now) */
  pthread_mutex_t lmu; /* guards the listeners (added from user threads) */
  struct lost_listener *listeners; /* also told of every lost hold (MultiLock) */
  size_t nlisteners;
} watchdog_t;
int rlock__watchdog_init(watchdog_t *wd, client_t *cl);
void rlock__watchdog_close(watchdog_t *wd);
/* A second lock-lost listener beside the client's callback (the MultiLock's):
 * fn(cl, name, len, owner, reason, arg) runs on the I/O thread after the
 * client's callback, with lmu held, so _unlisten waits for a running call.
 * Any thread; RLOCK_ENOMEM. (fn, arg) added twice is called twice. */
typedef void (*lost_listener_fn)(client_t *cl, const char *name, size_t len, uint64_t owner, rlock_lost_reason_t reason,
                                 void *arg);
int rlock__watchdog_listen(watchdog_t *wd, lost_listener_fn fn, void *arg);
void rlock__watchdog_unlisten(watchdog_t *wd, lost_listener_fn fn, void *arg);
/* An acquire succeeded (sent at sent_at, reply at now): one more hold of
 * (name, owner), pushed on the hold's stack of leases (watchdog or fixed).
 * RLOCK_ENOMEM if it cannot be tracked. */
int rlock__watchdog_acquired(watchdog_t *wd, const char *name, size_t len, uint64_t owner, const char *owner_id,
                             int64_t lease_ms, bool renew, int64_t sent_at);
/* The script that renews the hold of (name, owner) (its kind's; default
 * SCRIPT_RENEW). Set after rlock__watchdog_acquired. */
void rlock__watchdog_set_renew(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script,
                               int slack_ms);
/* Whether the hold of (name, owner) tracked here, if any, is of the kind
 * whose holds `script` renews (0: SCRIPT_RENEW's). A release through a handle
 * of another kind (the same name) must not touch the hold it cannot release. */
bool rlock__watchdog_kind_is(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script);
/* The client's hold count of (name, owner) (0: untracked) and, in *unknown,
 * how many of its releases had an unknown outcome (the server may count
 * that many more). */
int64_t rlock__watchdog_count(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int64_t *unknown);
/* Whether the registry tracks a hold of (name, owner id). */
bool rlock__watchdog_tracks(watchdog_t *wd, const char *name, size_t len, const char *owner_id);
/* The TTL (ms) one release must leave when holds remain: what the rest of
 * the stack still needs (watchdog lease if any renews, else the longest
 * fixed lease left, at least 1). */
int64_t rlock__watchdog_lease(watchdog_t *wd, const char *name, size_t len, const char *owner_id);
/* The MultiLock's final step (one lease for all): the top level of the hold
 * of (name, owner), taken with the watchdog to outlive the wait, becomes a
 * fixed lease of lease_ms sent now and answered by reply_by at the latest.
 * *ttl: the exact TTL to set, the lease or, if the levels below need more,
 * what they need (never shortened under an outer hold). Called before the
 * request leaves, so no renewal sent after it undoes the TTL.
 * RLOCK_ENOTHELD if untracked, or if the handle's kind (script) is not the
 * hold's. */
int rlock__watchdog_relet(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int script,
                          int64_t lease_ms, int64_t reply_by, int64_t *ttl);
/* What a release did to the hold. */
typedef enum {
  REL_ONE,           /* one hold released, others remain; the TTL was set to lease_ms */
  REL_ONE_UNCHECKED, /* the same, without a count check (other calls of the owner
                        were in flight): the unknown releases stay unknown */
  REL_ALL,           /* the last hold released: the key is gone */
  REL_UNKNOWN,       /* the release failed: count it as done (it may or may not have landed) */
  REL_NOTHELD,       /* the server says the owner holds nothing: stop tracking */
  REL_MISMATCH       /* the server's count disagreed: field removed, a loss (callback) */
} release_t;
void rlock__watchdog_released(watchdog_t *wd, const char *name, size_t len, const char *owner_id, release_t how,
                              int64_t lease_ms);
int rlock__watchdog_valid_until(watchdog_t *wd, const char *name, size_t len, const char *owner_id, int64_t *out);
void rlock__watchdog_renew_now(watchdog_t *wd); /* after a reconnect */
/* After a reconnect of the command connection that holds its queued
 * requests (hold_pending): a round whose calls go ahead of them; once every
 * hold was asked about, rlock__client_checked. */
void rlock__watchdog_check_now(watchdog_t *wd);
void rlock__client_checked(client_t *cl);
/* While rlock_client_new waits: msg is the latest reason the start has not
 * succeeded yet (the answer if connect_timeout_ms passes first). */
void rlock__client_start_note(client_t *cl, const char *msg);
/* Force unlock succeeded: every hold of name tracked here is lost (callback). */
void rlock__watchdog_forget(watchdog_t *wd, const char *name, size_t len);

#endif
