/*
 * remote_call.c - borrow one thread, call functions in it, give it back.
 *
 * The only file that drives ptrace stops (the arch file reads and writes
 * registers).  Every syscall or call runs under PTRACE_SYSCALL so the
 * thread stops at known points: the stub's `syscall` instruction, which
 * serves both the syscalls we issue and the marker a call returns into.
 *
 * Order of a session, each step safe should memattach die right after it
 * (the kernel then detaches and the thread runs on from its registers):
 *   seize + interrupt           untouched thread: the kernel resumes it
 *   (EINTR re-issue registers)  the thread issues its syscall again
 *   write state area, stub      memory no one uses: nothing changes
 *   registers -> stub syscall   it runs that syscall, then restores itself
 *   block signals               the stub's restore path puts the mask back
 *   calls, syscalls             they end in the stub: it restores itself
 *   unmap, mask back, registers back, slack back, detach.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "ma_error.h"
#include "holdprio.h"
#include "remote.h"
#include "runclock.h"
#include "agent_abi.h"
#include "runlock.h"
#include "safepoint.h"
#include "seccomp.h"
#include "steps.h"
#include "testhooks.h"

#define PAGE 4096UL
#define DEFAULT_DATA (1UL << 20)
#define STACK_SIZE (256UL << 10)
#define HEADER_PAGE PAGE /* the scratch mapping's first page: our header */
/* An address argument for a seccomp query, where the address is chosen later. */
#define UNCHOSEN_ADDR 0x7f0000000000ULL
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

volatile sig_atomic_t ma_interrupted;

static void on_stop_signal(int sig)
{
	(void)sig;
	ma_interrupted = 1;
}

/*
 * While memattach seizes threads, a thread of the target may exec: the
 * kernel then kills the other threads, and one we trace (a straggler, say)
 * stays a zombie until we reap it, while the exec holds the lock that our
 * next PTRACE_SEIZE waits for.  Neither would move.  A timer reaps exited
 * tracees (only exits: stops stay for the waits that expect them), so the
 * exec finishes and the seize goes on.
 */
static void reap_exited(int sig)
{
	siginfo_t si;
	int e = errno, status;

	(void)sig;
	/*
	 * Look before taking: for a tracee, waitid(WEXITED) also returns its
	 * ptrace stops (the kernel reports a tracee's stops whatever the
	 * flags), and a stop taken here is one the waits of the session never
	 * see (the thread then looked stuck, stayed traced, and the next run
	 * could not seize it).  Only an exit is taken; a pending stop ends
	 * the look (its owner takes it, then the next tick goes on).
	 */
	for (;;) {
		si.si_pid = 0;
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0 || si.si_pid == 0)
			break;
		if (si.si_code != CLD_EXITED && si.si_code != CLD_KILLED && si.si_code != CLD_DUMPED)
			break;
		if (waitpid(si.si_pid, &status, WNOHANG | __WALL) <= 0)
			break;
	}
	errno = e;
}

static void reaper_timer(bool on)
{
	struct itimerval it = { { 0, on ? 20000 : 0 }, { 0, on ? 20000 : 0 } };
	struct sigaction sa;

	if (on) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = reap_exited;
		sa.sa_flags = SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
	}
	setitimer(ITIMER_REAL, &it, NULL);
}

void ma_install_signal_guards(void)
{
	struct sigaction sa;
	sigset_t set;
	int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* SIGCHLD stays blocked: waits use sigtimedwait on it. */
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

/*
 * Tests only: MEMATTACH_TEST_FAULT makes every injected call jump to an
 * unmapped address.  MEMATTACH_TEST_KILL_AT=call|marker|syscall|fault makes
 * memattach SIGKILL itself at that point (steps.h kills after any step).
 */
static void test_kill_point(const char *where)
{
	const char *want = ma_test_env("KILL_AT");

	if (want && strcmp(want, where) == 0)
		kill(getpid(), SIGKILL);
}

/*
 * Threads we interrupted that did not stop in time (an uninterruptible
 * sleep).  They stop when they can; every wait collects them and lets
 * them go, so no thread stays stopped while we work on another.
 */
#define MAX_STRAGGLERS 64
static pid_t stragglers[MAX_STRAGGLERS];
static bool straggler_eintr[MAX_STRAGGLERS]; /* in a wait a stop ends with EINTR (or cannot tell) */
static int nstragglers;
static pid_t straggler_pid;

static void release_regs_eintr(pid_t pid, pid_t tid);

/*
 * TID of PID was interrupted but did not stop in time: let go of it when it
 * does.  EINTR_WAIT: it was in a wait our stop ends with EINTR (or we
 * cannot tell), which only its let-go at the stop issues again.
 */
static void add_straggler(pid_t pid, pid_t tid, bool eintr_wait)
{
	if (nstragglers < MAX_STRAGGLERS) {
		straggler_pid = pid;
		straggler_eintr[nstragglers] = eintr_wait;
		stragglers[nstragglers++] = tid;
	}
}

static void reap_stragglers(void)
{
	for (int i = 0; i < nstragglers; i++) {
		int status;
		pid_t r = waitpid(stragglers[i], &status, __WALL | WNOHANG);

		if (r == 0)
			continue;
		if (r == stragglers[i] && WIFSTOPPED(status)) {
			release_regs_eintr(straggler_pid, stragglers[i]);
			ma_ptrace(PTRACE_DETACH, stragglers[i], NULL,
				  (void *)(long)((status >> 16) == 0 ? WSTOPSIG(status) : 0));
		}
		--nstragglers;
		straggler_eintr[i] = straggler_eintr[nstragglers];
		stragglers[i--] = stragglers[nstragglers];
	}
}

static bool eintr_straggler(void)
{
	for (int i = 0; i < nstragglers; i++)
		if (straggler_eintr[i])
			return true;
	return false;
}

static void release_stragglers(int wait_ms)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)wait_ms * 1000000ULL;

	reap_stragglers();
	while (nstragglers > 0 && ma_now_ns() < deadline) {
		usleep(1000);
		reap_stragglers();
	}
	/* Any left are detached by the kernel when memattach exits. */
}

/*
 * End a turn on the target: the threads we seized that were slow to stop
 * are let go first, so the next run (which may take the lock at once) can
 * seize them.
 */
static void end_turn(struct ma_runlock *lock)
{
	/*
	 * Past the run's --timeout, only a thread that would see EINTR is
	 * waited for (up to 1 s): any other is let go by the kernel when
	 * memattach exits, and its syscall restarts.
	 */
	if (nstragglers)
		release_stragglers(eintr_straggler() ? 1000 : ma_run_ms_left(1000));
	ma_runlock_release(lock);
}

/*
 * Has TID stopped or died?  1 with *STATUS (waitpid's format) when it has,
 * 0 when not yet, -1 on error.  COLLECT false leaves the stop unreported:
 * a signal-delivery stop then keeps its signal in the kernel, so a
 * memattach killed before it hands the signal back (PTRACE_DETACH with
 * it) does not lose it (reporting a stop clears it: only the tracer's
 * resume would restore it).
 */
static int poll_stop(pid_t tid, int *status, bool collect)
{
	siginfo_t si;

	if (collect) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);

		return r == tid ? 1 : r < 0 && errno != EINTR ? -1 : 0;
	}
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)tid, &si, WSTOPPED | WEXITED | __WALL | WNOHANG | WNOWAIT) != 0)
		return errno != EINTR ? -1 : 0;
	if (si.si_pid != tid)
		return 0;
	if (si.si_code == CLD_EXITED)
		*status = (si.si_status & 0xff) << 8;
	else if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)
		*status = si.si_status & 0x7f;
	else /* stopped or trapped: the stop code, event bits included */
		*status = (si.si_status & 0xffff) << 8 | 0x7f;
	return 1;
}

/* Wait for TID to stop or die (see poll_stop); MA_E_TIMEOUT (no message) after timeout_ms. */
static int await_stop(pid_t tid, int *status, int timeout_ms, bool collect)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (;;) {
		int r = poll_stop(tid, status, collect);
		uint64_t now;
		struct timespec ts;

		if (r > 0) {
			ma_step_wait();
			return 0;
		}
		if (nstragglers)
			reap_stragglers();
		if (r < 0)
			return ma_fail(MA_E_EXITED, "thread %d is gone (%s)", tid, strerror(errno));
		now = ma_now_ns();
		if (now >= deadline)
			return MA_E_TIMEOUT;
		/* Short slices: SIGCHLD normally wakes us at once. */
		ts.tv_sec = 0;
		ts.tv_nsec = (long)((deadline - now) < 2000000ULL ? deadline - now : 2000000ULL);
		sigtimedwait(&set, NULL, &ts);
	}
}

/* A signal-delivery stop (not a syscall or event stop): its signal waits to be handed back. */
static bool is_signal_stop(int status)
{
	return WIFSTOPPED(status) && (status >> 16) == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80);
}

/* Wait for TID to stop or die, and collect the report. */
static int wait_stop(pid_t tid, int *status, int timeout_ms)
{
	return await_stop(tid, status, timeout_ms, true);
}

/* Wait for TID to stop or die, leaving the stop unreported (collect it with wait_stop). */
static int peek_stop(pid_t tid, int *status, int timeout_ms)
{
	return await_stop(tid, status, timeout_ms, false);
}

static int ptrace_errno(const char *what, pid_t tid)
{
	char path[32];

	switch (errno) {
	case ESRCH:
		/* A tracee not in a stop gives ESRCH too: say "went away" only when it has. */
		snprintf(path, sizeof(path), "/proc/%d", tid);
		if (access(path, F_OK) == 0 && !ma_thread_going(tid, tid))
			return ma_fail(MA_E_INTERNAL, "%s on thread %d failed: %s (the thread is still "
				       "there)", what, tid, strerror(ESRCH));
		return ma_fail(MA_E_EXITED, "thread %d went away (%s)", tid, what);
	case EPERM:
		/* The kernel refuses to trace a thread that is exiting, too. */
		if (ma_thread_going(tid, tid))
			return ma_fail(MA_E_EXITED, "thread %d exited (%s)", tid, what);
		return ma_fail(MA_E_PERM,
			       "not permitted to trace thread %d: run as the target's user or root, "
			       "and check /proc/sys/kernel/yama/ptrace_scope",
			       tid);
	default:
		return ma_fail(MA_E_INTERNAL, "%s on thread %d failed: %s", what, tid, strerror(errno));
	}
}

/* Keep a signal that reached the borrowed thread, for delivery after. */
static void hold_signal(struct ma_session *s)
{
	siginfo_t si;

	if (ma_ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si) != 0)
		return;
	/* Standard signals do not queue: the kernel would merge a second one. */
	for (int i = 0; si.si_signo < SIGRTMIN && i < s->nheld; i++)
		if (s->held[i].si_signo == si.si_signo)
			return;
	if (s->nheld == s->held_cap) {
		int cap = s->held_cap ? s->held_cap * 2 : 16;
		siginfo_t *p = realloc(s->held, (size_t)cap * sizeof(*p));

		if (!p)
			return; /* out of memory: nothing better to do */
		s->held = p;
		s->held_cap = cap;
	}
	s->held[s->nheld++] = si;
}

static bool is_fault_signal(int sig)
{
	/* SIGSYS: a seccomp filter trapped a syscall. */
	return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
	       sig == SIGTRAP || sig == SIGSYS;
}

static bool is_fault(int sig, const siginfo_t *si)
{
	return is_fault_signal(sig) && si->si_code > 0;
}

/*
 * Signals blocked while the thread is borrowed: all but the synchronous
 * faults (a fault with its signal blocked would make the kernel reset the
 * program's handler to SIG_DFL).  SIGKILL and SIGSTOP cannot be blocked.
 */
static uint64_t borrowed_mask(void)
{
	uint64_t m = ~0ULL;
	int faults[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS };

	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		m &= ~(1ULL << (faults[i] - 1));
	return m;
}

static int set_sigmask(struct ma_session *s, uint64_t mask)
{
	if (ma_ptrace(PTRACE_SETSIGMASK, s->tid, (void *)sizeof(mask), &mask) != 0)
		return ptrace_errno("PTRACE_SETSIGMASK", s->tid);
	return 0;
}

enum run_goal { GOAL_SYSCALL_EXIT, GOAL_CALL };

/*
 * After a fault the thread sits in a signal-delivery stop; if memattach
 * died there the kernel would deliver the fault signal.  Send it to the
 * stub's marker syscall instead (the signal suppressed), where a dead
 * memattach means the thread restores itself.
 */
static int park_at_marker(struct ma_session *s)
{
	struct user_regs_struct r;
	int rc;

	if ((rc = ma_arch_get_regs(s->tid, &r)))
		return rc;
	ma_arch_setup_syscall(&r, s->stub + MA_STUB_SYSCALL, MA_STUB_MARKER_NR, NULL, 0);
	return ma_arch_set_regs(s->tid, &r);
}

/*
 * Is this fault-type signal really our call's fault?  SIGTRAP and SIGSYS
 * (a seccomp trap) are taken as such at once; SIGSEGV, SIGBUS, SIGILL and
 * SIGFPE only when they come twice at the same instruction and address:
 * a real fault repeats when the instruction is run again.
 */
static bool confirmed_fault(struct ma_session *s, int sig, const siginfo_t *si)
{
	struct user_regs_struct r;
	bool again;

	if (sig == SIGTRAP || sig == SIGSYS)
		return true;
	if (ma_arch_get_regs(s->tid, &r) != 0) {
		ma_err_clear();
		return true;
	}
	again = s->suspect.sig == sig && s->suspect.ip == ma_arch_ip(&r) &&
		s->suspect.addr == (uint64_t)(uintptr_t)si->si_addr;
	if (again) {
		/* The first one was this fault too, not the program's: drop its held copy. */
		for (int i = s->nheld - 1; i >= 0; i--)
			if (s->held[i].si_signo == sig &&
			    (uint64_t)(uintptr_t)s->held[i].si_addr == s->suspect.addr) {
				memmove(&s->held[i], &s->held[i + 1], (size_t)(s->nheld - i - 1) * sizeof(s->held[0]));
				s->nheld--;
				break;
			}
		return true;
	}
	s->suspect.sig = sig;
	s->suspect.ip = ma_arch_ip(&r);
	s->suspect.addr = (uint64_t)(uintptr_t)si->si_addr;
	return false;
}

