/*
 * agent_int.h - what the agent's files share: the entry points it wraps,
 * the originals their slots held, the link-map pass (agent_got.c) that
 * rewrites and restores those slots, the detour writer (agent_detour.c),
 * and the sample tables that agent.c records in and agent_ctl.c lays out
 * and reads.  Inside the agent only; agent_abi.h is what memattach sees.
 */
#ifndef MA_AGENT_INT_H
#define MA_AGENT_INT_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "agent_abi.h"
#include MA_ARCH_HEADER /* MA_ARCH_CPU_RELAX */

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

/* ---- the sample tables (agent.c records, agent_ctl.c lays out, queries, frees) ---- */

extern struct ma_agent_ctl ma_agent_ctl;

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef int (*nametomib_fn)(const char *, size_t *, size_t *);
typedef int (*bymib_fn)(const size_t *, size_t, void *, size_t *, void *, size_t);
typedef size_t (*usable_fn)(const void *);

struct sample {
	uint64_t ptr; /* 0: empty slot */
	uint32_t stack;
	/* usable size (focus and profile modes); SIZE_HUGE: 4 GiB or more, asked again of jemalloc */
	uint32_t size;
};
#define SIZE_HUGE UINT32_MAX

/*
 * One stripe: its lock, counters and slot array, alone on a cache line.
 * The array starts small and doubles (a new mapping, rehashed under the
 * lock) up to the bound; beyond it samples are dropped and counted.
 */
struct stripe {
	uint32_t lock;
	uint32_t own; /* slots is a mapping of its own (grown), else inside the tables */
	uint64_t inflight;
	uint64_t count; /* samples held */
	uint64_t recorded, removed, dropped;
	uint64_t slots, cap; /* struct sample[cap], cap a power of two */
};

#define STRIPE_INITIAL_SLOTS 1024

static inline void spin_lock(uint32_t *l)
{
	unsigned spins = 0;

	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
		while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
			if (++spins > 64)
				sched_yield();
			else
				MA_ARCH_CPU_RELAX();
		}
	}
}

static inline void spin_unlock(uint32_t *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

static inline struct stripe *stripes(const struct ma_agent_ctl *c)
{
	return (struct stripe *)(uintptr_t)(c->tables + c->locks_off);
}

static inline struct sample *slots_of(const struct stripe *s)
{
	return (struct sample *)(uintptr_t)s->slots;
}

static inline uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* agent.c, for agent_ctl.c: jemalloc's hooks (the hooks mechanism), and a new run's resets. */
int agent_install_hooks(struct ma_agent_ctl *c);
/* Learn the unwinder's code range and clear the free filter (nothing records meanwhile). */
void agent_prepare_run(void);
/* A new run begins: a resize that read the old run's samples does not record in it. */
void agent_new_run(void);

#endif
