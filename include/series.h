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

/*
 * Peaks of a watch: which samples are a new high (worth a heap dump), and
 * the highest point seen.  A new high is VmRSS MA_PEAK_STEP above the last
 * high (the first sample is the start), or VmHWM more than MA_OWN_HWM_SLACK
 * above its last reading: a peak between two samples above the lifetime
 * maximum.  Not by a few pages: memattach's own visit can raise VmHWM (a
 * state area in a thread's stack, a scratch mapping), which the kernel's
 * batched counters may show only at the next sample.
 */
#define MA_PEAK_STEP (1ULL << 20)
#define MA_OWN_HWM_SLACK (512ULL << 10)

struct ma_peaks {
	bool started;
	uint64_t high; /* the level of the last new high (the start at first) */
	uint64_t last_hwm; /* VmHWM at the last high, memattach's own visits folded in */
	uint64_t top, top_t_ms; /* the highest point of the watch, and when */
};

/*
 * A sample (VmRSS, VmHWM at T_MS): the first is the baseline.  True if it
 * is a new high, with *LEVEL the height reached (VmHWM when that rose past
 * VmRSS, else VmRSS); the highest point is noted either way.
 */
bool ma_peaks_sample(struct ma_peaks *p, uint64_t rss, uint64_t hwm, uint64_t t_ms, uint64_t *level);
/* The new high at LEVEL (VmHWM then HWM) was taken: the next must rise above it. */
void ma_peaks_taken(struct ma_peaks *p, uint64_t level, uint64_t hwm);
/*
 * Fold a rise of VmHWM during memattach's own visit into the baseline: from
 * HWM_BEFORE to HWM_END, if no more than MA_OWN_HWM_SLACK (a larger rise is
 * the target growing, which the next sample must still see as a peak).
 */
void ma_peaks_absorb_own(struct ma_peaks *p, uint64_t hwm_before, uint64_t hwm_end);

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
