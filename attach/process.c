/*
 * process.c - what /proc says of a process and its threads: status,
 * names, whether it exits, execs or is stopped, resident pages.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <signal.h>
#include <unistd.h>

#include "arch.h"
#include "elfsyms.h"
#include "ma_error.h"
#include "steps.h"
#include "target.h"
#include "input.h"


static uint64_t kb_field(const char *line)
{
	unsigned long long v = 0;

	sscanf(line, "%*s %llu", &v);
	return (uint64_t)v * 1024;
}

/* The last number on a line of ids (NSpid: one per nested pid namespace, the innermost last). */
static pid_t last_number(const char *p)
{
	long v = 0;

	for (char *end; *p && *p != '\n'; p = end) {
		long n = strtol(p, &end, 10);

		if (end == p)
			break;
		v = n;
	}
	return (pid_t)v;
}

int ma_proc_read_status(pid_t pid, pid_t tid, struct ma_proc_status *st)
{
	char path[64], line[256];
	FILE *f;

	if (tid > 0)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	else
		snprintf(path, sizeof(path), "/proc/%d/status", pid);
	memset(st, 0, sizeof(*st));
	st->real_uid = st->threads = -1;
	f = fopen(path, "re");
	if (!f) {
		if (errno == ENOENT || errno == ESRCH)
			return ma_fail(MA_E_NOPROC, "no process with pid %d", pid);
		return ma_fail(errno == EACCES ? MA_E_PERM : MA_E_IO,
			       "cannot read %s: %s", path, strerror(errno));
	}
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Name:", 5) == 0) {
			char *p = line + 5;

			while (*p == ' ' || *p == '\t')
				p++;
			p[strcspn(p, "\n")] = '\0';
			size_t n = strlen(p);

			if (n >= sizeof(st->name))
				n = sizeof(st->name) - 1;
			memcpy(st->name, p, n);
			st->name[n] = '\0';
		} else if (strncmp(line, "State:", 6) == 0) {
			sscanf(line + 6, " %c", &st->state);
		} else if (strncmp(line, "Tgid:", 5) == 0) {
			st->tgid = atoi(line + 5);
		} else if (strncmp(line, "Uid:", 4) == 0) {
			st->real_uid = strtol(line + 4, NULL, 10);
		} else if (strncmp(line, "Threads:", 8) == 0) {
			st->threads = strtol(line + 8, NULL, 10);
		} else if (strncmp(line, "TracerPid:", 10) == 0) {
			st->tracer = atoi(line + 10);
		} else if (strncmp(line, "SigPnd:", 7) == 0) {
			st->sig_pending = strtoull(line + 7, NULL, 16);
		} else if (strncmp(line, "ShdPnd:", 7) == 0) {
			st->sig_shared_pending = strtoull(line + 7, NULL, 16);
		} else if (strncmp(line, "SigBlk:", 7) == 0) {
			st->sig_blocked = strtoull(line + 7, NULL, 16);
		} else if (strncmp(line, "SigIgn:", 7) == 0) {
			st->sig_ignored = strtoull(line + 7, NULL, 16);
		} else if (strncmp(line, "SigCgt:", 7) == 0) {
			st->sig_caught = strtoull(line + 7, NULL, 16);
		} else if (strncmp(line, "NStgid:", 7) == 0) {
			st->ns_tgid = last_number(line + 7);
		} else if (strncmp(line, "NSpid:", 6) == 0) {
			st->ns_pid = last_number(line + 6);
		} else if (strncmp(line, "VmRSS:", 6) == 0) {
			st->vm_rss = kb_field(line);
		} else if (strncmp(line, "VmHWM:", 6) == 0) {
			st->vm_hwm = kb_field(line);
		}
	}
	fclose(f);
	return 0;
}

int ma_read_comm_file(const char *path, char *out, size_t len)
{
	FILE *f;
	size_t n;

	if (!(f = fopen(path, "re")))
		return -1;
	/* Whole: a name may hold a newline of its own; only the kernel's last one goes. */
	n = fread(out, 1, len - 1, f);
	fclose(f);
	out[n] = '\0';
	if (n && out[n - 1] == '\n')
		out[n - 1] = '\0';
	return n ? 0 : -1;
}

