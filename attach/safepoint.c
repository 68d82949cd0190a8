/*
 * safepoint.c - remote unwinding (libunwind-ptrace) and the safety verdict.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <libunwind-ptrace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "arch.h"
#include "ma_error.h"
#include "runclock.h"
#include "safepoint.h"
#include "unwtable.h"
#include "testhooks.h"

static unw_addr_space_t addr_space;
static unw_accessors_t fast_accessors;

/*
 * libunwind-ptrace reads remote memory one word per PTRACE_PEEKDATA; a
 * stack walk takes hundreds.  These accessors wrap its own, but read
 * whole pages with process_vm_readv into a small cache (the thread is
 * stopped, so its stack does not change under us).
 */
#define UCACHE_PAGES 64
#define UPAGE 4096

struct fast_upt {
	const struct ma_target *t;
	pid_t tid;
	void *upt;
	bool rehearsal; /* a walk of a running thread from /proc's sp and pc (ma_unwind_rehearse) */
	const struct user_regs_struct *regs; /* the stopped thread's, as read at its stop */
	uint64_t sp, pc;
	unsigned next;
	uint64_t base[UCACHE_PAGES];
	bool valid[UCACHE_PAGES];
	bool stable[UCACHE_PAGES]; /* in a read-only mapping: kept from one walk to the next */
	unsigned char data[UCACHE_PAGES][UPAGE]; /* touched once when allocated: no page fault in a hold */
};

/*
 * libunwind passes our argument to the accessors, but _UPT_find_proc_info
 * calls them back with its own: only the current walk's pointer is ours.
 */
static struct fast_upt *current_walk;
static struct fast_upt *walk_buf; /* one walk's page cache, allocated once (ma_unwind_prepare) */

static void *upt_arg(void *arg)
{
	return arg == current_walk ? current_walk->upt : arg;
}

/* Unwind tables and code: what a later walk may read again without asking the target. */
static bool in_read_only_mapping(const struct ma_target *t, uint64_t base)
{
	for (size_t i = 0; t && i < t->nmaps; i++)
		if (base >= t->maps[i].start && base + UPAGE <= t->maps[i].end)
			return t->maps[i].perms[1] != 'w' && t->maps[i].inode != 0;
	return false;
}

static const unsigned char *cached_page(struct fast_upt *f, uint64_t base)
{
	struct iovec local, remote;
	unsigned slot;

	for (unsigned i = 0; i < UCACHE_PAGES; i++)
		if (f->valid[i] && f->base[i] == base)
			return f->data[i];
	/*
	 * A free slot first, the lowest: the walk in the hold then reads the
	 * stack into the slots its rehearsal used, pages the kernel has
	 * written before (see ma_kernel_touch); else the next in turn.
	 */
	for (slot = 0; slot < UCACHE_PAGES && f->valid[slot]; slot++)
		;
	if (slot == UCACHE_PAGES)
		slot = f->next++ % UCACHE_PAGES;
	local.iov_base = f->data[slot];
	local.iov_len = UPAGE;
	remote.iov_base = (void *)(uintptr_t)base;
	remote.iov_len = UPAGE;
	f->valid[slot] = process_vm_readv(f->tid, &local, 1, &remote, 1, 0) == UPAGE;
	f->base[slot] = base;
	f->stable[slot] = f->valid[slot] && in_read_only_mapping(f->t, base);
	return f->valid[slot] ? f->data[slot] : NULL;
}

static int fast_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
			   void *arg)
{
	struct fast_upt *f = current_walk;
	uint64_t base = addr & ~(uint64_t)(UPAGE - 1);
	const unsigned char *p;

	/* Called with our argument, or with libunwind's own from find_proc_info. */
	if (!f || (arg != f && arg != f->upt))
		return _UPT_access_mem(as, addr, val, write, arg);
	if (!write && addr - base <= UPAGE - sizeof(*val) && (p = cached_page(f, base))) {
		memcpy(val, p + (addr - base), sizeof(*val));
		return 0;
	}
	return _UPT_access_mem(as, addr, val, write, upt_arg(arg));
}

/*
 * libunwind's own search of a binary-search table: exported for each
 * architecture (UNW_OBJ names this one's), not declared in its headers.
 */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip, unw_dyn_info_t *di,
					      unw_proc_info_t *pi, int need_unwind_info, void *arg);

/* MEMATTACH_TEST_LIBUNWIND_TABLES=1: libunwind's own lookup only (the test compares both). */
static bool libunwind_tables_only(void)
{
	const char *e = ma_test_env("LIBUNWIND_TABLES");

	return e && *e == '1';
}

