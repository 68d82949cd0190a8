/*
 * headline_table.h - how stats, purge, snapshot and watch show the
 * decomposition of resident memory (struct ma_headline, headline.h).
 */
#ifndef MA_HEADLINE_OUT_H
#define MA_HEADLINE_OUT_H

#include "emit.h"
#include "headline.h"

/* The keys dirty, muzzy, metadata_resident, outside_jemalloc (only those read). */
void ma_headline_json(struct ma_json *j, const struct ma_headline *h);

/* The table "where VmRSS goes", one row per part, with what each one is. */
void ma_print_decomposition(const struct ma_je_stats *st, const struct ma_headline *h,
			    uint64_t vm_rss);

#endif
