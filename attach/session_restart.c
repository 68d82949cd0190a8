/*
 * session_restart.c - a stop and the kernel's restart_syscall: a thread
 * stopped in a timed wait goes on through it, which a seccomp allow-list
 * of the program's own syscalls may refuse and kill the process for.
 * Which threads may be stopped at all (before the stop), what the filter
 * answers (learned once per seccomp state), and the wait set to be issued
 * again where it refuses (first thing in the hold).
 */
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include "arch.h"
#include "ma_error.h"
#include "remote.h"
#include "seccomp.h"
#include "target.h"
#include "session_int.h"

/* Did the thread enter its syscall through the 64-bit `syscall` instruction (the numbers are for)? */
bool thread_syscall_insn_at(pid_t pid, const struct user_regs_struct *r)
{
	unsigned char insn[MA_SYSCALL_INSN_LEN];

	if (ma_mem_read(pid, ma_arch_ip(r) - MA_SYSCALL_INSN_LEN, insn, sizeof(insn)) != 0) {
		ma_err_clear();
		return false;
	}
	return ma_arch_is_syscall_insn(insn);
}

/*
 * Is STATE (ma_seccomp_state) a filter's (strict mode or filters: mode 1
 * or 2, so 65536 and up), not yet shown to allow restart_syscall?
 */
static bool restart_unknown(const struct ma_session *s, long state)
{
	return state >= 65536 && state != s->t->restart_ok_state;
}

/*
 * Would TID's filter (TID stopped) let it make restart_syscall at IP with
 * ARGS (the stop's)?  Not judged (no filter can be read): no.
 */
static bool restart_allowed(struct ma_session *s, pid_t tid, uint64_t ip, const uint64_t *args)
{
	struct ma_sc_query q;

	memset(&q, 0, sizeof(q));
	q.nr = SYS_restart_syscall;
	if (args)
		memcpy(q.args, args, sizeof(q.args));
	q.ip = ip;
	q.what = "restart_syscall (a timed wait going on after a stop)";
	if (ma_seccomp_check(s->t->pid, tid, &q, 1) == 0)
		return true;
	ma_err_clear();
	return false;
}

/*
 * With --strict, no thread asleep in a timed wait is stopped, filtered or
 * not: a filter the program installs (TSYNC) while memattach works, or the
 * moment a thread shows a tracer, can lack restart_syscall, and no check
 * made before the thread's release can see one that arrives after it.
 * Without --strict:
 * a thread under a seccomp filter: a stop of one asleep in a timed wait
 * (ma_thread_restart_block_wait) goes on through restart_syscall, and a
 * filter without it (an allow-list of the program's own syscalls) kills
 * the process should memattach die before it has set the wait to be
 * issued again (thread_keep_restart_allowed) -- a window that opens at the
 * interrupt, before the stop.  A thread running or ready to run may enter
 * such a wait before the interrupt reaches it.  So until a stopped thread
 * has shown the filter to allow restart_syscall (learn_restart_allowed),
 * only a thread asleep in another syscall is stopped: it goes on by
 * issuing that syscall again, which the filter let it make.
 */
bool thread_refused_for_restart(struct ma_session *s, pid_t tid, char *why, size_t whylen)
{
	long nr, state = ma_seccomp_state(s->t->pid, tid);
	const char *wait;

	if (state >= 65536 && state != s->t->notify_free_state && ma_thread_syscall_nr(s->t->pid, tid) < 0) {
		snprintf(why, whylen, "running under a seccomp filter not known to have no supervisor "
			 "(user notification): it could enter a wait for its answer before its stop, "
			 "which would withdraw the request; not stopped");
		return true;
	}
	if (!s->strict && !restart_unknown(s, state))
		return false;
	if ((wait = ma_thread_restart_block_wait(s->t->pid, tid, &nr)) && s->strict)
		snprintf(why, whylen, "asleep in %s, which goes on after a stop through the kernel's "
			 "restart_syscall, and a seccomp filter the program installed meanwhile could "
			 "refuse that (killing it): not stopped with --strict",
			 wait);
	else if (s->strict)
		return false; /* a running thread: --strict refuses it anyway (refused_for_transfer) */
	else if (wait)
		snprintf(why, whylen, "asleep in %s under a seccomp filter not known to allow "
			 "restart_syscall, which that wait goes on with after a stop: not stopped",
			 wait);
	else if (nr < 0)
		snprintf(why, whylen, "running under a seccomp filter not known to allow "
			 "restart_syscall: a timed wait it entered before its stop would go on with "
			 "it after; not stopped");
	else
		return false;
	return true;
}

