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
	/* all arenas merged (stats.arenas.4096.*): unused dirty / muzzy pages */
	uint64_t pdirty, pmuzzy, page; /* page: arenas.page, bytes; 0 = not read */
};

/*
 * Where the process's resident memory goes, exactly:
 *   VmRSS    = resident + outside_jemalloc
 *   resident = active + dirty + metadata_resident   (jemalloc's own sum)
 *   active   = allocated + slab_waste
 * Muzzy pages (advised MADV_FREE) are outside jemalloc's resident: the
 * kernel may still count them in VmRSS until it reclaims them.
 */
struct ma_headline {
	uint64_t slab_waste;	    /* active - allocated: free regions in live slabs, tcaches */
	uint64_t dirty;		    /* pdirty pages: unused, kept; purge returns them */
	uint64_t muzzy;		    /* pmuzzy pages: unused, advised lazily free */
	uint64_t metadata_resident; /* resident - active - dirty: jemalloc's bookkeeping in RAM */
	uint64_t page_slack;	    /* resident - active = dirty + metadata_resident */
	int64_t outside_jemalloc;   /* VmRSS - resident: code, stacks, other mappings; may be < 0 */
	bool have_pages;	    /* dirty, muzzy, metadata_resident were read */
	bool have_rss;		    /* outside_jemalloc was computed */
};

/* VM_RSS 0 = unknown (outside_jemalloc left 0, have_rss false). */
void ma_headline_compute(const struct ma_je_stats *st, uint64_t vm_rss, struct ma_headline *h);

#endif
