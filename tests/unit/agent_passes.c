/*
 * agent_passes - the frag agent's GOT passes, run in this very process
 * (linked with jemalloc) while two threads dlopen() and dlclose()
 * libfragplug.so round and round, one with RTLD_NOW and one with
 * RTLD_LAZY, each time having it allocate, check and free objects.
 *
 * No ptrace here: the agent's entry points are called directly, thousands
 * of passes a second, so a pass that races the loader (an object mapped,
 * relocated, protected or unmapped under it) shows within the run.  A
 * wrong page protection left behind makes the library's next write to its
 * own data fault, and the test dies (the runner counts that as a failure).
 *
 * usage: agent_passes [CYCLES [QUERIES]]   (default 800 start/stop cycles, 1 query each)
 */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_abi.h"
#include "check.h"

struct code_range {
	uint64_t base, lo, hi;
};

/* The executable span of the object loaded at R->base. */
static int find_code(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct code_range *r = arg;

	(void)size;
	if (info->dlpi_addr != r->base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t a = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			r->lo = !r->lo || a < r->lo ? a : r->lo;
			r->hi = a + ph->p_memsz > r->hi ? a + ph->p_memsz : r->hi;
		}
	}
	return 1;
}

static struct code_range code_of(const void *fn)
{
	struct code_range r = { 0 };
	Dl_info di;

	if (dladdr(fn, &di) && di.dli_fbase) {
		r.base = (uint64_t)(uintptr_t)di.dli_fbase;
		dl_iterate_phdr(find_code, &r);
	}
	return r;
}

static char plug_path[PATH_MAX];
static atomic_bool cycling = true;

struct cycler {
	int mode;
	unsigned long cycles, bad;
};

/* dlopen, allocate/check/free 16 objects, dlclose, until told to end. */
static void *cycle_plug(void *arg)
{
	struct cycler *cy = arg;

	while (atomic_load(&cycling)) {
		void *h = dlopen(plug_path, cy->mode | RTLD_LOCAL);
		int (*churn)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "plug_churn") : NULL;

		if (!churn || churn(16))
			cy->bad++;
		if (h)
			dlclose(h);
		cy->cycles++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char exe[PATH_MAX], agent_path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int cycles = argc > 1 ? atoi(argv[1]) : 800, queries = argc > 2 ? atoi(argv[2]) : 1;
	struct cycler cy[2] = { { .mode = RTLD_NOW }, { .mode = RTLD_LAZY } };
	pthread_t th[2];
	char *build;
	void *agent;

	if (n <= 0)
		return 2;
	exe[n] = '\0';
	build = dirname(dirname(dirname(exe))); /* build/tests/unit/agent_passes -> build */
	snprintf(agent_path, sizeof(agent_path), "%s/agent/memattach-agent.so", build);
	snprintf(plug_path, sizeof(plug_path), "%s/fixtures/libfragplug.so", build);

	void *mallctl = dlsym(RTLD_DEFAULT, "mallctl");
	CHECK("this process runs on jemalloc (mallctl found)", mallctl != NULL);
	agent = dlopen(agent_path, RTLD_NOW | RTLD_LOCAL);
	CHECK("the agent loads", agent != NULL);
	if (!mallctl || !agent) {
		fprintf(stderr, "%s\n", dlerror());
		CHECK_DONE();
	}
	int (*start)(const struct ma_agent_params *) = (int (*)(const struct ma_agent_params *))dlsym(agent, "ma_agent_start");
	int64_t (*query)(void) = (int64_t (*)(void))dlsym(agent, "ma_agent_query");
	int (*out_free)(void) = (int (*)(void))dlsym(agent, "ma_agent_out_free");
	int (*stop)(void) = (int (*)(void))dlsym(agent, "ma_agent_stop");
	struct ma_agent_ctl *ctl = dlsym(agent, "ma_agent_ctl");
	struct code_range je = code_of(mallctl), self = code_of((void *)start);

	CHECK("the agent's entry points and jemalloc's code found",
	      start && query && out_free && stop && ctl && je.hi > je.lo && self.hi > self.lo);
	if (check_failures)
		CHECK_DONE();

	struct ma_agent_params p = {
		.magic = MA_AGENT_MAGIC, .version = MA_AGENT_VERSION, .mode = MA_AGENT_MODE_SHIFT,
		.shift = 0, .mechanism = MA_AGENT_MECH_GOT, .seed = 12345,
		.je_lo = je.lo, .je_hi = je.hi,
		.mallctl = (uint64_t)(uintptr_t)mallctl,
		.mallctlnametomib = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "mallctlnametomib"),
		.mallctlbymib = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "mallctlbymib"),
		.malloc_usable_size = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "malloc_usable_size"),
		.capacity = 1 << 16, .max_samples = 1 << 15, .stack_cap = 1 << 12, .frame_cap = 1 << 16,
		.self_lo = self.lo, .self_hi = self.hi,
	};
	int start_bad = 0, query_bad = 0, stop_bad = 0, stop_again = 0, first_rc = 0;
	uint64_t patched_max = 0;

	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, cycle_plug, &cy[i]);
	for (int c = 0; c < cycles; c++) {
		int rc = start(&p);

		if (rc) {
			start_bad++;
			first_rc = first_rc ? first_rc : rc;
			continue;
		}
		for (int q = 0; q < queries; q++) {
			int64_t got = query();

			query_bad += got < 0;
			if (got >= 0)
				out_free();
			patched_max = ctl->slots_patched > patched_max ? ctl->slots_patched : patched_max;
		}
		/* As memattach does: wrappers still recording after the agent's short wait: stop again. */
		for (int t = 0; (rc = stop()) == -MA_AGENT_EINFLIGHT && t < 1000; t++)
			stop_again++, usleep(100);
		if (rc != 0) {
			stop_bad++;
			first_rc = first_rc ? first_rc : 100 + rc;
		}
	}
	atomic_store(&cycling, false);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);

	char what[200];

	printf("# %d start/stop cycles (%d stops repeated: wrappers still recording), %llu passes; "
	       "library cycles: %lu RTLD_NOW, %lu RTLD_LAZY\n", cycles, stop_again,
	       (unsigned long long)ctl->passes, cy[0].cycles, cy[1].cycles);
	snprintf(what, sizeof(what), "every start, query and stop answered OK (%d, %d, %d failed; first %d)",
		 start_bad, query_bad, stop_bad, first_rc);
	CHECK(what, !start_bad && !query_bad && !stop_bad);
	snprintf(what, sizeof(what), "the passes rewrote slots (at most %llu at once)",
		 (unsigned long long)patched_max);
	CHECK(what, patched_max > 0);
	snprintf(what, sizeof(what), "the library was loaded and unloaded throughout (%lu and %lu times), "
		 "its objects intact (%lu bad)", cy[0].cycles, cy[1].cycles, cy[0].bad + cy[1].bad);
	CHECK(what, cy[0].cycles > 0 && cy[1].cycles > 0 && !cy[0].bad && !cy[1].bad);
	CHECK("every slot back after the last stop", ctl->slots_patched == 0);
	CHECK_DONE();
}
