/*
 * remote.h - calling functions inside a live target, one thread at a time.
 *
 * A session seizes exactly one thread that is safe to borrow (see
 * safepoint.h), saves its complete CPU state, maps two private areas in
 * the target -- code (return stub, batch runner, the saved state; r-x) and
 * data (buffers, a private stack; rw-) -- runs calls and syscalls there,
 * and on close unmaps them, restores the thread bit for bit (an
 * interrupted syscall is restarted by the kernel's own signal path) and
 * re-delivers any signal that arrived meanwhile.  All other threads run
 * on undisturbed.
 *
 * If memattach dies mid-session, the kernel detaches the thread and the
 * return stub restores the saved state by itself (arch.h); only the
 * mappings are left behind.
 */
#ifndef MA_REMOTE_H
#define MA_REMOTE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "arch.h"
#include "target.h"

#define MA_MAX_HELD_SIGNALS 32

struct ma_session {
	struct ma_target *t;
	pid_t tid;
	bool seized;
	bool mapped;
	bool abandoned; /* a call timed out: the stub restores the thread */
	bool at_marker; /* stopped at the stub's marker syscall entry */
	bool stub_ready; /* the code page holds the stub: syscalls go through it */
	bool code_mapped; /* the code page (stub + saved state) is mapped */
	bool resume_valid;
	uint64_t code; /* code page: stub, batch runner, saved state (r-x) */
	size_t code_len;
	struct ma_cpu_state saved; /* as stopped */
	struct user_regs_struct resume; /* what to restore (restart emulated) */
	uint64_t scratch; /* base of the scratch mapping in the target */
	size_t scratch_len;
	uint64_t stub; /* code: return stub */
	uint64_t batch_fn; /* code: batch runner */
	uint64_t data, data_len, data_used; /* bump-allocated buffers */
	uint64_t stack_top;
	int call_timeout_ms;
	siginfo_t held[MA_MAX_HELD_SIGNALS];
	int nheld;
	int held_sig; /* signal pending delivery when the thread was stopped */
	int redelivered; /* signals held during the session and delivered after */
	/* measurements */
	unsigned ncalls;
	uint64_t stopped_ns; /* time the thread was held by us */
	uint64_t t_stop_ns;
	char why[400]; /* why this thread was chosen */
};

struct ma_session_opts {
	pid_t tid; /* 0: choose a safe thread */
	int deadline_ms; /* for finding a safe thread */
	int call_timeout_ms;
	size_t data_size; /* scratch data area; 0 = default */
};

/* Choose, seize and prepare a thread of T.  0 or MA_E_*. */
int ma_session_open(struct ma_session *s, struct ma_target *t, const struct ma_session_opts *o);
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

/* Run N entries already written at target address TABLE, in one call. */
int ma_session_call_batch(struct ma_session *s, uint64_t table, size_t n, int timeout_ms);

/*
 * Execute syscall NR(args) in the borrowed thread (through a syscall
 * instruction of the target, not through libc); *ret gets the raw result
 * (negative errno on failure).
 */
int ma_session_syscall(struct ma_session *s, long nr, const uint64_t *args, int nargs,
		       uint64_t *ret);
/* Reserve N bytes of scratch data (aligned to 16); returns target address or 0. */
uint64_t ma_session_alloc(struct ma_session *s, size_t n);
/* Forget all scratch data allocations. */
void ma_session_reset(struct ma_session *s);
/* Restore the thread and detach.  Safe on any path; returns first error. */
int ma_session_close(struct ma_session *s);

/*
 * Let go of threads that were interrupted but had not stopped in time
 * (waiting up to WAIT_MS for them).  Call before exiting.
 */
void ma_release_stragglers(int wait_ms);

/* Set by SIGINT/SIGTERM handlers; long operations stop early when set. */
extern volatile sig_atomic_t ma_interrupted;
/* Install handlers that only set ma_interrupted, so every exit path detaches. */
void ma_install_signal_guards(void);

uint64_t ma_now_ns(void);

struct ma_thread_info;
struct ma_backtrace;
/*
 * Stop one thread just long enough to unwind it and judge it, then let it
 * go untouched.  *SAFE and WHY give the verdict.  0, or MA_E_PERM etc.
 */
int ma_inspect_thread(struct ma_target *t, const struct ma_thread_info *ti, struct ma_backtrace *bt,
		      char *why, size_t whylen, bool *safe);

#endif
