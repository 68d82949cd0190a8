/*
 * ownthread.c - a thread of memattach's own in a live target: made by one
 * call in a borrowed thread, ended by one interrupt (include/ownthread.h).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch.h"
#include "ma_error.h"
#include "ownthread.h"
#include "runclock.h"
#include "safepoint.h"
#include "seccomp.h"
#include "steps.h"

bool ma_own_thread_possible(struct ma_target *t)
{
	return t->own_fns.create && t->libc_code.hi && ma_target_tid_offset(t) > 0;
}

#define FREE_RUN_OFF 1

enum { E_ATTR_INIT, E_DETACHED, E_STACKSIZE, E_CREATE, E_ATTR_DESTROY, E_END_UNBLOCK, E_END_SEND,
       N_ENTRIES };

/*
 * A signal to tell the making's end by (remote.h's end_sig), or 0: one
 * the program ignores (SIG_IGN, or no handler for a signal whose default
 * is to ignore it), that the thread does not block itself and that waits
 * for no one.  Should memattach die while it is on its way, the kernel
 * drops it: nothing of the program runs.  Not the stop signals or
 * SIGCONT, whose sending alone changes a stopped process; not a fault.
 */
static int quiet_signal(struct ma_session *s, const struct ma_proc_status *st)
{
	static const int by_default[] = { SIGWINCH, SIGURG, SIGCHLD };
	uint64_t busy = st->sig_caught | s->sigmask | st->sig_pending | st->sig_shared_pending;

	for (size_t i = 0; i < sizeof(by_default) / sizeof(by_default[0]); i++)
		if (!(busy & 1ULL << (by_default[i] - 1)))
			return by_default[i];
	for (int sig = 1; sig < 32; sig++)
		if ((st->sig_ignored & 1ULL << (sig - 1)) && !(busy & 1ULL << (sig - 1)) &&
		    sig != SIGKILL && sig != SIGSTOP && sig != SIGCONT && sig != SIGTSTP &&
		    sig != SIGTTIN && sig != SIGTTOU && sig != SIGSEGV && sig != SIGBUS &&
		    sig != SIGILL && sig != SIGFPE && sig != SIGTRAP && sig != SIGSYS)
			return sig;
	return 0;
}

/*
 * The making's last two entries, so that it runs with no stop per syscall
 * (remote.h's end_sig): unblock that signal, then tgkill its own thread
 * with it (delivered on the syscall's way out: the stop).  Both after
 * pthread_create, whose new thread takes the mask the call has.  Never
 * left pending: the program setting its disposition to ignore it would
 * discard it (attack 43); it can still do so in the instant between the
 * sending and the delivery, and the end is then found by a look after
 * FREE_RUN_MS (session_run.c).  Ids as the process sees them (its pid
 * namespace).  False: no such signal, no libc syscall(), or --strict;
 * then the two entries do nothing.
 */
static bool end_by_signal(struct ma_session *s, uint64_t set, struct ma_batch_entry *unblock,
			  struct ma_batch_entry *send)
{
	const struct ma_range *fn = &s->t->own_fns.syscall_fn;
	struct ma_proc_status st;
	uint64_t bit;
	int sig;

	/*
	 * Off: under setgid() every millisecond (own_thread.sh, daemon -u) a
	 * thread given back this way still met the stub's bytes put back
	 * under it (SIGSEGV), after 3fe7525 too; not understood yet.
	 */
	if (FREE_RUN_OFF || s->strict || !fn->lo || !set || ma_proc_read_status(s->t->proc_pid, s->tid, &st) != 0 ||
	    st.ns_tgid <= 0 || st.ns_pid <= 0 || !(sig = quiet_signal(s, &st))) {
		ma_err_clear();
		return false;
	}
	bit = 1ULL << (sig - 1);
	if (ma_mem_write(s->t->proc_pid, set, &bit, sizeof(bit)) != 0) {
		ma_err_clear();
		return false;
	}
	*unblock = (struct ma_batch_entry){ fn->lo, { SYS_rt_sigprocmask, SIG_UNBLOCK, set, 0, sizeof(bit) }, 0 };
	*send = (struct ma_batch_entry){ fn->lo, { SYS_tgkill, (uint64_t)st.ns_tgid, (uint64_t)st.ns_pid,
						   (uint64_t)sig }, 0 };
	s->end_sig = sig;
	s->end_fn = *fn;
	return true;
}

