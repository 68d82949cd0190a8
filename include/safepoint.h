/*
 * safepoint.h - is a stopped thread safe to borrow for a jemalloc call?
 *
 * A thread is unsafe if any frame of its stack (unwound remotely with
 * libunwind-ptrace) returns into jemalloc's code: it may hold an allocator
 * lock; or into libc's fork(), which holds every allocator lock between
 * the atfork handlers with no jemalloc frame on the stack; or if it runs a
 * signal handler; or if the walk did not reach the outermost frame.
 * jemalloc's background threads get no exception.
 */
#ifndef MA_SAFEPOINT_H
#define MA_SAFEPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "target.h"

#define MA_MAX_FRAMES 128

struct ma_backtrace {
	uint64_t ip[MA_MAX_FRAMES];
	size_t n;
	bool complete; /* reached the outermost frame */
	bool in_signal_handler; /* a frame is a signal frame */
};

struct ma_thread_info {
	pid_t tid;
	char name[64];
	char state; /* from /proc */
	long syscall; /* syscall number blocked in, -1 none, -2 running/unknown */
	bool timed_wait; /* that syscall waits with a timeout */
	uint64_t arg0; /* its first argument */
	uint64_t pc; /* blocked in a syscall: the ip after its `syscall` instruction (0 unknown) */
	bool eintr_wait; /* that syscall is one a ptrace stop ends with EINTR (ma_thread_stop_ends_with_eintr) */
	bool cuts_short; /* in a transfer a stop would cut short (ma_arch_stop_cuts_short), not in state D */
	uint64_t wait_began_ns; /* CLOCK_MONOTONIC, for an epoll_wait with a timeout; 0 unknown */
	uint64_t nvcsw; /* its voluntary context switches when wait_began_ns was read */
	uint64_t idle_ns; /* blocked: how long since it last ran; 0 unknown or running */
	/*
	 * Stopped, it would let a signal the program ignores loose on the
	 * other threads (the main thread, or one with child processes:
	 * target.h, ma_signals_ignored); ranked after its equals.
	 */
	bool frees_ignored;
};

/*
 * Is TI (as read from /proc) blocked in a wait that a ptrace stop ends
 * with EINTR: epoll_wait and the like (by number), or a socket read,
 * accept, write or connect on a socket with a receive or send timeout
 * (SO_RCVTIMEO/SO_SNDTIMEO, read through a copy of the descriptor)?
 */
bool ma_thread_stop_ends_with_eintr(const struct ma_thread_info *ti);
/* The class of wait ma_list_threads ranks TI in ("untimed wait"...). */
const char *ma_thread_rank_class(const struct ma_thread_info *ti);

/* One of jemalloc's background threads (by the name jemalloc gives them)? */
bool ma_thread_is_jemalloc_bg(const struct ma_thread_info *ti);
/*
 * Set up the unwinder (libunwind's address space and caches) before any
 * thread is stopped, so that its cost is not part of a hold.  0 or -1.
 */
int ma_unwind_prepare(void);
/*
 * Unwind the stopped thread TID of T (whose maps locate the unwind
 * tables), from REGS as read at its stop (NULL: read them with ptrace).
 */
int ma_unwind(const struct ma_target *t, pid_t tid, const struct user_regs_struct *regs,
	      struct ma_backtrace *bt);
/* Walk TID while it runs, blocked in a syscall, to warm the caches ma_unwind uses (no result). */
void ma_unwind_rehearse(const struct ma_target *t, pid_t tid);
/* A frame of BT in the dynamic loader's code; *FRAME its index. */
/*
 * BT is inside the frag agent, and every frame of the dynamic loader or of
 * a libc function holding its locks is inside that call (the agent's own
 * unwinder looking up a frame): such a thread waits for nothing a borrowed
 * thread can hold, and leaves the loader on its own.
 */
bool ma_backtrace_loader_under_agent(const struct ma_target *t, const struct ma_backtrace *bt);
bool ma_backtrace_in_loader(const struct ma_target *t, const struct ma_backtrace *bt, size_t *frame);
/* A frame of BT in a libc function that holds the loader's locks (target.h dl_fns). */
bool ma_backtrace_in_dl_locked(const struct ma_target *t, const struct ma_backtrace *bt,
			       size_t *frame);
/* Decide; on false, WHY says which frame is in jemalloc etc. */
bool ma_thread_is_safe(const struct ma_target *t, const struct ma_thread_info *ti,
		       const struct ma_backtrace *bt, char *why, size_t whylen);
/*
 * Where /proc/PID/task/TID/syscall says thread TID is: blocked in a syscall
 * or blocked elsewhere (*SP and *PC: its user stack pointer and ip),
 * running (not known), or gone.
 */
enum ma_thread_where { MA_WHERE_GONE = -1, MA_WHERE_RUNNING, MA_WHERE_SYSCALL, MA_WHERE_BLOCKED };
enum ma_thread_where ma_thread_where(pid_t pid, pid_t tid, uint64_t *sp, uint64_t *pc);
/* What /proc says of thread TID of PID (name, state, syscall, timed wait). */
void ma_read_thread_info(pid_t pid, pid_t tid, struct ma_thread_info *ti);
/* voluntary_ctxt_switches of a /proc .../status open as STATUS_FD (0 unknown). */
uint64_t ma_voluntary_switches_of(int status_fd);
/* List the threads of T->pid, best candidates first. */
int ma_list_threads(pid_t pid, struct ma_thread_info **out, size_t *n);
/* Release libunwind's address space. */
void ma_unwind_release(void);

#endif
