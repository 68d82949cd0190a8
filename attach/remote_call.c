/*
 * remote_call.c - borrow one thread, call functions in it, give it back.
 *
 * The only file that drives ptrace stops (the arch file reads and writes
 * registers).  Every syscall or call runs under PTRACE_SYSCALL so the
 * thread stops at known points: the stub's `syscall` instruction, which
 * serves both the syscalls we issue and the marker a call returns into.
 *
 * Order of a session, each step safe should memattach die right after it
 * (the kernel then detaches and the thread runs on from its registers):
 *   seize + interrupt           untouched thread: the kernel resumes it
 *   (EINTR re-issue registers)  the thread issues its syscall again
 *   write state area, stub      memory no one uses: nothing changes
 *   registers -> stub syscall   it runs that syscall, then restores itself
 *   block signals               the stub's restore path puts the mask back
 *   calls, syscalls             they end in the stub: it restores itself
 *   unmap, mask back, registers back, slack back, detach.
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

static void open_mem_fd(struct ma_session *s)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/mem", s->t->proc_pid);
	s->mem_fd = open(path, O_RDWR | O_CLOEXEC);
}

/* The stub site is in a read-only mapping: written through /proc/PID/mem. */
static int write_stub_site(struct ma_session *s, size_t off, const void *buf, size_t len)
{
	return ma_mem_write_fd(s->mem_fd, s->t->proc_pid, s->stub + off, buf, len);
}


void session_count_hold(struct ma_session *s)
{
	uint64_t held = ma_now_ns() - s->t_stop_ns, wait = 0;

	s->stopped_ns += held;
	if (held <= s->longest_stop_ns)
		return;
	s->longest_stop_ns = held;
	/* Read after the release (not part of the hold). */
	if (s->cpu_wait_known && ma_thread_cpu_wait_ns(s->t->proc_pid, s->tid, &wait) &&
	    wait >= s->cpu_wait_at_seize_ns)
		wait -= s->cpu_wait_at_seize_ns;
	else
		wait = 0;
	s->longest_stop_cpu_wait_ns = wait < held ? wait : held;
}

long session_seccomp_state(const struct ma_session *s)
{
	return s->status_fd >= 0 ? ma_seccomp_state_of(s->status_fd) : ma_seccomp_state(s->t->pid, s->tid);
}

/* 0 none, 1 strict, 2 filter; -1 unreadable. */
static int thread_seccomp_mode(const struct ma_session *s)
{
	long state = session_seccomp_state(s);

	return state < 0 ? -1 : (int)(state / 65536);
}

bool ma_session_filtered(const struct ma_session *s)
{
	return thread_seccomp_mode(s) != 0;
}

/* ---- setting up ---- */

/* Does the thread's filter allow all of Q (N queries)?  For what memattach can do without. */
static bool filter_allows(struct ma_session *s, const struct ma_sc_query *q, size_t n)
{
	if (ma_seccomp_check(s->t->pid, s->tid, q, n) == 0)
		return true;
	ma_err_clear();
	return false;
}

/*
 * May the stub's self-restore ask the kernel about waiting signals
 * (rt_sigpending, then rt_sigaction for each)?  Under a filter that
 * forbids it, the stub restarts the syscall as it stood.
 */
static bool stub_may_ask_signals(struct ma_session *s)
{
	struct ma_sc_query q[65];

	q[0] = (struct ma_sc_query){ SYS_rt_sigpending, { MA_SC_UNCHOSEN_ADDR, 8 },
				     s->stub + MA_STUB_PENDING_SYSCALL_END,
				     "rt_sigpending (the stub's self-restore)" };
	for (int sig = 1; sig <= 64; sig++)
		q[sig] = (struct ma_sc_query){ SYS_rt_sigaction, { (uint64_t)sig, 0, MA_SC_UNCHOSEN_ADDR, 8 },
					       s->stub + MA_STUB_ACTION_SYSCALL_END,
					       "rt_sigaction (the stub's self-restore)" };
	return filter_allows(s, q, sizeof(q) / sizeof(q[0]));
}

/*
 * May the stub end in rt_sigreturn?  Else it ends by popping the
 * registers, after its rt_sigprocmask.
 */
static bool stub_may_sigreturn(struct ma_session *s)
{
	struct ma_sc_query q = { SYS_rt_sigreturn, { 0 }, s->stub + MA_STUB_SIGRETURN_SYSCALL_END,
				 "rt_sigreturn (the stub's self-restore)" };

	return filter_allows(s, &q, 1);
}

/* May it read the alternate stack first?  Else rt_sigreturn leaves it alone. */
static bool stub_may_read_altstack(struct ma_session *s)
{
	struct ma_sc_query q = { SYS_sigaltstack, { 0, s->area + MA_AREA_UC_STACK },
				 s->stub + MA_STUB_ALTSTACK_SYSCALL_END,
				 "sigaltstack (the stub's self-restore)" };

	return filter_allows(s, &q, 1);
}

/* May the trap's rt_sigprocmask run (ma_arch_trap_regs)?  Else the old way in. */
static bool trap_allowed(struct ma_session *s)
{
	struct ma_sc_query q = { SYS_rt_sigprocmask, { SIG_BLOCK, MA_SC_UNCHOSEN_ADDR, 0, 8 },
				 s->stub + MA_STUB_TRAP_END, "rt_sigprocmask (the way in)" };

	return filter_allows(s, &q, 1);
}

/*
 * What jemalloc itself may do to memory inside our calls, over the sizes it
 * works in: map extents (a thread's first call creates its tcache and
 * perhaps an arena; a heap dump allocates), unmap them, purge and advise
 * them.  A filter that answers anything but ALLOW to one of these (KILL:
 * the process dies; TRAP: a fault inside jemalloc that holds a lock, which
 * no containment can give back; ERRNO: jemalloc's own failure paths) makes
 * the thread one memattach does not borrow.  Lengths from a page to a
 * terabyte catch filters keyed on a length threshold.  Into Q (room for
 * JE_QUERIES); returns how many.
 */
