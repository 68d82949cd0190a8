/*
 * remote_call.c - borrow one thread, call functions in it, give it back.
 *
 * The only file that drives ptrace stops (arch_x86_64.c reads and writes
 * registers).  Every syscall or call runs under PTRACE_SYSCALL so the
 * thread stops at known points: a syscall we issued through a `syscall`
 * instruction found in the target, or the marker syscall of the return stub.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ma_error.h"
#include "remote.h"
#include "safepoint.h"

#define PAGE 4096UL
#define DEFAULT_DATA (1UL << 20)
#define STACK_SIZE (256UL << 10)

volatile sig_atomic_t ma_interrupted;

static void on_stop_signal(int sig)
{
	(void)sig;
	ma_interrupted = 1;
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

uint64_t ma_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * Tests only: MEMATTACH_TEST_FAULT makes every injected call jump to an
 * unmapped address.  MEMATTACH_TEST_KILL_AT=call|marker|syscall|fault makes
 * memattach SIGKILL
 * itself with the borrowed thread stopped just before a call, or stopped
 * at the return stub after one, to show the thread restores itself.
 */
static void test_kill_point(const char *where)
{
	const char *want = getenv("MEMATTACH_TEST_KILL_AT");

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
static int nstragglers;
static pid_t straggler_pid;

static void release_regs_eintr(pid_t pid, pid_t tid);
static bool real_signal_pending(pid_t pid, pid_t tid);

static void reap_stragglers(void)
{
	for (int i = 0; i < nstragglers; i++) {
		int status;
		pid_t r = waitpid(stragglers[i], &status, __WALL | WNOHANG);

		if (r == 0)
			continue;
		if (r == stragglers[i] && WIFSTOPPED(status)) {
			release_regs_eintr(straggler_pid, stragglers[i]);
			ptrace(PTRACE_DETACH, stragglers[i], NULL,
			       (void *)(long)((status >> 16) == 0 ? WSTOPSIG(status) : 0));
		}
		stragglers[i--] = stragglers[--nstragglers];
	}
}

void ma_release_stragglers(int wait_ms)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)wait_ms * 1000000ULL;

	reap_stragglers();
	while (nstragglers > 0 && ma_now_ns() < deadline) {
		usleep(1000);
		reap_stragglers();
	}
	/* Any left are detached by the kernel when memattach exits. */
}

/* Wait for TID to stop or die; MA_E_TIMEOUT (no message) after timeout_ms. */
static int wait_stop(pid_t tid, int *status, int timeout_ms)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (;;) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);
		uint64_t now;
		struct timespec ts;

		if (r == tid)
			return 0;
		if (nstragglers)
			reap_stragglers();
		if (r < 0 && errno != EINTR)
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

static int ptrace_errno(const char *what, pid_t tid)
{
	switch (errno) {
	case ESRCH:
		return ma_fail(MA_E_EXITED, "thread %d went away (%s)", tid, what);
	case EPERM:
		return ma_fail(MA_E_PERM,
			       "not permitted to trace thread %d: run as the target's user or root, "
			       "and check /proc/sys/kernel/yama/ptrace_scope",
			       tid);
	default:
		return ma_fail(MA_E_INTERNAL, "%s on thread %d failed: %s", what, tid, strerror(errno));
	}
}

static void hold_signal(struct ma_session *s)
{
	siginfo_t si;

	if (ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si) != 0)
		return;
	/* Standard signals do not queue: the kernel would merge a second one. */
	for (int i = 0; si.si_signo < SIGRTMIN && i < s->nheld; i++)
		if (s->held[i].si_signo == si.si_signo)
			return;
	if (s->nheld < MA_MAX_HELD_SIGNALS)
		s->held[s->nheld++] = si;
}

