/* test_proxy.c -- the fault proxy itself (proxy.c): a fault it is told to
 * inject holds from the moment the call returns, or the tests that use it
 * see what they did not ask for.
 *   blackhole_holds_at_return  fp_blackhole(UP) while the proxy's thread
 *                     sleeps in poll(2), then a request written at once:
 *                     not one byte of it goes up (before: the thread woke
 *                     with the request readable and forwarded it under the
 *                     setting it read before it slept; fault_write_backlog
 *                     saw "1 answered while the proxy read nothing"). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fault_harness.h"
#include "proxy.h"

static th_server_t *srv;
static fp_proxy_t *px;

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  return fd;
}

static void ping(int fd) { CHECK(write(fd, "PING\r\n", 6) == 6); }

static void pong(int fd) {
  char b[8];
  size_t got = 0;
  while (got < 7) {
    ssize_t n = read(fd, b + got, 7 - got);
    CHECK_MSG(n > 0, "no PONG");
    got += (size_t)n;
  }
  CHECK(!memcmp(b, "+PONG\r\n", 7));
}

TEST(blackhole_holds_at_return) {
  int fd = dial(fp_port(px));
  ping(fd);
  pong(fd); /* the pair is up */
  int leaked = 0;
  for (int i = 0; i < 300; i++) {
    fp_blackhole(px, FP_UP);
    uint64_t up0 = fp_bytes(px, FP_UP);
    ping(fd);
    fp_sync(px);
    if (fp_bytes(px, FP_UP) != up0) leaked++;
    fp_blackhole(px, 0);
    pong(fd);
  }
  CHECK_MSG(leaked == 0, "%d of 300 requests went up through a blackhole", leaked);
  close(fd);
}

int main(int argc, char **argv) {
  th_init(argc, argv, 60);
  srv = th_server_start(NULL);
  px = fp_start(srv->port);
  RUN(blackhole_holds_at_return);
  fp_stop(px);
  th_server_stop(srv);
  return th_done();
}