#define JE_QUERIES 128
static size_t jemalloc_memory_queries(struct ma_sc_query *q, uint64_t ip)
{
	static const uint64_t lens[] = { PAGE, 16UL << 10, 64UL << 10, 256UL << 10, 2UL << 20,
					 16UL << 20, 256UL << 20, 4ULL << 30, 1ULL << 40 };
	static const uint64_t advice[] = { MADV_DONTNEED, MADV_FREE, MADV_DONTDUMP, MADV_DODUMP,
					   MADV_HUGEPAGE, MADV_NOHUGEPAGE };
	static const uint64_t flags[] = { MAP_PRIVATE | MAP_ANONYMOUS,
					  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
					  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED };
	static const uint64_t prot[] = { PROT_READ | PROT_WRITE, PROT_NONE };
	uint64_t any = MA_SC_UNCHOSEN_ADDR;
	size_t n = 0;

	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		for (size_t a = 0; a < sizeof(advice) / sizeof(advice[0]); a++)
			q[n++] = (struct ma_sc_query){ SYS_madvise, { any, lens[l], advice[a], 0, 0, 0 },
						       ip, "madvise (jemalloc's purge and advice)" };
		for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
			for (size_t p = 0; p < sizeof(prot) / sizeof(prot[0]); p++)
				q[n++] = (struct ma_sc_query){ SYS_mmap,
							       { f == 2 ? any : 0, lens[l], prot[p],
								 flags[f], (uint64_t)-1, 0 },
							       ip, "mmap (jemalloc's extents)" };
		q[n++] = (struct ma_sc_query){ SYS_munmap, { any, lens[l], 0, 0, 0, 0 }, ip,
					       "munmap (jemalloc's extents)" };
	}
	return n;
}

int session_check_seccomp(struct ma_session *s, size_t data_len, bool on_stack)
{
	uint64_t ip = s->stub + MA_STUB_MARKER_END, any = MA_SC_UNCHOSEN_ADDR;
	struct ma_sc_query q[] = {
		{ MA_STUB_MARKER_NR, { 0 }, ip, "getpid (the stub's marker)" },
		/* jemalloc's locks inside our calls (its memory: jemalloc_memory_queries) */
		{ SYS_futex, { any, 128 /* FUTEX_WAIT_PRIVATE */, 0, 0, 0, 0 }, ip, "futex (jemalloc's locks)" },
		{ SYS_futex, { any, 129 /* FUTEX_WAKE_PRIVATE */, 1, 0, 0, 0 }, ip, "futex (jemalloc's locks)" },
	};
	/* The scratch mapping's own syscalls, when the scratch is not on the thread's stack. */
	struct ma_sc_query qmap[] = {
		{ SYS_mmap, { any, HEADER_PAGE + data_len, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, (uint64_t)-1, 0 },
		  ip, "mmap (memattach's scratch area)" },
		{ SYS_munmap, { any, HEADER_PAGE + data_len, 0, 0, 0, 0 }, ip, "munmap" },
	};
	/* Needed only by the pop ending. */
	struct ma_sc_query qmask = { SYS_rt_sigprocmask, { SIG_SETMASK, s->area + MA_AREA_SIGMASK, 0, 8, 0, 0 },
				     s->stub + MA_STUB_RESTORE_SYSCALL_END,
				     "rt_sigprocmask (the stub's self-restore)" };
	struct ma_sc_query jq[JE_QUERIES];
	int mode = s->early_seccomp_mode, rc;

	if (mode < 0 || ma_arch_stopped_after_seccomp_change(&s->saved.regs))
		mode = thread_seccomp_mode(s);
	s->stub_asks_signals = s->trap_ok = s->stub_sigreturns = s->stub_reads_altstack = true;
	/* What give-back compares with (judge_filters_again); read before the filters are. */
	s->judged_filters = mode == 0 ? 0 : session_seccomp_state(s);
	s->filters_changed = false;
	if (mode == 0)
		return 0;
	s->filtered = true;
	if ((rc = ma_seccomp_check(s->t->pid, s->tid, q, sizeof(q) / sizeof(q[0]))) ||
	    (rc = ma_seccomp_check(s->t->pid, s->tid, jq, jemalloc_memory_queries(jq, ip))) ||
	    (!on_stack && (rc = ma_seccomp_check(s->t->pid, s->tid, qmap, 2))))
		return rc;
	s->stub_sigreturns = stub_may_sigreturn(s);
	s->stub_reads_altstack = stub_may_read_altstack(s);
	if (!s->stub_sigreturns && (rc = ma_seccomp_check(s->t->pid, s->tid, &qmask, 1)))
		return rc;
	s->stub_asks_signals = stub_may_ask_signals(s);
	s->trap_ok = trap_allowed(s);
	return 0;
}

static void fill_header(const struct ma_session *s, struct ma_stub_header *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = MA_MAGIC_STUB;
	h->session = s->id;
	h->tid = (uint32_t)s->tid;
	h->owner = (uint32_t)getpid();
	h->map[0] = s->own[0];
	h->map[1] = s->own[1];
	for (size_t i = 0; i < s->ninherited; i++)
		h->map[2 + i] = s->inherited[i];
}

_Static_assert(MA_STUB_HEADER + sizeof(struct ma_stub_header) <= MA_STUB_REGION, "stub header");

/*
 * Memory of ours the hold hands to the kernel, passed to it once before
 * the stop (ma_kernel_touch says why): the stack below a session's
 * frames, the state area's image, and a local mirror of the scratch data
 * (ma_session_local).  The two buffers live as long as memattach, so a
 * run that borrows many threads touches them once.
 */
#define TOUCHED_STACK (64UL << 10)
#define LOCAL_MIRROR_MAX (256UL << 10)

static unsigned char *area_image; /* ma_arch_state_area_size(MA_XSTATE_MAX) bytes, 64-aligned */
static unsigned char *local_mirror;
static size_t local_mirror_len;

static __attribute__((noinline)) void touch_stack_below(void)
{
	unsigned char below[TOUCHED_STACK];

	ma_kernel_touch(below, sizeof(below));
	__asm__ volatile("" : : "r"(below) : "memory"); /* kept, though never read here */
}