static bool is_fault(int sig, const siginfo_t *si)
{
	/* SIGSYS: a seccomp filter trapped one of our syscalls. */
	return (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
		sig == SIGTRAP || sig == SIGSYS) &&
	       si->si_code > 0;
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
 * Resume the thread (regs already set) until the goal: the exit of the
 * syscall it is entering at IP, or the stub marker.  Signals that arrive
 * are held; a fault ends the run with MA_E_FAULT, the thread parked at
 * the marker.
 */
static int run_until(struct ma_session *s, enum run_goal goal, uint64_t ip, int timeout_ms,
		     struct user_regs_struct *out)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	int fault = 0;

	if (ptrace(PTRACE_SYSCALL, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_SYSCALL", s->tid);
	for (;;) {
		uint64_t now = ma_now_ns();
		int status, rc, sig, ev;

		rc = wait_stop(s->tid, &status, now >= deadline ? 0 : (int)((deadline - now) / 1000000ULL) + 1);
		if (rc == MA_E_TIMEOUT)
			return rc;
		if (rc)
			return rc;
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			s->seized = false;
			return ma_fail(MA_E_EXITED, "the target thread %d exited during the call", s->tid);
		}
		sig = WSTOPSIG(status);
		ev = status >> 16;
		if (sig == (SIGTRAP | 0x80)) {
			struct __ptrace_syscall_info info;

			memset(&info, 0, sizeof(info));
			ptrace(PTRACE_GET_SYSCALL_INFO, s->tid, (void *)sizeof(info), &info);
			if (goal == GOAL_CALL && info.op == PTRACE_SYSCALL_INFO_ENTRY &&
			    info.instruction_pointer == s->stub + MA_STUB_MARKER_END &&
			    info.entry.nr == MA_STUB_MARKER_NR) {
				s->at_marker = true;
				return fault ? fault : ma_arch_get_regs(s->tid, out);
			}
			if (goal == GOAL_SYSCALL_EXIT && info.instruction_pointer == ip &&
			    info.op == PTRACE_SYSCALL_INFO_EXIT)
				return ma_arch_get_regs(s->tid, out);
		} else if (ev == 0) {
			siginfo_t si;

			memset(&si, 0, sizeof(si));
			ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si);
			if (is_fault(sig, &si) && !fault && s->stub_ready) {
				struct user_regs_struct r;

				ma_arch_get_regs(s->tid, &r);
				fault = ma_fail(MA_E_FAULT,
						"the injected call faulted in thread %d (signal %d at "
						"ip 0x%llx, address %p); the thread was restored",
						s->tid, sig, (unsigned long long)ma_arch_ip(&r),
						si.si_addr);
				if ((rc = park_at_marker(s)))
					return rc;
				goal = GOAL_CALL;
			} else if (is_fault(sig, &si)) {
				return ma_fail(MA_E_FAULT, "a syscall injected in thread %d faulted "
					       "(signal %d)", s->tid, sig);
			} else {
				hold_signal(s);
			}
		}
		/* Interrupt/group stops and other syscalls: keep going. */
		if (ptrace(PTRACE_SYSCALL, s->tid, NULL, NULL) != 0)
			return ptrace_errno("PTRACE_SYSCALL", s->tid);
	}
}

/*
 * Execute one syscall in the borrowed thread; *ret gets the raw result.
 *
 * Once the stub exists every syscall runs at its `syscall` instruction and
 * ends at the marker: if memattach dies meanwhile, the thread runs on into
 * the self-restore code.  Stopped at the marker already, the kernel is
 * about to run a syscall: swapping its number and arguments costs no stop.
 * Before the stub exists (the first mmap) and for its own unmapping, a
 * `syscall` instruction of libc is used; a death in those microseconds
 * would leave the thread running libc code with our registers.
 * Not single-stepping: a step ends in a SIGTRAP signal stop, which the
 * kernel would deliver (and kill the target) if memattach died there.
 */
static int raw_syscall(struct ma_session *s, uint64_t insn, long nr, const uint64_t *args,
		       int nargs, int timeout_ms, uint64_t *ret)
{
	struct user_regs_struct r = s->saved.regs;
	int rc;

	ma_arch_setup_syscall(&r, insn, nr, args, nargs);
	if ((rc = ma_arch_set_regs(s->tid, &r)))
		return rc;
	s->at_marker = false;
	rc = run_until(s, GOAL_SYSCALL_EXIT, insn + 2, timeout_ms, &r);
	if (!rc)
		*ret = ma_arch_syscall_ret(&r);
	return rc;
}

