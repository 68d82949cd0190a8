/*
 * outfile.c - output files and folders created, never reused (outfile.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input.h"
#include "ma_error.h"
#include "outfile.h"
#include "target.h"

#define TEMP_TRIES 100
/*
 * Inside a temporary folder while it is being filled: the mark that it is
 * one of memattach's (only the folder's owner could have put it there), so
 * a later run may remove it.  Without the mark, a folder that merely has a
 * temporary's name (another user can rename a folder of root's into such
 * a name in a folder it can write) is never emptied.
 */
#define TEMP_MARK ".memattach-temporary"

int ma_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return ma_fail(MA_E_IO, "write failed: %s", w < 0 ? strerror(errno) : "short");
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Six random letters and digits (names others cannot guess to squat). */
static void random_suffix(char out[7])
{
	static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	unsigned char r[6];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (unsigned char)(rand() ^ (int)getpid());
	for (size_t i = 0; i < sizeof(r); i++)
		out[i] = set[r[i] % (sizeof(set) - 1)];
	out[6] = '\0';
}

int ma_open_dir_trusted(const char *path)
{
	int walked = ma_open_trusted(path, true), fd;

	if (walked < 0)
		return walked;
	/* A real descriptor (readdir needs one), of the very folder walked to. */
	fd = openat(walked, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(walked);
	return fd >= 0 ? fd : ma_fail(MA_E_IO, "cannot open the folder '%s': %s", path,
				      strerror(errno));
}

int ma_open_parent(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];

	*base = slash ? slash + 1 : path;
	if (!slash)
		return ma_open_dir_trusted(".");
	if ((size_t)(slash - path) >= sizeof(dir))
		return ma_fail(MA_E_IO, "'%s': %s", path, strerror(ENAMETOOLONG));
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	return ma_open_dir_trusted(slash == path ? "/" : dir);
}

/* Is PID a live memattach (then its temporaries are in use)? */
static bool memattach_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM) && ma_is_memattach(pid);
}

/* Does ENTRY of DIRFD name a temporary of NAME left by a memattach that is gone? */
static bool stale_temp_of(const char *entry, const char *name)
{
	size_t nlen = strlen(name);
	const char *p;
	char *end;
	long pid;

	if (entry[0] == '.')
		entry++;
	if (strncmp(entry, name, nlen) != 0 || strncmp(entry + nlen, ".tmp.", 5) != 0)
		return false;
	p = entry + nlen + 5;
	pid = strtol(p, &end, 10);
	return end != p && *end == '.' && !memattach_alive((pid_t)pid);
}

/* A listing of the folder FD, on a descriptor of its own (FD stays open); or NULL. */
static DIR *open_listing(int fd)
{
	int scan = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	DIR *dh = scan >= 0 ? fdopendir(scan) : NULL;

	if (!dh && scan >= 0)
		close(scan);
	return dh;
}