static int prepare_local_memory(size_t data_len)
{
	size_t mirror = data_len < LOCAL_MIRROR_MAX ? data_len : LOCAL_MIRROR_MAX;

	touch_stack_below();
	if (!area_image) {
		size_t len = (ma_arch_state_area_size(MA_XSTATE_MAX) + 63) & ~(size_t)63;

		if (!(area_image = aligned_alloc(64, len)))
			return ma_fail(MA_E_NOMEM, "out of memory");
		memset(area_image, 0, len);
		ma_kernel_touch(area_image, len);
	}
	if (mirror > local_mirror_len) {
		unsigned char *m = realloc(local_mirror, mirror);

		if (!m)
			return ma_fail(MA_E_NOMEM, "out of memory");
		local_mirror = m;
		memset(local_mirror + local_mirror_len, 0, mirror - local_mirror_len);
		ma_kernel_touch(local_mirror, mirror);
		local_mirror_len = mirror;
	}
	return 0;
}

static bool local_mirror_lent;

void *ma_session_local(const struct ma_session *s, size_t len)
{
	(void)s;
	if (local_mirror_lent || len > local_mirror_len)
		return NULL;
	local_mirror_lent = true;
	return local_mirror;
}

void ma_session_local_release(void *p)
{
	if (p && p == local_mirror)
		local_mirror_lent = false;
}

/* Write the state area and the stub: memory only this session uses; the thread is unchanged. */
static int write_stub(struct ma_session *s)
{
	unsigned char stub[MA_STUB_REGION], *area = area_image;
	struct ma_stub_header h;
	int rc;

	if (!area || s->area_len > ma_arch_state_area_size(MA_XSTATE_MAX))
		return ma_fail(MA_E_INTERNAL, "no state area image");
	ma_arch_build_area(area, s->area, &s->resume, &s->saved, s->sigmask, run_borrowed_mask());
	if ((rc = ma_mem_write(s->t->proc_pid, s->area, area, s->area_len)))
		return rc;
	ma_arch_build_stub(stub, s->stub, s->area, &s->resume, &s->saved,
			   &(struct ma_stub_opts){ s->stub_asks_signals, s->stub_sigreturns,
						   s->stub_reads_altstack });
	ma_arch_build_batch(stub + MA_STUB_BATCH);
	ma_arch_build_append_cb(stub + MA_STUB_APPEND, MA_APPEND_CB_MAX);
	s->batch_fn = s->stub + MA_STUB_BATCH;
	s->append_cb = s->stub + MA_STUB_APPEND;
	fill_header(s, &h);
	memcpy(stub + MA_STUB_HEADER, &h, sizeof(h));
	if ((rc = write_stub_site(s, 0, stub, sizeof(stub))))
		return rc;
	s->stub_written = true;
	return 0;
}

/* Record the mappings in the stub header, so a later run can find them. */
int session_write_stub_header(struct ma_session *s)
{
	struct ma_stub_header h;

	fill_header(s, &h);
	return write_stub_site(s, MA_STUB_HEADER, &h, sizeof(h));
}

/*
 * An address for LEN bytes that no mapping of T uses, with a free page on
 * each side (so the kernel merges ours with nothing): in the largest gap
 * below 2^47, at an offset that differs per session and attempt.
 */
static uint64_t pick_address(const struct ma_session *s, size_t len, unsigned attempt)
{
	const struct ma_target *t = s->t;
	uint64_t best_lo = 0, best_len = 0, slot, span;

	for (size_t i = 0; i + 1 < t->nmaps; i++) {
		uint64_t lo = t->maps[i].end, hi = t->maps[i + 1].start;

		if (hi > lo && hi - lo > best_len && hi < (1ULL << 47)) {
			best_lo = lo;
			best_len = hi - lo;
		}
	}
	if (best_len < len + 4 * PAGE)
		return 0;
	/* Far from both ends (a brk heap grows up, mmaps come down), when the gap is large. */
	span = (best_len - len - 2 * PAGE) / PAGE;
	if (span > (4ULL << 20)) {
		best_lo += (span / 2) * PAGE;
		span = 1ULL << 20;
	}
	slot = ((s->id >> 12) + attempt * 0x9e3779b97f4a7c15ULL) % span;
	return best_lo + PAGE + slot * PAGE;
}

/* Record R as slot I of ours in the stub header. */
static int record_own(struct ma_session *s, int i, uint64_t addr, size_t len)
{
	s->own[i] = (struct ma_map_record){ addr, len, addr ? s->id : 0 };
	if (!addr)
		s->own[i].len = 0;
	return session_write_stub_header(s);
}

/*
 * A child another thread forks while the mapping exists must not inherit
 * it (a copy nobody would ever remove): MADV_DONTFORK.  Not under a
 * seccomp filter, which was asked about the syscalls we must issue only;
 * there the child of a fork in those milliseconds keeps a copy.
 */
static int keep_from_children(struct ma_session *s, uint64_t addr, size_t len)
{
	uint64_t args[3] = { addr, len, MADV_DONTFORK }, ret;

	return s->filtered ? 0 : ma_session_syscall(s, SYS_madvise, args, 3, &ret);
}

/*
 * mmap LEN bytes read+write for slot I: the address is chosen and written
 * into the stub header before the syscall, so a run killed at any instant
 * leaves a mapping the next run can find; then our magic goes in its
 * first bytes.
 */
