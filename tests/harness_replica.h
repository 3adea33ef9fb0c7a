/* harness_replica.h -- test servers for the replica-sync check: replicas of a
 * harness master (redis-server --replicaof), waiting until the master sees
 * them online, pausing a server (SIGSTOP) and killing a library client's
 * connections by name. */
#ifndef RLOCK_TEST_HARNESS_REPLICA_H
#define RLOCK_TEST_HARNESS_REPLICA_H

#include "harness.h"

/* Starts a replica of master (stop it with th_server_stop). */
th_server_t *th_replica_start(th_server_t *master);
/* The replicas master reports online (INFO replication: slaveN:...state=online). */
int th_replicas_online(th_server_t *master);
/* Waits until master reports exactly n replicas, all online and all
 * acknowledging its writes (th_replicas_caught_up); fails the test after
 * timeout_ms. */
void th_replicas_wait(th_server_t *master, int n, int64_t timeout_ms);
/* Waits until n replicas acknowledge master's writes so far (raw WAIT n 100:
 * counts in master's cmdstat_wait), e.g. after a resume. */
void th_replicas_caught_up(th_server_t *master, int n, int64_t timeout_ms);
/* SIGSTOP / SIGCONT: a server that keeps its connections but answers nothing. */
void th_server_pause(th_server_t *s);
void th_server_resume(th_server_t *s);
/* CLIENT KILL of every connection named name (CLIENT SETNAME); returns how many. */
int th_kill_clients_named(th_server_t *s, const char *name);

#endif