int ma_session_syscall(struct ma_session *s, long nr, const uint64_t *args, int nargs,
		       uint64_t *ret)
{
	struct user_regs_struct r;
	int rc;

	if (!s->stub_ready || s->abandoned)
		return ma_fail(MA_E_INTERNAL, "no session");
	if (s->at_marker) {
		if ((rc = ma_arch_get_regs(s->tid, &r)))
			return rc;
		ma_arch_replace_syscall(&r, nr, args, nargs);
		if ((rc = ma_arch_set_regs(s->tid, &r)))
			return rc;
		s->at_marker = false;
		rc = run_until(s, GOAL_SYSCALL_EXIT, s->stub + MA_STUB_MARKER_END, s->call_timeout_ms, &r);
		if (!rc)
			*ret = ma_arch_syscall_ret(&r);
	} else {
		rc = raw_syscall(s, s->stub + MA_STUB_SYSCALL, nr, args, nargs, s->call_timeout_ms, ret);
	}
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

/* A real signal waits for the thread: an EINTR it got is its own. */
static bool real_signal_pending(pid_t pid, pid_t tid)
{
	struct ma_proc_status st;

	if (ma_proc_read_status(pid, tid, &st) != 0) {
		ma_err_clear();
		return true;
	}
	return ((st.sig_pending | st.sig_shared_pending) & ~st.sig_blocked) != 0;
}

/* For a straggler: issue an EINTR-failed syscall again before letting go. */
/*
 * May the EINTR our stop caused be undone by issuing the syscall again?
 * Only if no real signal waits (then the EINTR is its due) and the thread
 * entered through the 64-bit `syscall` instruction the numbers are for.
 */
static bool may_reissue(pid_t pid, pid_t tid, const struct user_regs_struct *r)
{
	unsigned char insn[MA_SYSCALL_INSN_LEN];

	if (ma_mem_read(pid, ma_arch_ip(r) - MA_SYSCALL_INSN_LEN, insn, sizeof(insn)) != 0) {
		ma_err_clear();
		return false;
	}
	return ma_arch_is_syscall_insn(insn) && !real_signal_pending(pid, tid);
}

static void release_regs_eintr(pid_t pid, pid_t tid)
{
	struct user_regs_struct r, resume;

	if (ma_arch_get_regs(tid, &r) != 0) {
		ma_err_clear();
		return;
	}
	if (ma_arch_interrupted_eintr(&r) && may_reissue(pid, tid, &r)) {
		ma_arch_resume_regs(&r, true, &resume);
		ma_arch_set_regs(tid, &resume);
	}
}

/*
 * Let a thread we only looked at go.  The kernel restarts an interrupted
 * syscall by itself, except the ones that fail with EINTR when stopped:
 * those get the registers that issue them again.
 */
static void release_untouched(struct ma_session *s, int held_sig)
{
	if (s->resume_valid && s->resume.rip != s->saved.regs.rip &&
	    ma_arch_interrupted_eintr(&s->saved.regs))
		ma_arch_set_regs(s->tid, &s->resume);
	ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)held_sig);
	s->seized = false;
}

/* Stop TI's thread and examine it; 0 = seized and safe, else detached. */
static int try_thread(struct ma_session *s, const struct ma_thread_info *ti,
		      struct ma_backtrace *btp, char *why, size_t whylen)
{
	struct ma_backtrace local, *bt = btp ? btp : &local;
	int status, rc, sig, held_sig = 0;

