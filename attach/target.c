/*
 * target.c - a target's mappings, the files behind them, and its memory
 * read and written (include/target.h).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <signal.h>
#include <unistd.h>

#include "arch.h"
#include "elfsyms.h"
#include "ma_error.h"
#include "steps.h"
#include "target.h"
#include "input.h"


static int parse_maps_line(char *line, struct ma_mapping *m)
{
	unsigned long long start, end, off, inode;
	char perms[8];
	int pathpos = 0;

	if (sscanf(line, "%llx-%llx %7s %llx %*s %llu %n", &start, &end, perms, &off,
		   &inode, &pathpos) < 5)
		return -1;
	memset(m, 0, sizeof(*m));
	m->start = start;
	m->end = end;
	m->offset = off;
	m->inode = inode;
	memcpy(m->perms, perms, 4);
	m->perms[4] = '\0';
	if (pathpos > 0) {
		char *p = line + pathpos;
		size_t n;

		p[strcspn(p, "\n")] = '\0';
		n = strlen(p);
		if (n > 10 && strcmp(p + n - 10, " (deleted)") == 0) {
			p[n - 10] = '\0';
			m->deleted = true;
		}
		if (*p)
			m->path = strdup(p);
	}
	return 0;
}

static unsigned long nmaps_read;

unsigned long ma_target_maps_read(void)
{
	return nmaps_read;
}

/*
 * The thread we read a process with an exited main thread through is
 * gone: it exited, or it exec()d and so became the main thread (the
 * process then runs a new program).
 */
static int thread_gone(const struct ma_target *t)
{
	struct ma_proc_status st;

	if (ma_proc_read_status(t->pid, 0, &st) || st.tgid != t->pid || ma_process_exited(t->pid))
		return ma_fail(MA_E_EXITED, "process %d exited during the run", t->pid);
	if (st.state != 'Z' && st.state != 'X')
		return ma_fail(MA_E_EXITED, "process %d replaced its program (exec) while memattach "
			       "attached; run memattach again", t->pid);
	return ma_fail(MA_E_EXITED, "process %d: its thread %d exited while memattach read it; "
		       "run memattach again", t->pid, t->proc_pid);
}

static int read_maps(struct ma_target *t)
{
	char path[64], *line = NULL;
	size_t cap = 0, mcap = 0;
	FILE *f;

	nmaps_read++;
	snprintf(path, sizeof(path), "/proc/%d/maps", t->proc_pid);
	f = fopen(path, "re");
	if (!f && errno == ENOENT && t->proc_pid != t->pid)
		return thread_gone(t);
	if (!f)
		return ma_fail(errno == EACCES ? MA_E_PERM : MA_E_NOPROC,
			       "cannot read %s: %s", path, strerror(errno));
	while (getline(&line, &cap, f) > 0) {
		struct ma_mapping m;

		if (parse_maps_line(line, &m) != 0)
			continue;
		if (t->nmaps == mcap) {
			size_t n = mcap ? mcap * 2 : 64;
			struct ma_mapping *p = realloc(t->maps, n * sizeof(*p));

			if (!p) {
				free(m.path);
				break;
			}
			t->maps = p;
			mcap = n;
		}
		t->maps[t->nmaps++] = m;
	}
	free(line);
	fclose(f);
	if (t->nmaps == 0)
		return ma_fail(MA_E_PERM, "cannot read the mappings of pid %d", t->pid);
	return 0;
}

/*
 * The kernel hands a non-dumpable process's /proc/PID files (maps, mem,
 * status...) to root: as its own (non-root) user, they then belong to root
 * while the directory is still ours.
 */
static bool dumpable_for_us(pid_t pid)
{
	char path[64];
	struct stat dir, maps;

	if (geteuid() == 0)
		return true;
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &dir) != 0 || dir.st_uid != geteuid())
		return true; /* not ours at all: the other checks say so */
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	return stat(path, &maps) != 0 || maps.st_uid == geteuid();
}

int ma_target_maps_now(const struct ma_target *t, struct ma_target *now)
{
	int rc;

	memset(now, 0, sizeof(*now));
	now->pid = t->pid;
	now->proc_pid = t->proc_pid;
	if ((rc = read_maps(now)))
		ma_target_release(now);
	/* Empty maps mid-run: the process is exiting (the message says so). */
	return ma_fail_if_exited(t->pid, rc);
}

