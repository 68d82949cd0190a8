/*
 * runlock.c - one run at a time per target process (runlock.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
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

/*
 * DIR exists (made now, mode 0700) and is a directory of ours, not a
 * link: another user cannot swap in files of theirs.
 */
static bool own_directory(const char *dir)
{
	struct stat sb;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return false;
	if (lstat(dir, &sb) != 0)
		return false;
	if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) {
		errno = EACCES;
		return false;
	}
	return true;
}

/*
 * The lock file, in a directory of memattach's user: root's in
 * /run/memattach (or /tmp/memattach), another user's in
 * /tmp/memattach-UID (root's directories are closed to it).  Runs of
 * different users on one target still take turns: on its executable.
 */
static int open_lock_file(pid_t pid, unsigned long long st)
{
	char dirs[2][64], path[192];
	size_t ndirs = 0;

	if (geteuid() == 0) {
		snprintf(dirs[ndirs++], sizeof(dirs[0]), "/run/memattach");
		snprintf(dirs[ndirs++], sizeof(dirs[0]), "/tmp/memattach");
	} else {
		snprintf(dirs[ndirs++], sizeof(dirs[0]), "/tmp/memattach-%u", (unsigned)geteuid());
	}
	for (size_t i = 0; i < ndirs; i++) {
		int fd;

		if (!own_directory(dirs[i]))
			continue;
		remove_stale_lock_files(dirs[i]);
		snprintf(path, sizeof(path), "%s/%d.%llu.lock", dirs[i], pid, st);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0)
			return fd;
	}
	return ma_fail(MA_E_IO, "cannot create a lock file in %s%s%s: %s%s", dirs[0],
		       ndirs > 1 ? " or " : "", ndirs > 1 ? dirs[1] : "", strerror(errno),
		       errno == EACCES ? " (the directory must be this user's own, not a link)" : "");
}

/*
 * Hold FD's flock, waiting until DEADLINE (ns); 0, MA_E_* or, for a file
 * that cannot be flocked at all (EBADF on NFS, ENOLCK...), 1.  EXE: FD is
 * the target's executable, whose flock any program may hold.
 */
static int lock_until(int fd, pid_t pid, uint64_t deadline, int deadline_ms, bool exe)
{
	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		struct timespec ts = { 0, 2000000 };

		if (errno != EWOULDBLOCK && errno != EINTR)
			return 1;
		if (!ma_interrupted && ma_now_ns() < deadline) {
			nanosleep(&ts, NULL);
			continue;
		}
		if (exe)
			return ma_fail(MA_E_TIMEOUT,
				       "the flock of process %d's executable was not free within %d ms "
				       "(runs take turns on it: a memattach run on a process of the same "
				       "executable, or another program, holds it); try again or raise "
				       "--timeout",
				       pid, deadline_ms);
		return ma_fail(MA_E_TIMEOUT,
			       "another memattach run on process %d did not finish within %d ms; "
			       "try again or raise --timeout",
			       pid, deadline_ms);
	}
	return 0;
}

/*
 * Has process PID FD's file open itself (one of its descriptors)?  Asked
 * only when the executable's flock is taken: a program may flock its own
 * executable (one instance at a time), and that lock is never a run's to
 * wait for.  (Not /proc/locks: reading it takes the kernel's file-lock
 * rwsem for writing and waits for an RCU grace period, which took 31 s on
 * a loaded machine, in uninterruptible sleep; found by an outside attack.)
 */
static bool has_file_open(pid_t pid, int fd)
{
	char dir[64], path[352];
	struct stat mine, theirs;
	struct dirent *d;
	bool open_there = false;
	DIR *dp;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	if (fstat(fd, &mine) != 0 || !(dp = opendir(dir)))
		return false;
	while (!open_there && (d = readdir(dp))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		open_there = stat(path, &theirs) == 0 && theirs.st_ino == mine.st_ino &&
			     theirs.st_dev == mine.st_dev;
	}
	closedir(dp);
	return open_there;
}

/*
 * Two locks.  The file lock keys the process by pid and start time, but
 * its directory is the mount namespace's own: a run in a container, or
 * one that fell back to /tmp, would not see a host run's file, and two
 * runs at once overwrote each other's stub in the target (which
 * crashed, 3 of 3 times; found by an outside attack).  So a run also
 * flocks the target's executable through /proc/PID/exe: one inode,
 * whatever namespace it is opened from.  That serializes runs on all
 * processes of one executable, each run a few milliseconds.  A user who
 * cannot read the executable is refused (a root run and its own
 * overlapped, and the target crashed).  Where the executable cannot be
 * flocked (NFS), or it is taken while the program has it open (its own
 * flock, most likely), the file lock alone stands.
 */
int ma_runlock_acquire(pid_t pid, int deadline_ms, uint64_t *waited_ns, struct ma_runlock *l)
{
	uint64_t t0 = ma_now_ns(), deadline = t0 + (uint64_t)deadline_ms * 1000000ULL;
	unsigned long long st;
	char exe[64];
	int rc;

	*waited_ns = 0;
	l->file_fd = l->exe_fd = -1;
	if ((rc = start_time(pid, &st)))
		return rc;
	if ((l->file_fd = open_lock_file(pid, st)) < 0) {
		rc = l->file_fd;
		l->file_fd = -1;
		return rc;
	}
	if ((rc = lock_until(l->file_fd, pid, deadline, deadline_ms, false)) != 0) {
		ma_runlock_release(l);
		return rc > 0 ? ma_fail(MA_E_IO, "cannot lock the run lock of %d: %s", pid,
					strerror(errno)) : rc;
	}
	snprintf(exe, sizeof(exe), "/proc/%d/exe", pid);
	if ((l->exe_fd = open(exe, O_RDONLY | O_CLOEXEC)) < 0 && (errno == EACCES || errno == EPERM)) {
		unsigned long long st_now;

		/* A process reaped meanwhile answers EACCES too: say it is gone. */
		if ((rc = start_time(pid, &st_now)) || st_now != st) {
			ma_runlock_release(l);
			return rc ? rc : ma_fail(MA_E_NOPROC, "no process with pid %d", pid);
		}
		/* Without it a root run and this user's could overlap (the target crashed). */
		rc = ma_fail(MA_E_PERM,
			     "cannot open %s (%s): runs on one process take turns on its "
			     "executable, which this user cannot read; run memattach as root",
			     exe, strerror(errno));
		ma_runlock_release(l);
		return rc;
	}
	if (l->exe_fd >= 0 && flock(l->exe_fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK &&
	    has_file_open(pid, l->exe_fd)) {
		close(l->exe_fd); /* the program's own lock, most likely: not waited for */
		l->exe_fd = -1;
	}
	if (l->exe_fd >= 0 && (rc = lock_until(l->exe_fd, pid, deadline, deadline_ms, true)) != 0) {
		if (rc < 0) {
			ma_runlock_release(l);
			return rc;
		}
		close(l->exe_fd);
		l->exe_fd = -1;
	}
	*waited_ns = ma_now_ns() - t0;
	return 0;
}

void ma_runlock_release(struct ma_runlock *l)
{
	/* Closing releases the flocks. */
	if (l->exe_fd >= 0)
		close(l->exe_fd);
	if (l->file_fd >= 0)
		close(l->file_fd);
	l->exe_fd = l->file_fd = -1;
}
