/*
 * remote.h - calling functions inside a live target, one thread at a time.
 *
 * A session takes the target's run lock (runlock.h), seizes exactly one
 * thread that is safe to borrow (see safepoint.h), saves its complete CPU
 * state and signal mask, and before changing anything writes (1) the state
 * area onto the thread's own stack below its red zone and (2) the return
 * stub into slack bytes no thread executes (stubsite.c, arch.h).  From the
 * first register change to the last, the thread's ip is in the stub or in
 * a call that returns into it, so a memattach killed at any instant leaves
 * a thread that restores itself.  The thread's signals are blocked while
 * it is borrowed (PTRACE_SETSIGMASK; the kernel keeps them pending, in
 * order, with stop/continue semantics), except the synchronous fault
 * signals, which an injected call that faults must be able to raise.
 * Two private mappings hold the batch runner (r-x) and buffers plus a
 * private stack (rw-); on close they are unmapped, the mask, registers and
 * xstate restored and the slack bytes put back.  All other threads run on.
 *
 * A killed run's leftovers (mappings, slack stub, memfds) carry a magic
 * header and are removed by the next run, which holds the run lock, once
 * no thread still runs in them.
 */
#ifndef MA_REMOTE_H
#define MA_REMOTE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "arch.h"
#include "runclock.h"
#include "runlock.h"
#include "target.h"

/* The stub header (at MA_STUB_HEADER in the stub region) and mapping headers. */
#define MA_MAGIC_STUB 0x3142555453414dULL /* "MASTUB1" */
#define MA_MAGIC_MAP 0x3150414d414d4dULL /* "MMAMAP1" */
#define MA_MAP_HEADER 64 /* bytes reserved at the start of each mapping */
/* The memfd heap-dump opens in the target: a killed run's is closed by the next. */
#define MA_MEMFD_NAME "memattach-heap"

/* A mapping in the target made by a memattach session. */
struct ma_map_record {
	uint64_t addr, len, session; /* len 0: unused */
};

#define MA_MAX_MAP_RECORDS 6

/*
 * Records 0 and 1 are this session's mappings, written before each mmap
 * (at an address chosen by us, MAP_FIXED_NOREPLACE); the others are a
 * killed run's, inherited with its stub site until unmapped, so no run
 * that dies loses track of a mapping.
 */
struct ma_stub_header {
	uint64_t magic;
	uint64_t session;
	uint32_t tid, owner; /* borrowed thread, memattach's pid */
	struct ma_map_record map[MA_MAX_MAP_RECORDS];
};