/* The thread pointer the new thread got, and the tid its descriptor names. */
static int read_new_thread(struct ma_session *s, uint64_t slot, struct ma_own_thread *h)
{
	struct ma_target *t = s->t;
	uint64_t pd = 0;
	int32_t tid = 0;
	int rc;

	if ((rc = ma_mem_read(t->proc_pid, slot, &pd, sizeof(pd))) ||
	    (rc = ma_mem_read(t->proc_pid, pd + (uint64_t)ma_target_tid_offset(t), &tid, sizeof(tid))))
		return rc;
	if (tid <= 0)
		return ma_fail(MA_E_INTERNAL, "the new thread's descriptor names no thread (tid %d)", tid);
	*h = (struct ma_own_thread){ tid, pd };
	return 0;
}

int ma_own_thread_make(struct ma_session *s, struct ma_own_thread *h)
{
	const struct ma_own_fns *f = &s->t->own_fns;
	uint64_t attr = ma_session_alloc(s, 128), slot = ma_session_alloc(s, 16);
	uint64_t table = ma_session_alloc(s, N_ENTRIES * sizeof(struct ma_batch_entry));
	uint64_t end_set = ma_session_alloc(s, 8);
	/*
	 * Its mask is the one the borrowed thread has during the call, which
	 * pthread_create passes on (less SIGCANCEL): every signal blocked but
	 * the faults and glibc's SIGSETXID (maker.pass_setxid), so no handler
	 * of the program runs in it and a setuid() is not kept waiting for it.
	 * Not pthread_attr_setsigmask_np: it callocs, and a calloc through
	 * the agent's wrappers may unwind and wait on the loader's lock before
	 * the call's first syscall, a wait the maker gives up (session_run.c)
	 * with a wrapper's in-flight count then never given back.
	 */
	struct ma_batch_entry e[N_ENTRIES] = {
		[E_ATTR_INIT] = { f->attr_init, { attr } },
		[E_DETACHED] = { f->attr_setdetach, { attr, PTHREAD_CREATE_DETACHED } },
		/*
		 * A stack size no program thread of the default size can take
		 * from glibc's cache: once a run has made it, it waits there
		 * for the next run's thread, whose pthread_create then maps
		 * nothing (a map change waits for the map lock, which a
		 * program making threads by the thousand holds most of the
		 * time).  It also leaves 256 KiB cached, not 8 MiB.
		 */
		[E_STACKSIZE] = { f->attr_setstacksize, { attr, MA_OWN_STACK_SIZE } },
		[E_CREATE] = { f->create, { slot, attr, f->sleep, MA_OWN_SLEEP_S } },
		[E_ATTR_DESTROY] = { f->attr_destroy, { attr } },
	};
	size_t n = N_ENTRIES;
	int rc, end_sig;

	memset(h, 0, sizeof(*h));
	if (!f->create || !attr || !slot || !table)
		return ma_fail(MA_E_INTERNAL, "no room or no pthread_create for a thread of our own");
	if (!end_by_signal(s, end_set, &e[E_END_UNBLOCK], &e[E_END_SEND]))
		n = E_END_UNBLOCK;
	end_sig = s->end_sig;
	if ((rc = ma_mem_write(s->t->proc_pid, table, e, sizeof(e))) ||
	    (rc = ma_session_call_batch(s, table, n, 0)))
		return rc;
	/*
	 * Its end signal lost, the thread went back by itself and has run its
	 * own code since, over the table on its stack: nothing in it can be
	 * trusted.  A thread made sleeps out its time (as after any failure).
	 */
	if (s->restored_itself)
		return ma_fail(MA_E_NOSAFE, "the end of the call making memattach's thread in thread %d "
			       "was not seen: its signal %d never came (a program that sets that signal's "
			       "disposition meanwhile drops it); the thread went back by itself", s->tid, end_sig);
	if ((rc = ma_mem_read(s->t->proc_pid, table, e, sizeof(e))))
		return rc;
	for (int i = 0; i < E_ATTR_DESTROY; i++)
		if ((int)e[i].ret)
			return ma_fail(MA_E_IO, "%s in process %d failed: %s",
				       i == E_CREATE ? "pthread_create" : "setting up its attributes",
				       s->t->pid, strerror((int)e[i].ret));
	return read_new_thread(s, slot, h);
}

