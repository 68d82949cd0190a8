/*
 * targetfd.c - a descriptor that lives in the target, taken safely (targetfd.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ma_error.h"
#include "outfile.h"
#include "target.h"
#include "targetfd.h"

#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Is FD (ours, O_PATH allowed) a deleted regular file whose link names the memfd NAME?  *SB its stat. */
static bool names_memfd(int fd, const char *name, struct stat *sb)
{
	char self[64], link[256], want[256];
	ssize_t n;

	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
	n = readlink(self, link, sizeof(link) - 1);
	link[n > 0 ? n : 0] = '\0';
	return fstat(fd, sb) == 0 && S_ISREG(sb->st_mode) && sb->st_nlink == 0 &&
	       strcmp(link, want) == 0;
}

/* Is our descriptor FD the memfd NAME, sealable and unsealed, at most MAX bytes? */
static int check_memfd(int fd, const char *name, size_t max)
{
	struct stat sb;
	int seals, flags = fcntl(fd, F_GETFL);

	/* O_PATH descriptors have no file operations: refuse before anything else. */
	if (flags < 0 || (flags & O_PATH) || !names_memfd(fd, name, &sb))
		return MA_E_PERM;
	/* Another shmem file has F_SEAL_SEAL from birth; only MFD_ALLOW_SEALING clears it. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals != 0)
		return MA_E_PERM;
	if ((size_t)sb.st_size > max)
		return ma_fail(MA_E_IO, "the target's memfd holds %lld bytes, more than the %zu "
			       "memattach takes", (long long)sb.st_size, max);
	return 0;
}

/*
 * The descriptor through a live thread TID of a process whose main thread
 * has exited: pidfd_open wants the leader, whose descriptor table is gone
 * (Linux 6.9's PIDFD_THREAD is not here yet).  Its /proc link is followed
 * with O_PATH only, which opens nothing (no FIFO waits, no device opens);
 * only once it is seen to be a deleted regular file named as our memfd is
 * that file opened, through our own O_PATH descriptor, not the target's.
 */
static int take_through_proc(pid_t tid, int target_fd, const char *name, int *fd)
{
	char path[64];
	struct stat sb;
	int opath;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", tid, target_fd);
	if ((opath = open(path, O_PATH | O_CLOEXEC)) < 0)
		return errno == ENOENT ? MA_E_PERM /* the program closed it */
		     : ma_fail(errno == ESRCH ? MA_E_EXITED : MA_E_IO,
			       "cannot take thread %d's descriptor %d: %s", tid, target_fd,
			       strerror(errno));
	if (!names_memfd(opath, name, &sb)) {
		close(opath);
		return MA_E_PERM;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", opath);
	*fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	close(opath);
	if (*fd < 0)
		return ma_fail(MA_E_IO, "cannot open thread %d's memfd %d: %s", tid, target_fd,
			       strerror(errno));
	return 0;
}

/* Is PID a thread-group leader (else a thread we reach a process through)? */
static bool is_leader(pid_t pid)
{
	struct ma_proc_status st;

	if (ma_proc_read_status(pid, 0, &st) != 0) {
		ma_err_clear();
		return true; /* gone: pidfd_open says so */
	}
	return st.tgid == pid;
}

/* The descriptor through the process's pidfd (PID its leader). */
static int take_through_pidfd(pid_t pid, int target_fd, int *fd)
{
	int pfd = pidfd_of(pid), rc;

	if (pfd < 0)
		return ma_fail(errno == ESRCH ? MA_E_EXITED : MA_E_IO,
			       "cannot reach process %d's descriptors (pidfd_open): %s", pid,
			       strerror(errno));
	*fd = (int)syscall(SYS_pidfd_getfd, pfd, target_fd, 0);
	rc = *fd < 0 ? ma_fail(errno == ESRCH ? MA_E_EXITED : MA_E_IO,
			       "cannot take process %d's descriptor %d (pidfd_getfd): %s", pid,
			       target_fd, strerror(errno))
		     : 0;
	close(pfd);
	return rc;
}

int ma_take_target_memfd(pid_t pid, int target_fd, const char *name, size_t max_size, int *fd)
{
	int rc;

	*fd = -1;
	rc = is_leader(pid) ? take_through_pidfd(pid, target_fd, fd)
			    : take_through_proc(pid, target_fd, name, fd);
	if (rc == MA_E_PERM)
		return ma_fail(MA_E_PERM, "process %d's descriptor %d is no longer the memfd "
			       "memattach created there (the program replaced it): nothing was "
			       "read or written through it", pid, target_fd);
	if (rc)
		return rc;
	if ((rc = check_memfd(*fd, name, max_size))) {
		if (rc == MA_E_PERM)
			rc = ma_fail(MA_E_PERM,
				     "process %d's descriptor %d is no longer the memfd memattach "
				     "created there (the program replaced it): nothing was read or "
				     "written through it",
				     pid, target_fd);
		close(*fd);
		*fd = -1;
	}
	return rc;
}