struct ma_session {
	struct ma_target *t;
	pid_t tid;
	struct ma_runlock lock; /* held for the whole turn */
	int status_fd; /* /proc/PID/task/TID/status of the thread tried, opened before its stop; -1 */
	int early_seccomp_mode; /* read while the thread came to its stop; -1: not read */
	int mem_fd; /* /proc/PID/mem, opened before the stop (the stub goes into a read-only page); -1 */
	uint64_t lock_waited_ns;
	uint64_t id; /* random, in every header */
	bool seized;
	bool filtered; /* a seccomp filter judges our syscalls */
	long judged_filters; /* ma_seccomp_state_of when judged (0: none); -1 unread */
	bool filters_changed; /* a filter came in during the hold (TSYNC): judged again at give-back */
	long refused_in_call; /* a syscall of the call that filter refused, made to fail: its nr + 1; 0 none */
	bool fail_at_exit; /* that syscall's exit is next: it gets EPERM */
	bool stub_asks_signals; /* the stub's self-restore may ask about waiting signals */
	bool trap_ok; /* the way in may go through the trap (ma_arch_trap_regs) */
	bool stub_sigreturns; /* the stub's self-restore ends in rt_sigreturn */
	bool stub_reads_altstack; /* ... after reading the alternate stack with sigaltstack */
	bool gave_back_by_stub; /* the way out was the stub's (its bytes go back once the thread left) */
	bool changed; /* registers or signal mask changed: restore on close */
	bool mask_blocked;
	bool stub_written;
	bool sites_had_stub; /* a stub site held a stub (a killed run's) before the stop */
	bool mapped; /* the scratch mapping (own[0]) exists */
	bool abandoned; /* a call timed out or failed inside: the stub restores the thread */
	bool skipping_self_deadlock; /* the call met a lock its thread held before the borrow */
	unsigned call_syscalls; /* syscalls the current call has entered so far */
	/*
	 * The call's end, told by a signal its last entries send their own
	 * thread (tgkill, then the unblock that delivers it, both through
	 * libc's syscall(), END_FN; ownthread.c): past its first syscall the
	 * call then runs with no stop per syscall, to that signal
	 * (session_run.c).  0: a stop at every syscall.  For one call.
	 */
	int end_sig;
	struct ma_range end_fn;
	bool end_seen;
	bool at_call_end; /* stopped at its delivery, the call's tail (to the marker) not yet run */
	bool restored_itself; /* ... or it was lost, and the thread went through the stub's restore */
	int restored_sig; /* ... and was seen at the delivery stop of this signal, its own (0: none) */
	bool at_marker; /* stopped at the stub's marker syscall entry */
	bool call_fpu; /* the calls' floating-point control state is in (ma_arch_set_call_fpu) */
	bool exec_seen; /* the process exec'd since its maps were read */
	bool job_stop_seen; /* the process was stopped (SIGSTOP...) while the thread ran a call */
	bool fresh_ok; /* from the options */
	bool no_tid_option; /* from the options */
	uint64_t own_tp; /* from the options */
	bool pass_setxid; /* from the options */
	bool stop_eintr_wait; /* from the options */
	bool guard_ignored; /* --strict, the thread not named: never let loose an ignored signal */
	bool chld_watch; /* ... and this one's SIGCHLD would be: judged again in the hold */
	pid_t transfer_tid; /* a thread seen in a transfer a stop cuts short: not stopped running either */
	bool strict; /* --strict, named or not: only a thread asleep in a wait that restarts is stopped */
	pid_t named; /* the options' tid: only that thread is tried */
	bool creates_state; /* borrowed (named) with no jemalloc state: the calls create it */
	uint64_t rseq_ip; /* stopped in an rseq critical section here: given back at its abort handler */
	size_t want_data; /* the scratch data the session wants (0: the default) */
	bool data_on_stack_ok; /* ... which may go on the thread's stack */
	bool on_stack; /* ... and goes there, in the thread held (session_check_hold) */
	size_t site; /* index into t->stub_sites */
	uint64_t stub;
	uint64_t area; /* state area on the thread's stack */
	size_t area_len;
	uint64_t sigmask; /* the thread's own */
	struct ma_map_record inherited[MA_MAX_MAP_RECORDS]; /* a killed run's, to unmap */
	size_t ninherited;
	struct ma_map_record own[2]; /* scratch mapping, one more (ma_session_map) */
	struct ma_cpu_state saved; /* as stopped */
	struct user_regs_struct resume; /* what to restore (restart emulated) */
	uint64_t batch_fn, append_cb; /* in the stub region */
	uint64_t data, data_len, data_used; /* bump-allocated buffers */
	uint64_t stack_top;
	int call_timeout_ms;
	siginfo_t *held; /* signals that reached the thread while borrowed */
	int nheld, held_cap;
	int redelivered; /* signals held during the session and delivered after */
	struct { int sig; uint64_t ip, addr; } suspect; /* a fault seen once, not yet confirmed */
	unsigned leftovers_removed; /* a killed run's mappings/memfds/stubs */
	/* measurements */
	unsigned ncalls;
	uint64_t stopped_ns; /* time the threads tried and the one borrowed were held by us */
	uint64_t longest_stop_ns; /* the longest of those holds */
	/*
	 * ... and how much of it the thread spent waiting for a CPU (runnable
	 * behind the machine's other threads: the scheduler's part of a hold).
	 */
	uint64_t longest_stop_cpu_wait_ns;
	uint64_t t_stop_ns;
	uint64_t cpu_wait_at_seize_ns; /* the thread's lifetime CPU wait at its seize */
	bool cpu_wait_known;
	char why[400]; /* why this thread was chosen */
};

struct ma_session_opts {
	pid_t tid; /* 0: choose a safe thread */
	/*
	 * Borrow TID even if it never called into jemalloc (the call then
	 * creates its allocator state: a tcache).  Without it such threads are
	 * skipped, and a --tid of one fails with MA_E_NOSTATE.
	 */
	bool fresh_ok;
	/* The calls will dlopen: also refuse threads inside libc's loader functions (target.h). */
	bool for_dlopen;
	/*
	 * --strict: never stop a thread blocked in a wait that a stop ends
	 * with EINTR (epoll_wait...: ma_thread_stop_ends_with_eintr) unless
	 * named with --tid.  By default such a thread is borrowed when no
	 * better one exists (an event loop's only thread): memattach issues
	 * the wait again at once, and only a memattach killed between the
	 * stop and that write leaves the program the EINTR -- the same one a
	 * SIGSTOP/SIGCONT gives these calls.
	 */
	bool strict;
	/*
	 * The thread a repeated sampler (watch, export) borrowed last time:
	 * first among threads of its class.  Going round the idle threads one
	 * after another (each had "just run" when borrowed) would put every
	 * one's first state area and scratch in its stack, and each such page
	 * looked like growth to watch's peak detection.
	 */
	pid_t prefer_tid;
	/*
	 * TID is not named by the user: memattach visits each thread in turn
	 * (a flush), and --strict's rules apply to it as to a choice.
	 */
	bool visit;
	/* The command takes no --tid (export): refusals do not offer it. */
	bool no_tid_option;
	/*
	 * TID is a thread of memattach's own (ownthread.h) whose thread
	 * pointer is this: any other thread now under that tid is refused.
	 */
	uint64_t own_tp;
	/* ma_live_begin: borrow a thread of memattach's own (live.h: ma_live_borrow_own). */
	bool own_thread;
	/*
	 * glibc's SIGSETXID (run_borrowed_mask) reaches the thread during the
	 * calls: they make or are a thread of our own (ownthread.h).  A
	 * setuid() of the program holds the thread-stack lock until every
	 * thread has taken that signal; pthread_create in a thread that
	 * blocked it would wait for that lock for ever.
	 */
	bool pass_setxid;
	int deadline_ms; /* for finding a safe thread */
	/*
	 * --timeout given: the whole run's bound (runclock.h), from
	 * ma_live_begin to the thread given back; 0: each wait its own.
	 */
	int run_ms;
	int call_timeout_ms;
	size_t data_size; /* scratch data area; 0 = default */
};

