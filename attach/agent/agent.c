/*
 * agent.c - memattach's in-target agent for `memattach frag`.
 *
 * Built as a small shared object (build/agent/memattach-agent.so), embedded
 * in memattach, and dlopen'ed inside the target from a memfd by `frag
 * start`.  It sees every allocation and free by rewriting the GOT slots of
 * the allocation functions in every loaded object (README.md here: why,
 * and the risks for a live target); where jemalloc is linked statically
 * there is no such slot and it falls back to jemalloc's hooks.  It keeps a
 * count-weighted sample of live allocations: each allocation is sampled
 * with probability 1/2^shift, decided by a salted hash of its address (so
 * a free finds out whether its pointer can be in the table without taking
 * any lock), or, in focus mode, every allocation of one size class.  Each
 * sample is (pointer, stack id); stacks are unwound with libgcc's
 * _Unwind_Backtrace (DWARF CFI, no frame pointers needed) and
 * deduplicated.  ma_agent_query (agent_ctl.c, with the other entry
 * points) copies the live samples and runs
 * experimental.utilization.batch_query over them.
 *
 * Rules, because this code runs inside someone's production process:
 *   - it never calls malloc: all its memory comes from its own mmap;
 *   - no thread-local storage (a dlopen'ed library's TLS may allocate);
 *   - the fast path (an allocation that is not sampled) reads one cache
 *     line of the control block and writes nothing;
 *   - every access to the tables happens between an increment and a
 *     decrement of its stripe's inflight counter, after seeing the state
 *     RUNNING, so stop can unmap the tables once every counter is 0;
 *   - the library is never unloaded and the originals the wrappers call
 *     are never cleared (a thread may have loaded a wrapper's address from
 *     a slot just before stop restored it); stop releases only the mappings;
 *   - a wrapper that records does not record again on the same thread
 *     (the unwinder or a signal handler allocating meanwhile).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include "agent_abi.h"
#include MA_ARCH_HEADER /* the relocation types of GOT slots */
#include "agent_int.h"

#define EXPORT __attribute__((visibility("default")))
#define UNWIND_RAW 72 /* raw frames collected: ours, jemalloc's, then the program's */

/* jemalloc 5.3's hooks_t and hook signatures (include/jemalloc/internal/hook.h). */
typedef void (*hook_alloc_fn)(void *extra, int type, void *result, uintptr_t result_raw,
			      uintptr_t args_raw[3]);
typedef void (*hook_dalloc_fn)(void *extra, int type, void *address, uintptr_t args_raw[3]);
typedef void (*hook_expand_fn)(void *extra, int type, void *address, size_t old_usize,
			       size_t new_usize, uintptr_t result_raw, uintptr_t args_raw[4]);
struct je_hooks {
	hook_alloc_fn alloc_hook;
	hook_dalloc_fn dalloc_hook;
	hook_expand_fn expand_hook;
	void *extra;
};



EXPORT struct ma_agent_ctl ma_agent_ctl;
char agent_prefix[8]; /* jemalloc's symbol prefix */

/* ---- small pieces ---- */

static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static inline uint64_t addr_hash(const struct ma_agent_ctl *c, uint64_t p)
{
	return mix(p ^ c->seed);
}



/* The stack table's lock: the slot after the stripes. */
static inline struct stripe *stack_lock(const struct ma_agent_ctl *c)
{
	return stripes(c) + MA_AGENT_STRIPES;
}


static inline struct ma_agent_stackstat *stackstat(const struct ma_agent_ctl *c, uint32_t id)
{
	return (struct ma_agent_stackstat *)(uintptr_t)(c->tables + c->stats_off) + id;
}

/*
 * Profile mode: how many samples each bucket of address hashes holds, so
 * a free learns whether its pointer can be sampled from one load, without
 * entering the tables.  In the library's .bss (never unmapped): the check
 * may run after stop.  Cleared at start, while nothing records.
 */
#define FILTER_BUCKETS (1u << 15)
static uint32_t filter[FILTER_BUCKETS];

static inline uint32_t *filter_of(uint64_t h)
{
	return &filter[(h >> 40) & (FILTER_BUCKETS - 1)];
}


/*
 * Enter the tables through stripe S: false if the agent is not running
 * (then nothing may be touched).  Paired with leave().
 */
static bool enter(struct ma_agent_ctl *c, struct stripe **sp, uint64_t h)
{
	struct stripe *s;

	if (__atomic_load_n(&c->state, __ATOMIC_SEQ_CST) != MA_AGENT_RUNNING)
		return false;
	s = stripes(c) + ((h >> 20) & (MA_AGENT_STRIPES - 1));
	__atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&c->state, __ATOMIC_SEQ_CST) != MA_AGENT_RUNNING) {
		__atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
		return false;
	}
	*sp = s;
	return true;
}

