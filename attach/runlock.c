/*
 * runlock.c - one run at a time per target process (runlock.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "ma_error.h"
#include "runclock.h"
#include "runlock.h"
#include "target.h"

/*
 * The process that holds the flock on the file open as FD, from
 * /proc/locks (a run that waits for it has the file open too: its
 * descriptors would not tell them apart).  0: none seen (it let go, or
 * lives in another pid namespace).
 */
static pid_t find_holder(int fd)
{
	char line[256];
	struct stat locked;
	pid_t holder = 0;
	FILE *f;

	if (fstat(fd, &locked) != 0 || !(f = fopen("/proc/locks", "re")))
		return 0;
	/* "1: FLOCK  ADVISORY  WRITE 2405 00:17:36071 0 EOF"; a waiter's line has "->". */
	while (!holder && fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long ino;
		char type[16];
		int pid;

		if (strstr(line, "->") || sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", type, &pid,
						 &maj, &min, &ino) != 5)
			continue;
		if (strcmp(type, "FLOCK") == 0 && makedev(maj, min) == locked.st_dev &&
		    ino == locked.st_ino && pid > 0)
			holder = pid;
	}
	fclose(f);
	return holder;
}

/* How long process PID has run, in seconds (-1 unknown). */
static double running_s(pid_t pid)
{
	int64_t start = ma_process_start_ticks(pid);
	double up = -1;
	FILE *f;

	if (start < 0 || !(f = fopen("/proc/uptime", "re")))
		return -1;
	if (fscanf(f, "%lf", &up) != 1)
		up = -1;
	fclose(f);
	return up < 0 ? -1 : up - (double)start / (double)sysconf(_SC_CLK_TCK);
}

/* The lock of PID (descriptor FD) was not free by the deadline, or the wait was interrupted. */
static int lock_busy_error(pid_t pid, int fd, int deadline_ms)
{
	pid_t holder = find_holder(fd);
	bool memattach = holder && ma_is_memattach(holder);
	char waited[64];

	if (ma_interrupted)
		snprintf(waited, sizeof(waited), "interrupted while waiting for it");
	else
		snprintf(waited, sizeof(waited), "not free within %d ms", deadline_ms);
	/* A run ends: waiting longer helps. */
	if (memattach) {
		double ran = running_s(holder);
		char age[48] = "";

		if (ran >= 0)
			snprintf(age, sizeof(age), ", running for %.1f s", ran);
		return ma_fail(MA_E_TIMEOUT,
			       "another memattach run on process %d (pid %d%s) holds its run "
			       "lock: %s; try again, or give a longer --timeout",
			       pid, holder, age, waited);
	}
	/* Only the process's own user and root can open that file. */
	if (holder)
		return ma_fail(MA_E_TIMEOUT,
			       "the run lock of process %d (a flock on /proc/%d/personality) is "
			       "held by pid %d (%s) or a process it forked (/proc/locks names the "
			       "one that took it), which is no memattach run and may hold it for "
			       "good: %s; run again once it has let go",
			       pid, pid, holder, ma_comm_of(holder), waited);
	return ma_fail(MA_E_TIMEOUT,
		       "the run lock of process %d (a flock on /proc/%d/personality) was %s, held "
		       "by a process /proc/locks does not name (in another pid namespace?); run "
		       "again once it has let go",
		       pid, pid, waited);
}

int ma_runlock_acquire(pid_t pid, int deadline_ms, uint64_t *waited_ns, struct ma_runlock *l)
{
	uint64_t t0 = ma_now_ns(), deadline;

	deadline_ms = ma_run_ms_left(deadline_ms);
	deadline = t0 + (uint64_t)deadline_ms * 1000000ULL;
	char path[64];

	*waited_ns = 0;
	snprintf(path, sizeof(path), "/proc/%d/personality", pid);
	if ((l->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		int e = errno;

		if (kill(pid, 0) != 0 && errno == ESRCH)
			return ma_fail(MA_E_NOPROC, "no process with pid %d", pid);
		return ma_fail(e == EACCES || e == EPERM ? MA_E_PERM : MA_E_IO,
			       "cannot open %s: %s (memattach runs as process %d's own user, "
			       "or root)",
			       path, strerror(e), pid);
	}
	while (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
		struct timespec ts = { 0, 2000000 };
		int e = errno;

		if (e != EWOULDBLOCK && e != EINTR) {
			ma_runlock_release(l);
			return ma_fail(MA_E_IO, "cannot lock %s: %s", path, strerror(e));
		}
		if (ma_interrupted || ma_now_ns() >= deadline) {
			int rc = lock_busy_error(pid, l->fd, deadline_ms);

			ma_runlock_release(l);
			return rc;
		}
		nanosleep(&ts, NULL);
	}
	*waited_ns = ma_now_ns() - t0;
	return 0;
}

bool ma_runlock_busy(pid_t pid)
{
	char path[64];
	bool busy;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/personality", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false; /* the run itself says why */
	busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd); /* lets go at once of a lock taken to look */
	return busy;
}

void ma_runlock_release(struct ma_runlock *l)
{
	/* Closing releases the flock. */
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}
