/*
 * ownthread.h - a thread of memattach's own in a live target (attach/ownthread.c).
 *
 * Work that changes the target's memory map (the frag agent's load and
 * its tables: dlopen, mmap, munmap, mprotect) waits for the process's
 * memory-map lock, which a program that makes and ends threads by the
 * thousand holds most of the time: tens of milliseconds a syscall.  Done
 * in a borrowed thread of the program, that wait is the program's.  So
 * the borrowed thread only makes a thread: one injected call runs
 * pthread_attr_init, pthread_attr_setdetachstate (detached),
 * pthread_attr_setstacksize (MA_OWN_STACK_SIZE, a size
 * glibc's cache keeps for our next run), pthread_create with sleep() as
 * its start routine and
 * MA_OWN_SLEEP_S seconds as its argument, and pthread_attr_destroy (the
 * new thread inherits the call's mask: every signal blocked but the faults
 * and glibc's SIGSETXID, so no handler of the program runs in it and a
 * setuid() is not kept waiting for it).  The
 * borrowed thread goes back; the new thread, asleep in libc, is then
 * borrowed like any other and does the work; at the end memattach makes
 * its sleep return, and it exits as any detached thread does (its stack
 * goes to libc's cache).  Killed at any instant, memattach leaves at most
 * that thread, asleep, for the rest of its MA_OWN_SLEEP_S seconds.
 */
#ifndef MA_OWNTHREAD_H
#define MA_OWNTHREAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "remote.h"
#include "target.h"

/* How long a thread of our own sleeps if memattach never ends its sleep (killed). */
#define MA_OWN_SLEEP_S 10
/* Its stack: enough for dlopen and a borrow (16 KiB free, a signal frame). */
#define MA_OWN_STACK_SIZE (256 * 1024)

struct ma_own_thread {
	pid_t tid; /* 0: none made */
	uint64_t pd; /* its thread pointer: libc's descriptor of it */
};

/* Can a thread of our own be made in T (glibc >= 2.34: pthread_create in libc, tid offset)? */
bool ma_own_thread_possible(struct ma_target *t);
/*
 * In S's borrowed thread (borrowed with for_thread_create, so it holds no
 * lock pthread_create takes), make the thread: H gets its tid and
 * descriptor.  0, or MA_E_* (nothing was made, or it sleeps and exits).
 */
int ma_own_thread_make(struct ma_session *s, struct ma_own_thread *h);
/*
 * Wait, stopping nothing, until H is asleep in its sleep() (blocked in
 * clock_nanosleep).  0, MA_E_EXITED, or MA_E_TIMEOUT after TIMEOUT_MS.
 */
int ma_own_thread_wait_asleep(pid_t pid, const struct ma_own_thread *h, int timeout_ms);
/*
 * End H's sleep so it exits now (its clock_nanosleep returns 0): one
 * interrupt stop, checked to be H by its thread pointer.  Best effort: a
 * thread that cannot be stopped sleeps out its time.
 */
void ma_own_thread_end(pid_t pid, struct ma_own_thread *h);

#endif
