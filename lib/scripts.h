/* scripts.h -- the one list of embedded Lua scripts: X(<ENUM>, <file>), one row per
 * lua/<file>.lua. It makes the SCRIPT_* enum (below) and the bodies table
 * (script.c); lib/CMakeLists.txt reads the same rows to embed each file, and
 * fails the configure step when a .lua file in lua/ has no row or a row no file.
 * Each row is written exactly "X(<ENUM>, <file>)" (one space). New rows go at the
 * end (after a lock kind's last row). */
#ifndef RLOCK_SCRIPTS_H
#define RLOCK_SCRIPTS_H

#define RLOCK__SCRIPT_MAP(X)                        \
  X(ACQUIRE, reentrant_acquire)                     \
  X(ACQUIRE_UNDO, reentrant_acquire_undo)           \
  X(UNLOCK, reentrant_unlock)                       \
  X(RENEW, reentrant_renew)                         \
  X(FORCE_UNLOCK, reentrant_force_unlock)           \
  X(SIMPLE_ACQUIRE, simple_acquire)                 \
  X(SIMPLE_ACQUIRE_UNDO, simple_acquire_undo)       \
  X(SIMPLE_UNLOCK, simple_unlock)                   \
  X(SIMPLE_RENEW, simple_renew)                     \
  X(SIMPLE_FORCE_UNLOCK, simple_force_unlock)       \
  X(SIMPLE_QUERY, simple_query)                     \
  X(FAIR_ACQUIRE, fair_acquire)                     \
  X(FAIR_ACQUIRE_UNDO, fair_acquire_undo)           \
  X(FAIR_UNLOCK, fair_unlock)                       \
  X(FAIR_FORCE_UNLOCK, fair_force_unlock)           \
  X(NONREENTRANT_ACQUIRE, nonreentrant_acquire)     \
  X(FENCED_ACQUIRE, fenced_acquire)                 \
  X(RW_READ_ACQUIRE, rw_read_acquire)               \
  X(RW_WRITE_ACQUIRE, rw_write_acquire)             \
  X(RW_READ_UNLOCK, rw_read_unlock)                 \
  X(RW_WRITE_UNLOCK, rw_write_unlock)               \
  X(RW_ACQUIRE_UNDO, rw_acquire_undo)               \
  X(RW_READ_RENEW, rw_read_renew)                   \
  X(RW_FORCE_UNLOCK, rw_force_unlock)               \
  X(RW_QUERY, rw_query)                             \
  X(SEMAPHORE_ACQUIRE, semaphore_acquire)           \
  X(SEMAPHORE_ACQUIRE_UNDO, semaphore_acquire_undo) \
  X(SEMAPHORE_RELEASE, semaphore_release)           \
  X(SEMAPHORE_SET, semaphore_set)                   \
  X(SEMAPHORE_ADD, semaphore_add)                   \
  X(SEMAPHORE_DRAIN, semaphore_drain)               \
  X(LATCH_SET, latch_set)                           \
  X(LATCH_COUNT_DOWN, latch_count_down)             \
  X(PES_ACQUIRE, pes_acquire)                       \
  X(PES_ACQUIRE_UNDO, pes_acquire_undo)             \
  X(PES_RELEASE, pes_release)                       \
  X(PES_RENEW, pes_renew)                           \
  X(PES_CALL, pes_call)                             \
  X(FAIR_TELL_HEAD, fair_tell_head)

/* The scripts by number, 1 to SCRIPT_N (0: none). Here, not in script.h, so
 * that conn.c (the handshake's SCRIPT EXISTS) needs no header above its own. */
#define SCRIPT_ENUM_ROW(e, file) SCRIPT_##e,
enum { SCRIPT__NONE, RLOCK__SCRIPT_MAP(SCRIPT_ENUM_ROW) SCRIPT__END, SCRIPT_N = SCRIPT__END - 1 };
#undef SCRIPT_ENUM_ROW

#endif
