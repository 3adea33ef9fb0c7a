/* test_errors.c -- the pure helpers: error names and messages for every
 * code, rlock_duration_parse on good and bad input, rlock_url_redact (and
 * the messages of malformed URLs: no password in either), and the version
 * string. No server needed (the few well-formed URLs point at port 1 or a
 * socket path that does not exist). */
#include <stddef.h>
#include <string.h>

#include "harness.h"
#include "rlock.h"

/* The ABI: each code's value and name, written out by hand (not from
 * RLOCK_ERRNO_MAP) so a change to the list's values fails here. */
static const struct {
  int code;
  const char *name;
} codes[] = {
    {0, "RLOCK_OK"},         {-1, "RLOCK_EINVAL"},    {-2, "RLOCK_ENOMEM"},    {-3, "RLOCK_EURL"},
    {-4, "RLOCK_ECONNECT"},  {-5, "RLOCK_EAUTH"},     {-6, "RLOCK_ETLS"},      {-7, "RLOCK_ETIMEDOUT"},
    {-8, "RLOCK_ECONNLOST"}, {-9, "RLOCK_EBUSY"},     {-10, "RLOCK_ENOTHELD"}, {-11, "RLOCK_ECANCELED"},
    {-12, "RLOCK_ESERVER"},  {-13, "RLOCK_EPROTO"},   {-14, "RLOCK_ECLOSED"},  {-15, "RLOCK_EDEADLK"},
    {-16, "RLOCK_ESYS"},     {-17, "RLOCK_ENOTLOCK"}, {-18, "RLOCK_ENOSYNC"},  {-19, "RLOCK_ENOTREENTRANT"},
    {-20, "RLOCK_ENOPERM"},  {-21, "RLOCK_EUPGRADE"},
};
#define NCODES (sizeof codes / sizeof codes[0])

/* The list in rlock.h: values 0, -1, -2... with no gap, each enum constant
 * equal to its row, and every code pinned above (a new code gets its row
 * there too). */
#define MAP_ROW(name, value, text) {RLOCK_##name, value, "RLOCK_" #name, text},
static const struct {
  int constant, value;
  const char *name, *text;
} map[] = {RLOCK_ERRNO_MAP(MAP_ROW)};
#undef MAP_ROW

TEST(err_map_matches_abi) {
  size_t n = sizeof map / sizeof map[0];
  CHECK_MSG(n == NCODES, "RLOCK_ERRNO_MAP has %zu codes, the pinned list %zu", n, NCODES);
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(map[i].value == -(int)i, "%s has value %d, want %d", map[i].name, map[i].value, -(int)i);
    CHECK(map[i].constant == map[i].value);
    CHECK_STREQ(rlock_strerror(map[i].value), map[i].text);
    if (i < NCODES) {
      CHECK(codes[i].code == map[i].value);
      CHECK_STREQ(codes[i].name, map[i].name);
    }
  }
}

/* The ABI of rlock_stats_t: each counter's place, written out by hand. */
TEST(stats_layout) {
  static const struct {
    const char *field;
    size_t off;
  } pinned[] = {
#define PIN(f) {#f, offsetof(rlock_stats_t, f)}
      PIN(commands_sent),      PIN(writes),
      PIN(scripts_sent),       PIN(noscript_fallbacks),
      PIN(subscribes),         PIN(unsubscribes),
      PIN(messages),           PIN(acquire_attempts),
      PIN(renewals),           PIN(renewed_locks),
      PIN(reconnects),         PIN(timeouts),
      PIN(locks_lost),         PIN(held),
      PIN(user_commands),      PIN(acquire_sync_misses),
      PIN(unlock_sync_misses), PIN(renewal_sync_misses),
      PIN(fast_calls),         PIN(handoffs_heard),
#undef PIN
  };
  for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
    CHECK_MSG(pinned[i].off == i * sizeof(uint64_t), "rlock_stats_t.%s at %zu, want %zu", pinned[i].field,
              pinned[i].off, i * sizeof(uint64_t));
  CHECK_EQ((int)sizeof(rlock_stats_t), 32 * 8); /* counters plus reserved room: fixed */
#define COUNT_ROW(name, field) +1
  CHECK_EQ(0 RLOCK_STATS_MAP(COUNT_ROW), (int)(sizeof pinned / sizeof pinned[0]));
#undef COUNT_ROW
}

/* rlock_options_t keeps its size when options are added (its reserved room),
 * and rlock_options_init leaves that room zero. */