static void leave(struct stripe *s)
{
	__atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
}


/* ---- stacks ---- */

struct unwind_buf {
	uint64_t ip[UNWIND_RAW];
	unsigned n;
	uint64_t find_object; /* ctl's */
};

/* A pc, and the executable segment that holds it (found by find_code). */
struct code_query {
	uint64_t pc, lo, hi;
};

static int find_code(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct code_query *q = arg;

	(void)size;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && q->pc >= lo &&
		    q->pc - lo < ph->p_memsz) {
			q->lo = lo;
			q->hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

typedef int (*find_object_fn)(void *address, struct dl_find_object *result);

/*
 * Is PC in a loaded object (not JIT code in anonymous memory)?  Asked for
 * every frame of every sampled allocation, so not through dl_iterate_phdr
 * where libc has _dl_find_object (glibc 2.35+, found by memattach: linked,
 * the agent would not load on an older glibc): dl_iterate_phdr holds the
 * loader's write lock for its walk, and a fork() by another thread
 * meanwhile leaves the child with that lock taken, its first dlopen()
 * waiting for ever (attack 44: 4 of 105 children with the agent idle).
 * _dl_find_object takes no lock (libgcc's own unwinder uses it).
 */
static bool in_loaded_code(uint64_t find_object, uint64_t pc)
{
	struct code_query q = { pc, 0, 0 };
	struct dl_find_object o;

	if (find_object)
		return ((find_object_fn)(uintptr_t)find_object)((void *)(uintptr_t)pc, &o) == 0;
	return dl_iterate_phdr(find_code, &q) != 0;
}

/*
 * A frame in code that no loaded object holds is JIT-compiled: its unwind
 * tables, if any, were registered at run time, and libgcc may abort() on
 * them (LuaJIT's traces in kresd: SIGABRT in _Unwind_Backtrace when a C
 * function called from a trace allocates).  The walk ends at such a frame,
 * before libgcc moves past it; libgcc itself calls dl_iterate_phdr per frame.
 */
static _Unwind_Reason_Code unwind_cb(struct _Unwind_Context *ctx, void *arg)
{
	struct unwind_buf *b = arg;
	uint64_t ip = (uint64_t)_Unwind_GetIP(ctx);

	if (!ip)
		return _URC_END_OF_STACK;
	b->ip[b->n++] = ip;
	if (!in_loaded_code(b->find_object, ip - 1))
		return _URC_END_OF_STACK;
	return b->n == UNWIND_RAW ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Id of the stack FRAMES[0..N) under KEY, added if new; 0 ("not recorded") if the table is full. */
static uint32_t intern_stack(struct ma_agent_ctl *c, const uint64_t *frames, unsigned n, uint32_t key)
{
	struct ma_agent_stack *st = (struct ma_agent_stack *)(uintptr_t)(c->tables + c->stacks_off);
	uint64_t *fr = (uint64_t *)(uintptr_t)(c->tables + c->frames_off);
	uint32_t *buckets = (uint32_t *)(uintptr_t)(c->tables + c->buckets_off);
	uint64_t nb = 2 * c->stack_cap, h = 0x9e3779b97f4a7c15ULL ^ n ^ ((uint64_t)key << 32);
	struct stripe *l = stack_lock(c);
	uint32_t id = 0;

	for (unsigned i = 0; i < n; i++)
		h = mix(h ^ frames[i]) + i;
	/*
	 * Most stacks are known already: look without the lock.  A bucket is
	 * published (release) only after its stack record and frames are
	 * written, and never changes afterwards.
	 */
	for (uint64_t b = h & (nb - 1);; b = (b + 1) & (nb - 1)) {
		uint32_t cand = __atomic_load_n(&buckets[b], __ATOMIC_ACQUIRE);

		if (!cand)
			break;
		if (st[cand - 1].hash == h && st[cand - 1].n == n && st[cand - 1].key == key &&
		    memcmp(fr + st[cand - 1].off, frames, n * sizeof(*frames)) == 0)
			return cand - 1;
	}
	spin_lock(&l->lock);
	for (uint64_t b = h & (nb - 1);; b = (b + 1) & (nb - 1)) {
		uint32_t cand = buckets[b];

		if (!cand) {
			uint64_t ns = c->nstacks, nf = c->nframes;

			if (ns >= c->stack_cap || nf + n > c->frame_cap) {
				c->dropped_stacks++;
				break;
			}
			memcpy(fr + nf, frames, n * sizeof(*frames));
			st[ns].hash = h;
			st[ns].off = (uint32_t)nf;
			st[ns].n = n;
			st[ns].key = key;
			__atomic_store_n(&buckets[b], (uint32_t)ns + 1, __ATOMIC_RELEASE);
			__atomic_store_n(&c->nframes, nf + n, __ATOMIC_RELEASE);
			__atomic_store_n(&c->nstacks, ns + 1, __ATOMIC_RELEASE);
			id = (uint32_t)ns;
			break;
		}
		if (st[cand - 1].hash == h && st[cand - 1].n == n && st[cand - 1].key == key &&
		    memcmp(fr + st[cand - 1].off, frames, n * sizeof(*frames)) == 0) {
			id = cand - 1;
			break;
		}
	}
	spin_unlock(&l->lock);
	return id;
}

/* The caller's stack, without the agent's own frames, under KEY, as a stack id. */
static uint32_t current_stack(struct ma_agent_ctl *c, uint32_t key)
{
	struct unwind_buf b;
	unsigned start = 0, n;

	b.n = 0;
	b.find_object = c->find_object;
	_Unwind_Backtrace(unwind_cb, &b);
	/* Skip up to and including the last of our own frames (and libgcc's before them). */
	for (unsigned i = 0; i < b.n && i < 12; i++)
		if (b.ip[i] >= c->self_lo && b.ip[i] < c->self_hi)
			start = i + 1;
	n = b.n > start ? b.n - start : 0;
	if (n > MA_AGENT_MAX_FRAMES) {
		n = MA_AGENT_MAX_FRAMES;
		__atomic_add_fetch(&c->truncated_stacks, 1, __ATOMIC_RELAXED);
	}
	return intern_stack(c, b.ip + start, n, key);
}

/* ---- the sample table: per stripe, linear probing, backward-shift deletion ---- */

static inline uint64_t home_slot(uint64_t h, uint64_t cap)
{
	return (h >> 26) & (cap - 1);
}

static void put(struct sample *slots, uint64_t cap, uint64_t h, const struct sample *x)
{
	uint64_t i = home_slot(h, cap);

	while (slots[i].ptr && slots[i].ptr != x->ptr)
		i = (i + 1) & (cap - 1);
	slots[i] = *x;
}

/* Double stripe S's array (its lock held); false if at the bound or mmap fails. */
static bool grow(struct ma_agent_ctl *c, struct stripe *s)
{
	uint64_t ncap = 2 * s->cap;
	struct sample *old = slots_of(s), *nw;
	void *m;

	if (ncap > c->capacity / MA_AGENT_STRIPES)
		return false;
	m = mmap(NULL, ncap * sizeof(*nw), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return false;
	nw = m;
	for (uint64_t i = 0; i < s->cap; i++)
		if (old[i].ptr)
			put(nw, ncap, addr_hash(c, old[i].ptr), &old[i]);
	if (s->own)
		munmap(old, s->cap * sizeof(*old));
	s->own = 1;
	s->slots = (uint64_t)(uintptr_t)nw;
	s->cap = ncap;
	return true;
}

/*
 * The exec range of the unwinder our walk calls (libgcc_s): an allocation
 * it makes may hold its object_mutex (sorting a registered object's FDEs
 * in _Unwind_Find_FDE), which our walk would then take again on the same
 * thread, for ever.  Such a sample gets the caller as its only frame.
 */
static uint64_t unwinder_lo, unwinder_hi;

static void learn_unwinder(void)
{
	struct code_query q = { (uint64_t)(uintptr_t)&_Unwind_Backtrace, 0, 0 };

	if (!unwinder_hi && dl_iterate_phdr(find_code, &q)) {
		unwinder_lo = q.lo;
		unwinder_hi = q.hi;
	}
}

/* Profile mode's key of a stack that allocated BYTES (agent_abi.h: struct ma_agent_stack). */
static uint32_t size_key(const struct ma_agent_ctl *c, uint64_t bytes)
{
	return c->mode == MA_AGENT_MODE_PROFILE && bytes ? 64 - (uint32_t)__builtin_clzll(bytes) : 0;
}

/*
 * CALLER: the return address of the allocation call (0 if unknown:
 * jemalloc's hooks); BYTES: its usable size (profile mode).
 */
static uint32_t stack_of(struct ma_agent_ctl *c, uint64_t caller, uint64_t bytes)
{
	if (caller && caller >= unwinder_lo && caller < unwinder_hi) {
		__atomic_add_fetch(&c->unwinder_samples, 1, __ATOMIC_RELAXED);
		return intern_stack(c, &caller, 1, size_key(c, bytes));
	}
	return current_stack(c, size_key(c, bytes));
}

static inline uint64_t usable(const struct ma_agent_ctl *c, uint64_t p)
{
	return ((usable_fn)(uintptr_t)c->malloc_usable_size)((void *)(uintptr_t)p);
}

static inline uint32_t size_code(uint64_t bytes)
{
	return bytes >= SIZE_HUGE ? SIZE_HUGE : (uint32_t)bytes;
}

/* X's usable size (its object is still live: it is asked again if huge). */
static uint64_t sample_bytes(const struct ma_agent_ctl *c, const struct sample *x)
{
	return x->size == SIZE_HUGE ? usable(c, x->ptr) : x->size;
}

/* Profile mode: sample X enters the table (FRESH: a new allocation, not one put back). */
static void count_in(struct ma_agent_ctl *c, const struct sample *x, uint64_t h, bool fresh)
{
	struct ma_agent_stackstat *st = stackstat(c, x->stack);
	uint64_t b = sample_bytes(c, x);

	__atomic_add_fetch(filter_of(h), 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&st->live_n, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&st->live_bytes, b, __ATOMIC_RELAXED);
	if (fresh) {
		__atomic_add_fetch(&st->accum_n, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&st->accum_bytes, b, __ATOMIC_RELAXED);
	}
}

/* Profile mode: sample X leaves the table (freed; or replaced, FILTER false). */
static void count_out(struct ma_agent_ctl *c, const struct sample *x, uint64_t h, bool filter_too)
{
	struct ma_agent_stackstat *st = stackstat(c, x->stack);

	if (filter_too)
		__atomic_sub_fetch(filter_of(h), 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&st->live_n, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&st->live_bytes, sample_bytes(c, x), __ATOMIC_RELAXED);
}

/* Put X into stripe S (its lock held); FRESH as count_in.  Dropped if full. */
static void insert_locked(struct ma_agent_ctl *c, struct stripe *s, const struct sample *x, uint64_t h,
			  bool fresh, bool bounded)
{
	uint64_t i;
	struct sample *slots;
	bool profile = c->mode == MA_AGENT_MODE_PROFILE;

	if ((bounded && s->count >= c->stripe_max) || (s->count >= s->cap - s->cap / 8 && !grow(c, s))) {
		s->dropped++;
		return;
	}
	slots = slots_of(s);
	for (i = home_slot(h, s->cap); slots[i].ptr && slots[i].ptr != x->ptr; i = (i + 1) & (s->cap - 1))
		;
	if (!slots[i].ptr) {
		s->count++;
	} else if (profile) {
		/* A stale sample: its object was freed where no wrapper saw it. */
		count_out(c, &slots[i], h, true);
	}
	slots[i] = *x;
	s->recorded++;
	if (profile)
		count_in(c, x, h, fresh);
}

static void record(struct ma_agent_ctl *c, uint64_t p, uint64_t h, uint64_t bytes, uint64_t caller)
{
	struct stripe *s;
	struct sample x;

	if (!enter(c, &s, h))
		return;
	x.ptr = p;
	x.stack = stack_of(c, caller, bytes);
	x.size = size_code(bytes);
	spin_lock(&s->lock);
	insert_locked(c, s, &x, h, true, true);
	spin_unlock(&s->lock);
	leave(s);
}

/*
 * Remove P's sample; true if there was one, copied to *OUT if OUT is set.
 * (realloc takes the sample out before the call and puts it back if the
 * pointer did not move.)
 */
static bool take(struct ma_agent_ctl *c, uint64_t p, uint64_t h, struct sample *out)
{
	struct sample *slots;
	struct stripe *s;
	uint64_t m, i, j;
	bool found = false;

	if (!enter(c, &s, h))
		return false;
	spin_lock(&s->lock);
	slots = slots_of(s);
	m = s->cap - 1;
	for (i = home_slot(h, s->cap); slots[i].ptr && slots[i].ptr != p; i = (i + 1) & m)
		;
	if (slots[i].ptr == p) {
		struct sample gone = slots[i];

		found = true;
		if (out)
			*out = gone;
		/* Move later entries of the run back so no lookup stops at a hole. */
		for (j = (i + 1) & m; slots[j].ptr; j = (j + 1) & m) {
			uint64_t k = home_slot(addr_hash(c, slots[j].ptr), s->cap);
			bool movable = i <= j ? (k <= i || k > j) : (k <= i && k > j);

			if (movable) {
				slots[i] = slots[j];
				i = j;
			}
		}
		slots[i].ptr = 0;
		s->count--;
		s->removed++;
		if (c->mode == MA_AGENT_MODE_PROFILE)
			count_out(c, &gone, h, true);
	}
	spin_unlock(&s->lock);
	leave(s);
	return found;
}

static void forget(struct ma_agent_ctl *c, uint64_t p, uint64_t h)
{
	take(c, p, h, NULL);
}

/* Put back a sample taken out by take() (its stack kept; not counted as recorded again). */
static void put_back(struct ma_agent_ctl *c, const struct sample *x, uint64_t h)
{
	struct stripe *s;

	if (!enter(c, &s, h))
		return;
	spin_lock(&s->lock);
	insert_locked(c, s, x, h, false, false);
	spin_unlock(&s->lock);
	leave(s);
}

/* ---- the hooks ---- */

static inline bool running(const struct ma_agent_ctl *c)
{
	return __atomic_load_n(&c->state, __ATOMIC_RELAXED) == MA_AGENT_RUNNING;
}

/* 1 - e^-x for x >= 0, without libm (the agent links only libc and libgcc_s). */
static double one_minus_exp_neg(double x)
{
	const double ln2 = 0.69314718055994530942;
	double r, term = 1, sum = 1;
	union { uint64_t bits; double d; } scale;
	int k;

	if (x > 40)
		return 1;
	if (x < 1e-3)
		return x * (1 - x / 2 * (1 - x / 3 * (1 - x / 4)));
	k = (int)(x / ln2);
	r = x - k * ln2; /* e^-x = 2^-k e^-r, 0 <= r < ln 2 */
	for (int i = 1; i <= 18; i++) {
		term *= -r / i;
		sum += term;
	}
	scale.bits = (uint64_t)(1023 - k) << 52;
	return 1 - sum * scale.d;
}

/*
 * Profile mode's draws: a counter per group of threads (by bits of
 * pthread_self, the thread's control block: threads' differ in them, as
 * their stacks are apart), each on its own cache line, so that two
 * allocations never share a draw.
 * Relaxed loads and stores: a lost increment between two threads of one
 * group still gives them different pointers or thread ids to hash.
 */
static struct {
	uint64_t n;
	char pad[56];
} draws[64];

/*
 * Profile mode: is the allocation at P sampled?  With probability
 * 1 - exp(-usable size / rate), independently of every other allocation
 * (jemalloc's prof draws the same law from a per-thread byte counter).
 * Its usable size in *BYTES (asked of jemalloc only if it may be sampled).
 * REQ: the size asked for, where no alignment was (its usable size is at
 * most max(2 REQ, 16) in every jemalloc size class), else NO_BOUND.
 */
#define NO_BOUND UINT64_MAX
/*
 * The draw's floating-point part: U's top 53 bits as uf in [0, 1) against
 * 1 - e^-(BYTES/RATE).  Opaque to the optimiser (noipa), so none of its
 * arithmetic moves out from between the MXCSR hold and release around it.
 */
__attribute__((noinline, noipa)) static bool draw_fp(uint64_t u, uint64_t bytes, uint64_t rate)
{
	double uf = (double)(u >> 11) * 0x1p-53, x = (double)bytes / (double)rate;

	if (uf >= x)
		return false;
	return uf < one_minus_exp_neg(x);
}

static bool prof_sampled(const struct ma_agent_ctl *c, uint64_t p, uint64_t req, uint64_t *bytes)
{
	uint64_t self = (uint64_t)pthread_self(), *n = &draws[(self >> 12 ^ self >> 21) & 63].n, k, u;
	uint32_t fp;
	bool sampled;

	*bytes = 0;
	if (c->rate <= 1) {
		*bytes = usable(c, p);
		return true;
	}
	k = __atomic_load_n(n, __ATOMIC_RELAXED);
	__atomic_store_n(n, k + 1, __ATOMIC_RELAXED);
	u = mix(p ^ c->seed ^ self ^ (k * 0x9e3779b97f4a7c15ULL));
	/*
	 * 1 - e^-x <= x: most allocations stop here, before asking their size
	 * (uf * rate >= bound, in integers: no floating point in the program's
	 * own floating-point state, whose exceptions it may have unmasked).
	 */
	if (req < (1ULL << 52) &&
	    (unsigned __int128)(u >> 11) * c->rate >= (unsigned __int128)(req < 8 ? 16 : 2 * req) << 53)
		return false;
	*bytes = usable(c, p);
	fp = MA_ARCH_FP_HOLD();
	sampled = draw_fp(u, *bytes, c->rate);
	MA_ARCH_FP_RELEASE(fp);
	return sampled;
}

/* Is P one of ours: sampled by address, or of the focus class (size in *SIZE)? */
static inline bool wanted(struct ma_agent_ctl *c, uint64_t p, uint64_t h, uint32_t *size)
{
	if (c->mode == MA_AGENT_MODE_FOCUS) {
		size_t u = ((usable_fn)(uintptr_t)c->malloc_usable_size)((void *)(uintptr_t)p);

		*size = (uint32_t)u;
		return u == c->focus_size;
	}
	*size = 0;
	return (h & c->mask) == 0;
}

/*
 * A new allocation at P, REQ as prof_sampled: is it sampled?  Its bytes in
 * *BYTES and its address hash in *H (profile mode hashes only a sample).
 */
static inline bool wanted_alloc(struct ma_agent_ctl *c, uint64_t p, uint64_t req, uint64_t *h,
				uint64_t *bytes)
{
	uint32_t size;
	bool w;

	if (c->mode == MA_AGENT_MODE_PROFILE) {
		if (!prof_sampled(c, p, req, bytes))
			return false;
		*h = addr_hash(c, p);
		return true;
	}
	*h = addr_hash(c, p);
	w = wanted(c, p, *h, &size);
	*bytes = size;
	return w;
}

/* P about to be freed: can it be in the table? */
static inline bool wanted_free(struct ma_agent_ctl *c, uint64_t p, uint64_t h)
{
	uint32_t size;

	if (c->mode == MA_AGENT_MODE_PROFILE)
		return __atomic_load_n(filter_of(h), __ATOMIC_RELAXED) != 0;
	return wanted(c, p, h, &size);
}

static void alloc_hook(void *extra, int type, void *result, uintptr_t result_raw,
		       uintptr_t args_raw[3])
{
	struct ma_agent_ctl *c = extra;
	uint64_t p = (uint64_t)(uintptr_t)result, h, bytes;

	(void)type, (void)result_raw, (void)args_raw;
	if (!p || !running(c))
		return;
	if (wanted_alloc(c, p, NO_BOUND, &h, &bytes))
		record(c, p, h, bytes, 0);
}

static void dalloc_hook(void *extra, int type, void *address, uintptr_t args_raw[3])
{
	struct ma_agent_ctl *c = extra;
	uint64_t p = (uint64_t)(uintptr_t)address, h;

	(void)type, (void)args_raw;
	if (!p || !running(c))
		return;
	h = addr_hash(c, p);
	if (wanted_free(c, p, h))
		forget(c, p, h);
}

/* In-place resize: the pointer stays; in focus mode it may leave or join the class. */
static void expand_hook(void *extra, int type, void *address, size_t old_usize, size_t new_usize,
			uintptr_t result_raw, uintptr_t args_raw[4])
{
	struct ma_agent_ctl *c = extra;
	uint64_t p = (uint64_t)(uintptr_t)address, h;

	(void)type, (void)result_raw, (void)args_raw;
	if (!p || !running(c) || c->mode != MA_AGENT_MODE_FOCUS)
		return;
	h = addr_hash(c, p);
	if (old_usize == c->focus_size && new_usize != c->focus_size)
		forget(c, p, h);
	else if (old_usize != c->focus_size && new_usize == c->focus_size)
		record(c, p, h, (uint32_t)new_usize, 0);
}

/* ---- one recording at a time per thread ---- */

/*
 * Threads inside record/take, by pthread_self(), each within a window of
 * GUARD_WINDOW slots from its hash: a nested call on the same thread (the
 * unwinder, or a signal handler, allocating meanwhile) finds itself there
 * and goes straight to the original.  A full window skips the sample.
 */
#define GUARD_SLOTS 512
#define GUARD_WINDOW 8
static uint64_t recording[GUARD_SLOTS];

static bool guard_enter(unsigned *slot)
{
	uint64_t me = (uint64_t)pthread_self();
	unsigned h = (unsigned)mix(me);

	for (unsigned k = 0; k < GUARD_WINDOW; k++)
		if (__atomic_load_n(&recording[(h + k) % GUARD_SLOTS], __ATOMIC_ACQUIRE) == me)
			return false;
	for (unsigned k = 0; k < GUARD_WINDOW; k++) {
		uint64_t idle = 0;
		unsigned i = (h + k) % GUARD_SLOTS;

		if (__atomic_compare_exchange_n(&recording[i], &idle, me, false, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			*slot = i;
			return true;
		}
	}
	return false;
}

static void guard_leave(unsigned slot)
{
	__atomic_store_n(&recording[slot], 0, __ATOMIC_RELEASE);
}

/* ---- the wrappers the GOT slots point to while running ---- */

typedef uint64_t (*fn3)(uint64_t, uint64_t, uint64_t);
typedef uint64_t (*fn4)(uint64_t, uint64_t, uint64_t, uint64_t);

uint64_t agent_original[E_COUNT];

static void record_guarded(struct ma_agent_ctl *c, uint64_t p, uint64_t h, uint64_t bytes,
			   uint64_t caller)
{
	unsigned g;

	if (!guard_enter(&g))
		return;
	record(c, p, h, bytes, caller);
	guard_leave(g);
}

static bool take_guarded(struct ma_agent_ctl *c, uint64_t p, uint64_t h, struct sample *x)
{
	unsigned g;
	bool found;

	if (!guard_enter(&g))
		return false;
	found = take(c, p, h, x);
	guard_leave(g);
	return found;
}

/* After an allocation returned P; REQ as prof_sampled. */
static void after_alloc(uint64_t p, uint64_t caller, uint64_t req)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	uint64_t h, bytes;

	if (!p || !running(c))
		return;
	if (wanted_alloc(c, p, req, &h, &bytes))
		record_guarded(c, p, h, bytes, caller);
}

/* Before the original frees P: once jemalloc has it back, another thread may get and record it. */
static void before_free(uint64_t p)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	uint64_t h;

	if (!p || !running(c))
		return;
	h = addr_hash(c, p);
	if (wanted_free(c, p, h))
		take_guarded(c, p, h, NULL);
}

/* Bumped at each start: a sample taken out in one run is never put back into the next. */
static uint64_t run_gen;

static uint64_t resize(enum entry_id id, uint64_t p, uint64_t n, uint64_t f, uint64_t caller)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	uint64_t gen = __atomic_load_n(&run_gen, __ATOMIC_ACQUIRE), h = 0, q;
	struct sample x;
	bool had = false;

	if (p && running(c)) {
		h = addr_hash(c, p);
		if (wanted_free(c, p, h))
			had = take_guarded(c, p, h, &x);
	}
	q = ((fn3)(uintptr_t)orig(id))(p, n, f);
	if (!q && had && !(id == E_realloc && n == 0)) {
		q = 0; /* failed: P is still live; put its sample back */
		if (gen == __atomic_load_n(&run_gen, __ATOMIC_ACQUIRE)) {
			unsigned g;

			if (guard_enter(&g)) {
				put_back(c, &x, h);
				guard_leave(g);
			}
		}
		return q;
	}
	if (q == p && had && c->mode != MA_AGENT_MODE_PROFILE) {
		unsigned g;

		if (gen != __atomic_load_n(&run_gen, __ATOMIC_ACQUIRE) || !running(c))
			return q;
		if (c->mode == MA_AGENT_MODE_FOCUS && !wanted(c, q, h, &x.size))
			return q; /* resized out of the focus class */
		if (guard_enter(&g)) {
			put_back(c, &x, h);
			guard_leave(g);
		}
		return q;
	}
	/* realloc(p, n); rallocx(p, n, flags): n, unless flags ask an alignment */
	after_alloc(q, caller, id == E_rallocx && (f & 0x3f) ? NO_BOUND : n);
	return q;
}

/*
 * xallocx resizes in place: in focus mode the pointer may leave or join
 * the class; in profile mode a resized object is a new allocation (as in
 * jemalloc's prof), its sample drawn again.
 */
static uint64_t resize_in_place(uint64_t p, uint64_t size, uint64_t extra, uint64_t flags,
				uint64_t caller)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	bool focus = p && running(c) && c->mode == MA_AGENT_MODE_FOCUS;
	bool profile = p && running(c) && c->mode == MA_AGENT_MODE_PROFILE;
	uint64_t before = focus || profile ? usable(c, p) : 0, after, h = 0;
	uint64_t gen = __atomic_load_n(&run_gen, __ATOMIC_ACQUIRE);
	struct sample x;
	bool had = false;

	/* Profile mode: the sample leaves with the size it was counted with. */
	if (profile) {
		h = addr_hash(c, p);
		had = wanted_free(c, p, h) && take_guarded(c, p, h, &x);
	}
	after = ((fn4)(uintptr_t)orig(E_xallocx))(p, size, extra, flags);
	if (profile && after != before) {
		after_alloc(p, caller, NO_BOUND);
	} else if (had && gen == __atomic_load_n(&run_gen, __ATOMIC_ACQUIRE)) {
		unsigned g;

		if (guard_enter(&g)) { /* not resized: the same sample */
			put_back(c, &x, h);
			guard_leave(g);
		}
	}
	if (focus && running(c)) {
		uint64_t h = addr_hash(c, p);

		if (before == c->focus_size && after != c->focus_size)
			take_guarded(c, p, h, NULL);
		else if (before != c->focus_size && after == c->focus_size)
			record_guarded(c, p, h, (uint32_t)after, caller);
	}
	return after;
}