/* Remove this user's plain files in the folder FD (a folder of ours). */
static void remove_own_files(int fd)
{
	DIR *dh = open_listing(fd);
	struct dirent *d;

	if (!dh)
		return;
	while ((d = readdir(dh))) {
		struct stat sb;

		if (fstatat(fd, d->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
		    sb.st_uid == geteuid())
			unlinkat(fd, d->d_name, 0);
	}
	closedir(dh);
}

/* Does the folder FD carry the mark of a memattach temporary, made by this user? */
static bool has_temp_mark(int fd)
{
	struct stat sb;

	return fstatat(fd, TEMP_MARK, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
	       sb.st_uid == geteuid();
}

void ma_outdir_unmark(int fd)
{
	unlinkat(fd, TEMP_MARK, 0);
}

void ma_outdir_remove(int parentfd, const char *name)
{
	struct stat before, now;
	int fd;

	if (fstatat(parentfd, name, &before, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISDIR(before.st_mode) || before.st_uid != geteuid())
		return;
	/* O_NOFOLLOW and the same inode: a folder swapped for a link since is left alone. */
	fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &now) == 0 && now.st_ino == before.st_ino && now.st_dev == before.st_dev &&
	    now.st_uid == geteuid() && has_temp_mark(fd))
		remove_own_files(fd);
	close(fd);
	unlinkat(parentfd, name, AT_REMOVEDIR); /* only if empty; never follows a link */
}

void ma_remove_stale_temps_at(int dirfd, const char *name)
{
	DIR *dh = open_listing(dirfd);
	struct dirent *d;

	if (!dh)
		return;
	while ((d = readdir(dh))) {
		struct stat sb;

		if (!stale_temp_of(d->d_name, name) ||
		    fstatat(dirfd, d->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || sb.st_uid != geteuid())
			continue;
		if (S_ISDIR(sb.st_mode))
			ma_outdir_remove(dirfd, d->d_name);
		else if (S_ISREG(sb.st_mode))
			unlinkat(dirfd, d->d_name, 0);
	}
	closedir(dh);
}

static void outfile_free(struct ma_outfile *o)
{
	if (o->dirfd >= 0)
		close(o->dirfd);
	free(o->name);
	free(o->tmp);
	free(o->path);
	o->name = o->tmp = o->path = NULL;
	o->dirfd = o->fd = -1;
}

/* Create the temporary ".NAME.tmp.PID.XXXXXX" in O->dirfd: new, never a link, mode 0600. */
static int create_temp(struct ma_outfile *o)
{
	size_t len = strlen(o->name) + 40;

	if (!(o->tmp = malloc(len)))
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (int i = 0; i < TEMP_TRIES; i++) {
		char suffix[7];

		random_suffix(suffix);
		snprintf(o->tmp, len, ".%s.tmp.%d.%s", o->name, (int)getpid(), suffix);
		o->fd = openat(o->dirfd, o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		if (o->fd >= 0 || errno != EEXIST)
			break;
	}
	if (o->fd < 0) {
		int e = errno;

		free(o->tmp);
		o->tmp = NULL;
		return ma_fail(MA_E_IO, "cannot create '%s': %s", o->path, strerror(e));
	}
	return 0;
}

bool ma_outfile_is_stdout(const char *path)
{
	return path && strcmp(path, "-") == 0;
}

int ma_outfile_openat(struct ma_outfile *o, int dirfd, const char *name, const char *path)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	o->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	o->name = strdup(name);
	o->path = strdup(path);
	if (o->dirfd < 0 || !o->name || !o->path) {
		outfile_free(o);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
		outfile_free(o);
		return ma_fail(MA_E_IO, "cannot create '%s': not a file name", path);
	}
	/* Named with our pid, so the next run removes it should we be killed. */
	ma_remove_stale_temps_at(o->dirfd, o->name);
	if ((rc = create_temp(o)))
		outfile_free(o);
	return rc;
}

/* "-": the standard output, written as it comes (no temporary, nothing to rename). */
static int open_stdout(struct ma_outfile *o)
{
	memset(o, 0, sizeof(*o));
	o->dirfd = -1;
	fflush(stdout);
	o->fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
	o->path = strdup("the standard output");
	if (o->fd < 0 || !o->path) {
		outfile_free(o);
		return ma_fail(MA_E_IO, "cannot write to the standard output: %s", strerror(errno));
	}
	return 0;
}

int ma_outfile_open(struct ma_outfile *o, const char *path)
{
	const char *base;
	int dirfd, rc;

	if (ma_outfile_is_stdout(path))
		return open_stdout(o);
	dirfd = ma_open_parent(path, &base);

	if (dirfd < 0) {
		char why[512];

		memset(o, 0, sizeof(*o));
		o->fd = o->dirfd = -1;
		snprintf(why, sizeof(why), "%s", ma_errmsg());
		ma_err_clear(); /* the first message stands otherwise */
		return ma_fail(dirfd, "cannot create '%s': %s", path, why);
	}
	rc = ma_outfile_openat(o, dirfd, base, path);
	close(dirfd);
	return rc;
}

FILE *ma_outfile_stream(struct ma_outfile *o)
{
	int fd = fcntl(o->fd, F_DUPFD_CLOEXEC, 0);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (!f) {
		ma_fail(MA_E_IO, "cannot write '%s': %s", o->path, strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	return f;
}

int ma_outfile_commit(struct ma_outfile *o)
{
	int rc = 0;

	if (close(o->fd) != 0)
		rc = ma_fail(MA_E_IO, "cannot write '%s': %s", o->path, strerror(errno));
	o->fd = -1;
	/* rename replaces a link of that name; it never writes through one */
	if (!rc && o->tmp && renameat(o->dirfd, o->tmp, o->dirfd, o->name) != 0)
		rc = ma_fail(MA_E_IO, "cannot rename to '%s': %s", o->path, strerror(errno));
	if (rc) {
		ma_outfile_abort(o);
		return rc;
	}
	outfile_free(o);
	return 0;
}

void ma_outfile_abort(struct ma_outfile *o)
{
	if (o->fd >= 0)
		close(o->fd);
	if (o->tmp && o->dirfd >= 0)
		unlinkat(o->dirfd, o->tmp, 0);
	outfile_free(o);
}

int ma_outdir_open(const char *path, int *dirfd, bool *existed)
{
	const char *base;
	struct stat sb;
	int parent, fd, rc;

	*dirfd = -1;
	*existed = false;
	if (ma_outfile_is_stdout(path))
		return ma_fail(MA_E_IO, "'-' (the standard output) cannot hold a folder of files: "
			       "name a folder");
	if ((parent = ma_open_parent(path, &base)) < 0)
		return parent;
	if (!base[0] || !strcmp(base, ".") || !strcmp(base, "..")) {
		close(parent);
		return ma_fail(MA_E_IO, "'%s': name a new folder", path);
	}
	if (mkdirat(parent, base, 0700) != 0) {
		if (errno != EEXIST) {
			rc = ma_fail(MA_E_IO, "cannot create '%s': %s", path, strerror(errno));
			close(parent);
			return rc;
		}
		*existed = true;
	}
	fd = openat(parent, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(parent);
	if (fd < 0)
		return ma_fail(errno == ELOOP || errno == ENOTDIR ? MA_E_PERM : MA_E_IO,
			       "cannot use '%s' as the output folder: %s", path,
			       errno == ELOOP ? "it is a symbolic link" : strerror(errno));
	if (fstat(fd, &sb) != 0 || sb.st_uid != geteuid() || (sb.st_mode & 022)) {
		rc = ma_fail(MA_E_PERM,
			     "'%s' exists and is not a private folder of this user (owner uid %u, "
			     "mode %04o): name a new folder, or one of yours that only you can "
			     "write (chmod go-w)",
			     path, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
		close(fd);
		return rc;
	}
	*dirfd = fd;
	return 0;
}

int ma_outdir_make_temp(int parentfd, const char *base, char *name, size_t len, int *fd)
{
	*fd = -1;
	ma_remove_stale_temps_at(parentfd, base);
	for (int i = 0; i < TEMP_TRIES; i++) {
		char suffix[7];

		random_suffix(suffix);
		snprintf(name, len, "%s.tmp.%d.%s", base, (int)getpid(), suffix);
		if (mkdirat(parentfd, name, 0700) == 0)
			break;
		if (errno != EEXIST)
			return ma_fail(MA_E_IO, "cannot create a folder next to '%s': %s", base,
				       strerror(errno));
		name[0] = '\0';
	}
	if (!name[0])
		return ma_fail(MA_E_IO, "cannot create a folder next to '%s'", base);
	*fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*fd >= 0) {
		int mark = openat(*fd, TEMP_MARK, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				  0600);

		if (mark >= 0) {
			close(mark);
			return 0;
		}
		close(*fd);
		*fd = -1;
	}
	{
		int e = errno;

		unlinkat(parentfd, name, AT_REMOVEDIR);
		return ma_fail(MA_E_IO, "cannot make the new folder '%s': %s", name, strerror(e));
	}
}
