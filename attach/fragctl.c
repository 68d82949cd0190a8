/*
 * fragctl.c - load, start, query and stop the frag agent inside a live
 * target (fragctl.h).  The agent's code is attach/agent/agent.c; its
 * image is embedded in memattach (build/agent/agent_blob.c) with the
 * offsets of its entry points (build/agent/agent_syms.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent_syms.h"
#include "fragctl.h"
#include "jectl.h"
#include "ma_error.h"
#include "safepoint.h"
#include "seccomp.h"
#include "steps.h"
#include "targetfd.h"

extern const unsigned char ma_agent_so[];
extern const unsigned long ma_agent_so_len;

#define RTLD_NOW_FLAG 2
#define DLOPEN_TIMEOUT_MS 10000
#define QUERY_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS 5000

/* The stripe record of agent.c (only the counters are read here). */
struct agent_stripe {
	uint32_t lock, own;
	uint64_t inflight, count, recorded, removed, dropped;
	uint64_t slots, cap;
};

static bool is_agent_mapping(const struct ma_mapping *m)
{
	return m->path && strcmp(m->path, "/memfd:" MA_AGENT_MEMFD_NAME) == 0;
}

/*
 * Is the agent loaded at BASE whole: its code mapped executable and its
 * control block in a writable mapping of its file?  A dlopen that failed
 * half way (ENOMEM, a filter) can leave a mapping of the file behind
 * without them.
 */
static bool loaded_whole(const struct ma_target *t, uint64_t base)
{
	uint64_t ctl = base + MA_AGENT_OFF_ctl, ctl_end = ctl + sizeof(struct ma_agent_ctl);
	bool code = false, data = false;

	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i], *prev = i ? &t->maps[i - 1] : NULL;
		/* the zeroed data past the file's end: anonymous, right after the file's data */
		bool bss = !m->path && prev && is_agent_mapping(prev) && prev->end == m->start;

		code |= is_agent_mapping(m) && m->perms[2] == 'x' && m->start - m->offset == base;
		if ((is_agent_mapping(m) || bss) && m->perms[1] == 'w' && m->start <= ctl && ctl < m->end)
			data = ctl_end <= m->end || (i + 1 < t->nmaps && t->maps[i + 1].start == m->end &&
						     ctl_end <= t->maps[i + 1].end && t->maps[i + 1].perms[1] == 'w');
	}
	return code && data;
}

/*
 * The agent's mappings in T: load base and code range.  False if not
 * loaded.  Mappings of the file at another base (what a failed load left)
 * are counted in nmaps and mapped, but are not the agent.
 */
static bool locate(const struct ma_target *t, struct ma_agent_view *v)
{
	/* a load starts with its file's first page (offset 0, address 0 in the file) */
	for (size_t i = 0; i < t->nmaps && !v->loaded; i++) {
		const struct ma_mapping *m = &t->maps[i];

		if (is_agent_mapping(m) && m->offset == 0 && loaded_whole(t, m->start)) {
			v->loaded = true;
			v->base = m->start;
		}
	}
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i], *prev = i ? &t->maps[i - 1] : NULL;
		/* its zeroed data past the file's end (the profile's filter makes it a mapping of its own) */
		bool bss = v->loaded && !m->path && prev && is_agent_mapping(prev) && prev->end == m->start &&
			   m->perms[1] == 'w';

		if (!is_agent_mapping(m) && !bss)
			continue;
		v->nmaps++;
		v->mapped += m->end - m->start;
		if (v->loaded && m->perms[2] == 'x' && m->start - m->offset == v->base) {
			v->lo = m->start;
			v->hi = m->end;
		}
	}
	return v->loaded;
}

/* Resident bytes of a table the agent mapped (0 if that cannot be read). */
static uint64_t resident(pid_t pid, uint64_t addr, uint64_t len)
{
	int64_t r = ma_target_resident(pid, addr, len);

	return r > 0 ? (uint64_t)r : 0;
}

static int read_counters(pid_t pid, struct ma_agent_view *v)
{
	struct agent_stripe st[MA_AGENT_STRIPES];
	int rc;

	if (!v->ctl.tables)
		return 0;
	if ((rc = ma_mem_read(pid, v->ctl.tables + v->ctl.locks_off, st, sizeof(st))))
		return rc;
	for (unsigned i = 0; i < MA_AGENT_STRIPES; i++) {
		v->live += st[i].count;
		v->recorded += st[i].recorded;
		v->removed += st[i].removed;
		v->dropped_full += st[i].dropped;
		v->inflight += st[i].inflight;
		if (st[i].own) { /* grown: a mapping of its own */
			v->table_bytes += st[i].cap * 16; /* struct sample */
			v->table_resident += resident(pid, st[i].slots, st[i].cap * 16);
		}
	}
	v->table_bytes += v->ctl.tables_len;
	v->table_resident += resident(pid, v->ctl.tables, v->ctl.tables_len);
	return 0;
}

