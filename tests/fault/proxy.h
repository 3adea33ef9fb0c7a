/* proxy.h -- a loopback TCP fault proxy for the fault suite: clients connect
 * to 127.0.0.1:fp_port() and each connection is forwarded to the real
 * redis-server by one poll(2) thread, which can, on command:
 *   delay      hold every chunk for N ms before forwarding it (each way);
 *   blackhole  stop forwarding in one or both directions while keeping the
 *              sockets open (bytes wait, as TCP would keep retransmitting
 *              them; fp_blackhole(p, 0) heals and delivers them late);
 *   cut        close every current connection at once;
 *   refuse     accept new connections and close them at once (server "down");
 *   drop       one connection only (named by the port the server sees it
 *              from, CLIENT LIST addr=) silently discards what it carries in
 *              one or both directions, sockets kept: a NAT or load balancer
 *              that forgot the flow. Other and new connections work.
 *   hold       one connection only (named as for drop) keeps what it carries
 *              in one or both directions, sockets kept, and delivers it when
 *              released, even if the client has closed the connection since
 *              (the kernel keeps sending what an application wrote before
 *              close): one path of the network stuck, then recovered.
 * Only 127.0.0.1. */
#ifndef RLOCK_FAULT_PROXY_H
#define RLOCK_FAULT_PROXY_H

#include <stddef.h>
#include <stdint.h>

typedef struct fp_proxy fp_proxy_t;

#define FP_UP 1   /* client -> server (requests) */
#define FP_DOWN 2 /* server -> client (replies, pub/sub messages) */
#define FP_BOTH 3

fp_proxy_t *fp_start(int upstream_port); /* fails the test on error */
/* fp_start in two steps: fp_listen binds the port (known at once, no thread
 * yet: worker processes can be forked now), fp_run starts forwarding. */
fp_proxy_t *fp_listen(int upstream_port);
void fp_run(fp_proxy_t *p);
int fp_port(const fp_proxy_t *p);
void fp_delay(fp_proxy_t *p, int64_t ms);
void fp_blackhole(fp_proxy_t *p, int dirs); /* 0: heal */
/* In dirs, forward one piece per write, the next one 1 ms later, pieces of
 * 1, 2, ... `bytes` bytes in turn: the receiver reads a stream cut at every
 * offset (a reply split across reads, a read starting at a reply's start
 * while the one before ended in the middle of another). 0: whole chunks. */
void fp_trickle(fp_proxy_t *p, int dirs, size_t bytes);
void fp_refuse(fp_proxy_t *p, int on);
void fp_cut(fp_proxy_t *p); /* returns once every connection is closed */
/* The connection whose server-side socket has local port server_port (the
 * port in the server's CLIENT LIST addr=127.0.0.1:PORT) discards its bytes in
 * dirs from now on (0: forwards again; discarded bytes are gone). Up to 16
 * ports at a time. */
void fp_drop_conn(fp_proxy_t *p, int server_port, int dirs);
/* The connection named by server_port (as for fp_drop_conn) holds back its
 * bytes in dirs from now on; 0 delivers what it held and forwards again.
 * Bytes the client wrote before closing the connection are still delivered
 * upstream on release (then the proxy closes it); replies to a closed client
 * are discarded. Up to 16 ports at a time. */
void fp_hold_conn(fp_proxy_t *p, int server_port, int dirs);
int fp_connections(fp_proxy_t *p);
uint64_t fp_accepted(fp_proxy_t *p);
/* Returns once the proxy's thread has done two whole passes of its loop
 * since the call: what was readable at the call has been read (and
 * forwarded, unless held back) by then. */
void fp_sync(fp_proxy_t *p);
/* Bytes forwarded so far in a direction. */
uint64_t fp_bytes(fp_proxy_t *p, int dir);
void fp_stop(fp_proxy_t *p);

#endif
