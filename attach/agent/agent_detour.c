/*
 * agent_detour.c - writes (and takes back) frag's inline detours inside
 * the target, while its threads run.
 *
 * Each patch replaces ONE instruction, at P, with a 5-byte `jmp rel32`
 * (attach/arch_x86_64_detour.c plans it so): no thread can be inside the
 * bytes changed, only at P.  What remains is that a thread fetching P
 * while it changes must see whole instructions, old or new.  The steps,
 * as a JIT patches live code:
 *   1. P's first two bytes become `jmp .` (EB FE), in one atomic store
 *      (they lie in one aligned 16-byte block): a thread arriving at P
 *      now waits there;
 *   2. the other three bytes are written: no thread executes them (only
 *      through P, which now loops);
 *   3. the first two bytes become the new instruction's, atomically.
 * After each step every thread of the process runs a core-serializing
 * instruction (membarrier SYNC_CORE), so none keeps decoding old bytes.
 * The writing thread blocks every signal meanwhile: a handler of its own
 * that allocated would reach P and wait on itself.  fork() waits for the
 * steps of a patch point to end (a lock its prepare handler takes): a
 * child copied between two steps would have no writer, and its first
 * call there would wait forever.  The page is made writable only for the
 * steps (read-execute again after).
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

static bool cas16(uint64_t *block, uint64_t olo, uint64_t ohi, uint64_t nlo, uint64_t nhi)
{
	bool ok;

	__asm__ __volatile__("lock cmpxchg16b %1"
			     : "=@ccz"(ok), "+m"(*(volatile unsigned __int128 *)block), "+a"(olo), "+d"(ohi)
			     : "b"(nlo), "c"(nhi)
			     : "memory");
	return ok;
}

/*
 * The two bytes at AT go from WAS to NOW in one atomic store (a
 * compare-and-swap of the aligned 8- or 16-byte word holding them); false
 * if they were not WAS.
 */
static bool store2(uint8_t *at, const uint8_t was[2], const uint8_t now[2])
{
	uintptr_t a = (uintptr_t)at;

	if ((a & 7) != 7) {
		uint64_t *w = (uint64_t *)(a & ~(uintptr_t)7);
		unsigned sh = (unsigned)(a & 7) * 8;
		uint64_t cur = __atomic_load_n(w, __ATOMIC_SEQ_CST), mask = 0xffffULL << sh;
		uint64_t want = (cur & ~mask) | ((uint64_t)(was[0] | was[1] << 8) << sh);
		uint64_t put = (cur & ~mask) | ((uint64_t)(now[0] | now[1] << 8) << sh);

		return __atomic_compare_exchange_n(w, &want, put, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
	if ((a & 15) == 15)
		return false; /* two blocks: the planner never chooses such a P */
	uint64_t *b = (uint64_t *)(a & ~(uintptr_t)15);
	uint64_t lo = __atomic_load_n(&b[0], __ATOMIC_SEQ_CST), hi = __atomic_load_n(&b[1], __ATOMIC_SEQ_CST);
	/* offset 7: byte 7 of the low word, byte 0 of the high word */
	uint64_t wlo = (lo & ~(0xffULL << 56)) | (uint64_t)was[0] << 56, whi = (hi & ~0xffULL) | was[1];
	uint64_t nlo = (lo & ~(0xffULL << 56)) | (uint64_t)now[0] << 56, nhi = (hi & ~0xffULL) | now[1];

	return cas16(b, wlo, whi, nlo, nhi);
}

static int protect(uint8_t *at, int prot)
{
	uintptr_t lo = (uintptr_t)at & ~(uintptr_t)(PAGE - 1);
	uintptr_t hi = ((uintptr_t)at + MA_AGENT_PATCH_LEN + PAGE - 1) & ~(uintptr_t)(PAGE - 1);

	return mprotect((void *)lo, hi - lo, prot);
}

/* One patch point from FROM to TO (MA_AGENT_PATCH_LEN bytes each): 0 or -MA_AGENT_*. */
static int rewrite(uint8_t *at, const uint8_t *from, const uint8_t *to)
{
	static const uint8_t spin[2] = { 0xeb, 0xfe }; /* jmp . */
	int rc = MA_AGENT_OK;

	if (memcmp(at, to, MA_AGENT_PATCH_LEN) == 0)
		return MA_AGENT_OK; /* already (a killed memattach's call got that far) */
	if (memcmp(at, from, MA_AGENT_PATCH_LEN) != 0)
		return -MA_AGENT_EPATCH;
	if (protect(at, PROT_READ | PROT_WRITE | PROT_EXEC))
		return -MA_AGENT_EPROT;
	detour_fork_prepare();
	if (!store2(at, from, spin)) {
		rc = -MA_AGENT_EPATCH;
	} else {
		sync_cores();
		memcpy(at + 2, to + 2, MA_AGENT_PATCH_LEN - 2);
		sync_cores();
		store2(at, spin, to); /* only this thread writes here now: it holds */
		sync_cores();
	}
	detour_fork_release();
	protect(at, PROT_READ | PROT_EXEC);
	return rc;
}

int detour_rewrite(const struct ma_agent_patch *list, uint64_t n, bool undo)
{
	sigset_t all, old;
	int64_t done = 0;
	int rc = MA_AGENT_OK;

	if (!sync_cores())
		return -MA_AGENT_ESYNC;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (uint64_t i = 0; i < n && rc == MA_AGENT_OK; i++) {
		const struct ma_agent_patch *p = &list[i];

		rc = rewrite((uint8_t *)(uintptr_t)p->at, undo ? p->after : p->before,
			     undo ? p->before : p->after);
		done += rc == MA_AGENT_OK;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc == MA_AGENT_OK ? (int)done : rc;
}