int ma_agent_find(const struct ma_target *t, struct ma_agent_view *v)
{
	struct ma_target now;
	int rc;

	memset(v, 0, sizeof(*v));
	if ((rc = ma_target_maps_now(t, &now)))
		return rc;
	locate(&now, v);
	ma_target_release(&now);
	if (!v->loaded)
		return 0;
	if ((rc = ma_mem_read(t->proc_pid, v->base + MA_AGENT_OFF_ctl, &v->ctl, sizeof(v->ctl))))
		return rc;
	if (v->ctl.magic && (v->ctl.magic != MA_AGENT_MAGIC || v->ctl.version != MA_AGENT_VERSION)) {
		v->foreign = true;
		return 0;
	}
	return read_counters(t->proc_pid, v);
}

/* Is TI blocked in a syscall made from the dynamic loader's own code (seen without a stop)? */
static bool blocked_in_loader(const struct ma_target *t, const struct ma_thread_info *ti)
{
	return ti->syscall >= 0 && ti->pc && ti->pc >= t->loader.lo && ti->pc < t->loader.hi;
}

int ma_agent_loader_busy(struct ma_target *t, bool strict, char *why, size_t whylen)
{
	struct ma_thread_info *ti = NULL;
	struct ma_backtrace bt;
	size_t n = 0, frame;
	int rc, busy = 0;
	char v[400];
	enum ma_verdict verdict;

	if ((rc = ma_list_threads(t->pid, &ti, &n)))
		return rc;
	for (size_t i = 0; i < n && !busy; i++) {
		if (blocked_in_loader(t, &ti[i])) {
			snprintf(why, whylen, "thread %d (%s) is blocked inside the dynamic loader: a "
				 "dlopen now would wait for its lock", ti[i].tid, ti[i].name);
			busy = 1;
			break;
		}
		/*
		 * A precaution, not what was asked: each thread is looked at only
		 * as the run's rules allow a stop (--strict's), and never where the
		 * stop would free a signal the program ignores.  One not looked
		 * at is judged by where it blocks, above.
		 */
		if (ma_inspect_thread(t, &ti[i], 5000, (strict ? MA_LOOK_STRICT : 0) | MA_LOOK_SPARE_IGNORED,
				      &bt, v, sizeof(v), &verdict) ||
		    !bt.n) {
			ma_err_clear(); /* gone meanwhile, or not stoppable: nothing to see */
			continue;
		}
		if (ma_backtrace_loader_under_agent(t, &bt))
			continue;
		if (ma_backtrace_in_loader(t, &bt, &frame))
			snprintf(why, whylen, "thread %d (%s) is inside the dynamic loader (frame #%zu): a "
				 "dlopen now would wait for its lock", ti[i].tid, ti[i].name, frame);
		else if (ma_backtrace_in_dl_locked(t, &bt, &frame))
			snprintf(why, whylen, "thread %d (%s) is in a libc function that holds the dynamic "
				 "loader's locks (frame #%zu): a dlopen now would wait for it", ti[i].tid,
				 ti[i].name, frame);
		else
			continue;
		busy = 1;
	}
	free(ti);
	return busy;
}

/* Write the embedded agent into a new memfd of the target; *FD gets its number there. */
static int write_agent_memfd(struct ma_session *s, uint64_t *fd)
{
	static const char name[] = MA_AGENT_MEMFD_NAME;
	uint64_t a_name, args[2];
	size_t done = 0;
	int rc, ours;

	ma_session_reset(s);
	if (!(a_name = ma_session_alloc(s, sizeof(name))))
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->proc_pid, a_name, name, sizeof(name))))
		return rc;
	args[0] = a_name;
	args[1] = MA_MEMFD_FLAGS;
	if ((rc = ma_session_syscall(s, SYS_memfd_create, args, 2, fd)))
		return rc;
	if ((int64_t)*fd < 0)
		return ma_fail(MA_E_IO, "memfd_create in the target failed: %s",
			       strerror((int)-(int64_t)*fd));
	ma_step_mark("agent-memfd");
	/* Our own reference, checked to be the memfd just made: never a path through /proc. */
	if ((rc = ma_take_target_memfd(s->t->proc_pid, (int)*fd, MA_AGENT_MEMFD_NAME, 0, &ours)))
		return rc;
	while (done < ma_agent_so_len) {
		ssize_t w = pwrite(ours, ma_agent_so + done, ma_agent_so_len - done, (off_t)done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(ours);
			return ma_fail(MA_E_IO, "writing the agent into the target's memfd: %s",
				       strerror(errno));
		}
		done += (size_t)w;
	}
	close(ours);
	return 0;
}

/* dlerror()'s message in the target, into MSG. */
static void target_dlerror(struct ma_session *s, char *msg, size_t len)
{
	uint64_t p = 0;

	snprintf(msg, len, "no message");
	if (!s->t->dlerror_fn || ma_session_call(s, s->t->dlerror_fn, NULL, 0, &p) || !p)
		return;
	if (ma_mem_read(s->t->proc_pid, p, msg, len - 1) == 0)
		msg[len - 1] = '\0';
	else
		ma_err_clear();
}

