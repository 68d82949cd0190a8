/*
 * input.c - bounded loading of offline input files (see input.h).
 */
#include <sys/syscall.h>
#include <linux/openat2.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"
#include "input.h"
#include "ma_error.h"

static const char empty[] = "";

/* Free what was read (not the empty placeholder, not a mapping). */
static void drop(struct ma_input *in)
{
	if (in->mapped && in->len)
		munmap((void *)in->data, in->len);
	else if (!in->mapped && in->data != empty)
		free((void *)in->data);
	in->data = empty;
	in->len = 0;
	in->mapped = true;
}

static const char *kind_of(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

/*
 * A pipe or FIFO: read it into memory, at most MAX bytes (and never more
 * than MA_MAX_PIPE: a stream costs memory a mapped file does not), giving
 * up when the writer sends nothing for MA_PIPE_STALL_S seconds.
 */
static int read_stream(struct ma_input *in, int fd, const char *path, const char *what,
		       uint64_t max)
{
	size_t cap = 0, len = 0;
	char *buf = NULL, sz[32];
	const char *t = getenv("MEMATTACH_TEST_PIPE_STALL_S"); /* tests: a shorter wait */
	int stall_s = t && atoi(t) > 0 ? atoi(t) : MA_PIPE_STALL_S;

	if (max > MA_MAX_PIPE)
		max = MA_MAX_PIPE;
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int pr;

		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 1 << 16;
			char *nb;

			if (len > max) {
				free(buf);
				return ma_fail(MA_E_FORMAT, "'%s' goes on past %s, more than memattach "
							    "reads from a pipe as a %s (save it to a "
							    "file)",
					       path, ma_fmt_bytes(sz, sizeof(sz), max), what);
			}
			if (ncap > max + 1)
				ncap = max + 1; /* one byte more tells "too long" */
			if (!(nb = realloc(buf, ncap))) {
				free(buf);
				return ma_fail(MA_E_NOMEM, "out of memory reading '%s'", path);
			}
			buf = nb;
			cap = ncap;
		}
		/* Non-blocking reads: a FIFO without a writer reads 0 (the end)
		 * at once; a writer that is there but silent is waited for. */
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			pr = poll(&pfd, 1, stall_s * 1000);
			if (pr == 0) {
				free(buf);
				return ma_fail(MA_E_IO, "'%s': its writer sent nothing for %d s; "
							"giving up (save the %s to a file)",
					       path, stall_s, what);
			}
			continue;
		}
		if (n < 0) {
			int e = errno;

			free(buf);
			return ma_fail(MA_E_IO, "cannot read '%s': %s", path, strerror(e));
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max) {
		free(buf);
		return ma_fail(MA_E_FORMAT, "'%s' goes on past %s, more than memattach reads from a "
					    "pipe as a %s (save it to a file)",
			       path, ma_fmt_bytes(sz, sizeof(sz), max), what);
	}
	in->data = buf ? buf : empty;
	in->len = len;
	return 0;
}

int ma_open_regular(int dirfd, const char *path, bool in_root)
{
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = in_root ? RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS : 0 };
	struct stat before, after;
	char self[64];
	int p, fd, e;

	p = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (p < 0 && errno == ENOSYS && !in_root)
		p = openat(dirfd, path, O_PATH | O_CLOEXEC);
	if (p < 0)
		return -1;
	if (fstat(p, &before) != 0 || !S_ISREG(before.st_mode)) {
		close(p);
		errno = EINVAL;
		return -1;
	}
	/* Reopen the very inode looked at (not the path again, which may have changed). */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", p);
	fd = open(self, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	e = errno;
	close(p);
	if (fd >= 0 && (fstat(fd, &after) != 0 || after.st_ino != before.st_ino ||
			after.st_dev != before.st_dev)) {
		close(fd);
		fd = -1;
		e = EINVAL;
	}
	errno = e;
	return fd;
}

int ma_input_load(struct ma_input *in, const char *path, const char *what, uint64_t max)
{
	struct stat st;
	char sz[32], lim[32];
	int fd, rc = 0;

	memset(in, 0, sizeof(*in));
	in->data = empty;
	in->mapped = true;
	/* O_NONBLOCK: opening a FIFO that has no writer must not wait for one. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return ma_fail(MA_E_IO, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		rc = ma_fail(MA_E_IO, "cannot read '%s': %s", path, strerror(errno));
	} else if (S_ISFIFO(st.st_mode)) {
		in->mapped = false;
		rc = read_stream(in, fd, path, what, max);
		if (!rc && in->len == 0)
			rc = ma_fail(MA_E_FORMAT, "'%s' is a FIFO and nothing was written to it (no "
						  "writer), not a %s", path, what);
	} else if (!S_ISREG(st.st_mode)) {
		rc = ma_fail(MA_E_IO, "'%s' is %s, not a %s file", path, kind_of(st.st_mode), what);
	} else if ((uint64_t)st.st_size > max) {
		rc = ma_fail(MA_E_FORMAT, "'%s' is %s, more than any %s (at most %s)", path,
			     ma_fmt_bytes(sz, sizeof(sz), (uint64_t)st.st_size), what,
			     ma_fmt_bytes(lim, sizeof(lim), max));
	} else if (st.st_size > 0) {
		/* Not MAP_POPULATE: a sparse 2 GB file would be read whole. */
		void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);

		if (p == MAP_FAILED) {
			rc = ma_fail(MA_E_IO, "cannot map '%s': %s", path, strerror(errno));
		} else {
			madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
			in->data = p;
			in->len = (size_t)st.st_size;
		}
	} else {
		/* Size 0: empty, or a /proc-like file whose size is unknown. */
		in->mapped = false;
		rc = read_stream(in, fd, path, what, max);
	}
	close(fd);
	if (!rc && in->len == 0)
		rc = ma_fail(MA_E_FORMAT, "'%s' is empty, not a %s", path, what);
	if (rc)
		drop(in);
	return rc;
}

void ma_input_release(struct ma_input *in)
{
	drop(in);
}
