/*
 * agent_ctl.c - the agent's entry points, called by memattach in a
 * borrowed thread (one at a time: entry_busy): start (the tables laid
 * out, the mechanism installed), stop, query (the live samples copied and
 * their slabs asked of jemalloc), the detours' area and writes, and the
 * release of a query's output.  agent.c holds what the wrappers and hooks
 * run.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "agent_abi.h"
#include MA_ARCH_HEADER
#include "agent_int.h"

#define EXPORT __attribute__((visibility("default")))
#define QUERY_CHUNK 512
/*
 * How long one stop call waits for the wrappers in flight.  Short: the
 * thread memattach borrowed is held meanwhile.  On -MA_AGENT_EINFLIGHT the
 * state stays STOPPING (nothing records any more) and memattach calls
 * stop again in a later borrow, letting the recording threads run.
 */
#define STOP_WAIT_NS 3000000ULL

static bool atfork_registered;

/* A fork child's copy records nothing: another thread may have held a lock at the fork. */
static void atfork_child(void)
{
	detour_fork_release();
	if (ma_agent_ctl.state == MA_AGENT_RUNNING || ma_agent_ctl.state == MA_AGENT_STOPPING)
		ma_agent_ctl.state = MA_AGENT_FORKED;
}

/* The fork handlers, once: a child must not inherit a patch point half written, nor record. */
static void register_atfork(void)
{
	if (!atfork_registered) {
		pthread_atfork(detour_fork_prepare, detour_fork_release, atfork_child);
		atfork_registered = true;
	}
}

/* ---- entry points, called by memattach in a borrowed thread ---- */

/* One entry point at a time (agent_abi.h: entry_busy). */
static bool entry_take(struct ma_agent_ctl *c)
{
	uint64_t idle = 0;

	return __atomic_compare_exchange_n(&c->entry_busy, &idle, 1, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}

static void entry_give(struct ma_agent_ctl *c)
{
	__atomic_store_n(&c->entry_busy, 0, __ATOMIC_RELEASE);
}

static void unmap_out(struct ma_agent_ctl *c)
{
	if (c->out)
		munmap((void *)(uintptr_t)c->out, c->out_len);
	c->out = c->out_len = c->nout = 0;
}

/*
 * Remove the hooks, wait until no hook touches the tables, unmap them.
 * The state goes to STOPPING first: a hook that starts after that sees it
 * and returns without touching anything.
 */
static int stop_impl(struct ma_agent_ctl *c)
{
	uint64_t deadline;
	int rc;

	__atomic_store_n(&c->state, MA_AGENT_STOPPING, __ATOMIC_SEQ_CST);
	if (c->mechanism == MA_AGENT_MECH_GOT && c->slots_patched && (rc = got_restore_all(c)))
		return rc; /* the wrappers only call the originals meanwhile; stop again */
	if (c->ndetours) {
		if ((rc = detour_rewrite(c->detours, c->ndetours, true)) < 0)
			return rc; /* as above */
		c->ndetours = 0;
	}
	if (c->hook_handle) {
		void *handle = (void *)(uintptr_t)c->hook_handle;

		if (((mallctl_fn)(uintptr_t)c->mallctl)("experimental.hooks.remove", NULL, NULL,
							   &handle, sizeof(handle)))
			return -MA_AGENT_EHOOK;
		c->hook_handle = 0;
	}
	deadline = now_ns(CLOCK_MONOTONIC) + STOP_WAIT_NS;
	for (unsigned s = 0; c->tables && s < MA_AGENT_STRIPES; s++)
		while (__atomic_load_n(&stripes(c)[s].inflight, __ATOMIC_SEQ_CST)) {
			if (now_ns(CLOCK_MONOTONIC) > deadline)
				return -MA_AGENT_EINFLIGHT;
			sched_yield();
		}
	unmap_out(c);
	for (unsigned s = 0; c->tables && s < MA_AGENT_STRIPES; s++)
		if (stripes(c)[s].own)
			munmap((void *)(uintptr_t)stripes(c)[s].slots,
			       stripes(c)[s].cap * sizeof(struct sample));
	if (c->tables)
		munmap((void *)(uintptr_t)c->tables, c->tables_len);
	c->tables = c->tables_len = 0;
	c->nstacks = c->nframes = 0;
	__atomic_store_n(&c->state, MA_AGENT_IDLE, __ATOMIC_SEQ_CST);
	return MA_AGENT_OK;
}

EXPORT int ma_agent_stop(void)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	int rc;

	if (!entry_take(c))
		return -MA_AGENT_ECALL;
	rc = c->state == MA_AGENT_IDLE ? -MA_AGENT_EIDLE : stop_impl(c);
	entry_give(c);
	return rc;
}

