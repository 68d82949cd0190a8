/*
 * live.h - one visit to a live target: the begin/end pair every live
 * command goes through.
 *
 * ma_live_begin opens the target (its maps, its jemalloc), lets the caller
 * work on it with no thread stopped (PREP: e.g. flush every tcache first,
 * check the loader), then borrows one thread that is safe to borrow
 * (remote.h).  ma_live_end gives the thread back and releases the target.
 * Between them, ma_live_restore gives the thread back early while keeping
 * the target open, so results can still be named from it (symbols, paths)
 * without holding the thread.  Every function leaves nothing open on
 * failure that ma_live_end would not release, and ma_live_end may be
 * called on any path, any number of times.
 */
#ifndef MA_LIVE_H
#define MA_LIVE_H

#include <stdbool.h>
#include <sys/types.h>

#include "ownthread.h"
#include "remote.h"
#include "target.h"

struct ma_live {
	struct ma_target t;
	struct ma_session s; /* valid after ma_live_restore too (its tid, stopped_ns) */
	bool open; /* t holds the target */
	bool borrowed; /* s holds a thread */
	pid_t last_tid; /* the thread borrowed last (preferred next time: ma_session_opts) */
	bool exec_seen; /* a failure was the process's exec (ma_live_fail_if_exec) */
	/*
	 * A thread named with --tid that had no allocator state: the calls
	 * created it, and with it perhaps a jemalloc background thread and
	 * mappings.  What the process has more after the restore than before
	 * the borrow (other threads ran on meanwhile: not all need be ours).
	 */
	struct ma_live_growth {
		bool created; /* the borrowed thread had no allocator state */
		int threads, bg_threads, maps; /* after - before */
	} growth;
	int threads_before, bg_before, maps_before; /* counted before a --tid borrow; -1 not */
	/*
	 * ma_live_borrow_own: the thread of memattach's own borrowed now (tid
	 * 0: none, a thread of the program is), and how long the program's
	 * thread that made it was held.
	 */
	struct ma_own_thread own;
	bool own_used; /* s holds (or held) a thread of our own */
	char own_why[300]; /* why not, when ma_live_borrow_own fell back to a thread of the program */
	uint64_t maker_hold_ns, maker_longest_ns;
	uint64_t maker_longest_cpu_wait_ns; /* of that longest hold, the thread's wait for a CPU */
	pid_t maker_tid;
	unsigned own_tries_given_up; /* makings given up at a loader lock (live.c: make_own_thread) */
};
/*
 * How long the program's threads were held in this visit (the maker's
 * holds and, if s was one of them, s's): in all, and the longest hold of
 * one thread.
 */
uint64_t ma_live_program_hold_ns(const struct ma_live *l);
uint64_t ma_live_program_longest_hold_ns(const struct ma_live *l);
/* ... and how much of that longest hold its thread spent waiting for a CPU. */
uint64_t ma_live_program_longest_hold_cpu_wait_ns(const struct ma_live *l);

/* Work on the open target before a thread is borrowed: 0 or an MA_E_* (with ma_fail). */
typedef int (*ma_live_prep_fn)(struct ma_target *t, void *ctx);

/* Open PID, find its jemalloc, run PREP (may be NULL), borrow a thread.  0 or MA_E_*. */
int ma_live_begin(struct ma_live *l, pid_t pid, const struct ma_session_opts *o,
		  ma_live_prep_fn prep, void *ctx);
/* Give the borrowed thread back (if one is); the target stays open.  0 or MA_E_*. */
int ma_live_restore(struct ma_live *l);
/* Give the thread back if still borrowed, release the target.  0 or the restore's MA_E_*. */
int ma_live_end(struct ma_live *l);

/*
 * Borrow a thread of memattach's own (ownthread.h): a thread of the
 * program is held only while it makes one.  Where that cannot be (no
 * glibc pthread_create, a seccomp filter, --tid, no thread safe to make
 * it from, the thread did not start), a thread of the program is
 * borrowed for the whole work, as ma_live_borrow does.  0 or MA_E_*.
 */
int ma_live_borrow_own(struct ma_live *l, const struct ma_session_opts *o);
/* The two halves of ma_live_begin, for a command that borrows many times from one open target (watch). */
int ma_live_open(struct ma_live *l, pid_t pid);
int ma_live_borrow(struct ma_live *l, const struct ma_session_opts *o);
/* RC, or, when the process exec'd (the cause of RC), a message that says so. */
int ma_live_fail_if_exec(struct ma_live *l, int rc);

#endif
