/*
 * session_stops.c - waiting for ptrace stops: the process-wide signal guards,
 * the threads interrupted that have not stopped yet (stragglers), the run
 * lock's turn, and the stop waits every other part uses.
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
#include "session_int.h"

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

void stops_reaper_timer(bool on)
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
void stops_test_kill_point(const char *where)
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


/*
 * TID of PID was interrupted but did not stop in time: let go of it when it
 * does.  EINTR_WAIT: it was in a wait our stop ends with EINTR (or we
 * cannot tell), which only its let-go at the stop issues again.
 */
void stops_add_straggler(pid_t pid, pid_t tid, bool eintr_wait)
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
			thread_release_regs_eintr(straggler_pid, stragglers[i]);
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
void stops_end_turn(struct ma_runlock *lock)
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
bool stops_is_signal_stop(int status)
{
	return WIFSTOPPED(status) && (status >> 16) == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80);
}

/* Wait for TID to stop or die, and collect the report. */
int stops_wait(pid_t tid, int *status, int timeout_ms)
{
	return await_stop(tid, status, timeout_ms, true);
}

/* Wait for TID to stop or die, leaving the stop unreported (collect it with stops_wait). */
int stops_peek(pid_t tid, int *status, int timeout_ms)
{
	return await_stop(tid, status, timeout_ms, false);
}

int stops_ptrace_errno(const char *what, pid_t tid)
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