const char *ma_comm_of(pid_t pid)
{
	static char comm[32];
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	if (ma_read_comm_file(path, comm, sizeof(comm)) != 0)
		strcpy(comm, "?");
	return comm;
}

/*
 * /proc/PID/stat read whole into BUF (LEN bytes): its fields after the
 * name, or NULL.  Whole, not a line: the name in it may hold anything.
 */
static const char *stat_after_name(pid_t pid, char *buf, size_t len)
{
	char path[64];
	char *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!(f = fopen(path, "re")))
		return NULL;
	buf[fread(buf, 1, len - 1, f)] = '\0';
	fclose(f);
	p = strrchr(buf, ')');
	return p ? p + 1 : NULL;
}

/* The parent of process PID (field 4 of its stat); -1 unknown. */
pid_t ma_process_parent(pid_t pid)
{
	char buf[512];
	const char *p = stat_after_name(pid, buf, sizeof(buf));
	int ppid;

	return p && sscanf(p, " %*c %d", &ppid) == 1 ? (pid_t)ppid : -1;
}

/* When process PID started, in clock ticks since boot (field 22 of its stat); -1 unknown. */
int64_t ma_process_start_ticks(pid_t pid)
{
	char buf[512];
	const char *p = stat_after_name(pid, buf, sizeof(buf));
	unsigned long long start;

	if (!p || sscanf(p, " %*c" " %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s"
			 " %*s %*s %*s %*s %llu", &start) != 1)
		return -1;
	return (int64_t)start;
}

bool ma_is_memattach(pid_t pid)
{
	return strcmp(ma_comm_of(pid), "memattach") == 0;
}

int ma_process_status(pid_t pid, struct ma_proc_status *st)
{
	struct ma_proc_status live;
	int rc = ma_proc_read_status(pid, 0, st);
	pid_t tid;

	if (rc || (st->state != 'Z' && st->state != 'X') || !(tid = ma_live_thread_of(pid)))
		return rc;
	if (ma_proc_read_status(pid, tid, &live) == 0) {
		st->state = live.state;
		st->vm_rss = live.vm_rss;
		st->vm_hwm = live.vm_hwm;
	}
	ma_err_clear();
	return 0;
}

#define PF_EXITING_FLAG 0x4 /* the kernel's PF_EXITING, in /proc/.../stat's flags field */

/* Fields 3 and 9 of /proc/PID/task/TID/stat: state and the kernel's flags.  False if gone. */
static bool read_state_flags(pid_t pid, pid_t tid, char *state, unsigned long *flags)
{
	char path[96], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* The name may hold anything: the fields start after its last ')'. */
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", state, flags) != 2)
		return false;
	return true;
}

bool ma_thread_going(pid_t pid, pid_t tid)
{
	struct ma_proc_status st;
	unsigned long flags = 0;
	char state = 0;

	if (!read_state_flags(pid, tid, &state, &flags))
		return true;
	if (state == 'Z' || state == 'X' || (flags & PF_EXITING_FLAG))
		return true;
	if (ma_proc_read_status(pid, tid, &st) != 0) {
		ma_err_clear();
		return true;
	}
	return (st.sig_pending & (1ULL << (SIGKILL - 1))) != 0;
}

/*
 * Has PID exited (every thread going)?  *SOME_GOING: one of the threads
 * looked at is.  A live process is judged by its first few threads, not
 * all of them: a process being killed has SIGKILL pending in every thread.
 */
static bool exit_seen(pid_t pid, bool *some_going)
{
	char path[64];
	struct dirent *d;
	size_t alive = 0, going = 0, seen = 0;
	DIR *dir;

	*some_going = false;
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	if (!(dir = opendir(path)))
		return errno == ENOENT || errno == ESRCH;
	while ((d = readdir(dir))) {
		pid_t tid = (pid_t)atoi(d->d_name);

		if (tid <= 0)
			continue;
		if (ma_thread_going(pid, tid))
			going++;
		else
			alive++;
		if (alive && (going || ++seen >= 8))
			break;
	}
	closedir(dir);
	*some_going = going > 0;
	return alive == 0;
}

