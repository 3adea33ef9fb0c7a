/* test_errors.c -- the pure helpers: error names and messages for every
 * code, rlock_duration_parse on good and bad input, rlock_url_redact, and
 * the version string. No server needed. */
#include <string.h>

#include "harness.h"
#include "rlock.h"

static const struct {
  int code;
  const char *name;
} codes[] = {
    {RLOCK_OK, "RLOCK_OK"},           {RLOCK_EINVAL, "RLOCK_EINVAL"},
    {RLOCK_ENOMEM, "RLOCK_ENOMEM"},   {RLOCK_EURL, "RLOCK_EURL"},
    {RLOCK_ECONNECT, "RLOCK_ECONNECT"}, {RLOCK_EAUTH, "RLOCK_EAUTH"},
    {RLOCK_ETLS, "RLOCK_ETLS"},       {RLOCK_ETIMEDOUT, "RLOCK_ETIMEDOUT"},
    {RLOCK_ECONNLOST, "RLOCK_ECONNLOST"}, {RLOCK_EBUSY, "RLOCK_EBUSY"},
    {RLOCK_ENOTHELD, "RLOCK_ENOTHELD"}, {RLOCK_ECANCELED, "RLOCK_ECANCELED"},
    {RLOCK_ESERVER, "RLOCK_ESERVER"}, {RLOCK_EPROTO, "RLOCK_EPROTO"},
    {RLOCK_ECLOSED, "RLOCK_ECLOSED"}, {RLOCK_EDEADLK, "RLOCK_EDEADLK"},
    {RLOCK_ESYS, "RLOCK_ESYS"},
};
#define NCODES (sizeof codes / sizeof codes[0])

TEST(err_names) {
  for (size_t i = 0; i < NCODES; i++) {
    CHECK_STREQ(rlock_err_name(codes[i].code), codes[i].name);
    const char *msg = rlock_strerror(codes[i].code);
    CHECK_MSG(msg && *msg, "strerror(%s) is empty", codes[i].name);
    /* Every code has its own message. */
    for (size_t j = 0; j < i; j++)
      CHECK_MSG(strcmp(msg, rlock_strerror(codes[j].code)) != 0, "%s and %s share \"%s\"",
                codes[i].name, codes[j].name, msg);
  }
}

TEST(err_unknown_codes) {
  int unknown[] = {1, 42, -17, -1000, -2147483647 - 1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char *n = rlock_err_name(unknown[i]);
    const char *m = rlock_strerror(unknown[i]);
    CHECK(n && *n);
    CHECK(m && *m);
    for (size_t j = 0; j < NCODES; j++) CHECK(strcmp(n, codes[j].name) != 0);
  }
}

TEST(last_error_never_null) { CHECK(rlock_last_error() != NULL); }

TEST(version) {
  CHECK_STREQ(rlock_version(), RLOCK_VERSION_STRING);
}

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
}

TEST(duration_bad) {
  const char *bad[] = {"",     "-1",  "-1s", "abc", "5h",  "ms",  "s",    "3x",  "1.5s",
                       "3ss",  "3 m", "s3",  "--1", "3sm", "9223372036854775808",
                       "99999999999999999999999", "9223372036854775807s",
                       "153722867280913m", "9223372036854776s"};
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

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  RUN(err_names);
  RUN(err_unknown_codes);
  RUN(last_error_never_null);
  RUN(version);
  RUN(duration_good);
  RUN(duration_bad);
  RUN(url_redact);
  return th_done();
}