/*
 * The syscalls dlopen of the agent's memfd makes, with the protections and
 * flags glibc's loader passes (a filter keyed on PROT_EXEC or on a
 * writable mapping must see them): a seccomp filter must allow them all.
 */
static int check_dlopen_syscalls(struct ma_session *s)
{
	const uint64_t fd = 3, any = MA_SC_UNCHOSEN_ADDR, file = MAP_PRIVATE | MAP_DENYWRITE;
	struct ma_sc_query q[] = {
		{ SYS_memfd_create, { 0, MA_MEMFD_FLAGS }, 0, "memfd_create (the agent)" },
		{ SYS_openat, { (uint64_t)AT_FDCWD, 0, O_RDONLY | O_CLOEXEC }, 0, "openat (dlopen)" },
		{ SYS_read, { fd, any, 832 }, 0, "read (dlopen)" },
		{ SYS_newfstatat, { fd, any, any, AT_EMPTY_PATH }, 0, "fstat (dlopen)" },
		{ SYS_mmap, { 0, 1 << 16, PROT_READ, file, fd, 0 }, 0, "mmap (dlopen: the agent's file)" },
		{ SYS_mmap, { any, 1 << 16, PROT_READ | PROT_EXEC, file | MAP_FIXED, fd, 1 << 12 }, 0,
		  "mmap of executable code (dlopen: the agent's code)" },
		{ SYS_mmap, { any, 1 << 12, PROT_READ, file | MAP_FIXED, fd, 1 << 12 }, 0,
		  "mmap (dlopen: the agent's constants)" },
		{ SYS_mmap, { any, 1 << 12, PROT_READ | PROT_WRITE, file | MAP_FIXED, fd, 1 << 12 }, 0,
		  "mmap of writable data (dlopen: the agent's data)" },
		{ SYS_mmap, { any, 1 << 12, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			      (uint64_t)-1, 0 }, 0, "mmap (dlopen: the agent's zeroed data)" },
		{ SYS_mprotect, { any, 1 << 12, PROT_READ }, 0, "mprotect (dlopen: read-only after relocation)" },
		{ SYS_munmap, { any, 1 << 12 }, 0, "munmap (dlopen)" },
		{ SYS_close, { fd }, 0, "close (dlopen)" },
	};

	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
		q[i].ip = s->stub + MA_STUB_MARKER_END;
	return ma_session_check_syscalls(s, q, sizeof(q) / sizeof(q[0]));
}

/*
 * dlopen the agent in the target (memfd, then /proc/thread-self/fd/N: a
 * process whose main thread has exited has no /proc/self/fd), then close
 * the memfd.
 */
static int load_agent(struct ma_session *s)
{
	char path[48] = { 0 }, msg[256];
	uint64_t fd = (uint64_t)-1, a_path, handle = 0, ret;
	uint64_t args[2];
	int rc;

	if (!s->t->dlopen_fn)
		return ma_fail(MA_E_INTERNAL, "process %d has no dlopen in its libc (a static or "
			       "pre-2.34 glibc): the frag agent cannot be loaded", s->t->pid);
	if ((rc = check_dlopen_syscalls(s)) || (rc = write_agent_memfd(s, &fd)))
		return rc;
	snprintf(path, sizeof(path), "/proc/thread-self/fd/%d", (int)fd);
	if (!(a_path = ma_session_alloc(s, sizeof(path))))
		rc = ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	else if (!(rc = ma_mem_write(s->t->proc_pid, a_path, path, sizeof(path)))) {
		args[0] = a_path;
		args[1] = RTLD_NOW_FLAG;
		rc = ma_session_call_timeout(s, s->t->dlopen_fn, args, 2, &handle, DLOPEN_TIMEOUT_MS);
	}
	if (!rc && !handle) {
		target_dlerror(s, msg, sizeof(msg));
		rc = ma_fail(MA_E_IO, "dlopen of the agent in process %d failed: %s", s->t->pid, msg);
	}
	if (!s->abandoned) {
		args[0] = fd;
		if (ma_session_syscall(s, SYS_close, args, 1, &ret) && !rc)
			rc = MA_E_INTERNAL;
	}
	return rc;
}

static const char *agent_error(int64_t rc)
{
	switch (-rc) {
	case MA_AGENT_EBUSY: return "an agent is already running";
	case MA_AGENT_EHOOK: return "jemalloc refused experimental.hooks.install/remove "
				    "(all 4 hook slots in use?)";
	case MA_AGENT_ENOSLOT: return "no GOT slot of malloc and free points into jemalloc: "
				      "its callers do not reach it through the dynamic linker";
	case MA_AGENT_EMAPS: return "the agent could not read /proc/self/maps in the target";
	case MA_AGENT_EPATCH: return "an entry point's bytes changed since they were read";
	case MA_AGENT_EPROT: return "the target may not make its code writable (a W^X policy such as "
				    "systemd's MemoryDenyWriteExecute)";
	case MA_AGENT_ESYNC: return "the kernel has no membarrier SYNC_CORE (before Linux 4.16)";
	case MA_AGENT_ENOMEM: return "the agent could not map its tables (mmap failed)";
	case MA_AGENT_EIDLE: return "no agent is running (memattach frag start PID)";
	case MA_AGENT_EPARAM: return "the agent refused its parameters";
	case MA_AGENT_EQUERY: return "experimental.utilization.batch_query failed";
	case MA_AGENT_EINFLIGHT: return "wrappers or hooks were still recording";
	case MA_AGENT_ECALL: return "a call of an earlier memattach (killed during it) is still "
				    "running in the agent; retry in a moment";
	default: return "unexpected error";
	}
}

