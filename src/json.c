/* json.c -- JSON string output for the CLI: quotes and escapes any bytes
 * (lock names may hold anything); bytes that are not valid UTF-8 are written
 * as \u00XX, one per byte. */
#include "cli.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  size_t len;
  uint32_t cp;
  if (s[0] < 0x80) return 1;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) len = 2, cp = s[0] & 0x1F;
  else if (s[0] >= 0xE0 && s[0] <= 0xEF) len = 3, cp = s[0] & 0x0F;
  else if (s[0] >= 0xF0 && s[0] <= 0xF4) len = 4, cp = s[0] & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
  if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return len;
}

void json_string(FILE *f, const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  fputc('"', f);
  for (size_t i = 0; i < len;) {
    unsigned char c = s[i];
    size_t n = utf8_seq(s + i, len - i);
    if (n == 0) fprintf(f, "\\u%04x", c), n = 1;
    else if (c == '"' || c == '\\') fputc('\\', f), fputc(c, f);
    else if (c == '\n') fputs("\\n", f);
    else if (c == '\r') fputs("\\r", f);
    else if (c == '\t') fputs("\\t", f);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fwrite(s + i, 1, n, f);
    i += n;
  }
  fputc('"', f);
}
