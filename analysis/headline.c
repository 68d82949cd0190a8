#include "jestats.h"

static uint64_t gap(uint64_t hi, uint64_t lo)
{
	return hi > lo ? hi - lo : 0;
}

void ma_headline_compute(const struct ma_je_stats *st, struct ma_headline *h)
{
	h->page_slack = gap(st->resident, st->active);
	h->slab_waste = gap(st->active, st->allocated);
}