	s->tid = ti->tid;
	memset(&s->resume, 0, sizeof(s->resume));
	s->resume_valid = false;
	if (ptrace(PTRACE_SEIZE, ti->tid, NULL, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
		if (errno == EPERM) {
			struct ma_proc_status st;

			if (ma_proc_read_status(s->t->pid, 0, &st) == 0 && st.tracer)
				return ma_fail(MA_E_TRACED,
					       "process %d is already traced by pid %d (a debugger?); "
					       "detach it first", s->t->pid, st.tracer);
		}
		return ptrace_errno("PTRACE_SEIZE", ti->tid);
	}
	s->seized = true;
	s->t_stop_ns = ma_now_ns();
	if (ptrace(PTRACE_INTERRUPT, ti->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_INTERRUPT", ti->tid);
	rc = wait_stop(ti->tid, &status, 1000);
	if (rc == MA_E_TIMEOUT) {
		snprintf(why, whylen, "did not stop within 1 s");
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
		ptrace(PTRACE_DETACH, ti->tid, NULL, NULL);
		s->seized = false;
		return MA_E_NOSAFE;
	}
	if ((status >> 16) == 0)
		held_sig = sig; /* a signal was being delivered */
	if ((rc = ma_arch_get_state(ti->tid, &s->saved)))
		goto unsafe;
	ma_arch_resume_regs(&s->saved.regs,
			    !held_sig && ma_arch_interrupted_eintr(&s->saved.regs) &&
				    may_reissue(s->t->pid, ti->tid, &s->saved.regs),
			    &s->resume);
	s->resume_valid = true;
	if (ma_unwind(ti->tid, bt) != 0) {
		ma_err_clear();
		snprintf(why, whylen, "stack could not be unwound");
		goto unsafe;
	}
	if (!ma_thread_is_safe(s->t, ti, bt, why, whylen))
		goto unsafe;
	if (held_sig)
		hold_signal(s);
	s->held_sig = held_sig;
	snprintf(s->why, sizeof(s->why), "thread %d (%s): %s", ti->tid, ti->name, why);
	return 0;
unsafe:
	release_untouched(s, held_sig);
	s->stopped_ns += ma_now_ns() - s->t_stop_ns;
	return MA_E_NOSAFE;
}

static int choose_thread(struct ma_session *s, const struct ma_session_opts *o)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)o->deadline_ms * 1000000ULL;
	char why[256] = "", last[400] = "no thread found";
	bool seen = false;

	for (unsigned round = 0;; round++) {
		struct ma_thread_info *ti;
		size_t n;
		int rc = ma_list_threads(s->t->pid, &ti, &n);

		if (rc)
			return rc;
		for (size_t i = 0; i < n; i++) {
			if (!thread_wanted(o, &ti[i]))
				continue;
			seen = true;
			rc = try_thread(s, &ti[i], NULL, why, sizeof(why));
			if (rc == 0) {
				free(ti);
				return 0;
			}
			if (rc == MA_E_PERM || rc == MA_E_TRACED) {
				free(ti);
				return rc;
			}
			if (rc == MA_E_TIMEOUT && s->seized) {
				/* Stuck in an uninterruptible sleep: it stops when it can. */
				if (nstragglers < MAX_STRAGGLERS) {
					straggler_pid = s->t->pid;
					stragglers[nstragglers++] = ti[i].tid;
				}
				s->seized = false;
			}
			ma_err_clear();
			snprintf(last, sizeof(last), "thread %d (%s): %s", ti[i].tid, ti[i].name, why);
		}
		free(ti);
		if (o->tid && !seen)
			return ma_fail(MA_E_NOPROC, "thread %d is not a thread of process %d", o->tid,
				       s->t->pid);
		if (ma_interrupted)
			return ma_fail(MA_E_NOSAFE, "interrupted while looking for a safe thread");
		if (ma_now_ns() >= deadline)
			return ma_fail(MA_E_NOSAFE,
				       "no thread of process %d was safe to borrow within %d ms "
				       "(last: %s); try again or raise --timeout",
				       s->t->pid, o->deadline_ms, last);
		/* Let the threads run a little: a lock holder finishes. */
		usleep(round < 20 ? 500 : 5000);
	}
}

#define CODE_BYTES 256 /* stub + batch runner; the saved state follows */
#define GADGET_TIMEOUT_MS 30000

/*
 * Two mappings in the target.  The code mapping (read+execute, never
 * writable by the target: we write it through /proc/PID/mem) holds the
 * stub, the batch runner and the saved state the stub restores from.  The
 * data mapping (read+write) holds buffers and the private stack.  Only the
 * first mmap runs at a libc `syscall` instruction; the second already goes
 * through the stub.
 */
static int map_scratch(struct ma_session *s, size_t data_size)
{
	size_t area = ma_arch_state_area_size(s->saved.xstate_len);
	size_t code_len = (CODE_BYTES + area + PAGE - 1) & ~(PAGE - 1);
	size_t data_len = data_size + STACK_SIZE;
	uint64_t args[6] = { 0, code_len, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
			     (uint64_t)-1, 0 };
	unsigned char *image;
	uint64_t addr;
	int rc;

	rc = raw_syscall(s, s->t->syscall_insn, SYS_mmap, args, 6, GADGET_TIMEOUT_MS, &addr);
	if (rc)
		return rc;
	if (addr > (uint64_t)-4096)
		return ma_fail(MA_E_NOMEM, "mmap of %zu bytes in the target failed: %s", code_len,
			       strerror((int)-addr));
	s->code = s->stub = addr;
	s->code_len = code_len;
	s->code_mapped = true;
	s->batch_fn = s->stub + MA_STUB_MAX;

	image = aligned_alloc(64, code_len);
	if (!image)
		return ma_fail(MA_E_NOMEM, "out of memory");
	memset(image, 0xcc, CODE_BYTES);
	ma_arch_build_stub(image, s->stub, image + CODE_BYTES, s->stub + CODE_BYTES, &s->resume,
			   &s->saved);
	ma_arch_build_batch(image + MA_STUB_MAX);
	rc = ma_mem_write(s->t->pid, addr, image, CODE_BYTES + area);
	free(image);
	if (rc)
		return rc;
	s->stub_ready = true;

	args[1] = data_len;
	args[2] = PROT_READ | PROT_WRITE;
	rc = ma_session_syscall(s, SYS_mmap, args, 6, &addr);
	if (rc)
		return rc;
	if (addr > (uint64_t)-4096)
		return ma_fail(MA_E_NOMEM, "mmap of %zu bytes in the target failed: %s", data_len,
			       strerror((int)-addr));
	s->scratch = s->data = addr;
	s->scratch_len = data_len;
	s->mapped = true;
	s->data_len = data_size;
	s->stack_top = addr + data_len;
	return 0;
}

int ma_session_open(struct ma_session *s, struct ma_target *t, const struct ma_session_opts *o)
{
	int rc;

	memset(s, 0, sizeof(*s));
	s->t = t;
	s->call_timeout_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : 5000;
	if ((rc = ma_arch_state_alloc(&s->saved)))
		return rc;
	rc = choose_thread(s, o);
	if (rc)
		return rc;
	rc = map_scratch(s, o->data_size ? o->data_size : DEFAULT_DATA);
	if (rc) {
		int err = rc;

		ma_session_close(s);
		return err;
	}
	return 0;
}

int ma_session_call_timeout(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
			    uint64_t *ret, int timeout_ms)
{
	struct user_regs_struct r = s->saved.regs;
	uint64_t retaddr = s->stub;
	int rc;

	if (!s->seized || !s->mapped || s->abandoned)
		return ma_fail(MA_E_INTERNAL, "no session");
	rc = ma_mem_write(s->t->pid, (s->stack_top & ~15ULL) - 8, &retaddr, 8);
	if (rc)
		return rc;
	if (getenv("MEMATTACH_TEST_FAULT") && *getenv("MEMATTACH_TEST_FAULT"))
		fn = 16; /* tests only: a call that faults at once */
	ma_arch_setup_call(&r, fn, args, nargs, s->stack_top, retaddr);
	if ((rc = ma_arch_set_regs(s->tid, &r)))
		return rc;
	s->ncalls++;
	s->at_marker = false;
	test_kill_point("call");
	rc = run_until(s, GOAL_CALL, 0, timeout_ms, &r);
	if (!rc) {
		s->at_marker = true;
		test_kill_point("marker");
	}
	if (rc == MA_E_TIMEOUT) {
		/*
		 * The call is still running (waiting for a lock?).  We cannot
		 * restore a thread in the middle of jemalloc; leave it to
		 * finish and restore itself through the stub.
		 */
		s->abandoned = true;
		return ma_fail(MA_E_TIMEOUT,
			       "the call in thread %d did not return within %d ms; the thread was "
			       "left to finish it and restore itself",
			       s->tid, timeout_ms);
	}
	if (rc == MA_E_FAULT)
		test_kill_point("fault");
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

/*
 * Stop the running thread again so it can be detached.  Returns the signal
 * of a signal-delivery stop caught on the way (to pass on), or 0.
 */
static int stop_for_detach(struct ma_session *s)
{
	int status;

	if (ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) == 0 &&
	    wait_stop(s->tid, &status, 1000) == 0 && WIFSTOPPED(status) && (status >> 16) == 0)
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
	if (ptrace(PTRACE_CONT, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_CONT", s->tid);
	while (next < s->nheld) {
		siginfo_t si;
		int status, sig;

		if (wait_stop(s->tid, &status, 1000) != 0 || !WIFSTOPPED(status))
			break;
		if ((status >> 16) != 0) {
			ptrace(PTRACE_CONT, s->tid, NULL, NULL);
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
		ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si);
		if (!is_our_copy(&si) && s->nheld < MA_MAX_HELD_SIGNALS)
			s->held[s->nheld++] = si;
		ptrace(PTRACE_SETSIGINFO, s->tid, NULL, &s->held[next]);
		sig = s->held[next++].si_signo;
		s->redelivered = next;
		if (next == s->nheld)
			return ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig) == 0
				       ? 0
				       : ptrace_errno("PTRACE_DETACH", s->tid);
		ptrace(PTRACE_CONT, s->tid, NULL, (void *)(long)sig);
	}
	/* The thread did not come back in time: let it go; placeholders stay queued. */
	ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)stop_for_detach(s));
	return 0;
}