bool ma_process_exited(pid_t pid)
{
	bool some_going;

	return exit_seen(pid, &some_going);
}

bool ma_process_going(pid_t pid)
{
	bool some_going;

	return exit_seen(pid, &some_going) || some_going;
}

/*
 * A process being killed: each thread shows SIGKILL pending, then, once it
 * dequeued it, PF_EXITING; in between (microseconds, longer when it waits
 * for a CPU) it looks alive.  While any thread is going, look again for up
 * to 20 ms before calling the process alive.
 */
static bool exited_or_exiting(pid_t pid)
{
	bool some_going;

	for (int i = 0; i < 20; i++) {
		if (exit_seen(pid, &some_going))
			return true;
		if (!some_going)
			return false;
		usleep(1000);
	}
	return false;
}

int64_t ma_target_resident(pid_t pid, uint64_t addr, uint64_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t first = addr / page, last = (addr + len + page - 1) / page;
	uint64_t buf[512];
	int64_t pages = 0;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	/* One 64-bit entry per page: bit 63 present, bit 62 swapped. */
	for (uint64_t p = first; p < last;) {
		size_t n = last - p < 512 ? (size_t)(last - p) : 512;
		ssize_t got = pread(fd, buf, n * 8, (off_t)(p * 8));

		if (got <= 0) {
			pages = -1;
			break;
		}
		for (ssize_t k = 0; k < got / 8; k++)
			pages += (buf[k] >> 62) != 0;
		p += (uint64_t)got / 8;
	}
	close(fd);
	return pages < 0 ? -1 : pages * (int64_t)page;
}

int ma_fail_if_exited(pid_t pid, int rc)
{
	if (rc == 0 || rc == MA_E_USAGE || !exited_or_exiting(pid))
		return rc;
	ma_err_clear();
	return ma_fail(MA_E_EXITED, "process %d exited during the run", pid);
}

/*
 * Does TEST hold for one of PID's threads?  At most LIMIT threads are
 * looked at (a process-wide state shows in any of them).
 */
static bool any_thread(pid_t pid, int limit, bool (*test)(pid_t pid, pid_t tid, void *ctx),
		       void *ctx)
{
	char path[64];
	struct dirent *d;
	DIR *dir;
	bool found = false;
	int looked = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	if (!(dir = opendir(path)))
		return false;
	while (!found && looked < limit && (d = readdir(dir))) {
		pid_t tid = (pid_t)atoi(d->d_name);

		if (tid > 0) {
			looked++;
			found = test(pid, tid, ctx);
		}
	}
	closedir(dir);
	ma_err_clear();
	return found;
}

/*
 * The syscall TID sleeps in and its first four arguments, from
 * /proc/PID/task/TID/syscall: -1 when it runs ("running"), is in user
 * code ("-1 ..."), or the file cannot be read.
 */
static long read_thread_syscall(pid_t pid, pid_t tid, uint64_t a[4])
{
	char path[96], buf[256] = "";
	long nr = -1;
	FILE *f;

	a[0] = a[1] = a[2] = a[3] = 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
	if (!(f = fopen(path, "re")))
		return -1;
	if (!fgets(buf, sizeof(buf), f) || buf[0] < '0' || buf[0] > '9' ||
	    sscanf(buf, "%ld %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64, &nr, &a[0], &a[1], &a[2],
		   &a[3]) < 1)
		nr = -1;
	fclose(f);
	return nr;
}

long ma_thread_syscall_nr(pid_t pid, pid_t tid)
{
	uint64_t a[4];

	return read_thread_syscall(pid, tid, a);
}

bool ma_thread_awaits_seccomp_supervisor(pid_t pid, pid_t tid)
{
	char path[96], buf[128] = "";
	bool in;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", pid, tid);
	if (!(f = fopen(path, "re")))
		return false;
	in = fgets(buf, sizeof(buf), f) && strncmp(buf, "seccomp_do_user_notif", 21) == 0;
	fclose(f);
	return in;
}

