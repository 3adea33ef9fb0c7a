/* resolve.c -- name resolution for a connection (Resolve). A numeric address
 * is parsed here (no DNS at all); a name goes to the connections' evdns
 * (/etc/hosts answers at once, a nameserver on a later pass): the I/O thread
 * never blocks on it. The answer goes back to conn.c through its callback.
 * The evdns base (conn_env_t.dns) is made here on first use and freed at
 * close. Moved out of conn.c as is. */
#include "hooks.h"
#include "resolve.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <event2/dns.h>
#include <event2/event.h>

/* TEST ONLY (hooks.h): the resolv.conf of the clients made from now on. */
#ifdef RLOCK_TEST_HOOKS
const char *rlock__test_resolv_conf;
#endif

/* A name resolution in flight. evdns calls dns_done exactly once, even
 * after evdns_getaddrinfo_cancel (with EVUTIL_EAI_CANCEL, on a later pass of
 * the loop): a cancelled job has c == NULL and only frees itself. */
typedef struct dns_job {
  conn_env_t *env;
  conn_t *c; /* NULL: cancelled */
  struct evdns_getaddrinfo_request *req;
  rlock__resolved_fn done;
} dns_job_t;

/* The resolver of env's connections, made on first use: /etc/hosts and resolv.conf. */
static struct evdns_base *env_dns(conn_env_t *env) {
  if (env->dns) return env->dns;
  const char *conf = "/etc/resolv.conf";
#ifdef RLOCK_TEST_HOOKS
  if (rlock__test_resolv_conf) conf = rlock__test_resolv_conf;
#endif
  env->dns = evdns_base_new(env->base, 0);
  /* /etc/hosts and resolv.conf's nameservers, search list and options; a
   * file it cannot read leaves libevent's defaults (a nameserver on 127.0.0.1) */
  if (!env->dns) return NULL;
  evdns_base_resolv_conf_parse(env->dns, DNS_OPTIONS_ALL, conf);
  /* Once one family (A or AAAA) answered, evdns waits this long for the
   * other before it answers with what it has: 3 s by default, longer than
   * the connect timeout, so a nameserver that never answers AAAA (or answers
   * it slowly) failed every attempt although the address was known.
   * min(500 ms, connect_timeout_ms / 4); in seconds, written in the locale
   * evdns reads it in (strtod, same thread). */
  int64_t ms = env->opt->connect_timeout_ms / 4;
  if (ms > 500) ms = 500;
  if (ms < 1) ms = 1;
  char skew[32];
  snprintf(skew, sizeof skew, "%.3f", (double)ms / 1000.0);
  evdns_base_set_option(env->dns, "getaddrinfo-allow-skew:", skew);
  return env->dns;
}

/* After the engine shut down: the resolutions the closed connections
 * cancelled call back on a later pass of the loop (freeing their jobs), and
 * only then may the resolver go (their callbacks read it). */
void rlock__resolve_close(conn_env_t *env) {
  while (env->dns_jobs > 0) event_base_loop(env->base, EVLOOP_ONCE);
  if (!env->dns) return;
  /* evdns may still have a cancel of its own in the loop: the other address
   * family's query, given up getaddrinfo-allow-skew after the first answered,
   * whose reply callback (and its memory) is deferred to the next pass. Run
   * that pass, or the memory goes with the base (valgrind in CI: 912 bytes
   * from evdns_cancel_request, test_dns). */
  event_base_loop(env->base, EVLOOP_NONBLOCK);
  evdns_base_free(env->dns, 0);
  env->dns = NULL;
}

void rlock__resolve_cancel(conn_t *c) {
  dns_job_t *job = c->dns;
  if (!job) return;
  c->dns = NULL;
  job->c = NULL;
  evdns_getaddrinfo_cancel(job->req);
}

static void dns_done(int err, struct evutil_addrinfo *res, void *arg) {
  dns_job_t *job = arg;
  conn_t *c = job->c;
  rlock__resolved_fn done = job->done;
  job->env->dns_jobs--;
  free(job);
  if (!c) { /* cancelled: c may be gone */
    if (res) evutil_freeaddrinfo(res);
    return;
  }
  c->dns = NULL;
  done(c, err, res);
}

int rlock__resolve_start(conn_t *c, const char *host, int portn, rlock__resolved_fn done) {
  struct evutil_addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  char port[16];
  snprintf(port, sizeof port, "%d", portn);
  int rc = getaddrinfo(host, port, &hints, &res); /* numeric only: never asks DNS */
  if (rc != EAI_NONAME) {
    done(c, rc, res);
    return 0;
  }
  hints.ai_flags = 0;
  conn_env_t *env = c->env;
  struct evdns_base *dns = env_dns(env);
  dns_job_t *job = dns ? calloc(1, sizeof *job) : NULL;
  if (!job) return RLOCK_ENOMEM;
  job->env = env;
  job->c = c;
  job->done = done;
  c->dns = job;
  env->dns_jobs++;
  atomic_fetch_add(&env->dns_lookups, 1);
  /* NULL: answered already (dns_done ran, job is gone) */
  struct evdns_getaddrinfo_request *req = evdns_getaddrinfo(dns, host, port, &hints, dns_done, job);
  if (req) job->req = req;
  return 0;
}