/*
 * The table of the object holding IP, found in the target's memory
 * (unwtable.h) and searched through our page cache; libunwind's own
 * lookup (which maps the object's file anew for every frame) only where
 * that finds none.
 */
static int fast_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi, int need,
			       void *arg)
{
	unw_dyn_info_t di;

	if (current_walk && current_walk->t && !libunwind_tables_only() &&
	    ma_unw_table_for(current_walk->t, current_walk->tid, ip, &di) == 0)
		return UNW_OBJ(dwarf_search_unwind_table)(as, ip, &di, pi, need, arg);
	/* A rehearsal's ips may be guesses: no opening of files for them (libunwind's way). */
	if (current_walk && current_walk->rehearsal)
		return -UNW_ENOINFO;
	return _UPT_find_proc_info(as, ip, pi, need, upt_arg(arg));
}

static void fast_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	_UPT_put_unwind_info(as, pi, upt_arg(arg));
}

/*
 * libunwind's registry of run-time generated code (_U_dyn_register):
 * libunwind-ptrace looks for its symbol in every mapped object, each
 * opened and mapped anew, which costs more than the rest of a walk.
 * Programs that register code with it are rare; their JIT frames stay
 * unknown, and a walk that meets one is incomplete (never judged safe).
 */
static int fast_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *dil, void *arg)
{
	(void)as;
	(void)dil;
	(void)arg;
	return -UNW_ENOINFO;
}

static int fast_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
			   void *arg)
{
	if (current_walk && current_walk->rehearsal && arg == current_walk) {
		/* Only the stack pointer and ip are known of a running thread. */
		if (write)
			return -UNW_EREADONLYREG;
		*val = reg == UNW_X86_64_RIP ? current_walk->pc : reg == UNW_X86_64_RSP ? current_walk->sp : 0;
		return 0;
	}
	/* The registers of the stop, already read: no ptrace request per register. */
	if (current_walk && current_walk->regs && arg == current_walk && !write) {
		uint64_t v;

		if (ma_arch_dwarf_reg(current_walk->regs, (int)reg, &v)) {
			*val = v;
			return 0;
		}
	}
	return _UPT_access_reg(as, reg, val, write, upt_arg(arg));
}

static int fast_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			     void *arg)
{
	return _UPT_access_fpreg(as, reg, val, write, upt_arg(arg));
}

static int fast_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	return _UPT_resume(as, c, upt_arg(arg));
}

static int fast_get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			      unw_word_t *off, void *arg)
{
	return _UPT_get_proc_name(as, addr, buf, len, off, upt_arg(arg));
}

/*
 * Does the walk's last frame have unwind info (an FDE)?  libunwind ends a
 * walk at a frame without one by guessing from the frame pointer, and
 * gives it a made-up procedure: that "end" may be a function built without
 * CFI called from deep inside jemalloc (a hook).  A real end of stack
 * (_start, clone3) has its FDE.  Judged only where the object's table is
 * found in memory (unwtable.h); elsewhere the walk stands as it is.
 */
static bool last_frame_has_cfi(const struct ma_target *t, pid_t tid, const struct ma_backtrace *bt,
			       struct fast_upt *f)
{
	uint64_t ip = bt->ip[bt->n - 1] - (bt->n > 1); /* a return address: inside the call */
	unw_proc_info_t pi;
	unw_dyn_info_t di;

	if (!t || libunwind_tables_only() || ma_unw_table_for(t, tid, ip, &di) != 0)
		return true;
	memset(&pi, 0, sizeof(pi));
	if (UNW_OBJ(dwarf_search_unwind_table)(addr_space, ip, &di, &pi, 0, f) < 0)
		return false;
	return true;
}

int ma_unwind_prepare(void)
{
	if (!addr_space) {
		fast_accessors = _UPT_accessors;
		fast_accessors.find_proc_info = fast_find_proc_info;
		fast_accessors.put_unwind_info = fast_put_unwind_info;
		fast_accessors.get_dyn_info_list_addr = fast_get_dyn_info_list_addr;
		fast_accessors.access_mem = fast_access_mem;
		fast_accessors.access_reg = fast_access_reg;
		fast_accessors.access_fpreg = fast_access_fpreg;
		fast_accessors.resume = fast_resume;
		fast_accessors.get_proc_name = fast_get_proc_name;
		addr_space = unw_create_addr_space(&fast_accessors, 0);
		if (!addr_space)
			return -1;
		unw_set_caching_policy(addr_space, UNW_CACHE_GLOBAL);
	}
	if (!walk_buf) {
		if (!(walk_buf = malloc(sizeof(*walk_buf))))
			return -1;
		memset(walk_buf, 0, sizeof(*walk_buf)); /* fault its pages in now, not while a thread is held */
	}
	return 0;
}