/*
 * Lay the tables out in one mapping, the stripes' first slot arrays
 * included (a stripe that grows gets a mapping of its own): start and a
 * stop without growth make one mmap and one munmap.
 */
static int map_tables(struct ma_agent_ctl *c)
{
	uint64_t off = 0, first = STRIPE_INITIAL_SLOTS;
	void *m;

	if (first > c->capacity / MA_AGENT_STRIPES)
		first = c->capacity / MA_AGENT_STRIPES;
	c->samples_off = off;
	off = align_up(off + MA_AGENT_STRIPES * first * sizeof(struct sample), 64);
	c->locks_off = off;
	off = align_up(off + (MA_AGENT_STRIPES + 1) * sizeof(struct stripe), 64);
	c->buckets_off = off;
	off = align_up(off + 2 * c->stack_cap * sizeof(uint32_t), 64);
	c->stacks_off = off;
	off = align_up(off + c->stack_cap * sizeof(struct ma_agent_stack), 64);
	c->frames_off = off;
	off = align_up(off + c->frame_cap * sizeof(uint64_t), 64);
	c->stats_off = off;
	if (c->mode == MA_AGENT_MODE_PROFILE)
		off += c->stack_cap * sizeof(struct ma_agent_stackstat);
	off = align_up(off, 4096);
	m = mmap(NULL, off, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -MA_AGENT_ENOMEM;
	c->tables = (uint64_t)(uintptr_t)m;
	c->tables_len = off;
	for (unsigned i = 0; i < MA_AGENT_STRIPES; i++) {
		struct stripe *s = stripes(c) + i;

		s->slots = c->tables + c->samples_off + i * first * sizeof(struct sample);
		s->cap = first;
		s->own = 0;
	}
	/* Stack 0: "not recorded" (the stack table was full), no frames. */
	c->nstacks = 1;
	c->nframes = 0;
	return MA_AGENT_OK;
}

static void take_params(struct ma_agent_ctl *c, const struct ma_agent_params *p)
{
	c->magic = MA_AGENT_MAGIC;
	c->version = MA_AGENT_VERSION;
	c->mode = p->mode;
	c->shift = p->shift;
	c->mechanism = p->mechanism;
	c->focus_size = p->focus_size;
	c->seed = p->seed;
	c->mask = (1ULL << p->shift) - 1;
	c->mallctl = p->mallctl;
	c->mallctlnametomib = p->mallctlnametomib;
	c->mallctlbymib = p->mallctlbymib;
	c->malloc_usable_size = p->malloc_usable_size;
	c->find_object = p->find_object;
	c->je_lo = p->je_lo;
	c->je_hi = p->je_hi;
	memcpy(agent_prefix, p->prefix, sizeof(agent_prefix));
	agent_prefix[sizeof(agent_prefix) - 1] = '\0';
	c->capacity = p->capacity;
	c->stripe_max = (p->max_samples + MA_AGENT_STRIPES - 1) / MA_AGENT_STRIPES;
	c->stack_cap = p->stack_cap;
	c->frame_cap = p->frame_cap;
	c->self_lo = p->self_lo;
	c->self_hi = p->self_hi;
	c->started_unix_ns = p->started_unix_ns;
	c->rate = p->rate;
	c->pid = (uint64_t)getpid();
	c->dropped_stacks = c->truncated_stacks = c->query_failed = 0;
	c->slots_patched = c->slots_failed = c->slots_foreign = 0;
}

static bool params_ok(const struct ma_agent_params *p)
{
	return p->magic == MA_AGENT_MAGIC && p->version == MA_AGENT_VERSION && p->shift <= 30 &&
	       pow2(p->capacity) && p->capacity >= MA_AGENT_STRIPES * 64 && pow2(p->stack_cap) &&
	       p->stack_cap >= 2 && p->frame_cap && p->max_samples && p->mallctl &&
	       p->mallctlnametomib && p->mallctlbymib && p->mode <= MA_AGENT_MODE_PROFILE &&
	       (p->mode == MA_AGENT_MODE_SHIFT || p->malloc_usable_size) &&
	       (p->mode != MA_AGENT_MODE_PROFILE || p->rate) &&
	       (p->mechanism == MA_AGENT_MECH_HOOKS ||
		(p->mechanism == MA_AGENT_MECH_GOT && p->je_lo < p->je_hi) ||
		(p->mechanism == MA_AGENT_MECH_DETOUR && p->original[E_malloc] && p->original[E_free]));
}


static int start_impl(const struct ma_agent_params *p)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	int rc;

	if (!params_ok(p))
		return -MA_AGENT_EPARAM;
	if (c->state == MA_AGENT_RUNNING || c->state == MA_AGENT_STOPPING)
		return -MA_AGENT_EBUSY;
	if (c->state == MA_AGENT_FORKED && (rc = stop_impl(c)) != MA_AGENT_OK)
		return rc; /* a fork child's inherited slots, hooks and tables */
	take_params(c, p);
	/* Nothing records now (not RUNNING; stop waited for every table access). */
	agent_prepare_run();
	if ((rc = map_tables(c)) != MA_AGENT_OK)
		return rc;
	register_atfork();
	agent_new_run();
	if (c->mechanism == MA_AGENT_MECH_HOOKS) {
		if ((rc = agent_install_hooks(c))) {
			munmap((void *)(uintptr_t)c->tables, c->tables_len);
			c->tables = c->tables_len = 0;
			return rc;
		}
		__atomic_store_n(&c->state, MA_AGENT_RUNNING, __ATOMIC_SEQ_CST);
		return MA_AGENT_OK;
	}
	if (c->mechanism == MA_AGENT_MECH_DETOUR) {
		/* The trampolines' originals first: memattach writes the jumps next (ma_agent_patch). */
		for (int i = 0; i < E_COUNT; i++)
			if (p->original[i])
				__atomic_store_n(&agent_original[i], p->original[i], __ATOMIC_SEQ_CST);
		__atomic_store_n(&c->state, MA_AGENT_RUNNING, __ATOMIC_SEQ_CST);
		return MA_AGENT_OK;
	}
	/* Running before the first slot points to a wrapper: its first call records. */
	__atomic_store_n(&c->state, MA_AGENT_RUNNING, __ATOMIC_SEQ_CST);
	if ((rc = got_patch_all(c)) != MA_AGENT_OK) {
		int stop = stop_impl(c);

		return stop == MA_AGENT_OK ? rc : stop;
	}
	return MA_AGENT_OK;
}

