/*
 * session_nice.c - the held thread's priority for the hold.
 *
 * On a busy machine a held thread, each time memattach resumes it (a
 * making stops it at every syscall), waits for a CPU behind the runnable
 * threads of its program: under churn, most of a hold was that queue
 * (tests/bench/frag_hold.sh).  So while it runs memattach's calls the
 * thread gets the highest nice value, and its own comes back before it
 * runs its own code again: put back by memattach before it lets go, and
 * by the stub's first instructions on every way out of it (the block
 * ma_arch_build_stub arms with the saved value), so a memattach killed at
 * any instant leaves the thread as it was.  A clone the calls make runs
 * at the thread's own nice, which the new thread inherits.
 *
 * Before that, from its seize to its stop, the thread must get a CPU to
 * come to the stop; its nice is raised for that wait too, with no stub
 * yet: the keeper (nicekeeper.h) puts it back should memattach die
 * there, and memattach does when the thread is let go untouched, or once
 * it knows the stub cannot (a seccomp filter).
 *
 * Not raised: a thread under a seccomp filter (the stub's setpriority
 * was not judged), a real-time or idle thread (nice does not order
 * them), memattach's own thread in the target (it does memattach's work,
 * not the program's), a run that may not lower nice values (not root).
 */
#include <errno.h>
#include <sched.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nicekeeper.h"
#include "remote.h"
#include "target.h"
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

/* Tests only: MEMATTACH_TEST_HOLD_NICE=0, the hold as before; =stub, raised from the stub on only. */
static bool test_says(const char *what)
{
	const char *test = ma_test_env("HOLD_NICE");

	return test && strcmp(test, what) == 0;
}

static bool nice_wanted(const struct ma_session *s)
{
	return !test_says("0") && !s->strict && !s->own_tp && geteuid() == 0;
}

void nice_before_seize(struct ma_session *s, pid_t tid)
{
	int nice;

	s->nice_before = -1;
	s->start_ticks_before = -1;
	if (nice_wanted(s) && ma_nice_keeper_ready() && thread_nice(tid, &nice) && nice > MA_HOLD_NICE &&
	    (s->start_ticks_before = ma_process_start_ticks(tid)) >= 0 && !test_says("stub"))
		s->nice_before = nice;
}

/*
 * The value put back is read just before the raise (a change the program
 * made after it would be lost): microseconds apart, not the whole choice.
 */
void nice_raise_before_stop(struct ma_session *s)
{
	int nice;

	if (s->nice_before < 0 || s->nice_raised || !thread_nice(s->tid, &nice) || nice <= MA_HOLD_NICE ||
	    !ma_nice_keeper_arm(s->t->pid, s->tid, s->start_ticks_before, nice, MA_HOLD_NICE))
		return;
	s->nice_kept = true;
	s->nice_saved = nice;
	if (setpriority(PRIO_PROCESS, (id_t)s->tid, MA_HOLD_NICE) == 0)
		s->nice_raised = true;
	else
		nice_restore(s);
}

void nice_plan(struct ma_session *s)
{
	int nice;

	if (s->nice_raised) {
		/* Raised before the stop: the stub takes over, or memattach puts it back now. */
		s->nice_planned = nice_wanted(s) && !s->filtered;
		if (!s->nice_planned)
			nice_restore(s);
		return;
	}
	s->nice_planned = nice_wanted(s) && !s->filtered && thread_nice(s->tid, &nice) && nice > MA_HOLD_NICE;
	s->nice_saved = s->nice_planned ? nice : 0;
}

/* Once the thread's registers are in the stub (whose block puts the nice back). */
void nice_raise(struct ma_session *s)
{
	int nice;

	/* The stub holds the value it puts back: a change since it was read, and no raise. */
	if (!s->nice_planned || s->nice_raised || !thread_nice(s->tid, &nice) || nice != s->nice_saved)
		return;
	/* The keeper too, when there is one: its rule also undoes a change the raise let through. */
	if (!s->nice_kept && s->start_ticks_before >= 0 &&
	    ma_nice_keeper_arm(s->t->pid, s->tid, s->start_ticks_before, s->nice_saved, MA_HOLD_NICE))
		s->nice_kept = true;
	if (setpriority(PRIO_PROCESS, (id_t)s->tid, MA_HOLD_NICE) == 0)
		s->nice_raised = true;
}

void nice_restore(struct ma_session *s)
{
	/* An exec in the hold made TID another program's: its nice is that program's. */
	if (s->nice_raised && !s->exec_seen)
		ma_nice_put_back(s->t->pid, s->tid, s->nice_saved, MA_HOLD_NICE);
	s->nice_raised = false;
	if (s->nice_kept) {
		ma_nice_keeper_disarm();
		s->nice_kept = false;
	}
}

static bool makes_a_task(long nr)
{
	return nr == SYS_clone || nr == SYS_clone3 || nr == SYS_fork || nr == SYS_vfork;
}

/*
 * At each syscall stop of a call: a clone's entry puts the thread's own
 * nice back (the new thread inherits it), the next stop raises it again.
 * A memattach killed between the stop and the drop leaves the new thread
 * the raised nice (memattach's own thread: it sleeps out its time).
 */
void nice_at_syscall_stop(struct ma_session *s, bool entry, long nr)
{
	if (s->nice_dropped_for_clone) {
		s->nice_dropped_for_clone = false;
		nice_raise(s);
	}
	if (entry && s->nice_raised && makes_a_task(nr)) {
		nice_restore(s);
		s->nice_dropped_for_clone = !s->nice_raised;
	}
}
