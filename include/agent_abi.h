/*
 * agent_abi.h - what memattach and its in-target agent (attach/agent/)
 * share: the agent's control block, its start parameters and the layout
 * of the query output.  Plain fixed-width fields only: memattach reads and
 * writes these structures in the target's memory.
 *
 * Lifetime: the agent library is dlopen'ed once per process and never
 * unloaded (a thread may still be between jemalloc's load of the hook
 * pointer and the hook's first instruction); the control block lives in
 * its .bss.  Everything large (the sample table, stacks, query output) is
 * in mappings the agent makes with mmap and unmaps on stop.
 */
#ifndef MA_AGENT_ABI_H
#define MA_AGENT_ABI_H

#include <stdint.h>

#define MA_AGENT_MAGIC 0x31544e4741414d4dULL /* "MMAAGNT1" */
#define MA_AGENT_VERSION 7
#define MA_AGENT_MEMFD_NAME "memattach-agent"

/* Frames kept per stack (innermost first, after the agent's own frames). */
/*
 * The allocator entry points the agent wraps: X(id, symbol, prefixed,
 * kind, integer arguments).  Calling an original with more integer
 * arguments than it takes is harmless on x86-64.  memattach plans the
 * inline detours from this list too.
 */
#define ENTRY_POINTS(X)                                                   \
	X(malloc, "malloc", 1, ALLOC, 1)                                     \
	X(calloc, "calloc", 1, ALLOC, 2)                                     \
	X(aligned_alloc, "aligned_alloc", 1, ALLOC, 2)                       \
	X(memalign, "memalign", 1, ALLOC, 2)                                 \
	X(valloc, "valloc", 1, ALLOC, 1)                                     \
	X(mallocx, "mallocx", 1, ALLOC, 2)                                   \
	X(posix_memalign, "posix_memalign", 1, PMEMALIGN, 3)                 \
	X(realloc, "realloc", 1, REALLOC, 2)                                 \
	X(rallocx, "rallocx", 1, REALLOC, 3)                                 \
	X(xallocx, "xallocx", 1, XALLOC, 4)                                  \
	X(free, "free", 1, FREE, 1)                                          \
	X(dallocx, "dallocx", 1, FREE, 2)                                    \
	X(sdallocx, "sdallocx", 1, FREE, 3)                                  \
	X(nw, "_Znwm", 0, ALLOC, 1)                                          \
	X(na, "_Znam", 0, ALLOC, 1)                                          \
	X(nw_nt, "_ZnwmRKSt9nothrow_t", 0, ALLOC, 2)                         \
	X(na_nt, "_ZnamRKSt9nothrow_t", 0, ALLOC, 2)                         \
	X(nw_al, "_ZnwmSt11align_val_t", 0, ALLOC, 2)                        \
	X(na_al, "_ZnamSt11align_val_t", 0, ALLOC, 2)                        \
	X(nw_al_nt, "_ZnwmSt11align_val_tRKSt9nothrow_t", 0, ALLOC, 3)       \
	X(na_al_nt, "_ZnamSt11align_val_tRKSt9nothrow_t", 0, ALLOC, 3)       \
	X(dl, "_ZdlPv", 0, FREE, 1)                                          \
	X(da, "_ZdaPv", 0, FREE, 1)                                          \
	X(dl_sz, "_ZdlPvm", 0, FREE, 2)                                      \
	X(da_sz, "_ZdaPvm", 0, FREE, 2)                                      \
	X(dl_al, "_ZdlPvSt11align_val_t", 0, FREE, 2)                        \
	X(da_al, "_ZdaPvSt11align_val_t", 0, FREE, 2)                        \
	X(dl_sz_al, "_ZdlPvmSt11align_val_t", 0, FREE, 3)                    \
	X(da_sz_al, "_ZdaPvmSt11align_val_t", 0, FREE, 3)                    \
	X(dl_nt, "_ZdlPvRKSt9nothrow_t", 0, FREE, 2)                         \
	X(da_nt, "_ZdaPvRKSt9nothrow_t", 0, FREE, 2)                         \
	X(dl_al_nt, "_ZdlPvSt11align_val_tRKSt9nothrow_t", 0, FREE, 3)       \
	X(da_al_nt, "_ZdaPvSt11align_val_tRKSt9nothrow_t", 0, FREE, 3)

#define MA_AGENT_NENTRIES 33

#define MA_AGENT_MAX_FRAMES 48
/* The sample table is split into this many independently locked stripes. */
#define MA_AGENT_STRIPES 64

