/*
 * agent_detour.c - writes (and takes back) frag's inline detours inside
 * the target, while its threads run.
 *
 * Each patch replaces ONE instruction, at P, with a 5-byte `jmp rel32`
 * (attach/arch_x86_64_detour.c plans it so): no thread can be inside the
 * bytes changed, only at P.  What remains is that a thread fetching P
 * while it changes must see whole instructions, old or new.
 *
 * When the five bytes lie in one aligned 16-byte block (most entry points:
 * functions start 16-aligned and P is a few bytes in), one atomic
 * compare-and-swap of the block changes them all: a thread, or a child
 * forked at that instant by any means, sees the old instruction or the new.
 * Otherwise, as a JIT patches live code:
 *   1. P's first two bytes become `jmp .` (EB FE), in one atomic store
 *      (they lie in one block): a thread arriving at P now waits there;
 *   2. the other three bytes are written: no thread executes them (only
 *      through P, which now loops);
 *   3. the first two bytes become the new instruction's, atomically.
 * fork() waits for these steps to end (a lock its prepare handler takes):
 * a child copied between two steps would have no writer, and its first
 * call there would wait forever.  A child of a raw fork syscall (or
 * _Fork) is not held off; POSIX lets such a child of a threaded process
 * call no allocator anyway.
 *
 * After each store every thread of the process runs a core-serializing
 * instruction (membarrier SYNC_CORE), so none keeps decoding old bytes.
 * The writing thread blocks every signal meanwhile: a handler of its own
 * that allocated would reach P and wait on itself.  A page is made
 * writable only for its patch points and gets back the protection
 * /proc/self/maps gave it (a page the target keeps writable is left so).
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent_abi.h"
#include MA_ARCH_HEADER
#include "agent_int.h"

enum { PAGE = 4096 };

/* Held through the steps of one patch point, and by fork() from its prepare handler to its end. */
static uint32_t steps_lock;

void detour_fork_prepare(void)
{
	uint32_t free_ = 0;

	while (!__atomic_compare_exchange_n(&steps_lock, &free_, 1, false, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED)) {
		free_ = 0;
		sched_yield();
	}
}

void detour_fork_release(void)
{
	__atomic_store_n(&steps_lock, 0, __ATOMIC_RELEASE);
}

static bool sync_registered;

/* Every thread of the process serializes its instruction stream. */
static bool sync_cores(void)
{
	if (!sync_registered) {
		if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0))
			return false;
		sync_registered = true;
	}
	return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) == 0;
}

/* N bytes at AT lie in one aligned 16-byte block: one atomic store can change them. */
static bool in_one_block(const uint8_t *at, unsigned n)
{
	return ((uintptr_t)at & 15) + n <= 16;
}

/*
 * The N bytes at AT go from WAS to NOW in one atomic store (a
 * compare-and-swap of the aligned 16-byte block holding them, which
 * in_one_block checked); false if they were not WAS.
 */
static bool store_in_block(uint8_t *at, unsigned n, const uint8_t *was, const uint8_t *now)
{
	uint64_t *b = (uint64_t *)((uintptr_t)at & ~(uintptr_t)15);
	unsigned off = (unsigned)((uintptr_t)at & 15);
	uint8_t want[16], put[16];
	uint64_t w[2], p[2];

	memcpy(want, (const void *)b, 16); /* the bytes around stay what they are */
	memcpy(put, want, 16);
	memcpy(want + off, was, n);
	memcpy(put + off, now, n);
	memcpy(w, want, 16);
	memcpy(p, put, 16);
	return MA_ARCH_CAS16(b, w[0], w[1], p[0], p[1]);
}

/*
 * The pages holding [AT, AT + MA_AGENT_PATCH_LEN) made writable (those
 * not already), their protections before kept in WAS[2] (0: left as
 * they were): 0, or -1 (and nothing changed) if one cannot be.
 */
