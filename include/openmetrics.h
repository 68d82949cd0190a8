/*
 * openmetrics.h - one scrape's readings of jemalloc processes as
 * OpenMetrics text (what Prometheus scrapes), for 'stats --format
 * openmetrics' and 'export'.
 */
#ifndef MA_OPENMETRICS_H
#define MA_OPENMETRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bins.h"
#include "headline.h"

/* One target in a scrape. */
struct ma_om_target {
	pid_t pid;
	char comm[64];
	bool ok; /* the allocator readings below are valid */
	struct ma_je_stats st;
	struct ma_headline h;
	struct ma_bin_table bins; /* nbins 0 if not read */
	uint64_t vm_rss, vm_hwm; /* 0 if unknown */
	uint64_t borrow_ns;	 /* how long the scrape held a thread of it */
	uint64_t failures;	 /* failed scrapes of it so far (a counter) */
};

/* The two text formats Prometheus reads. */
enum ma_om_format {
	MA_OM_OPENMETRICS, /* application/openmetrics-text; version=1.0.0 */
	MA_OM_PROMETHEUS_TEXT, /* text/plain; version=0.0.4 (what promtool checks) */
};

/*
 * Write the metric families for N targets, each family once with a sample
 * per target ({pid, comm} labels), the exporter's own metrics when
 * EXPORTER, and the closing "# EOF".
 */
void ma_om_write(FILE *f, const struct ma_om_target *t, size_t n, bool exporter);
/* The same in FMT: text 0.0.4 has no UNIT and no "# EOF", and names a
 * counter's HELP and TYPE by its _total sample. */
void ma_om_write_format(FILE *f, const struct ma_om_target *t, size_t n, bool exporter,
			enum ma_om_format fmt);

#endif
