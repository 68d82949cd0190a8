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

enum entry_id {
#define ENTRY_ID(id, sym, pre, kind, nargs) E_##id,
	ENTRY_POINTS(ENTRY_ID)
#undef ENTRY_ID
	E_COUNT
};
_Static_assert(E_COUNT == MA_AGENT_NENTRIES, "agent_abi.h counts the entry points");

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

/* /proc/self/maps as regions in address order, in a mapping of their own. */
struct maps {
	struct region *reg;
	uint64_t n, len;
};

/* Read /proc/self/maps into M: false if it cannot be read (M stays empty). */
bool maps_snapshot(struct maps *m);
void maps_release(struct maps *m);
/* The region holding address A, or NULL. */
const struct region *maps_find(const struct maps *m, uint64_t a);

enum pass_kind { PASS_LEARN, PASS_PATCH, PASS_RESTORE };

struct pass {
	struct ma_agent_ctl *c;
	enum pass_kind kind;
	const char *prefix;
	struct maps maps; /* read under the loader's list lock */
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
/* fork()'s handlers: wait for a patch point's steps to end, and let the writer go on. */
void detour_fork_prepare(void);
void detour_fork_release(void);

#endif
