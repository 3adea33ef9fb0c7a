/* fuzz_url.c -- libFuzzer target for the Redis URL parser (lib/url.c
 * rlock__url_parse) and the redaction of URLs in messages (rlock_url_redact),
 * compiled directly from lib/ sources. Besides memory safety it checks:
 *  - a parsed URL has a sane port/db/kind;
 *  - the password bytes never reach an output. "Password bytes" are defined
 *    here, independently of lib/url.c, so that they hold for any input:
 *      (1) with an '@' in the string: the bytes from the start of the
 *          authority (after a leading "scheme:" followed by one or more
 *          slashes, else the start: in "user:pass:word@host" the "user:"
 *          is no scheme) up to the LAST '@', minus the user name (up to the
 *          first ':'; with no ':' all of them are the password);
 *      (2) the value of every "password=" (any case), up to the next
 *          "&db=", "&user=", "&password=" or the end.
 *    rlock_url_redact must give exactly the input with each run of password
 *    bytes replaced by "***" (cut to the buffer); rlock__url_parse's message must
 *    not quote a run of them; a password rlock__url_parse accepted must lie in
 *    them. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* The reference: 1 for each password byte of s (n bytes). */
static void reference_mask(const char *s, size_t n, unsigned char *pw) {
  memset(pw, 0, n);
  size_t a = 0;
  if (n && isalpha((unsigned char)s[0])) { /* "scheme:" then at least one '/' */
    size_t i = 1;
    while (i < n && (isalnum((unsigned char)s[i]) || strchr("+-.", s[i]))) i++;
    if (i + 1 < n && s[i] == ':' && s[i + 1] == '/') {
      a = i + 1;
      while (a < n && s[a] == '/') a++;
    }
  }
  const char *at = NULL;
  for (const char *t = s + a; t < s + n; t++)
    if (*t == '@') at = t;
  if (at) {
    const char *from = s + a;
    for (const char *t = s + a; t < at; t++)
      if (*t == ':') {
        from = t + 1;
        break;
      }
    memset(pw + (from - s), 1, (size_t)(at - from));
  }
  for (const char *k = s; (k = strcasestr(k, "password=")) != NULL; k++) {
    const char *v = k + 9, *e = v;
    while (*e && strncasecmp(e, "&db=", 4) && strncasecmp(e, "&user=", 6) && strncasecmp(e, "&password=", 10)) e++;
    memset(pw + (v - s), 1, (size_t)(e - v));
  }
}

/* What rlock_url_redact must write into a buffer of buflen bytes. */
static void expected_redaction(const char *s, size_t n, const unsigned char *pw, char *out, size_t buflen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (!pw[i]) out[o++] = s[i];
    else if (i == 0 || !pw[i - 1]) memcpy(out + o, "***", 3), o += 3;
  }
  out[o] = 0;
  if (o >= buflen) out[buflen - 1] = 0;
}

static void check_redaction(const char *s, size_t n, const unsigned char *pw) {
  size_t cap = 3 * n + 2;
  char *want = malloc(cap), *got = malloc(cap);
  if (!want || !got) abort();
  static const size_t lens[] = {1, 2, 5, 16, 33, 4096};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    size_t len = lens[k] < cap ? lens[k] : cap;
    memset(got, 'Z', cap);
    rlock_url_redact(s, got, len);
    expected_redaction(s, n, pw, want, len);
    if (strcmp(got, want) != 0) abort();       /* a password byte shown, or a public byte lost */
    if (len < cap && got[len] != 'Z') abort(); /* overran the buffer */
  }
  free(want);
  free(got);
}

/* The fixed texts of lib/url.c: its string literals (adjacent ones joined),
 * each also behind the "invalid Redis URL: " that bad() puts first. A run of
 * password bytes may appear in a message only inside such a text ("word" is
 * in "password"): read from the source, so a new message needs no edit here. */
static char **fixed;
static size_t nfixed;