enum ma_agent_state {
	MA_AGENT_IDLE = 0, /* loaded, no hooks, no tables */
	MA_AGENT_RUNNING = 1, /* hooks installed, sampling */
	MA_AGENT_STOPPING = 2, /* hooks removed, waiting for hooks in flight */
	MA_AGENT_FORKED = 3, /* a fork child's copy: records nothing */
};

/* How the agent sees allocations (attach/agent/README.md). */
enum ma_agent_mechanism {
	MA_AGENT_MECH_HOOKS = 0, /* jemalloc's experimental.hooks (static jemalloc only) */
	MA_AGENT_MECH_GOT = 1, /* the GOT slots of every loaded object rewritten */
	MA_AGENT_MECH_DETOUR = 2, /* one instruction of each entry point rewritten (static, prefixed) */
};

enum ma_agent_mode {
	MA_AGENT_MODE_SHIFT = 0, /* each allocation with probability 1/2^shift */
	MA_AGENT_MODE_FOCUS = 1, /* every allocation of one size class */
	/*
	 * A heap profile (memattach profile): each allocation sampled with
	 * probability 1 - exp(-usable size / rate), as jemalloc's prof does,
	 * and counted per stack (struct ma_agent_stackstat).
	 */
	MA_AGENT_MODE_PROFILE = 2,
};

/*
 * Profile mode: per stack, its sampled allocations still live and those
 * made since start (counts and usable bytes, as sampled: memattach
 * unsamples them as jeprof does).  Updated with relaxed atomics.
 */
struct ma_agent_stackstat {
	uint64_t live_n, live_bytes, accum_n, accum_bytes;
};

/* Written by memattach into scratch memory; ma_agent_start copies it. */
struct ma_agent_params {
	uint64_t magic;
	uint32_t version, mode;
	uint32_t shift, mechanism;
	uint64_t focus_size;
	uint64_t seed; /* salts the address hash that picks samples */
	/* GOT: jemalloc's code (a slot into it is an allocation entry point) and libc's dlopen */
	uint64_t je_lo, je_hi, dlopen;
	char prefix[8]; /* jemalloc's symbol prefix ("", "je_") */
	/* the target's jemalloc entry points (any prefix, shared or static) */
	uint64_t mallctl, mallctlnametomib, mallctlbymib, malloc_usable_size;
	uint64_t capacity; /* bound of sample slots over all stripes, a power of two >= MA_AGENT_STRIPES * 64 */
	uint64_t stack_cap; /* distinct stacks */
	uint64_t frame_cap; /* frames over all distinct stacks */
	uint64_t self_lo, self_hi; /* the agent's code, skipped when unwinding */
	uint64_t started_unix_ns;
	/* samples held at most: each stripe max_samples / MA_AGENT_STRIPES, rounded up */
	uint64_t max_samples;
	uint64_t rate; /* profile mode: the mean bytes between samples (1: every allocation) */
	/* DETOUR: each entry point's ORIGINAL in its trampoline (0: not detoured) */
	uint64_t original[MA_AGENT_NENTRIES];
	/* libc's _dl_find_object (glibc 2.35+; 0: none): the unwinder's lock-free lookup */
	uint64_t find_object;
};

/* Return codes of the agent's entry points (negative errno otherwise). */
#define MA_AGENT_OK 0
#define MA_AGENT_EBUSY 1 /* start: already running */
#define MA_AGENT_EHOOK 2 /* experimental.hooks.install/remove failed */
#define MA_AGENT_ENOMEM 3 /* mmap failed */
#define MA_AGENT_EIDLE 4 /* query/stop: not running */
#define MA_AGENT_EPARAM 5 /* bad parameters */
#define MA_AGENT_EQUERY 6 /* experimental.utilization.batch_query failed */
#define MA_AGENT_EINFLIGHT 7 /* stop: hooks still running after the wait */
#define MA_AGENT_ECALL 8 /* another entry point is running (a killed memattach's call) */
#define MA_AGENT_ENOSLOT 9 /* GOT: no malloc or free slot found to rewrite */
#define MA_AGENT_EMAPS 10 /* GOT: /proc/self/maps could not be read in the target */
#define MA_AGENT_EPATCH 11 /* detour: the bytes at a patch point are not what was planned from */
#define MA_AGENT_EPROT 12 /* detour: the code could not be made writable (a W^X policy) */
#define MA_AGENT_ESYNC 13 /* detour: no membarrier SYNC_CORE (kernel before 4.16) */

/*
 * One inline detour's patch point (attach/agent/agent_detour.c writes it):
 * the instruction at AT, whose first MA_AGENT_PATCH_LEN bytes are BEFORE,
 * becomes AFTER (a jmp rel32 to its trampoline), or back.
 */
