/*
 * stats_json.h - jemalloc's malloc_stats_print JSON ("J" option) read into
 * the same structs the live path fills (jestats.h, bins.h).
 *
 * jemalloc does not escape string values (a prof_prefix with a quote makes
 * the document invalid JSON) and cuts them at 254 bytes without a closing
 * quote (jemalloc 5.x emitter.h).  The parser tolerates both: a quote ends a string
 * value only where valid JSON can continue after it, and a value 254 bytes
 * long ends where the next key begins.  Per-bin counters come from
 * "stats.arenas".merged, or are summed over the numbered arenas when the
 * document has no merged entry (one arena printed without 'a').
 */
#ifndef MA_STATS_JSON_H
#define MA_STATS_JSON_H

#include <stddef.h>

#include "bins.h"
#include "jestats.h"

/* More small bins than any jemalloc build has: the file is not its output. */
#define MA_MAX_BINS 1024

/*
 * Parse BUF (LEN bytes, need not be NUL-terminated).  On success fills ST
 * and T (T->bins is allocated; release with ma_bin_table_release; T NULL:
 * the headline only, and of it only stats.allocated required) and returns 0; otherwise MA_E_FORMAT with a message naming what is missing,
 * or MA_E_NOMEM.
 */
int ma_stats_json_parse(const char *buf, size_t len, struct ma_je_stats *st,
			struct ma_bin_table *t);
/* Read PATH (bounded: input.h) and parse it; MA_E_IO if unreadable. */
int ma_stats_json_load(const char *path, struct ma_je_stats *st, struct ma_bin_table *t);

#endif
