/*
 * jestats.h - jemalloc's headline state, as read live (attach/jectl.c) or
 * parsed from malloc_stats_print JSON (analysis/), and what follows from it.
 */
#ifndef MA_JESTATS_H
#define MA_JESTATS_H

#include <stdbool.h>
#include <stdint.h>

struct ma_je_stats {
	char version[96];
	/* options */
	bool opt_prof, opt_prof_active, prof_active, opt_tcache, opt_background_thread;
	bool background_thread; /* currently enabled */
	uint64_t lg_prof_sample;
	unsigned narenas;
	int64_t dirty_decay_ms, muzzy_decay_ms;
	/* headline counters, bytes */
	uint64_t allocated, active, resident, mapped, retained, metadata;
};

/* The decomposition of the gap between RSS and live bytes. */
struct ma_headline {
	uint64_t page_slack; /* resident - active: dirty pages not yet purged */
	uint64_t slab_waste; /* active - allocated: free regions in live slabs, tcache */
};

void ma_headline_compute(const struct ma_je_stats *st, struct ma_headline *h);

#endif
