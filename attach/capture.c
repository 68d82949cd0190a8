/*
 * capture.c - heap dumps through a memfd, and all-or-nothing output files.
 */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <limits.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture.h"
#include "seccomp.h"
#include "jectl.h"
#include "live.h"
#include "ma_error.h"
#include "openmetrics.h"
#include "safepoint.h"

#define PROF_DUMP_TIMEOUT_MS 60000
#define MFD_CLOEXEC_FLAG 1U

const char *ma_prof_restart_hint(const struct ma_target *t)
{
	/* tikv-jemallocator's prefixed jemalloc reads its own variable. */
	if (t->je.flavour == MA_JE_PREFIX_RJEM)
		return "_RJEM_MALLOC_CONF=prof:true,prof_active:true,prof_final:false";
	return "MALLOC_CONF=prof:true,prof_active:true,prof_final:false";
}

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

/* Copy the target's descriptor FD, reopened through /proc, to OUT_FD. */
static int copy_target_fd(pid_t pid, long fd, int out_fd, size_t *nbytes)
{
	char path[64], buf[65536];
	ssize_t n;
	int in, rc = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd/%ld", (int)pid, fd);
	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return ma_fail(MA_E_IO, "cannot open the target's dump descriptor %s: %s", path,
			       strerror(errno));
	*nbytes = 0;
	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = ma_fail(MA_E_IO, "reading %s: %s", path, strerror(errno));
			break;
		}
		if ((rc = ma_write_all(out_fd, buf, (size_t)n)))
			break;
		*nbytes += (size_t)n;
	}
	close(in);
	return rc;
}

int ma_capture_heap_dump(struct ma_session *s, const struct ma_je_stats *st, int out_fd,
			 size_t *nbytes)
{
	static const char name[] = MA_MEMFD_NAME;
	char path[48];
	uint64_t a_name, fd = (uint64_t)-1, ret;
	int rc;

	*nbytes = 0;
	if (!st->opt_prof)
		return ma_fail(MA_E_JEMALLOC,
			       "process %d was not started with heap profiling (opt.prof is false); "
			       "restart it with %s",
			       s->t->pid, ma_prof_restart_hint(s->t));
	{
		/* jemalloc's prof.dump creat()s, writes and closes the file in the borrowed thread. */
		struct ma_sc_query q[] = {
			{ SYS_openat, { (uint64_t)AT_FDCWD, 0, O_WRONLY | O_CREAT | O_TRUNC, 0644, 0, 0 }, 0,
			  "openat (prof.dump creates the dump)" },
			{ SYS_write, { 3, 0, 4096, 0, 0, 0 }, 0, "write (prof.dump)" },
			{ SYS_close, { 3, 0, 0, 0, 0, 0 }, 0, "close (prof.dump)" },
		};

		for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
			q[i].ip = s->stub + MA_STUB_MARKER_END;
		if ((rc = ma_session_check_syscalls(s, q, sizeof(q) / sizeof(q[0]))))
			return rc;
	}
	ma_session_reset(s);
	a_name = ma_session_alloc(s, sizeof(name));
	if (!a_name)
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->proc_pid, a_name, name, sizeof(name))))
		return rc;
	{
		uint64_t args[2] = { a_name, MFD_CLOEXEC_FLAG };

		if ((rc = ma_session_syscall(s, SYS_memfd_create, args, 2, &fd)))
			return rc;
	}
	if ((int64_t)fd < 0)
		return ma_fail(MA_E_IO, "memfd_create in the target failed: %s",
			       strerror((int)-(int64_t)fd));
	/* jemalloc creat()s this path: it reopens our memfd, nothing on disk. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", (int)fd);
	rc = ma_mallctl_write_cstr(s, "prof.dump", path, PROF_DUMP_TIMEOUT_MS);
	if (!rc)
		rc = copy_target_fd(s->t->proc_pid, (long)fd, out_fd, nbytes);
	if (!rc && *nbytes == 0)
		rc = ma_fail(MA_E_JEMALLOC, "prof.dump wrote nothing");
	if (!s->abandoned) {
		uint64_t args[1] = { fd };

		if (ma_session_syscall(s, SYS_close, args, 1, &ret) && !rc)
			rc = MA_E_INTERNAL;
	}
	return rc;
}

/* Is PID a live memattach (then its temporary files are in use)? */
static bool memattach_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM) && ma_is_memattach(pid);
}