static int map_recorded(struct ma_session *s, int i, size_t len, uint64_t *addr)
{
	int rc = 0;

	for (unsigned attempt = 0; attempt < 8; attempt++) {
		uint64_t want = pick_address(s, len, attempt), got;
		uint64_t args[6] = { want, len, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, (uint64_t)-1, 0 };
		uint64_t hdr[2] = { MA_MAGIC_MAP, s->id };

		if (!want)
			break;
		if ((rc = record_own(s, i, want, len)))
			return rc;
		if ((rc = ma_session_syscall(s, SYS_mmap, args, 6, &got)))
			return rc;
		if (got == (uint64_t)-EEXIST)
			continue; /* the target mapped there meanwhile */
		if (got > (uint64_t)-4096) {
			record_own(s, i, 0, 0);
			return ma_fail(MA_E_NOMEM, "mmap of %zu bytes in the target failed: %s", len,
				       strerror((int)-got));
		}
		if (got != want && (rc = record_own(s, i, got, len))) /* a kernel without NOREPLACE */
			return rc;
		*addr = got;
		if ((rc = keep_from_children(s, got, len)))
			return rc;
		return ma_mem_write(s->t->proc_pid, got, hdr, sizeof(hdr));
	}
	record_own(s, i, 0, 0);
	return rc ? rc : ma_fail(MA_E_NOMEM, "no free address range of %zu bytes in process %d", len,
				 s->t->pid);
}

static int unmap_recorded(struct ma_session *s, int i)
{
	uint64_t args[2] = { s->own[i].addr, s->own[i].len }, ret;
	int rc;

	if (!s->own[i].len)
		return 0;
	if ((rc = ma_session_syscall(s, SYS_munmap, args, 2, &ret)))
		return rc;
	return record_own(s, i, 0, 0); /* no longer ours: a later run must not unmap it */
}

/* The caller gets the bytes after our header: it must never overwrite the magic. */
int ma_session_map(struct ma_session *s, size_t len, uint64_t *addr)
{
	uint64_t base;
	int rc;

	if (s->own[1].len)
		return ma_fail(MA_E_INTERNAL, "one extra mapping at a time");
	rc = map_recorded(s, 1, (len + MA_MAP_HEADER + PAGE - 1) & ~(PAGE - 1), &base);
	if (!rc)
		*addr = base + MA_MAP_HEADER;
	return rc;
}

void ma_session_unmap(struct ma_session *s, uint64_t addr)
{
	if (s->own[1].len && s->own[1].addr + MA_MAP_HEADER == addr && !s->abandoned &&
	    unmap_recorded(s, 1))
		ma_err_clear();
}

/*
 * The scratch data and the calls' private stack: one read+write mapping
 * whose first page holds our header (the code lives in the stub region).
 */
static int map_scratch(struct ma_session *s, size_t data_size)
{
	size_t len = HEADER_PAGE + data_size + STACK_SIZE;
	uint64_t addr;
	int rc;

	if ((rc = map_recorded(s, 0, len, &addr)))
		return rc;
	s->mapped = true;
	s->data = addr + HEADER_PAGE;
	s->data_len = data_size;
	s->stack_top = addr + len;
	return 0;
}

/*
 * Small data and a short call need no mapping: they go on the thread's
 * own stack, below the state area (a stack the thread has room on, far
 * more than the call needs, see ON_STACK_ROOM).  Nothing to map, nothing
 * to remove, nothing a killed run leaves behind.
 */
static bool scratch_fits_on_stack(const struct ma_session *s, size_t data_size)
{
	uint64_t bottom = thread_stack_bottom(s);

	return data_size <= ON_STACK_MAX && bottom && s->area > bottom &&
	       s->area - bottom > data_size + ON_STACK_ROOM;
}

int session_check_hold(struct ma_session *s)
{
	size_t data = s->want_data ? s->want_data : DEFAULT_DATA;

	s->area_len = ma_arch_state_area_size(s->saved.xstate_len);
	s->area = ma_arch_state_area_addr(&s->saved.regs, s->saved.xstate_len);
	s->on_stack = s->data_on_stack_ok && scratch_fits_on_stack(s, data);
	return session_check_seccomp(s, data + STACK_SIZE, s->on_stack);
}

static void scratch_on_stack(struct ma_session *s, size_t data_size)
{
	s->mapped = true;
	s->data = (s->area - data_size) & ~(uint64_t)63;
	s->data_len = data_size;
	s->stack_top = s->data - 64;
}

int ma_session_open(struct ma_session *s, struct ma_target *t, const struct ma_session_opts *o)
{
	size_t data = o->data_size ? o->data_size : DEFAULT_DATA;
	bool stale[MA_MAX_STUB_SITES];
	uint64_t addrs[2];
	bool busy_left, stale_found = false;
	int rc;

	memset(s, 0, sizeof(*s));
	s->t = t;
	s->lock.fd = s->status_fd = s->mem_fd = -1;
	t->for_dlopen = o->for_dlopen;
	s->fresh_ok = o->fresh_ok;
	s->no_tid_option = o->no_tid_option;
	s->own_tp = o->own_tp;
	s->pass_setxid = o->pass_setxid;
	s->stop_eintr_wait = !o->strict || o->tid;
	s->guard_ignored = o->strict && (!o->tid || o->visit);
	s->strict = o->strict;
	s->named = o->tid;
	s->call_timeout_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : 5000;
	if (getrandom(&s->id, sizeof(s->id), 0) != sizeof(s->id))
		s->id = ma_now_ns() ^ (uint64_t)getpid() << 32;
	if ((rc = ma_arch_state_alloc(&s->saved)))
		return rc;
	ma_kernel_touch(s->saved.xstate, MA_XSTATE_MAX);
	if ((rc = prepare_local_memory(data))) {
		ma_arch_state_free(&s->saved);
		return rc;
	}
	if ((rc = ma_runlock_acquire(t->pid, o->deadline_ms, &s->lock_waited_ns, &s->lock))) {
		ma_arch_state_free(&s->saved);
		return rc;
	}
	/*
	 * The process may have exec'd since its maps were read: its files
	 * are checked now, before any stop; what the calls rely on (jemalloc's
	 * code, the stub site's bytes) is checked again in the hold, by
	 * content (ma_target_code_unchanged, leftover_scan_stub_sites).
	 */
	addrs[0] = t->je.mallctl;
	addrs[1] = t->stub_sites[0].addr;
	if ((rc = ma_target_maps_unchanged(t, addrs, 2)))
		goto fail;
	s->sites_had_stub = leftover_any_site_has_stub(s);
	open_mem_fd(s);
	/* What the hold needs, so each candidate's seccomp filter is judged in its own (judge_held). */
	s->want_data = data;
	s->data_on_stack_ok = o->data_size != 0;
	if ((rc = choose_thread(s, o)))
		goto fail;
	if ((rc = ma_target_code_unchanged(t)))
		goto fail;
	if ((rc = leftover_scan_stub_sites(s, stale, &busy_left)))
		goto fail;
	for (size_t i = 0; i < t->nstub_sites; i++)
		stale_found |= stale[i];
	/* Judged in the choice already (judge_held), now with the stub site this session took. */
	if ((rc = session_check_hold(s)))
		goto fail;
	if ((rc = write_stub(s)))
		goto fail;
	/* A killed run's mappings go before ours come: its records never pile up. */
	leftover_remove(s, stale);
	if (s->on_stack)
		scratch_on_stack(s, data);
	else if ((rc = map_scratch(s, data)))
		goto fail;
	if (stale_found && !busy_left)
		leftover_close_memfds(s); /* a killed heap-dump's memfd */
	return 0;
fail:
	if (rc == MA_E_TIMEOUT && s->seized && s->changed)
		s->abandoned = true; /* a syscall still runs: the stub restores */
	ma_session_close(s);
	return rc;
}

