/* url.h -- the parsed client URL (url.c). */
#ifndef RLOCK_URL_H
#define RLOCK_URL_H

#include "util.h"

typedef enum { URL_TCP, URL_TLS, URL_UNIX } url_kind_t;
typedef struct url_node {
  char *host;
  int port;
} url_node_t;
typedef struct url {
  url_kind_t kind;
  char *host; /* TCP/TLS; brackets removed for IPv6 (Sentinel: the first sentinel's) */
  int port;
  char *path;            /* unix socket */
  char *user, *password; /* the Redis servers' (Sentinel: the master's) */
  int db;
  /* redis+sentinel:// and rediss+sentinel:// (kind URL_TCP / URL_TLS) */
  bool sentinel;
  url_node_t *sentinels; /* in the URL's order */
  int nsentinels;
  char *master;            /* the master's name in Sentinel */
  char *sentinel_password; /* AUTH to the sentinels; NULL: none */
  bool cluster;            /* redis+cluster:// or rediss+cluster:// (kind URL_TCP / URL_TLS) */
  char *seeds;             /* cluster: the seeds after the first, "h2:p2,h3:p3" (validated); NULL: none */
} url_t;
int rlock__url_parse(url_t *u, const char *s); /* RLOCK_EURL with a message (never quoting s) */
/* Sets hide[i] for each of the n bytes of s that may be a password, whatever
 * s holds: the user info up to the last '@' after the user's ':' (all of it
 * without a ':'), and every "password=" value. rlock_url_redact hides them. */
void rlock__url_secret_mask(const char *s, size_t n, unsigned char *hide);
void rlock__url_free(url_t *u);
/* The URL's passwords (its own, its sentinels'), NULL where none: masked in
 * the servers' refusals. */
void rlock__url_secrets(const url_t *u, const char *out[2]);

#endif
