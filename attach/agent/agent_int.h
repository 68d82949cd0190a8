/*
 * agent_int.h - what the agent's two files share: the entry points it
 * wraps, the originals their slots held, and the link-map pass
 * (agent_got.c) that rewrites and restores those slots.  Inside the
 * agent only; agent_abi.h is what memattach sees.
 */
#ifndef MA_AGENT_INT_H
#define MA_AGENT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "agent_abi.h"

/*
 * The entry points: X(id, symbol, prefixed, kind).  Calling an original
 * with more integer arguments than it takes is harmless on x86-64.
 */
#define ENTRY_POINTS(X)                                                   \
	X(malloc, "malloc", 1, ALLOC)                                     \
	X(calloc, "calloc", 1, ALLOC)                                     \
	X(aligned_alloc, "aligned_alloc", 1, ALLOC)                       \
	X(memalign, "memalign", 1, ALLOC)                                 \
	X(valloc, "valloc", 1, ALLOC)                                     \
	X(mallocx, "mallocx", 1, ALLOC)                                   \
	X(posix_memalign, "posix_memalign", 1, PMEMALIGN)                 \
	X(realloc, "realloc", 1, REALLOC)                                 \
	X(rallocx, "rallocx", 1, REALLOC)                                 \
	X(xallocx, "xallocx", 1, XALLOC)                                  \
	X(free, "free", 1, FREE)                                          \
	X(dallocx, "dallocx", 1, FREE)                                    \
	X(sdallocx, "sdallocx", 1, FREE)                                  \
	X(nw, "_Znwm", 0, ALLOC)                                          \
	X(na, "_Znam", 0, ALLOC)                                          \
	X(nw_nt, "_ZnwmRKSt9nothrow_t", 0, ALLOC)                         \
	X(na_nt, "_ZnamRKSt9nothrow_t", 0, ALLOC)                         \
	X(nw_al, "_ZnwmSt11align_val_t", 0, ALLOC)                        \
	X(na_al, "_ZnamSt11align_val_t", 0, ALLOC)                        \
	X(nw_al_nt, "_ZnwmSt11align_val_tRKSt9nothrow_t", 0, ALLOC)       \
	X(na_al_nt, "_ZnamSt11align_val_tRKSt9nothrow_t", 0, ALLOC)       \
	X(dl, "_ZdlPv", 0, FREE)                                          \
	X(da, "_ZdaPv", 0, FREE)                                          \
	X(dl_sz, "_ZdlPvm", 0, FREE)                                      \
	X(da_sz, "_ZdaPvm", 0, FREE)                                      \
	X(dl_al, "_ZdlPvSt11align_val_t", 0, FREE)                        \
	X(da_al, "_ZdaPvSt11align_val_t", 0, FREE)                        \
	X(dl_sz_al, "_ZdlPvmSt11align_val_t", 0, FREE)                    \
	X(da_sz_al, "_ZdaPvmSt11align_val_t", 0, FREE)                    \
	X(dl_nt, "_ZdlPvRKSt9nothrow_t", 0, FREE)                         \
	X(da_nt, "_ZdaPvRKSt9nothrow_t", 0, FREE)                         \
	X(dl_al_nt, "_ZdlPvSt11align_val_tRKSt9nothrow_t", 0, FREE)       \
	X(da_al_nt, "_ZdaPvSt11align_val_tRKSt9nothrow_t", 0, FREE)

enum entry_id {
#define ENTRY_ID(id, sym, pre, kind) E_##id,
	ENTRY_POINTS(ENTRY_ID)
#undef ENTRY_ID
	E_COUNT
};

/* The function each slot held before it was rewritten: set once, never cleared. */
extern uint64_t agent_original[E_COUNT];
static inline uint64_t orig(enum entry_id id)
{
	return __atomic_load_n(&agent_original[id], __ATOMIC_RELAXED);
}

/* jemalloc's symbol prefix ("", "je_", "_rjem_"). */
extern char agent_prefix[8];
static inline uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* The wrapper a slot of entry point ID is rewritten to. */
uint64_t agent_wrapper_of(enum entry_id id);

/* ---- the link-map pass: rewrite (or restore) the slots ---- */

struct region {
	uint64_t lo, hi;
	int prot;
};

enum pass_kind { PASS_LEARN, PASS_PATCH, PASS_RESTORE };

struct pass {
	struct ma_agent_ctl *c;
	enum pass_kind kind;
	const char *prefix;
	struct region *reg; /* /proc/self/maps under the loader's list lock, in address order */
	uint64_t nreg, reg_len;
	bool maps_failed;
	uint64_t patched, failed, foreign;
	bool malloc_seen, free_seen;
};

/* One pass of KIND over every loaded object; PS gets its tallies. */
int got_run_pass(struct ma_agent_ctl *c, enum pass_kind kind, struct pass *ps);
/* Learn the originals, then rewrite every slot: MA_AGENT_OK or -MA_AGENT_ENOSLOT. */
int got_patch_all(struct ma_agent_ctl *c);
/* Put every rewritten slot back. */
int got_restore_all(struct ma_agent_ctl *c);

/*
 * Rewrite each patch point of LIST[0..N) from its BEFORE to its AFTER bytes
 * (back, if UNDO) while the threads run: the count done, or -MA_AGENT_*
 * at the first that failed (those before it stay done).
 */
int detour_rewrite(const struct ma_agent_patch *list, uint64_t n, bool undo);

#endif