/* Choose, seize and prepare a thread of T.  0 or MA_E_*. */
int ma_session_open(struct ma_session *s, struct ma_target *t, const struct ma_session_opts *o);
/*
 * A local buffer of LEN bytes to build what goes into the session's
 * scratch data and read it back (a batch): memory the kernel has
 * accessed before the stop (ma_kernel_touch), so copying through it costs
 * the hold no more than it must.  NULL if LEN is larger than it or it is
 * lent already; give it back with ma_session_local_release.
 */
void *ma_session_local(const struct ma_session *s, size_t len);
void ma_session_local_release(void *p);
/* Call FN(args) in the target; *ret gets the return value. */
int ma_session_call(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
		    uint64_t *ret);
/* Like ma_session_call with a specific timeout. */
int ma_session_call_timeout(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
			    uint64_t *ret, int timeout_ms);
/* One call of a batch, as the batch runner in the target reads it. */
struct ma_batch_entry {
	uint64_t fn;
	uint64_t args[6];
	uint64_t ret;
};

/* Does the borrowed thread run under a seccomp filter? */
bool ma_session_filtered(const struct ma_session *s);
/* Run N entries already written at target address TABLE, in one call. */
int ma_session_call_batch(struct ma_session *s, uint64_t table, size_t n, int timeout_ms);

/*
 * Execute syscall NR(args) in the borrowed thread, at the stub's syscall
 * instruction; *ret gets the raw result (negative errno on failure).
 * Refused (MA_E_SECCOMP) if the thread's seccomp filter would not allow it.
 */
int ma_session_syscall(struct ma_session *s, long nr, const uint64_t *args, int nargs,
		       uint64_t *ret);
struct ma_sc_query;
/*
 * Syscalls an injected call will make inside the target (e.g. prof.dump's
 * openat/write/close): MA_E_SECCOMP if the thread's seccomp filter would
 * not allow one of them; 0 if allowed or there is no filter.
 */
int ma_session_check_syscalls(struct ma_session *s, const struct ma_sc_query *q, size_t n);
/*
 * Map LEN more bytes (read+write) in the target, recorded so that a
 * killed run's mapping is found and removed by the next; at most one at a
 * time.  Unmapped by ma_session_unmap or at close.
 */
int ma_session_map(struct ma_session *s, size_t len, uint64_t *addr);
void ma_session_unmap(struct ma_session *s, uint64_t addr);
/* Reserve N bytes of scratch data (aligned to 16); returns target address or 0. */
uint64_t ma_session_alloc(struct ma_session *s, size_t n);
/* Forget all scratch data allocations. */
void ma_session_reset(struct ma_session *s);
/*
 * Restore the thread and detach.  Safe on any path; returns first error.
 * Threads that were interrupted but had not stopped in time are let go
 * (waiting up to 1 s for them) before the run lock is released.
 */
int ma_session_close(struct ma_session *s);

/* Install handlers that only set ma_interrupted, so every exit path detaches. */
void ma_install_signal_guards(void);


struct ma_thread_info;
struct ma_backtrace;
/* What a run would do with a thread, as ma_inspect_thread judges it. */
enum ma_verdict {
	MA_VERDICT_UNSAFE, /* never borrowed, or not now */
	MA_VERDICT_SAFE,
	/*
	 * Blocked in a wait a stop ends with EINTR: not stopped to be looked
	 * at; a run borrows it when no better thread exists and issues its
	 * wait again at once (its stack is judged then) ...
	 */
	MA_VERDICT_EINTR_WAIT,
	MA_VERDICT_NAMED_ONLY, /* ... but with --strict only if it is named (--tid) */
};

/* How a look judges: as a run with --strict would; sparing the threads whose stop frees an ignored signal. */
enum ma_look_flags {
	MA_LOOK_STRICT = 1,
	/*
	 * The main thread, or one with children, is not stopped while another
	 * thread leaves a signal the program ignores unblocked (--strict does
	 * this too): for looks that are a precaution, not what was asked.
	 */
	MA_LOOK_SPARE_IGNORED = 2,
};

/*
 * Stop one thread just long enough to unwind it and judge it, then let it
 * go untouched.  *V and WHY give the verdict, for a run as FLAGS
 * (ma_look_flags) say.  LOCK_MS: how long to wait for another run's turn
 * on the process.  0, or MA_E_PERM etc.
 */
int ma_inspect_thread(struct ma_target *t, const struct ma_thread_info *ti, int lock_ms,
		      unsigned flags, struct ma_backtrace *bt, char *why, size_t whylen,
		      enum ma_verdict *v);

#endif