bool ma_thread_cpu_wait_ns(pid_t pid, pid_t tid, uint64_t *ns)
{
	char path[96];
	unsigned long long run, wait;
	FILE *f;
	bool ok;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", pid, tid);
	if (!(f = fopen(path, "re")))
		return false;
	ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
	fclose(f);
	if (ok)
		*ns = wait;
	return ok;
}

const char *ma_thread_restart_block_wait(pid_t pid, pid_t tid, long *nr_out)
{
	uint64_t a[4];
	long nr = read_thread_syscall(pid, tid, a);
	int op = (int)a[1] & 0x7f; /* futex: FUTEX_WAIT 0, FUTEX_WAIT_BITSET 9 */

	*nr_out = nr;
	switch (nr) {
	case SYS_nanosleep:
		return "nanosleep";
	case SYS_clock_nanosleep: /* TIMER_ABSTIME (1) restarts as issued */
		return a[1] & 1 ? NULL : "clock_nanosleep";
	case SYS_futex:
		return (op == 0 || op == 9) && a[3] ? "a futex wait with a timeout" : NULL;
	case SYS_poll:
		return (int)a[2] >= 0 ? "poll with a timeout" : NULL;
	case SYS_restart_syscall:
		return "restart_syscall";
	default:
		return NULL;
	}
}

bool ma_syscall_is_sleep(long nr)
{
	return nr == SYS_clock_nanosleep || nr == SYS_nanosleep || nr == SYS_restart_syscall;
}

/* Is thread TID in execve? */
static bool in_execve(pid_t pid, pid_t tid, void *ctx)
{
	long nr = ma_thread_syscall_nr(pid, tid);

	(void)ctx;
	return nr == SYS_execve || nr == SYS_execveat;
}

bool ma_process_in_exec(pid_t pid)
{
	return any_thread(pid, 64, in_execve, NULL);
}

static bool job_stopped(pid_t pid, pid_t tid, void *except)
{
	struct ma_proc_status st;

	return tid != *(pid_t *)except && ma_proc_read_status(pid, tid, &st) == 0 &&
	       st.state == 'T';
}

bool ma_process_job_stopped(pid_t pid, pid_t except)
{
	/* A group stop stops every thread: a few tell. */
	return any_thread(pid, 8, job_stopped, &except);
}

uint64_t ma_signals_ignored(pid_t pid)
{
	/* The kernel's SIG_KERNEL_IGNORE_MASK: what SIG_DFL ignores. */
	const uint64_t by_default = MA_SIG_BIT(SIGCHLD) | MA_SIG_BIT(SIGCONT) | MA_SIG_BIT(SIGURG) |
				    MA_SIG_BIT(SIGWINCH);
	struct ma_proc_status st;

	if (ma_proc_read_status(pid, 0, &st) != 0) {
		ma_err_clear();
		return 0;
	}
	return st.sig_ignored | (by_default & ~st.sig_caught);
}

bool ma_thread_has_children(pid_t pid, pid_t tid)
{
	char path[96];
	int c = EOF;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, tid);
	if (!(f = fopen(path, "re")))
		return errno != ENOENT && errno != ESRCH; /* unknown: perhaps */
	c = fgetc(f);
	fclose(f);
	return c != EOF;
}

uint64_t ma_signals_a_stop_frees(pid_t pid, pid_t tid, uint64_t ignored)
{
	if (tid == pid)
		return ignored;
	if ((ignored & MA_SIG_BIT(SIGCHLD)) && ma_thread_has_children(pid, tid))
		return MA_SIG_BIT(SIGCHLD);
	return 0;
}

struct unblocking {
	pid_t except, found;
	uint64_t mask;
	int sig;
};

static bool unblocks(pid_t pid, pid_t tid, void *ctx)
{
	struct unblocking *u = ctx;
	struct ma_proc_status st;
	uint64_t open;

	if (tid == u->except || ma_proc_read_status(pid, tid, &st) != 0) {
		ma_err_clear();
		return false;
	}
	if (!(open = u->mask & ~st.sig_blocked))
		return false;
	u->found = tid;
	u->sig = __builtin_ctzll(open) + 1;
	return true;
}

pid_t ma_thread_unblocking(pid_t pid, pid_t except, uint64_t mask, int *sig)
{
	struct unblocking u = { .except = except, .mask = mask };

	if (mask && any_thread(pid, INT_MAX, unblocks, &u))
		*sig = u.sig;
	return u.found;
}

