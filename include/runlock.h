/*
 * runlock.h - runs on one process take turns.
 *
 * A session holds an exclusive lock keyed by the target's pid and start
 * time (so a reused pid is another key), and one on the target's
 * executable (seen alike from every mount namespace), for as long as it
 * borrows a thread.  A second run waits for it, up to its deadline, instead of
 * failing as "already traced".  Holding the lock also means no other run
 * is active, which is when a killed run's leftovers may be removed.
 */
#ifndef MA_RUNLOCK_H
#define MA_RUNLOCK_H

#include <stdint.h>
#include <sys/types.h>

/* A held lock: its two descriptors (-1: not held). */
struct ma_runlock {
	int file_fd; /* PID.STARTTIME.lock in /run/memattach (or /tmp/memattach) */
	int exe_fd; /* the target's executable, the same inode in every mount namespace */
};

/* Wait up to DEADLINE_MS for the lock of PID into *L; 0 or MA_E_*. */
int ma_runlock_acquire(pid_t pid, int deadline_ms, uint64_t *waited_ns, struct ma_runlock *l);
/* Let go of *L (either descriptor may be -1). */
void ma_runlock_release(struct ma_runlock *l);

#endif