TEST(options_layout) {
  if (sizeof(void *) == 8) CHECK_EQ((int)sizeof(rlock_options_t), 280);
  rlock_options_t o;
  memset(&o, 0xab, sizeof o);
  rlock_options_init(&o);
  for (size_t i = 0; i < sizeof o.reserved_ / sizeof o.reserved_[0]; i++) CHECK(o.reserved_[i] == 0);
}

TEST(err_names) {
  for (size_t i = 0; i < NCODES; i++) {
    CHECK_STREQ(rlock_err_name(codes[i].code), codes[i].name);
    const char *msg = rlock_strerror(codes[i].code);
    CHECK_MSG(msg && *msg, "strerror(%s) is empty", codes[i].name);
    /* Every code has its own message. */
    for (size_t j = 0; j < i; j++)
      CHECK_MSG(strcmp(msg, rlock_strerror(codes[j].code)) != 0, "%s and %s share \"%s\"", codes[i].name, codes[j].name,
                msg);
  }
}

TEST(err_unknown_codes) {
  int unknown[] = {1, 42, -99, -1000, -2147483647 - 1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char *n = rlock_err_name(unknown[i]);
    const char *m = rlock_strerror(unknown[i]);
    CHECK(n && *n);
    CHECK(m && *m);
    for (size_t j = 0; j < NCODES; j++) CHECK(strcmp(n, codes[j].name) != 0);
  }
}

TEST(last_error_never_null) { CHECK(rlock_last_error() != NULL); }

TEST(version) { CHECK_STREQ(rlock_version(), RLOCK_VERSION_STRING); }

static void parse_ok(const char *s, int64_t want) {
  int64_t v = -12345;
  int rc = rlock_duration_parse(s, &v);
  CHECK_MSG(rc == 0, "parse(\"%s\") = %s, want OK", s, rlock_err_name(rc));
  CHECK_MSG(v == want, "parse(\"%s\") = %lld, want %lld", s, (long long)v, (long long)want);
}

static void parse_bad(const char *s) {
  int64_t v = 0;
  int rc = rlock_duration_parse(s, &v);
  CHECK_MSG(rc == RLOCK_EINVAL, "parse(\"%s\") = %s, want RLOCK_EINVAL", s, rlock_err_name(rc));
}

TEST(duration_good) {
  parse_ok("250", 250);
  parse_ok("250ms", 250);
  parse_ok("3s", 3000);
  parse_ok("2m", 120000);
  parse_ok("0", 0);
  parse_ok("1", 1);
  parse_ok("30000", 30000);
  parse_ok("9223372036854775807", INT64_MAX);
  parse_ok("1.5s", 1500);
  parse_ok("0.001s", 1);
  parse_ok("1.25m", 75000);
  parse_ok("1h", 3600000);
  parse_ok("1d", 86400000);
  parse_ok("1h30m", 5400000);
  parse_ok("2m30.5s", 150500);
  parse_ok("1.0", 1);
  parse_ok("106751991167d", 106751991167LL * 86400000);
}

TEST(duration_bad) {
  const char *bad[] = {"",
                       "-1",
                       "-1s",
                       "abc",
                       "5x",
                       "ms",
                       "s",
                       "3x",
                       "1.5",
                       "3ss",
                       "3 m",
                       "s3",
                       "--1",
                       "3sm",
                       "9223372036854775808",
                       "99999999999999999999999",
                       "9223372036854775807s",
                       "153722867280913m",
                       "9223372036854776s",
                       "1.",
                       ".5s",
                       "1.s",
                       "0.0005s",
                       "1.5ms",
                       "1h30",
                       "106751991168d",
                       "9223372036854775807ms1ms",
                       "1.0000000001s",
                       "1h 30m",
                       "1d-1h"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) parse_bad(bad[i]);
  int64_t v;
  CHECK_RC(rlock_duration_parse(NULL, &v), RLOCK_EINVAL);
}

static void redacted(const char *url, const char *secret, const char *keep) {
  char buf[512];
  memset(buf, 'Z', sizeof buf);
  rlock_url_redact(url, buf, sizeof buf);
  CHECK_MSG(memchr(buf, 0, sizeof buf) != NULL, "redact(%s): not terminated", url);
  CHECK_MSG(!strstr(buf, secret), "redact(%s) = %s still shows the password", url, buf);
  CHECK_MSG(strstr(buf, "***"), "redact(%s) = %s has no ***", url, buf);
  CHECK_MSG(strstr(buf, keep), "redact(%s) = %s lost \"%s\"", url, buf, keep);
}