/* At a signal-delivery stop: hold the signal, pass it on, or treat a fault. */
static int on_signal_stop(struct ma_session *s, int sig, enum run_goal *goal, int *fault,
			  int *pass_sig)
{
	siginfo_t si;
	int rc;

	memset(&si, 0, sizeof(si));
	ma_ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si);
	*pass_sig = 0;
	if (is_fault(sig, &si) && !*fault && !confirmed_fault(s, sig, &si)) {
		/*
		 * Maybe the program sent itself a fault-type signal (it may
		 * forge the si_code): keep it for delivery.  A real fault
		 * happens again at the same instruction, and is confirmed then.
		 */
		hold_signal(s);
	} else if (is_fault(sig, &si) && !*fault) {
		struct user_regs_struct r;

		ma_arch_get_regs(s->tid, &r);
		*fault = ma_fail(MA_E_FAULT,
				 "the injected call faulted in thread %d (signal %d at ip 0x%llx, "
				 "address %p); the thread was restored",
				 s->tid, sig, (unsigned long long)ma_arch_ip(&r), si.si_addr);
		if ((rc = park_at_marker(s)))
			return rc;
		*goal = GOAL_CALL;
	} else if (sig == SIGSTOP) {
		/* Job control goes through: the kernel stops the thread again when we let go. */
		*pass_sig = sig;
	} else {
		hold_signal(s);
	}
	return 0;
}

static bool is_futex_wait(const struct __ptrace_syscall_info *info);

/*
 * Is the syscall being entered a futex wait on a pthread mutex whose owner
 * is this very thread (a lock it held before we borrowed it, e.g. inside
 * fork())?  Then the call can never return.
 */
static bool waits_on_own_lock(struct ma_session *s, const struct __ptrace_syscall_info *info)
{
	int owner = 0;

	if (!is_futex_wait(info))
		return false;
	if (ma_mem_read(s->t->proc_pid, info->entry.args[0] + 8, &owner, sizeof(owner)) != 0) {
		ma_err_clear();
		return false;
	}
	return owner == s->tid;
}

/*
 * Give up the call at that futex: it becomes a getpid (never skipped: a
 * skipped syscall meets seccomp as nr -1), and at its exit the thread is
 * stopped where any register state may be set.  The session goes on from
 * there (unmapping, restoring) as after any failed call.
 */
static int skip_self_deadlock(struct ma_session *s, uint64_t mutex)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, mutex);
	struct user_regs_struct r;
	int rc, status;

	/* From here the thread's own lock is in the way: a failure restores it (the lock is its own). */
	s->skipping_self_deadlock = true;
	if ((rc = ma_arch_get_regs(s->tid, &r)))
		return rc;
	ma_arch_set_syscall_nr(&r, MA_STUB_MARKER_NR);
	if ((rc = ma_arch_set_regs(s->tid, &r)))
		return rc;
	for (;;) {
		if (ma_ptrace(PTRACE_SYSCALL, s->tid, NULL, NULL) != 0)
			return ptrace_errno("PTRACE_SYSCALL", s->tid);
		if ((rc = wait_stop(s->tid, &status, 1000)))
			return rc;
		if (!WIFSTOPPED(status)) {
			s->seized = false;
			return ma_fail(MA_E_EXITED, "thread %d exited during the call", s->tid);
		}
		if (WSTOPSIG(status) == (SIGTRAP | 0x80))
			break;
		if ((status >> 16) == 0)
			hold_signal(s);
	}
	s->at_marker = false;
	/* What was seen, no guess at how: the thread took the lock before the stop. */
	return ma_fail(MA_E_JEMALLOC,
		       "the call in thread %d began to wait (futex) for the mutex at 0x%llx (in %s), "
		       "which thread %d itself holds: it took it before this run borrowed it, with "
		       "no jemalloc frame on its stack; the call could never return and was given "
		       "up, the thread restored; run again (the thread lets go as it runs on)",
		       s->tid, (unsigned long long)mutex,
		       m && m->path ? m->path : m ? "anonymous memory" : "no mapping", s->tid);
}

/* How long a call may go on once its process is stopped (SIGSTOP) under it. */
#define STOPPED_GRACE_MS 250
#define STR_(x) #x
#define STR(x) STR_(x)

static bool is_job_control_stop(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/*
 * The process was stopped (SIGSTOP, Ctrl-Z) while the thread ran our call,
 * and the call now waits on a futex: every other thread is stopped, so the
 * lock's holder cannot let go before a SIGCONT.  Waiting out the --timeout
 * would not help; the caller leaves the call to finish on its own.
 */
static int stopped_under_call(struct ma_session *s, const char *how)
{
	/* Into its wait, as after a timeout: the let-go interrupts it there. */
	ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL);
	s->abandoned = true; /* the call goes on in the thread; the stub restores it */
	return ma_fail(MA_E_STOPPED,
		       "process %d was stopped (SIGSTOP or Ctrl-Z) during the run, and memattach's "
		       "call in thread %d %s; the thread finishes the call and restores itself once "
		       "the process is continued ('kill -CONT %d'): run memattach again then",
		       s->t->pid, s->tid, how, s->t->pid);
}

static bool is_futex_wait(const struct __ptrace_syscall_info *info)
{
	int op = (int)info->entry.args[1] & 0x7f;

	return info->entry.nr == SYS_futex && (op == 0 || op == 9);
}

/*
 * What the syscall stop of TID is (entry or exit, where, which syscall).
 * PTRACE_GET_SYSCALL_INFO, else the same from its registers (a refused
 * request taken for "some other syscall" let the thread run on into the
 * stub's restore path with its registers half ours: an outside attack's
 * injected EIO left an epoll_wait its EINTR).
 */
static int syscall_stop_info(pid_t tid, struct __ptrace_syscall_info *info)
{
	struct user_regs_struct r;

	memset(info, 0, sizeof(*info));
	if (ma_ptrace(PTRACE_GET_SYSCALL_INFO, tid, (void *)sizeof(*info), info) > 0)
		return 0;
	if (ma_arch_get_regs(tid, &r) != 0)
		return ma_fail(MA_E_INTERNAL, "cannot read thread %d's syscall stop: %s", tid,
			       ma_errmsg());
	ma_arch_syscall_info(&r, info);
	return 0;
}

/*
 * Resume the thread (regs already set) until the goal: the exit of the
 * syscall at the stub, or the stub marker after a call.  Signals that
 * arrive are held; a fault ends the run with MA_E_FAULT, the thread parked
 * at the marker.
 */
static int run_until(struct ma_session *s, enum run_goal goal, int timeout_ms,
		     struct user_regs_struct *out)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	uint64_t stop_grace_end = 0; /* the process stopped under the call: how long we wait on */
	int fault = 0, pass_sig = 0;

	if (ma_ptrace(PTRACE_SYSCALL, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_SYSCALL", s->tid);
	for (;;) {
		uint64_t now = ma_now_ns();
		uint64_t until = stop_grace_end && stop_grace_end < deadline ? stop_grace_end : deadline;
		int status, rc, sig, ev;

		/* The thread runs here (resumed below, or not yet stopped). */
		if (stop_grace_end && now >= stop_grace_end) {
			if (ma_process_job_stopped(s->t->pid, s->tid))
				return stopped_under_call(s, "had not returned " STR(STOPPED_GRACE_MS)
							  " ms after the stop");
			stop_grace_end = 0; /* continued meanwhile: the call's own deadline holds */
			continue;
		}
		/*
		 * A signal-delivery stop stays unreported (peek_stop): its signal
		 * is then still the kernel's should memattach die before it
		 * resumes the thread with it (SIGSTOP goes through at once).
		 */
		rc = peek_stop(s->tid, &status, now >= until ? 0 : (int)((until - now) / 1000000ULL) + 1);
		if (rc == MA_E_TIMEOUT && stop_grace_end && ma_now_ns() >= stop_grace_end)
			continue; /* judged above */
		if (rc == 0 && !is_signal_stop(status))
			rc = wait_stop(s->tid, &status, 1000);
		if (rc == MA_E_EXITED)
			s->seized = false; /* no longer our tracee (an exec made its tid another's): nothing to restore */
		if (rc)
			return rc;
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			s->seized = false;
			return ma_fail(MA_E_EXITED, "thread %d exited during the call (the process "
				       "exited or called exec)", s->tid);
		}
		sig = WSTOPSIG(status);
		ev = status >> 16;
		pass_sig = 0;
		if (sig == (SIGTRAP | 0x80)) {
			struct __ptrace_syscall_info info;

			if ((rc = syscall_stop_info(s->tid, &info)))
				return rc;
			if (info.instruction_pointer == s->stub + MA_STUB_MARKER_END) {
				if (goal == GOAL_CALL && info.op == PTRACE_SYSCALL_INFO_ENTRY &&
				    info.entry.nr == MA_STUB_MARKER_NR) {
					s->at_marker = true;
					return fault ? fault : ma_arch_get_regs(s->tid, out);
				}
				if (goal == GOAL_SYSCALL_EXIT && info.op == PTRACE_SYSCALL_INFO_EXIT)
					return ma_arch_get_regs(s->tid, out);
			} else if (goal == GOAL_CALL && info.op == PTRACE_SYSCALL_INFO_ENTRY &&
				   waits_on_own_lock(s, &info)) {
				return skip_self_deadlock(s, info.entry.args[0]);
			} else if (goal == GOAL_CALL && s->job_stop_seen &&
				   info.op == PTRACE_SYSCALL_INFO_ENTRY && is_futex_wait(&info) &&
				   ma_process_job_stopped(s->t->pid, s->tid)) {
				return stopped_under_call(s, "waits for a lock that a stopped thread holds");
			}
		} else if (ev == PTRACE_EVENT_STOP && is_job_control_stop(sig)) {
			/*
			 * The process is being stopped; our thread goes on (the
			 * kernel stops it when we let go).  A call that needs
			 * another thread cannot finish before a SIGCONT: it is
			 * given STOPPED_GRACE_MS, not the whole --timeout.
			 */
			s->job_stop_seen = true;
			if (goal == GOAL_CALL && !stop_grace_end)
				stop_grace_end = ma_now_ns() + STOPPED_GRACE_MS * 1000000ULL;
		} else if (ev == 0) {
			if ((rc = on_signal_stop(s, sig, &goal, &fault, &pass_sig)))
				return rc;
		}
		/* Group stops, other syscalls (inside the call): keep going. */
		if (ma_ptrace(PTRACE_SYSCALL, s->tid, NULL, (void *)(long)pass_sig) != 0)
			return ptrace_errno("PTRACE_SYSCALL", s->tid);
	}
}

static int seccomp_allows(struct ma_session *s, long nr, const uint64_t *args, int nargs,
			  const char *what)
{
	struct ma_sc_query q;

	if (!s->filtered)
		return 0;
	memset(&q, 0, sizeof(q));
	q.nr = (int)nr;
	for (int i = 0; i < nargs && i < 6; i++)
		q.args[i] = args[i];
	q.ip = s->stub + MA_STUB_MARKER_END;
	q.what = what;
	return ma_seccomp_check(s->t->pid, s->tid, &q, 1);
}

int ma_session_check_syscalls(struct ma_session *s, const struct ma_sc_query *q, size_t n)
{
	return s->filtered ? ma_seccomp_check(s->t->pid, s->tid, q, n) : 0;
}

/*
 * Execute one syscall in the borrowed thread; *ret gets the raw result.
 * Every syscall runs at the stub's `syscall` instruction and ends at its
 * exit: if memattach dies meanwhile, the thread runs on into the
 * self-restore code.  Stopped at the marker already, the kernel is about
 * to run a syscall: swapping its number and arguments costs no stop.
 */
/* The trap's registers (ma_arch_trap_regs): the way in and the way out. */
static int set_trap_regs(struct ma_session *s)
{
	struct user_regs_struct trap;

	ma_arch_trap_regs(&s->saved, &s->resume, s->stub, s->area, &trap);
	return ma_arch_set_regs(s->tid, &trap);
}

/* Block the thread's signals while it is borrowed (borrowed_mask). */
static int block_signals(struct ma_session *s)
{
	int rc = set_sigmask(s, s->sigmask | borrowed_mask());

	if (!rc)
		s->mask_blocked = true;
	return rc;
}

/*
 * Set the registers for a syscall or call in the stub, with the thread's
 * signals blocked from then on.  The first time, through the trap: its
 * registers first, then the mask.  A memattach that dies after the first
 * leaves the kernel to act on a signal as on the syscall the thread was
 * stopped in; after the second, the trap only blocks what is blocked and
 * the stub restores.  Without the trap (a seccomp filter forbids its
 * syscall), the registers first and then the mask: a memattach dying
 * between the two leaves the stub's restore path to put the mask back,
 * but a handler may have run in the stub first.
 */
static int set_regs_blocked(struct ma_session *s, const struct user_regs_struct *r)
{
	int rc;

	if (!s->mask_blocked && s->trap_ok) {
		if ((rc = set_trap_regs(s)))
			return rc;
		s->changed = true;
		if ((rc = block_signals(s)))
			return rc;
	}
	if ((rc = ma_arch_set_regs(s->tid, r)))
		return rc;
	s->changed = true;
	return s->mask_blocked ? 0 : block_signals(s);
}

static int stub_syscall(struct ma_session *s, long nr, const uint64_t *args, int nargs,
			int timeout_ms, uint64_t *ret)
{
	struct user_regs_struct r;
	int rc;

	if ((rc = seccomp_allows(s, nr, args, nargs, "a syscall memattach issues")))
		return rc;
	if (s->at_marker) {
		if ((rc = ma_arch_get_regs(s->tid, &r)))
			return rc;
		ma_arch_replace_syscall(&r, nr, args, nargs);
		/* Off the call's stack, which may be the mapping this syscall unmaps. */
		ma_arch_set_stack_pointer(&r, s->area);
	} else {
		r = s->saved.regs;
		ma_arch_set_stack_pointer(&r, s->area); /* a signal frame would go below the state area */
		ma_arch_setup_syscall(&r, s->stub + MA_STUB_SYSCALL, nr, args, nargs);
	}
	if ((rc = set_regs_blocked(s, &r)))
		return rc;
	s->at_marker = false;
	rc = run_until(s, GOAL_SYSCALL_EXIT, timeout_ms, &r);
	if (!rc)
		*ret = ma_arch_syscall_ret(&r);
	return rc;
}

