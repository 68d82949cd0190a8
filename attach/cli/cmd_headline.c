/*
 * cmd_headline.c - the decomposition of resident memory as stats, purge,
 * snapshot and watch print it.
 */
#include <inttypes.h>
#include <stdio.h>

#include "cmdutil.h"
#include "format.h"
#include "headline_table.h"

void ma_headline_json(struct ma_json *j, const struct ma_headline *h)
{
	if (h->have_pages) {
		ma_json_u64(j, "dirty", h->dirty);
		ma_json_u64(j, "muzzy", h->muzzy);
		ma_json_u64(j, "metadata_resident", h->metadata_resident);
	}
	if (h->have_rss)
		ma_json_i64(j, "outside_jemalloc", h->outside_jemalloc);
}

/* A part's description goes on under itself when longer than a line. */
#define PART_HANG 52

static void part(const char *name, int64_t v, const char *what)
{
	char b[40];

	ma_print_wrapped(PART_HANG, "  %-18s %12s  %15" PRId64 "  %s\n", name,
			 ma_fmt_signed_bytes(b, sizeof(b), v, false), v, what);
}

void ma_print_decomposition(const struct ma_je_stats *st, const struct ma_headline *h,
			    uint64_t vm_rss)
{
	if (!h->have_pages) {
		/* No page counts (an old jemalloc, or stats printed without arenas). */
		printf("where jemalloc's resident goes:\n");
		part("allocated", (int64_t)st->allocated, "live bytes the program asked for");
		part("slab_waste", (int64_t)h->slab_waste,
		     "free slots in live slabs and tcaches ('bins')");
		part("page_slack", (int64_t)h->page_slack,
		     "unused dirty pages, jemalloc's metadata");
		return;
	}
	printf("where VmRSS goes (allocated + slab_waste + dirty + metadata_resident + "
	       "outside_jemalloc):\n");
	part("allocated", (int64_t)st->allocated, "live bytes the program asked for");
	/* What each part is, in a few words; 'stats --help' has the formulas. */
	part("slab_waste", (int64_t)h->slab_waste,
	     "free slots in live slabs and tcaches ('bins')");
	part("dirty", (int64_t)h->dirty, "unused pages kept; 'purge' returns them");
	part("metadata_resident", (int64_t)h->metadata_resident,
	     "jemalloc's own bookkeeping in RAM");
	if (h->have_rss)
		part("outside_jemalloc", h->outside_jemalloc,
		     "code, stacks, other mappings; can be negative");
	if (vm_rss)
		part("= VmRSS", (int64_t)vm_rss, "the sum of the parts above");
	part("muzzy", (int64_t)h->muzzy, "not in the sum: lazily freed (MADV_FREE)");
}