/*
 * Call the agent's entry point at OFF with ARGS; *RET its signed result:
 * WIDE for the one returning int64_t (query), else an int in eax (the
 * upper half of rax is not part of it).
 */
static int call_agent(struct ma_session *s, const struct ma_agent_view *v, uint64_t off,
		      const uint64_t *args, int nargs, int timeout_ms, bool wide, int64_t *ret)
{
	uint64_t r = 0;
	int rc = ma_session_call_timeout(s, v->base + off, args, nargs, &r, timeout_ms);

	*ret = wide ? (int64_t)r : (int64_t)(int32_t)(uint32_t)r;
	return rc;
}

int ma_agent_wait_idle(const struct ma_target *t, int timeout_ms)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	struct ma_agent_view v;
	int rc;

	for (;;) {
		if ((rc = ma_agent_find(t, &v)))
			return rc;
		if (!v.loaded || v.foreign || !v.ctl.entry_busy)
			return 0;
		if (ma_now_ns() > deadline || ma_interrupted)
			return ma_fail(MA_E_TIMEOUT, "a call of an earlier memattach (killed during it) "
				       "is still running in the agent of process %d after %d ms; retry "
				       "later", t->pid, timeout_ms);
		usleep(20000);
	}
}

/* The agent's state now, under S (the run lock is held: nobody else changes it). */
static int current_agent(struct ma_session *s, struct ma_agent_view *v)
{
	int rc = ma_agent_find(s->t, v);

	if (!rc && v->foreign)
		rc = ma_fail(MA_E_INTERNAL, "process %d holds an agent of another memattach version; "
			     "stop it with that version", s->t->pid);
	return rc;
}

const char *ma_agent_mode_name(uint32_t mode)
{
	return mode == MA_AGENT_MODE_FOCUS	  ? "frag's focus mode"
	       : mode == MA_AGENT_MODE_PROFILE ? "a heap profile"
					       : "frag's shift mode";
}

static uint64_t random_seed(void)
{
	uint64_t seed = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &seed, sizeof(seed)) != sizeof(seed))
			seed = 0;
		close(fd);
	}
	return seed ? seed : ma_unix_ns() * 0x9e3779b97f4a7c15ULL;
}

uint32_t ma_agent_mechanism_for(const struct ma_target *t)
{
	if (!t->je.ntext)
		return MA_AGENT_MECH_HOOKS;
	return t->je.is_static ? MA_AGENT_MECH_DETOUR : MA_AGENT_MECH_GOT;
}

/*
 * What the agent asks of the kernel in start, stop and its queries,
 * whichever the mechanism: /proc/self/maps read into memory of its own,
 * its tables mapped and unmapped, GOT pages made writable and read-only
 * again.  A seccomp filter must allow each (one that answers an error
 * makes start refuse, named; one that kills would kill the target).
 * Into Q (room for AGENT_QUERIES); returns how many.
 */
#define AGENT_QUERIES 16
static size_t agent_queries(struct ma_sc_query *q, uint64_t ip)
{
	const uint64_t any = MA_SC_UNCHOSEN_ADDR, anon = MAP_PRIVATE | MAP_ANONYMOUS;
	size_t n = 0;

	q[n++] = (struct ma_sc_query){ SYS_getpid, { 0 }, ip, "getpid (the agent)" };
	q[n++] = (struct ma_sc_query){ SYS_openat, { (uint64_t)AT_FDCWD, any, O_RDONLY | O_CLOEXEC },
				       ip, "openat of /proc/self/maps (the agent)" };
	q[n++] = (struct ma_sc_query){ SYS_read, { 3, any, 1 << 18 }, ip, "read (the agent)" };
	q[n++] = (struct ma_sc_query){ SYS_close, { 3 }, ip, "close (the agent)" };
	q[n++] = (struct ma_sc_query){ SYS_mmap, { 0, 1 << 18, PROT_READ | PROT_WRITE, anon | MAP_NORESERVE,
						   (uint64_t)-1, 0 }, ip, "mmap (the agent's tables)" };
	q[n++] = (struct ma_sc_query){ SYS_mmap, { 0, 1 << 12, PROT_READ | PROT_WRITE, anon, (uint64_t)-1, 0 },
				       ip, "mmap (the agent's tables)" };
	q[n++] = (struct ma_sc_query){ SYS_munmap, { any, 1 << 18 }, ip, "munmap (the agent's tables)" };
	q[n++] = (struct ma_sc_query){ SYS_sched_yield, { 0 }, ip, "sched_yield (the agent)" };
	q[n++] = (struct ma_sc_query){ SYS_mprotect, { any, 4096, PROT_READ | PROT_WRITE }, ip,
				       "mprotect to read-write (a GOT page)" };
	q[n++] = (struct ma_sc_query){ SYS_mprotect, { any, 4096, PROT_READ }, ip,
				       "mprotect to read-only (a GOT page)" };
	return n;
}

