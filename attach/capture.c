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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture.h"
#include "fragctl.h"
#include "seccomp.h"
#include "jectl.h"
#include "live.h"
#include "ma_error.h"
#include "openmetrics.h"
#include "safepoint.h"
#include "targetfd.h"

#define PROF_DUMP_TIMEOUT_MS 60000
/* A bound on what one dump may put on disk: far above any real profile. */
#define MAX_DUMP_BYTES ((size_t)4 << 30)

const char *ma_prof_restart_hint(const struct ma_target *t)
{
	/* tikv-jemallocator's prefixed jemalloc reads its own variable. */
	if (t->je.flavour == MA_JE_PREFIX_RJEM)
		return "_RJEM_MALLOC_CONF=prof:true,prof_active:true,prof_final:false";
	return "MALLOC_CONF=prof:true,prof_active:true,prof_final:false";
}

/* Append /proc/PID/maps, as the kernel gives it to us, to OUT_FD. */
static int append_kernel_maps(pid_t pid, int out_fd, size_t *nbytes)
{
	char path[64], buf[65536];
	ssize_t n;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return ma_fail(MA_E_IO, "cannot read %s: %s", path, strerror(errno));
	while (!rc && (n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = ma_fail(MA_E_IO, "reading %s: %s", path, strerror(errno));
		else if (!(rc = ma_write_all(out_fd, buf, (size_t)n)))
			*nbytes += (size_t)n;
	}
	close(fd);
	return rc;
}

/*
 * The dump from our memfd reference FD into OUT_FD, with its
 * MAPPED_LIBRARIES section replaced by the process's maps as the kernel
 * shows them to memattach.  The target's jemalloc wrote that section, and
 * a patched one could name any file there (a root-only ELF whose symbols
 * a later aggregate would then print); the kernel's list names only what
 * the process really mapped.
 */
static int copy_dump(int fd, pid_t pid, int out_fd, size_t *nbytes)
{
	static const char marker[] = "\nMAPPED_LIBRARIES:\n";
	struct stat sb;
	const char *p, *cut;
	size_t len, head;
	int rc;

	*nbytes = 0;
	if (fstat(fd, &sb) != 0)
		return ma_fail(MA_E_IO, "reading the dump's memfd: %s", strerror(errno));
	len = (size_t)sb.st_size;
	if (len > MAX_DUMP_BYTES)
		return ma_fail(MA_E_IO, "the dump holds %zu bytes, more than the %zu memattach takes",
			       len, MAX_DUMP_BYTES);
	if (len == 0)
		return 0;
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return ma_fail(MA_E_IO, "reading the dump's memfd: %s", strerror(errno));
	cut = memmem(p, len, marker, sizeof(marker) - 1);
	head = cut ? (size_t)(cut - p) : len;
	rc = ma_write_all(out_fd, p, head);
	munmap((void *)p, len);
	if (rc)
		return rc;
	*nbytes = head;
	if ((rc = ma_write_all(out_fd, marker, sizeof(marker) - 1)))
		return rc;
	*nbytes += sizeof(marker) - 1;
	return append_kernel_maps(pid, out_fd, nbytes);
}

/*
 * The agent's heap profile (profile start) as a heap_v2 dump into OUT_FD:
 * its stacks, then the kernel's maps as for jemalloc's own dump.
 */
int ma_capture_agent_heap_dump(const struct ma_target *t, int out_fd, size_t *nbytes,
			       struct ma_agent_profile *info)
{
	struct ma_heapprof hp;
	long len;
	FILE *f;
	int fd, rc;

	if ((rc = ma_agent_profile_read(t, &hp, info)))
		return rc;
	hp.from_agent = true;
	hp.agent_since_unix_ns = info->started_unix_ns;
	if ((fd = dup(out_fd)) < 0 || !(f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		ma_heapprof_release(&hp);
		return ma_fail(MA_E_IO, "cannot write the heap profile: %s", strerror(errno));
	}
	rc = ma_heapprof_write(&hp, f);
	len = ftell(f);
	if (fclose(f) && !rc)
		rc = ma_fail(MA_E_IO, "cannot write the heap profile: %s", strerror(errno));
	ma_heapprof_release(&hp);
	if (rc)
		return rc;
	*nbytes = len > 0 ? (size_t)len : 0;
	return append_kernel_maps(t->proc_pid, out_fd, nbytes);
}

int ma_capture_heap_dump(struct ma_session *s, const struct ma_je_stats *st, int out_fd,
			 size_t *nbytes, struct ma_agent_profile *agent)
{
	static const char name[] = MA_MEMFD_NAME;
	char path[48];
	uint64_t a_name, fd = (uint64_t)-1, ret;
	int rc, ours = -1;

	*nbytes = 0;
	if (agent)
		memset(agent, 0, sizeof(*agent));
	if (!st->opt_prof && agent && ma_agent_profiling(s->t))
		return ma_capture_agent_heap_dump(s->t, out_fd, nbytes, agent);
	if (!st->opt_prof)
		return ma_fail(MA_E_JEMALLOC,
			       "process %d was not started with heap profiling (opt.prof is false); "
			       "'memattach profile start %d' profiles it from now on without a "
			       "restart, or restart it with %s",
			       s->t->pid, s->t->pid, ma_prof_restart_hint(s->t));
	{
		/*
		 * jemalloc's prof.dump creat()s, writes and closes the file in the
		 * borrowed thread: creat is its own syscall on x86-64 (glibc), openat
		 * where the C library makes it so.  The descriptor is chosen then.
		 */
		struct ma_sc_query q[] = {
			{ SYS_creat, { 0, 0644, 0, 0, 0, 0 }, 0, "creat (prof.dump creates the dump)" },
			{ SYS_openat, { (uint64_t)AT_FDCWD, 0, O_WRONLY | O_CREAT | O_TRUNC, 0644, 0, 0 }, 0,
			  "openat (prof.dump creates the dump)" },
			{ SYS_write, { MA_SC_UNCHOSEN_FD, 0, 4096, 0, 0, 0 }, 0, "write (prof.dump)" },
			{ SYS_close, { MA_SC_UNCHOSEN_FD, 0, 0, 0, 0, 0 }, 0, "close (prof.dump)" },
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
		uint64_t args[2] = { a_name, MA_MEMFD_FLAGS };

		if ((rc = ma_session_syscall(s, SYS_memfd_create, args, 2, &fd)))
			return rc;
	}
	if ((int64_t)fd < 0)
		return ma_fail(MA_E_IO, "memfd_create in the target failed: %s",
			       strerror((int)-(int64_t)fd));
	/*
	 * Our own reference to the memfd, taken and checked at once: what the
	 * program puts at that number later is never opened or read by us.
	 */
	rc = ma_take_target_memfd(s->t->proc_pid, (int)fd, MA_MEMFD_NAME, 0, &ours);
	/* jemalloc creat()s this path: it reopens our memfd, nothing on disk. */
	snprintf(path, sizeof(path), "/proc/thread-self/fd/%d", (int)fd);
	if (!rc)
		rc = ma_mallctl_write_cstr(s, "prof.dump", path, PROF_DUMP_TIMEOUT_MS);
	if (!rc)
		rc = copy_dump(ours, s->t->proc_pid, out_fd, nbytes);
	if (ours >= 0)
		close(ours);
	if (!rc && *nbytes == 0)
		rc = ma_fail(MA_E_JEMALLOC, "prof.dump wrote nothing");
	if (!s->abandoned) {
		uint64_t args[1] = { fd };

		if (ma_session_syscall(s, SYS_close, args, 1, &ret) && !rc)
			rc = MA_E_INTERNAL;
	}
	return rc;
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
