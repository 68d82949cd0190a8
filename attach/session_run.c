/*
 * session_run.c - running the borrowed thread to its next stop: the
 * signals that come during a call, a call that would wait on a lock
 * memattach itself holds, and the syscalls issued through the stub.
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
#include <pthread.h>

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

/* Keep a signal that reached the borrowed thread, for delivery after. */
void run_hold_signal(struct ma_session *s)
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

uint64_t run_fault_signals(void)
{
	uint64_t m = 0;

	for (int sig = 1; sig <= 64; sig++)
		if (is_fault_signal(sig))
			m |= 1ULL << (sig - 1);
	return m;
}

/*
 * Signals blocked while the thread is borrowed: all but the synchronous
 * faults (a fault with its signal blocked would make the kernel reset the
 * program's handler to SIG_DFL).  SIGKILL and SIGSTOP cannot be blocked.
 */
uint64_t run_borrowed_mask(void)
{
	return ~run_fault_signals();
}

int run_set_sigmask(struct ma_session *s, uint64_t mask)
{
	if (ma_ptrace(PTRACE_SETSIGMASK, s->tid, (void *)sizeof(mask), &mask) != 0)
		return stops_ptrace_errno("PTRACE_SETSIGMASK", s->tid);
	return 0;
}


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

/*
 * glibc's SIGSETXID, sent by a setuid() of the program (si_code SI_TKILL
 * from the process itself: glibc's handler ignores any other), which
 * waits, holding the thread-stack lock, until every thread has taken it.
 * Its handler only makes the thread's own setxid syscall.
 */
#define GLIBC_SIGSETXID 33

bool run_passes_signal(const struct ma_session *s, int sig, const siginfo_t *si)
{
	return s->pass_setxid && sig == GLIBC_SIGSETXID && si->si_code == SI_TKILL &&
	       si->si_pid == s->t->pid;
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
		run_hold_signal(s);
	} else if (is_fault(sig, &si) && !*fault) {
		struct user_regs_struct r;

		ma_arch_get_regs(s->tid, &r);
		*fault = ma_fail(MA_E_FAULT,
				 "the injected call faulted in thread %d (signal %d at ip 0x%llx, "
				 "address %p); the thread was restored, but a lock the call held "
				 "may stay taken: should a later run wait on it, the process has to "
				 "be restarted",
				 s->tid, sig, (unsigned long long)ma_arch_ip(&r), si.si_addr);
		if ((rc = park_at_marker(s)))
			return rc;
		*goal = GOAL_CALL;
	} else if (sig == SIGSTOP) {
		/* Job control goes through: the kernel stops the thread again when we let go. */
		*pass_sig = sig;
	} else if (run_passes_signal(s, sig, &si)) {
		*pass_sig = sig;
	} else {
		run_hold_signal(s);
	}
	return 0;
}

static bool is_futex_wait(const struct __ptrace_syscall_info *info);

/* The head of glibc's pthread_mutex_t (64-bit), what the judgements below read of a lock. */
struct glibc_mutex {
	int lock, count, owner, nusers, kind;
};

/* Read the mutex whose futex word is at ADDR; false if it cannot be read. */
static bool read_mutex(struct ma_session *s, uint64_t addr, struct glibc_mutex *m)
{
	if (ma_mem_read(s->t->proc_pid, addr, m, sizeof(*m)) == 0)
		return true;
	ma_err_clear();
	return false;
}

/*
 * Is the syscall being entered a futex wait on a pthread mutex whose owner
 * is this very thread (a lock it held before we borrowed it, e.g. inside
 * fork())?  Then the call can never return.
 */
static bool waits_on_own_lock(struct ma_session *s, const struct __ptrace_syscall_info *info)
{
	struct glibc_mutex m;

	return is_futex_wait(info) && read_mutex(s, info->entry.args[0], &m) && m.owner == s->tid;
}

/*
 * Give up the call at that futex: it becomes a getpid (never skipped: a
 * skipped syscall meets seccomp as nr -1), and at its exit the thread is
 * stopped where any register state may be set.  The session goes on from
 * there (unmapping, restoring) as after any failed call.  0 once there.
 */