/* A new walk keeps the pages of read-only mappings; the stack and data are read afresh. */
static void begin_walk(struct fast_upt *f, const struct ma_target *t, pid_t tid)
{
	if (f->t != t)
		memset(f->stable, 0, sizeof(f->stable));
	for (unsigned i = 0; i < UCACHE_PAGES; i++)
		f->valid[i] = f->valid[i] && f->stable[i];
	f->t = t;
	f->tid = tid;
	f->rehearsal = false;
	f->regs = NULL;
}

int ma_unwind(const struct ma_target *t, pid_t tid, const struct user_regs_struct *regs,
	      struct ma_backtrace *bt)
{
	struct fast_upt *f;
	unw_cursor_t c;
	int rc;

	bt->n = 0;
	bt->complete = false;
	bt->in_signal_handler = false;
	if (ma_unwind_prepare())
		return ma_fail(MA_E_INTERNAL, "libunwind: cannot create address space");
	f = walk_buf;
	begin_walk(f, t, tid);
	f->regs = regs;
	f->upt = _UPT_create(tid);
	if (!f->upt)
		return ma_fail(MA_E_NOMEM, "libunwind: cannot create ptrace context");
	current_walk = f;
	rc = unw_init_remote(&c, addr_space, f);
	if (rc < 0) {
		current_walk = NULL;
		_UPT_destroy(f->upt);
		return ma_fail(MA_E_INTERNAL, "libunwind: cannot unwind thread %d (%d)", tid, rc);
	}
	do {
		unw_word_t ip = 0;

		unw_get_reg(&c, UNW_REG_IP, &ip);
		if (ip == 0)
			break;
		bt->ip[bt->n++] = ip;
		if (unw_is_signal_frame(&c) > 0)
			bt->in_signal_handler = true;
		rc = unw_step(&c);
	} while (rc > 0 && bt->n < MA_MAX_FRAMES);
	/*
	 * A walk cut off at MA_MAX_FRAMES is not complete: deeper frames are
	 * unknown.  Nor is one that ended at a frame without unwind info:
	 * libunwind then guesses from the frame pointer and may stop early
	 * (code built without CFI, called from inside jemalloc by a hook),
	 * while a real end of stack (_start, clone3) is marked by its CFI.
	 */
	bt->complete = rc == 0 && bt->n > 0 && last_frame_has_cfi(t, tid, bt, f);
	current_walk = NULL;
	_UPT_destroy(f->upt);
	return 0;
}

/*
 * A walk of thread TID while it still runs, from the stack pointer and
 * ip /proc shows for a thread blocked in a syscall: its result is thrown
 * away, but what it found stays (libunwind's cache of each ip's unwind
 * rules, the tables located, their pages), so the walk of the stopped
 * thread that follows mostly reads its stack.  Done before the stop, it
 * takes nothing from the hold; a thread not in a syscall is not walked.
 */
void ma_unwind_rehearse(const struct ma_target *t, pid_t tid)
{
	uint64_t sp = 0, pc = 0;
	struct fast_upt *f;
	unw_cursor_t c;

	if (ma_thread_where(t->pid, tid, &sp, &pc) != MA_WHERE_SYSCALL || !sp || !pc ||
	    ma_unwind_prepare())
		return;
	f = walk_buf;
	begin_walk(f, t, tid);
	f->rehearsal = true;
	f->sp = sp;
	f->pc = pc;
	if (!(f->upt = _UPT_create(tid)))
		return;
	current_walk = f;
	if (unw_init_remote(&c, addr_space, f) >= 0)
		for (int i = 0; i < MA_MAX_FRAMES && unw_step(&c) > 0; i++)
			;
	current_walk = NULL;
	f->rehearsal = false;
	_UPT_destroy(f->upt);
	/* The stack is read again by the real walk (it may have moved on). */
	begin_walk(f, t, tid);
}

void ma_unwind_release(void)
{
	ma_unw_tables_reset();
	free(walk_buf);
	walk_buf = NULL;
	if (addr_space)
		unw_destroy_addr_space(addr_space);
	addr_space = NULL;
}

bool ma_thread_is_jemalloc_bg(const struct ma_thread_info *ti)
{
	return strncmp(ti->name, "jemalloc_bg_thd", 15) == 0;
}

/*
 * No exception is made for jemalloc's background threads: one that waits
 * in its condition variable holds no lock, but one blocked on another
 * futex (a mutex) or doing deferred work may hold info->mtx, and a mallctl
 * from that same thread would then wait for itself for ever.  They are
 * tried last, and refused like any thread with a frame in jemalloc.
 */
