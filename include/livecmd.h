/*
 * livecmd.h - output shared by the live allocator commands (bins, purge,
 * snapshot, watch): the bin report in JSON and as a table, and the
 * per-thread tcache flush.
 */
#ifndef MA_LIVECMD_H
#define MA_LIVECMD_H

#include <stdbool.h>
#include <stdio.h>

#include "bins.h"
#include "jestats.h"
#include "target.h"

/* Outcome of flushing every thread's tcache (thread.tcache.flush each). */
struct ma_flush_result {
	bool done; /* a flush was requested */
	unsigned threads, flushed, skipped, no_tcache;
	char first_skipped[160]; /* why the first skipped thread was skipped */
};

/*
 * Flush the tcache of every thread of T that is safe to borrow, one
 * session per thread (each stopped only for its own flush).
 */
int ma_flush_all_tcaches(struct ma_target *t, int deadline_ms, struct ma_flush_result *fr);

/* The bin report; FR may be NULL.  TOP limits the table (0: all). */
void ma_bins_emit_json(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
		       const struct ma_flush_result *fr);
int ma_bins_print_table(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
			const struct ma_flush_result *fr, long top);

#endif
