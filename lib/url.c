/* url.c -- parsing and redacting Redis URLs:
 *   redis://[[user]:password@]host[:port][/db]   rediss://... (TLS)
 *   unix:///path/to/sock[?db=N&user=U&password=P]
 *   redis+sentinel://[[user]:password@]h1[:p1][,h2[:p2]...]/MASTER[/db][?sentinel_password=P]
 *   rediss+sentinel://... (TLS to the sentinels and the master)
 *   redis+cluster://[[user]:password@]h1[:p1][,h2[:p2]...]   rediss+cluster://... (TLS)
 *     (seed nodes of a Redis Cluster: the first in host/port, the rest in seeds; db 0 only)
 * Schemes and "password=" are compared in ASCII, whatever the locale.
 * The messages of rlock__url_parse never quote the URL (only fixed text), and
 * rlock_url_redact hides every byte that might be a password in any input,
 * well-formed or not (see rlock__url_secret_mask). */
#include "url.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
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

void rlock__url_free(url_t *u) {
  for (int i = 0; i < u->nsentinels; i++) free(u->sentinels[i].host);
  free(u->sentinels);
  free(u->master);
  if (u->sentinel_password) {
    memset(u->sentinel_password, 0, strlen(u->sentinel_password));
    free(u->sentinel_password);
  }
  free(u->host);
  free(u->path);
  free(u->user);
  free(u->seeds);
  if (u->password) {
    memset(u->password, 0, strlen(u->password));
    free(u->password);
  }
  memset(u, 0, sizeof *u);
}

void rlock__url_secrets(const url_t *u, const char *out[2]) {
  out[0] = u->password;
  out[1] = u->sentinel_password;
}

static int bad(url_t *u, const char *why) {
  rlock__url_free(u);
  return rlock__fail(RLOCK_EURL, "invalid Redis URL: %s", why);
}

static bool known_param(const char *k, size_t n) {
  return (n == 2 && !memcmp(k, "db", 2)) || (n == 4 && !memcmp(k, "user", 4)) || (n == 8 && !memcmp(k, "password", 8));
}

static int parse_unix(url_t *u, const char *p) {
  const char *q = strchr(p, '?');
  size_t plen = q ? (size_t)(q - p) : strlen(p);
  if (plen == 0 || p[0] != '/')
    return bad(u, memchr(p, '@', plen) ? "a unix URL takes no user or password before the path: "
                                         "unix:///path?user=U&password=P"
                                       : "unix URL needs an absolute socket path (unix:///path)");
  bool after_password = false; /* the parameter before this one was password= */
  if (!(u->path = decode(p, plen))) return bad(u, "bad %-escape in socket path");
  while (q && *q) {
    q++;
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (!eq || !known_param(q, (size_t)(eq - q)))
      return bad(u, after_password ? "a '&' in the password must be written %26"
                    : !eq          ? "query parameter without '='"
                                   : "unknown query parameter (db, user, password)");
    after_password = false;
    size_t kl = (size_t)(eq - q), vl = n - kl - 1;
    if (kl == 2 && !memcmp(q, "db", 2)) {
      if (parse_int(eq + 1, vl, 0, 1000000, &u->db)) return bad(u, "db must be a number");
    } else if (kl == 4 && !memcmp(q, "user", 4)) {
      free(u->user);
      if (!(u->user = decode(eq + 1, vl))) return bad(u, "bad %-escape in user");
    } else {
      free(u->password);
      if (!(u->password = decode(eq + 1, vl))) return bad(u, "bad %-escape in password");
      after_password = true;
    }
    q = amp;
  }
  u->kind = URL_UNIX;
  return 0;
}

/* Cluster seeds after the first, [s, end): "host:port[,host:port...]", each
 * host of [0-9A-Za-z.-_] (or a bracketed IPv6 address) and a port 1..65535. */
static int check_seeds(const char *s, const char *end) {
  if (s == end) return -1; /* a trailing ',' */
  while (s < end) {
    const char *e = memchr(s, ',', (size_t)(end - s));
    if (!e) e = end;
    const char *colon = NULL;
    for (const char *t = s; t < e; t++)
      if (*t == ':') colon = t; /* the last ':' (IPv6 hosts are bracketed) */
    int port;
    if (!colon || colon == s || parse_int(colon + 1, (size_t)(e - colon - 1), 1, 65535, &port)) return -1;
    for (const char *t = s; t < colon; t++)
      if (!isalnum((unsigned char)*t) && !strchr(".-_:[]", *t)) return -1;
    s = e + (e < end);
    if (e < end && s == end) return -1; /* a trailing ',' */
  }
  return 0;
}

/* Why a URL without a known scheme was refused (fixed text only). */
static const char *scheme_hint(const char *s) {
  if (isspace((unsigned char)s[0])) return "the URL starts with a blank";
  static const char *const schemes[] = {
      "rediss+sentinel:", "redis+sentinel:", "rediss+cluster:", "redis+cluster:", "rediss:", "redis:", "unix:"};
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (rlock__ascii_ncaseeq(s, schemes[i], strlen(schemes[i])))
      return "the scheme must be followed by '//' (redis://host, rediss://host, unix:///path, "
             "redis+sentinel://host/master, redis+cluster://host)";
  return "unknown scheme (expected redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, "
         "redis+cluster:// or rediss+cluster://)";
}

