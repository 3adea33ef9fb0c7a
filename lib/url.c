/* url.c -- parsing and redacting Redis URLs:
 *   redis://[[user]:password@]host[:port][/db]   rediss://... (TLS)
 *   unix:///path/to/sock[?db=N&user=U&password=P]                         */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = tolower(c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decoded copy of s[0..n). NULL on a bad escape or allocation failure. */
static char *decode(const char *s, size_t n) {
  char *o = malloc(n + 1);
  if (!o) return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '%') {
      o[j++] = s[i];
      continue;
    }
    int a = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
    int b = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
    if (a < 0 || b < 0) {
      free(o);
      return NULL;
    }
    o[j++] = (char)(a * 16 + b);
    i += 2;
  }
  o[j] = 0;
  return o;
}

static int parse_int(const char *s, size_t n, long lo, long hi, int *out) {
  if (n == 0 || n > 9) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

void url_free(url_t *u) {
  free(u->host);
  free(u->path);
  free(u->user);
  if (u->password) {
    memset(u->password, 0, strlen(u->password));
    free(u->password);
  }
  memset(u, 0, sizeof *u);
}

static int bad(url_t *u, const char *why) {
  url_free(u);
  return rlock__fail(RLOCK_EURL, "invalid Redis URL: %s", why);
}

static int parse_unix(url_t *u, const char *p) {
  const char *q = strchr(p, '?');
  size_t plen = q ? (size_t)(q - p) : strlen(p);
  if (plen == 0 || p[0] != '/') return bad(u, "unix URL needs an absolute socket path (unix:///path)");
  if (!(u->path = decode(p, plen))) return bad(u, "bad %-escape in socket path");
  while (q && *q) {
    q++;
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (!eq) return bad(u, "query parameter without '='");
    size_t kl = (size_t)(eq - q), vl = n - kl - 1;
    if (kl == 2 && !memcmp(q, "db", 2)) {
      if (parse_int(eq + 1, vl, 0, 1000000, &u->db)) return bad(u, "db must be a number");
    } else if (kl == 4 && !memcmp(q, "user", 4)) {
      free(u->user);
      if (!(u->user = decode(eq + 1, vl))) return bad(u, "bad %-escape in user");
    } else if (kl == 8 && !memcmp(q, "password", 8)) {
      free(u->password);
      if (!(u->password = decode(eq + 1, vl))) return bad(u, "bad %-escape in password");
    } else {
      return bad(u, "unknown query parameter (db, user, password)");
    }
    q = amp;
  }
  u->kind = URL_UNIX;
  return 0;
}

int url_parse(url_t *u, const char *s) {
  memset(u, 0, sizeof *u);
  if (!s || !*s) return bad(u, "empty");
  const char *p;
  if (!strncmp(s, "redis://", 8)) u->kind = URL_TCP, p = s + 8;
  else if (!strncmp(s, "rediss://", 9)) u->kind = URL_TLS, p = s + 9;
  else if (!strncmp(s, "unix://", 7)) return parse_unix(u, s + 7);
  else return bad(u, "unknown scheme (expected redis://, rediss:// or unix://)");

  const char *end = p + strcspn(p, "/?#");
  const char *at = NULL;
  for (const char *t = p; t < end; t++)
    if (*t == '@') at = t; /* the last '@' ends the credentials */
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon) {
      if (colon > p && !(u->user = decode(p, (size_t)(colon - p)))) return bad(u, "bad %-escape in user");
      if (!(u->password = decode(colon + 1, (size_t)(at - colon - 1)))) return bad(u, "bad %-escape in password");
    } else if (at > p) {
      /* redis://password@host (no colon): Redis URL convention treats it as the password */
      if (!(u->password = decode(p, (size_t)(at - p)))) return bad(u, "bad %-escape in password");
    }
    p = at + 1;
  }
  const char *hs = p, *he, *portp = NULL;
  if (*p == '[') {
    const char *rb = memchr(p, ']', (size_t)(end - p));
    if (!rb) return bad(u, "unterminated '[' in IPv6 host");
    hs = p + 1, he = rb;
    if (rb + 1 < end) {
      if (rb[1] != ':') return bad(u, "junk after IPv6 host");
      portp = rb + 2;
    }
  } else {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    he = colon ? colon : end;
    if (colon) portp = colon + 1;
  }
  if (he == hs) return bad(u, "missing host");
  for (const char *t = hs; t < he; t++)
    if (!isalnum((unsigned char)*t) && !strchr(".-_:", *t)) return bad(u, "invalid character in host");
  if (!(u->host = decode(hs, (size_t)(he - hs)))) return bad(u, "out of memory");
  u->port = 6379;
  if (portp && parse_int(portp, (size_t)(end - portp), 1, 65535, &u->port))
    return bad(u, "port must be a number from 1 to 65535");
  if (*end == '/') {
    const char *d = end + 1;
    size_t n = strcspn(d, "?#");
    if (n && parse_int(d, n, 0, 1000000, &u->db)) return bad(u, "database must be a number (/0, /1, ...)");
    end = d + n;
  }
  if (*end) return bad(u, "query strings and fragments are not supported in redis:// URLs");
  return 0;
}

RLOCK_API void rlock_url_redact(const char *url, char *buf, size_t buflen) {
  if (!buf || !buflen) return;
  if (!url) {
    snprintf(buf, buflen, "(null)");
    return;
  }
  const char *scheme = strstr(url, "://");
  const char *auth = scheme ? scheme + 3 : url;
  const char *end = auth + strcspn(auth, "/?#");
  const char *at = NULL;
  for (const char *t = auth; t < end; t++)
    if (*t == '@') at = t;
  const char *q = strstr(url, "password=");
  if (at) {
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    const char *cut = colon ? colon + 1 : auth;
    snprintf(buf, buflen, "%.*s***%s", (int)(cut - url), url, at);
  } else if (q) {
    const char *qe = q + 9 + strcspn(q + 9, "&#");
    snprintf(buf, buflen, "%.*s***%s", (int)(q + 9 - url), url, qe);
  } else {
    snprintf(buf, buflen, "%s", url);
  }
}
