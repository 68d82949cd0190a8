/*
 * series.h - the time series recorded by 'memattach watch' (RSS, HWM and
 * jemalloc's headline per sample, and when heap dumps were taken), and its
 * CSV and SVG renderings.
 */
#ifndef MA_SERIES_H
#define MA_SERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ma_sample {
	uint64_t t_ms; /* since the watch started */
	uint64_t rss, hwm; /* from /proc/PID/status */
	bool have_stats; /* false if no thread was safe to borrow this time */
	uint64_t allocated, active, resident;
	bool have_pages; /* the parts of resident below were read */
	uint64_t dirty, muzzy, metadata_resident;
	int64_t outside_jemalloc; /* VmRSS - resident (may be < 0) */
	bool dump; /* a heap dump was taken at this sample */
};

struct ma_series {
	struct ma_sample *v;
	size_t n, cap;
};

/* Append a copy of S; 0 or MA_E_NOMEM. */
int ma_series_add(struct ma_series *s, const struct ma_sample *x);
void ma_series_release(struct ma_series *s);

/* CSV: a header line, then one line per sample (empty stats if unknown). */
void ma_series_csv_header(FILE *f);
void ma_series_csv_row(FILE *f, const struct ma_sample *x);

/*
 * An SVG line chart of rss, hwm, allocated, active and resident over time,
 * with a vertical marker at every sample where a dump was taken (the last
 * one, the dump kept, drawn solid).  TITLE is escaped.
 */
void ma_series_svg(FILE *f, const struct ma_series *s, const char *title);

/*
 * A round tick step for an axis from 0 to MAX with about NTICKS ticks:
 * 1, 2 or 5 times a power of ten (MAX in any unit; 0 if MAX <= 0).
 */
double ma_nice_step(double max, int nticks);

#endif