EXPORT int ma_agent_start(const struct ma_agent_params *p)
{
	int rc;

	if (!entry_take(&ma_agent_ctl))
		return -MA_AGENT_ECALL;
	rc = start_impl(p);
	entry_give(&ma_agent_ctl);
	return rc;
}

/* Utilization of ptr[0..n) into util[3n] ({nfree, nregs, size} each); failures are zeros. */
static void query_util(struct ma_agent_ctl *c, uint64_t *ptr, uint64_t *util, uint64_t n)
{
	size_t mib[4], miblen = 4;

	if (((nametomib_fn)(uintptr_t)c->mallctlnametomib)("experimental.utilization.batch_query", mib,
							     &miblen)) {
		memset(util, 0, 24 * n);
		c->query_failed += n;
		return;
	}
	for (uint64_t i = 0; i < n; i += QUERY_CHUNK) {
		uint64_t k = n - i < QUERY_CHUNK ? n - i : QUERY_CHUNK;
		size_t outlen = 24 * k;

		if (((bymib_fn)(uintptr_t)c->mallctlbymib)(mib, miblen, util + 3 * i, &outlen, ptr + i,
							    8 * k) ||
		    outlen != 24 * k) {
			memset(util + 3 * i, 0, 24 * k);
			c->query_failed += k;
		}
	}
}

/*
 * Copy the live samples into a fresh output mapping (the previous one is
 * released) and query each pointer's slab.  Returns the number of samples
 * or a negative error.  The output stays until the next query or stop.
 */
