/*
 * bins.c - slab waste per size class and the regime hint (seed:
 * memory_fragmentation.md, "Step 1").
 *
 * live_per_nonfull is the mean number of live regions pinning each
 * partly-empty slab: full slabs hold nregs each, so what is left of curregs
 * lives in the non-full ones.  Its ratio to nregs sorts a bin into a
 * regime: few survivors per slab (a lifetime arena would free whole slabs)
 * or slabs largely occupied (an arena would not help; move the transients).
 */
#include <stdlib.h>
#include <string.h>

#include "bins.h"
#include "headline.h"
#include "ma_error.h"

/* Fill below this: sparse.  At or above MA_HALF_FULL: half-full. */
#define MA_SPARSE_MAX 0.25
#define MA_HALF_FULL 0.40

static uint64_t sub0(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

void ma_bins_row(const struct ma_bin_table *t, size_t i, struct ma_bin_row *r)
{
	const struct ma_bin *b = &t->bins[i];
	uint64_t capacity = b->curslabs * b->nregs;
	uint64_t full = sub0(b->curslabs, b->nonfull_slabs);

	memset(r, 0, sizeof(*r));
	r->index = i;
	r->util = capacity ? (double)b->curregs / (double)capacity : 0;
	r->waste = sub0(b->curslabs * b->slab_size, b->curregs * b->size);
	if (b->nonfull_slabs)
		r->live_per_nonfull =
			(double)sub0(b->curregs, full * b->nregs) / (double)b->nonfull_slabs;
	if (!b->nonfull_slabs || !b->nregs)
		r->regime = MA_REGIME_NONE;
	else if (r->live_per_nonfull / (double)b->nregs < MA_SPARSE_MAX)
		r->regime = MA_REGIME_SPARSE;
	else if (r->live_per_nonfull / (double)b->nregs < MA_HALF_FULL)
		r->regime = MA_REGIME_MIXED;
	else
		r->regime = MA_REGIME_HALF_FULL;
}

int ma_bins_rows(const struct ma_bin_table *t, struct ma_bin_row **rows)
{
	*rows = calloc(t->nbins ? t->nbins : 1, sizeof(**rows));
	if (!*rows)
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < t->nbins; i++)
		ma_bins_row(t, i, &(*rows)[i]);
	return 0;
}

static int cmp_waste(const void *x, const void *y)
{
	const struct ma_bin_row *a = x, *b = y;

	if (a->waste != b->waste)
		return a->waste > b->waste ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

void ma_bins_sort_by_waste(struct ma_bin_row *rows, size_t n)
{
	qsort(rows, n, sizeof(*rows), cmp_waste);
}

void ma_bins_summary(const struct ma_bin_table *t, const struct ma_je_stats *st,
		     struct ma_bin_summary *sum)
{
	struct ma_bin_row r;

	memset(sum, 0, sizeof(*sum));
	for (size_t i = 0; i < t->nbins; i++) {
		ma_bins_row(t, i, &r);
		sum->small_waste += r.waste;
	}
	sum->slab_waste = ma_slab_waste(st->active, st->allocated);
	sum->page_slack = ma_page_slack(st->resident, st->active);
	sum->waste_share = sum->slab_waste ? (double)sum->small_waste / (double)sum->slab_waste : 0;
}

const char *ma_bin_regime_name(enum ma_bin_regime r)
{
	switch (r) {
	case MA_REGIME_SPARSE:
		return "sparse";
	case MA_REGIME_MIXED:
		return "mixed";
	case MA_REGIME_HALF_FULL:
		return "half-full";
	default:
		return "-";
	}
}

const char *ma_bin_regime_advice(enum ma_bin_regime r)
{
	switch (r) {
	case MA_REGIME_SPARSE:
		return "a few long-lived objects pin each partly-empty slab: giving these "
		       "objects their own arena or lifetime pool would let whole slabs be freed";
	case MA_REGIME_MIXED:
		return "partly-empty slabs are between a quarter and 40% occupied: look at the "
		       "sites (heap profile) before choosing arena or segregation";
	case MA_REGIME_HALF_FULL:
		return "partly-empty slabs are largely occupied by survivors: a separate arena "
		       "would not help; move the short-lived objects of this size elsewhere";
	default:
		return "every slab is full: no waste to recover";
	}
}

void ma_bin_table_release(struct ma_bin_table *t)
{
	free(t->bins);
	t->bins = NULL;
	t->nbins = 0;
}