/*
 * A call failed (RC) with the thread somewhere inside it: a ptrace request
 * refused, a stop not seen.  It may hold a jemalloc lock there, so its
 * registers are not put back; it is let go to finish the call and restore
 * itself through the stub, as a memattach killed at that instant would.
 */
static int abandon_call(struct ma_session *s, int rc)
{
	char why[512];

	snprintf(why, sizeof(why), "%s", ma_errmsg());
	ma_err_clear();
	s->abandoned = true;
	return ma_fail(rc, "%s; the thread was left to finish the call and restore itself", why);
}

int ma_session_call_timeout(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
			    uint64_t *ret, int timeout_ms)
{
	struct user_regs_struct r = s->saved.regs;
	uint64_t retaddr = s->stub;
	int rc, cut_ms;

	if (!s->seized || !s->mapped || s->abandoned || s->restored_itself)
		return ma_fail(MA_E_INTERNAL, "no session");
	/* A call is never started that the run's --timeout leaves no time to wait for. */
	if ((cut_ms = ma_run_ms_left(timeout_ms)) == 0)
		return ma_fail(MA_E_TIMEOUT, "the run's --timeout ran out before the call");
	ma_step_mark("call");
	rc = ma_mem_write(s->t->proc_pid, (s->stack_top & ~15ULL) - 8, &retaddr, 8);
	if (rc)
		return rc;
	if (ma_test_env("FAULT") && *ma_test_env("FAULT"))
		fn = 16; /* tests only: a call that faults at once */
	/*
	 * At the marker's entry (after a call or a syscall), in a thread
	 * under a seccomp filter: let its getpid run first.  Registers set
	 * there skip it as nr -1, which the filter then judges: an
	 * allow-list kills the process.  Elsewhere the skip is harmless and
	 * saves a stop (each one more request that can fail).
	 */
	if ((rc = run_leave_call_end(s)))
		return rc;
	if (s->at_marker && ma_session_filtered(s)) {
		struct user_regs_struct m;

		if ((rc = run_until(s, GOAL_SYSCALL_EXIT, s->call_timeout_ms, &m)))
			return rc;
		s->at_marker = false;
	}
	ma_arch_setup_call(&r, fn, args, nargs, s->stack_top, retaddr);
	if ((rc = run_set_regs_blocked(s, &r)))
		return rc;
	/*
	 * Only now, the call's return into the stub set: should memattach die
	 * from here on, the stub gives the thread its own state back.
	 */
	if (!s->call_fpu && (rc = ma_arch_set_call_fpu(s->tid, &s->saved)))
		return rc;
	s->call_fpu = true;
	s->ncalls++;
	s->at_marker = s->skipping_self_deadlock = s->end_seen = false;
	s->call_syscalls = 0;
	stops_test_kill_point("call");
	rc = run_until(s, GOAL_CALL, cut_ms, &r);
	if (!rc) {
		s->at_marker = !s->at_call_end && !s->restored_itself;
		stops_test_kill_point("marker");
	}
	if (s->end_sig) {
		/* For this call only; blocked again (the call unblocked it) for the way out. */
		s->end_sig = 0;
		/*
		 * Stopped at the end, glibc's SIGSETXID too: let go from there,
		 * the thread has the rest of the call to run before the stub's
		 * restore, and a handler run meanwhile could block outside the
		 * stub, where restore_stub_when_left takes it to have left (the
		 * stub's bytes back, its return into them a SIGSEGV: daemon -u,
		 * 1 in 5 targets).  A setuid() waits those microseconds.
		 */
		if (!rc && s->at_call_end)
			rc = run_set_sigmask(s, s->sigmask | run_borrowed_mask());
		else if (!rc && !s->restored_itself) /* (back on its own: its mask is its own) */
			rc = run_block_signals(s);
	}
	if (rc == MA_E_TIMEOUT) {
		/*
		 * The call is still running (waiting for a lock another thread
		 * holds?).  We cannot restore a thread in the middle of
		 * jemalloc; it finishes and restores itself through the stub.
		 */
		s->abandoned = true;
		if (s->job_stop_seen && ma_process_job_stopped(s->t->pid, s->tid))
			return run_stopped_under_call(s, "had not returned when the --timeout ran out");
		if (cut_ms < timeout_ms)
			return ma_fail(MA_E_TIMEOUT,
				       "the run's --timeout ran out during the call in thread %d; "
				       "the thread was left to finish it and restore itself", s->tid);
		return ma_fail(MA_E_TIMEOUT,
			       "the call in thread %d did not return within %d ms; the thread was "
			       "left to finish it and restore itself",
			       s->tid, timeout_ms);
	}
	if (rc == MA_E_FAULT)
		stops_test_kill_point("fault");
	if (rc && rc != MA_E_FAULT && s->seized && !s->at_marker && !s->skipping_self_deadlock &&
	    !s->abandoned)
		return abandon_call(s, rc);
	if (rc)
		return rc;
	/* Stopped before the marker, a call that signals its end returns through memory. */
	*ret = s->at_call_end || s->restored_itself ? 0 : ma_arch_stub_retval(&r);
	return 0;
}