/*
 * A thread stopped in a syscall that the kernel restarts (-ERESTART*) gets
 * its registers exactly as stopped, and the kernel's own signal path does
 * the restart: we queue an interrupt (which makes the thread pass through
 * get_signal on its way out), let it reach that stop and detach there.  A
 * signal that arrived meanwhile is then handled by the kernel itself,
 * EINTR or restart by the handler's SA_RESTART, as if we had never been
 * there.  The interrupt is queued before the registers are set: should
 * memattach die in between, the pending wake-up still sends the thread
 * through the restart code.
 */
static int detach_through_signal_path(struct ma_session *s)
{
	int status, sig = 0;

	if (ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_INTERRUPT", s->tid);
	if (ma_arch_set_regs(s->tid, &s->saved.regs) || ma_arch_set_xstate(s->tid, &s->saved))
		return MA_E_INTERNAL;
	if (ptrace(PTRACE_CONT, s->tid, NULL, NULL) != 0)
		return ptrace_errno("PTRACE_CONT", s->tid);
	if (wait_stop(s->tid, &status, 1000) == 0 && WIFSTOPPED(status) && (status >> 16) == 0)
		sig = WSTOPSIG(status); /* a real signal: deliver it as the kernel would */
	if (ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig) != 0)
		return ptrace_errno("PTRACE_DETACH", s->tid);
	return 0;
}