static int unprotect(const struct maps *m, const uint8_t *at, int was[2])
{
	uintptr_t first = (uintptr_t)at & ~(uintptr_t)(PAGE - 1);
	uintptr_t last = ((uintptr_t)at + MA_AGENT_PATCH_LEN - 1) & ~(uintptr_t)(PAGE - 1);

	was[0] = was[1] = 0;
	for (unsigned i = 0; i < 2 && first + i * PAGE <= last; i++) {
		uintptr_t page = first + i * PAGE;
		const struct region *r = maps_find(m, page);

		if (!r || !(r->prot & PROT_EXEC))
			goto undo;
		if (r->prot & PROT_WRITE)
			continue; /* the target keeps it writable: nothing to change, nothing to restore */
		if (mprotect((void *)page, PAGE, r->prot | PROT_READ | PROT_WRITE))
			goto undo;
		was[i] = r->prot;
	}
	return 0;
undo:
	for (unsigned i = 0; i < 2; i++)
		if (was[i])
			mprotect((void *)(first + i * PAGE), PAGE, was[i]);
	return -1;
}

/* Put back the protections unprotect() changed. */
static void reprotect(const uint8_t *at, const int was[2])
{
	uintptr_t first = (uintptr_t)at & ~(uintptr_t)(PAGE - 1);

	for (unsigned i = 0; i < 2; i++)
		if (was[i])
			mprotect((void *)(first + i * PAGE), PAGE, was[i]);
}

/*
 * The jump fits in one aligned 16-byte block: all five bytes change in
 * one atomic store, so a thread sees the old instruction or the new one
 * and a child forked at any instant copies one of them.
 */
static int rewrite_at_once(uint8_t *at, const uint8_t *from, const uint8_t *to)
{
	if (!store_in_block(at, MA_AGENT_PATCH_LEN, from, to))
		return -MA_AGENT_EPATCH;
	sync_cores();
	return MA_AGENT_OK;
}

/* The jump spans two blocks: the three steps (top of file), fork held off meanwhile. */
static int rewrite_in_steps(uint8_t *at, const uint8_t *from, const uint8_t *to)
{
	static const uint8_t spin[2] = { 0xeb, 0xfe }; /* jmp . */
	int rc = MA_AGENT_OK;

	if (!in_one_block(at, 2))
		return -MA_AGENT_EPATCH; /* the planner never chooses such a P */
	detour_fork_prepare();
	if (!store_in_block(at, 2, from, spin)) {
		rc = -MA_AGENT_EPATCH;
	} else {
		sync_cores();
		memcpy(at + 2, to + 2, MA_AGENT_PATCH_LEN - 2);
		sync_cores();
		store_in_block(at, 2, spin, to); /* only this thread writes here now: it holds */
		sync_cores();
	}
	detour_fork_release();
	return rc;
}

/* One patch point from FROM to TO (MA_AGENT_PATCH_LEN bytes each): 0 or -MA_AGENT_*. */
static int rewrite(const struct maps *m, uint8_t *at, const uint8_t *from, const uint8_t *to)
{
	int was[2], rc;

	if (memcmp(at, to, MA_AGENT_PATCH_LEN) == 0)
		return MA_AGENT_OK; /* already (a killed memattach's call got that far) */
	if (memcmp(at, from, MA_AGENT_PATCH_LEN) != 0)
		return -MA_AGENT_EPATCH;
	if (unprotect(m, at, was))
		return -MA_AGENT_EPROT;
	rc = in_one_block(at, MA_AGENT_PATCH_LEN) ? rewrite_at_once(at, from, to)
						   : rewrite_in_steps(at, from, to);
	reprotect(at, was);
	return rc;
}

int detour_rewrite(const struct ma_agent_patch *list, uint64_t n, bool undo)
{
	sigset_t all, old;
	int64_t done = 0;
	int rc = MA_AGENT_OK;
	struct maps m;

	if (!sync_cores())
		return -MA_AGENT_ESYNC;
	if (!maps_snapshot(&m))
		return -MA_AGENT_EMAPS;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (uint64_t i = 0; i < n && rc == MA_AGENT_OK; i++) {
		const struct ma_agent_patch *p = &list[i];

		rc = rewrite(&m, (uint8_t *)(uintptr_t)p->at, undo ? p->after : p->before,
			     undo ? p->before : p->after);
		done += rc == MA_AGENT_OK;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	maps_release(&m);
	return rc == MA_AGENT_OK ? (int)done : rc;
}
