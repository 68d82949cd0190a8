/*
 * session_leftovers.c - what a killed run left in the target: its stub
 * header, the mappings it recorded there, its memfds; found and removed
 * by the next run, once no thread runs in them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "ma_error.h"
#include "holdprio.h"
#include "remote.h"
#include "runclock.h"
#include "agent_abi.h"
#include "runlock.h"
#include "safepoint.h"
#include "seccomp.h"
#include "steps.h"
#include "testhooks.h"
#include "session_int.h"
#include "stubsite.h"

/* ---- leftovers of a killed run ---- */

static bool in_range(uint64_t a, uint64_t lo, uint64_t len)
{
	return a >= lo && a - lo < len;
}

/* Is PC or SP in the stub or in one of H's mappings? */
bool leftover_runs_in(const struct ma_stub_header *h, uint64_t stub, uint64_t pc, uint64_t sp)
{
	if (in_range(pc, stub, MA_STUB_REGION))
		return true;
	for (size_t i = 0; i < MA_MAX_MAP_RECORDS; i++)
		if (h->map[i].len &&
		    (in_range(pc, h->map[i].addr, h->map[i].len) || in_range(sp, h->map[i].addr, h->map[i].len)))
			return true;
	return false;
}

/*
 * Stop thread TID just long enough to read its ip and stack pointer (a
 * syscall our stop failed with EINTR is issued again).  False if it could
 * not be stopped.
 */
static bool peek_thread(pid_t pid, pid_t tid, uint64_t *pc, uint64_t *sp)
{
	struct user_regs_struct r;
	int status, sig = 0;
	bool ok = false;

	if (ma_ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0)
		return false;
	if (ma_ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0 && stops_wait(tid, &status, 1000) == 0 &&
	    WIFSTOPPED(status)) {
		if ((status >> 16) == 0)
			sig = WSTOPSIG(status);
		ok = ma_arch_get_regs(tid, &r) == 0;
		if (ok) {
			*pc = ma_arch_ip(&r);
			*sp = ma_arch_stack_pointer(&r);
			thread_release_regs_eintr(pid, tid);
		}
		ma_ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig);
	} else {
		stops_add_straggler(pid, tid, true); /* not known: as if it were */
	}
	ma_err_clear();
	return ok;
}

/*
 * Does a thread still run in the leftover described by H (at stub site
 * STUB)?  Its borrowed thread is in it while its ip is in the stub or a
 * mapping, or its stack pointer in a mapping.  A thread that is running
 * is stopped for a moment to look; if that fails, assume it is.
 */
/*
 * Is a return into the stub on the stack above SP (up to STUB_SCAN
 * bytes)?  A call whose data sat on the thread's own stack (no mapping)
 * runs in the program's code with its ip and stack pointer nowhere of
 * ours, yet returns into the stub: a call left to finish (a timeout, a
 * memattach killed), blocked in a lock.  Once the thread is back in its
 * own code, that return address lies below its stack pointer.
 */
#define STUB_SCAN (128 * 1024)
static bool stub_return_above(pid_t pid, uint64_t sp, uint64_t stub)
{
	static uint64_t words[4096 / 8];
	uint64_t chunk;

	for (uint64_t a = sp & ~(uint64_t)7; a < sp + STUB_SCAN; a += chunk) {
		chunk = sizeof(words) - (a & (sizeof(words) - 1)); /* to the page's end */
		if (ma_mem_read(pid, a, words, chunk) != 0) {
			ma_err_clear();
			return false; /* the end of its stack */
		}
		for (size_t i = 0; i < chunk / 8; i++)
			if (in_range(words[i], stub, MA_STUB_REGION))
				return true;
	}
	return false;
}

static bool leftover_in_use(const struct ma_session *s, const struct ma_stub_header *h,
			    uint64_t stub)
{
	uint64_t pc = 0, sp = 0;

	if ((pid_t)h->tid == s->tid) {
		pc = ma_arch_ip(&s->saved.regs);
		sp = ma_arch_stack_pointer(&s->saved.regs);
	} else {
		switch (ma_thread_where(s->t->pid, (pid_t)h->tid, &sp, &pc)) {
		case MA_WHERE_GONE:
			return false;
		case MA_WHERE_RUNNING:
			if (!peek_thread(s->t->pid, (pid_t)h->tid, &pc, &sp))
				return true;
			break;
		default:
			break;
		}
	}
	return leftover_runs_in(h, stub, pc, sp) || stub_return_above(s->t->proc_pid, sp, stub);
}