/* One "host[:port]" or "[v6]:port" in [p, end): a decoded copy in *host.
 * NULL, or why it is bad (fixed text). */
static const char *parse_hostport(const char *p, const char *end, int defport, char **host, int *port) {
  const char *hs = p, *he, *portp = NULL;
  if (*p == '[') {
    const char *rb = memchr(p, ']', (size_t)(end - p));
    if (!rb) return "unterminated '[' in IPv6 host";
    hs = p + 1, he = rb;
    if (rb + 1 < end) {
      if (rb[1] != ':') return "junk after IPv6 host";
      portp = rb + 2;
    }
  } else {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    he = colon ? colon : end;
    if (colon) portp = colon + 1;
  }
  if (he == hs) return "missing host";
  for (const char *t = hs; t < he; t++)
    if (!isalnum((unsigned char)*t) && !strchr(".-_:", *t)) return "invalid character in host";
  if (!(*host = decode(hs, (size_t)(he - hs)))) return "out of memory";
  *port = defport;
  if (portp && parse_int(portp, (size_t)(end - portp), 1, 65535, port)) return "port must be a number from 1 to 65535";
  return NULL;
}

/* The sentinels "h1:p1,h2:p2" of [p, end) into u->sentinels; the first is
 * also u->host/u->port (what messages name before a master is known). */
static const char *parse_sentinels(url_t *u, const char *p, const char *end) {
  size_t n = 1;
  for (const char *t = p; t < end; t++) n += *t == ',';
  if (n > 64) return "at most 64 sentinels";
  if (!(u->sentinels = calloc(n, sizeof *u->sentinels))) return "out of memory";
  for (const char *h = p; h <= end;) {
    const char *e = memchr(h, ',', (size_t)(end - h));
    if (!e) e = end;
    url_node_t *sn = &u->sentinels[u->nsentinels++]; /* counted first: rlock__url_free frees a half-parsed one */
    const char *why = parse_hostport(h, e, 26379, &sn->host, &sn->port);
    if (why) return strcmp(why, "missing host") ? why : "missing sentinel host (an empty entry in the list?)";
    h = e + 1;
  }
  if (!(u->host = strdup(u->sentinels[0].host))) return "out of memory";
  u->port = u->sentinels[0].port;
  return NULL;
}

/* After the sentinels: "/MASTER[/db][?sentinel_password=P]" at p. */
static const char *parse_sentinel_path(url_t *u, const char *p) {
  if (*p != '/' || p[1] == '/' || p[1] == '?' || p[1] == '#' || !p[1])
    return "a Sentinel URL names its master: redis+sentinel://host:port/MASTER";
  const char *m = p + 1;
  size_t mn = strcspn(m, "/?#");
  if (!(u->master = decode(m, mn))) return "bad %-escape in master name";
  for (const char *t = u->master; *t || t == u->master; t++)
    if (!isgraph((unsigned char)*t)) return "the master name must be printable, without blanks";
  p = m + mn;
  if (*p == '/') {
    size_t n = strcspn(p + 1, "?#");
    if (n && parse_int(p + 1, n, 0, 1000000, &u->db)) return "database must be a number (/MASTER/0, /MASTER/1, ...)";
    p += 1 + n;
  }
  if (*p == '?') {
    static const char key[] = "sentinel_password=";
    if (!rlock__ascii_ncaseeq(p + 1, key, sizeof key - 1))
      return "unknown query parameter in a Sentinel URL (only sentinel_password)";
    const char *v = p + sizeof key;
    size_t n = strcspn(v, "#");
    if (memchr(v, '&', n)) return "a '&' in the sentinel password must be written %26";
    if (!(u->sentinel_password = decode(v, n))) return "bad %-escape in sentinel_password";
    p = v + n;
  }
  return *p ? "fragments are not supported in Redis URLs" : NULL;
}

