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
#include "targetfd.h"

#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Is our descriptor FD the memfd NAME, sealable and unsealed, at most MAX bytes? */
static int check_memfd(int fd, const char *name, size_t max)
{
	char self[64], link[256], want[256];
	struct stat sb;
	ssize_t n;
	int seals, flags = fcntl(fd, F_GETFL);

	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
	n = readlink(self, link, sizeof(link) - 1);
	link[n > 0 ? n : 0] = '\0';
	/* O_PATH descriptors have no file operations: refuse before anything else. */
	if (flags < 0 || (flags & O_PATH) || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
	    sb.st_nlink != 0 || strcmp(link, want) != 0)
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

int ma_take_target_memfd(pid_t pid, int target_fd, const char *name, size_t max_size, int *fd)
{
	int pfd = pidfd_of(pid), rc;

	*fd = -1;
	if (pfd < 0)
		return ma_fail(errno == ESRCH ? MA_E_EXITED : MA_E_IO,
			       "cannot reach process %d's descriptors (pidfd_open): %s", pid,
			       strerror(errno));
	*fd = (int)syscall(SYS_pidfd_getfd, pfd, target_fd, 0);
	if (*fd < 0) {
		rc = ma_fail(errno == ESRCH ? MA_E_EXITED : MA_E_IO,
			     "cannot take process %d's descriptor %d (pidfd_getfd): %s", pid,
			     target_fd, strerror(errno));
		close(pfd);
		return rc;
	}
	close(pfd);
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
