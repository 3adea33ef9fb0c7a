/* test_locale.c -- the library's case-insensitive words hold in any locale
 * the application sets. In a Turkish locale (tr_TR.UTF-8) the C library's
 * strcasecmp does not fold 'I' and 'i' together, while Redis looks commands up
 * in ASCII: "multi" or "subscribe" typed in lower case must still be refused
 * by rlock_client_command's filter (else a lower-case MULTI puts the shared
 * user connection in a transaction for every thread), and a URL scheme in
 * capitals ("REDIS://") must still parse. The locale is built at run time with
 * localedef (tests/CMakeLists.txt registers this test only where it can). */
#include <ctype.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_server_t *srv;

/* Builds tr_TR.UTF-8 in a temp dir and switches the whole process to it. */
static void enter_turkish_locale(void) {
  const char *dir = th_tempdir();
  char out[512];
  snprintf(out, sizeof out, "%s/tr_TR.UTF-8", dir);
  const char *argv[] = {"localedef", "-i", "tr_TR", "-f", "UTF-8", out, NULL};
  int st = th_exec(argv);
  CHECK_MSG(st == 0 || st == 1, "localedef failed (exit %d)", st); /* 1: built, with warnings */
  CHECK_EQ(setenv("LOCPATH", dir, 1), 0);
  CHECK_MSG(setlocale(LC_ALL, "tr_TR.UTF-8") != NULL, "cannot set the locale built in %s", dir);
  /* The premise: the C library's case folding differs from ASCII here
   * (tolower: ASan replaces strncasecmp with an ASCII one of its own). */
  CHECK_MSG(tolower('I') != 'i', "tolower folds I to i in this locale: the test proves nothing");
}

static void check_refused(rlock_client_t *c, int argc, const char *const *argv, const char *named) {
  rlock_reply_t *r = (rlock_reply_t *)1;
  int rc = rlock_client_command(c, argc, argv, NULL, &r);
  CHECK_MSG(rc == RLOCK_EINVAL, "%s %s: got %s, want RLOCK_EINVAL", argv[0], argc > 1 ? argv[1] : "",
            rlock_err_name(rc));
  CHECK(r == NULL);
  CHECK_MSG(strstr(rlock_last_error(), named) != NULL, "message for %s: %s", named, rlock_last_error());
}

TEST(refused_commands_in_lower_case) {
  rlock_client_t *c = th_client(srv->url, 0);
  static const char *const multi[] = {"multi"}, *const sub[] = {"subscribe", "loc:ch"}, *const discard[] = {"discard"},
                           *const reply[] = {"client", "reply", "off"}, *const quit[] = {"quit"},
                           *const watch[] = {"watch", "loc:k"};
  check_refused(c, 1, multi, "MULTI");
  check_refused(c, 2, sub, "SUBSCRIBE");
  check_refused(c, 1, discard, "DISCARD");
  check_refused(c, 3, reply, "CLIENT REPLY");
  check_refused(c, 1, quit, "QUIT");
  check_refused(c, 2, watch, "WATCH");
  /* The user connection is still in its normal state: PING answers PONG, not QUEUED. */
  static const char *const ping[] = {"PING"};
  rlock_reply_t *r = NULL;
  CHECK_OK(rlock_client_command(c, 1, ping, NULL, &r));
  CHECK_MSG(r->type == RLOCK_REPLY_STATUS && !strcmp(r->str, "PONG"), "PING answered %s", r->str ? r->str : "?");
  rlock_reply_free(r);
  rlock_client_free(c);
}

TEST(scheme_in_capitals) {
  char url[400];
  snprintf(url, sizeof url, "REDIS://127.0.0.1:%d", srv->port);
  rlock_options_t o;
  rlock_options_init(&o);
  o.url = url;
  rlock_client_t *c = NULL;
  CHECK_OK(rlock_client_new(&c, &o));
  rlock_client_free(c);
  char shown[64];
  rlock_url_redact("unix:///s?PASSWORD=LocSecret1", shown, sizeof shown);
  CHECK_MSG(!strstr(shown, "LocSecret1"), "redacted: %s", shown);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  enter_turkish_locale();
  RUN(refused_commands_in_lower_case);
  RUN(scheme_in_capitals);
  th_server_stop(srv);
  return th_done();
}