static int give_up_at_futex(struct ma_session *s)
{
	struct user_regs_struct r;
	int rc, status;

	/* From here the lock is in the way: a failure restores the thread. */
	s->skipping_self_deadlock = true;
	if ((rc = ma_arch_get_regs(s->tid, &r)))
		return rc;
	ma_arch_set_syscall_nr(&r, MA_STUB_MARKER_NR);
	if ((rc = ma_arch_set_regs(s->tid, &r)))
		return rc;
	for (int pass = 0;;) {
		if (ma_ptrace(PTRACE_SYSCALL, s->tid, NULL, (void *)(long)pass) != 0)
			return stops_ptrace_errno("PTRACE_SYSCALL", s->tid);
		if ((rc = stops_wait(s->tid, &status, 1000)))
			return rc;
		if (!WIFSTOPPED(status)) {
			s->seized = false;
			return ma_fail(MA_E_EXITED, "thread %d exited during the call", s->tid);
		}
		if (WSTOPSIG(status) == (SIGTRAP | 0x80))
			break;
		pass = 0;
		if ((status >> 16) == 0) {
			siginfo_t si;

			memset(&si, 0, sizeof(si));
			ma_ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si);
			if (run_passes_signal(s, WSTOPSIG(status), &si))
				pass = WSTOPSIG(status);
			else
				run_hold_signal(s);
		}
	}
	s->at_marker = false;
	return 0;
}

static int skip_self_deadlock(struct ma_session *s, uint64_t mutex)
{
	const struct ma_mapping *m = ma_target_mapping_at(s->t, mutex);
	int rc;

	if ((rc = give_up_at_futex(s)))
		return rc;
	/* What was seen, no guess at how: the thread took the lock before the stop. */
	return ma_fail(MA_E_JEMALLOC,
		       "the call in thread %d began to wait (futex) for the mutex at 0x%llx (in %s), "
		       "which thread %d itself holds: it took it before this run borrowed it, with "
		       "no jemalloc frame on its stack; the call could never return and was given "
		       "up, the thread restored; run again (the thread lets go as it runs on)",
		       s->tid, (unsigned long long)mutex,
		       m && m->path ? m->path : m ? "anonymous memory" : "no mapping", s->tid);
}

/*
 * Is the futex at ADDR a recursive mutex (the loader's TLS and load locks
 * are) that another live thread of the process holds?  Then the wait ends
 * when that thread lets go, and giving it up would be wrong: code ran
 * before it (a stack taken from glibc's cache is listed before the TLS
 * lock is taken), so nothing proves the call has changed nothing.  The
 * thread-stack lock, a plain int, is never taken for one.
 */
static bool held_by_another_thread(struct ma_session *s, uint64_t addr)
{
	struct glibc_mutex m;
	struct ma_proc_status st;

	if (!read_mutex(s, addr, &m) || (m.kind & 0x7f) != PTHREAD_MUTEX_RECURSIVE_NP ||
	    m.owner <= 0 || m.owner == s->tid)
		return false;
	if (ma_proc_read_status(s->t->pid, m.owner, &st) != 0) {
		ma_err_clear();
		return false;
	}
	return st.tgid == s->t->pid;
}

/*
 * Making a thread of memattach's own (ma_target's for_thread_create): is
 * the call's first syscall a futex wait on a lock in the dynamic loader's
 * data (glibc keeps its thread-stack lock there, in _rtld_global)?  That
 * lock has no owner field: the borrowed thread may hold it itself (in a
 * function the judge did not know), and pthread_create takes it first of
 * all, before it has a stack.  A later wait (the TLS lock, once a stack
 * is taken and listed) is not given up: a thread half made would keep a
 * setuid() waiting for ever.
 */
static bool waits_on_loader_lock(struct ma_session *s, const struct __ptrace_syscall_info *info)
{
	const struct ma_mapping *lock, *ld;

	if (!s->t->for_thread_create || s->call_syscalls != 1 || !is_futex_wait(info) ||
	    !s->t->loader.hi)
		return false;
	lock = ma_target_mapping_at(s->t, info->entry.args[0]);
	ld = ma_target_mapping_at(s->t, s->t->loader.lo);
	return lock && ld && lock->path && ld->path && strcmp(lock->path, ld->path) == 0 &&
	       !held_by_another_thread(s, info->entry.args[0]);
}