int ma_session_syscall(struct ma_session *s, long nr, const uint64_t *args, int nargs,
		       uint64_t *ret)
{
	int rc;

	if (!s->stub_written || s->abandoned || !s->seized)
		return ma_fail(MA_E_INTERNAL, "no session");
	rc = stub_syscall(s, nr, args, nargs, s->call_timeout_ms, ret);
	if (!rc)
		test_kill_point("syscall");
	if (rc == MA_E_TIMEOUT) {
		/* Still in the syscall; it returns into the stub, which restores. */
		s->abandoned = true;
		return ma_fail(rc, "syscall %ld in thread %d did not return in %d ms; the thread was "
			       "left to finish it and restore itself", nr, s->tid, s->call_timeout_ms);
	}
	return rc;
}

static bool thread_wanted(const struct ma_session_opts *o, const struct ma_thread_info *ti)
{
	return o->tid == 0 || o->tid == ti->tid;
}

/* Unblocked signals wait for the thread: an EINTR it got is their due. */
static bool signal_pending_for(pid_t pid, pid_t tid, uint64_t blocked)
{
	struct ma_proc_status st;

	if (ma_proc_read_status(pid, tid, &st) != 0) {
		ma_err_clear();
		return true;
	}
	return ((st.sig_pending | st.sig_shared_pending) & ~blocked) != 0;
}

/* Did the thread enter its syscall through the 64-bit `syscall` instruction (the numbers are for)? */
static bool is_syscall_insn_at(pid_t pid, const struct user_regs_struct *r)
{
	unsigned char insn[MA_SYSCALL_INSN_LEN];

	if (ma_mem_read(pid, ma_arch_ip(r) - MA_SYSCALL_INSN_LEN, insn, sizeof(insn)) != 0) {
		ma_err_clear();
		return false;
	}
	return ma_arch_is_syscall_insn(insn);
}

/*
 * May the EINTR our stop caused be undone by issuing the syscall again?
 * Only if no real signal waits (then the EINTR is its due) and the thread
 * entered through the 64-bit `syscall` instruction.
 */
static bool may_reissue(pid_t pid, pid_t tid, const struct user_regs_struct *r, uint64_t blocked)
{
	/* Memory through the thread: the main thread may have exited. */
	return is_syscall_insn_at(tid, r) && !signal_pending_for(pid, tid, blocked);
}

static uint64_t read_sigmask(pid_t tid)
{
	uint64_t m = 0;

	ma_ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(m), &m);
	return m;
}

/* For a straggler: issue an EINTR-failed syscall again before letting go. */
static void release_regs_eintr(pid_t pid, pid_t tid)
{
	struct user_regs_struct r, resume;

	if (ma_arch_get_regs(tid, &r) != 0) {
		ma_err_clear();
		return;
	}
	if (ma_arch_interrupted_eintr(&r) && may_reissue(pid, tid, &r, read_sigmask(tid))) {
		ma_arch_resume_regs(&r, true, &resume);
		ma_arch_set_regs(tid, &resume);
	}
}

/*
 * Is the thread's syscall instruction inside libc's epoll_wait() or
 * epoll_pwait()?  Only there may its timeout register be shortened: r10
 * is call-clobbered, so no caller of libc can see it; code making the raw
 * syscall itself might rely on the kernel keeping r10.
 */
static bool in_libc_epoll(const struct ma_target *t, const struct user_regs_struct *r)
{
	uint64_t insn = ma_arch_ip(r) - MA_SYSCALL_INSN_LEN;

	for (int k = 0; k < 2; k++)
		if (insn >= t->epoll_fn[k].lo && insn < t->epoll_fn[k].hi)
			return true;
	return false;
}

/*
 * Is the thread blocked in a wait that a stop ends with EINTR?  As listed,
 * and read again now, just before a stop: the listing may be stale.  Such
 * a thread is stopped only when no better one exists, and never with --strict
 * unless named (ma_session_opts.strict).  *W gets what was read.
 */
static bool in_eintr_wait(const struct ma_session *s, const struct ma_thread_info *ti,
			  struct ma_thread_info *w, char *why, size_t whylen)
{
	char named[40] = "";

	*w = *ti;
	if (!ma_thread_stop_ends_with_eintr(w)) {
		ma_read_thread_info(s->t->pid, ti->tid, w);
		if (!ma_thread_stop_ends_with_eintr(w))
			return false;
	}
	if (!s->no_tid_option)
		snprintf(named, sizeof(named), " unless named (--tid %d)", ti->tid);
	snprintf(why, whylen, "blocked in %s, which a stop ends with EINTR: not stopped with "
		 "--strict%s",
		 ma_arch_syscall_name(w->syscall) ? ma_arch_syscall_name(w->syscall) : "a wait", named);
	return true;
}

/*
 * A wait a stop ends with EINTR is issued again with what remained of
 * its timeout only for libc's epoll_wait and epoll_pwait (an int in a
 * register no caller of libc can see; in_libc_epoll).  Any other such
 * wait with a timeout (a raw epoll syscall, sigtimedwait, semtimedop,
 * io_getevents, a socket with SO_RCVTIMEO...) would start its full
 * timeout again and move its deadline: it is not stopped, even when
 * named.  TI as just read from /proc.
 */
static bool timed_wait_unresumable(const struct ma_target *t, const struct ma_thread_info *ti,
				   char *why, size_t whylen)
{
	struct user_regs_struct r;
	const char *name = ma_arch_syscall_name(ti->syscall);

	if (!ma_thread_stop_ends_with_eintr(ti) || !ti->timed_wait)
		return false;
	memset(&r, 0, sizeof(r));
	ma_arch_set_ip(&r, ti->pc);
	if (ma_arch_is_epoll_wait(ti->syscall) && ti->pc && in_libc_epoll(t, &r))
		return false;
	snprintf(why, whylen, "blocked in %s with a timeout, which a stop ends with EINTR: issued "
		 "again it would wait its whole timeout once more (memattach can give back what "
		 "remained only to libc's epoll_wait/epoll_pwait); not stopped", name ? name : "a wait");
	return true;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
 * The thread's status file, opened before it is stopped: in the hold,
 * reading it (the seccomp mode) is then one pread, not an open.
 */
static void open_status_fd(struct ma_session *s, pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", s->t->pid, tid);
	s->status_fd = open(path, O_RDONLY | O_CLOEXEC);
}

static void open_mem_fd(struct ma_session *s)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/mem", s->t->proc_pid);
	s->mem_fd = open(path, O_RDWR | O_CLOEXEC);
}

/* The stub site is in a read-only mapping: written through /proc/PID/mem. */
static int write_stub_site(struct ma_session *s, size_t off, const void *buf, size_t len)
{
	return ma_mem_write_fd(s->mem_fd, s->t->proc_pid, s->stub + off, buf, len);
}

static int thread_seccomp_mode(const struct ma_session *s)
{
	return s->status_fd >= 0 ? ma_seccomp_mode_of(s->status_fd) : ma_seccomp_mode(s->t->pid, s->tid);
}

/* Let a thread we only looked at go (its EINTR re-issue is already set). */
static void release_untouched(struct ma_session *s, int sig)
{
	ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig);
	s->seized = false;
	ma_hold_priority_drop();
}

/*
 * The lowest address of the borrowed thread's stack, or 0 when it cannot
 * be known.  The main thread's is its [stack] mapping's start.  A
 * pthread's stack is known when the thread library allocated it: a
 * mapping of its own with the guard page (no access) right below.  A
 * stack the program supplied (pthread_attr_setstack) may be carved out of
 * a larger mapping whose lower part is the program's own data, which
 * memattach's state below the stack pointer would overwrite (an outside
 * attack: 1,728 bytes below a thread stack with 1,200 free).
 */
static uint64_t stack_bottom(const struct ma_session *s)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, ma_arch_stack_pointer(&s->saved.regs) - 1);
	const struct ma_mapping *below;

	if (!m)
		return 0;
	if (m->path && strcmp(m->path, "[stack]") == 0)
		return m->start;
	below = m->start ? ma_target_mapping_at(s->t, m->start - 1) : NULL;
	if (below && below->end == m->start && memcmp(below->perms, "---", 3) == 0)
		return m->start;
	return 0;
}

/*
 * Is there room for a call below the stack pointer?  When not, *NEVER says
 * whether the whole stack mapping is smaller than that (waiting cannot help).
 */
static bool stack_has_room(const struct ma_session *s, bool *never)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, ma_arch_stack_pointer(&s->saved.regs) - 1);
	uint64_t need = STACK_ROOM + ma_arch_state_area_size(s->saved.xstate_len);
	uint64_t bottom = stack_bottom(s);

	*never = m && m->end - bottom <= need;
	return m && m->perms[0] == 'r' && m->perms[1] == 'w' && ma_arch_stack_pointer(&s->saved.regs) - bottom > need;
}

/*
 * Is the thread the parent of a vfork (vfork, or clone/clone3 with
 * CLONE_VFORK, as posix_spawn does)?  It cannot stop until the child execs
 * or exits, which may be never.
 */
static bool in_vfork(pid_t tid, const struct ma_thread_info *ti)
{
	uint64_t flags = 0;

	if (ma_arch_is_vfork(ti->syscall))
		return true;
	switch (ti->syscall) {
	case SYS_clone:
		return (ti->arg0 & CLONE_VFORK) != 0;
	case SYS_clone3: /* the flags are the first field of its struct clone_args */
		if (ma_mem_read(tid, ti->arg0, &flags, sizeof(flags)) != 0) {
			ma_err_clear();
			return false;
		}
		return (flags & CLONE_VFORK) != 0;
	default:
		return false;
	}
}

/*
 * Does the thread run on its own stack?  The unwinder sees only the stack
 * the thread is on: a signal handler or coroutine that switched to a stack
 * of its own (swapcontext, a fiber library) hides whatever it interrupted
 * -- perhaps jemalloc, holding a lock.  The main thread's stack is
 * [stack]; a pthread's is the mapping that also holds its thread
 * descriptor, where the thread pointer points (glibc and musl alike).
 */
static bool on_own_stack(const struct ma_session *s, pid_t tid)
{
	const struct ma_mapping *sp = ma_target_mapping_at(s->t, ma_arch_stack_pointer(&s->saved.regs));

	if (!sp)
		return false;
	if (tid == s->t->pid)
		return sp->path && strcmp(sp->path, "[stack]") == 0;
	return sp == ma_target_mapping_at(s->t, ma_arch_thread_pointer(&s->saved.regs));
}

static void read_site_headers(const struct ma_session *s, struct ma_stub_header *hs);
static bool runs_in(const struct ma_stub_header *h, uint64_t stub, uint64_t pc, uint64_t sp);

/*
 * Is the stopped thread inside a killed run's stub or mappings?  Its
 * stub was restoring the thread when our stop came: a call now would
 * save those half-restored registers and put its own state area and
 * stack below them, where that stub still reads (the target crashed in
 * 1 of 4 runs of attach/killed.sh).  Such a thread is let go to finish.
 */
static bool inside_leftover_stub(const struct ma_session *s)
{
	struct ma_stub_header hs[MA_MAX_STUB_SITES];

	read_site_headers(s, hs);
	for (size_t i = 0; i < s->t->nstub_sites; i++)
		if (hs[i].magic == MA_MAGIC_STUB &&
		    runs_in(&hs[i], s->t->stub_sites[i].addr, ma_arch_ip(&s->saved.regs),
			    ma_arch_stack_pointer(&s->saved.regs)))
			return true;
	return false;
}

/*
 * Is the wait our stop interrupted the one whose beginning was read
 * (switch count NVCSW then)?  Since then the thread may only have gone
 * to sleep for our stop.  One that had returned and waited again would
 * count one more sleep, and its wait began later.  (Not seen: a wait
 * that returned and was entered again, and interrupted by our stop
 * before it slept, in the few microseconds from that reading to our
 * PTRACE_INTERRUPT.)
 */
static bool same_wait(const struct ma_session *s, uint64_t nvcsw)
{
	return s->status_fd >= 0 && ma_voluntary_switches_of(s->status_fd) == nvcsw + 1;
}

/*
 * Stop TI's thread and examine it; 0 = seized and safe, else detached.
 * A thread stopped with a signal on its way in is let go with it at once:
 * a signal held across the whole session (SIGSTOP, say) could be
 * cancelled meanwhile by the kernel's rules, and memattach would not know.
 */
/* The run's deadline came before thread TID could be stopped (MA_E_TIMEOUT, never seized). */
static int deadline_before_stop(pid_t tid, char *why, size_t whylen)
{
	snprintf(why, whylen, "the run's --timeout ran out before it could be stopped");
	return ma_fail(MA_E_TIMEOUT, "the run's --timeout ran out before thread %d could be stopped",
		       tid);
}

/*
 * Did the process exec since its maps were read?  A refused thread of the
 * new program was judged by the old one's maps (its stack "not its own"):
 * the run ends with the exec's message, not that refusal.
 */
static bool exec_since_opened(struct ma_session *s)
{
	uint64_t addrs[2] = { s->t->je.mallctl, s->t->stub_sites[0].addr };

	if (!addrs[0] || ma_target_maps_unchanged(s->t, addrs, addrs[1] ? 2 : 1) == 0) {
		ma_err_clear();
		return false;
	}
	s->exec_seen = true;
	return true;
}

static int try_thread(struct ma_session *s, const struct ma_thread_info *ti,
		      struct ma_backtrace *btp, char *why, size_t whylen)
{
	struct ma_backtrace local, *bt = btp ? btp : &local;
	struct user_regs_struct first;
	bool reissued = false;
	uint64_t wait_began_ns = 0, wait_nvcsw = 0;
	struct ma_thread_info now;
	int status, rc, sig, stop_ms;

