/*
 * seccomp.h - would the seccomp filters of a target thread let our syscalls
 * through?
 *
 * memattach makes a borrowed thread execute syscalls (and calls whose own
 * syscalls run in that thread).  A seccomp filter may answer one of them with
 * KILL_PROCESS, TRAP (SIGSYS), ERRNO, ...  Before borrowing a thread we read
 * its filters with PTRACE_SECCOMP_GET_FILTER and run them here, over the
 * seccomp_data the kernel would build, with a classic-BPF interpreter that
 * accepts exactly what the kernel's seccomp loader accepts.
 */
#ifndef MA_SECCOMP_H
#define MA_SECCOMP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <linux/filter.h>  /* struct sock_filter */
#include <linux/seccomp.h> /* struct seccomp_data, SECCOMP_RET_* */

/*
 * Arguments only known once the call runs, as a query gives them: an
 * address (a typical mmap address) and a descriptor the call opens.  A
 * filter that reads such an argument could answer the real value
 * otherwise, so ma_seccomp_check refuses it.
 */
#define MA_SC_UNCHOSEN_ADDR 0x7f0000000000ULL
#define MA_SC_UNCHOSEN_FD 1000

/* One syscall memattach will make the borrowed thread execute, as seccomp sees it. */
struct ma_sc_query {
	int nr;           /* syscall number (x86-64); may be -1 ("skipped" syscall, a tracer set
			     orig_rax=-1: the kernel still runs the filter with nr = -1) */
	uint64_t args[6];
	uint64_t ip;      /* seccomp_data.instruction_pointer: the address AFTER the 2-byte
			     syscall instruction */
	const char *what; /* for messages, e.g. "mmap (scratch code page)" */
};

/*
 * Seccomp mode of thread TID of process PID, from the "Seccomp:" line of
 * /proc/PID/task/TID/status: 0 none, 1 strict, 2 filter; -1 if unreadable.
 */
int ma_seccomp_mode(pid_t pid, pid_t tid);
/* The same, read (afresh) from an open /proc/PID/task/TID/status: one pread. */
int ma_seccomp_mode_of(int status_fd);
/*
 * Mode and filter count of the thread whose status STATUS_FD is open
 * ("Seccomp:" and "Seccomp_filters:", Linux 5.9+), as one number that
 * moves when a filter is added: mode * 65536 + filters; -1 unreadable.
 */
long ma_seccomp_state_of(int status_fd);
/* The same for thread TID of PID, opened and closed here. */
long ma_seccomp_state(pid_t pid, pid_t tid);
/*
 * A thread of PID whose state (ma_seccomp_state) is not STATE: its tid,
 * its state into *THEIRS; 0 when every thread's is (threads that end
 * meanwhile are skipped).  Two filters installed one per thread with the
 * same count look alike here: only a stop can tell them apart.
 */
pid_t ma_seccomp_thread_unlike(pid_t pid, long state, long *theirs);

/*
 * TID is ptrace-seized by us and currently stopped (the caller guarantees it).
 * Returns 0 if the thread has no seccomp filter, or if every query's verdict
 * (all filters run, the most restrictive action wins, as in the kernel) is
 * ALLOW or LOG.  Otherwise fails with MA_E_SECCOMP: strict mode, a query that
 * would be answered with another action, or filters that cannot be read
 * (the message says why).
 */
int ma_seccomp_check(pid_t pid, pid_t tid, const struct ma_sc_query *q, size_t n);

/*
 * TID (seized, stopped): may one of its filters hand a syscall to a
 * supervisor (SECCOMP_RET_USER_NOTIF)?  1 yes or unknown, 0 no.  A thread
 * stopped while it waits for that answer has the request withdrawn.
 */
int ma_seccomp_may_notify(pid_t pid, pid_t tid);

/*
 * Pure evaluator: run one classic-BPF seccomp program over D.  Returns the
 * program's SECCOMP_RET_* value (all 32 bits).  A program the kernel would
 * refuse to install returns SECCOMP_RET_KILL_PROCESS; a division by a zero X
 * at run time returns 0 (SECCOMP_RET_KILL_THREAD), as in the kernel.
 */
uint32_t ma_seccomp_eval(const struct sock_filter *prog, size_t len, const struct seccomp_data *d);
/* The same; *READS gets (ORed in) bit W for each 32-bit word W of D the run loaded. */
uint32_t ma_seccomp_eval_reads(const struct sock_filter *prog, size_t len, const struct seccomp_data *d,
			       uint32_t *reads);

#endif
