/*
 * runlock.h - runs on one process take turns.
 *
 * A session holds an exclusive lock keyed by the target's pid and start
 * time (so a reused pid is another key) for as long as it borrows a
 * thread.  A second run waits for it, up to its deadline, instead of
 * failing as "already traced".  Holding the lock also means no other run
 * is active, which is when a killed run's leftovers may be removed.
 */
#ifndef MA_RUNLOCK_H
#define MA_RUNLOCK_H

#include <stdint.h>
#include <sys/types.h>

/* Wait up to DEADLINE_MS for the lock of PID; the descriptor, or MA_E_*. */
int ma_runlock_acquire(pid_t pid, int deadline_ms, uint64_t *waited_ns);
void ma_runlock_release(int fd);

#endif
