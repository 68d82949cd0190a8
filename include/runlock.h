/*
 * runlock.h - runs on one process take turns.
 *
 * A session holds an exclusive flock on the target's /proc/PID/personality
 * for as long as it borrows a thread.  That file names the process, not
 * its program: runs on other processes never wait for it.  It is one inode
 * for every run that sees the same /proc, whatever its mount namespace or
 * user; it is mode 0400 (only the process's own user and root can open it,
 * so a bystander cannot hold it), and unlike mem it opens for a process
 * whose main thread has exited.  A second run waits for it, up to its
 * deadline, instead of failing as "already traced".  Holding the lock also
 * means no other run is active, which is when a killed run's leftovers may
 * be removed.
 */
#ifndef MA_RUNLOCK_H
#define MA_RUNLOCK_H

#include <stdint.h>
#include <sys/types.h>

/* A held lock: its descriptor (-1: not held). */
struct ma_runlock {
	int fd; /* /proc/PID/personality of the target, flocked */
};

/* Wait up to DEADLINE_MS for the lock of PID into *L; 0 or MA_E_*. */
int ma_runlock_acquire(pid_t pid, int deadline_ms, uint64_t *waited_ns, struct ma_runlock *l);
/* Let go of *L (its descriptor may be -1). */
/* Does another run (or anything else) hold PID's run lock right now?  A look, no wait. */
bool ma_runlock_busy(pid_t pid);
void ma_runlock_release(struct ma_runlock *l);

#endif
