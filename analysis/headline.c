/*
 * headline.c - the decomposition of resident memory (see jestats.h).
 */
#include <string.h>

#include "headline.h"

static uint64_t gap(uint64_t hi, uint64_t lo)
{
	return hi > lo ? hi - lo : 0;
}

uint64_t ma_slab_waste(uint64_t active, uint64_t allocated)
{
	return gap(active, allocated);
}

uint64_t ma_page_slack(uint64_t resident, uint64_t active)
{
	return gap(resident, active);
}

void ma_headline_compute(const struct ma_je_stats *st, uint64_t vm_rss, struct ma_headline *h)
{
	memset(h, 0, sizeof(*h));
	h->page_slack = ma_page_slack(st->resident, st->active);
	h->slab_waste = ma_slab_waste(st->active, st->allocated);
	h->have_pages = st->page != 0;
	if (h->have_pages) {
		h->dirty = st->pdirty * st->page;
		h->muzzy = st->pmuzzy * st->page;
		h->metadata_resident = gap(h->page_slack, h->dirty);
	}
	h->have_rss = vm_rss != 0;
	if (h->have_rss)
		h->outside_jemalloc = (int64_t)(vm_rss - st->resident);
}
