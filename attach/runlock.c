/*
 * runlock.c - one run at a time per target process (runlock.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ma_error.h"
#include "remote.h"
#include "runlock.h"

/* Field 22 of /proc/PID/stat: start time in clock ticks since boot. */
static int start_time(pid_t pid, unsigned long long *st)
{
	char path[64], buf[1024], *p;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!(f = fopen(path, "re")))
		return ma_fail(MA_E_NOPROC, "no process with pid %d", pid);
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		ok = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
				   "%*d %*d %*d %llu", st) == 1;
	fclose(f);
	return ok ? 0 : ma_fail(MA_E_IO, "cannot parse %s", path);
}

/*
 * Lock files of processes that are gone (no process with that pid, or one
 * started at another time): no run can want them again.  Removing one
 * that a run still holds is harmless; that run's process is gone too.
 */
static void remove_stale_lock_files(const char *dir)
{
	struct dirent *d;
	DIR *dp = opendir(dir);

	if (!dp)
		return;
	while ((d = readdir(dp))) {
		unsigned long long st_file, st_now;
		int pid, end = 0;
		char path[512];

		if (sscanf(d->d_name, "%d.%llu.lock%n", &pid, &st_file, &end) != 2 ||
		    d->d_name[end] != '\0' || pid <= 0)
			continue;
		/* Gone: no such pid, or one started at another time (read failures keep the file). */
		if (kill(pid, 0) == 0 || errno != ESRCH) {
			int rc = start_time(pid, &st_now);

			ma_err_clear();
			if (rc || st_now == st_file)
				continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		unlink(path);
	}
	closedir(dp);
}

static int open_lock_file(pid_t pid, unsigned long long st)
{
	const char *dirs[] = { "/run/memattach", "/tmp/memattach" };
	char path[128];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		int fd;

		if (mkdir(dirs[i], 0700) != 0 && errno != EEXIST)
			continue;
		remove_stale_lock_files(dirs[i]);
		snprintf(path, sizeof(path), "%s/%d.%llu.lock", dirs[i], pid, st);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0)
			return fd;
	}
	return ma_fail(MA_E_IO, "cannot create a lock file in /run/memattach or /tmp/memattach: %s",
		       strerror(errno));
}

int ma_runlock_acquire(pid_t pid, int deadline_ms, uint64_t *waited_ns)
{
	uint64_t t0 = ma_now_ns(), deadline = t0 + (uint64_t)deadline_ms * 1000000ULL;
	unsigned long long st;
	int fd, rc;

	*waited_ns = 0;
	if ((rc = start_time(pid, &st)))
		return rc;
	if ((fd = open_lock_file(pid, st)) < 0)
		return fd;
	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		struct timespec ts = { 0, 2000000 };

		if (errno != EWOULDBLOCK && errno != EINTR) {
			close(fd);
			return ma_fail(MA_E_IO, "cannot lock the run lock of %d: %s", pid, strerror(errno));
		}
		if (ma_interrupted || ma_now_ns() >= deadline) {
			close(fd);
			return ma_fail(MA_E_TIMEOUT,
				       "another memattach run on process %d did not finish within %d ms; "
				       "try again or raise --timeout",
				       pid, deadline_ms);
		}
		nanosleep(&ts, NULL);
	}
	*waited_ns = ma_now_ns() - t0;
	return fd;
}

void ma_runlock_release(int fd)
{
	if (fd >= 0)
		close(fd); /* releases the flock */
}