#define MA_AGENT_PATCH_LEN 5
/* The trampolines' area: one slot per entry point, whole pages. */
#define MA_AGENT_TRAMP_STRIDE 256
#define MA_AGENT_TRAMP_LEN ((MA_AGENT_NENTRIES * MA_AGENT_TRAMP_STRIDE + 4095) & ~4095ULL)
struct ma_agent_patch {
	uint64_t at;
	uint8_t before[8], after[8];
};

/*
 * One distinct stack: frames[off .. off+n) of the frame array.  In profile
 * mode a stack is also keyed by the size class of what it allocated (KEY:
 * 1 + floor(log2(usable size)); 0 otherwise): a site's sizes are unsampled
 * apart, as they must be (scaling a mix by its mean size is biased).
 */
struct ma_agent_stack {
	uint64_t hash;
	uint32_t off, n;
	uint32_t key, pad;
};

/*
 * The control block (symbol ma_agent_ctl).  Counters are updated with
 * atomics by the hooks; memattach reads them with process_vm_readv
 * without stopping anything.
 */
struct ma_agent_ctl {
	uint64_t magic;
	uint32_t version;
	uint32_t state; /* enum ma_agent_state */
	uint32_t mode, shift;
	uint64_t focus_size;
	uint64_t seed, mask; /* sampled iff hash(ptr) & mask == 0 */
	uint64_t mallctl, mallctlnametomib, mallctlbymib, malloc_usable_size;
	uint64_t hook_handle;
	uint32_t mechanism; /* enum ma_agent_mechanism */
	uint32_t pad;
	uint64_t je_lo, je_hi;
	/* GOT: slots holding a wrapper after the last pass, and slots left alone */
	uint64_t slots_patched, slots_failed, slots_foreign;
	uint64_t passes; /* link-map passes (start, each query, stop) */
	uint64_t self_lo, self_hi;
	uint64_t pid; /* the process that started the agent (a fork child differs) */
	uint64_t started_unix_ns;
	/* the tables: one mapping */
	uint64_t tables, tables_len;
	uint64_t capacity, stack_cap, frame_cap;
	uint64_t samples_off, locks_off, buckets_off, stacks_off, frames_off;
	uint64_t nstacks, nframes;
	/* counters */
	uint64_t inflight; /* hooks between entry and exit that touch the tables */
	uint64_t live; /* samples held */
	uint64_t recorded, removed; /* since start */
	uint64_t dropped_full; /* a stripe was full: sample not recorded */
	uint64_t dropped_stacks; /* the stack table was full: recorded as stack 0 */
	uint64_t truncated_stacks; /* deeper than MA_AGENT_MAX_FRAMES */
	/* the last query's output: one mapping, struct-of-arrays (see below) */
	uint64_t out, out_len, nout;
	uint64_t query_failed; /* pointers batch_query refused */
	/*
	 * 1 while an entry point runs.  A memattach killed during a call leaves
	 * it running in the target; the next run's call must not unmap what it
	 * uses: entry points take this flag or return -MA_AGENT_ECALL.
	 */
	uint64_t entry_busy;
	uint64_t stripe_max; /* samples a stripe holds at most (the rest are dropped_full) */
	/* samples allocated by the unwinder itself: the caller is their only frame */
	uint64_t unwinder_samples;
	uint64_t rate; /* profile mode (params.rate) */
	uint64_t stats_off; /* profile mode: struct ma_agent_stackstat[stack_cap] in the tables */
	/*
	 * DETOUR: the trampoline area (mapped once, never unmapped: a thread
	 * may be in it), each entry point's wrapper, and the patch points
	 * written (stop takes them back itself).
	 */
	uint64_t tramp_area, tramp_len;
	uint64_t wrapper[MA_AGENT_NENTRIES];
	uint64_t ndetours;
	struct ma_agent_patch detours[MA_AGENT_NENTRIES];
	uint64_t find_object; /* params.find_object */
};

/*
 * Query output, at ctl.out, for nout samples (n = nout):
 *   uint64_t ptr[n];
 *   uint32_t stack[n];      stack id (index into the stack array)
 *   uint32_t size[n];       usable size when recorded (focus mode), else 0
 *   uint64_t util[3 * n];   {nfree, nregs, extent size} per pointer, as
 *                           experimental.utilization.batch_query returns
 * each array starting at a multiple of 8 bytes.
 */
static inline uint64_t ma_agent_out_stack_off(uint64_t n) { return 8 * n; }
static inline uint64_t ma_agent_out_size_off(uint64_t n) { return 8 * n + 4 * n; }
static inline uint64_t ma_agent_out_util_off(uint64_t n) { return (8 * n + 8 * n + 7) & ~7ULL; }
static inline uint64_t ma_agent_out_len(uint64_t n) { return ma_agent_out_util_off(n) + 24 * n; }

#endif