/*
 * A thread stopped in a timed sleep or wait (nanosleep, clock_nanosleep,
 * poll, a futex wait with a timeout) goes on after any stop through the
 * kernel's restart_syscall, whoever lets it go: memattach, or the kernel
 * should memattach die.  A seccomp filter that lacks restart_syscall (an
 * allow-list of the program's own syscalls) kills the process there.  So,
 * first thing in the hold, under such a filter, the syscall is set to be
 * issued again as the program made it: one register write, after which
 * any release is safe.  The cost: its timeout counts again from the start.
 */
bool thread_restart_refused(struct ma_session *s, pid_t tid, const struct user_regs_struct *r)
{
	struct __ptrace_syscall_info info;

	if (ma_arch_restart_block_nr(r) < 0 || !thread_syscall_insn_at(s->t->proc_pid, r))
		return false;
	ma_arch_syscall_info(r, &info); /* the restart's arguments and ip are the stop's */
	return !restart_allowed(s, tid, info.instruction_pointer, info.entry.args);
}

/*
 * Does the filter of TID (stopped, filtered) allow restart_syscall?  Asked
 * once per seccomp state, remembered in the target (thread_refused_for_restart).
 * The state is read first: a filter added meanwhile is in what is judged,
 * and a judgement of more filters holds for fewer.
 */
static void learn_restart_allowed(struct ma_session *s, const struct user_regs_struct *r)
{
	long state = session_seccomp_state(s);

	if (restart_unknown(s, state) && restart_allowed(s, s->tid, ma_arch_ip(r), NULL))
		s->t->restart_ok_state = state;
	if (state >= 65536 && state != s->t->notify_free_state && ma_seccomp_may_notify(s->t->pid, s->tid) == 0)
		s->t->notify_free_state = state;
}

/*
 * Right before a thread is let go as stopped (a candidate refused): a
 * filter installed with TSYNC by another thread since its stop is judged
 * now, and a timed wait it would refuse to restart is issued again.  Only
 * a filtered thread with a restart pending pays for it (a status read,
 * the filter's).  Left: a filter arriving after this, before the detach.
 */
void thread_restart_as_filter_now_allows(struct ma_session *s)
{
	struct user_regs_struct r;

	if (!s->seized || !restart_unknown(s, session_seccomp_state(s)))
		return;
	if (ma_arch_get_regs(s->tid, &r) != 0) {
		ma_err_clear();
		return;
	}
	if (ma_arch_restart_block_nr(&r) < 0 || !thread_restart_refused(s, s->tid, &r))
		return;
	ma_arch_restart_as_issued(&r);
	if (ma_arch_set_regs(s->tid, &r))
		ma_err_clear();
}

int thread_keep_restart_allowed(struct ma_session *s, pid_t tid)
{
	struct user_regs_struct r;
	int rc;

	if (!ma_session_filtered(s) && !s->strict)
		return 0;
	if ((rc = ma_arch_get_regs(tid, &r)))
		return rc;
	/*
	 * --strict stops no thread asleep in a timed wait, but one can enter
	 * such a wait between its last look and the interrupt: it is issued
	 * again as made, so no filter that arrives later (TSYNC, from the
	 * program) meets a restart_syscall.  Its timeout counts again.
	 */
	if (s->strict && ma_arch_restart_block_nr(&r) >= 0 && thread_syscall_insn_at(s->t->proc_pid, &r)) {
		ma_arch_restart_as_issued(&r);
		return ma_arch_set_regs(tid, &r);
	}
	if (!ma_session_filtered(s))
		return 0;
	learn_restart_allowed(s, &r);
	if (!thread_restart_refused(s, tid, &r))
		return 0;
	ma_arch_restart_as_issued(&r);
	return ma_arch_set_regs(tid, &r);
}
