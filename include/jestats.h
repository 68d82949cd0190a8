/*
 * jestats.h - jemalloc's headline state, as read live (attach/jectl.c) or
 * parsed from malloc_stats_print JSON (analysis/stats_json.c).  What
 * follows from it: headline.h.
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
	/* all arenas merged (stats.arenas.4096.*): unused dirty / muzzy pages */
	uint64_t pdirty, pmuzzy, page; /* page: arenas.page, bytes; 0 = not read */
};

#endif
