/*
 * session_nice.c - the held thread's priority for the hold.
 *
 * On a busy machine a held thread, each time memattach resumes it (a
 * making stops it at every syscall), waits for a CPU behind the runnable
 * threads of its program: under churn, most of a hold was that queue
 * (tests/bench/frag_hold.sh).  So while it runs memattach's code the
 * thread has the highest nice value, and its own comes back before it
 * runs its own code again: put back by memattach before it lets go, and
 * by the stub's first instructions on every way out of it (the block
 * ma_arch_build_stub arms with the saved value), so a memattach killed at
 * any instant leaves the thread as it was.  Raised only once its
 * registers are in the stub: a thread raised before its stop would run
 * its own code at -20 until it stops, and a thread it created then would
 * keep -20 (an outside attack: 12 of 100 runs).  A clone the calls make
 * runs at the thread's own nice, which the new thread inherits.
 *
 * Put back only if the thread still has -20, or a value below its own
 * that its program could not set itself (its own setpriority succeeded
 * only because the thread stood at -20): a change the program or its
 * owner made meanwhile is kept.
 *
 * Not raised: a thread under a seccomp filter (the stub's syscalls were
 * not judged for it), a real-time or idle thread (nice does not order
 * them), memattach's own thread in the target (it does memattach's work,
 * not the program's), a run that may not lower nice values (not root),
 * --strict.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "remote.h"
#include "testhooks.h"
#include "session_int.h"

/* The thread's nice value, if nice orders it (SCHED_OTHER or SCHED_BATCH). */
static bool thread_nice(pid_t tid, int *nice)
{
	int policy = sched_getscheduler(tid);

	if (policy != SCHED_OTHER && policy != SCHED_BATCH)
		return false;
	errno = 0;
	*nice = getpriority(PRIO_PROCESS, (id_t)tid);
	return errno == 0;
}

/* Does process PID hold CAP_SYS_NICE in its effective set (its status file's CapEff)? */
static bool may_renice_any(pid_t pid)
{
	char path[64], line[256];
	unsigned long long eff = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if (!(f = fopen(path, "re")))
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "CapEff: %llx", &eff) == 1;
	fclose(f);
	return found && (eff >> 23 & 1); /* CAP_SYS_NICE */
}

/* Could process PID set one of its threads to nice NICE, below the thread's own? */
static bool program_may_lower_to(pid_t pid, int nice)
{
	struct rlimit rl;

	if (prlimit(pid, RLIMIT_NICE, NULL, &rl) == 0 &&
	    (rl.rlim_cur == RLIM_INFINITY || 20 - (long long)rl.rlim_cur <= nice))
		return true;
	return may_renice_any(pid);
}

/* Tests only: MEMATTACH_TEST_HOLD_NICE=0, the hold as before. */
static bool nice_wanted(const struct ma_session *s)
{
	const char *test = ma_test_env("HOLD_NICE");

	return !(test && strcmp(test, "0") == 0) && !s->strict && !s->own_tp && geteuid() == 0;
}

void nice_plan(struct ma_session *s)
{
	int nice;

	s->nice_planned = nice_wanted(s) && !s->filtered && thread_nice(s->tid, &nice) && nice > MA_HOLD_NICE;
	s->nice_saved = s->nice_planned ? nice : 0;
}

/*
 * Once the thread's registers are in the stub (whose block puts the nice
 * back).  The stub holds the value read when it was built: changed since,
 * no raise.
 */
void nice_raise(struct ma_session *s)
{
	int nice;

	if (s->nice_planned && !s->nice_raised && thread_nice(s->tid, &nice) && nice == s->nice_saved &&
	    setpriority(PRIO_PROCESS, (id_t)s->tid, MA_HOLD_NICE) == 0)
		s->nice_raised = true;
}

void nice_restore(struct ma_session *s)
{
	int now;

	/* An exec in the hold made TID another program's: its nice is that program's. */
	if (!s->nice_raised || s->exec_seen) {
		s->nice_raised = false;
		return;
	}
	s->nice_raised = false;
	errno = 0;
	now = getpriority(PRIO_PROCESS, (id_t)s->tid);
	if (errno)
		return;
	if (now == MA_HOLD_NICE || (now < s->nice_saved && !program_may_lower_to(s->t->pid, now)))
		setpriority(PRIO_PROCESS, (id_t)s->tid, s->nice_saved);
}

static bool makes_a_task(long nr)
{
	return nr == SYS_clone || nr == SYS_clone3 || nr == SYS_fork || nr == SYS_vfork;
}

/*
 * At each syscall stop of a call: a clone's entry puts the thread's own
 * nice back (the new thread inherits it), the next stop raises it again.
 * A memattach killed between the stop and the drop, or during a call
 * before its clone, leaves the new thread the raised nice.
 */
void nice_at_syscall_stop(struct ma_session *s, bool entry, long nr)
{
	if (s->nice_dropped_for_clone) {
		s->nice_dropped_for_clone = false;
		nice_raise(s);
	}
	if (entry && s->nice_raised && makes_a_task(nr)) {
		nice_restore(s);
		s->nice_dropped_for_clone = true;
	}
}