int ma_own_thread_wait_asleep(pid_t pid, const struct ma_own_thread *h, int timeout_ms)
{
	uint64_t until = ma_now_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		long nr = ma_thread_syscall_nr(pid, h->tid);

		if (nr == -1 && ma_thread_going(pid, h->tid))
			return ma_fail(MA_E_EXITED, "memattach's thread %d in process %d ended before "
				       "it could be used", h->tid, pid);
		if (ma_syscall_is_sleep(nr))
			return 0;
		if (ma_now_ns() > until)
			return ma_fail(MA_E_TIMEOUT, "memattach's thread %d in process %d did not reach "
				       "its sleep within %d ms", h->tid, pid, timeout_ms);
		usleep(200);
	}
}

/* Wait up to TIMEOUT_MS for TID's next stop: its status, or -1. */
static int wait_stop(pid_t tid, int timeout_ms)
{
	uint64_t until = ma_now_ns() + (uint64_t)timeout_ms * 1000000;
	int status;

	for (;;) {
		pid_t r = waitpid(tid, &status, __WALL | WNOHANG);

		if (r == tid)
			return status;
		if (r < 0 && errno != EINTR)
			return -1;
		if (ma_now_ns() > until)
			return -1;
		usleep(100);
	}
}

/*
 * Wait for the interrupt stop of TID: its status, or -1 (no stop), or
 * -(100 + SIG) when a stop for a signal's delivery came instead and the
 * signal could not be passed on (the caller detaches with SIG).
 * A signal on its way (glibc's SIGSETXID: a setuid() waits until every
 * thread has taken it, and a thread that ends without taking it waits
 * for it for ever) is passed on, never dropped.
 */
static int interrupt_stop(pid_t tid)
{
	for (int tries = 0; tries < 8; tries++) {
		int status = wait_stop(tid, 1000);

		if (status < 0 || !WIFSTOPPED(status))
			return -1;
		if ((status >> 16) != 0)
			return status; /* the interrupt's (PTRACE_EVENT_STOP) */
		if (ma_ptrace(PTRACE_CONT, tid, NULL, (void *)(long)WSTOPSIG(status)) != 0)
			return -(100 + WSTOPSIG(status));
	}
	return -1;
}

void ma_own_thread_end(pid_t pid, struct ma_own_thread *h)
{
	struct user_regs_struct r;
	int status;
	bool ours;

	if (!h->tid)
		return;
	/*
	 * Given back, it goes through its restore into its sleep again.  Not
	 * asleep after a while, or gone: left to sleep out its time.  So is a
	 * thread under a seccomp filter (one synced from another thread):
	 * interrupted, its sleep would go on through restart_syscall should
	 * memattach die before ending it, which the filter may refuse.
	 */
	if (ma_seccomp_mode(pid, h->tid) != 0 || ma_own_thread_wait_asleep(pid, h, 1000) ||
	    ma_ptrace(PTRACE_SEIZE, h->tid, NULL, NULL) != 0) {
		ma_err_clear();
		h->tid = 0;
		return;
	}
	status = -1;
	if (ma_ptrace(PTRACE_INTERRUPT, h->tid, NULL, NULL) != 0 || (status = interrupt_stop(h->tid)) < 0) {
		ma_ptrace(PTRACE_DETACH, h->tid, NULL, (void *)(long)(status <= -100 ? -status - 100 : 0));
		h->tid = 0;
		return;
	}
	/* Stopped inside its sleep, as the thread that borrowed it was (session_thread.c). */
	ours = ma_arch_get_regs(h->tid, &r) == 0 && ma_arch_thread_pointer(&r) == h->pd &&
	       ma_syscall_is_sleep(ma_arch_restartable_syscall_nr(&r));
	if (ours) {
		ma_arch_finish_syscall(&r, 0);
		if (ma_arch_set_regs(h->tid, &r))
			ma_err_clear();
	}
	ma_ptrace(PTRACE_DETACH, h->tid, NULL, NULL);
	ma_err_clear();
	h->tid = 0;
}
