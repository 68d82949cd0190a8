/*
 * input.c - bounded loading of offline input files (see input.h).
 */
#include <linux/magic.h>
#include <sys/vfs.h>
#include <stdbool.h>
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
#include "testhooks.h"

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
	const char *t = ma_test_env("PIPE_STALL_S"); /* tests: a shorter wait */
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

#define MAX_LINKS 40

/* Is the folder FD in a /proc (whose links the kernel makes)? */
static bool on_procfs(int fd)
{
	struct statfs sf;

	return fstatfs(fd, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
}

/* May this user follow symbolic link ST without trusting its owner? */
static bool trusted_link(const struct stat *st)
{
	return st->st_uid == 0 || st->st_uid == geteuid();
}

int ma_walk_trusted(int at, const char *path, bool dir, int *links, char *untrusted, size_t len)
{
	char buf[4096], *save = NULL, *comp, *next_comp;
	int fd;

	if (strlen(path) >= sizeof(buf) || !path[0]) {
		errno = path[0] ? ENAMETOOLONG : ENOENT;
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", path);
	if (path[0] == '/')
		fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else if (at == AT_FDCWD)
		fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else
		fd = fcntl(at, F_DUPFD_CLOEXEC, 0);
	for (comp = strtok_r(buf, "/", &save); fd >= 0 && comp; comp = next_comp) {
		char target[4096];
		struct stat st;
		ssize_t n;
		int next;
		bool last;

		next_comp = strtok_r(NULL, "/", &save);
		last = !next_comp;
		if (!strcmp(comp, ".") && !last)
			continue;
		if (fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			next = -1;
		} else if (!S_ISLNK(st.st_mode)) {
			/* O_NOFOLLOW: a link swapped in since is refused, not followed */
			next = openat(fd, comp,
				      O_PATH | O_NOFOLLOW | O_CLOEXEC | (last && !dir ? 0 : O_DIRECTORY));
		} else if (trusted_link(&st) && on_procfs(fd)) {
			/* /dev/fd/N, /proc/self/...: the kernel's own link, to what it names */
			next = openat(fd, comp, O_PATH | O_CLOEXEC | (last && !dir ? 0 : O_DIRECTORY));
		} else if (!trusted_link(&st)) {
			snprintf(untrusted, len, "%s (a link of uid %u)", comp, (unsigned)st.st_uid);
			errno = EPERM;
			next = -1;
		} else if (++*links > MAX_LINKS) {
			errno = ELOOP;
			next = -1;
		} else if ((n = readlinkat(fd, comp, target, sizeof(target) - 1)) < 0) {
			next = -1;
		} else {
			target[n] = '\0';
			next = ma_walk_trusted(fd, target, dir || !last, links, untrusted, len);
		}
		close(fd);
		fd = next;
	}
	return fd;
}

int ma_open_trusted(const char *path, bool dir)
{
	char untrusted[300] = "";
	int links = 0, p = ma_walk_trusted(AT_FDCWD, path, dir, &links, untrusted, sizeof(untrusted));

	if (p >= 0)
		return p;
	return untrusted[0] ? ma_fail(MA_E_PERM, "cannot open '%s': memattach does not follow %s, "
				      "which another user could point anywhere", path, untrusted)
			    : ma_fail(MA_E_IO, "cannot open '%s': %s", path, strerror(errno));
}

/*
 * The very file behind P (an O_PATH descriptor, closed here) opened for
 * reading, not its path again (which may have changed since); fd or -1.
 * O_NONBLOCK: a FIFO without a writer must not make the open wait.
 */
static int reopen_for_reading(int p)
{
	char self[64];
	int fd, e;

	snprintf(self, sizeof(self), "/proc/self/fd/%d", p);
	fd = open(self, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	e = errno;
	close(p);
	errno = e;
	return fd;
}

/* P (O_PATH, closed here) reopened for reading if it is a regular file; fd or -1. */
static int reopen_regular(int p)
{
	struct stat before, after;
	int fd, e;

	if (fstat(p, &before) != 0 || !S_ISREG(before.st_mode)) {
		close(p);
		errno = EINVAL;
		return -1;
	}
	fd = reopen_for_reading(p);
	e = errno;
	if (fd >= 0 && (fstat(fd, &after) != 0 || after.st_ino != before.st_ino ||
			after.st_dev != before.st_dev)) {
		close(fd);
		fd = -1;
		e = EINVAL;
	}
	errno = e;
	return fd;
}

int ma_open_regular(int dirfd, const char *path, bool in_root)
{
	int p;

	if (in_root) {
		struct open_how how = { .flags = O_PATH | O_CLOEXEC,
					.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };

		p = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	} else {
		/* Links of other users are not followed (a /tmp swap to a root-only file). */
		char untrusted[300];
		int links = 0;

		p = ma_walk_trusted(dirfd, path, false, &links, untrusted, sizeof(untrusted));
	}
	return p < 0 ? -1 : reopen_regular(p);
}

int ma_open_regular_proc_link(const char *path)
{
	/* The kernel resolves the magic link: no path a user wrote is followed. */
	int p = open(path, O_PATH | O_CLOEXEC);

	return p < 0 ? -1 : reopen_regular(p);
}

/*
 * PATH opened for reading, its links followed only if root's or this
 * user's (an input in another user's folder swapped for a link to a
 * root-only file would have been read, and its first line quoted in the
 * error).
 */
static int open_input(const char *path)
{
	int p = ma_open_trusted(path, false), fd;

	if (p < 0)
		return p;
	fd = reopen_for_reading(p);
	return fd >= 0 ? fd : ma_fail(MA_E_IO, "cannot open '%s': %s", path, strerror(errno));
}

int ma_input_load(struct ma_input *in, const char *path, const char *what, uint64_t max)
{
	struct stat st;
	char sz[32], lim[32];
	int fd, rc = 0;

	memset(in, 0, sizeof(*in));
	in->data = empty;
	in->mapped = true;
	if ((fd = open_input(path)) < 0)
		return fd;
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
