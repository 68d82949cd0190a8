/*
 * session_thread.c - judging one thread for the borrowing (stopped for a
 * moment, or not at all; session_choose.c holds the rounds over all of
 * them), and ma_inspect_thread for `memattach threads`.
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

/* Unblocked signals wait for the thread: an EINTR it got is their due. */
bool thread_signal_pending(pid_t pid, pid_t tid, uint64_t blocked)
{
	struct ma_proc_status st;

	if (ma_proc_read_status(pid, tid, &st) != 0) {
		ma_err_clear();
		return true;
	}
	return ((st.sig_pending | st.sig_shared_pending) & ~blocked) != 0;
}

/*
 * Does a synchronous signal (a trap or fault: SIGTRAP of a single step it
 * took, say) wait for the thread itself?  Delivered during a call, it
 * would be taken for the call's fault and never reach the program.
 * Unknown counts as yes.
 */
static bool fault_signal_waits(pid_t pid, pid_t tid)
{
	struct ma_proc_status st;

	if (ma_proc_read_status(pid, tid, &st) != 0) {
		ma_err_clear();
		return true;
	}
	return (st.sig_pending & run_fault_signals()) != 0;
}

/*
 * May the EINTR our stop caused be undone by issuing the syscall again?
 * Only if no real signal waits (then the EINTR is its due) and the thread
 * entered through the 64-bit `syscall` instruction.
 */
static bool may_reissue(pid_t pid, pid_t tid, const struct user_regs_struct *r, uint64_t blocked)
{
	/* Memory through the thread: the main thread may have exited. */
	return thread_syscall_insn_at(tid, r) && !thread_signal_pending(pid, tid, blocked);
}

static uint64_t read_sigmask(pid_t tid)
{
	uint64_t m = 0;

	ma_ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(m), &m);
	return m;
}

/* For a straggler: issue an EINTR-failed syscall again before letting go. */
void thread_release_regs_eintr(pid_t pid, pid_t tid)
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

/* Let a thread we only looked at go (its EINTR re-issue is already set). */
void thread_release_untouched(struct ma_session *s, int sig)
{
	if (!sig)
		thread_restart_as_filter_now_allows(s);
	ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig);
	s->seized = false;
	ma_hold_priority_drop();
}

/*
 * Does the thread's descriptor (at its thread pointer TP: glibc's struct
 * pthread, musl's too) name one of the addresses LOW or HIGH, its stack
 * block's start as glibc (stackblock) and musl (map_base) record it?  The
 * thread library allocated that block: its guard page (LOW) at the start,
 * or the stack itself (HIGH) when a program's stack begins where its
 * mapping does.  A thread whose block is not where its mapping starts
 * names neither: read in the hold, a few KiB, the same thread's memory.
 */
static bool descriptor_names_block_start(const struct ma_session *s, uint64_t tp, uint64_t low,
					 uint64_t high)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, tp);
	uint64_t words[512];
	size_t len;

	if (!m || tp % sizeof(uint64_t))
		return false;
	len = m->end - tp < sizeof(words) ? (size_t)(m->end - tp) : sizeof(words);
	if (ma_mem_read(s->tid, tp, words, len) != 0) {
		ma_err_clear();
		return false;
	}
	for (size_t i = 0; i < len / sizeof(uint64_t); i++)
		if (words[i] == low || words[i] == high)
			return true;
	return false;
}

/*
 * The lowest address of the borrowed thread's stack, or 0 when it cannot
 * be known.  The main thread's is its [stack] mapping's start.  A
 * pthread's stack is known when the thread library allocated it: a
 * mapping of its own with the guard page (no access) right below, which
 * its descriptor names as its block's start.
 * - A stack the program supplied (pthread_attr_setstack) may be carved
 *   out of a larger mapping whose lower part is the program's own data,
 *   which memattach's state below the stack pointer would overwrite (an
 *   outside attack: 1,728 bytes below a thread stack with 1,200 free).
 * - A stack created without a guard page (guard size 0) merges, in the
 *   kernel's list, with the anonymous mapping below it -- another
 *   thread's stack, a buffer -- whose guard page then seems to be its
 *   own: a call wrote into the other thread's live stack (an outside
 *   attack: 2,880-6,372 bytes of it).  Its descriptor names its own
 *   block's start, not that guard: refused.
 */
uint64_t thread_stack_bottom(const struct ma_session *s)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, ma_arch_stack_pointer(&s->saved.regs) - 1);
	const struct ma_mapping *below;

	if (!m)
		return 0;
	if (m->path && strcmp(m->path, "[stack]") == 0)
		return m->start;
	below = m->start ? ma_target_mapping_at(s->t, m->start - 1) : NULL;
	if (!below || below->end != m->start || memcmp(below->perms, "---", 3) != 0)
		return 0;
	if (!descriptor_names_block_start(s, ma_arch_thread_pointer(&s->saved.regs), below->start,
					  m->start))
		return 0;
	return m->start;
}

