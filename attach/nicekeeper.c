/*
 * nicekeeper.c - the keeper of a held thread's nice value (nicekeeper.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nicekeeper.h"
#include "target.h"

struct keeper_record {
	int32_t armed, pid, tid, saved, raised, pad;
	int64_t start_ticks;
};

static int keeper_fd = -1;
static pid_t keeper_pid;

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

/* Could process PID set one of its threads to nice NICE below its own? */
static bool program_may_lower_to(pid_t pid, int nice)
{
	struct rlimit rl;

	if (prlimit(pid, RLIMIT_NICE, NULL, &rl) == 0 &&
	    (rl.rlim_cur == RLIM_INFINITY || 20 - (long long)rl.rlim_cur <= nice))
		return true;
	return may_renice_any(pid);
}

bool ma_nice_put_back(pid_t pid, pid_t tid, int saved, int raised)
{
	int now;

	errno = 0;
	now = getpriority(PRIO_PROCESS, (id_t)tid);
	if (errno)
		return errno != ESRCH;
	if (now == raised || (now < saved && !program_may_lower_to(pid, now)))
		return setpriority(PRIO_PROCESS, (id_t)tid, saved) == 0 || errno != ESRCH;
	return true; /* the program's (or its owner's) own change: kept */
}

/* The same thread (its start time) of the same process: its nice goes back (ma_nice_put_back). */
static void put_back(const struct keeper_record *r)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d", r->pid, r->tid);
	if (access(path, F_OK) != 0 || ma_process_start_ticks(r->tid) != r->start_ticks)
		return;
	ma_nice_put_back(r->pid, r->tid, r->saved, r->raised);
}

/* The keeper: the last record memattach sent, acted on when memattach's end closes. */
static __attribute__((noreturn)) void keep(int fd)
{
	struct keeper_record last = { 0 }, r;
	ssize_t n;

	for (;;) {
		n = recv(fd, &r, sizeof(r), 0);
		if (n == (ssize_t)sizeof(r)) {
			last = r;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break; /* 0: memattach's end closed (exited or killed) */
	}
	if (last.armed)
		put_back(&last);
	_exit(0);
}

static void become_keeper(int fd)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	/* Its own session: a signal to memattach's process group does not reach it. */
	setsid();
	prctl(PR_SET_NAME, "ma-nice-keeper");
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	/* Nothing of memattach's kept open (a pipe a caller waits on to close): stdio on /dev/null. */
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	if (fd != 3)
		dup2(fd, 3);
	close_range(4, ~0U, 0);
	keep(3);
}

/*
 * At memattach's exit: its end closed, the keeper ends at once and is
 * reaped here (a killed memattach leaves that to init).
 */
static void keeper_stop(void)
{
	if (keeper_fd < 0)
		return;
	close(keeper_fd);
	keeper_fd = -1;
	for (int i = 0; i < 200; i++) {
		pid_t r = waitpid(keeper_pid, NULL, WNOHANG);

		if (r == keeper_pid || (r < 0 && errno != EINTR))
			return;
		usleep(500);
	}
}

bool ma_nice_keeper_start(void)
{
	int sv[2];
	pid_t child;

	if (keeper_fd >= 0)
		return true;
	if (geteuid() != 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return false;
	child = fork();
	if (child == 0) {
		close(sv[0]);
		become_keeper(sv[1]);
	}
	close(sv[1]);
	if (child < 0) {
		close(sv[0]);
		return false;
	}
	keeper_fd = sv[0];
	keeper_pid = child;
	atexit(keeper_stop);
	return true;
}

bool ma_nice_keeper_ready(void)
{
	return keeper_fd >= 0;
}

static bool send_record(const struct keeper_record *r)
{
	return keeper_fd >= 0 && send(keeper_fd, r, sizeof(*r), MSG_NOSIGNAL) == (ssize_t)sizeof(*r);
}

bool ma_nice_keeper_arm(pid_t pid, pid_t tid, long long start_ticks, int saved, int raised)
{
	struct keeper_record r = { 1, pid, tid, saved, raised, 0, start_ticks };

	return start_ticks >= 0 && send_record(&r);
}

void ma_nice_keeper_disarm(void)
{
	struct keeper_record r = { 0 };

	send_record(&r);
}