/*
 * Is the anonymous mapping R there, and ours: our magic and R's session in
 * its header, or still all zero (the run died between its mmap and
 * writing the header)?
 */
static bool leftover_mapping(const struct ma_session *s, const struct ma_target *now,
			     const struct ma_map_record *r)
{
	const struct ma_mapping *m = ma_target_mapping_at(now, r->addr);
	uint64_t hdr[2];

	/*
	 * Ours starts a mapping (a page left free on each side when made), is
	 * anonymous, and its first page is r-x or, before its mprotect, rw-.
	 */
	if (!r->len || !m || m->start != r->addr || m->path)
		return false;
	if (ma_mem_read(s->t->proc_pid, r->addr, hdr, sizeof(hdr)) != 0) {
		ma_err_clear();
		return false;
	}
	if (hdr[0] == 0 && hdr[1] == 0) /* the run died before writing it: only if whole */
		return m->end == r->addr + r->len && strncmp(m->perms, "rw-", 3) == 0;
	return hdr[0] == MA_MAGIC_MAP && hdr[1] == r->session;
}

/*
 * Take over the still-mapped records of a killed run's header H.  Judged
 * against the mappings as they are now: the run may have been killed after
 * this one read them (it waited for the run lock meanwhile), and a record
 * dropped here is a mapping left in the target for good.
 */
static void inherit_records(struct ma_session *s, const struct ma_stub_header *h)
{
	struct ma_target now;

	if (ma_target_maps_now(s->t, &now) != 0) {
		ma_err_clear();
		return;
	}
	for (size_t i = 0; i < MA_MAX_MAP_RECORDS; i++) {
		bool dup = false;

		if (!leftover_mapping(s, &now, &h->map[i]))
			continue;
		for (size_t j = 0; j < s->ninherited; j++)
			dup |= s->inherited[j].addr == h->map[i].addr;
		if (!dup && s->ninherited < MA_MAX_MAP_RECORDS - 2)
			s->inherited[s->ninherited++] = h->map[i];
	}
	ma_target_release(&now);
}

/*
 * Look at every stub site.  A site whose stub a killed run left is free
 * again once no thread runs in it: its mappings are inherited (unmapped
 * once this session can issue syscalls) and its bytes put back after
 * that.  A site still in use is left alone.  This session takes a clean
 * site if there is one, else a freed one.
 */
static int site_not_ours(const struct ma_session *s)
{
	return ma_fail(MA_E_EXITED, "process %d replaced its program (exec) while memattach "
		       "attached (no stub site holds its file's bytes); run memattach again",
		       s->t->pid);
}

/*
 * Does site I hold its file's bytes?  A site that does not (unreadable,
 * or the process exec'd and other bytes sit there) is never written.
 */
static bool site_as_in_file(const struct ma_session *s, size_t i)
{
	unsigned char now[MA_STUB_REGION];

	if (ma_mem_read(s->t->proc_pid, s->t->stub_sites[i].addr, now, sizeof(now)) != 0) {
		ma_err_clear();
		return false;
	}
	return memcmp(now, ma_stubsite_original(s->t, i), sizeof(now)) == 0;
}

/* Every site's header in one read (an unreadable one: no magic). */
void leftover_read_site_headers(const struct ma_session *s, struct ma_stub_header *hs)
{
	struct iovec local[MA_MAX_STUB_SITES] = { { 0 } }, remote[MA_MAX_STUB_SITES] = { { 0 } };
	size_t n = s->t->nstub_sites;

	for (size_t i = 0; i < n; i++) {
		local[i] = (struct iovec){ &hs[i], sizeof(hs[i]) };
		remote[i] = (struct iovec){ (void *)(uintptr_t)(s->t->stub_sites[i].addr + MA_STUB_HEADER),
					    sizeof(hs[i]) };
	}
	if (process_vm_readv(s->t->proc_pid, local, n, remote, n, 0) != (ssize_t)(n * sizeof(hs[0])))
		for (size_t i = 0; i < n; i++)
			if (ma_mem_read(s->t->proc_pid, (uint64_t)(uintptr_t)remote[i].iov_base, &hs[i],
					sizeof(hs[i])) != 0) {
				ma_err_clear();
				hs[i].magic = 0;
			}
}