	close_fd(&s->status_fd); /* the previous candidate's */
	s->early_seccomp_mode = -1;
	s->tid = ti->tid;
	s->hopeless = s->fresh = s->in_eintr_wait = s->creates_state = false;
	memset(&s->resume, 0, sizeof(s->resume));
	if (ti->state == 'Z' || ti->state == 'X') {
		/* A main thread that called pthread_exit: the others run on. */
		snprintf(why, whylen, "has exited (the process lives on in its other threads)");
		s->hopeless = true;
		return MA_E_NOSAFE;
	}
	if (in_vfork(ti->tid, ti)) {
		snprintf(why, whylen, "waits for its vfork() child to exec or exit, and cannot be "
			 "stopped until then");
		s->hopeless = true;
		return MA_E_NOSAFE;
	}
	if (!s->stop_eintr_wait && in_eintr_wait(s, ti, &now, why, whylen)) {
		/* Not even named: say so rather than what --tid would do. */
		if (timed_wait_unresumable(s->t, &now, why, whylen)) {
			s->hopeless = true;
			return MA_E_NOSAFE;
		}
		/* A choice among threads tries again later (it may have left the
		 * wait); one thread asked for (a flush visit) is given up at once. */
		s->eintr_nr = now.syscall;
		s->hopeless = s->named != 0;
		s->in_eintr_wait = true;
		return MA_E_NOSAFE;
	}
	if (ma_run_deadline_passed())
		return deadline_before_stop(ti->tid, why, whylen);
	open_status_fd(s, ti->tid);
	if (ma_target_read_tls_offset(s->t, ti->tid) != 0)
		ma_err_clear(); /* judged in the hold (a thread that cannot tell counts as having state) */
	ma_unwind_rehearse(s->t, ti->tid); /* before the stop: the walk in the hold is then short */
	/*
	 * Read last, right before the stop: when the wait began (the time
	 * that remained is measured from it), which the listing may have
	 * seen for an earlier wait of the same loop (that early start made a
	 * re-issued epoll_wait return before its timeout).
	 */
	if (s->stop_eintr_wait) {
		ma_read_thread_info(s->t->pid, ti->tid, &now);
		if (timed_wait_unresumable(s->t, &now, why, whylen)) {
			s->hopeless = true;
			return MA_E_NOSAFE;
		}
		wait_began_ns = now.wait_began_ns;
		wait_nvcsw = now.nvcsw;
	}
	stop_ms = ma_run_ms_left(1000);
	if (stop_ms == 0)
		return deadline_before_stop(ti->tid, why, whylen);
	/* From here to the release, memattach must not wait for a CPU (holdprio.h). */
	ma_hold_priority_raise();
	if (ma_ptrace(PTRACE_SEIZE, ti->tid, NULL, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
		int e = errno;

		ma_hold_priority_drop();
		/* An exec's old leader, a zombie whose pid the exec'ing thread took over. */
		if (e == EPERM && exec_since_opened(s))
			return ma_fail(MA_E_EXITED, "thread %d went away: the process exec'd", ti->tid);
		if (e == EPERM) {
			struct ma_proc_status st;

			if (ma_proc_read_status(s->t->pid, ti->tid, &st) != 0) {
				ma_err_clear();
				return ma_fail(MA_E_EXITED, "thread %d went away", ti->tid);
			}
			/*
			 * Another memattach run that is ending (it lets go of a
			 * thread that was slow to stop, or exits): try again.
			 */
			if (st.tracer == getpid()) {
				snprintf(why, whylen, "had not come to its stop yet when this run tried "
					 "it before (in the kernel, or waiting for CPU)");
				return MA_E_NOSAFE;
			}
			if (st.tracer && (ma_is_memattach(st.tracer) ||
					  strcmp(ma_comm_of(st.tracer), "?") == 0)) {
				snprintf(why, whylen, "still traced by memattach pid %d, which is "
					 "finishing", st.tracer);
				return MA_E_NOSAFE;
			}
			/* Only this thread is traced (the process as a whole was
			 * checked when it was opened): borrow another one. */
			if (st.tracer) {
				snprintf(why, whylen, "traced by pid %d (%s); detach that first",
					 st.tracer, ma_comm_of(st.tracer));
				s->hopeless = true;
				return MA_E_NOSAFE;
			}
		}
		errno = e;
		return ptrace_errno("PTRACE_SEIZE", ti->tid);
	}
	s->seized = true;
	s->t_stop_ns = ma_now_ns();
	if (ma_ptrace(PTRACE_INTERRUPT, ti->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_INTERRUPT", ti->tid);
	/*
	 * While the thread comes to its stop, read its seccomp mode (a pread
	 * that need not be part of the hold): from here on it runs no code of
	 * its own, so only a syscall it was already making can still change
	 * its mode, and then its stop shows that syscall (check_seccomp reads
	 * again).  A filter synced from another thread (TSYNC) can come at
	 * any time, in a hold as well.
	 */
	s->early_seccomp_mode = s->status_fd >= 0 ? ma_seccomp_mode_of(s->status_fd) : -1;
	rc = peek_stop(ti->tid, &status, stop_ms);
	/* A signal on its way in: handed back still unreported (peek_stop). */
	if (rc == 0 && is_signal_stop(status)) {
		snprintf(why, whylen, "a signal (%d) was being delivered to it", WSTOPSIG(status));
		release_untouched(s, WSTOPSIG(status));
		return MA_E_NOSAFE;
	}
	if (rc == 0)
		rc = wait_stop(ti->tid, &status, 1000);
	if (rc == MA_E_TIMEOUT) {
		snprintf(why, whylen, "did not stop within %s", stop_ms < 1000 ? "the run's --timeout"
										 : "1 s");
		return MA_E_TIMEOUT; /* still seized; the caller keeps trying others */
	}
	if (rc)
		return rc;
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		s->seized = false;
		return ma_fail(MA_E_EXITED, "thread %d exited", ti->tid);
	}
	sig = WSTOPSIG(status);
	if ((status >> 16) == PTRACE_EVENT_STOP && sig != SIGTRAP) {
		snprintf(why, whylen, "process is stopped by job control (signal %d)", sig);
		release_untouched(s, 0);
		return MA_E_STOPPED;
	}
	if ((status >> 16) == 0) {
		snprintf(why, whylen, "a signal (%d) was being delivered to it", sig);
		release_untouched(s, sig);
		return MA_E_NOSAFE;
	}
	if ((rc = ma_arch_get_regs(ti->tid, &s->saved.regs))) {
		release_untouched(s, 0);
		return rc;
	}
	first = s->saved.regs;
	/*
	 * Our stop made its syscall fail with EINTR: issue it again at once,
	 * before anything else, so a memattach that dies from here on leaves
	 * no EINTR.  (Between the stop and this write no register can be set:
	 * that window is the one ptrace leaves; such threads are tried last.)
	 */
	if (ma_arch_interrupted_eintr(&s->saved.regs) && is_syscall_insn_at(s->t->proc_pid, &s->saved.regs)) {
		ma_arch_resume_regs(&s->saved.regs, true, &s->resume);
		if (wait_began_ns && ma_now_ns() > wait_began_ns && in_libc_epoll(s->t, &first) &&
		    same_wait(s, wait_nvcsw))
			ma_arch_shorten_wait(&s->resume, (ma_now_ns() - wait_began_ns) / 1000000ULL);
		ma_arch_set_regs(ti->tid, &s->resume);
		reissued = true;
	}
	if ((rc = ma_arch_get_xstate(ti->tid, &s->saved)) == 0 &&
	    ma_ptrace(PTRACE_GETSIGMASK, ti->tid, (void *)sizeof(s->sigmask), &s->sigmask) != 0)
		rc = ptrace_errno("PTRACE_GETSIGMASK", ti->tid);
	if (rc) {
		release_untouched(s, 0);
		return rc;
	}
	if (reissued && signal_pending_for(s->t->pid, ti->tid, s->sigmask)) {
		/* A real signal waits: the EINTR is its due after all. */
		ma_arch_set_regs(ti->tid, &s->saved.regs);
		reissued = false;
	}
	if (!reissued)
		ma_arch_resume_regs(&s->saved.regs, false, &s->resume);
	if (ma_unwind(s->t, ti->tid, &s->saved.regs, bt) != 0) {
		ma_err_clear();
		snprintf(why, whylen, "stack could not be unwound");
		goto unsafe_or_exec;
	}
	if (!ma_thread_is_safe(s->t, ti, bt, why, whylen))
		goto unsafe;
	if (!on_own_stack(s, ti->tid)) {
		snprintf(why, whylen, "runs on a stack that is not its own (a coroutine, or a signal "
			 "handler on another stack): what it interrupted cannot be seen");
		goto unsafe_or_exec;
	}
	if (!stack_bottom(s)) {
		snprintf(why, whylen, "runs on a stack the program supplied (no guard page below "
			 "it): where it ends cannot be known, and memattach's saved state goes "
			 "below the stack pointer");
		s->hopeless = true;
		goto unsafe;
	}
	if (!stack_has_room(s, &s->hopeless)) {
		snprintf(why, whylen, "less than %lu KiB of its stack below the stack pointer",
			 STACK_ROOM >> 10);
		goto unsafe;
	}
	/* A call would create allocator state in a thread that has none: only when named. */
	s->creates_state =
		ma_thread_has_je_state(s->t, ti->tid, ma_arch_thread_pointer(&s->saved.regs)) == 0;
	if (s->creates_state && !s->fresh_ok) {
		snprintf(why, whylen, "never called into jemalloc: borrowing it would create its "
			 "allocator state (a tcache)");
		s->fresh = s->hopeless = true;
		s->creates_state = false;
		goto unsafe;
	}
	if (s->sites_had_stub && inside_leftover_stub(s)) {
		snprintf(why, whylen, "still finishing the call of an earlier memattach run that "
			 "was killed (its stub is restoring the thread's registers)");
		goto unsafe;
	}
	snprintf(s->why, sizeof(s->why), "thread %d (%s): %s", ti->tid, ti->name, why);
	return 0;
unsafe:
	release_untouched(s, 0);
	s->stopped_ns += ma_now_ns() - s->t_stop_ns;
	return MA_E_NOSAFE;
unsafe_or_exec:
	/* What the old program's maps cannot explain: did it exec? */
	release_untouched(s, 0);
	s->stopped_ns += ma_now_ns() - s->t_stop_ns;
	return exec_since_opened(s) ? MA_E_EXITED : MA_E_NOSAFE;
}

/*
 * The threads to try: all of them, best first, or just TID (one /proc
 * look, not a listing: flushing every thread's tcache stays linear).
 */
static int list_candidates(pid_t pid, pid_t tid, struct ma_thread_info **out, size_t *n)
{
	char path[64];

	if (!tid)
		return ma_list_threads(pid, out, n);
	*n = 0;
	if (!(*out = calloc(1, sizeof(**out))))
		return ma_fail(MA_E_NOMEM, "out of memory");
	snprintf(path, sizeof(path), "/proc/%d/task/%d", pid, tid);
	if (access(path, F_OK) == 0) {
		ma_read_thread_info(pid, tid, *out);
		*n = 1;
	}
	return 0;
}

static int choose_thread_loop(struct ma_session *s, const struct ma_session_opts *o);

/* Thread TID first if it ranks with the best of TI (sorted best first). */
static void prefer_first(struct ma_thread_info *ti, size_t n, pid_t tid)
{
	for (size_t k = 1; tid && k < n; k++) {
		struct ma_thread_info t = ti[k];

		if (t.tid != tid)
			continue;
		if (strcmp(ma_thread_rank_class(&t), ma_thread_rank_class(&ti[0])) == 0) {
			memmove(&ti[1], &ti[0], k * sizeof(ti[0]));
			ti[0] = t;
		}
		return;
	}
}

static int choose_thread(struct ma_session *s, const struct ma_session_opts *o)
{
	int rc;

	ma_unwind_prepare(); /* outside the holds; a failure is reported by the walk */
	reaper_timer(true);
	rc = choose_thread_loop(s, o);
	reaper_timer(false);
	return rc;
}

/* One round over the candidates: how each was refused. */
struct round_tally {
	size_t tried, hopeless, fresh, waits, busy; /* busy: refused for now only */
	pid_t fresh_tid, wait_tid;
	char wait_who[80], wait_in[40];
	char last[400]; /* the last refusal, any kind */
	char last_who[80], last_why[256];
	char last_busy[400]; /* the last refusal that waiting may end */
};

/* Count TI's refusal (WHY, the session's flags as try_thread left them) into T. */
static void tally_refusal(struct round_tally *t, const struct ma_session *s,
			  const struct ma_thread_info *ti, const char *why)
{
	snprintf(t->last, sizeof(t->last), "thread %d (%s): %s", ti->tid, ti->name, why);
	snprintf(t->last_who, sizeof(t->last_who), "thread %d (%s)", ti->tid, ti->name);
	snprintf(t->last_why, sizeof(t->last_why), "%s", why);
	t->hopeless += s->hopeless;
	if (s->in_eintr_wait && !t->waits++) {
		t->wait_tid = ti->tid;
		snprintf(t->wait_who, sizeof(t->wait_who), "thread %d (%s)", ti->tid, ti->name);
		if (ma_arch_syscall_name(s->eintr_nr))
			snprintf(t->wait_in, sizeof(t->wait_in), "%s", ma_arch_syscall_name(s->eintr_nr));
	}
	if (s->fresh) {
		t->fresh++;
		t->fresh_tid = ti->tid;
	}
	if (!s->hopeless && !s->in_eintr_wait) {
		t->busy++;
		snprintf(t->last_busy, sizeof(t->last_busy), "%s", t->last);
	}
}

/*
 * Every thread tried was refused for a reason no wait can end (T): say
 * which, and what would help instead of a longer --timeout.
 */
static int lasting_refusal(const struct ma_session *s, const struct ma_session_opts *o,
			   const struct round_tally *t)
{
	char tid[48] = "";

	if (t->waits) {
		if (!o->no_tid_option)
			snprintf(tid, sizeof(tid), "--tid %d borrows it, or ", t->wait_tid);
		return ma_fail(MA_E_NOSAFE,
			       "with --strict, no thread of process %d can be borrowed: %s%s is "
			       "blocked in %s, which a stop ends with EINTR (memattach issues it "
			       "again at once; only a memattach killed in between leaves the EINTR "
			       "to the program)%s; %sleave out --strict",
			       s->t->pid, t->wait_who, t->waits > 1 ? " (and others)" : "", t->wait_in,
			       t->tried > t->waits ? ", and the others are jemalloc's background "
						     "threads or never called into jemalloc" : "",
			       tid);
	}
	if (t->fresh) {
		if (o->no_tid_option)
			snprintf(tid, sizeof(tid), "this command never borrows such a thread");
		else
			snprintf(tid, sizeof(tid), "--tid %d borrows one anyway", t->fresh_tid);
		return ma_fail(MA_E_NOSAFE,
			       "no thread of process %d can be borrowed without leaving a trace: "
			       "the ones safe to borrow never called into jemalloc, and a call "
			       "would create their allocator state (a tcache; with "
			       "background_thread:true perhaps a background thread); %s",
			       s->t->pid, tid);
	}
	if (o->tid)
		return ma_fail(MA_E_NOSAFE, "%s cannot be borrowed: %s", t->last_who, t->last_why);
	return ma_fail(MA_E_NOSAFE, "no thread of process %d can be borrowed (last: %s)", s->t->pid,
		       t->last);
}

/* The deadline passed with some thread refused only for the moment (T->busy). */
static int deadline_refusal(const struct ma_session *s, const struct ma_session_opts *o,
			    const struct round_tally *t)
{
	size_t lasting = t->tried - t->busy;
	char others[160] = "";

	if (lasting)
		snprintf(others, sizeof(others), " (%zu other thread%s refused for reasons that "
			 "last)", lasting, lasting > 1 ? "s" : "");
	return ma_fail(MA_E_NOSAFE,
		       "no thread of process %d was safe to borrow within %d ms (last: %s)%s; "
		       "that may pass: try again, or give a longer --timeout",
		       s->t->pid, o->deadline_ms, t->last_busy, others);
}

/*
 * The run's deadline came in a round before thread number TRIED of N could
 * be stopped: the last full round (PREV) says why none could be borrowed,
 * else this one so far (T), else how far the run got.
 */
static int deadline_cut(const struct ma_session *s, const struct ma_session_opts *o,
			const struct round_tally *prev, const struct round_tally *t, size_t tried,
			size_t n)
{
	if (prev->busy)
		return deadline_refusal(s, o, prev);
	if (t->busy)
		return deadline_refusal(s, o, t);
	if (tried <= 1)
		return ma_fail(MA_E_NOSAFE, "the run's --timeout (%d ms) ran out before a thread "
			       "of process %d could be tried; give a longer --timeout",
			       o->deadline_ms, s->t->pid);
	return ma_fail(MA_E_NOSAFE, "the run's --timeout (%d ms) ran out after %zu of the %zu "
		       "threads of process %d were tried (none could be borrowed; last: %s); give "
		       "a longer --timeout", o->deadline_ms, tried - 1, n, s->t->pid, t->last);
}

static int choose_thread_loop(struct ma_session *s, const struct ma_session_opts *o)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)ma_run_ms_left(o->deadline_ms) * 1000000ULL;
	char why[256] = "";
	bool seen = false;