void ma_remove_stale_temps(const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	char dir[PATH_MAX], prefix[PATH_MAX], full[PATH_MAX * 2];
	size_t plen;
	struct dirent *d;
	DIR *dh;

	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	plen = (size_t)snprintf(prefix, sizeof(prefix), "%s.tmp.", base);
	if (!(dh = opendir(dir)))
		return;
	while ((d = readdir(dh))) {
		const char *name = d->d_name, *p;
		char *end;
		long pid;

		/* ".NAME.tmp.PID.XXXXXX" (files) or "NAME.tmp.PID.XXXXXX" (snapshot directories) */
		if (name[0] == '.')
			name++;
		if (strncmp(name, prefix, plen) != 0)
			continue;
		p = name + plen;
		pid = strtol(p, &end, 10);
		if (end == p || *end != '.' || memattach_alive((pid_t)pid))
			continue;
		snprintf(full, sizeof(full), "%s/%s", dir, d->d_name);
		if (d->d_type == DT_DIR)
			ma_remove_tree(full);
		else
			unlink(full);
	}
	closedir(dh);
}

void ma_remove_tree(const char *dir)
{
	char full[PATH_MAX * 2];
	struct dirent *d;
	DIR *dh = opendir(dir);

	if (!dh)
		return;
	while ((d = readdir(dh)))
		if (strcmp(d->d_name, ".") && strcmp(d->d_name, "..")) {
			snprintf(full, sizeof(full), "%s/%s", dir, d->d_name);
			unlink(full);
		}
	closedir(dh);
	rmdir(dir);
}

int ma_outfile_open(struct ma_outfile *o, const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	o->path = strdup(path);
	o->tmp = malloc(strlen(path) + 32);
	if (!o->path || !o->tmp) {
		ma_outfile_abort(o);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	/*
	 * Hidden temporary in the same directory, so rename is atomic; named
	 * with our pid, so the next run removes it should we be killed.
	 */
	ma_remove_stale_temps(path);
	snprintf(o->tmp, strlen(path) + 32, "%.*s.%s.tmp.%d.XXXXXX", (int)dlen, path, path + dlen,
		 (int)getpid());
	o->fd = mkstemp(o->tmp);
	if (o->fd < 0) {
		int e = errno;

		free(o->tmp);
		o->tmp = NULL;
		ma_outfile_abort(o);
		return ma_fail(MA_E_IO, "cannot create '%s': %s", path, strerror(e));
	}
	fchmod(o->fd, 0644);
	return 0;
}

int ma_outfile_commit(struct ma_outfile *o)
{
	int rc = 0;

	if (close(o->fd) != 0)
		rc = ma_fail(MA_E_IO, "cannot write '%s': %s", o->path, strerror(errno));
	o->fd = -1;
	if (!rc && rename(o->tmp, o->path) != 0)
		rc = ma_fail(MA_E_IO, "cannot rename to '%s': %s", o->path, strerror(errno));
	if (rc) {
		ma_outfile_abort(o);
		return rc;
	}
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
	return 0;
}

void ma_outfile_abort(struct ma_outfile *o)
{
	if (o->fd >= 0)
		close(o->fd);
	if (o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
	o->fd = -1;
}

int ma_scrape_target(pid_t pid, const struct ma_session_opts *o, struct ma_om_target *out)
{
	struct ma_proc_status ps;
	struct ma_live l;
	int rc, rc2;

	out->pid = pid;
	out->ok = false;
	out->borrow_ns = 0;
	ma_bin_table_release(&out->bins);
	if (ma_process_status(pid, &ps) == 0) {
		snprintf(out->comm, sizeof(out->comm), "%s", ps.name);
		out->vm_rss = ps.vm_rss;
		out->vm_hwm = ps.vm_hwm;
	}
	if ((rc = ma_live_begin(&l, pid, o, NULL, NULL)))
		return rc; /* nothing left open */
	rc = ma_collect_stats(&l.s, &out->st);
	if (!rc)
		rc = ma_je_read_bins(&l.s, &out->bins);
	rc2 = ma_live_end(&l);
	out->borrow_ns = l.s.stopped_ns;
	if (!rc && rc2)
		rc = rc2;
	if (rc) {
		ma_bin_table_release(&out->bins);
		return rc;
	}
	/* VmRSS as close to the readings as we can: after the visit. */
	if (ma_process_status(pid, &ps) == 0) {
		out->vm_rss = ps.vm_rss;
		out->vm_hwm = ps.vm_hwm;
	}
	ma_err_clear();
	ma_headline_compute(&out->st, out->vm_rss, &out->h);
	out->ok = true;
	return 0;
}
