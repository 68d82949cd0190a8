/*
 * headline.h - the decomposition of resident memory computed from
 * jemalloc's headline state (analysis/headline.c).  The two gaps it rests
 * on are computed here and nowhere else.
 */
#ifndef MA_HEADLINE_H
#define MA_HEADLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "jestats.h"

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

/* active - allocated (0 if a racy reading has active below allocated). */
uint64_t ma_slab_waste(uint64_t active, uint64_t allocated);
/* resident - active (0 likewise). */
uint64_t ma_page_slack(uint64_t resident, uint64_t active);

#endif