static int skip_loader_lock(struct ma_session *s)
{
	int rc;

	if ((rc = give_up_at_futex(s)))
		return rc;
	s->t->loader_lock_given_up = true;
	return ma_fail(MA_E_NOSAFE, "making memattach's thread in thread %d had to wait for a lock "
		       "kept in glibc's dynamic loader (the thread-stack or TLS lock; a dlopen elsewhere "
		       "holds them too), which that thread might hold itself: given up before "
		       "anything was made, the thread restored", s->tid);
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
int run_stopped_under_call(struct ma_session *s, const char *how)
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
 * A filter another thread installed (TSYNC) after this thread's was judged
 * may refuse a syscall the call now makes (the thread stopped at its entry,
 * before the kernel's own check): seen here, that syscall becomes one the
 * filter allows and harmless (getpid...), and its exit gets EPERM, so the
 * call goes on to its end with an error, holding no lock, and the process
 * lives.  0: nothing to do or done; -1: no substitute is allowed (the
 * kernel then acts on the filter).
 */
static int fail_syscall_new_filter_refuses(struct ma_session *s, const struct __ptrace_syscall_info *info)
{
	static const int subs[] = { SYS_getpid, SYS_gettid, SYS_sched_yield, -1 };
	struct ma_sc_query q;
	struct user_regs_struct r;

	if (!session_judge_filters_again(s) && !s->filters_changed)
		return 0;
	memset(&q, 0, sizeof(q));
	q.nr = (int)info->entry.nr;
	memcpy(q.args, info->entry.args, sizeof(q.args));
	q.ip = info->instruction_pointer;
	q.what = "a syscall of the call";
	if (ma_seccomp_check(s->t->pid, s->tid, &q, 1) == 0)
		return 0;
	ma_err_clear();
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		memset(q.args, 0, sizeof(q.args));
		q.nr = subs[i];
		if (ma_seccomp_check(s->t->pid, s->tid, &q, 1) != 0) {
			ma_err_clear();
			continue;
		}
		if (ma_arch_get_regs(s->tid, &r) != 0)
			break;
		r.orig_rax = (unsigned long long)(long long)subs[i];
		if (ma_arch_set_regs(s->tid, &r) != 0)
			break;
		if (!s->refused_in_call)
			s->refused_in_call = (long)info->entry.nr + 1;
		s->fail_at_exit = true;
		return 0;
	}
	ma_err_clear();
	return -1;
}

/* At the exit of a syscall fail_syscall_new_filter_refuses replaced: EPERM. */
static void fail_replaced_syscall(struct ma_session *s)
{
	struct user_regs_struct r;

	s->fail_at_exit = false;
	if (ma_arch_get_regs(s->tid, &r) != 0) {
		ma_err_clear();
		return;
	}
	r.rax = (unsigned long long)-EPERM;
	if (ma_arch_set_regs(s->tid, &r) != 0)
		ma_err_clear();
}

static int refused_in_call(struct ma_session *s)
{
	long nr = s->refused_in_call - 1;
	const char *name = ma_arch_syscall_name(nr);
	char num[32];

	snprintf(num, sizeof(num), "syscall %ld", nr);
	return ma_fail(MA_E_SECCOMP, "a seccomp filter the program installed during the call refuses "
		       "%s, which the call made in thread %d: it was made to fail (EPERM) instead, so "
		       "the call ended with an error and the process lives on",
		       name ? name : num, s->tid);
}

/*
 * The stop for the signal the call's last entries send their own thread
 * (ownthread.c): unblocked, then sent by tgkill, it is delivered on that
 * syscall's way out, the thread still in its wrapper.  The same signal
 * from anyone else, or at any other point, is the program's, held as any
 * other.
 */
static bool is_call_end_signal(struct ma_session *s, int sig)
{
	struct user_regs_struct r;
	siginfo_t si;

	if (!s->end_sig || s->end_seen || sig != s->end_sig)
		return false;
	memset(&si, 0, sizeof(si));
	if (ma_ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si) != 0 || si.si_code != SI_TKILL ||
	    ma_arch_get_regs(s->tid, &r) != 0) {
		ma_err_clear();
		return false;
	}
	return (long)r.orig_rax == SYS_tgkill && ma_arch_ip(&r) >= s->end_fn.lo &&
	       ma_arch_ip(&r) < s->end_fn.hi;
}

/*
 * Once the call has entered its first syscall, and that one passed the
 * judgements above (a wait on a loader lock is only ever the first), a
 * call whose end is signalled runs on without a stop per syscall: each
 * stop is one more wait for a CPU on a busy machine, most of a hold.
 * What those stops also judged is left to the call's timeout: a wait on
 * a lock (another thread lets go), a stop of the process (its grace).
 * Not once a seccomp filter judges the thread's syscalls (one came in
 * since the thread was stopped: each syscall is judged again at its
 * entry); one that comes in after this first syscall is not seen
 * before pthread_create's own (README's limits).
 */