TEST(url_redact) {
  redacted("redis://alice:s3cr3tpw@127.0.0.1:6379/2", "s3cr3tpw", "127.0.0.1:6379");
  redacted("redis://alice:s3cr3tpw@127.0.0.1:6379/2", "s3cr3tpw", "alice");
  redacted("redis://:hunter2pw@example.com", "hunter2pw", "example.com");
  redacted("rediss://u:p%40ssw0rdX@host:6380", "ssw0rdX", "host:6380");
  redacted("unix:///tmp/redis.sock?db=3&password=topsecretpw", "topsecretpw", "/tmp/redis.sock");
  redacted("unix:///tmp/redis.sock?user=bob&password=topsecretpw&db=1", "topsecretpw", "db=1");

  /* No password: unchanged. */
  char buf[256];
  rlock_url_redact("redis://127.0.0.1:6379/0", buf, sizeof buf);
  CHECK_STREQ(buf, "redis://127.0.0.1:6379/0");

  /* A short buffer is filled and terminated, never overrun, and still hides
   * the password. */
  char small[32];
  memset(small, 'Z', sizeof small);
  rlock_url_redact("redis://user:abcdefghijklmnop@h:1", small, 24);
  CHECK(memchr(small, 0, 24) != NULL);
  CHECK_EQ(small[24], 'Z');
  CHECK(!strstr(small, "abcdef"));
}

/* URLs a user might get wrong, one per class; in each the password is made
 * of the fragments PWa1 and PWb2 (so a password cut in two at a '/', '?',
 * '#', '&' or '@' is still found). Neither may appear in the redacted URL
 * nor in the message of rlock_client_new. tests/cli/urls.sh runs the same
 * classes through the CLI. */
static const char *const nasty_urls[] = {
    "redis://u:PWa1/PWb2@127.0.0.1:1",                   /* '/' in the password */
    "redis://u:PWa1?PWb2@127.0.0.1:1",                   /* '?' */
    "redis://u:PWa1#PWb2@127.0.0.1:1",                   /* '#' */
    "redis://u:PWa1@PWb2@127.0.0.1:1",                   /* '@' (valid: the last '@' ends it) */
    "redis://u:PWa1:PWb2@127.0.0.1:1",                   /* ':' (valid) */
    "redis://:PWa1/PWb2@127.0.0.1:1",                    /* no user, '/' */
    "redis://PWa1/PWb2@127.0.0.1:1",                     /* password@host form, '/' */
    "redis://PWa1PWb2@127.0.0.1:1",                      /* password@host form (valid) */
    "redis://u:PWa1PWb2@",                               /* no host */
    "redis://u:PWa1PWb2@:1",                             /* no host, a port */
    "redis://u:PWa1/PWb2@",                              /* no host, '/' */
    "redis:/u:PWa1PWb2@127.0.0.1:1",                     /* one slash */
    "redis:u:PWa1PWb2@127.0.0.1:1",                      /* no slash */
    "redis//u:PWa1PWb2@127.0.0.1:1",                     /* no colon */
    "redis:///u:PWa1PWb2@127.0.0.1:1",                   /* three slashes */
    "rediss:/u:PWa1/PWb2@127.0.0.1:1",                   /* TLS, one slash, '/' */
    "http://u:PWa1PWb2@127.0.0.1:1",                     /* unknown scheme */
    "REDIS://u:PWa1PWb2@127.0.0.1:1",                    /* upper-case scheme */
    "u:PWa1PWb2@127.0.0.1:1",                            /* no scheme */
    ":PWa1PWb2@127.0.0.1:1",                             /* no scheme, no user */
    "u:PWa1:PWb2@127.0.0.1:1",                           /* no scheme, ':' in the password */
    "redis:u:PWa1:PWb2@127.0.0.1:1",                     /* no slash, ':' in the password */
    " redis://u:PWa1PWb2@127.0.0.1:1",                   /* leading blank */
    "redis://u:PWa1%zzPWb2@127.0.0.1:1",                 /* bad %-escape */
    "redis://u:PWa1%2@",                                 /* cut short in an escape */
    "redis://u:PWa1PWb2@127.0.0.1:99999",                /* bad port */
    "redis://u:PWa1PWb2@127.0.0.1:1/x",                  /* bad db */
    "redis://u:PWa1PWb2@127.0.0.1:1?db=1",               /* query string */
    "redis://u:PWa1PWb2@[::1",                           /* unterminated IPv6 */
    "redis://u:PWa1PWb2@h!st:1",                         /* bad host character */
    "redis://u:PWa1 PWb2@127.0.0.1:1",                   /* blank (valid) */
    "redis://u:PWa1PWb2@@127.0.0.1:1",                   /* two '@' (valid) */
    "rediss://u:PWa1PWb2@127.0.0.1:1",                   /* TLS, nothing listens */
    "unix:///nonexistent/x?password=PWa1PWb2",           /* valid */
    "unix:///nonexistent/x?password=PWa1#PWb2",          /* '#' (valid) */
    "unix:///nonexistent/x?password=PWa1&PWb2",          /* '&' */
    "unix:///nonexistent/x?password=&password=PWa1PWb2", /* repeated */
    "unix:///nonexistent/x?PASSWORD=PWa1PWb2",           /* upper case */
    "unix:///nonexistent/x?password=PWa1PWb2&db=x",      /* bad db after it */
    "unix:///nonexistent/x?user=u&password=PWa1%zzPWb2", /* bad escape */
    "unix://u:PWa1PWb2@/nonexistent/x",                  /* credentials in a unix URL */
    "unix:///nonexistent/x?password=PWa1@PWb2",          /* '@' in a query password */
};