	struct round_tally prev = { .busy = 0 };

	for (unsigned round = 0;; round++) {
		struct round_tally t = { .wait_in = "a wait", .last = "no thread found" };
		struct ma_thread_info *ti;
		size_t n;
		bool lasting;
		int rc = list_candidates(s->t->pid, o->tid, &ti, &n);

		if (rc)
			return rc;
		prefer_first(ti, n, o->prefer_tid);
		for (size_t i = 0; i < n; i++) {
			if (!thread_wanted(o, &ti[i]))
				continue;
			seen = true;
			if (o->tid && ma_thread_is_jemalloc_bg(&ti[i])) {
				free(ti);
				return ma_fail(MA_E_NOSAFE,
					       "thread %d is one of jemalloc's background threads: it "
					       "runs inside jemalloc (and may hold its locks), so it is "
					       "never borrowed; give another --tid or none",
					       o->tid);
			}
			t.tried++;
			if (ma_thread_is_jemalloc_bg(&ti[i])) {
				/* It runs inside jemalloc: never borrowed, so never stopped. */
				t.hopeless++;
				continue;
			}
			/* A refusal says its own reason, never the previous thread's. */
			snprintf(why, sizeof(why), "refused without a reason recorded");
			rc = try_thread(s, &ti[i], NULL, why, sizeof(why));
			if (rc == 0) {
				free(ti);
				return 0;
			}
			if (rc == MA_E_TIMEOUT && !s->seized) {
				/* The deadline came before this thread's stop. */
				size_t tried = t.tried;

				free(ti);
				ma_err_clear();
				return deadline_cut(s, o, &prev, &t, tried, n);
			}
			if (rc == MA_E_PERM || rc == MA_E_TRACED) {
				free(ti);
				return rc;
			}
			if (rc == MA_E_STOPPED) {
				/* No thread of a stopped process runs until SIGCONT: say so now. */
				free(ti);
				return ma_fail(MA_E_NOSAFE,
					       "process %d is stopped (SIGSTOP or Ctrl-Z); continue it "
					       "with 'kill -CONT %d' and run memattach again",
					       s->t->pid, s->t->pid);
			}
			if (rc == MA_E_EXITED && ma_process_exited(s->t->pid)) {
				free(ti);
				return ma_fail_if_exited(s->t->pid, rc);
			}
			if (rc == MA_E_EXITED && s->exec_seen) {
				free(ti);
				return rc; /* its message: the exec */
			}
			if (rc == MA_E_TIMEOUT && s->seized) {
				/* Stuck in an uninterruptible sleep: it stops when it can. */
				add_straggler(s->t->pid, ti[i].tid, ti[i].eintr_wait);
				s->seized = false;
			}
			/* A failure (it exited...), not a verdict: its message says why. */
			if (rc != MA_E_NOSAFE && rc != MA_E_TIMEOUT && ma_errmsg()[0])
				snprintf(why, sizeof(why), "%s", ma_errmsg());
			ma_err_clear();
			tally_refusal(&t, s, &ti[i], why);
		}
		free(ti);
		/* Waiting cannot help a thread that has exited or that another
		 * program traces: say so now rather than at the deadline. */
		if (o->tid && s->fresh)
			return ma_fail(MA_E_NOSTATE, "%s has never called into jemalloc (it has no "
				       "allocator state)", t.last_who);
		if (o->tid && !seen)
			return ma_fail(MA_E_NOPROC, "thread %d is not a thread of process %d", o->tid,
				       s->t->pid);
		/*
		 * Every thread is either never borrowable or in a wait we do not
		 * stop (an event loop in epoll_wait, its helpers idle since they
		 * started): say so and how to go on, at once when none waits,
		 * else after a few rounds (the loop may run meanwhile, and be
		 * taken while it runs) or at the deadline.
		 */
		lasting = t.tried && t.busy == 0;
		if (lasting && (!t.waits || round >= 20 || ma_now_ns() >= deadline))
			return lasting_refusal(s, o, &t);
		if (ma_interrupted)
			return ma_fail(MA_E_NOSAFE, "interrupted while looking for a safe thread");
		if (ma_now_ns() >= deadline)
			return t.busy ? deadline_refusal(s, o, &t)
				      : ma_fail(MA_E_NOSAFE, "no thread of process %d found to borrow",
						s->t->pid);
		prev = t;
		/* Let the threads run a little: a lock holder finishes. */
		usleep(round < 20 ? 500 : 5000);
	}
}

/* ---- leftovers of a killed run ---- */

static bool in_range(uint64_t a, uint64_t lo, uint64_t len)
{
	return a >= lo && a - lo < len;
}

/* Is PC or SP in the stub or in one of H's mappings? */
static bool runs_in(const struct ma_stub_header *h, uint64_t stub, uint64_t pc, uint64_t sp)
{
	if (in_range(pc, stub, MA_STUB_REGION))
		return true;
	for (size_t i = 0; i < MA_MAX_MAP_RECORDS; i++)
		if (h->map[i].len &&
		    (in_range(pc, h->map[i].addr, h->map[i].len) || in_range(sp, h->map[i].addr, h->map[i].len)))
			return true;
	return false;
}

/*
 * Stop thread TID just long enough to read its ip and stack pointer (a
 * syscall our stop failed with EINTR is issued again).  False if it could
 * not be stopped.
 */
static bool peek_thread(pid_t pid, pid_t tid, uint64_t *pc, uint64_t *sp)
{
	struct user_regs_struct r;
	int status, sig = 0;
	bool ok = false;

	if (ma_ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0)
		return false;
	if (ma_ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0 && wait_stop(tid, &status, 1000) == 0 &&
	    WIFSTOPPED(status)) {
		if ((status >> 16) == 0)
			sig = WSTOPSIG(status);
		ok = ma_arch_get_regs(tid, &r) == 0;
		if (ok) {
			*pc = ma_arch_ip(&r);
			*sp = ma_arch_stack_pointer(&r);
			release_regs_eintr(pid, tid);
		}
		ma_ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig);
	} else {
		add_straggler(pid, tid, true); /* not known: as if it were */
	}
	ma_err_clear();
	return ok;
}

/*
 * Does a thread still run in the leftover described by H (at stub site
 * STUB)?  Its borrowed thread is in it while its ip is in the stub or a
 * mapping, or its stack pointer in a mapping.  A thread that is running
 * is stopped for a moment to look; if that fails, assume it is.
 */
static bool leftover_in_use(const struct ma_session *s, const struct ma_stub_header *h,
			    uint64_t stub)
{
	uint64_t pc = 0, sp = 0;

	if ((pid_t)h->tid == s->tid)
		return runs_in(h, stub, ma_arch_ip(&s->saved.regs), ma_arch_stack_pointer(&s->saved.regs));
	switch (ma_thread_where(s->t->pid, (pid_t)h->tid, &sp, &pc)) {
	case MA_WHERE_GONE:
		return false;
	case MA_WHERE_RUNNING:
		return !peek_thread(s->t->pid, (pid_t)h->tid, &pc, &sp) || runs_in(h, stub, pc, sp);
	default:
		return runs_in(h, stub, pc, sp);
	}
}

/*
 * Is the anonymous mapping R there, and ours: our magic and R's session in
 * its header, or still all zero (the run died between its mmap and
 * writing the header)?
 */
static bool leftover_mapping(const struct ma_session *s, const struct ma_target *now,
			     const struct ma_map_record *r)
{
	const struct ma_mapping *m = ma_target_mapping_at(now, r->addr);
	uint64_t hdr[2];

	/*
	 * Ours starts a mapping (a page left free on each side when made), is
	 * anonymous, and its first page is r-x or, before its mprotect, rw-.
	 */
	if (!r->len || !m || m->start != r->addr || m->path)
		return false;
	if (ma_mem_read(s->t->proc_pid, r->addr, hdr, sizeof(hdr)) != 0) {
		ma_err_clear();
		return false;
	}
	if (hdr[0] == 0 && hdr[1] == 0) /* the run died before writing it: only if whole */
		return m->end == r->addr + r->len && strncmp(m->perms, "rw-", 3) == 0;
	return hdr[0] == MA_MAGIC_MAP && hdr[1] == r->session;
}

/*
 * Take over the still-mapped records of a killed run's header H.  Judged
 * against the mappings as they are now: the run may have been killed after
 * this one read them (it waited for the run lock meanwhile), and a record
 * dropped here is a mapping left in the target for good.
 */
static void inherit_records(struct ma_session *s, const struct ma_stub_header *h)
{
	struct ma_target now;

	if (ma_target_maps_now(s->t, &now) != 0) {
		ma_err_clear();
		return;
	}
	for (size_t i = 0; i < MA_MAX_MAP_RECORDS; i++) {
		bool dup = false;

		if (!leftover_mapping(s, &now, &h->map[i]))
			continue;
		for (size_t j = 0; j < s->ninherited; j++)
			dup |= s->inherited[j].addr == h->map[i].addr;
		if (!dup && s->ninherited < MA_MAX_MAP_RECORDS - 2)
			s->inherited[s->ninherited++] = h->map[i];
	}
	ma_target_release(&now);
}

/*
 * Look at every stub site.  A site whose stub a killed run left is free
 * again once no thread runs in it: its mappings are inherited (unmapped
 * once this session can issue syscalls) and its bytes put back after
 * that.  A site still in use is left alone.  This session takes a clean
 * site if there is one, else a freed one.
 */
static int site_not_ours(const struct ma_session *s)
{
	return ma_fail(MA_E_EXITED, "process %d replaced its program (exec) while memattach "
		       "attached (no stub site holds its file's bytes); run memattach again",
		       s->t->pid);
}

/*
 * Does site I hold its file's bytes?  A site that does not (unreadable,
 * or the process exec'd and other bytes sit there) is never written.
 */
static bool site_as_in_file(const struct ma_session *s, size_t i)
{
	unsigned char now[MA_STUB_REGION];

	if (ma_mem_read(s->t->proc_pid, s->t->stub_sites[i].addr, now, sizeof(now)) != 0) {
		ma_err_clear();
		return false;
	}
	return memcmp(now, ma_target_stub_site_original(s->t, i), sizeof(now)) == 0;
}

/* Every site's header in one read (an unreadable one: no magic). */
static void read_site_headers(const struct ma_session *s, struct ma_stub_header *hs)
{
	struct iovec local[MA_MAX_STUB_SITES] = { { 0 } }, remote[MA_MAX_STUB_SITES] = { { 0 } };
	size_t n = s->t->nstub_sites;

	for (size_t i = 0; i < n; i++) {
		local[i] = (struct iovec){ &hs[i], sizeof(hs[i]) };
		remote[i] = (struct iovec){ (void *)(uintptr_t)(s->t->stub_sites[i].addr + MA_STUB_HEADER),
					    sizeof(hs[i]) };
	}
	if (process_vm_readv(s->t->proc_pid, local, n, remote, n, 0) != (ssize_t)(n * sizeof(hs[0])))
		for (size_t i = 0; i < n; i++)
			if (ma_mem_read(s->t->proc_pid, (uint64_t)(uintptr_t)remote[i].iov_base, &hs[i],
					sizeof(hs[i])) != 0) {
				ma_err_clear();
				hs[i].magic = 0;
			}
}