int ma_target_maps_refresh(struct ma_target *t)
{
	struct ma_target now;
	int rc;

	if ((rc = ma_target_maps_now(t, &now)))
		return rc;
	for (size_t i = 0; i < t->nmaps; i++)
		free(t->maps[i].path);
	free(t->maps);
	t->maps = now.maps;
	t->nmaps = now.nmaps;
	now.maps = NULL;
	now.nmaps = 0;
	ma_target_release(&now);
	return 0;
}

int ma_target_open(struct ma_target *t, pid_t pid)
{
	struct ma_proc_status st;
	int rc;

	memset(t, 0, sizeof(*t));
	t->pid = t->proc_pid = pid;
	rc = ma_proc_read_status(pid, 0, &st);
	if (rc)
		return rc;
	/* An exiting process its pid namespace has let go of shows Tgid 0. */
	if (st.tgid == 0)
		return ma_fail(MA_E_NOPROC, "no process with pid %d", pid);
	if (st.tgid != pid)
		return ma_fail(MA_E_NOPROC, "%d is a thread of process %d; give the process id",
			       pid, st.tgid);
	/* A main thread that called pthread_exit is a zombie; the others still run. */
	if (st.state == 'Z' || st.state == 'X') {
		if (!(t->proc_pid = ma_live_thread_of(pid)))
			return ma_fail(MA_E_ZOMBIE, "process %d (%s) exited (a zombie: its parent "
				       "has not reaped it yet)", pid, st.name);
	}
	/* Another memattach (or one that just exited: its comm is gone) is waited for, not refused. */
	if (st.tracer != 0 && st.tracer != getpid() && !ma_is_memattach(st.tracer) &&
	    strcmp(ma_comm_of(st.tracer), "?") != 0)
		return ma_fail(MA_E_TRACED,
			       "process %d (%s) is already traced by pid %d (%s); detach that first",
			       pid, st.name, st.tracer, ma_comm_of(st.tracer));
	if (kill(pid, 0) != 0 && errno == EPERM)
		return ma_fail(MA_E_PERM, "no permission to attach to pid %d; run as its user or root",
			       pid);
	if (!dumpable_for_us(pid))
		return ma_fail(MA_E_PERM,
			       "process %d (%s) is not dumpable (it called prctl(PR_SET_DUMPABLE, 0), "
			       "or changed its user or group): only root (CAP_SYS_PTRACE) may attach; "
			       "run memattach as root",
			       pid, st.name);
	/* Empty maps: its memory is gone, as it is while it exits. */
	return ma_fail_if_exited(pid, read_maps(t));
}

static bool same_mapping(const struct ma_mapping *a, const struct ma_mapping *b)
{
	return a->start == b->start && a->end == b->end && a->offset == b->offset &&
	       a->inode == b->inode && strcmp(a->perms, b->perms) == 0;
}

/*
 * Is mapping M still there, the same file?  One stat of its map_files
 * entry; 1 yes, 0 no, -1 cannot tell (map_files needs CAP_SYS_ADMIN).
 */
static int mapping_still_there(pid_t pid, const struct ma_mapping *m)
{
	char path[96];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m->start, m->end);
	if (stat(path, &st) == 0)
		return st.st_ino == m->inode;
	return errno == ENOENT ? 0 : -1;
}

int ma_target_maps_unchanged(const struct ma_target *t, const uint64_t *addrs, size_t n)
{
	struct ma_target now;
	int rc = 0;
	bool known = true;

	for (size_t i = 0; i < n && known; i++) {
		const struct ma_mapping *m = ma_target_mapping_at(t, addrs[i]);
		int there = m && m->inode ? mapping_still_there(t->proc_pid, m) : -1;

		if (there == 0)
			return ma_fail(MA_E_EXITED,
				       "process %d replaced its program (exec) or unmapped jemalloc "
				       "while memattach attached; run memattach again",
				       t->pid);
		known = there == 1;
	}
	if (known)
		return 0;

	/* Without map_files (a user without CAP_SYS_ADMIN): the maps, read again. */
	if ((rc = ma_target_maps_now(t, &now)))
		return rc;
	for (size_t i = 0; i < n && !rc; i++) {
		const struct ma_mapping *a = ma_target_mapping_at(t, addrs[i]);
		const struct ma_mapping *b = ma_target_mapping_at(&now, addrs[i]);

		if (!a || !b || !same_mapping(a, b))
			rc = ma_fail(MA_E_EXITED,
				     "process %d replaced its program (exec) or unmapped jemalloc "
				     "while memattach attached; run memattach again",
				     t->pid);
	}
	ma_target_release(&now);
	return rc;
}