int ma_session_call_batch(struct ma_session *s, uint64_t table, size_t n, int timeout_ms)
{
	uint64_t args[2] = { table, n }, ret;

	return ma_session_call_timeout(s, s->batch_fn, args, 2, &ret,
				       timeout_ms > 0 ? timeout_ms : s->call_timeout_ms);
}

int ma_session_call(struct ma_session *s, uint64_t fn, const uint64_t *args, int nargs,
		    uint64_t *ret)
{
	return ma_session_call_timeout(s, fn, args, nargs, ret, s->call_timeout_ms);
}

uint64_t ma_session_alloc(struct ma_session *s, size_t n)
{
	uint64_t a = s->data + s->data_used;

	n = (n + 15) & ~(size_t)15;
	if (s->data_used + n > s->data_len)
		return 0;
	s->data_used += n;
	return a;
}

void ma_session_reset(struct ma_session *s)
{
	s->data_used = 0;
}

/* ---- giving the thread back ---- */

/*
 * Stop the running thread again so it can be detached.  Returns the signal
 * of a signal-delivery stop caught on the way (to pass on), or 0.
 */
static int stop_for_detach(struct ma_session *s)
{
	int status;

	struct ma_proc_status st;
	/*
	 * A thread in a ptrace stop already (a request failed right after it
	 * was taken) makes no new one: only a stop still to be collected is
	 * looked for, not waited for (that wait held a thread for 1 s).
	 */
	int wait_ms = ma_proc_read_status(s->t->pid, s->tid, &st) == 0 && st.state == 't' ? 0 : 1000;

	ma_err_clear();
	/* A syscall stop (SIGTRAP | 0x80) is no signal: PTRACE_DETACH refuses it (EIO). */
	if (ma_ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) == 0 &&
	    stops_wait(s->tid, &status, wait_ms) == 0 && stops_is_signal_stop(status))
		return WSTOPSIG(status);
	return 0;
}

/* Is SI one of the placeholder signals we queued with tgkill? */
static bool is_our_copy(const siginfo_t *si)
{
	return si->si_code == SI_TKILL && si->si_pid == getpid();
}

/*
 * Deliver the held signals, oldest first, with their original siginfo.
 * We queue one placeholder (tgkill) per held signal to get the thread into
 * a signal-delivery stop, and at each stop deliver the oldest held signal
 * instead of the one dequeued.  A real signal that was pending meanwhile
 * is newer than everything held: it joins the back of the queue.
 */
static int redeliver_and_detach(struct ma_session *s, bool put_regs)
{
	int next = 0;

	for (int i = 0; i < s->nheld; i++)
		syscall(SYS_tgkill, s->t->pid, s->tid, s->held[i].si_signo);
	if (ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL) != 0)
		return stops_ptrace_errno("PTRACE_CONT", s->tid);
	while (next < s->nheld) {
		siginfo_t si;
		int status, sig;

		if (stops_wait(s->tid, &status, 1000) != 0 || !WIFSTOPPED(status))
			break;
		if ((status >> 16) != 0) {
			ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL);
			continue;
		}
		/*
		 * A signal is delivered now: give the thread its registers as
		 * stopped (syscall number and -ERESTART* or -EINTR intact), so
		 * the kernel decides, by the handler's SA_RESTART, whether the
		 * interrupted syscall restarts or fails with EINTR.
		 */
		if (next == 0 && put_regs)
			ma_arch_set_regs(s->tid, &s->saved.regs);
		memset(&si, 0, sizeof(si));
		ma_ptrace(PTRACE_GETSIGINFO, s->tid, NULL, &si);
		if (!is_our_copy(&si)) {
			int n = s->nheld;

			run_hold_signal(s);
			if (s->nheld == n)
				continue; /* merged or no memory: deliver it as it is */
		}
		ma_ptrace(PTRACE_SETSIGINFO, s->tid, NULL, &s->held[next]);
		sig = s->held[next++].si_signo;
		s->redelivered = next;
		if (next == s->nheld)
			return ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig) == 0
				       ? 0
				       : stops_ptrace_errno("PTRACE_DETACH", s->tid);
		ma_ptrace(PTRACE_CONT, s->tid, NULL, (void *)(long)sig);
	}
	/* The thread did not come back in time: let it go; placeholders stay queued. */
	ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)stop_for_detach(s));
	return 0;
}

/* Put the file's bytes back where the stub was: no thread will run it again. */
static int restore_stub_site(struct ma_session *s)
{
	int rc;

	if (!s->stub_written)
		return 0;
	rc = write_stub_site(s, 0, ma_stubsite_original(s->t, s->site), MA_STUB_REGION);
	if (!rc)
		s->stub_written = false;
	return rc;
}

/*
 * A thread stopped in a syscall that the kernel restarts (-ERESTART*) gets
 * its registers exactly as stopped, and the kernel's own signal path does
 * the restart: we queue an interrupt (which makes the thread pass through
 * get_signal on its way out), let it reach that stop and detach there.  A
 * signal that arrived meanwhile is then handled by the kernel itself,
 * EINTR or restart by the handler's SA_RESTART, as if we had never been
 * there (the interrupt is queued by restore_and_detach).
 */
static int detach_through_signal_path(struct ma_session *s)
{
	int status, sig = 0, rc;

	if ((rc = ma_arch_set_regs(s->tid, &s->saved.regs)))
		return rc;
	restore_stub_site(s);
	if (ma_ptrace(PTRACE_CONT, s->tid, NULL, NULL) != 0)
		return stops_ptrace_errno("PTRACE_CONT", s->tid);
	if (stops_wait(s->tid, &status, 1000) == 0 && WIFSTOPPED(status) && (status >> 16) == 0)
		sig = WSTOPSIG(status); /* a real signal: deliver it as the kernel would */
	if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig) != 0)
		return stops_ptrace_errno("PTRACE_DETACH", s->tid);
	return 0;
}

