/*
 * runlock.c - one run at a time per target process (runlock.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "ma_error.h"
#include "remote.h"
#include "runclock.h"
#include "runlock.h"
#include "target.h"

/* Does process HOLDER have LINK ("/proc/PID/personality") open?  Read by readlink: nothing opened. */
static bool has_open(const char *holder, const char *link)
{
	char dir[300], path[600], got[64];
	struct dirent *d;
	bool found = false;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%s/fd", holder);
	if (!(dp = opendir(dir)))
		return false;
	while (!found && (d = readdir(dp))) {
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, got, sizeof(got) - 1);
		found = n > 0 && (got[n] = '\0', strcmp(got, link) == 0);
	}
	closedir(dp);
	return found;
}

/* The pid of another memattach that has the lock file of PID open (0: none seen). */
static pid_t find_holder(pid_t pid)
{
	char link[64];
	struct dirent *d;
	pid_t holder = 0;
	DIR *dp = opendir("/proc");

	snprintf(link, sizeof(link), "/proc/%d/personality", pid);
	while (dp && !holder && (d = readdir(dp))) {
		char *end;
		long p = strtol(d->d_name, &end, 10);

		if (*end || p <= 0 || p == getpid() || !ma_is_memattach((pid_t)p))
			continue;
		if (has_open(d->d_name, link))
			holder = (pid_t)p;
	}
	if (dp)
		closedir(dp);
	return holder;
}

static int lock_busy_error(pid_t pid, int deadline_ms)
{
	pid_t holder = find_holder(pid);

	if (holder)
		return ma_fail(MA_E_TIMEOUT,
			       "another memattach run (pid %d) on process %d did not finish within "
			       "%d ms; try again or raise --timeout",
			       holder, pid, deadline_ms);
	/* Only the process's own user and root can open that file. */
	return ma_fail(MA_E_TIMEOUT,
		       "the run lock of process %d (a flock on /proc/%d/personality) was not free within "
		       "%d ms, and no memattach run holds it: a program of the process's owner or "
		       "of root does; try again or raise --timeout",
		       pid, pid, deadline_ms);
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
			ma_runlock_release(l);
			return lock_busy_error(pid, deadline_ms);
		}
		nanosleep(&ts, NULL);
	}
	*waited_ns = ma_now_ns() - t0;
	return 0;
}

void ma_runlock_release(struct ma_runlock *l)
{
	/* Closing releases the flock. */
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}