/*
 * Is there room for a call below the stack pointer?  When not, *NEVER says
 * whether the whole stack mapping is smaller than that (waiting cannot help).
 */
static bool stack_has_room(const struct ma_session *s, bool *never)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, ma_arch_stack_pointer(&s->saved.regs) - 1);
	uint64_t need = STACK_ROOM + ma_arch_state_area_size(s->saved.xstate_len);
	uint64_t bottom = thread_stack_bottom(s);

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


/*
 * Does the held thread own the thread descriptor its thread pointer
 * points at?  A thread made by a raw clone() may run on another thread's
 * pointer (CLONE_SETTLS with it, or none: inherited): a call in it would
 * work on that other thread's allocator state while that thread runs (a
 * tcache flush there crashed or froze an outside attack's target in
 * every run).  glibc says, for libthread_db, where its descriptor keeps
 * the tid; where it does not (musl, a stripped static glibc), not checked.
 * WHY gets the reason when not.
 */
static bool owns_thread_pointer(struct ma_session *s, pid_t tid, char *why, size_t whylen)
{
	struct ma_target *t = s->t;
	uint64_t tp = ma_arch_thread_pointer(&s->saved.regs);
	uint32_t owner;

	if (ma_target_tid_offset(t) <= 0)
		return true;
	if (ma_mem_read(tid, tp + (uint64_t)t->pthread_tid_off, &owner, sizeof(owner)) != 0) {
		ma_err_clear();
		snprintf(why, whylen, "its thread pointer (0x%" PRIx64 ") points at no readable thread "
			 "descriptor (a raw clone without one): a call there cannot find its "
			 "allocator state", tp);
		return false;
	}
	if ((pid_t)owner == tid)
		return true;
	snprintf(why, whylen, "runs on another thread's thread pointer (made by a raw clone): a "
		 "call would use that thread's allocator state while it runs");
	return false;
}

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

	leftover_read_site_headers(s, hs);
	for (size_t i = 0; i < s->t->nstub_sites; i++)
		if (hs[i].magic == MA_MAGIC_STUB &&
		    leftover_runs_in(&hs[i], s->t->stub_sites[i].addr, ma_arch_ip(&s->saved.regs),
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

static struct thread_verdict verdict_of(int rc)
{
	return (struct thread_verdict){ .rc = rc };
}

static struct thread_verdict refused_for_good(void)
{
	return (struct thread_verdict){ .rc = MA_E_NOSAFE, .hopeless = true };
}

/*
 * --strict: would stopping TI let loose a signal the program ignores?  The
 * kernel drops such a signal (SIGCHLD, SIGURG... by default) when it is
 * sent, unless the thread it is sent to is traced: then it is queued, and
 * the kernel wakes another thread that does not block it -- one blocked in
 * epoll_wait or sigtimedwait returns EINTR.  A signal sent to the process
 * goes to its main thread, a child's SIGCHLD to the thread that forked it:
 * neither is stopped while another thread leaves such a signal unblocked.
 * S->chld_watch: TI has no child now, but a child's SIGCHLD would be let
 * loose (thread_try looks again once it is stopped: then it cannot fork).
 */
static bool frees_ignored_signal(struct ma_session *s, const struct ma_thread_info *ti, char *why,
				 size_t whylen)
{
	uint64_t ignored = ma_signals_ignored(s->t->pid);
	uint64_t freed = ma_signals_a_stop_frees(s->t->pid, ti->tid, ignored);
	bool main_thread = ti->tid == s->t->pid;
	pid_t other;
	int sig = 0;

	/* No child now, but one's SIGCHLD would be let loose: looked at again in the hold. */
	s->chld_watch = !freed && !main_thread && (ignored & MA_SIG_BIT(SIGCHLD));
	if (!(other = ma_thread_unblocking(s->t->pid, ti->tid, freed, &sig)))
		return false;
	snprintf(why, whylen, "%s: stopped, a SIG%s the program ignores would reach another thread "
		 "(%d) and end a wait such as sigtimedwait with EINTR; not stopped with --strict",
		 main_thread ? "is the main thread, where signals to the process go"
			     : "has child processes (SIGCHLD goes to it)",
		 sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", other);
	return true;
}

/*
 * Is the thread, as read last (TI), in a wait this run may not stop?
 * Without leave to stop waits a stop ends with EINTR (--strict, not
 * named), any such wait; with it, one whose timeout could not be given
 * back (timed_wait_unresumable).  Else *BEGAN and *NVCSW: when the wait
 * began, for the time that remained.  FRESH: TI was just read (not the
 * listing's).  Judged again whenever a look finds
 * the thread somewhere new, up to the last one before the stop: a thread
 * seen running may have entered a wait since.
 */
static bool refused_in_wait(struct ma_session *s, const struct ma_thread_info *ti, bool fresh,
			    uint64_t *began, uint64_t *nvcsw, struct thread_verdict *v, char *why,
			    size_t whylen)
{
	struct ma_thread_info w;

	*began = *nvcsw = 0;
	if (s->stop_eintr_wait) {
		if (timed_wait_unresumable(s->t, ti, why, whylen)) {
			*v = refused_for_good();
			return true;
		}
		*began = ti->wait_began_ns;
		*nvcsw = ti->nvcsw;
		return false;
	}
	/* FRESH: TI was just read; only the listing's reading is worth reading again. */
	if ((fresh && !ma_thread_stop_ends_with_eintr(ti)) || !in_eintr_wait(s, ti, &w, why, whylen))
		return false;
	/* Not even named: say so rather than what --tid would do. */
	if (timed_wait_unresumable(s->t, &w, why, whylen)) {
		*v = refused_for_good();
		return true;
	}
	/* A choice among threads tries again later (it may have left the
	 * wait); one thread asked for (a flush visit) is given up at once. */
	*v = (struct thread_verdict){ .rc = MA_E_NOSAFE, .hopeless = s->named != 0,
				   .eintr_wait = true, .eintr_nr = w.syscall };
	return true;
}

/*
 * Would a stop end one of the thread's transfers early, with part of its
 * work done (a write to a pipe or socket returns what it wrote so far:
 * ma_arch_stop_cuts_short)?  NOW: the thread as read right before the stop.  Blocked
 * in one, it is never stopped, named or not: the short count cannot be
 * undone.  A thread that runs may be inside one, copying, and cannot be
 * told apart from /proc: with --strict (S->strict, named or not) it is
 * not stopped either; only a thread asleep in a wait that restarts is.  Both
 * may pass: refusals for now.  Without --strict a running thread is
 * watched for 2 ms first (WATCH), for a moment it sleeps; *NOWP gets the
 * last reading.
 */
static bool refused_for_transfer(struct ma_session *s, const struct ma_thread_info *ti,
				 struct ma_thread_info *nowp, bool watch, char *why, size_t whylen)
{
	struct ma_thread_info now = *nowp;
	const char *name;

	if (ti->cuts_short) /* as listed */
		s->transfer_tid = ti->tid;
	/*
	 * Running: a few looks more, for a moment it sleeps (in a wait that
	 * restarts: stopped then; in a transfer: refused).  A thread that
	 * never sleeps is stopped as it runs (the residual in README).
	 */
	for (int look = 0; watch && look < 10 && !s->strict && s->transfer_tid != ti->tid &&
			    now.syscall < 0 && !ma_interrupted;
	     look++) {
		usleep(200);
		if (ma_thread_syscall_nr(s->t->pid, ti->tid) >= 0) /* one read while it runs */
			ma_read_thread_info(s->t->pid, ti->tid, &now);
	}
	*nowp = now; /* where the watch left it: its wait is judged again */
	if (now.cuts_short) {
		s->transfer_tid = ti->tid;
		name = ma_arch_syscall_name(now.syscall);
		snprintf(why, whylen, "blocked in %s, which a stop would end early with part of its "
			 "work done (a short write, send or receive; a close before its linger): not "
			 "stopped",
			 name ? name : "a transfer");
		return true;
	}
	if (s->transfer_tid == ti->tid && now.syscall < 0) {
		snprintf(why, whylen, "running between transfers (seen in one a moment ago) that a "
			 "stop would cut short: not stopped");
		return true;
	}
	if (s->strict && (now.state != 'S' || now.syscall < 0)) {
		snprintf(why, whylen, "%s: it may be inside a write or send that a stop would cut "
			 "short; with --strict only a thread asleep in a wait that restarts is stopped",
			 now.state == 'D' ? "in an uninterruptible wait"
			 : now.syscall == -2 ? "running" : "not asleep in a syscall");
		return true;
	}
	return false;
}

/*
 * A thread waiting for its seccomp supervisor's answer (user
 * notification): a stop withdraws the request, and the syscall, issued
 * again, reaches the supervisor twice (its answer to the first then fails:
 * an outside attack, 10 of 10 runs).  Not stopped, named or not.
 */
static bool refused_awaiting_supervisor(struct ma_session *s, pid_t tid, char *why, size_t whylen)
{
	if (!ma_thread_awaits_seccomp_supervisor(s->t->pid, tid))
		return false;
	snprintf(why, whylen, "waits for its seccomp supervisor to answer a syscall (a user "
		 "notification), which a stop would withdraw and the supervisor then get twice: "
		 "not stopped");
	return true;
}

/*
 * The refusals known before any stop (from /proc): an exited thread, a
 * vfork parent, a wait not to be stopped, the run's deadline.  True with
 * *V set when refused.
 */
static bool refused_before_stop(struct ma_session *s, const struct ma_thread_info *ti,
				struct thread_verdict *v, char *why, size_t whylen)
{
	if (ti->state == 'Z' || ti->state == 'X') {
		/* A main thread that called pthread_exit: the others run on. */
		snprintf(why, whylen, "has exited (the process lives on in its other threads)");
		*v = refused_for_good();
		v->gone = true;
		return true;
	}
	if (in_vfork(ti->tid, ti)) {
		snprintf(why, whylen, "waits for its vfork() child to exec or exit, and cannot be "
			 "stopped until then");
		*v = refused_for_good();
		return true;
	}
	if (refused_awaiting_supervisor(s, ti->tid, why, whylen)) {
		*v = verdict_of(MA_E_NOSAFE);
		return true;
	}
	uint64_t began, nvcsw;

	if (!s->stop_eintr_wait && refused_in_wait(s, ti, false, &began, &nvcsw, v, why, whylen))
		return true;
	if (ma_run_deadline_passed()) {
		*v = verdict_of(deadline_before_stop(ti->tid, why, whylen));
		return true;
	}
	return false;
}

/*
 * What can be done before the stop, so the hold is short: the status
 * file opened, the TLS offset read, the unwind rehearsed.  Then the
 * thread is read once more (*NOW, for the checks that follow).  For a wait
 * that will be issued again, read last, right before the stop: when it
 * began (*BEGAN, *NVCSW; the time that remained is measured from it),
 * which the listing may have seen for an earlier wait of the same loop
 * (that early start made a re-issued epoll_wait return before its
 * timeout).  True with *V set when that wait is one not to stop.
 */
static bool refused_at_last_look(struct ma_session *s, const struct ma_thread_info *ti,
				 uint64_t *began, uint64_t *nvcsw, struct ma_thread_info *now,
				 struct thread_verdict *v, char *why, size_t whylen)
{
	open_status_fd(s, ti->tid);
	if (ma_target_read_tls_offset(s->t, ti->tid) != 0)
		ma_err_clear(); /* judged in the hold (a thread that cannot tell counts as having state) */
	ma_unwind_rehearse(s->t, ti->tid); /* before the stop: the walk in the hold is then short */
	ma_read_thread_info(s->t->pid, ti->tid, now);
	return refused_in_wait(s, now, true, began, nvcsw, v, why, whylen);
}

/*
 * The last look, under the hold's priority (no CPU to wait for from here
 * to the stop): has the thread moved since NOW was read (into a syscall,
 * out of one, into another)?  Then it is read and judged again, so a
 * thread seen running a moment ago is not stopped in a wait it entered
 * since, which the stop would end.  Left: the microseconds from this
 * read to PTRACE_INTERRUPT.
 */
static bool refused_at_stop(struct ma_session *s, const struct ma_thread_info *ti,
			    uint64_t *began, uint64_t *nvcsw, struct ma_thread_info *now,
			    struct thread_verdict *v, char *why, size_t whylen)
{
	long nr;

	if (thread_refused_for_restart(s, ti->tid, why, whylen) ||
	    refused_awaiting_supervisor(s, ti->tid, why, whylen)) {
		*v = verdict_of(MA_E_NOSAFE);
		return true;
	}
	nr = ma_thread_syscall_nr(s->t->pid, ti->tid);

	if (nr < 0 ? now->syscall < 0 : nr == now->syscall)
		return false;
	ma_read_thread_info(s->t->pid, ti->tid, now);
	if (refused_in_wait(s, now, true, began, nvcsw, v, why, whylen))
		return true;
	if (refused_for_transfer(s, ti, now, false, why, whylen)) {
		*v = verdict_of(MA_E_NOSAFE);
		return true;
	}
	return false;
}

/* PTRACE_SEIZE of TI's thread failed with errno E: why, as a verdict. */
static struct thread_verdict seize_failed(struct ma_session *s, const struct ma_thread_info *ti, int e,
				       char *why, size_t whylen)
{
	struct ma_proc_status st;

	/* An exec's old leader, a zombie whose pid the exec'ing thread took over. */
	if (e == EPERM && exec_since_opened(s))
		return verdict_of(ma_fail(MA_E_EXITED, "thread %d went away: the process exec'd", ti->tid));
	if (e == EPERM) {
		if (ma_proc_read_status(s->t->pid, ti->tid, &st) != 0) {
			ma_err_clear();
			return verdict_of(ma_fail(MA_E_EXITED, "thread %d went away", ti->tid));
		}
		/*
		 * Another memattach run that is ending (it lets go of a
		 * thread that was slow to stop, or exits): try again.
		 */
		if (st.tracer == getpid()) {
			snprintf(why, whylen, "had not come to its stop yet when this run tried "
				 "it before (in the kernel, or waiting for CPU)");
			return verdict_of(MA_E_NOSAFE);
		}
		if (st.tracer && (ma_is_memattach(st.tracer) || strcmp(ma_comm_of(st.tracer), "?") == 0)) {
			snprintf(why, whylen, "still traced by memattach pid %d, which is finishing",
				 st.tracer);
			return verdict_of(MA_E_NOSAFE);
		}
		/* Only this thread is traced (the process as a whole was
		 * checked when it was opened): borrow another one. */
		if (st.tracer) {
			snprintf(why, whylen, "traced by pid %d (%s); detach that first", st.tracer,
				 ma_comm_of(st.tracer));
			return refused_for_good();
		}
	}
	errno = e;
	return verdict_of(stops_ptrace_errno("PTRACE_SEIZE", ti->tid));
}

/*
 * Interrupt the seized thread and wait (STOP_MS at most) for its stop.  0
 * when it sits in its interrupt stop; else the thread was let go (a
 * signal on its way in, job control), has exited, or, MA_E_TIMEOUT, is
 * still seized and not stopped.
 */
static int stop_seized(struct ma_session *s, const struct ma_thread_info *ti, int stop_ms,
		       char *why, size_t whylen)
{
	int status, rc, sig;

	if (ma_ptrace(PTRACE_INTERRUPT, ti->tid, NULL, NULL) != 0)
		return stops_ptrace_errno("PTRACE_INTERRUPT", ti->tid);
	/*
	 * While the thread comes to its stop, read its seccomp mode (a pread
	 * that need not be part of the hold): from here on it runs no code of
	 * its own, so only a syscall it was already making can still change
	 * its mode, and then its stop shows that syscall (session_check_seccomp reads
	 * again).  A filter synced from another thread (TSYNC) can come at
	 * any time, in a hold as well.
	 */
	s->early_seccomp_mode = s->status_fd >= 0 ? ma_seccomp_mode_of(s->status_fd) : -1;
	rc = stops_peek(ti->tid, &status, stop_ms);
	/* A signal on its way in: handed back still unreported (stops_peek). */
	if (rc == 0 && stops_is_signal_stop(status)) {
		snprintf(why, whylen, "a signal (%d) was being delivered to it", WSTOPSIG(status));
		thread_release_untouched(s, WSTOPSIG(status));
		return MA_E_NOSAFE;
	}
	if (rc == 0)
		rc = stops_wait(ti->tid, &status, 1000);
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
		thread_release_untouched(s, 0);
		return MA_E_STOPPED;
	}
	if ((status >> 16) == 0) {
		snprintf(why, whylen, "a signal (%d) was being delivered to it", sig);
		thread_release_untouched(s, sig);
		return MA_E_NOSAFE;
	}
	return 0;
}

/*
 * A thread stopped inside a restartable sequence's critical section (rseq:
 * glibc registers an area for every thread; per-CPU code such as
 * tcmalloc's or librseq's runs such sections) must resume at the section's
 * abort handler: the kernel sends it there when it next returns to user
 * space, but only if its ip is still in the section -- with the ip at our
 * stub it merely forgets the section, and the stub's restore would put the
 * thread back in the middle of it, to commit with a stale CPU (an outside
 * attack lost millions of per-CPU counter updates).  So the ip the thread
 * is given back is the abort handler's, as the kernel would choose; the
 * section pointer is left for the kernel to clear (were memattach killed
 * before it moves the ip, the kernel still aborts the section itself).
 * 0 when IP is in no section (or *ABORT_IP set); MA_E_NOSAFE when the
 * abort handler lacks the registered signature (the kernel would kill the
 * process there: the thread is left to it).
 */
static int rseq_abort_ip(pid_t tid, uint64_t ip, uint64_t *abort_ip, char *why, size_t whylen)
{
	struct __ptrace_rseq_configuration conf;
	struct {
		uint32_t version, flags;
		uint64_t start_ip, post_commit_offset, abort_ip;
	} cs;
	uint64_t cs_ptr = 0;
	uint32_t sig = 0;

	*abort_ip = 0;
	memset(&conf, 0, sizeof(conf));
	if (ma_ptrace(PTRACE_GET_RSEQ_CONFIGURATION, tid, (void *)sizeof(conf), &conf) < 0 ||
	    !conf.rseq_abi_pointer)
		return 0; /* no rseq area (or a kernel before 5.13: see the README's limits) */
	/* struct rseq: cpu_id_start, cpu_id (u32 each), then the u64 rseq_cs */
	if (ma_mem_read(tid, conf.rseq_abi_pointer + 8, &cs_ptr, sizeof(cs_ptr)) != 0 || !cs_ptr ||
	    ma_mem_read(tid, cs_ptr, &cs, sizeof(cs)) != 0) {
		ma_err_clear();
		return 0;
	}
	if (ip < cs.start_ip || ip - cs.start_ip >= cs.post_commit_offset)
		return 0;
	if (ma_mem_read(tid, cs.abort_ip - 4, &sig, sizeof(sig)) != 0 || sig != conf.signature) {
		ma_err_clear();
		snprintf(why, whylen, "inside a restartable sequence whose abort handler lacks its "
			 "signature (the kernel ends such a process)");
		return MA_E_NOSAFE;
	}
	*abort_ip = cs.abort_ip;
	return 0;
}

/*
 * Save the stopped thread's registers, signal mask and extended state.
 * Our stop made its syscall fail with EINTR: issue it again at once,
 * before anything else, so a memattach that dies from here on leaves no
 * EINTR (between the stop and this write no register can be set: that
 * window is the one ptrace leaves; such threads are tried last).  An
 * epoll_wait gets what remained of its timeout since BEGAN (NVCSW then).
 * The thread is let go on a failure.
 */
static int save_state(struct ma_session *s, const struct ma_thread_info *ti, uint64_t began,
		      uint64_t nvcsw, char *why, size_t whylen)
{
	struct user_regs_struct first;
	bool reissued = false;
	uint64_t abort_ip;
	int rc;

	s->rseq_ip = 0;
	if ((rc = ma_arch_get_regs(ti->tid, &s->saved.regs))) {
		thread_release_untouched(s, 0);
		return rc;
	}
	first = s->saved.regs;
	if (ma_arch_interrupted_eintr(&s->saved.regs) && thread_syscall_insn_at(s->t->proc_pid, &s->saved.regs)) {
		ma_arch_resume_regs(&s->saved.regs, true, &s->resume);
		if (began && ma_now_ns() > began && in_libc_epoll(s->t, &first) && same_wait(s, nvcsw))
			ma_arch_shorten_wait(&s->resume, (ma_now_ns() - began) / 1000000ULL);
		ma_arch_set_regs(ti->tid, &s->resume);
		reissued = true;
	}
	if ((rc = ma_arch_get_xstate(ti->tid, &s->saved)) == 0 &&
	    ma_ptrace(PTRACE_GETSIGMASK, ti->tid, (void *)sizeof(s->sigmask), &s->sigmask) != 0)
		rc = stops_ptrace_errno("PTRACE_GETSIGMASK", ti->tid);
	if (rc) {
		thread_release_untouched(s, 0);
		return rc;
	}
	if (reissued && thread_signal_pending(s->t->pid, ti->tid, s->sigmask)) {
		/* A real signal waits: the EINTR is its due after all. */
		ma_arch_set_regs(ti->tid, &s->saved.regs);
		reissued = false;
	}
	/*
	 * Not in a syscall (none runs in an rseq section), and after the
	 * re-issue above, which must come first: given back at the section's
	 * abort handler (rseq_abort_ip); the thread's own ip is not touched.
	 */
	if (!ma_arch_interrupted_eintr(&first)) {
		if ((rc = rseq_abort_ip(ti->tid, ma_arch_ip(&first), &abort_ip, why, whylen))) {
			thread_release_untouched(s, 0);
			return rc;
		}
		if (abort_ip) {
			s->rseq_ip = ma_arch_ip(&first);
			ma_arch_set_ip(&s->saved.regs, abort_ip);
		}
	}
	if (!reissued)
		ma_arch_resume_regs(&s->saved.regs, false, &s->resume);
	return 0;
}

/* A refusal in the hold: the thread let go; a run whose target exec'd ends with that. */
static struct thread_verdict let_go(struct ma_session *s, bool maybe_exec, bool hopeless)
{
	struct thread_verdict v = { .rc = MA_E_NOSAFE, .hopeless = hopeless };

	thread_release_untouched(s, 0);
	session_count_hold(s);
	/* What the old program's maps cannot explain: did it exec? */
	if (maybe_exec && exec_since_opened(s))
		v.rc = MA_E_EXITED;
	return v;
}

/*
 * Would the held thread's seccomp filter refuse a syscall of the session or
 * of jemalloc inside its calls (session_check_seccomp)?  Judged for each
 * candidate in its own hold, so a sandboxed thread that ranks first is
 * passed over for another (the message is the refusal's); ma_session_open
 * asks again once its stub site is taken.
 */
static bool refused_by_seccomp(struct ma_session *s, char *why, size_t whylen)
{
	uint64_t stub = s->stub;
	int rc;

	/* The stub's site is taken after the choice: the first one's address stands in for it. */
	if (!s->stub && s->t->nstub_sites)
		s->stub = s->t->stub_sites[0].addr;
	rc = session_check_hold(s);
	s->stub = stub;
	if (rc == 0)
		return false;
	snprintf(why, whylen, "%s", ma_errmsg());
	ma_err_clear();
	return true;
}

/*
 * What jemalloc holds for the stopped thread decides whether a call may
 * run there (V set when not).  A call initializes the thread in full:
 * - one that never called into jemalloc gets allocator state (a tcache)
 *   that was not there: only when named (--tid);
 * - one that only ever freed may be in its exit, past the destructor
 *   that would remove a tcache from its arena: never, named or not (a
 *   flush treats it as having nothing to flush);
 * - one whose state its destructor tore down is exiting: never.
 */
static bool refused_for_je_state(struct ma_session *s, const struct ma_thread_info *ti,
				 struct thread_verdict *v, char *why, size_t whylen)
{
	bool fresh = false;

	switch (ma_thread_je_state(s->t, ti->tid, ma_arch_thread_pointer(&s->saved.regs))) {
	case MA_JE_STATE_NONE:
		if (s->fresh_ok) {
			s->creates_state = true;
			return false;
		}
		snprintf(why, whylen, "never called into jemalloc: borrowing it would create its "
			 "allocator state (a tcache)");
		fresh = true;
		break;
	case MA_JE_STATE_MINIMAL:
		snprintf(why, whylen, "only ever freed memory, as a thread does in its exit: a call "
			 "would give it a tcache that nothing removes if it is exiting");
		fresh = !s->fresh_ok; /* nothing to flush; named, a lasting refusal */
		break;
	case MA_JE_STATE_EXITING:
		snprintf(why, whylen, "is exiting: jemalloc's state for it is already torn down");
		break;
	default:
		return false;
	}
	*v = let_go(s, false, true);
	v->fresh = fresh;
	return true;
}

/* Judge the held thread from its stack (BT gets the walk): safe, or let go. */
static struct thread_verdict judge_held(struct ma_session *s, const struct ma_thread_info *ti,
				     struct ma_backtrace *bt, char *why, size_t whylen)
{
	struct user_regs_struct where = s->saved.regs;
	struct thread_verdict v;
	bool never = false;

	if (fault_signal_waits(s->t->pid, ti->tid)) {
		snprintf(why, whylen, "a trap or fault signal waits for it (a single step it took, say): "
			 "in a call that signal would look like the call's own fault");
		return let_go(s, false, false);
	}
	if (ma_arch_single_steps(&s->saved.regs)) {
		snprintf(why, whylen, "single-steps itself (its trap flag is set): a call would run "
			 "without the traps it counts on, and the way back could not give it them "
			 "exactly");
		return let_go(s, false, false);
	}
	if (s->rseq_ip) /* judged where it is, not where it will resume (rseq_abort_ip) */
		ma_arch_set_ip(&where, s->rseq_ip);
	if (ma_unwind(s->t, ti->tid, &where, bt) != 0) {
		ma_err_clear();
		snprintf(why, whylen, "stack could not be unwound");
		return let_go(s, true, false);
	}
	if (!ma_thread_is_safe(s->t, ti, bt, why, whylen))
		return let_go(s, false, false);
	if (!on_own_stack(s, ti->tid)) {
		snprintf(why, whylen, "runs on a stack that is not its own (a coroutine, or a signal "
			 "handler on another stack): what it interrupted cannot be seen");
		return let_go(s, true, false);
	}
	if (!owns_thread_pointer(s, ti->tid, why, whylen))
		return let_go(s, false, true);
	if (s->own_tp && ma_arch_thread_pointer(&s->saved.regs) != s->own_tp) {
		snprintf(why, whylen, "is not the thread memattach made (its thread ended, and the "
			 "tid is another's now)");
		return let_go(s, false, true);
	}
	if (s->own_tp && !ma_syscall_is_sleep(ma_arch_restartable_syscall_nr(&s->saved.regs))) {
		/* A signal ended its sleep: it is on its way out, its allocator state perhaps gone. */
		snprintf(why, whylen, "memattach's thread was not stopped in its sleep (a signal "
			 "ended it: the thread is ending)");
		return let_go(s, false, true);
	}
	if (!thread_stack_bottom(s)) {
		snprintf(why, whylen, "runs on a stack the program supplied, or one without a guard "
			 "page of its own (merged with the memory below it): where it ends cannot "
			 "be known, and memattach's saved state goes below the stack pointer");
		return let_go(s, false, true);
	}
	if (!stack_has_room(s, &never)) {
		snprintf(why, whylen, "less than %lu KiB of its stack below the stack pointer",
			 STACK_ROOM >> 10);
		return let_go(s, false, never);
	}
	/* Before the allocator state: a thread whose filter refuses us is not offered for --tid. */
	if (refused_by_seccomp(s, why, whylen))
		return let_go(s, false, true);
	if (refused_for_je_state(s, ti, &v, why, whylen))
		return v;
	if (s->sites_had_stub && inside_leftover_stub(s)) {
		snprintf(why, whylen, "still finishing the call of an earlier memattach run that "
			 "was killed (its stub is restoring the thread's registers)");
		return let_go(s, false, false);
	}
	snprintf(s->why, sizeof(s->why), "thread %d (%s): %s", ti->tid, ti->name, why);
	return verdict_of(0);
}

/*
 * Stop TI's thread and examine it (BTP, when given, gets its stack).
 * A thread stopped with a signal on its way in is let go with it at once:
 * a signal held across the whole session (SIGSTOP, say) could be
 * cancelled meanwhile by the kernel's rules, and memattach would not know.
 */
struct thread_verdict thread_try(struct ma_session *s, const struct ma_thread_info *ti,
				  struct ma_backtrace *btp, char *why, size_t whylen)
{
	struct ma_backtrace local;
	struct ma_thread_info now; /* read last, right before the stop */
	uint64_t began = 0, nvcsw = 0;
	struct thread_verdict v;
	int rc, stop_ms;

	close_fd(&s->status_fd); /* the previous candidate's */
	s->early_seccomp_mode = -1;
	s->tid = ti->tid;
	s->creates_state = false;
	memset(&s->resume, 0, sizeof(s->resume));
	if (refused_before_stop(s, ti, &v, why, whylen) ||
	    refused_at_last_look(s, ti, &began, &nvcsw, &now, &v, why, whylen))
		return v;
	if (refused_for_transfer(s, ti, &now, true, why, whylen))
		return verdict_of(MA_E_NOSAFE);
	/* The watch may have seen it enter a wait. */
	if (refused_in_wait(s, &now, true, &began, &nvcsw, &v, why, whylen))
		return v;
	/* Right before the stop: the thread may fork until then. */
	if (s->guard_ignored && frees_ignored_signal(s, ti, why, whylen)) {
		/* Children end; the main thread stays the main thread. */
		return (struct thread_verdict){ .rc = MA_E_NOSAFE, .hopeless = ti->tid == s->t->pid };
	}
	stop_ms = ma_run_ms_left(1000);
	if (stop_ms == 0)
		return verdict_of(deadline_before_stop(ti->tid, why, whylen));
	/* From here to the release, memattach must not wait for a CPU (holdprio.h). */
	ma_hold_priority_raise();
	if (refused_at_stop(s, ti, &began, &nvcsw, &now, &v, why, whylen)) {
		ma_hold_priority_drop();
		return v;
	}
	/* Read before the hold: its CPU wait is told apart from ours (session_count_hold). */
	s->cpu_wait_known = ma_thread_cpu_wait_ns(s->t->proc_pid, ti->tid, &s->cpu_wait_at_seize_ns);
	if (ma_ptrace(PTRACE_SEIZE, ti->tid, NULL, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
		int e = errno;

		ma_hold_priority_drop();
		return seize_failed(s, ti, e, why, whylen);
	}
	s->seized = true;
	s->t_stop_ns = ma_now_ns();
	if ((rc = stop_seized(s, ti, stop_ms, why, whylen)))
		return verdict_of(rc);
	if ((rc = thread_keep_restart_allowed(s, ti->tid))) {
		thread_release_untouched(s, 0);
		return verdict_of(rc);
	}
	/* Next in the hold: a child's exit must not find it stopped. */
	if (s->chld_watch && ma_thread_has_children(s->t->pid, ti->tid)) {
		snprintf(why, whylen, "forked a child just before its stop: stopped, the child's "
			 "SIGCHLD, which the program ignores, would reach another thread and end a wait "
			 "such as sigtimedwait with EINTR; not stopped with --strict");
		return let_go(s, false, false);
	}
	if ((rc = save_state(s, ti, began, nvcsw, why, whylen)))
		return verdict_of(rc);
	return judge_held(s, ti, btp ? btp : &local, why, whylen);
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
		      unsigned flags, struct ma_backtrace *bt, char *why, size_t whylen,
		      enum ma_verdict *v)
{
	bool strict = flags & MA_LOOK_STRICT;
	struct ma_session s;
	struct thread_verdict tv;
	int rc;

	struct ma_runlock lock;
	uint64_t waited;

	memset(&s, 0, sizeof(s));
	s.t = t;
	s.status_fd = s.mem_fd = -1;
	s.strict = strict;
	s.guard_ignored = strict || (flags & MA_LOOK_SPARE_IGNORED);
	bt->n = 0;
	/* A look is a stop too: it takes its turn like any run. */
	if ((rc = ma_runlock_acquire(t->pid, lock_ms, &waited, &lock)))
		return rc;
	if ((rc = ma_arch_state_alloc(&s.saved))) {
		ma_runlock_release(&lock);
		return rc;
	}
	ma_unwind_prepare();
	stops_reaper_timer(true);
	tv = thread_try(&s, ti, bt, why, whylen);
	rc = tv.rc;
	stops_reaper_timer(false);
	*v = rc == 0 ? MA_VERDICT_SAFE : MA_VERDICT_UNSAFE;
	if (rc == MA_E_NOSAFE && tv.eintr_wait) {
		*v = strict ? MA_VERDICT_NAMED_ONLY : MA_VERDICT_EINTR_WAIT;
		eintr_wait_why(ti->tid, tv.eintr_nr, strict, why, whylen);
	}
	if (rc == 0) { /* safe, but we only wanted to look */
		thread_release_untouched(&s, 0);
	} else if (rc == MA_E_TIMEOUT && s.seized) {
		stops_add_straggler(t->pid, ti->tid, ti->eintr_wait); /* let go (with its signal) when it stops */
	}
	ma_hold_priority_drop();
	close_fd(&s.status_fd);
	ma_arch_state_free(&s.saved);
	stops_end_turn(&lock);
	if (rc == MA_E_NOSAFE || rc == MA_E_TIMEOUT || rc == MA_E_STOPPED)
		rc = 0;
	return rc;
}