/*
 * Signals that reached the thread while it was borrowed and wait, blocked
 * by us only: the kernel delivers them once the mask is back (counted as
 * re-delivered; a signal number pending several times counts once).
 */
static void count_deferred_signals(struct ma_session *s)
{
	/* The thread's own queue, peeked over ptrace (reading /proc's status costs ten times more). */
	struct {
		uint64_t off;
		uint32_t flags;
		int32_t nr;
	} args = { 0, 0, 64 };
	siginfo_t q[64];
	uint64_t pending = 0;
	long n;

	if (!s->mask_blocked)
		return;
	n = ma_ptrace(PTRACE_PEEKSIGINFO, s->tid, &args, q);
	for (long i = 0; i < n; i++)
		if (q[i].si_signo >= 1 && q[i].si_signo <= 64)
			pending |= 1ULL << (q[i].si_signo - 1);
	s->redelivered += __builtin_popcountll(pending & ~s->sigmask);
}

/*
 * The mask goes back before the registers leave the stub; in between the
 * registers are the trap's (as on the way in, run_set_regs_blocked), so a
 * memattach that dies there leaves a waiting signal to the kernel's own
 * signal code, acting on the syscall the thread was stopped in, instead
 * of to a handler run in the stub, after which the stub would restart
 * that syscall.
 */
static int unblock_through_trap(struct ma_session *s)
{
	int rc;

	if (s->trap_ok && s->stub_written && (rc = run_set_trap_regs(s)))
		return rc;
	return run_set_sigmask(s, s->sigmask);
}

/*
 * A filter another thread installs with TSYNC during the hold came after
 * this thread's was judged, and may refuse what the give-back makes the
 * thread do: the stub's self-restore (sigaltstack, rt_sigreturn...) or a
 * timed wait's restart_syscall.  Its mode and filter count are read
 * again (one pread); when they moved, the thread goes back through
 * ptrace (stub_can_give_back), and a restart the new filter refuses is
 * issued again as the program made it (keep_restart_allowed's rule).
 * Also read before each syscall memattach or its call makes in the
 * thread (session_run.c), so a filter that arrived refuses none of them.
 * Left: a filter that arrives after this read, and the marker's getpid
 * should the new filter refuse it.  True when they moved.
 */
bool session_judge_filters_again(struct ma_session *s)
{
	long now = session_seccomp_state(s);

	if (now < 0 || s->judged_filters < 0 || now == s->judged_filters)
		return false;
	s->judged_filters = now;
	s->filters_changed = s->filtered = true;
	s->trap_ok = trap_allowed(s); /* unblock_through_trap's registers, should memattach die there */
	if (thread_restart_refused(s, s->tid, &s->saved.regs)) {
		ma_arch_restart_as_issued(&s->saved.regs);
		ma_arch_resume_regs(&s->saved.regs, false, &s->resume);
	}
	return true;
}

/*
 * Is the thread where the stub's restore path begins, and may that path
 * give it back (rt_sigreturn: registers, xstate and mask in one step)?
 * Then letting it go is the whole way out: no trap, no window.  Not for
 * held signals (redelivered by memattach), a restart through
 * restart_syscall (whose block rt_sigreturn would discard), or a stub a
 * seccomp filter keeps from asking which signals wait (the kernel's own
 * signal path must then decide EINTR or restart).  Nor with --strict:
 * the restore path's syscalls (sigaltstack, rt_sigreturn) run after the
 * release, where no check sees a filter the program installs meanwhile
 * (TSYNC) that refuses them.
 */
bool session_stub_may_give_back(struct ma_session *s)
{
	return !s->filters_changed && !s->strict && s->stub_sigreturns && s->stub_asks_signals &&
	       s->stub_written && !s->nheld && s->mask_blocked &&
	       !ma_arch_stub_restore_pops(&s->saved, &s->resume);
}

static bool stub_can_give_back(struct ma_session *s)
{
	struct __ptrace_syscall_info info;
	struct user_regs_struct r;

	if (!session_stub_may_give_back(s) || ma_arch_get_regs(s->tid, &r) != 0) {
		ma_err_clear();
		return false;
	}
	/* At a call's end signal (session_run.c): the rest of the call, then the marker's getpid. */
	if (s->at_call_end)
		return ma_arch_ip(&r) >= s->end_fn.lo && ma_arch_ip(&r) < s->end_fn.hi;
	if (ma_arch_ip(&r) != s->stub + MA_STUB_MARKER_END)
		return false;
	memset(&info, 0, sizeof(info));
	if (ma_ptrace(PTRACE_GET_SYSCALL_INFO, s->tid, (void *)sizeof(info), &info) <= 0)
		return false;
	/* At the marker's getpid (it runs, then the restore path), or after one of our syscalls. */
	return (info.op == PTRACE_SYSCALL_INFO_ENTRY && info.entry.nr == MA_STUB_MARKER_NR) ||
	       info.op == PTRACE_SYSCALL_INFO_EXIT;
}

/*
 * The thread left the stub once /proc shows it blocked with its ip
 * elsewhere (nothing jumps back into the stub), and not in the function
 * whose end signal it was given back at (that one returns into the
 * stub); then its bytes go back.
 * A thread still running after a few ms leaves them to the next run,
 * which finds them by their header as it finds a killed run's.  The
 * thread is not held meanwhile.
 */
static void restore_stub_when_left(struct ma_session *s)
{
	bool left = false;

	for (int tries = 0; tries < 50 && !left; tries++) {
		uint64_t sp, pc;
		enum ma_thread_where w = ma_thread_where(s->t->pid, s->tid, &sp, &pc);

		if (w == MA_WHERE_GONE)
			return; /* gone (or the process exec'd): nothing to put back into */
		left = w != MA_WHERE_RUNNING && (pc < s->stub || pc >= s->stub + MA_STUB_REGION) &&
		       /* given back at a call's end: still to return into the stub from there */
		       !(s->end_fn.hi && pc >= s->end_fn.lo && pc < s->end_fn.hi);
		if (!left)
			usleep(200);
	}
	if (left && restore_stub_site(s))
		ma_err_clear();
}