bool ma_backtrace_in_dl_locked(const struct ma_target *t, const struct ma_backtrace *bt,
			       size_t *frame)
{
	for (size_t i = 0; i < bt->n; i++) {
		uint64_t pc = i == 0 ? bt->ip[i] : bt->ip[i] - 1;

		for (size_t k = 0; k < t->ndl_fns; k++)
			if (pc >= t->dl_fns[k].lo && pc < t->dl_fns[k].hi) {
				*frame = i;
				return true;
			}
	}
	return false;
}

/* The first frame of BT whose code is in R (*FRAME its index); R {0,0}: none. */
static bool frame_in_range(const struct ma_backtrace *bt, struct ma_range r, size_t *frame)
{
	for (size_t i = 0; i < bt->n && r.hi; i++) {
		/* Above frame 0 the ip is a return address: look at the call. */
		uint64_t pc = i == 0 ? bt->ip[i] : bt->ip[i] - 1;

		if (pc >= r.lo && pc < r.hi) {
			*frame = i;
			return true;
		}
	}
	return false;
}

bool ma_backtrace_in_loader(const struct ma_target *t, const struct ma_backtrace *bt, size_t *frame)
{
	return frame_in_range(bt, t->loader, frame);
}

/* Is any frame of BT beyond index FROM (outer) in R? */
static bool frame_beyond_in_range(const struct ma_backtrace *bt, struct ma_range r, size_t from)
{
	for (size_t i = from + 1; i < bt->n && r.hi; i++)
		if (bt->ip[i] - 1 >= r.lo && bt->ip[i] - 1 < r.hi)
			return true;
	return false;
}

bool ma_backtrace_loader_under_agent(const struct ma_target *t, const struct ma_backtrace *bt)
{
	size_t agent;

	/* A signal handler inside the call may wait for anything. */
	if (bt->in_signal_handler || !frame_in_range(bt, t->agent, &agent) || frame_beyond_in_range(bt, t->loader, agent))
		return false;
	for (size_t i = agent + 1; i < bt->n; i++)
		for (size_t k = 0; k < t->ndl_fns; k++)
			if (bt->ip[i] - 1 >= t->dl_fns[k].lo && bt->ip[i] - 1 < t->dl_fns[k].hi)
				return false;
	return true;
}

/*
 * May BT's thread call pthread_create (a thread of memattach's own,
 * ownthread.h)?  Not from inside a libc function that holds the
 * thread-stack lock or the default attributes' lock (target.h): ours
 * would wait for it, held by the thread itself, for ever.  Nor with no
 * frame outside libc: a thread starting, or ending in libc's code that
 * frees its stack under that lock, has none (libc's own helper threads
 * are passed over too).
 */
static bool thread_create_ok(const struct ma_target *t, const struct ma_backtrace *bt, char *why,
			     size_t whylen)
{
	size_t frame;

	for (size_t k = 0; k < t->nthread_fns; k++)
		if (frame_in_range(bt, t->thread_fns[k], &frame)) {
			snprintf(why, whylen, "frame #%zu (0x%llx) is in a libc function that may hold "
				 "the thread-stack lock: no thread can be made from it", frame,
				 (unsigned long long)bt->ip[frame]);
			return false;
		}
	for (size_t i = 0; i < bt->n; i++) {
		uint64_t pc = i == 0 ? bt->ip[i] : bt->ip[i] - 1;

		if (pc < t->libc_code.lo || pc >= t->libc_code.hi)
			return true;
	}
	snprintf(why, whylen, "every frame is in libc (a thread starting or ending, or one of "
		 "libc's own): it may hold the thread-stack lock");
	return false;
}

