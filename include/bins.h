/*
 * bins.h - jemalloc's small-bin table and what it says about slab waste.
 *
 * Filled either live (attach/jectl.c: ma_je_read_bins) or from
 * malloc_stats_print JSON (stats_json.h); both produce the same struct,
 * and everything derived here is pure computation, so the two paths give
 * the same report for the same allocator state.
 */
#ifndef MA_BINS_H
#define MA_BINS_H

#include <stddef.h>
#include <stdint.h>

#include "jestats.h"

/* One small size class: constants from arenas.bin.<j>, counters merged
 * over all arenas (stats.arenas.4096.bins.<j>). */
struct ma_bin {
	uint64_t size; /* region size */
	uint64_t nregs; /* regions per slab */
	uint64_t slab_size; /* bytes per slab */
	uint64_t curregs; /* live regions, including ones cached in tcaches */
	uint64_t curslabs; /* slabs in use */
	uint64_t nonfull_slabs; /* slabs with at least one free region */
};

struct ma_bin_table {
	struct ma_bin *bins; /* owned, nbins entries, in bin order */
	size_t nbins;
	uint64_t tcache_bytes; /* bytes cached in thread caches (all arenas) */
};

enum ma_bin_regime {
	MA_REGIME_NONE, /* no partly-empty slab */
	MA_REGIME_SPARSE, /* few survivors per partly-empty slab */
	MA_REGIME_MIXED, /* between the two */
	MA_REGIME_HALF_FULL, /* partly-empty slabs are largely occupied */
};

/* What follows from one bin's counters. */
struct ma_bin_row {
	size_t index; /* bin index */
	double util; /* curregs / (curslabs * nregs); 0 if no slab */
	uint64_t waste; /* curslabs*slab_size - curregs*size */
	double live_per_nonfull; /* live regions per partly-empty slab */
	enum ma_bin_regime regime;
};

/* Totals over the table, set against the headline counters. */
struct ma_bin_summary {
	uint64_t small_waste; /* sum of row waste */
	uint64_t slab_waste; /* active - allocated (headline.h) */
	uint64_t page_slack; /* resident - active (headline.h) */
	double waste_share; /* small_waste / slab_waste; 0 if no gap */
};

/* Compute the row of bin I.  Counters may be inconsistent (a file from a
 * racing print): nothing here divides by zero or underflows. */
void ma_bins_row(const struct ma_bin_table *t, size_t i, struct ma_bin_row *r);
/* Rows for every bin (caller frees *rows); 0 or MA_E_NOMEM. */
int ma_bins_rows(const struct ma_bin_table *t, struct ma_bin_row **rows);
/* Sort ROWS by waste, largest first (ties: bin order). */
void ma_bins_sort_by_waste(struct ma_bin_row *rows, size_t n);
void ma_bins_summary(const struct ma_bin_table *t, const struct ma_je_stats *st,
		     struct ma_bin_summary *sum);

/* Short name of a regime ("sparse", "half-full", ...). */
const char *ma_bin_regime_name(enum ma_bin_regime r);
/* One sentence saying what to do about a bin in regime R. */
const char *ma_bin_regime_advice(enum ma_bin_regime r);

void ma_bin_table_release(struct ma_bin_table *t);

#endif
