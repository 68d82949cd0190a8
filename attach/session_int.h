/*
 * session_int.h - what the parts of a session (include/remote.h) share,
 * inside attach/ only.  Each part is a file with its own prefix:
 *   session_stops.c      stops_     waiting for stops, stragglers, signal guards
 *   session_run.c        run_       running the borrowed thread to its next stop
 *   session_thread.c     thread_    judging one thread for the borrowing
 *   session_choose.c     choose_    the rounds over all threads, the refusal
 *   session_leftovers.c  leftover_  what a killed run left in the target
 *   remote_call.c        session_   setting up, the calls, giving the thread back
 */
#ifndef MA_SESSION_INT_H
#define MA_SESSION_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "remote.h"
#include "runlock.h"

struct ma_backtrace;
struct ma_thread_info;

#define PAGE 4096UL
#define DEFAULT_DATA (1UL << 20)
#define STACK_SIZE (256UL << 10)
#define HEADER_PAGE PAGE /* the scratch mapping's first page: our header */
/*
 * Scratch data this small may go on the thread's stack, if it has this
 * much room below it for the call: a mallctl batch needs a few KiB (the
 * deepest, the "epoch" refresh, keeps one pointer per arena on the stack:
 * 32 KiB only with 4,096 arenas).  A main thread's [stack] that has not
 * grown yet is 132 KiB.
 */
#define ON_STACK_MAX (32UL << 10)
#define ON_STACK_ROOM (64UL << 10)
/* Room below the red zone that a borrowed thread's stack must have. */
#define STACK_ROOM (16UL << 10)

/* What run_until runs the thread to. */
enum run_goal { GOAL_SYSCALL_EXIT, GOAL_CALL };

static inline void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* session_stops.c */
void stops_reaper_timer(bool on);
void stops_test_kill_point(const char *where);
void stops_add_straggler(pid_t pid, pid_t tid, bool eintr_wait);
void stops_end_turn(struct ma_runlock *lock);
bool stops_is_signal_stop(int status);
int stops_wait(pid_t tid, int *status, int timeout_ms);
int stops_peek(pid_t tid, int *status, int timeout_ms);
int stops_ptrace_errno(const char *what, pid_t tid);

/* session_run.c */
void run_hold_signal(struct ma_session *s);
/* The synchronous fault signals (is_fault_signal) as a mask, signal N at bit N - 1. */
uint64_t run_fault_signals(void);
uint64_t run_borrowed_mask(void);
int run_set_sigmask(struct ma_session *s, uint64_t mask);
/* Block the thread's signals as borrowed (all but faults; SIGSETXID as the options say). */
int run_block_signals(struct ma_session *s);
/* From a call's end signal's stop (at_call_end) on to the marker's entry; 0 if not there. */
int run_leave_call_end(struct ma_session *s);
/* May the stub's restore path give the thread back, wherever in the stub it stops (remote_call.c)? */
bool session_stub_may_give_back(struct ma_session *s);
int run_stopped_under_call(struct ma_session *s, const char *how);
int run_until(struct ma_session *s, enum run_goal goal, int timeout_ms, struct user_regs_struct *out);
int run_set_trap_regs(struct ma_session *s);
int run_set_regs_blocked(struct ma_session *s, const struct user_regs_struct *r);

/* session_restart.c */
/* Did the thread stopped with R enter its syscall through the 64-bit `syscall` instruction? */
bool thread_syscall_insn_at(pid_t pid, const struct user_regs_struct *r);
/*
 * R (thread TID's registers) stopped in a timed wait that goes on through
 * restart_syscall, which the thread's seccomp filter refuses?
 */
bool thread_restart_refused(struct ma_session *s, pid_t tid, const struct user_regs_struct *r);
/* Before the stop: may TID be stopped, given its filter and restart_syscall?  If not, WHY says so. */
bool thread_refused_for_restart(struct ma_session *s, pid_t tid, char *why, size_t whylen);
/* Before a stopped thread is let go as it was: the same, against its filter as it is now. */
void thread_restart_as_filter_now_allows(struct ma_session *s);
/* First thing in TID's hold: a wait its filter would refuse to restart is issued again.  0 or MA_E_*. */
int thread_keep_restart_allowed(struct ma_session *s, pid_t tid);

/* session_thread.c */
bool thread_signal_pending(pid_t pid, pid_t tid, uint64_t blocked);
void thread_release_regs_eintr(pid_t pid, pid_t tid);
void thread_release_untouched(struct ma_session *s, int sig);
uint64_t thread_stack_bottom(const struct ma_session *s);

/*
 * What trying one thread found (thread_try).  RC 0: seized, safe, held;
 * MA_E_NOSAFE: refused (WHY says why), the thread let go; MA_E_TIMEOUT
 * with the session still seized: it did not stop in time; else what went
 * wrong.  The rest says what kind of refusal, for the choice among threads.
 */
struct thread_verdict {
	int rc;
	bool hopeless; /* it can never be borrowed in this run */
	bool fresh; /* it never called into jemalloc (borrowed only when named) */
	bool eintr_wait; /* left alone: in a wait a stop ends with EINTR (--strict) */
	long eintr_nr; /* ... that wait's syscall */
	bool gone; /* it has exited: the least telling refusal (the others are named first) */
};

/*
 * Stop TI's thread and judge it (BTP, when given, gets its stack); WHY
 * gets the reason for a refusal.
 */
struct thread_verdict thread_try(struct ma_session *s, const struct ma_thread_info *ti,
				  struct ma_backtrace *btp, char *why, size_t whylen);

/* session_choose.c */
int choose_thread(struct ma_session *s, const struct ma_session_opts *o);

/* session_leftovers.c */
bool leftover_runs_in(const struct ma_stub_header *h, uint64_t stub, uint64_t pc, uint64_t sp);
void leftover_read_site_headers(const struct ma_session *s, struct ma_stub_header *hs);
bool leftover_any_site_has_stub(const struct ma_session *s);
int leftover_scan_stub_sites(struct ma_session *s, bool *stale, bool *busy_left);
void leftover_close_memfds(struct ma_session *s);
/* Is SIG (SI as the stop gave it) one the borrowed thread takes at once (glibc's SIGSETXID)? */
bool run_passes_signal(const struct ma_session *s, int sig, const siginfo_t *si);
/* A thread's stop ends (let go or given back): its hold counted into stopped_ns, longest_stop_ns. */
void session_count_hold(struct ma_session *s);
void leftover_remove(struct ma_session *s, const bool *stale);

/* remote_call.c */
/* The thread tried's seccomp mode and filter count (ma_seccomp_state), through its status fd if open. */
long session_seccomp_state(const struct ma_session *s);
/* A filter installed (TSYNC) since the thread's was judged: take it in.  True if one came. */
bool session_judge_filters_again(struct ma_session *s);
int session_check_seccomp(struct ma_session *s, size_t data_len, bool on_stack);
/*
 * For the held thread: its state area below the stack pointer, whether the
 * scratch data goes on its stack (s->on_stack), and its seccomp filter
 * asked about everything the session and jemalloc will do.  0 or MA_E_*.
 */
int session_check_hold(struct ma_session *s);
int session_write_stub_header(struct ma_session *s);

#endif