static int shows_password(const char *s) { return strstr(s, "PWa1") || strstr(s, "PWb2"); }

TEST(url_redact_malformed) {
  for (size_t i = 0; i < sizeof nasty_urls / sizeof nasty_urls[0]; i++) {
    char buf[512];
    rlock_url_redact(nasty_urls[i], buf, sizeof buf);
    CHECK_MSG(!shows_password(buf), "redact(%s) = %s shows the password", nasty_urls[i], buf);
    for (size_t len = 1; len < strlen(nasty_urls[i]) + 4; len++) { /* every truncation */
      rlock_url_redact(nasty_urls[i], buf, len);
      CHECK_MSG(strlen(buf) < len, "redact(%s, %zu) overran", nasty_urls[i], len);
      CHECK_MSG(!shows_password(buf), "redact(%s, %zu) = %s", nasty_urls[i], len, buf);
    }
  }
}

TEST(url_messages_hide_password) {
  for (size_t i = 0; i < sizeof nasty_urls / sizeof nasty_urls[0]; i++) {
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = nasty_urls[i];
    o.connect_timeout_ms = 2000;
    rlock_client_t *c = NULL;
    int rc = rlock_client_new(&c, &o);
    CHECK_MSG(rc != 0, "%s: connected?", nasty_urls[i]);
    const char *msg = rlock_last_error();
    CHECK_MSG(!shows_password(msg), "%s: %s: the message shows the password: %s", nasty_urls[i], rlock_err_name(rc),
              msg);
    CHECK_MSG(*msg, "%s: no message", nasty_urls[i]);
  }
}

/* A character that ends the authority part, inside the password: the message
 * says how to write it instead of complaining about the port. */
TEST(url_message_points_at_escape) {
  static const struct {
    const char *url, *hint;
  } cases[] = {
      {"redis://u:PWa1/PWb2@127.0.0.1:1", "%2F"},
      {"redis://:PWa1?PWb2@127.0.0.1:1", "%3F"},
      {"rediss://u:PWa1#PWb2@127.0.0.1:1/0", "%23"},
      {"unix:///nonexistent/x?password=PWa1&PWb2", "%26"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rlock_options_t o;
    rlock_options_init(&o);
    o.url = cases[i].url;
    rlock_client_t *c = NULL;
    CHECK_RC(rlock_client_new(&c, &o), RLOCK_EURL);
    const char *msg = rlock_last_error();
    CHECK_MSG(strstr(msg, cases[i].hint), "%s: '%s' does not mention %s", cases[i].url, msg, cases[i].hint);
    CHECK_MSG(!strstr(msg, "port"), "%s: '%s' blames the port", cases[i].url, msg);
  }
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  RUN(err_map_matches_abi);
  RUN(stats_layout);
  RUN(options_layout);
  RUN(err_names);
  RUN(err_unknown_codes);
  RUN(last_error_never_null);
  RUN(version);
  RUN(duration_good);
  RUN(duration_bad);
  RUN(url_redact);
  RUN(url_redact_malformed);
  RUN(url_messages_hide_password);
  RUN(url_message_points_at_escape);
  return th_done();
}