/*
 * Add the queries of writing (and taking back) the jumps of LIST[0..N):
 * each page they touch made writable, with the protection the target's
 * map shows, and that protection put back, as the agent will ask.
 */
static size_t patch_page_queries(const struct ma_target *t, const struct ma_agent_patch *list, uint64_t n,
				 struct ma_sc_query *q, size_t room, uint64_t ip)
{
	size_t k = 0;

	for (uint64_t i = 0; i < n; i++)
		for (uint64_t page = list[i].at & ~4095ULL; page < list[i].at + MA_AGENT_PATCH_LEN; page += 4096) {
			const struct ma_mapping *m = ma_target_mapping_at(t, page);
			int prot = !m ? PROT_READ | PROT_EXEC
				      : (m->perms[0] == 'r' ? PROT_READ : 0) | (m->perms[1] == 'w' ? PROT_WRITE : 0) |
					(m->perms[2] == 'x' ? PROT_EXEC : 0);

			if (k + 2 > room || (prot & PROT_WRITE))
				continue; /* a page kept writable is not protected again */
			q[k++] = (struct ma_sc_query){ SYS_mprotect, { page, 4096, (uint64_t)(prot | PROT_READ | PROT_WRITE) },
						       ip, "mprotect to writable (a detour's page)" };
			q[k++] = (struct ma_sc_query){ SYS_mprotect, { page, 4096, (uint64_t)prot }, ip,
						       "mprotect back (a detour's page)" };
		}
	return k;
}

/*
 * The rest of what writing detours asks: the trampoline area (at its
 * first address tried), jemalloc's first code page made writable and
 * back (each patch point's own pages are checked once planned), the core
 * serialization, the writer's signal mask.
 */
static size_t detour_queries(const struct ma_target *t, struct ma_sc_query *q, uint64_t ip)
{
	uint64_t first_try = (t->je.text[0].lo - (1 << 20)) & ~4095ULL, code = t->je.text[0].lo & ~4095ULL;
	size_t n = 0;

	q[n++] = (struct ma_sc_query){ SYS_mprotect, { code, 4096, PROT_READ | PROT_WRITE | PROT_EXEC }, ip,
				       "mprotect to writable (a detour's page)" };
	q[n++] = (struct ma_sc_query){ SYS_mprotect, { code, 4096, PROT_READ | PROT_EXEC }, ip,
				       "mprotect back (a detour's page)" };
	q[n++] = (struct ma_sc_query){ SYS_mmap, { first_try, MA_AGENT_TRAMP_LEN, PROT_READ | PROT_EXEC,
						   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
						   (uint64_t)-1, 0 }, ip, "mmap (the trampolines)" };
	q[n++] = (struct ma_sc_query){ SYS_membarrier, { MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE },
				       ip, "membarrier (writing a detour)" };
	q[n++] = (struct ma_sc_query){ SYS_membarrier, { MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE }, ip,
				       "membarrier (writing a detour)" };
	q[n++] = (struct ma_sc_query){ SYS_rt_sigprocmask, { SIG_BLOCK, MA_SC_UNCHOSEN_ADDR, MA_SC_UNCHOSEN_ADDR, 8 }, ip,
				       "rt_sigprocmask (writing a detour)" };
	q[n++] = (struct ma_sc_query){ SYS_rt_sigprocmask, { SIG_SETMASK, MA_SC_UNCHOSEN_ADDR, 0, 8 }, ip,
				       "rt_sigprocmask (writing a detour)" };
	return n;
}

/*
 * The wrappers run in every thread of the program, and a stripe of the
 * sample table grows there (mmap, munmap): the filter judged is the held
 * thread's, so every other thread must have the same one.  A process
 * filtered as a whole (TSYNC, or before its threads were made) has one
 * mode and filter count in every thread; a thread with a filter of its
 * own (an outside attack: KILL on munmap in one worker, the target killed
 * 5 of 5 times a few seconds after start) shows another, and start
 * refuses.  Each thread's count is one read of its status, no stop.
 */
static int check_filters_alike(struct ma_session *s)
{
	long mine = ma_seccomp_state(s->t->pid, s->tid), theirs = 0;
	pid_t other;

	if (mine < 0)
		return 0; /* the held thread's status unread: its stop judged it */
	if (!(other = ma_seccomp_thread_unlike(s->t->pid, mine, &theirs)))
		return 0;
	return ma_fail(MA_E_SECCOMP,
		       "thread %d of process %d runs under %ld seccomp filter%s, thread %d (which "
		       "memattach judged) under %ld: the agent's wrappers run in every thread and "
		       "map memory there, which that thread's own filter was not judged for; not "
		       "started", other, s->t->pid, theirs & 0xffff, (theirs & 0xffff) == 1 ? "" : "s",
		       s->tid, mine & 0xffff);
}