bool ma_thread_is_safe(const struct ma_target *t, const struct ma_thread_info *ti,
		       const struct ma_backtrace *bt, char *why, size_t whylen)
{
	size_t frame;

	if (bt->n == 0) {
		snprintf(why, whylen, "stack could not be unwound");
		return false;
	}
	for (size_t i = 0; i < bt->n; i++) {
		/* Above frame 0 the ip is a return address: look at the call. */
		uint64_t pc = i == 0 ? bt->ip[i] : bt->ip[i] - 1;

		if (!ma_target_in_jemalloc(t, pc))
			continue;
		snprintf(why, whylen, "frame #%zu (0x%llx) is in jemalloc: it may hold an allocator lock",
			 i, (unsigned long long)bt->ip[i]);
		return false;
	}
	/* Tests only: MEMATTACH_TEST_IGNORE_FORK=1 lets a thread inside fork() through. */
	bool check_fork = !(ma_test_env("IGNORE_FORK") && *ma_test_env("IGNORE_FORK") == '1');

	if (check_fork && frame_in_range(bt, t->fork_fn, &frame)) {
		snprintf(why, whylen, "frame #%zu (0x%llx) is in fork(): between the atfork handlers "
			 "it holds every allocator lock", frame, (unsigned long long)bt->ip[frame]);
		return false;
	}
	if (frame_in_range(bt, t->agent, &frame)) {
		snprintf(why, whylen, "frame #%zu (0x%llx) is in memattach's frag agent: an allocation "
			 "hook, which may hold the agent's lock", frame, (unsigned long long)bt->ip[frame]);
		return false;
	}
	if (ma_backtrace_in_loader(t, bt, &frame)) {
		snprintf(why, whylen, "frame #%zu (0x%llx) is in the dynamic loader: it may be "
			 "loading or relocating (jemalloc may not be ready)", frame,
			 (unsigned long long)bt->ip[frame]);
		return false;
	}
	if (t->for_dlopen && ma_backtrace_in_dl_locked(t, bt, &frame)) {
		snprintf(why, whylen, "frame #%zu (0x%llx) is in a libc function that holds "
			 "the dynamic loader's locks: no dlopen from it", frame,
			 (unsigned long long)bt->ip[frame]);
		return false;
	}
	if (t->for_thread_create && !thread_create_ok(t, bt, why, whylen))
		return false;
	if (bt->in_signal_handler) {
		/* Its stack may be a small sigaltstack: no room for our state area. */
		snprintf(why, whylen, "it is running a signal handler");
		return false;
	}
	if (!bt->complete) {
		snprintf(why, whylen, "stack unwinding stopped after %zu frames: cannot prove it is "
			 "outside jemalloc", bt->n);
		return false;
	}
	if (ti->syscall >= 0)
		snprintf(why, whylen, "blocked in syscall %ld, no frame in jemalloc", ti->syscall);
	else
		snprintf(why, whylen, "no frame in jemalloc");
	return true;
}

/* What a /proc .../sched file says of a thread's last run. */
struct sched_reading {
	double exec_start_ms; /* se.exec_start: its CPU's scheduler clock when it last ran; -1 unknown */
	uint64_t nvcsw; /* nr_voluntary_switches */
};

static void read_sched(const char *path, struct sched_reading *r)
{
	char line[256];
	FILE *f = fopen(path, "re");

	r->exec_start_ms = -1;
	r->nvcsw = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		const char *colon = strchr(line, ':');

		if (!colon)
			continue;
		if (strncmp(line, "se.exec_start", 13) == 0)
			sscanf(colon + 1, "%lf", &r->exec_start_ms);
		else if (strncmp(line, "nr_voluntary_switches", 21) == 0)
			sscanf(colon + 1, "%" SCNu64, &r->nvcsw);
	}
	fclose(f);
}

/*
 * "Now" on the scheduler's clock of each CPU a blocked thread last ran
 * on, with CLOCK_MONOTONIC read beside it.  That clock is one per CPU and
 * each leaves out its own CPU's interrupt and steal time: on a 2-CPU VM
 * here the two stood 60 ms apart, and a wait measured across them began
 * 60 ms too early (a re-issued epoll_wait then timed out early).  So a
 * thread's exec_start is compared with its own CPU's clock, which
 * memattach reads there (moving itself for one sched_yield).  What it
 * left out makes the difference a lower bound of the real time.
 */
/* One tick at HZ 100: how far an unstable sched_clock may stray from CLOCK_MONOTONIC. */
#define SCHED_CLOCK_SLACK_NS 10000000ULL

struct cpu_clock {
	double sched_ms; /* 0 not read yet, -1 not readable */
	uint64_t mono_ns;
};

struct clock_ref {
	struct cpu_clock cpu[CPU_SETSIZE];
	cpu_set_t own; /* memattach's affinity, put back by clock_ref_done */
	int home; /* the CPU memattach ran on before, which it goes back to */
	bool moved;
};

static void clock_ref_init(struct clock_ref *r)
{
	memset(r, 0, sizeof(*r));
}