static void add_fixed(const char *a, const char *b) {
  char **f = realloc(fixed, (nfixed + 1) * sizeof *f);
  if (!f) abort();
  fixed = f;
  size_t la = strlen(a), lb = strlen(b);
  if (!(fixed[nfixed] = malloc(la + lb + 1))) abort();
  memcpy(fixed[nfixed], a, la);
  memcpy(fixed[nfixed] + la, b, lb + 1);
  nfixed++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  FILE *f = fopen(RLOCK_URL_C, "r");
  if (!f) abort();
  static char src[1 << 20], lit[4096];
  size_t n = fread(src, 1, sizeof src - 1, f), k = 0;
  fclose(f);
  src[n] = 0;
  bool in_lit = false, joined = false; /* joined: only blanks since the last literal ended */
  for (size_t i = 0; i < n; i++) {
    char c = src[i];
    if (in_lit) {
      if (c == '"') {
        in_lit = false, joined = true;
        continue;
      }
      if (c == '\\' && i + 1 < n) c = src[++i] == 'n' ? '\n' : src[i];
      if (k + 1 < sizeof lit) lit[k++] = c;
    } else if (c == '/' && (src[i + 1] == '*' || src[i + 1] == '/')) { /* a comment */
      char *e = src[i + 1] == '*' ? strstr(src + i + 2, "*/") : strchr(src + i, '\n');
      i = e ? (size_t)(e - src) + 1 : n;
    } else if (c == '\'') { /* a character literal ('"' among them) */
      i += src[i + 1] == '\\' ? 3 : 2;
    } else if (c == '"') {
      if (!joined) k = 0;
      in_lit = true;
    } else if (!isspace((unsigned char)c) && joined) {
      lit[k] = 0;
      add_fixed("", lit);
      add_fixed("invalid Redis URL: ", lit);
      joined = false, k = 0;
    }
  }
  if (nfixed < 20) abort(); /* the source was not read as expected */
  return 0;
}

/* rlock__url_parse's message must not quote a run of 4+ password bytes, except
 * inside one of url.c's fixed texts. */
static void check_message(const char *s, size_t n, const unsigned char *pw, const char *msg) {
  char *run = malloc(n + 1);
  if (!run) abort();
  for (size_t i = 0; i < n;) {
    if (!pw[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && pw[j]) j++;
    if (j - i >= 4) {
      memcpy(run, s + i, j - i);
      run[j - i] = 0;
      bool in_fixed = false;
      for (size_t f = 0; f < nfixed && !in_fixed; f++) in_fixed = strstr(fixed[f], run) && strstr(msg, fixed[f]);
      if (strstr(msg, run) && !in_fixed) abort();
    }
    i = j;
  }
  free(run);
}

/* A password rlock__url_parse accepted, found verbatim once in the input, lies in
 * the password bytes (the parser and the redaction agree). */
static void check_parsed_password(const char *s, const unsigned char *pw, const char *password) {
  size_t pl = strlen(password);
  /* with escapes the decoded text may also stand literally elsewhere
   * ("redis://%40@A": password "@", and the '@' found is the separator) */
  if (pl == 0 || strchr(s, '%')) return;
  const char *hit = strstr(s, password);
  if (!hit || strstr(hit + 1, password)) return; /* decoded from escapes, or ambiguous */
  for (size_t i = 0; i < pl; i++)
    if (!pw[(size_t)(hit - s) + i]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  unsigned char *pw = malloc(size + 1);
  if (!s || !pw) abort();
  memcpy(s, data, size);
  s[size] = 0;
  size_t n = strlen(s); /* the C string the library sees */
  reference_mask(s, n, pw);
  url_t u;
  int rc = rlock__url_parse(&u, s);
  if (rc == 0) {
    if (u.kind == URL_UNIX) {
      if (!u.path || u.path[0] != '/') abort();
    } else {
      if (!u.host || !*u.host || u.port < 1 || u.port > 65535) abort();
    }
    if (u.db < 0 || u.db > 1000000) abort();
    if (u.password) check_parsed_password(s, pw, u.password);
    if (u.sentinel_password) check_parsed_password(s, pw, u.sentinel_password);
    if (u.sentinel && (!u.master || !*u.master || u.nsentinels < 1)) abort();
    for (int i = 0; i < u.nsentinels; i++)
      if (!u.sentinels[i].host || !*u.sentinels[i].host || u.sentinels[i].port < 1 || u.sentinels[i].port > 65535)
        abort();
    rlock__url_free(&u);
  } else if (rc != RLOCK_EURL) {
    abort();
  } else {
    char msg[512];
    strncpy(msg, rlock_last_error(), sizeof msg - 1);
    msg[sizeof msg - 1] = 0;
    check_message(s, n, pw, msg);
  }
  check_redaction(s, n, pw);
  char big[64];
  rlock_url_redact(NULL, big, sizeof big);
  rlock_url_redact(s, NULL, 0);
  free(s);
  free(pw);
  return 0;
}