int rlock__url_parse(url_t *u, const char *s) {
  memset(u, 0, sizeof *u);
  if (!s || !*s) return bad(u, "empty");
  const char *p;
  if (rlock__ascii_ncaseeq(s, "redis://", 8)) u->kind = URL_TCP, p = s + 8;
  else if (rlock__ascii_ncaseeq(s, "rediss://", 9)) u->kind = URL_TLS, p = s + 9;
  else if (rlock__ascii_ncaseeq(s, "redis+sentinel://", 17)) u->kind = URL_TCP, u->sentinel = true, p = s + 17;
  else if (rlock__ascii_ncaseeq(s, "rediss+sentinel://", 18)) u->kind = URL_TLS, u->sentinel = true, p = s + 18;
  else if (rlock__ascii_ncaseeq(s, "redis+cluster://", 16)) u->kind = URL_TCP, u->cluster = true, p = s + 16;
  else if (rlock__ascii_ncaseeq(s, "rediss+cluster://", 17)) u->kind = URL_TLS, u->cluster = true, p = s + 17;
  else if (rlock__ascii_ncaseeq(s, "unix://", 7)) return parse_unix(u, s + 7);
  else return bad(u, scheme_hint(s));

  if (*p == '/') return bad(u, "missing host (one '/' too many after the scheme?)");
  const char *end = p + strcspn(p, "/?#");
  if (strchr(end, '@')) /* an '@' after the end of the authority: the password holds one of "/?#" */
    return bad(u, *end == '/'   ? "a '/' in the user name or password must be written %2F"
                  : *end == '?' ? "a '?' in the user name or password must be written %3F"
                                : "a '#' in the user name or password must be written %23");
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
  const char *why;
  if (u->sentinel) {
    if ((why = parse_sentinels(u, p, end)) || (why = parse_sentinel_path(u, end))) return bad(u, why);
    return 0;
  }
  if (u->cluster) { /* the seeds after the first: checked here, parsed by topology/cluster.c */
    const char *comma = memchr(p, ',', (size_t)(end - p));
    if (comma) {
      if (check_seeds(comma + 1, end)) return bad(u, "each cluster seed must be host:port, separated by ','");
      if (!(u->seeds = rlock__strndup(comma + 1, (size_t)(end - comma - 1)))) return bad(u, "out of memory");
      end = comma;
    }
  } else if (memchr(p, ',', (size_t)(end - p)))
    return bad(u, "several hosts need redis+sentinel:// or redis+cluster:// (a ',' in the host)");
  if ((why = parse_hostport(p, end, 6379, &u->host, &u->port))) return bad(u, why);
  if (u->seeds) end = p + strcspn(p, "/?#");
  if (*end == '/' && u->cluster) return bad(u, "a cluster URL takes no database (Redis Cluster has only db 0)");
  if (*end == '/') {
    const char *d = end + 1;
    size_t n = strcspn(d, "?#");
    if (n && parse_int(d, n, 0, 1000000, &u->db)) return bad(u, "database must be a number (/0, /1, ...)");
    end = d + n;
  }
  if (*end) return bad(u, "query strings and fragments are not supported in redis:// URLs");
  return 0;
}

/* ------------------------------------------------------------ redaction */

/* Length of a leading scheme ("letters:" and the one or more '/' after it),
 * else 0. Without a '/' the ':' may be the user name's (a URL typed without
 * its scheme, "user:pass:word@host"): the password may start right after it. */
static size_t scheme_len(const char *s, size_t n) {
  size_t i = 0;
  if (n == 0 || !isalpha((unsigned char)s[0])) return 0;
  while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')) i++;
  if (i + 1 >= n || s[i] != ':' || s[i + 1] != '/') return 0;
  for (i++; i < n && s[i] == '/'; i++) {
  }
  return i;
}

/* End of a query value starting at i: the next "&db=", "&user=" or
 * "&password=" (any case), else the end of the string. A '&' before anything
 * else may be part of the password, so it does not end the value. */
static size_t value_end(const char *s, size_t n, size_t i) {
  static const char *const next[] = {"&db=", "&user=", "&password="};
  for (; i < n; i++)
    for (size_t k = 0; k < 3; k++)
      if (n - i >= strlen(next[k]) && rlock__ascii_ncaseeq(s + i, next[k], strlen(next[k]))) return i;
  return n;
}

void rlock__url_secret_mask(const char *s, size_t n, unsigned char *hide) {
  memset(hide, 0, n);
  /* user info: the authority up to the last '@', after the user's ':' */
  size_t start = scheme_len(s, n), at = n;
  for (size_t i = n; i > start; i--)
    if (s[i - 1] == '@') {
      at = i - 1;
      break;
    }
  if (at < n) {
    const char *colon = memchr(s + start, ':', at - start);
    for (size_t i = colon ? (size_t)(colon - s) + 1 : start; i < at; i++) hide[i] = 1;
  }
  /* every password= value */
  for (size_t i = 0; i + 9 <= n; i++)
    if (rlock__ascii_ncaseeq(s + i, "password=", 9))
      for (size_t j = i + 9, e = value_end(s, n, i + 9); j < e; j++) hide[j] = 1;
}

RLOCK_API void rlock_url_redact(const char *url, char *buf, size_t buflen) {
  if (!buf || !buflen) return;
  if (!url) {
    snprintf(buf, buflen, "(null)");
    return;
  }
  size_t n = strlen(url), o = 0;
  unsigned char *hide = malloc(n ? n : 1);
  if (!hide) {
    snprintf(buf, buflen, "***");
    return;
  }
  rlock__url_secret_mask(url, n, hide);
  for (size_t i = 0; i < n && o + 1 < buflen; i++) {
    if (!hide[i]) {
      buf[o++] = url[i];
    } else if (i == 0 || !hide[i - 1]) { /* one "***" per hidden run */
      for (int k = 0; k < 3 && o + 1 < buflen; k++) buf[o++] = '*';
    }
  }
  buf[o] = 0;
  free(hide);
}