/* What the call's mask blocks at least (less the end signal, which its end unblocks). */
static uint64_t call_mask_floor(const struct ma_session *s)
{
	uint64_t call = (s->sigmask | run_borrowed_mask()) & ~(1ULL << (GLIBC_SIGSETXID - 1));

	return s->end_sig ? call & ~(1ULL << (s->end_sig - 1)) : call;
}

static bool free_run_begins(const struct ma_session *s, enum run_goal goal, int sig)
{
	/* (A thread that blocks all the call's mask does itself: no telling it is back, below.) */
	return s->end_sig && !s->end_seen && goal == GOAL_CALL && sig == (SIGTRAP | 0x80) &&
	       s->call_syscalls >= 1 && !s->refused_in_call && !s->filtered && !s->filters_changed &&
	       (s->sigmask & call_mask_floor(s)) != call_mask_floor(s);
}

/*
 * How long a call runs free before memattach looks where it is: its end
 * signal can be lost (the program setting that signal's disposition to
 * SIG_IGN or SIG_DFL discards a pending one), and the thread then runs
 * past the marker (no stop there) and restores itself, its signals still
 * coming to memattach.  Well above the call's own ~0.1 ms; a busy
 * machine's wait for a CPU may pass it, and the look then only costs the
 * per-syscall stops from there on.
 */
#define FREE_RUN_MS 25


/*
 * After FREE_RUN_MS with no end: has the thread left the call, restored
 * by the stub's own path?  Its ip is then out of the stub, and either its
 * mask no longer blocks all the call's does (the mask it gets back is its
 * own, which blocks less: free_run_begins) or its stack is above the
 * state area (the call's is below it).
 */
static bool restored_itself(struct ma_session *s)
{
	struct user_regs_struct r;
	uint64_t mask = 0, call = call_mask_floor(s);

	if (ma_arch_get_regs(s->tid, &r) != 0 ||
	    ma_ptrace(PTRACE_GETSIGMASK, s->tid, (void *)sizeof(mask), &mask) != 0) {
		ma_err_clear();
		return false;
	}
	return (ma_arch_ip(&r) < s->stub || ma_arch_ip(&r) >= s->stub + MA_STUB_REGION) &&
	       ((mask & call) != call || ma_arch_stack_pointer(&r) > s->area);
}

/*
 * Its end signal lost, has the call's thread gone back on its own?  Looked
 * at after the free run's interrupt and at each stop after it, until the
 * marker; and at a signal for it while free, which then goes to it as it
 * came, siginfo and all, when it is let go, never held.  A syscall entry
 * of its own goes on as made.
 */
static bool back_on_its_own(struct ma_session *s, bool free, bool free_over, int ev, int sig)
{
	bool look = (free_over && (ev == PTRACE_EVENT_STOP || sig == (SIGTRAP | 0x80))) ||
		    ((free || free_over) && ev == 0 && sig != (SIGTRAP | 0x80) &&
		     !is_fault_signal(sig) && !is_call_end_signal(s, sig));

	return look && !is_job_control_stop(sig) && restored_itself(s);
}

/*
 * A syscall stop during a run: the marker (the call's end), the exit of
 * a syscall memattach issued, or a syscall of the call, judged at its
 * entry.  *DONE: the run ends here, with the value returned.
 */
static int on_syscall_stop(struct ma_session *s, enum run_goal goal, int fault,
			   struct user_regs_struct *out, bool *done)
{
	struct __ptrace_syscall_info info;
	bool entry;
	int rc;

