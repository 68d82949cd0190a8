/*
 * bins_report.h - the bin report the live allocator commands print (bins,
 * snapshot's bins.json): JSON and the table.  Implemented in cmd_bins.c.
 */
#ifndef MA_BINS_REPORT_H
#define MA_BINS_REPORT_H

#include <stdio.h>

#include "bins.h"
#include "flush.h"
#include "jestats.h"

/* The bin report; FR may be NULL.  TOP limits the table (0: all). */
void ma_bins_emit_json(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
		       const struct ma_flush_result *fr);
/* "tcache_flush": {threads, flushed, skipped, no_tcache} into J, if FR says a flush was done. */
struct ma_json;
void ma_flush_emit_json(struct ma_json *j, const struct ma_flush_result *fr);
int ma_bins_print_table(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
			const struct ma_flush_result *fr, long top);

#endif
