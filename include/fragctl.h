/*
 * fragctl.h - the frag agent inside a live target: find it, load it, start,
 * query and stop it (attach/fragctl.c).  The agent itself is
 * attach/agent/agent.c; what both sides share is agent_abi.h.
 *
 * Loading: the agent library (embedded in memattach) is written into a
 * memfd created in the target and dlopen'ed there as /proc/thread-self/fd/N by a
 * borrowed thread that has no frame in the dynamic loader or in a libc
 * function holding the loader's locks (target.h: for_dlopen).  Nothing is
 * left in the target's file system; it works across mount namespaces.  The
 * library stays loaded for the life of the process (unloading code a hook
 * may be about to run is not provably safe); stop releases its memory.
 */
#ifndef MA_FRAGCTL_H
#define MA_FRAGCTL_H

#include <stdbool.h>
#include <stdint.h>

#include "agent_abi.h"
#include "frag.h"
#include "heapprof.h"
#include "remote.h"
#include "target.h"

/* The agent as seen from outside, without stopping anything. */
struct ma_agent_view {
	bool loaded; /* the agent library is mapped in the target */
	uint64_t base; /* its load address */
	uint64_t lo, hi; /* its code */
	bool foreign; /* loaded, but its control block is not this version's */
	struct ma_agent_ctl ctl;
	/* summed over the stripes */
	uint64_t live, recorded, removed, dropped_full, inflight;
	uint64_t table_bytes; /* mapped for its tables (stack tables are touched as they fill) */
	uint64_t table_resident; /* ... of which in RAM (or swap) */
	unsigned nmaps; /* mappings of the agent's library */
	uint64_t mapped; /* their bytes */
};

/* Read the agent's state from T's maps and memory; 0 (loaded or not) or MA_E_*. */
int ma_agent_find(const struct ma_target *t, struct ma_agent_view *v);

/*
 * Before the first load: look at every thread of T (each stopped only to
 * unwind it, as a run with --strict if STRICT would stop it) for one
 * inside the dynamic loader or in a libc function that holds its locks
 * (dlopen, dlclose, dl_iterate_phdr...).  Our dlopen would wait for that
 * thread's lock, perhaps for ever (a library constructor that blocks), so
 * the load is refused: 1 with WHY set, 0 if none, or MA_E_*.  A thread
 * the rules do not let it stop is judged by where it blocks.  Call
 * without a session open (each look takes the run lock).
 */
int ma_agent_loader_busy(struct ma_target *t, bool strict, char *why, size_t whylen);

/*
 * Wait (reading its control block, stopping nothing) until no call of an
 * earlier, killed memattach still runs in T's agent.  0, or MA_E_TIMEOUT.
 */
int ma_agent_wait_idle(const struct ma_target *t, int timeout_ms);

/* "frag's shift mode", "a heap profile"...: what an agent in MODE does, for messages. */
const char *ma_agent_mode_name(uint32_t mode);

/* Options of `frag start` and `profile start`. */
struct ma_agent_start_opts {
	uint32_t mode; /* enum ma_agent_mode */
	uint32_t shift;
	uint64_t focus_size;
	uint64_t rate; /* profile mode: mean bytes between samples (1: all) */
	uint64_t capacity; /* bound of sample slots, a power of two (the table grows to it) */
	uint64_t max_samples; /* samples held at most (--max-samples) */
	uint64_t stack_cap, frame_cap;
	bool allow_hooks; /* --hooks: jemalloc linked statically may be sampled through its hooks */
	bool no_code_writes; /* --strict: refuse rather than write inline detours */
};

/*
 * How the agent will see allocations in T (agent_abi.h): the GOT slots
 * where jemalloc is a shared object its callers bind to, else (jemalloc
 * linked into the executable or a library, where callers call it
 * directly) jemalloc's hooks.
 */
uint32_t ma_agent_mechanism_for(const struct ma_target *t);

/*
 * Load the agent if it is not loaded (through S, whose target must have
 * been opened with for_dlopen set), then start it.  MA_E_JEMALLOC with a
 * message if it is already running.
 */
int ma_agent_start_in(struct ma_session *s, const struct ma_agent_start_opts *o);
/*
 * Restore the slots (or remove the hooks) and release the agent's memory.
 * *INFLIGHT set (and 0 returned): nothing records any more, but a wrapper
 * was still running after a few milliseconds; call again in a later run.
 */
int ma_agent_stop_in(struct ma_session *s, bool *inflight);
/*
 * Query every live sample's slab (GOT: the slots of objects loaded since
 * the last pass are rewritten first) (experimental.utilization.batch_query,
 * run by the agent), read samples and stacks back, release the agent's
 * output.  D's samples, stacks and frames are filled (names are not).
 */
int ma_agent_query_in(struct ma_session *s, struct ma_frag_data *d);

/*
 * Inline detours (jemalloc linked statically or under a prefix): plan each
 * of T's jemalloc entry points into the agent's trampoline area (C's
 * tramp_area, wrappers C->wrapper), write the trampolines, and give the
 * patch points the agent is to write (LIST, *N of them) and each entry's
 * ORIGINAL (0: T has no such function).  0 or MA_E_* naming the entry
 * point that cannot be detoured and why.
 */
int ma_detour_prepare(const struct ma_target *t, const struct ma_agent_ctl *c, uint64_t *original,
		      struct ma_agent_patch *list, uint64_t *n);

/* What a profile read says beside its stacks. */
struct ma_agent_profile {
	uint64_t rate; /* the sampling rate in bytes (the dump's period) */
	uint32_t mechanism; /* enum ma_agent_mechanism */
	uint64_t started_unix_ns, captured_unix_ns;
	uint64_t live_samples;
	uint64_t dropped_full; /* samples the table had no room for */
	uint64_t dropped_stacks; /* samples whose stack the stack table had no room for... */
	uint64_t unrecorded_objs, unrecorded_bytes; /* ...of which live now (not in the profile) */
	uint64_t truncated_stacks;
};

/*
 * The heap profile T's agent keeps in profile mode, read from its memory
 * (nothing is stopped or called): HP gets the rate as its period and one
 * stack per site with its live and cumulative counts as sampled (no
 * mappings).  MA_E_JEMALLOC if no agent profiles T.
 */
int ma_agent_profile_read(const struct ma_target *t, struct ma_heapprof *hp,
			  struct ma_agent_profile *info);
/* Does an agent keep a heap profile of T now (profile start)? */
bool ma_agent_profiling(const struct ma_target *t);

#endif