	*done = true;
	if ((rc = syscall_stop_info(s->tid, &info)))
		return rc;
	entry = info.op == PTRACE_SYSCALL_INFO_ENTRY;
	if (goal == GOAL_CALL && entry)
		s->call_syscalls++;
	if (info.op == PTRACE_SYSCALL_INFO_EXIT && s->fail_at_exit)
		fail_replaced_syscall(s);
	if (info.instruction_pointer == s->stub + MA_STUB_MARKER_END) {
		if (goal == GOAL_CALL && entry && info.entry.nr == MA_STUB_MARKER_NR) {
			s->at_marker = true;
			if (!fault && s->refused_in_call)
				return refused_in_call(s);
			return fault ? fault : ma_arch_get_regs(s->tid, out);
		}
		if (goal == GOAL_SYSCALL_EXIT && info.op == PTRACE_SYSCALL_INFO_EXIT)
			return ma_arch_get_regs(s->tid, out);
	} else if (goal == GOAL_CALL && entry && fail_syscall_new_filter_refuses(s, &info) == 0 &&
		   s->fail_at_exit) {
		/* replaced: on to its exit */
	} else if (goal == GOAL_CALL && entry && waits_on_own_lock(s, &info)) {
		return skip_self_deadlock(s, info.entry.args[0]);
	} else if (goal == GOAL_CALL && entry && waits_on_loader_lock(s, &info)) {
		return skip_loader_lock(s);
	} else if (goal == GOAL_CALL && s->job_stop_seen && entry && is_futex_wait(&info) &&
		   ma_process_job_stopped(s->t->pid, s->tid)) {
		return run_stopped_under_call(s, "waits for a lock that a stopped thread holds");
	}
	*done = false;
	return 0;
}

/*
 * Resume the thread (regs already set) until the goal: the exit of the
 * syscall at the stub, or the stub marker after a call.  Signals that
 * arrive are held; a fault ends the run with MA_E_FAULT, the thread parked
 * at the marker.
 */
int run_until(struct ma_session *s, enum run_goal goal, int timeout_ms,
		     struct user_regs_struct *out)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	uint64_t stop_grace_end = 0; /* the process stopped under the call: how long we wait on */
	int fault = 0, pass_sig = 0;
	long resume = PTRACE_SYSCALL; /* PTRACE_CONT while the call runs free (free_run_begins) */
	uint64_t free_until = 0; /* ... until then (FREE_RUN_MS); 0: not free */
	bool free_over = false; /* interrupted once: no more free running, and a look at each stop */

	if (ma_ptrace(PTRACE_SYSCALL, s->tid, NULL, NULL) != 0)
		return stops_ptrace_errno("PTRACE_SYSCALL", s->tid);
	for (;;) {
		uint64_t now = ma_now_ns();
		uint64_t until = stop_grace_end && stop_grace_end < deadline ? stop_grace_end : deadline;
		int status, rc, sig, ev;

		if (free_until && free_until < until)
			until = free_until;

		/* The thread runs here (resumed below, or not yet stopped). */
		if (stop_grace_end && now >= stop_grace_end) {
			if (ma_process_job_stopped(s->t->pid, s->tid))
				return run_stopped_under_call(s, "had not returned " STR(STOPPED_GRACE_MS)
							  " ms after the stop");
			stop_grace_end = 0; /* continued meanwhile: the call's own deadline holds */
			continue;
		}
		/*
		 * A signal-delivery stop stays unreported (stops_peek): its signal
		 * is then still the kernel's should memattach die before it
		 * resumes the thread with it (SIGSTOP goes through at once).
		 */
		rc = stops_peek(s->tid, &status, now >= until ? 0 : (int)((until - now) / 1000000ULL) + 1);
		if (rc == MA_E_TIMEOUT && stop_grace_end && ma_now_ns() >= stop_grace_end)
			continue; /* judged above */
		if (rc == MA_E_TIMEOUT && free_until && ma_now_ns() >= free_until) {
			/* Free for FREE_RUN_MS with no end: stopped to see where it is. */
			free_until = 0;
			free_over = true;
			resume = PTRACE_SYSCALL;
			if (ma_ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) != 0)
				return stops_ptrace_errno("PTRACE_INTERRUPT", s->tid);
			continue;
		}
		if (rc == 0 && !stops_is_signal_stop(status))
			rc = stops_wait(s->tid, &status, 1000);
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
		if (back_on_its_own(s, free_until != 0, free_over, ev, sig)) {
			s->restored_itself = true;
			s->restored_sig = ev == 0 && sig != (SIGTRAP | 0x80) ? sig : 0;
			return ma_arch_get_regs(s->tid, out);
		}
		if (sig == (SIGTRAP | 0x80)) {
			bool done = false;

			rc = on_syscall_stop(s, goal, fault, out, &done);
			if (done)
				return rc;
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
		} else if (ev == 0 && goal == GOAL_CALL && is_call_end_signal(s, sig)) {
			s->end_seen = true;
			/*
			 * Its last entry ran.  What is left of the call (returns
			 * into the stub) needs no watching: stopped here, the
			 * way out can be the stub's, from here (no stop at the
			 * marker).  Else on to the marker, the signal dropped.
			 */
			if (!s->refused_in_call && session_stub_may_give_back(s)) {
				s->at_call_end = true;
				return ma_arch_get_regs(s->tid, out);
			}
			resume = PTRACE_SYSCALL;
		} else if (ev == 0) {
			if ((rc = on_signal_stop(s, sig, &goal, &fault, &pass_sig)))
				return rc;
		}
		if (fault || s->fail_at_exit) {
			resume = PTRACE_SYSCALL; /* to the marker (park_at_marker), or that exit */
			free_until = 0;
		} else if (resume == PTRACE_SYSCALL && !free_over && free_run_begins(s, goal, sig)) {
			resume = PTRACE_CONT;
			free_until = ma_now_ns() + FREE_RUN_MS * 1000000ULL;
		}
		/* Group stops, other syscalls (inside the call): keep going. */
		if (ma_ptrace(resume, s->tid, NULL, (void *)(long)pass_sig) != 0)
			return stops_ptrace_errno(resume == PTRACE_CONT ? "PTRACE_CONT" : "PTRACE_SYSCALL",
						  s->tid);
	}
}