/* Does any site hold a stub (a killed run's)?  Looked at before any stop. */
static bool any_site_has_stub(const struct ma_session *s)
{
	struct ma_stub_header hs[MA_MAX_STUB_SITES];

	read_site_headers(s, hs);
	for (size_t i = 0; i < s->t->nstub_sites; i++)
		if (hs[i].magic == MA_MAGIC_STUB)
			return true;
	return false;
}

static int scan_stub_sites(struct ma_session *s, bool *stale, bool *busy_left)
{
	long clean = -1, freed = -1;

	struct ma_stub_header hs[MA_MAX_STUB_SITES];
	size_t n = s->t->nstub_sites;

	*busy_left = false;
	/*
	 * No site held a stub when looked at before the stop (only memattach
	 * writes them, and this run holds the run lock): no header to read
	 * in the hold, no leftover to judge.
	 */
	if (s->sites_had_stub)
		read_site_headers(s, hs);
	else
		memset(hs, 0, sizeof(hs));
	for (size_t i = 0; i < n; i++) {
		uint64_t addr = s->t->stub_sites[i].addr;
		struct ma_stub_header h = hs[i];

		stale[i] = false;
		if (h.magic != MA_MAGIC_STUB) {
			/* The first that is as in its file (checked now, in the hold: an exec). */
			if (clean < 0 && site_as_in_file(s, i))
				clean = (long)i;
			continue;
		}
		if (leftover_in_use(s, &h, addr)) {
			*busy_left = true;
			continue;
		}
		stale[i] = true;
		inherit_records(s, &h);
		if (freed < 0)
			freed = (long)i;
	}
	if (clean < 0 && freed < 0 && !*busy_left)
		return site_not_ours(s);
	if (clean < 0 && freed < 0)
		return ma_fail(MA_E_INTERNAL, "every stub site of process %d is in use by an earlier, "
			       "killed memattach run whose call has not returned yet; try again later",
			       s->t->pid);
	s->site = (size_t)(clean >= 0 ? clean : freed);
	s->stub = s->t->stub_sites[s->site].addr;
	stale[s->site] = false; /* ours now: put back at close */
	return 0;
}

/*
 * Descriptors a killed heap-dump left open (our memfd).  Only called when
 * no earlier run's call is still running: then no one uses them.
 */
static void close_leftover_memfds(struct ma_session *s)
{
	char path[64], link[256], fdpath[384];
	struct dirent *d;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", s->t->proc_pid);
	if (!(dir = opendir(path)))
		return;
	while ((d = readdir(dir))) {
		ssize_t n;
		uint64_t args[1], ret;

		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, d->d_name);
		n = readlink(fdpath, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		/* heap-dump's memfd, or the frag agent's before its dlopen finished */
		if (strcmp(link, "/memfd:" MA_MEMFD_NAME " (deleted)") != 0 &&
		    strcmp(link, "/memfd:" MA_AGENT_MEMFD_NAME " (deleted)") != 0)
			continue;
		args[0] = (uint64_t)atoi(d->d_name);
		if (ma_session_syscall(s, SYS_close, args, 1, &ret) == 0 && ret == 0)
			s->leftovers_removed++;
		else
			ma_err_clear();
	}
	closedir(dir);
}

static int write_stub_header(struct ma_session *s);

/* Unmap the inherited mappings, then put back the bytes of the stale stub sites. */
static void remove_leftovers(struct ma_session *s, const bool *stale)
{
	while (s->ninherited > 0) {
		struct ma_map_record *r = &s->inherited[s->ninherited - 1];
		uint64_t args[2] = { r->addr, r->len }, ret;

		if (ma_session_syscall(s, SYS_munmap, args, 2, &ret) != 0) {
			ma_err_clear();
			return;
		}
		s->leftovers_removed++;
		s->ninherited--;
		if (write_stub_header(s) != 0) {
			ma_err_clear();
			return;
		}
	}
	for (size_t i = 0; i < s->t->nstub_sites; i++) {
		if (!stale[i] || ma_mem_write(s->t->proc_pid, s->t->stub_sites[i].addr,
					      ma_target_stub_site_original(s->t, i), MA_STUB_REGION) != 0) {
			ma_err_clear();
			continue;
		}
		s->leftovers_removed++;
	}
}

/* ---- setting up ---- */

/* Does the thread's filter allow all of Q (N queries)?  For what memattach can do without. */
static bool filter_allows(struct ma_session *s, const struct ma_sc_query *q, size_t n)
{
	if (ma_seccomp_check(s->t->pid, s->tid, q, n) == 0)
		return true;
	ma_err_clear();
	return false;
}

/*
 * May the stub's self-restore ask the kernel about waiting signals
 * (rt_sigpending, then rt_sigaction for each)?  Under a filter that
 * forbids it, the stub restarts the syscall as it stood.
 */
static bool stub_may_ask_signals(struct ma_session *s)
{
	struct ma_sc_query q[65];

	q[0] = (struct ma_sc_query){ SYS_rt_sigpending, { UNCHOSEN_ADDR, 8 },
				     s->stub + MA_STUB_PENDING_SYSCALL_END,
				     "rt_sigpending (the stub's self-restore)" };
	for (int sig = 1; sig <= 64; sig++)
		q[sig] = (struct ma_sc_query){ SYS_rt_sigaction, { (uint64_t)sig, 0, UNCHOSEN_ADDR, 8 },
					       s->stub + MA_STUB_ACTION_SYSCALL_END,
					       "rt_sigaction (the stub's self-restore)" };
	return filter_allows(s, q, sizeof(q) / sizeof(q[0]));
}

/*
 * May the stub end in rt_sigreturn?  Else it ends by popping the
 * registers, after its rt_sigprocmask.
 */
static bool stub_may_sigreturn(struct ma_session *s)
{
	struct ma_sc_query q = { SYS_rt_sigreturn, { 0 }, s->stub + MA_STUB_SIGRETURN_SYSCALL_END,
				 "rt_sigreturn (the stub's self-restore)" };

	return filter_allows(s, &q, 1);
}

/* May it read the alternate stack first?  Else rt_sigreturn leaves it alone. */
static bool stub_may_read_altstack(struct ma_session *s)
{
	struct ma_sc_query q = { SYS_sigaltstack, { 0, s->area + MA_AREA_UC_STACK },
				 s->stub + MA_STUB_ALTSTACK_SYSCALL_END,
				 "sigaltstack (the stub's self-restore)" };

	return filter_allows(s, &q, 1);
}

/* May the trap's rt_sigprocmask run (ma_arch_trap_regs)?  Else the old way in. */
static bool trap_allowed(struct ma_session *s)
{
	struct ma_sc_query q = { SYS_rt_sigprocmask, { SIG_BLOCK, UNCHOSEN_ADDR, 0, 8 },
				 s->stub + MA_STUB_TRAP_END, "rt_sigprocmask (the way in)" };

	return filter_allows(s, &q, 1);
}

static int check_seccomp(struct ma_session *s, size_t data_len, bool on_stack)
{
	uint64_t ip = s->stub + MA_STUB_MARKER_END, any = UNCHOSEN_ADDR;
	struct ma_sc_query q[] = {
		{ MA_STUB_MARKER_NR, { 0 }, ip, "getpid (the stub's marker)" },
		/* What jemalloc itself does inside our calls (purge, decay, locks). */
		{ SYS_madvise, { any, PAGE, MADV_DONTNEED, 0, 0, 0 }, ip, "madvise (jemalloc's purge)" },
		{ SYS_madvise, { any, PAGE, MADV_FREE, 0, 0, 0 }, ip, "madvise (jemalloc's purge)" },
		{ SYS_futex, { any, 128 /* FUTEX_WAIT_PRIVATE */, 0, 0, 0, 0 }, ip, "futex (jemalloc's locks)" },
		{ SYS_futex, { any, 129 /* FUTEX_WAKE_PRIVATE */, 1, 0, 0, 0 }, ip, "futex (jemalloc's locks)" },
	};
	/* The scratch mapping's own syscalls, when the scratch is not on the thread's stack. */
	struct ma_sc_query qmap[] = {
		{ SYS_mmap, { any, HEADER_PAGE + data_len, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, (uint64_t)-1, 0 },
		  ip, "mmap (memattach's scratch area)" },
		{ SYS_munmap, { any, HEADER_PAGE + data_len, 0, 0, 0, 0 }, ip, "munmap" },
	};
	/* Needed only by the pop ending. */
	struct ma_sc_query qmask = { SYS_rt_sigprocmask, { SIG_SETMASK, s->area + MA_AREA_SIGMASK, 0, 8, 0, 0 },
				     s->stub + MA_STUB_RESTORE_SYSCALL_END,
				     "rt_sigprocmask (the stub's self-restore)" };
	int mode = s->early_seccomp_mode, rc;

	if (mode < 0 || ma_arch_stopped_after_seccomp_change(&s->saved.regs))
		mode = thread_seccomp_mode(s);
	s->stub_asks_signals = s->trap_ok = s->stub_sigreturns = s->stub_reads_altstack = true;
	if (mode == 0)
		return 0;
	s->filtered = true;
	if ((rc = ma_seccomp_check(s->t->pid, s->tid, q, sizeof(q) / sizeof(q[0]))) ||
	    (!on_stack && (rc = ma_seccomp_check(s->t->pid, s->tid, qmap, 2))))
		return rc;
	s->stub_sigreturns = stub_may_sigreturn(s);
	s->stub_reads_altstack = stub_may_read_altstack(s);
	if (!s->stub_sigreturns && (rc = ma_seccomp_check(s->t->pid, s->tid, &qmask, 1)))
		return rc;
	s->stub_asks_signals = stub_may_ask_signals(s);
	s->trap_ok = trap_allowed(s);
	return 0;
}

static void fill_header(const struct ma_session *s, struct ma_stub_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = MA_MAGIC_STUB;
	h->session = s->id;
	h->tid = (uint32_t)s->tid;
	h->owner = (uint32_t)getpid();
	h->map[0] = s->own[0];
	h->map[1] = s->own[1];
	for (size_t i = 0; i < s->ninherited; i++)
		h->map[2 + i] = s->inherited[i];
}

_Static_assert(MA_STUB_HEADER + sizeof(struct ma_stub_header) <= MA_STUB_REGION, "stub header");

/*
 * Memory of ours the hold hands to the kernel, passed to it once before
 * the stop (ma_kernel_touch says why): the stack below a session's
 * frames, the state area's image, and a local mirror of the scratch data
 * (ma_session_local).  The two buffers live as long as memattach, so a
 * run that borrows many threads touches them once.
 */
#define TOUCHED_STACK (64UL << 10)
#define LOCAL_MIRROR_MAX (256UL << 10)

static unsigned char *area_image; /* ma_arch_state_area_size(MA_XSTATE_MAX) bytes, 64-aligned */
static unsigned char *local_mirror;
static size_t local_mirror_len;

static __attribute__((noinline)) void touch_stack_below(void)
{
	unsigned char below[TOUCHED_STACK];

	ma_kernel_touch(below, sizeof(below));
	__asm__ volatile("" : : "r"(below) : "memory"); /* kept, though never read here */
}

static int prepare_local_memory(size_t data_len)
{
	size_t mirror = data_len < LOCAL_MIRROR_MAX ? data_len : LOCAL_MIRROR_MAX;

	touch_stack_below();
	if (!area_image) {
		size_t len = (ma_arch_state_area_size(MA_XSTATE_MAX) + 63) & ~(size_t)63;

		if (!(area_image = aligned_alloc(64, len)))
			return ma_fail(MA_E_NOMEM, "out of memory");
		memset(area_image, 0, len);
		ma_kernel_touch(area_image, len);
	}
	if (mirror > local_mirror_len) {
		unsigned char *m = realloc(local_mirror, mirror);

		if (!m)
			return ma_fail(MA_E_NOMEM, "out of memory");
		local_mirror = m;
		memset(local_mirror + local_mirror_len, 0, mirror - local_mirror_len);
		ma_kernel_touch(local_mirror, mirror);
		local_mirror_len = mirror;
	}
	return 0;
}

static bool local_mirror_lent;

void *ma_session_local(const struct ma_session *s, size_t len)
{
	(void)s;
	if (local_mirror_lent || len > local_mirror_len)
		return NULL;
	local_mirror_lent = true;
	return local_mirror;
}

void ma_session_local_release(void *p)
{
	if (p && p == local_mirror)
		local_mirror_lent = false;
}

/* Write the state area and the stub: memory only this session uses; the thread is unchanged. */
static int write_stub(struct ma_session *s)
{
	unsigned char stub[MA_STUB_REGION], *area = area_image;
	struct ma_stub_header h;
	int rc;

	if (!area || s->area_len > ma_arch_state_area_size(MA_XSTATE_MAX))
		return ma_fail(MA_E_INTERNAL, "no state area image");
	ma_arch_build_area(area, s->area, &s->resume, &s->saved, s->sigmask, borrowed_mask());
	if ((rc = ma_mem_write(s->t->proc_pid, s->area, area, s->area_len)))
		return rc;
	ma_arch_build_stub(stub, s->stub, s->area, &s->resume, &s->saved,
			   &(struct ma_stub_opts){ s->stub_asks_signals, s->stub_sigreturns,
						   s->stub_reads_altstack });
	ma_arch_build_batch(stub + MA_STUB_BATCH);
	ma_arch_build_append_cb(stub + MA_STUB_APPEND, MA_APPEND_CB_MAX);
	s->batch_fn = s->stub + MA_STUB_BATCH;
	s->append_cb = s->stub + MA_STUB_APPEND;
	fill_header(s, &h);
	memcpy(stub + MA_STUB_HEADER, &h, sizeof(h));
	if ((rc = write_stub_site(s, 0, stub, sizeof(stub))))
		return rc;
	s->stub_written = true;
	return 0;
}

/* Record the mappings in the stub header, so a later run can find them. */
static int write_stub_header(struct ma_session *s)
{
	struct ma_stub_header h;

	fill_header(s, &h);
	return write_stub_site(s, MA_STUB_HEADER, &h, sizeof(h));
}

/*
 * An address for LEN bytes that no mapping of T uses, with a free page on
 * each side (so the kernel merges ours with nothing): in the largest gap
 * below 2^47, at an offset that differs per session and attempt.
 */