#define RETURN_ADDRESS ((uint64_t)(uintptr_t)__builtin_return_address(0))

/*
 * The size an allocation entry point ID was asked for, where it asks no
 * alignment (prof_sampled's bound); NO_BOUND for the aligned ones.
 */
static inline uint64_t asked(enum entry_id id, uint64_t a, uint64_t b)
{
	switch (id) {
	case E_malloc: case E_nw: case E_na: case E_nw_nt: case E_na_nt:
		return a;
	case E_calloc:
		return b && a > NO_BOUND / b ? NO_BOUND : a * b;
	case E_mallocx: /* MALLOCX_LG_ALIGN in the low bits of the flags */
		return b & 0x3f ? NO_BOUND : a;
	default:
		return NO_BOUND;
	}
}
#define WRAP_ALLOC(id)                                                            \
	static uint64_t w_##id(uint64_t a, uint64_t b, uint64_t c)                 \
	{                                                                         \
		uint64_t p = ((fn3)(uintptr_t)orig(E_##id))(a, b, c);             \
		after_alloc(p, RETURN_ADDRESS, asked(E_##id, a, b));              \
		return p;                                                         \
	}
#define WRAP_FREE(id)                                                             \
	static uint64_t w_##id(uint64_t a, uint64_t b, uint64_t c)                 \
	{                                                                         \
		before_free(a);                                                   \
		return ((fn3)(uintptr_t)orig(E_##id))(a, b, c);                   \
	}
#define WRAP_REALLOC(id)                                                          \
	static uint64_t w_##id(uint64_t a, uint64_t b, uint64_t c)                 \
	{                                                                         \
		return resize(E_##id, a, b, c, RETURN_ADDRESS);                   \
	}
#define WRAP_XALLOC(id)                                                           \
	static uint64_t w_##id(uint64_t a, uint64_t b, uint64_t c, uint64_t d)     \
	{                                                                         \
		return resize_in_place(a, b, c, d, RETURN_ADDRESS);               \
	}
/* posix_memalign(void **, alignment, size): int */
#define WRAP_PMEMALIGN(id)                                                        \
	static uint64_t w_##id(uint64_t a, uint64_t b, uint64_t c)                 \
	{                                                                         \
		int rc = (int)((fn3)(uintptr_t)orig(E_##id))(a, b, c);            \
		if (rc == 0 && a)                                                 \
			after_alloc(*(uint64_t *)(uintptr_t)a, RETURN_ADDRESS, NO_BOUND); \
		return (uint64_t)(uint32_t)rc;                                    \
	}
#define WRAP(id, sym, pre, kind, nargs) WRAP_##kind(id)
ENTRY_POINTS(WRAP)
#undef WRAP


uint64_t agent_wrapper_of(enum entry_id id)
{
	static const void *const w[E_COUNT] = {
#define ENTRY_W(id, s, pre, kind, nargs) [E_##id] = (const void *)w_##id,
		ENTRY_POINTS(ENTRY_W)
#undef ENTRY_W
	};
	return (uint64_t)(uintptr_t)w[id];
}

/* ---- what agent_ctl.c asks of the recording side ---- */

int agent_install_hooks(struct ma_agent_ctl *c)
{
	struct je_hooks hooks = { alloc_hook, dalloc_hook, expand_hook, c };
	void *handle = NULL;
	size_t hlen = sizeof(handle);

	if (((mallctl_fn)(uintptr_t)c->mallctl)("experimental.hooks.install", &handle, &hlen, &hooks,
						   sizeof(hooks)))
		return -MA_AGENT_EHOOK;
	c->hook_handle = (uint64_t)(uintptr_t)handle;
	return MA_AGENT_OK;
}

void agent_prepare_run(void)
{
	learn_unwinder();
	memset(filter, 0, sizeof(filter));
}

void agent_new_run(void)
{
	__atomic_add_fetch(&run_gen, 1, __ATOMIC_SEQ_CST);
}
