/* resolve.c -- name resolution for a connection (Resolve). A numeric address
 * is parsed here (no DNS at all); a name goes to the client's evdns
 * (/etc/hosts answers at once, a nameserver on a later pass): the I/O thread
 * never blocks on it. The answer goes back to conn.c through its callback.
 * Moved out of conn.c as is. */
#include "internal.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <event2/dns.h>

/* A name resolution in flight. evdns calls dns_done exactly once, even
 * after evdns_getaddrinfo_cancel (with EVUTIL_EAI_CANCEL, on a later pass of
 * the loop): a cancelled job has c == NULL and only frees itself. */
typedef struct dns_job {
  client_t *cl;
  conn_t *c; /* NULL: cancelled */
  struct evdns_getaddrinfo_request *req;
  rlock__resolved_fn done;
} dns_job_t;

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
  job->cl->dns_jobs--;
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
  client_t *cl = c->cl;
  struct evdns_base *dns = rlock__client_dns(cl);
  dns_job_t *job = dns ? calloc(1, sizeof *job) : NULL;
  if (!job) return RLOCK_ENOMEM;
  job->cl = cl;
  job->c = c;
  job->done = done;
  c->dns = job;
  cl->dns_jobs++;
  atomic_fetch_add(&cl->dns_lookups, 1);
  /* NULL: answered already (dns_done ran, job is gone) */
  struct evdns_getaddrinfo_request *req = evdns_getaddrinfo(dns, host, port, &hints, dns_done, job);
  if (req) job->req = req;
  return 0;
}