static uint64_t pick_address(const struct ma_session *s, size_t len, unsigned attempt)
{
	const struct ma_target *t = s->t;
	uint64_t best_lo = 0, best_len = 0, slot, span;

	for (size_t i = 0; i + 1 < t->nmaps; i++) {
		uint64_t lo = t->maps[i].end, hi = t->maps[i + 1].start;

		if (hi > lo && hi - lo > best_len && hi < (1ULL << 47)) {
			best_lo = lo;
			best_len = hi - lo;
		}
	}
	if (best_len < len + 4 * PAGE)
		return 0;
	/* Far from both ends (a brk heap grows up, mmaps come down), when the gap is large. */
	span = (best_len - len - 2 * PAGE) / PAGE;
	if (span > (4ULL << 20)) {
		best_lo += (span / 2) * PAGE;
		span = 1ULL << 20;
	}
	slot = ((s->id >> 12) + attempt * 0x9e3779b97f4a7c15ULL) % span;
	return best_lo + PAGE + slot * PAGE;
}

/* Record R as slot I of ours in the stub header. */
static int record_own(struct ma_session *s, int i, uint64_t addr, size_t len)
{
	s->own[i] = (struct ma_map_record){ addr, len, addr ? s->id : 0 };
	if (!addr)
		s->own[i].len = 0;
	return write_stub_header(s);
}

/*
 * A child another thread forks while the mapping exists must not inherit
 * it (a copy nobody would ever remove): MADV_DONTFORK.  Not under a
 * seccomp filter, which was asked about the syscalls we must issue only;
 * there the child of a fork in those milliseconds keeps a copy.
 */
static int keep_from_children(struct ma_session *s, uint64_t addr, size_t len)
{
	uint64_t args[3] = { addr, len, MADV_DONTFORK }, ret;

	return s->filtered ? 0 : ma_session_syscall(s, SYS_madvise, args, 3, &ret);
}

/*
 * mmap LEN bytes read+write for slot I: the address is chosen and written
 * into the stub header before the syscall, so a run killed at any instant
 * leaves a mapping the next run can find; then our magic goes in its
 * first bytes.
 */
static int map_recorded(struct ma_session *s, int i, size_t len, uint64_t *addr)
{
	int rc = 0;

	for (unsigned attempt = 0; attempt < 8; attempt++) {
		uint64_t want = pick_address(s, len, attempt), got;
		uint64_t args[6] = { want, len, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, (uint64_t)-1, 0 };
		uint64_t hdr[2] = { MA_MAGIC_MAP, s->id };

		if (!want)
			break;
		if ((rc = record_own(s, i, want, len)))
			return rc;
		if ((rc = ma_session_syscall(s, SYS_mmap, args, 6, &got)))
			return rc;
		if (got == (uint64_t)-EEXIST)
			continue; /* the target mapped there meanwhile */
		if (got > (uint64_t)-4096) {
			record_own(s, i, 0, 0);
			return ma_fail(MA_E_NOMEM, "mmap of %zu bytes in the target failed: %s", len,
				       strerror((int)-got));
		}
		if (got != want && (rc = record_own(s, i, got, len))) /* a kernel without NOREPLACE */
			return rc;
		*addr = got;
		if ((rc = keep_from_children(s, got, len)))
			return rc;
		return ma_mem_write(s->t->proc_pid, got, hdr, sizeof(hdr));
	}
	record_own(s, i, 0, 0);
	return rc ? rc : ma_fail(MA_E_NOMEM, "no free address range of %zu bytes in process %d", len,
				 s->t->pid);
}

static int unmap_recorded(struct ma_session *s, int i)
{
	uint64_t args[2] = { s->own[i].addr, s->own[i].len }, ret;
	int rc;

	if (!s->own[i].len)
		return 0;
	if ((rc = ma_session_syscall(s, SYS_munmap, args, 2, &ret)))
		return rc;
	return record_own(s, i, 0, 0); /* no longer ours: a later run must not unmap it */
}

/* The caller gets the bytes after our header: it must never overwrite the magic. */
int ma_session_map(struct ma_session *s, size_t len, uint64_t *addr)
{
	uint64_t base;
	int rc;

	if (s->own[1].len)
		return ma_fail(MA_E_INTERNAL, "one extra mapping at a time");
	rc = map_recorded(s, 1, (len + MA_MAP_HEADER + PAGE - 1) & ~(PAGE - 1), &base);
	if (!rc)
		*addr = base + MA_MAP_HEADER;
	return rc;
}

void ma_session_unmap(struct ma_session *s, uint64_t addr)
{
	if (s->own[1].len && s->own[1].addr + MA_MAP_HEADER == addr && !s->abandoned &&
	    unmap_recorded(s, 1))
		ma_err_clear();
}

/*
 * The scratch data and the calls' private stack: one read+write mapping
 * whose first page holds our header (the code lives in the stub region).
 */
static int map_scratch(struct ma_session *s, size_t data_size)
{
	size_t len = HEADER_PAGE + data_size + STACK_SIZE;
	uint64_t addr;
	int rc;

	if ((rc = map_recorded(s, 0, len, &addr)))
		return rc;
	s->mapped = true;
	s->data = addr + HEADER_PAGE;
	s->data_len = data_size;
	s->stack_top = addr + len;
	return 0;
}

/*
 * Small data and a short call need no mapping: they go on the thread's
 * own stack, below the state area (a stack the thread has room on, far
 * more than the call needs, see ON_STACK_ROOM).  Nothing to map, nothing
 * to remove, nothing a killed run leaves behind.
 */
static bool scratch_fits_on_stack(const struct ma_session *s, size_t data_size)
{
	uint64_t bottom = stack_bottom(s);

	return data_size <= ON_STACK_MAX && bottom && s->area > bottom &&
	       s->area - bottom > data_size + ON_STACK_ROOM;
}

static void scratch_on_stack(struct ma_session *s, size_t data_size)
{
	s->mapped = true;
	s->data = (s->area - data_size) & ~(uint64_t)63;
	s->data_len = data_size;
	s->stack_top = s->data - 64;
}

int ma_session_open(struct ma_session *s, struct ma_target *t, const struct ma_session_opts *o)
{
	size_t data = o->data_size ? o->data_size : DEFAULT_DATA;
	bool stale[MA_MAX_STUB_SITES];
	uint64_t addrs[2];
	bool busy_left, stale_found = false, on_stack;
	int rc;

	memset(s, 0, sizeof(*s));
	s->t = t;
	s->lock.fd = s->status_fd = s->mem_fd = -1;
	t->for_dlopen = o->for_dlopen;
	s->fresh_ok = o->fresh_ok;
	s->no_tid_option = o->no_tid_option;
	s->stop_eintr_wait = !o->strict || o->tid;
	s->named = o->tid;
	s->call_timeout_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : 5000;
	if (getrandom(&s->id, sizeof(s->id), 0) != sizeof(s->id))
		s->id = ma_now_ns() ^ (uint64_t)getpid() << 32;
	if ((rc = ma_arch_state_alloc(&s->saved)))
		return rc;
	ma_kernel_touch(s->saved.xstate, MA_XSTATE_MAX);
	if ((rc = prepare_local_memory(data))) {
		ma_arch_state_free(&s->saved);
		return rc;
	}
	if ((rc = ma_runlock_acquire(t->pid, o->deadline_ms, &s->lock_waited_ns, &s->lock))) {
		ma_arch_state_free(&s->saved);
		return rc;
	}
	/*
	 * The process may have exec'd since its maps were read: its files
	 * are checked now, before any stop; what the calls rely on (jemalloc's
	 * code, the stub site's bytes) is checked again in the hold, by
	 * content (ma_target_code_unchanged, scan_stub_sites).
	 */
	addrs[0] = t->je.mallctl;
	addrs[1] = t->stub_sites[0].addr;
	if ((rc = ma_target_maps_unchanged(t, addrs, 2)))
		goto fail;
	s->sites_had_stub = any_site_has_stub(s);
	open_mem_fd(s);
	if ((rc = choose_thread(s, o)))
		goto fail;
	if ((rc = ma_target_code_unchanged(t)))
		goto fail;
	if ((rc = scan_stub_sites(s, stale, &busy_left)))
		goto fail;
	for (size_t i = 0; i < t->nstub_sites; i++)
		stale_found |= stale[i];
	s->area_len = ma_arch_state_area_size(s->saved.xstate_len);
	s->area = ma_arch_state_area_addr(&s->saved.regs, s->saved.xstate_len);
	on_stack = o->data_size && scratch_fits_on_stack(s, data);
	if ((rc = check_seccomp(s, data + STACK_SIZE, on_stack)))
		goto fail;
	if ((rc = write_stub(s)))
		goto fail;
	/* A killed run's mappings go before ours come: its records never pile up. */
	remove_leftovers(s, stale);
	if (on_stack)
		scratch_on_stack(s, data);
	else if ((rc = map_scratch(s, data)))
		goto fail;
	if (stale_found && !busy_left)
		close_leftover_memfds(s); /* a killed heap-dump's memfd */
	return 0;
fail:
	if (rc == MA_E_TIMEOUT && s->seized && s->changed)
		s->abandoned = true; /* a syscall still runs: the stub restores */
	ma_session_close(s);
	return rc;
}

/*
 * A call failed (RC) with the thread somewhere inside it: a ptrace request
 * refused, a stop not seen.  It may hold a jemalloc lock there, so its
 * registers are not put back; it is let go to finish the call and restore
 * itself through the stub, as a memattach killed at that instant would.
 */
static int abandon_call(struct ma_session *s, int rc)
{
	char why[512];

	snprintf(why, sizeof(why), "%s", ma_errmsg());
	ma_err_clear();
	s->abandoned = true;
	return ma_fail(rc, "%s; the thread was left to finish the call and restore itself", why);
}

int ma_session_call_timeout(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
			    uint64_t *ret, int timeout_ms)
{
	struct user_regs_struct r = s->saved.regs;
	uint64_t retaddr = s->stub;
	int rc, cut_ms;

	if (!s->seized || !s->mapped || s->abandoned)
		return ma_fail(MA_E_INTERNAL, "no session");
	/* A call is never started that the run's --timeout leaves no time to wait for. */
	if ((cut_ms = ma_run_ms_left(timeout_ms)) == 0)
		return ma_fail(MA_E_TIMEOUT, "the run's --timeout ran out before the call");
	rc = ma_mem_write(s->t->proc_pid, (s->stack_top & ~15ULL) - 8, &retaddr, 8);
	if (rc)
		return rc;
	if (ma_test_env("FAULT") && *ma_test_env("FAULT"))
		fn = 16; /* tests only: a call that faults at once */
	ma_arch_setup_call(&r, fn, args, nargs, s->stack_top, retaddr);
	if ((rc = set_regs_blocked(s, &r)))
		return rc;
	s->ncalls++;
	s->at_marker = s->skipping_self_deadlock = false;
	test_kill_point("call");
	rc = run_until(s, GOAL_CALL, cut_ms, &r);
	if (!rc) {
		s->at_marker = true;
		test_kill_point("marker");
	}
	if (rc == MA_E_TIMEOUT) {
		/*
		 * The call is still running (waiting for a lock another thread
		 * holds?).  We cannot restore a thread in the middle of
		 * jemalloc; it finishes and restores itself through the stub.
		 */
		s->abandoned = true;
		if (s->job_stop_seen && ma_process_job_stopped(s->t->pid, s->tid))
			return stopped_under_call(s, "had not returned when the --timeout ran out");
		if (cut_ms < timeout_ms)
			return ma_fail(MA_E_TIMEOUT,
				       "the run's --timeout ran out during the call in thread %d; "
				       "the thread was left to finish it and restore itself", s->tid);
		return ma_fail(MA_E_TIMEOUT,
			       "the call in thread %d did not return within %d ms; the thread was "
			       "left to finish it and restore itself",
			       s->tid, timeout_ms);
	}
	if (rc == MA_E_FAULT)
		test_kill_point("fault");
	if (rc && rc != MA_E_FAULT && s->seized && !s->at_marker && !s->skipping_self_deadlock &&
	    !s->abandoned)
		return abandon_call(s, rc);
	if (rc)
		return rc;
	*ret = ma_arch_stub_retval(&r);
	return 0;
}

int ma_session_call_batch(struct ma_session *s, uint64_t table, size_t n, int timeout_ms)
{
	uint64_t args[2] = { table, n }, ret;

	return ma_session_call_timeout(s, s->batch_fn, args, 2, &ret,
				       timeout_ms > 0 ? timeout_ms : s->call_timeout_ms);
}

int ma_session_call(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
		    uint64_t *ret)
{
	return ma_session_call_timeout(s, fn, args, nargs, ret, s->call_timeout_ms);
}

uint64_t ma_session_alloc(struct ma_session *s, size_t n)
{
	uint64_t a = s->data + s->data_used;

	n = (n + 15) & ~(size_t)15;
	if (s->data_used + n > s->data_len)
		return 0;
	s->data_used += n;
	return a;
}

void ma_session_reset(struct ma_session *s)
{
	s->data_used = 0;
}

/* ---- giving the thread back ---- */

/*
 * Stop the running thread again so it can be detached.  Returns the signal
 * of a signal-delivery stop caught on the way (to pass on), or 0.
 */
static int stop_for_detach(struct ma_session *s)
{
	int status;

	struct ma_proc_status st;
	/*
	 * A thread in a ptrace stop already (a request failed right after it
	 * was taken) makes no new one: only a stop still to be collected is
	 * looked for, not waited for (that wait held a thread for 1 s).
	 */
	int wait_ms = ma_proc_read_status(s->t->pid, s->tid, &st) == 0 && st.state == 't' ? 0 : 1000;

	ma_err_clear();
	/* A syscall stop (SIGTRAP | 0x80) is no signal: PTRACE_DETACH refuses it (EIO). */
	if (ma_ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) == 0 &&
	    wait_stop(s->tid, &status, wait_ms) == 0 && is_signal_stop(status))
		return WSTOPSIG(status);
	return 0;
}

/* Is SI one of the placeholder signals we queued with tgkill? */
static bool is_our_copy(const siginfo_t *si)
{
	return si->si_code == SI_TKILL && si->si_pid == getpid();
}