/* Give the thread back: its registers, xstate and held signals. */
static int restore_and_detach(struct ma_session *s)
{
	int rc = 0;

	if (!s->nheld && ma_arch_in_restartable_syscall(&s->saved.regs)) {
		rc = detach_through_signal_path(s);
	} else {
		if (ma_arch_set_regs(s->tid, &s->resume) || ma_arch_set_xstate(s->tid, &s->saved))
			rc = MA_E_INTERNAL;
		if (s->nheld)
			redeliver_and_detach(s);
		else if (ptrace(PTRACE_DETACH, s->tid, NULL, NULL) != 0 && !rc)
			rc = ptrace_errno("PTRACE_DETACH", s->tid);
	}
	s->seized = false;
	return rc;
}

/* Let an abandoned thread finish its call; the stub restores it. */
static void let_go_abandoned(struct ma_session *s)
{
	int sig = stop_for_detach(s);

	ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig);
	for (int i = 0; i < s->nheld; i++)
		syscall(SYS_tgkill, s->t->pid, s->tid, s->held[i].si_signo);
	s->seized = false;
}

int ma_session_close(struct ma_session *s)
{
	uint64_t args[2], ret;
	int rc = 0, rc2;

	if (s->seized && !s->abandoned && s->mapped) {
		args[0] = s->scratch;
		args[1] = s->scratch_len;
		rc = ma_session_syscall(s, SYS_munmap, args, 2, &ret);
		if (!rc)
			s->mapped = false;
	}
	if (s->seized && s->abandoned)
		let_go_abandoned(s); /* mappings stay: the thread still uses them */
	if (s->seized && s->code_mapped && !s->mapped) {
		/* The stub cannot unmap itself: a libc syscall instruction does. */
		args[0] = s->code;
		args[1] = s->code_len;
		rc2 = raw_syscall(s, s->t->syscall_insn, SYS_munmap, args, 2, GADGET_TIMEOUT_MS, &ret);
		if (!rc2)
			s->code_mapped = false;
		rc = rc ? rc : rc2;
	}
	if (s->seized) {
		rc2 = restore_and_detach(s);
		rc = rc ? rc : rc2;
	}
	if (s->t_stop_ns)
		s->stopped_ns += ma_now_ns() - s->t_stop_ns;
	s->t_stop_ns = 0;
	ma_arch_state_free(&s->saved);
	return rc;
}

int ma_inspect_thread(struct ma_target *t, const struct ma_thread_info *ti, struct ma_backtrace *bt,
		      char *why, size_t whylen, bool *safe)
{
	struct ma_session s;
	int rc;

	memset(&s, 0, sizeof(s));
	s.t = t;
	bt->n = 0;
	if ((rc = ma_arch_state_alloc(&s.saved)))
		return rc;
	rc = try_thread(&s, ti, bt, why, whylen);
	*safe = rc == 0;
	if (rc == 0) /* safe, but we only wanted to look */
		release_untouched(&s, s.held_sig); else if (rc == MA_E_TIMEOUT && s.seized) {
		int status;

		if (wait_stop(ti->tid, &status, 200) == 0 && WIFSTOPPED(status))
			ptrace(PTRACE_DETACH, ti->tid, NULL, NULL);
	}
	ma_arch_state_free(&s.saved);
	if (rc == MA_E_NOSAFE || rc == MA_E_TIMEOUT)
		rc = 0;
	return rc;
}