/*
 * Everything the agent will ask of the kernel for MECHANISM, checked
 * against the thread's seccomp filter before the agent is loaded.  The
 * jumps' own pages are checked once planned (check_patch_pages).
 */
static int check_agent_syscalls(struct ma_session *s, uint32_t mechanism)
{
	struct ma_sc_query q[AGENT_QUERIES + 8];
	uint64_t ip = s->stub + MA_STUB_MARKER_END;
	size_t n = agent_queries(q, ip);
	int rc;

	if (mechanism == MA_AGENT_MECH_DETOUR)
		n += detour_queries(s->t, q + n, ip);
	if ((rc = ma_session_check_syscalls(s, q, n)))
		return rc;
	return check_filters_alike(s);
}

static int check_patch_pages(struct ma_session *s, const struct ma_agent_patch *list, uint64_t n)
{
	struct ma_sc_query q[4 * MA_AGENT_NENTRIES];
	size_t k = patch_page_queries(s->t, list, n, q, sizeof(q) / sizeof(q[0]), s->stub + MA_STUB_MARKER_END);

	return ma_session_check_syscalls(s, q, k);
}

/*
 * Inline detours: the agent's trampoline area, the plans and trampolines
 * (fragdetour.c), each entry's ORIGINAL into P.  0 or MA_E_*.
 */
static int prepare_detours(struct ma_session *s, struct ma_agent_view *v, struct ma_agent_params *p,
			   struct ma_agent_patch *list, uint64_t *n)
{
	uint64_t near = s->t->je.text[0].lo;
	int64_t area;
	int rc;

	if ((rc = call_agent(s, v, MA_AGENT_OFF_detour_area, &near, 1, STOP_TIMEOUT_MS, true, &area)))
		return rc;
	if (area < 0)
		return ma_fail(MA_E_JEMALLOC, "agent start: %s", agent_error(area));
	if ((rc = current_agent(s, v)) || (rc = ma_detour_prepare(s->t, &v->ctl, p->original, list, n)))
		return rc;
	return check_patch_pages(s, list, *n);
}

/* Have the agent write the N jumps of LIST (while the threads run): 0 or MA_E_*. */
static int write_detours(struct ma_session *s, const struct ma_agent_view *v, const struct ma_agent_patch *list,
			 uint64_t n)
{
	uint64_t args[3] = { 0, n, 0 };
	int64_t ret;
	int rc;

	ma_session_reset(s);
	if (!(args[0] = ma_session_alloc(s, n * sizeof(*list))))
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->proc_pid, args[0], list, n * sizeof(*list))) ||
	    (rc = call_agent(s, v, MA_AGENT_OFF_patch, args, 3, STOP_TIMEOUT_MS, false, &ret)))
		return rc;
	if (ret != (int64_t)n)
		return ma_fail(MA_E_JEMALLOC, "agent start: %s", ret < 0 ? agent_error(ret) :
			       "not every entry point was rewritten");
	return 0;
}