/*
 * Deliver the held signals, oldest first, with their original siginfo.
 * We queue one placeholder (tgkill) per held signal to get the thread into
 * a signal-delivery stop, and at each stop deliver the oldest held signal
 * instead of the one dequeued.  A real signal that was pending meanwhile
 * is newer than everything held: it joins the back of the queue.
 */
static int redeliver_and_detach(struct ma_session *s)
{
	int next = 0;

	for (int i = 0; i < s->nheld; i++)
		syscall(SYS_tgkill, s->t->pid, s->tid, s->held[i].si_signo);
	if (ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_CONT", s->tid);
	while (next < s->nheld) {
		siginfo_t si;
		int status, sig;

		if (wait_stop(s->tid, &status, 1000) != 0 || !WIFSTOPPED(status))
			break;
		if ((status >> 16) != 0) {
			ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL);
			continue;
		}
		/*
		 * A signal is delivered now: give the thread its registers as
		 * stopped (syscall number and -ERESTART* or -EINTR intact), so
		 * the kernel decides, by the handler's SA_RESTART, whether the
		 * interrupted syscall restarts or fails with EINTR.
		 */
		if (next == 0)
			ma_arch_set_regs(s->tid, &s->saved.regs);
		memset(&si, 0, sizeof(si));
		ma_ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si);
		if (!is_our_copy(&si)) {
			int n = s->nheld;

			hold_signal(s);
			if (s->nheld == n)
				continue; /* merged or no memory: deliver it as it is */
		}
		ma_ptrace(PTRACE_SETSIGINFO, s->tid, NULL, &s->held[next]);
		sig = s->held[next++].si_signo;
		s->redelivered = next;
		if (next == s->nheld)
			return ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig) == 0
				       ? 0
				       : ptrace_errno("PTRACE_DETACH", s->tid);
		ma_ptrace(PTRACE_CONT, s->tid, NULL, (void *)(long)sig);
	}
	/* The thread did not come back in time: let it go; placeholders stay queued. */
	ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)stop_for_detach(s));
	return 0;
}

/* Put the file's bytes back where the stub was: no thread will run it again. */
static int restore_stub_site(struct ma_session *s)
{
	int rc;

	if (!s->stub_written)
		return 0;
	rc = write_stub_site(s, 0, ma_target_stub_site_original(s->t, s->site), MA_STUB_REGION);
	if (!rc)
		s->stub_written = false;
	return rc;
}

/*
 * A thread stopped in a syscall that the kernel restarts (-ERESTART*) gets
 * its registers exactly as stopped, and the kernel's own signal path does
 * the restart: we queue an interrupt (which makes the thread pass through
 * get_signal on its way out), let it reach that stop and detach there.  A
 * signal that arrived meanwhile is then handled by the kernel itself,
 * EINTR or restart by the handler's SA_RESTART, as if we had never been
 * there (the interrupt is queued by restore_and_detach).
 */
static int detach_through_signal_path(struct ma_session *s)
{
	int status, sig = 0;

	if (ma_arch_set_regs(s->tid, &s->saved.regs))
		return MA_E_INTERNAL;
	restore_stub_site(s);
	if (ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_CONT", s->tid);
	if (wait_stop(s->tid, &status, 1000) == 0 && WIFSTOPPED(status) && (status >> 16) == 0)
		sig = WSTOPSIG(status); /* a real signal: deliver it as the kernel would */
	if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig) != 0)
		return ptrace_errno("PTRACE_DETACH", s->tid);
	return 0;
}

/*
 * Signals that reached the thread while it was borrowed and wait, blocked
 * by us only: the kernel delivers them once the mask is back (counted as
 * re-delivered; a signal number pending several times counts once).
 */
static void count_deferred_signals(struct ma_session *s)
{
	/* The thread's own queue, peeked over ptrace (reading /proc's status costs ten times more). */
	struct {
		uint64_t off;
		uint32_t flags;
		int32_t nr;
	} args = { 0, 0, 64 };
	siginfo_t q[64];
	uint64_t pending = 0;
	long n;

	if (!s->mask_blocked)
		return;
	n = ma_ptrace(PTRACE_PEEKSIGINFO, s->tid, &args, q);
	for (long i = 0; i < n; i++)
		if (q[i].si_signo >= 1 && q[i].si_signo <= 64)
			pending |= 1ULL << (q[i].si_signo - 1);
	s->redelivered += __builtin_popcountll(pending & ~s->sigmask);
}

/*
 * The mask goes back before the registers leave the stub; in between the
 * registers are the trap's (as on the way in, set_regs_blocked), so a
 * memattach that dies there leaves a waiting signal to the kernel's own
 * signal code, acting on the syscall the thread was stopped in, instead
 * of to a handler run in the stub, after which the stub would restart
 * that syscall.
 */
static int unblock_through_trap(struct ma_session *s)
{
	int rc;

	if (s->trap_ok && s->stub_written && (rc = set_trap_regs(s)))
		return rc;
	return set_sigmask(s, s->sigmask);
}

/*
 * Is the thread where the stub's restore path begins, and may that path
 * give it back (rt_sigreturn: registers, xstate and mask in one step)?
 * Then letting it go is the whole way out: no trap, no window.  Not for
 * held signals (redelivered by memattach), a restart through
 * restart_syscall (whose block rt_sigreturn would discard), or a stub a
 * seccomp filter keeps from asking which signals wait (the kernel's own
 * signal path must then decide EINTR or restart).
 */
static bool stub_can_give_back(struct ma_session *s)
{
	struct __ptrace_syscall_info info;
	struct user_regs_struct r;

	if (!s->stub_sigreturns || !s->stub_asks_signals || !s->stub_written || s->nheld ||
	    !s->mask_blocked || ma_arch_stub_restore_pops(&s->saved, &s->resume) ||
	    ma_arch_get_regs(s->tid, &r) != 0 ||
	    ma_arch_ip(&r) != s->stub + MA_STUB_MARKER_END) {
		ma_err_clear();
		return false;
	}
	memset(&info, 0, sizeof(info));
	if (ma_ptrace(PTRACE_GET_SYSCALL_INFO, s->tid, (void *)sizeof(info), &info) <= 0)
		return false;
	/* At the marker's getpid (it runs, then the restore path), or after one of our syscalls. */
	return (info.op == PTRACE_SYSCALL_INFO_ENTRY && info.entry.nr == MA_STUB_MARKER_NR) ||
	       info.op == PTRACE_SYSCALL_INFO_EXIT;
}

/*
 * The thread left the stub once /proc shows it blocked with its ip
 * elsewhere (nothing jumps back into the stub); then its bytes go back.
 * A thread still running after a few ms leaves them to the next run,
 * which finds them by their header as it finds a killed run's.  The
 * thread is not held meanwhile.
 */
static void restore_stub_when_left(struct ma_session *s)
{
	bool left = false;

	for (int tries = 0; tries < 50 && !left; tries++) {
		uint64_t sp, pc;
		enum ma_thread_where w = ma_thread_where(s->t->pid, s->tid, &sp, &pc);

		if (w == MA_WHERE_GONE)
			return; /* gone (or the process exec'd): nothing to put back into */
		left = w != MA_WHERE_RUNNING && (pc < s->stub || pc >= s->stub + MA_STUB_REGION);
		if (!left)
			usleep(200);
	}
	if (left && restore_stub_site(s))
		ma_err_clear();
}

/*
 * Give the thread back: xstate, mask, registers, slack bytes, held
 * signals.  The xstate goes first, while the registers are the stub's;
 * the mask while the registers are the trap's (unblock_through_trap);
 * then the thread's own registers.  A syscall that our
 * stop made fail with EINTR is issued again, unless a signal now waits
 * for the thread: then the EINTR is that signal's due.
 */
static int restore_and_detach(struct ma_session *s)
{
	const struct user_regs_struct *regs = &s->resume;
	bool through_signal_path;
	int rc = 0;

	struct user_regs_struct r;

	count_deferred_signals(s);
	if (stub_can_give_back(s)) {
		s->at_marker = false;
		if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, NULL) != 0)
			return ptrace_errno("PTRACE_DETACH", s->tid);
		s->seized = s->mask_blocked = false;
		s->gave_back_by_stub = true;
		return 0;
	}
	/* At the marker's entry: let its getpid run rather than skip it (nr -1 meets seccomp). */
	if (s->at_marker && (rc = run_until(s, GOAL_SYSCALL_EXIT, s->call_timeout_ms, &r)))
		return rc;
	s->at_marker = false;
	/*
	 * What can go first goes first, while the registers are still the
	 * stub's and the signals blocked (the stub's restore path would put
	 * the xstate back too): only one request then separates the mask
	 * from the thread's own registers, the window in which a memattach
	 * killed leaves a signal's handler the trap's context.
	 */
	if (ma_arch_set_xstate(s->tid, &s->saved))
		return MA_E_INTERNAL;
	through_signal_path = !s->nheld && ma_arch_in_restartable_syscall(&s->saved.regs);
	/*
	 * The interrupt is queued before the registers are set: should
	 * memattach die after it, the pending wake-up still sends the thread
	 * through the kernel's restart code.
	 */
	if (through_signal_path && ma_ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_INTERRUPT", s->tid);
	if (s->mask_blocked && (rc = unblock_through_trap(s)))
		return rc;
	s->mask_blocked = false;
	if (through_signal_path) {
		rc = detach_through_signal_path(s);
	} else {
		if (ma_arch_interrupted_eintr(&s->saved.regs) &&
		    signal_pending_for(s->t->pid, s->tid, s->sigmask))
			regs = &s->saved.regs;
		if (ma_arch_set_regs(s->tid, regs))
			rc = MA_E_INTERNAL;
		restore_stub_site(s);
		if (s->nheld)
			redeliver_and_detach(s);
		else if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, NULL) != 0 && !rc)
			rc = ptrace_errno("PTRACE_DETACH", s->tid);
	}
	s->seized = false;
	return rc;
}

/*
 * Let an abandoned thread finish its call; the stub restores it (and its
 * mask).  Its mask goes back now so its signals are not held up meanwhile.
 */
static void let_go_abandoned(struct ma_session *s)
{
	int sig = stop_for_detach(s);

	if (s->mask_blocked)
		set_sigmask(s, s->sigmask);
	ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig);
	for (int i = 0; i < s->nheld; i++)
		syscall(SYS_tgkill, s->t->pid, s->tid, s->held[i].si_signo);
	s->seized = false;
}

int ma_session_close(struct ma_session *s)
{
	int rc = 0, rc2;

	if (s->seized && !s->abandoned && s->stub_written) {
		for (int i = 1; i >= 0; i--)
			if ((rc2 = unmap_recorded(s, i)) && !rc)
				rc = rc2;
		s->mapped = s->own[0].len != 0;
	}
	if (s->seized && s->abandoned) {
		let_go_abandoned(s); /* the stub and mappings stay: the thread still uses them */
	} else if (s->seized && s->changed) {
		rc2 = restore_and_detach(s);
		rc = rc ? rc : rc2;
	} else if (s->seized) {
		restore_stub_site(s);
		release_untouched(s, 0);
	}
	if (s->t_stop_ns)
		s->stopped_ns += ma_now_ns() - s->t_stop_ns;
	s->t_stop_ns = 0;
	ma_hold_priority_drop(); /* the hold is over */
	if (s->gave_back_by_stub)
		restore_stub_when_left(s); /* after the hold */
	close_fd(&s->status_fd);
	close_fd(&s->mem_fd);
	ma_arch_state_free(&s->saved);
	free(s->held);
	s->held = NULL;
	end_turn(&s->lock);
	return rc;
}

/* The verdict on a thread in a wait a stop ends with EINTR (NR), for a run with or without --strict. */
static void eintr_wait_why(pid_t tid, long nr, bool strict, char *why, size_t whylen)
{
	const char *name = ma_arch_syscall_name(nr) ? ma_arch_syscall_name(nr) : "a wait";

	if (strict)
		snprintf(why, whylen, "blocked in %s, which a stop ends with EINTR: with --strict "
			 "borrowed only if named (--tid %d)", name, tid);
	else
		snprintf(why, whylen, "blocked in %s, which a stop ends with EINTR: borrowed when no "
			 "better thread exists, its wait issued again at once; not stopped to be "
			 "looked at", name);
}

int ma_inspect_thread(struct ma_target *t, const struct ma_thread_info *ti, int lock_ms,
		      bool strict, struct ma_backtrace *bt, char *why, size_t whylen,
		      enum ma_verdict *v)
{
	struct ma_session s;
	int rc;

	struct ma_runlock lock;
	uint64_t waited;

	memset(&s, 0, sizeof(s));
	s.t = t;
	s.status_fd = s.mem_fd = -1;
	bt->n = 0;
	/* A look is a stop too: it takes its turn like any run. */
	if ((rc = ma_runlock_acquire(t->pid, lock_ms, &waited, &lock)))
		return rc;
	if ((rc = ma_arch_state_alloc(&s.saved))) {
		ma_runlock_release(&lock);
		return rc;
	}
	ma_unwind_prepare();
	reaper_timer(true);
	rc = try_thread(&s, ti, bt, why, whylen);
	reaper_timer(false);
	*v = rc == 0 ? MA_VERDICT_SAFE : MA_VERDICT_UNSAFE;
	if (rc == MA_E_NOSAFE && s.in_eintr_wait) {
		*v = strict ? MA_VERDICT_NAMED_ONLY : MA_VERDICT_EINTR_WAIT;
		eintr_wait_why(ti->tid, s.eintr_nr, strict, why, whylen);
	}
	if (rc == 0) { /* safe, but we only wanted to look */
		release_untouched(&s, 0);
	} else if (rc == MA_E_TIMEOUT && s.seized) {
		add_straggler(t->pid, ti->tid, ti->eintr_wait); /* let go (with its signal) when it stops */
	}
	ma_hold_priority_drop();
	close_fd(&s.status_fd);
	ma_arch_state_free(&s.saved);
	end_turn(&lock);
	if (rc == MA_E_NOSAFE || rc == MA_E_TIMEOUT || rc == MA_E_STOPPED)
		rc = 0;
	return rc;
}