/* Does any site hold a stub (a killed run's)?  Looked at before any stop. */
bool leftover_any_site_has_stub(const struct ma_session *s)
{
	struct ma_stub_header hs[MA_MAX_STUB_SITES];

	leftover_read_site_headers(s, hs);
	for (size_t i = 0; i < s->t->nstub_sites; i++)
		if (hs[i].magic == MA_MAGIC_STUB)
			return true;
	return false;
}

int leftover_scan_stub_sites(struct ma_session *s, bool *stale, bool *busy_left)
{
	long clean = -1, freed = -1;

	struct ma_stub_header hs[MA_MAX_STUB_SITES];
	size_t n = s->t->nstub_sites;

	*busy_left = false;
	/*
	 * No site held a stub when looked at before the stop (only memattach
	 * writes them, and this run holds the run lock): no header to read
	 * in the hold, no leftover to judge.
	 */
	if (s->sites_had_stub)
		leftover_read_site_headers(s, hs);
	else
		memset(hs, 0, sizeof(hs));
	for (size_t i = 0; i < n; i++) {
		uint64_t addr = s->t->stub_sites[i].addr;
		struct ma_stub_header h = hs[i];

		stale[i] = false;
		if (h.magic != MA_MAGIC_STUB) {
			/* The first that is as in its file (checked now, in the hold: an exec). */
			if (clean < 0 && site_as_in_file(s, i))
				clean = (long)i;
			continue;
		}
		if (leftover_in_use(s, &h, addr)) {
			*busy_left = true;
			continue;
		}
		stale[i] = true;
		inherit_records(s, &h);
		if (freed < 0)
			freed = (long)i;
	}
	if (clean < 0 && freed < 0 && !*busy_left)
		return site_not_ours(s);
	if (clean < 0 && freed < 0)
		return ma_fail(MA_E_INTERNAL, "every stub site of process %d is in use by an earlier, "
			       "killed memattach run whose call has not returned yet; try again later",
			       s->t->pid);
	s->site = (size_t)(clean >= 0 ? clean : freed);
	s->stub = s->t->stub_sites[s->site].addr;
	stale[s->site] = false; /* ours now: put back at close */
	return 0;
}

/*
 * Descriptors a killed heap-dump left open (our memfd).  Only called when
 * no earlier run's call is still running: then no one uses them.
 */
void leftover_close_memfds(struct ma_session *s)
{
	char path[64], link[256], fdpath[384];
	struct dirent *d;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", s->t->proc_pid);
	if (!(dir = opendir(path)))
		return;
	while ((d = readdir(dir))) {
		ssize_t n;
		uint64_t args[1], ret;

		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, d->d_name);
		n = readlink(fdpath, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		/* heap-dump's memfd, or the frag agent's before its dlopen finished */
		if (strcmp(link, "/memfd:" MA_MEMFD_NAME " (deleted)") != 0 &&
		    strcmp(link, "/memfd:" MA_AGENT_MEMFD_NAME " (deleted)") != 0)
			continue;
		args[0] = (uint64_t)atoi(d->d_name);
		if (ma_session_syscall(s, SYS_close, args, 1, &ret) == 0 && ret == 0)
			s->leftovers_removed++;
		else
			ma_err_clear();
	}
	closedir(dir);
}


/* Unmap the inherited mappings, then put back the bytes of the stale stub sites. */
void leftover_remove(struct ma_session *s, const bool *stale)
{
	while (s->ninherited > 0) {
		struct ma_map_record *r = &s->inherited[s->ninherited - 1];
		uint64_t args[2] = { r->addr, r->len }, ret;

		if (ma_session_syscall(s, SYS_munmap, args, 2, &ret) != 0) {
			ma_err_clear();
			return;
		}
		s->leftovers_removed++;
		s->ninherited--;
		if (session_write_stub_header(s) != 0) {
			ma_err_clear();
			return;
		}
	}
	for (size_t i = 0; i < s->t->nstub_sites; i++) {
		if (!stale[i] || ma_mem_write(s->t->proc_pid, s->t->stub_sites[i].addr,
					      ma_stubsite_original(s->t, i), MA_STUB_REGION) != 0) {
			ma_err_clear();
			continue;
		}
		s->leftovers_removed++;
	}
}