const struct ma_mapping *ma_target_mapping_at(const struct ma_target *t, uint64_t addr)
{
	size_t lo = 0, hi = t->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->maps[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->nmaps && t->maps[lo].start <= addr && addr < t->maps[lo].end)
		return &t->maps[lo];
	return NULL;
}

int ma_target_open_mapped_file(const struct ma_target *t, const struct ma_mapping *m)
{
	char path[4200];
	int fd;

	/* map_files works for deleted files and other mount namespaces. */
	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, t->proc_pid,
		 m->start, m->end);
	fd = ma_open_regular_proc_link(path);
	if (fd >= 0)
		return fd;
	/*
	 * Without map_files (it needs CAP_SYS_ADMIN), the path inside the
	 * target's root (links resolved there, never out of it) -- but only if
	 * it is still the very file mapped: after an upgrade in place its
	 * symbols would point into other code.
	 */
	if (m->path && m->path[0] == '/' && !m->deleted) {
		struct stat st;
		int root;

		snprintf(path, sizeof(path), "/proc/%d/root", t->proc_pid);
		if ((root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
			return -1;
		fd = ma_open_regular(root, m->path, true);
		close(root);
		if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_ino == m->inode)
			return fd;
		if (fd >= 0)
			close(fd);
	}
	return -1;
}

/* Do mappings A and B map the same file? */
bool ma_target_same_object(const struct ma_mapping *a, const struct ma_mapping *b)
{
	return a->inode == b->inode && a->path && b->path && strcmp(a->path, b->path) == 0;
}

const struct ma_mapping *ma_target_first_mapping(const struct ma_target *t,
						 const struct ma_mapping *m)
{
	const struct ma_mapping *best = m;

	for (size_t i = 0; i < t->nmaps; i++)
		if (ma_target_same_object(&t->maps[i], m) && t->maps[i].start < best->start)
			best = &t->maps[i];
	return best;
}

uint64_t ma_target_load_bias(const struct ma_mapping *first, const struct ma_elf *e)
{
	return e->type == 3 /* ET_DYN */ ? first->start - ma_elf_base_vaddr(e) : 0;
}

void ma_target_release(struct ma_target *t)
{
	for (size_t i = 0; i < t->nmaps; i++)
		free(t->maps[i].path);
	free(t->maps);
	free(t->je.object);
	free(t->je.text);
	free(t->je.tls_image);
	free(t->je.tls_now);
	memset(t, 0, sizeof(*t));
}

static int mem_fallback(pid_t pid, uint64_t addr, void *buf, size_t len, bool write)
{
	char path[64];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0)
		return ma_fail(MA_E_IO, "cannot open %s: %s", path, strerror(errno));
	n = write ? pwrite(fd, buf, len, (off_t)addr) : pread(fd, buf, len, (off_t)addr);
	close(fd);
	if (n != (ssize_t)len)
		return ma_fail(MA_E_IO, "cannot %s %zu bytes at 0x%" PRIx64 " in pid %d",
			       write ? "write" : "read", len, addr, pid);
	return 0;
}

int ma_mem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	if (process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len)
		return 0;
	return mem_fallback(pid, addr, buf, len, false);
}

int ma_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = { (void *)buf, len }, remote = { (void *)(uintptr_t)addr, len };
	int rc = 0;

	if (process_vm_writev(pid, &local, 1, &remote, 1, 0) != (ssize_t)len)
		rc = mem_fallback(pid, addr, (void *)buf, len, true);
	ma_step();
	return rc;
}

void ma_kernel_touch(void *p, size_t len)
{
	struct iovec v = { p, len };

	(void)process_vm_readv(getpid(), &v, 1, &v, 1, 0); /* failing, the hold is only slower */
}

int ma_mem_write_fd(int mem_fd, pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	if (mem_fd < 0 || pwrite(mem_fd, buf, len, (off_t)addr) != (ssize_t)len)
		return ma_mem_write(pid, addr, buf, len);
	ma_step();
	return 0;
}

int ma_target_tid_offset(struct ma_target *t)
{
	uint32_t desc[3]; /* bits, count, offset */

	if (!t->pthread_tid_off && t->pthread_tid_desc) {
		t->pthread_tid_off = -1;
		if (ma_mem_read(t->proc_pid, t->pthread_tid_desc, desc, sizeof(desc)) == 0 &&
		    desc[0] == 32 && desc[2] > 0 && desc[2] < 65536)
			t->pthread_tid_off = (int)desc[2];
		ma_err_clear();
	}
	return t->pthread_tid_off > 0 ? t->pthread_tid_off : -1;
}