/* CPU's clock now (NULL if it cannot be read there: not a CPU memattach may run on). */
static const struct cpu_clock *clock_on(struct clock_ref *r, int cpu)
{
	struct cpu_clock *c;
	struct sched_reading own;
	struct timespec ts;
	cpu_set_t one;

	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return NULL;
	c = &r->cpu[cpu];
	if (c->sched_ms)
		return c->sched_ms > 0 ? c : NULL;
	c->sched_ms = -1;
	if (!r->moved && (sched_getaffinity(0, sizeof(r->own), &r->own) != 0 ||
			  (r->home = sched_getcpu()) < 0))
		return NULL;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof(one), &one) != 0)
		return NULL;
	r->moved = true;
	/* The yield brings our own exec_start to now, on this CPU's clock. */
	sched_yield();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (sched_getcpu() != cpu)
		return NULL;
	read_sched("/proc/thread-self/sched", &own);
	if (own.exec_start_ms <= 0)
		return NULL;
	c->sched_ms = own.exec_start_ms;
	c->mono_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	return c;
}

/*
 * Back home, then free to move again: left on a thread's CPU, memattach
 * would share it with whatever runs there (a busy thread of the target
 * lost the CPU for milliseconds).
 */
static void clock_ref_done(struct clock_ref *r)
{
	cpu_set_t home;

	if (!r->moved)
		return;
	CPU_ZERO(&home);
	CPU_SET(r->home, &home);
	sched_setaffinity(0, sizeof(home), &home);
	sched_setaffinity(0, sizeof(r->own), &r->own);
	r->moved = false;
}

/* Field 39 of a /proc .../stat line: the CPU the thread last ran on; -1 unknown. */
static int stat_cpu(const char *buf)
{
	const char *p = strrchr(buf, ')');
	int field = 2;

	if (!p)
		return -1;
	for (p++; *p && field < 39; p++)
		if (*p == ' ')
			field++;
	return field == 39 && *p >= '0' && *p <= '9' ? atoi(p) : -1;
}

static int read_stat(pid_t pid, pid_t tid, char *buf, size_t len)
{
	char path[96];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	if (!(f = fopen(path, "re")))
		return -1;
	/* Whole, not a line: the name in it may hold a newline. */
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n ? 0 : -1;
}

/*
 * Blocked thread TID (last run on CPU): how long since it last ran, on
 * its CPU's clock (0 unknown), and when that was on CLOCK_MONOTONIC
 * (*BEGAN, 0 unknown); *NVCSW its voluntary switches as of that reading.
 * A thread that moved to another CPU meanwhile counts as unknown.
 */
static uint64_t idle_ns(pid_t pid, pid_t tid, int cpu, struct clock_ref *ref, uint64_t *began,
			uint64_t *nvcsw)
{
	const struct cpu_clock *c = clock_on(ref, cpu);
	struct sched_reading t;
	char path[96], buf[512];
	uint64_t idle, sure;

	*began = *nvcsw = 0;
	if (!c)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/sched", pid, tid);
	read_sched(path, &t);
	if (t.exec_start_ms < 0 || read_stat(pid, tid, buf, sizeof(buf)) != 0 || stat_cpu(buf) != cpu)
		return 0;
	/*
	 * It ran after our reading of the clock: it has just begun to wait,
	 * at a time we cannot tell (after that reading).  No start then: a
	 * start at the reading would make the wait seem older than it is,
	 * and a wait issued again with "what remained" would end early (an
	 * outside attack saw a 30 ms epoll_wait return after 4.4 ms).
	 */
	if (c->sched_ms <= t.exec_start_ms)
		return 0;
	idle = (uint64_t)((c->sched_ms - t.exec_start_ms) * 1e6);
	/*
	 * Two errors can make the difference longer than the real wait.  The
	 * scheduler's clock and CLOCK_MONOTONIC (NTP-slewed) run at rates up
	 * to a few hundred ppm apart.  And where the kernel found sched_clock
	 * unstable, each CPU's clock is kept within one tick of the
	 * timekeeping clock, not closer: 2.9 ms over 200 ms on a CI machine
	 * (unit/waitclock).  Less 0.1%, and for the start of the wait one
	 * tick at the slowest HZ (100) more, keeps that start a latest bound:
	 * the re-issued wait may end up to 10 ms late, never early.
	 */
	idle -= idle / 1000;
	sure = idle > SCHED_CLOCK_SLACK_NS ? idle - SCHED_CLOCK_SLACK_NS : 0;
	if (sure < c->mono_ns)
		*began = c->mono_ns - sure;
	*nvcsw = t.nvcsw;
	return idle;
}