/*
 * Give the thread back: xstate, mask, registers, slack bytes, held
 * signals.  The xstate goes first, while the registers are the stub's;
 * the mask while the registers are the trap's (unblock_through_trap);
 * then the thread's own registers.  A syscall that our
 * stop made fail with EINTR is issued again, unless a signal now waits
 * for the thread: then the EINTR is that signal's due.
 */
static int restore_and_detach(struct ma_session *s)
{
	const struct user_regs_struct *regs = &s->resume;
	bool through_signal_path;
	int rc = 0;

	struct user_regs_struct r;

	count_deferred_signals(s);
	session_judge_filters_again(s);
	if (stub_can_give_back(s)) {
		if (!s->at_call_end)
			s->end_fn = (struct ma_range){ 0, 0 }; /* (restore_stub_when_left) */
		s->at_marker = s->at_call_end = false;
		/* (At a call's end, its signal dropped: it was ours.) */
		if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, NULL) != 0)
			return stops_ptrace_errno("PTRACE_DETACH", s->tid);
		s->seized = s->mask_blocked = false;
		s->gave_back_by_stub = true;
		return 0;
	}
	if ((rc = run_leave_call_end(s)))
		return rc;
	/* At the marker's entry: let its getpid run rather than skip it (nr -1 meets seccomp). */
	if (s->at_marker && (rc = run_until(s, GOAL_SYSCALL_EXIT, s->call_timeout_ms, &r)))
		return rc;
	s->at_marker = false;
	/*
	 * What can go first goes first, while the registers are still the
	 * stub's and the signals blocked (the stub's restore path would put
	 * the xstate back too): only one request then separates the mask
	 * from the thread's own registers, the window in which a memattach
	 * killed leaves a signal's handler the trap's context.
	 */
	if ((rc = ma_arch_set_xstate(s->tid, &s->saved)))
		return rc; /* MA_E_EXITED for a thread gone (an exec): the caller tells that apart */
	through_signal_path = !s->nheld && ma_arch_in_restartable_syscall(&s->saved.regs);
	/*
	 * The interrupt is queued before the registers are set: should
	 * memattach die after it, the pending wake-up still sends the thread
	 * through the kernel's restart code.
	 */
	if (through_signal_path && ma_ptrace(PTRACE_INTERRUPT, s->tid, NULL, NULL) != 0)
		return stops_ptrace_errno("PTRACE_INTERRUPT", s->tid);
	if (s->mask_blocked && (rc = unblock_through_trap(s)))
		return rc;
	s->mask_blocked = false;
	if (through_signal_path) {
		rc = detach_through_signal_path(s);
	} else {
		if (ma_arch_interrupted_eintr(&s->saved.regs) &&
		    thread_signal_pending(s->t->pid, s->tid, s->sigmask))
			regs = &s->saved.regs;
		rc = ma_arch_set_regs(s->tid, regs);
		restore_stub_site(s);
		if (s->nheld)
			redeliver_and_detach(s, true);
		else if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, NULL) != 0 && !rc)
			rc = stops_ptrace_errno("PTRACE_DETACH", s->tid);
	}
	s->seized = false;
	return rc;
}

/*
 * Let an abandoned thread finish its call; the stub restores it (and its
 * mask).  Its mask goes back now so its signals are not held up meanwhile.
 */
static void let_go_abandoned(struct ma_session *s)
{
	int sig = stop_for_detach(s);

	if (s->mask_blocked)
		run_set_sigmask(s, s->sigmask);
	ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)sig);
	for (int i = 0; i < s->nheld; i++)
		syscall(SYS_tgkill, s->t->pid, s->tid, s->held[i].si_signo);
	s->seized = false;
}

/*
 * The thread went back through the stub's own restore path (its call's
 * end signal was lost: session_run.c): registers and mask are its own
 * again, and it runs its own code.  Only the signals memattach held
 * meanwhile go back to it, with their siginfo; then it is let go, and
 * the stub's bytes go back (it has left them).
 */
static int give_back_restored(struct ma_session *s)
{
	int rc = 0;

	if (s->nheld && s->restored_sig)
		run_hold_signal(s); /* after the others, which came first */
	if (s->nheld)
		rc = redeliver_and_detach(s, false);
	else if (ma_ptrace(PTRACE_DETACH, s->tid, NULL, (void *)(long)s->restored_sig) != 0)
		rc = stops_ptrace_errno("PTRACE_DETACH", s->tid); /* (its signal, siginfo intact) */
	s->seized = s->mask_blocked = false;
	s->end_fn = (struct ma_range){ 0, 0 };
	s->gave_back_by_stub = true; /* (restore_stub_when_left) */
	return rc;
}

int ma_session_close(struct ma_session *s)
{
	int rc = 0, rc2;

	if (s->seized && !s->abandoned && s->stub_written && !s->restored_itself) {
		for (int i = 1; i >= 0; i--)
			if ((rc2 = unmap_recorded(s, i)) && !rc)
				rc = rc2;
		s->mapped = s->own[0].len != 0;
	}
	if (s->seized && s->restored_itself) {
		rc2 = give_back_restored(s); /* its mappings, if any, stay for the next run */
		rc = rc ? rc : rc2;
	} else if (s->seized && s->abandoned) {
		let_go_abandoned(s); /* the stub and mappings stay: the thread still uses them */
	} else if (s->seized && s->changed) {
		rc2 = restore_and_detach(s);
		rc = rc ? rc : rc2;
	} else if (s->seized) {
		restore_stub_site(s);
		thread_release_untouched(s, 0);
	}
	if (s->t_stop_ns)
		session_count_hold(s);
	s->t_stop_ns = 0;
	ma_hold_priority_drop(); /* the hold is over */
	if (s->gave_back_by_stub)
		restore_stub_when_left(s); /* after the hold */
	close_fd(&s->status_fd);
	close_fd(&s->mem_fd);
	ma_arch_state_free(&s->saved);
	free(s->held);
	s->held = NULL;
	stops_end_turn(&s->lock);
	return rc;
}