int ma_agent_start_in(struct ma_session *s, const struct ma_agent_start_opts *o)
{
	const struct ma_jemalloc *je = &s->t->je;
	struct ma_agent_params p = { 0 };
	struct ma_agent_view v;
	uint64_t a_params;
	int64_t ret;
	int rc;

	uint32_t mechanism = ma_agent_mechanism_for(s->t);
	struct ma_agent_patch list[MA_AGENT_NENTRIES];
	uint64_t nlist = 0;

	if (mechanism == MA_AGENT_MECH_DETOUR && o->allow_hooks)
		mechanism = MA_AGENT_MECH_HOOKS; /* asked for */
	/*
	 * Writing code races a target that changes its own code pages'
	 * protection meanwhile (either side's write can then fault): the one
	 * risk of detours that no check before can rule out.
	 */
	if (mechanism == MA_AGENT_MECH_DETOUR && o->no_code_writes)
		return ma_fail(MA_E_JEMALLOC, "jemalloc is linked into the program of process %d (no "
			       "GOT slot to point elsewhere), so frag would write a jump into each of its "
			       "entry points, and --strict never writes the target's code; nothing was "
			       "loaded. Without --strict frag writes them (a target that changes its own "
			       "code pages' protection meanwhile can fault)", s->t->pid);
	if (mechanism == MA_AGENT_MECH_HOOKS && !o->allow_hooks)
		return ma_fail(MA_E_JEMALLOC, "jemalloc's code cannot be located in process %d, so frag "
			       "could only sample through jemalloc's experimental hooks, whose install "
			       "and removal crash programs that create and end threads continuously (a "
			       "jemalloc 5.3 bug); nothing was loaded. 'memattach frag start %d --hooks' "
			       "accepts that risk", s->t->pid, s->t->pid);
	if ((rc = current_agent(s, &v)))
		return rc;
	if (v.ctl.state == MA_AGENT_STOPPING)
		return ma_fail(MA_E_JEMALLOC, "the agent in process %d is still stopping (hooks were "
			       "running when it was stopped); run memattach frag stop %d again",
			       s->t->pid, s->t->pid);
	if (v.ctl.state == MA_AGENT_RUNNING)
		return ma_fail(MA_E_JEMALLOC, "an agent is already running in process %d (%s, "
			       "%llu samples); memattach %s stop %d first", s->t->pid,
			       ma_agent_mode_name(v.ctl.mode), (unsigned long long)v.live,
			       v.ctl.mode == MA_AGENT_MODE_PROFILE ? "profile" : "frag", s->t->pid);
	if (o->mode != MA_AGENT_MODE_SHIFT && !je->malloc_usable_size)
		return ma_fail(MA_E_JEMALLOC, "no %smalloc_usable_size in process %d: %s needs it",
			       je->prefix, s->t->pid, ma_agent_mode_name(o->mode));
	if ((rc = check_agent_syscalls(s, mechanism)))
		return rc;
	if (!v.loaded) {
		if ((rc = load_agent(s)) || (rc = current_agent(s, &v)))
			return rc;
		if (!v.loaded)
			return ma_fail(MA_E_INTERNAL, "dlopen succeeded but the agent is not mapped");
		ma_step_mark("agent-loaded");
	}
	p.magic = MA_AGENT_MAGIC;
	p.version = MA_AGENT_VERSION;
	p.mode = o->mode;
	p.shift = o->shift;
	p.focus_size = o->focus_size;
	p.rate = o->rate;
	p.seed = random_seed();
	p.mechanism = mechanism;
	if (mechanism == MA_AGENT_MECH_DETOUR && (rc = prepare_detours(s, &v, &p, list, &nlist)))
		return rc;
	if (je->ntext) {
		p.je_lo = je->text[0].lo;
		p.je_hi = je->text[je->ntext - 1].hi;
	}
	snprintf(p.prefix, sizeof(p.prefix), "%s", je->prefix);
	p.mallctl = je->mallctl;
	p.mallctlnametomib = je->mallctlnametomib;
	p.mallctlbymib = je->mallctlbymib;
	p.malloc_usable_size = je->malloc_usable_size;
	p.find_object = s->t->find_object_fn;
	p.capacity = o->capacity;
	p.max_samples = o->max_samples;
	p.stack_cap = o->stack_cap;
	p.frame_cap = o->frame_cap;
	p.self_lo = v.lo;
	p.self_hi = v.hi;
	p.started_unix_ns = ma_unix_ns();
	ma_session_reset(s);
	if (!(a_params = ma_session_alloc(s, sizeof(p))))
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->proc_pid, a_params, &p, sizeof(p))) ||
	    (rc = call_agent(s, &v, MA_AGENT_OFF_start, &a_params, 1, STOP_TIMEOUT_MS, false, &ret)))
		return rc;
	if (ret != MA_AGENT_OK)
		return ma_fail(MA_E_JEMALLOC, "agent start: %s", agent_error(ret));
	if (mechanism == MA_AGENT_MECH_DETOUR && (rc = write_detours(s, &v, list, nlist))) {
		bool inflight;
		char why[400];

		/* Undo what was written (the agent's stop takes back its recorded patch points). */
		snprintf(why, sizeof(why), "%s", ma_errmsg());
		ma_agent_stop_in(s, &inflight);
		return ma_fail(rc, "%s", why);
	}
	return 0;
}

int ma_agent_stop_in(struct ma_session *s, bool *inflight)
{
	struct ma_agent_view v;
	int64_t ret;
	int rc;

	if ((rc = current_agent(s, &v)))
		return rc;
	if (!v.loaded || v.ctl.state == MA_AGENT_IDLE)
		return ma_fail(MA_E_JEMALLOC, "no agent is running in process %d", s->t->pid);
	/* A filter installed since start must allow taking the jumps back too. */
	if (v.ctl.mechanism == MA_AGENT_MECH_DETOUR && v.ctl.ndetours &&
	    ((rc = check_agent_syscalls(s, MA_AGENT_MECH_DETOUR)) ||
	     (rc = check_patch_pages(s, v.ctl.detours, v.ctl.ndetours <= MA_AGENT_NENTRIES ? v.ctl.ndetours
											   : MA_AGENT_NENTRIES))))
		return rc;
	if ((rc = call_agent(s, &v, MA_AGENT_OFF_stop, NULL, 0, STOP_TIMEOUT_MS, false, &ret)))
		return rc;
	*inflight = ret == -MA_AGENT_EINFLIGHT;
	if (ret != MA_AGENT_OK && !*inflight)
		return ma_fail(MA_E_JEMALLOC, "agent stop: %s", agent_error(ret));
	return 0;
}

