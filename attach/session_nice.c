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
 * Not raised: a thread under a seccomp filter (the stub's setpriority
 * was not judged), a real-time or idle thread (nice does not order
 * them), memattach's own thread in the target (it does memattach's work,
 * not the program's), a run that may not lower nice values (not root).
 */
#include <errno.h>
#include <sched.h>
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

static bool nice_wanted(const struct ma_session *s)
{
	const char *test = ma_test_env("HOLD_NICE"); /* tests only: 0, the hold as before */

	return !(test && *test == '0') && !s->filtered && !s->own_tp && geteuid() == 0;
}

void nice_plan(struct ma_session *s)
{
	int nice;

	s->nice_planned = nice_wanted(s) && thread_nice(s->tid, &nice) && nice > MA_HOLD_NICE;
	s->nice_saved = s->nice_planned ? nice : 0;
}

/* Once the thread's registers are in the stub (whose block puts the nice back). */
void nice_raise(struct ma_session *s)
{
	if (s->nice_planned && !s->nice_raised &&
	    setpriority(PRIO_PROCESS, (id_t)s->tid, MA_HOLD_NICE) == 0)
		s->nice_raised = true;
}

void nice_restore(struct ma_session *s)
{
	if (s->nice_raised && setpriority(PRIO_PROCESS, (id_t)s->tid, s->nice_saved) == 0)
		s->nice_raised = false;
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