static int64_t query_impl(void)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	uint64_t total = 0, n = 0, cap;
	uint64_t *ptr;
	uint32_t *stack, *size;
	void *m;

	if (c->state != MA_AGENT_RUNNING)
		return -MA_AGENT_EIDLE;
	/* Objects loaded since the last pass get their slots rewritten too. */
	if (c->mechanism == MA_AGENT_MECH_GOT) {
		struct pass ps;

		if (got_run_pass(c, PASS_PATCH, &ps) == MA_AGENT_OK) {
			c->slots_patched = ps.patched;
			c->slots_failed = ps.failed;
			c->slots_foreign = ps.foreign;
		}
	}
	unmap_out(c);
	for (unsigned s = 0; s < MA_AGENT_STRIPES; s++)
		total += __atomic_load_n(&stripes(c)[s].count, __ATOMIC_RELAXED);
	cap = total + total / 8 + 1024;
	m = mmap(NULL, ma_agent_out_len(cap), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -MA_AGENT_ENOMEM;
	ptr = m;
	stack = (uint32_t *)((char *)m + ma_agent_out_stack_off(cap));
	size = (uint32_t *)((char *)m + ma_agent_out_size_off(cap));
	for (unsigned s = 0; s < MA_AGENT_STRIPES && n < cap; s++) {
		struct stripe *st = stripes(c) + s;
		struct sample *slots;

		spin_lock(&st->lock);
		slots = slots_of(st);
		for (uint64_t i = 0; i < st->cap && n < cap; i++)
			if (slots[i].ptr) {
				ptr[n] = slots[i].ptr;
				stack[n] = slots[i].stack;
				size[n] = slots[i].size;
				n++;
			}
		spin_unlock(&st->lock);
	}
	/* Compact to the layout for n (the arrays were placed for cap). */
	memmove((char *)m + ma_agent_out_stack_off(n), stack, 4 * n);
	memmove((char *)m + ma_agent_out_size_off(n), size, 4 * n);
	c->out = (uint64_t)(uintptr_t)m;
	c->out_len = ma_agent_out_len(cap);
	query_util(c, ptr, (uint64_t *)((char *)m + ma_agent_out_util_off(n)), n);
	c->nout = n;
	return (int64_t)n;
}

EXPORT int64_t ma_agent_query(void)
{
	int64_t n;

	if (!entry_take(&ma_agent_ctl))
		return -MA_AGENT_ECALL;
	n = query_impl();
	entry_give(&ma_agent_ctl);
	return n;
}

/*
 * Write the inline detours of LIST[0..N), or take them back (UNDO), while
 * the target's threads run (agent_detour.c): the count done or -MA_AGENT_*.
 */
EXPORT int ma_agent_patch(const struct ma_agent_patch *list, uint64_t n, uint64_t undo)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	int rc;

	if (!entry_take(c))
		return -MA_AGENT_ECALL;
	if (n > E_COUNT) {
		entry_give(c);
		return -MA_AGENT_EPARAM;
	}
	register_atfork();
	/* Kept before writing: stop takes back whatever a killed memattach's call got written. */
	for (uint64_t i = 0; !undo && i < n; i++) {
		uint64_t k = 0;

		while (k < c->ndetours && c->detours[k].at != list[i].at)
			k++;
		if (k == c->ndetours && c->ndetours < E_COUNT)
			c->detours[c->ndetours++] = list[i];
	}
	rc = detour_rewrite(list, n, undo != 0);
	entry_give(c);
	return rc;
}

/*
 * The trampolines' area, within 2 GiB below NEAR (jemalloc's code: a jmp
 * rel32 reaches it), mapped at the first call and never unmapped (a
 * thread may be in a trampoline at any time); and each entry point's
 * wrapper, for memattach's plans.  Its address, or -MA_AGENT_ENOMEM.
 */
EXPORT int64_t ma_agent_detour_area(uint64_t near)
{
	struct ma_agent_ctl *c = &ma_agent_ctl;
	const uint64_t len = MA_AGENT_TRAMP_LEN;

	if (!entry_take(c))
		return -MA_AGENT_ECALL;
	for (uint64_t d = 1 << 20; !c->tramp_area && d < (1ULL << 31) - len && d < near; d += 1 << 20) {
		void *m = mmap((void *)(uintptr_t)((near - d) & ~4095ULL), len, PROT_READ | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (m == MAP_FAILED)
			continue;
		if ((uint64_t)(uintptr_t)m != ((near - d) & ~4095ULL)) { /* a kernel without NOREPLACE */
			munmap(m, len);
			continue;
		}
		c->tramp_area = (uint64_t)(uintptr_t)m;
		c->tramp_len = len;
	}
	for (int i = 0; i < E_COUNT; i++)
		c->wrapper[i] = agent_wrapper_of((enum entry_id)i);
	entry_give(c);
	return c->tramp_area ? (int64_t)c->tramp_area : -MA_AGENT_ENOMEM;
}

/* Release the last query's output (memattach has read it). */
EXPORT int ma_agent_out_free(void)
{
	if (!entry_take(&ma_agent_ctl))
		return -MA_AGENT_ECALL;
	unmap_out(&ma_agent_ctl);
	entry_give(&ma_agent_ctl);
	return MA_AGENT_OK;
}