/* Read N stack records and the frames they use from the agent's tables. */
static int read_stacks(pid_t pid, const struct ma_agent_ctl *c, struct ma_frag_data *d)
{
	struct ma_agent_stack *st;
	uint64_t ns, nf;
	int rc;

	/* Every stack a sample refers to was complete before the sample was stored. */
	ns = c->nstacks;
	nf = c->nframes;
	if (ns > c->stack_cap || nf > c->frame_cap)
		return ma_fail(MA_E_INTERNAL, "agent's stack table is inconsistent");
	st = calloc(ns ? ns : 1, sizeof(*st));
	d->stacks = calloc(ns ? ns : 1, sizeof(*d->stacks));
	d->frames = calloc(nf ? nf : 1, sizeof(*d->frames));
	if (!st || !d->stacks || !d->frames) {
		free(st);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	rc = ma_mem_read(pid, c->tables + c->stacks_off, st, ns * sizeof(*st));
	if (!rc && nf)
		rc = ma_mem_read(pid, c->tables + c->frames_off, d->frames, nf * sizeof(*d->frames));
	for (uint64_t i = 0; !rc && i < ns; i++) {
		if ((uint64_t)st[i].off + st[i].n > nf) {
			rc = ma_fail(MA_E_INTERNAL, "agent's stack %llu is out of range",
				     (unsigned long long)i);
			break;
		}
		d->stacks[i].off = st[i].off;
		d->stacks[i].n = st[i].n;
	}
	free(st);
	d->nstacks = ns;
	d->nframes = nf;
	return rc;
}

/* The query output at C->out for N samples into D->s. */
static int read_samples(pid_t pid, const struct ma_agent_ctl *c, uint64_t n, struct ma_frag_data *d)
{
	unsigned char *buf;
	int rc;

	if (!n)
		return 0;
	buf = malloc(ma_agent_out_len(n));
	d->s = calloc(n, sizeof(*d->s));
	if (!buf || !d->s) {
		free(buf);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	if ((rc = ma_mem_read(pid, c->out, buf, ma_agent_out_len(n)))) {
		free(buf);
		return rc;
	}
	for (uint64_t i = 0; i < n; i++) {
		struct ma_frag_sample *x = &d->s[i];
		const uint64_t *u = (const uint64_t *)(buf + ma_agent_out_util_off(n)) + 3 * i;

		memcpy(&x->ptr, buf + 8 * i, 8);
		memcpy(&x->stack, buf + ma_agent_out_stack_off(n) + 4 * i, 4);
		memcpy(&x->size, buf + ma_agent_out_size_off(n) + 4 * i, 4);
		x->nfree = u[0];
		x->nregs = u[1];
		x->extent = u[2];
		if (x->stack >= d->nstacks)
			x->stack = 0;
	}
	d->n = n;
	free(buf);
	return 0;
}

int ma_agent_query_in(struct ma_session *s, struct ma_frag_data *d)
{
	struct ma_agent_view v;
	int64_t n, ret;
	int rc;

	if ((rc = current_agent(s, &v)))
		return rc;
	if (!v.loaded || v.ctl.state != MA_AGENT_RUNNING)
		return ma_fail(MA_E_JEMALLOC, "no agent is running in process %d; start one with "
			       "memattach frag start %d", s->t->pid, s->t->pid);
	if (v.ctl.mode == MA_AGENT_MODE_PROFILE)
		return ma_fail(MA_E_JEMALLOC, "the agent in process %d keeps a heap profile (memattach "
			       "profile start), not frag's samples; read it with heap-dump, or 'memattach "
			       "profile stop %d' first", s->t->pid, s->t->pid);
	if ((rc = call_agent(s, &v, MA_AGENT_OFF_query, NULL, 0, QUERY_TIMEOUT_MS, true, &n)))
		return rc;
	if (n < 0)
		return ma_fail(MA_E_JEMALLOC, "frag report: %s", agent_error(n));
	/* The control block now names the output mapping and its size. */
	if ((rc = ma_agent_find(s->t, &v)))
		return rc;
	if (v.ctl.nout != (uint64_t)n)
		return ma_fail(MA_E_INTERNAL, "agent's output changed while being read");
	d->mode = v.ctl.mode;
	d->shift = v.ctl.shift;
	d->focus_size = v.ctl.focus_size;
	d->pid = (uint64_t)s->t->pid;
	d->started_unix_ns = v.ctl.started_unix_ns;
	d->captured_unix_ns = ma_unix_ns();
	d->recorded = v.recorded;
	d->removed = v.removed;
	d->dropped_full = v.dropped_full;
	d->dropped_stacks = v.ctl.dropped_stacks;
	d->truncated_stacks = v.ctl.truncated_stacks;
	d->query_failed = v.ctl.query_failed;
	rc = read_stacks(s->t->proc_pid, &v.ctl, d);
	if (!rc)
		rc = read_samples(s->t->proc_pid, &v.ctl, (uint64_t)n, d);
	/* Release the output in the target whatever happened here. */
	if (!s->abandoned && call_agent(s, &v, MA_AGENT_OFF_out_free, NULL, 0, STOP_TIMEOUT_MS, false, &ret) &&
	    !rc)
		rc = MA_E_INTERNAL;
	return rc;
}