static int seccomp_allows(struct ma_session *s, long nr, const uint64_t *args, int nargs,
			  const char *what)
{
	struct ma_sc_query q;

	session_judge_filters_again(s); /* one installed since (TSYNC) is judged too */
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
int run_set_trap_regs(struct ma_session *s)
{
	struct user_regs_struct trap;

	ma_arch_trap_regs(&s->saved, &s->resume, s->stub, s->area, &trap);
	return ma_arch_set_regs(s->tid, &trap);
}

/* Block the thread's signals while it is borrowed (run_borrowed_mask). */
int run_block_signals(struct ma_session *s)
{
	uint64_t mask = s->sigmask | run_borrowed_mask();
	int rc;

	/* A thread that blocks it itself keeps it blocked (not libc's own threads). */
	if (s->pass_setxid && !(s->sigmask & 1ULL << (GLIBC_SIGSETXID - 1)))
		mask &= ~(1ULL << (GLIBC_SIGSETXID - 1));
	rc = run_set_sigmask(s, mask);

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
int run_set_regs_blocked(struct ma_session *s, const struct user_regs_struct *r)
{
	int rc;

	if (!s->mask_blocked && s->trap_ok) {
		if ((rc = run_set_trap_regs(s)))
			return rc;
		s->changed = true;
		if ((rc = run_block_signals(s)))
			return rc;
	}
	if ((rc = ma_arch_set_regs(s->tid, r)))
		return rc;
	s->changed = true;
	return s->mask_blocked ? 0 : run_block_signals(s);
}

/*
 * Stopped at a call's end signal (at_call_end), the thread goes on to the
 * marker's entry, as after any call: what memattach does next starts
 * from there.  The signal is dropped (it was ours).
 */
int run_leave_call_end(struct ma_session *s)
{
	struct user_regs_struct r;
	int rc;

	if (!s->at_call_end)
		return 0;
	s->at_call_end = false;
	if ((rc = run_until(s, GOAL_CALL, s->call_timeout_ms, &r)))
		return rc;
	s->at_marker = true;
	return 0;
}

static int stub_syscall(struct ma_session *s, long nr, const uint64_t *args, int nargs,
			int timeout_ms, uint64_t *ret)
{
	struct user_regs_struct r;
	int rc;

	if ((rc = run_leave_call_end(s)))
		return rc;
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
	if ((rc = run_set_regs_blocked(s, &r)))
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

	if (!s->stub_written || s->abandoned || !s->seized || s->restored_itself)
		return ma_fail(MA_E_INTERNAL, "no session");
	rc = stub_syscall(s, nr, args, nargs, s->call_timeout_ms, ret);
	if (!rc)
		stops_test_kill_point("syscall");
	if (rc == MA_E_TIMEOUT) {
		/* Still in the syscall; it returns into the stub, which restores. */
		s->abandoned = true;
		return ma_fail(rc, "syscall %ld in thread %d did not return in %d ms; the thread was "
			       "left to finish it and restore itself", nr, s->tid, s->call_timeout_ms);
	}
	return rc;
}