/* The soft "Max processes" of PID (/proc/PID/limits); -1 unlimited or unreadable. */
static long nproc_limit(pid_t pid)
{
	char path[64], line[256];
	long limit = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/limits", pid);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Max processes", 13) == 0) {
			char *p = line + 13;

			while (*p == ' ')
				p++;
			limit = isdigit((unsigned char)*p) ? strtol(p, NULL, 10) : -1;
			break;
		}
	fclose(f);
	return limit;
}

/* Threads of every process whose real uid is UID (what RLIMIT_NPROC counts). */
static long threads_of_uid(long uid)
{
	DIR *dir = opendir("/proc");
	struct dirent *d;
	long total = 0;

	if (!dir)
		return -1;
	while ((d = readdir(dir))) {
		struct ma_proc_status st;
		pid_t p = (pid_t)atoi(d->d_name);

		if (p <= 0)
			continue;
		if (ma_proc_read_status(p, 0, &st) != 0)
			ma_err_clear(); /* gone meanwhile */
		else if (st.real_uid == uid && st.threads > 0)
			total += st.threads;
	}
	closedir(dir);
	return total;
}

/* The number in /sys/fs/cgroup/CG/NAME (pids.max, pids.current); false if none ("max"). */
static bool cgroup_number(const char *cg, const char *name, long *v)
{
	char file[4200], buf[32];
	ssize_t n;
	int fd;

	snprintf(file, sizeof(file), "/sys/fs/cgroup%s/%s", cg, name);
	if ((fd = open(file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0 || !isdigit((unsigned char)buf[0]))
		return false;
	buf[n] = '\0';
	*v = strtol(buf, NULL, 10);
	return true;
}

/* Room for one more task in the cgroup v2 of PID and each above it: 0 none, 1 room (or unknown). */
static int cgroup_has_room(pid_t pid)
{
	char path[64], line[4096];
	FILE *f;
	char *cg;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	if (!(f = fopen(path, "re")))
		return 1;
	cg = NULL;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::/", 4) == 0) {
			cg = line + 3;
			cg[strcspn(cg, "\n")] = '\0';
			break;
		}
	fclose(f);
	/* The kernel writes this path; a cgroup's name has no '/' and is never "..". */
	for (; cg && *cg && !strstr(cg, "/../"); *strrchr(cg, '/') = '\0') {
		long max, cur;

		if (cgroup_number(cg, "pids.max", &max) && cgroup_number(cg, "pids.current", &cur) &&
		    cur + MA_THREAD_SLACK > max)
			return 0;
	}
	return 1;
}

bool ma_process_thread_room(pid_t pid, char *why, size_t whylen)
{
	long limit = nproc_limit(pid), used;
	struct ma_proc_status st;

	if (limit >= 0 && ma_proc_read_status(pid, 0, &st) == 0 && st.real_uid > 0 &&
	    (used = threads_of_uid(st.real_uid)) >= 0 && used + MA_THREAD_SLACK > limit) {
		snprintf(why, whylen, "its user (uid %ld) runs %ld threads of its RLIMIT_NPROC of %ld: "
			 "a thread of memattach's own could make one of the program's fail", st.real_uid,
			 used, limit);
		return false;
	}
	if (!cgroup_has_room(pid)) {
		snprintf(why, whylen, "its cgroup is within %d tasks of its pids.max: a thread of "
			 "memattach's own could make one of the program's fail", MA_THREAD_SLACK);
		return false;
	}
	return true;
}

pid_t ma_live_thread_of(pid_t pid)
{
	char path[64];
	struct dirent *d;
	DIR *dir;
	pid_t live = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	if (!(dir = opendir(path)))
		return 0;
	while (!live && (d = readdir(dir))) {
		struct ma_proc_status st;
		pid_t tid = (pid_t)atoi(d->d_name);

		if (tid > 0 && ma_proc_read_status(pid, tid, &st) == 0 && st.state != 'Z' &&
		    st.state != 'X')
			live = tid;
		ma_err_clear();
	}
	closedir(dir);
	return live;
}