uint64_t ma_voluntary_switches_of(int status_fd)
{
	char buf[4096];
	const char *line;
	unsigned long long v;
	ssize_t n = pread(status_fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = 0;
	if (!(line = strstr(buf, "\nvoluntary_ctxt_switches:")) || sscanf(line + 25, "%llu", &v) != 1)
		return 0;
	return v;
}

/*
 * Does descriptor FD of process PID have a socket timeout for direction
 * DIR (1 receive, 2 send)?  Read with getsockopt on a copy of it
 * (pidfd_getfd: nothing in the target changes); false if not a socket or
 * unknown.  A blocking socket call with such a timeout ends with EINTR
 * when the thread is stopped (the kernel's sock_intr_errno).
 */
static bool socket_has_timeout(pid_t pid, int fd, int dir)
{
	char path[64], link[64];
	struct timeval tv = { 0, 0 };
	socklen_t len = sizeof(tv);
	ssize_t n;
	int pfd, copy;
	bool timed = false;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	if ((n = readlink(path, link, sizeof(link) - 1)) <= 0)
		return false;
	link[n] = '\0';
	if (strncmp(link, "socket:", 7) != 0)
		return false;
	if ((pfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0)
		return false;
	if ((copy = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0)) >= 0) {
		timed = getsockopt(copy, SOL_SOCKET, dir == 1 ? SO_RCVTIMEO : SO_SNDTIMEO, &tv, &len) == 0 &&
			(tv.tv_sec || tv.tv_usec);
		close(copy);
	}
	close(pfd);
	return timed;
}

/* Does syscall NR (arguments A) block on a socket that has a timeout for that direction? */
static bool socket_wait_timed(pid_t pid, long nr, const unsigned long long *a)
{
	int fd[2], dir[2], n = ma_arch_socket_waits(nr, a, fd, dir);

	for (int k = 0; k < n; k++)
		if (socket_has_timeout(pid, fd[k], dir[k]))
			return true;
	return false;
}

static void read_thread_info(pid_t pid, pid_t tid, struct ma_thread_info *ti,
			     struct clock_ref *ref)
{
	char path[96], buf[512];
	uint64_t began = 0, nvcsw = 0;
	int cpu = -1;
	FILE *f;

	memset(ti, 0, sizeof(*ti));
	ti->tid = tid;
	ti->syscall = -2;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
	if (ma_read_comm_file(path, ti->name, sizeof(ti->name)) != 0)
		ti->name[0] = '\0';
	if (read_stat(pid, tid, buf, sizeof(buf)) == 0) {
		char *p = strrchr(buf, ')');

		if (p && p[1] == ' ')
			ti->state = p[2];
		cpu = stat_cpu(buf);
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
	if ((f = fopen(path, "re"))) {
		if (fgets(buf, sizeof(buf), f)) {
			unsigned long long a[6] = { 0 };

			if (strncmp(buf, "running", 7) == 0) {
				ti->syscall = -2;
			} else {
				ti->syscall = strtol(buf, NULL, 10);
				unsigned long long sp = 0, pc = 0;

				if (sscanf(buf, "%*d %llx %llx %llx %llx %llx %llx %llx %llx", &a[0], &a[1],
					   &a[2], &a[3], &a[4], &a[5], &sp, &pc) == 8)
					ti->pc = pc;
				ti->timed_wait = ma_arch_is_timed_wait(ti->syscall, a);
				ti->arg0 = a[0];
				ti->eintr_wait = ma_arch_stop_ends_with_eintr(ti->syscall);
				/*
				 * Not only state S: /proc's state and syscall are two reads,
				 * and a writer woken between them (R) is still in its
				 * transfer.  D alone is spared: a stop does not end it.
				 */
				ti->cuts_short = ti->state != 'D' && ma_arch_stop_cuts_short(ti->syscall, a);
				if (!ti->eintr_wait && socket_wait_timed(pid, ti->syscall, a))
					ti->eintr_wait = ti->timed_wait = true;
			}
		}
		fclose(f);
	}
	if (ti->syscall >= 0 && (ti->state == 'S' || ti->state == 'D'))
		ti->idle_ns = idle_ns(pid, tid, cpu, ref, &began, &nvcsw);
	/* An epoll_wait we interrupt is issued again: with the time that remained. */
	if (ti->idle_ns && ti->timed_wait && ma_arch_is_epoll_wait(ti->syscall)) {
		ti->wait_began_ns = began;
		ti->nvcsw = nvcsw;
	}
}

enum ma_thread_where ma_thread_where(pid_t pid, pid_t tid, uint64_t *sp, uint64_t *pc)
{
	char path[96], buf[512], *tok[10], *save = NULL;
	int ntok = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
	if (!(f = fopen(path, "re")))
		return MA_WHERE_GONE;
	/* "nr a1..a6 sp pc" in a syscall, "-1 sp pc" blocked elsewhere, "running". */
	if (fgets(buf, sizeof(buf), f))
		for (char *p = strtok_r(buf, " \n", &save); p && ntok < 10; p = strtok_r(NULL, " \n", &save))
			tok[ntok++] = p;
	fclose(f);
	if (ntok != 9 && ntok != 3)
		return MA_WHERE_RUNNING;
	*sp = strtoull(tok[ntok - 2], NULL, 16);
	*pc = strtoull(tok[ntok - 1], NULL, 16);
	return ntok == 9 ? MA_WHERE_SYSCALL : MA_WHERE_BLOCKED;
}

void ma_read_thread_info(pid_t pid, pid_t tid, struct ma_thread_info *ti)
{
	struct clock_ref ref;

	clock_ref_init(&ref);
	read_thread_info(pid, tid, ti, &ref);
	clock_ref_done(&ref);
}

bool ma_thread_stop_ends_with_eintr(const struct ma_thread_info *ti)
{
	return ti->state == 'S' && ti->syscall >= 0 && ti->eintr_wait;
}

static int rank(const struct ma_thread_info *ti)
{
	if (ma_thread_is_jemalloc_bg(ti))
		return 6;
	if (ti->cuts_short)
		return 5; /* never stopped: waited for, tried last */
	if (ti->state == 'S' && ti->syscall >= 0 && !ti->eintr_wait)
		return ti->timed_wait ? 1 : 0;
	if (ti->state == 'S' && ti->syscall >= 0)
		return 4; /* stopped only when allowed (--tid, --allow-eintr-wait), and last */
	if (ti->state == 'D' && ti->syscall >= 0)
		return 2;
	return 3;
}

/*
 * Best first: an untimed wait, a timed wait, uninterruptible, running, a
 * wait a stop ends with EINTR (stopped only when allowed), a transfer a
 * stop cuts short (never stopped); jemalloc's background threads last
 * (never borrowed).
 * Among equals, one whose stop lets no ignored signal loose (frees_ignored);
 * then the one idle longest: borrowing it delays the least work
 * (a serving thread that waits between requests has just run).
 */
static int cmp_rank(const void *a, const void *b)
{
	const struct ma_thread_info *x = a, *y = b;
	int rx = rank(x), ry = rank(y);

	if (rx != ry)
		return rx - ry;
	if (x->frees_ignored != y->frees_ignored)
		return x->frees_ignored ? 1 : -1;
	if (x->idle_ns != y->idle_ns)
		return x->idle_ns > y->idle_ns ? -1 : 1;
	return x->tid - y->tid;
}

const char *ma_thread_rank_class(const struct ma_thread_info *ti)
{
	static const char *const names[] = {
		"untimed wait", "timed wait", "uninterruptible", "running",
		"wait a stop ends with EINTR", "transfer a stop cuts short",
		"jemalloc background thread",
	};

	return names[rank(ti)];
}

int ma_list_threads(pid_t pid, struct ma_thread_info **out, size_t *n)
{
	char path[64];
	struct dirent *d;
	struct clock_ref ref;
	size_t cap = 0;
	DIR *dir;

	uint64_t ignored = ma_signals_ignored(pid);

	*out = NULL;
	*n = 0;
	clock_ref_init(&ref);
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return ma_fail(errno == ENOENT ? MA_E_NOPROC : MA_E_IO, "cannot list threads of %d: %s",
			       pid, strerror(errno));
	while ((d = readdir(dir))) {
		pid_t tid = (pid_t)atoi(d->d_name);

		if (tid <= 0)
			continue;
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct ma_thread_info *p = realloc(*out, nc * sizeof(*p));

			if (!p) {
				closedir(dir);
				clock_ref_done(&ref);
				return ma_fail(MA_E_NOMEM, "out of memory");
			}
			*out = p;
			cap = nc;
		}
		/* Thousands of threads under load take longer than a short --timeout. */
		if (*n % 64 == 63 && ma_run_deadline_passed()) {
			size_t read = *n;

			closedir(dir);
			clock_ref_done(&ref);
			free(*out);
			*out = NULL;
			*n = 0;
			return ma_fail(MA_E_TIMEOUT, "the run's --timeout ran out while reading the "
				       "threads of process %d (%zu read so far)", pid, read);
		}
		struct ma_thread_info *ti = &(*out)[(*n)++];

		read_thread_info(pid, tid, ti, &ref);
		/* (a main thread that has exited is never stopped: it keeps its place) */
		ti->frees_ignored = ti->state != 'Z' && ti->state != 'X' &&
				    ma_signals_a_stop_frees(pid, tid, ignored) != 0;
	}
	closedir(dir);
	clock_ref_done(&ref);
	qsort(*out, *n, sizeof(**out), cmp_rank);
	return 0;
}
