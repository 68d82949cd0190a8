/*
 * openmetrics.c - OpenMetrics text for jemalloc readings (openmetrics.h).
 * Families are written whole (every target's sample together), as the
 * format requires; names follow Prometheus conventions (base unit bytes
 * or seconds in the name, counters end in _total).
 */
#include <inttypes.h>
#include <string.h>

#include "openmetrics.h"

/* A label value: backslash, quote and newline escaped. */
static void put_label(FILE *f, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fprintf(f, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

/* A sample's name and its labels, up to the closing brace (more labels may follow). */
static void start_sample(FILE *f, const char *name, const struct ma_om_target *t)
{
	fprintf(f, "%s{pid=\"%d\",comm=\"", name, (int)t->pid);
	put_label(f, t->comm);
	fputc('"', f);
}

static void family(FILE *f, const char *name, const char *type, const char *unit,
		   const char *help)
{
	fprintf(f, "# TYPE %s %s\n", name, type);
	if (unit)
		fprintf(f, "# UNIT %s %s\n", name, unit);
	fprintf(f, "# HELP %s %s\n", name, help);
}

/* What each gauge reads from a target; false = no sample for it. */
typedef bool (*om_get)(const struct ma_om_target *t, int64_t *v);

#define GETTER(fn, cond, expr)                                                   \
	static bool fn(const struct ma_om_target *t, int64_t *v)                 \
	{                                                                        \
		if (!(cond))                                                     \
			return false;                                            \
		*v = (int64_t)(expr);                                            \
		return true;                                                     \
	}

GETTER(get_allocated, t->ok, t->st.allocated)
GETTER(get_active, t->ok, t->st.active)
GETTER(get_resident, t->ok, t->st.resident)
GETTER(get_mapped, t->ok, t->st.mapped)
GETTER(get_retained, t->ok, t->st.retained)
GETTER(get_metadata, t->ok, t->st.metadata)
GETTER(get_slab_waste, t->ok, t->h.slab_waste)
GETTER(get_dirty, t->ok && t->h.have_pages, t->h.dirty)
GETTER(get_muzzy, t->ok && t->h.have_pages, t->h.muzzy)
GETTER(get_meta_res, t->ok && t->h.have_pages, t->h.metadata_resident)
GETTER(get_outside, t->ok && t->h.have_rss, t->h.outside_jemalloc)
GETTER(get_tcache, t->ok && t->bins.nbins, t->bins.tcache_bytes)
GETTER(get_rss, t->vm_rss, t->vm_rss)
GETTER(get_hwm, t->vm_hwm, t->vm_hwm)

static const struct {
	const char *name, *help;
	om_get get;
} gauges[] = {
	{ "jemalloc_allocated_bytes", "Live bytes the program asked for (stats.allocated).",
	  get_allocated },
	{ "jemalloc_active_bytes", "Bytes in active pages (stats.active).", get_active },
	{ "jemalloc_resident_bytes", "Bytes in pages jemalloc holds resident (stats.resident).",
	  get_resident },
	{ "jemalloc_mapped_bytes", "Bytes in active extents (stats.mapped).", get_mapped },
	{ "jemalloc_retained_bytes", "Virtual memory kept for reuse (stats.retained).",
	  get_retained },
	{ "jemalloc_metadata_bytes", "jemalloc's own bookkeeping (stats.metadata).", get_metadata },
	{ "jemalloc_slab_waste_bytes",
	  "active - allocated: free regions in live slabs and thread caches.", get_slab_waste },
	{ "jemalloc_dirty_bytes", "Unused dirty pages kept by jemalloc; a purge returns them.",
	  get_dirty },
	{ "jemalloc_muzzy_bytes", "Unused pages advised lazily free (outside resident).",
	  get_muzzy },
	{ "jemalloc_metadata_resident_bytes", "resident - active - dirty: metadata in RAM.",
	  get_meta_res },
	{ "jemalloc_outside_bytes",
	  "VmRSS - resident: memory not jemalloc's (may be negative: untouched pages).",
	  get_outside },
	{ "jemalloc_tcache_bytes", "Bytes cached in thread caches, counted as allocated.",
	  get_tcache },
	{ "process_resident_memory_bytes", "VmRSS of the process.", get_rss },
	{ "process_resident_memory_max_bytes", "VmHWM: the highest VmRSS of the process.",
	  get_hwm },
};

static void write_gauges(FILE *f, const struct ma_om_target *t, size_t n)
{
	for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
		family(f, gauges[g].name, "gauge", "bytes", gauges[g].help);
		for (size_t i = 0; i < n; i++) {
			int64_t v;

			if (!gauges[g].get(&t[i], &v))
				continue;
			start_sample(f, gauges[g].name, &t[i]);
			fprintf(f, "} %" PRId64 "\n", v);
		}
	}
}

/* Waste per small size class: only classes with slabs in use. */
static void write_bin_waste(FILE *f, const struct ma_om_target *t, size_t n)
{
	family(f, "jemalloc_bin_waste_bytes", "gauge", "bytes",
	       "Free regions in the slabs of one small size class (size label, bytes).");
	for (size_t i = 0; i < n; i++) {
		if (!t[i].ok)
			continue;
		for (size_t b = 0; b < t[i].bins.nbins; b++) {
			struct ma_bin_row r;

			if (!t[i].bins.bins[b].curslabs)
				continue;
			ma_bins_row(&t[i].bins, b, &r);
			start_sample(f, "jemalloc_bin_waste_bytes", &t[i]);
			fprintf(f, ",size=\"%" PRIu64 "\"} %" PRIu64 "\n", t[i].bins.bins[b].size,
				r.waste);
		}
	}
}

static void write_exporter(FILE *f, const struct ma_om_target *t, size_t n)
{
	family(f, "memattach_scrape_success", "gauge", NULL,
	       "1 if this scrape read the process's allocator, else 0.");
	for (size_t i = 0; i < n; i++) {
		start_sample(f, "memattach_scrape_success", &t[i]);
		fprintf(f, "} %d\n", t[i].ok ? 1 : 0);
	}
	family(f, "memattach_scrape_borrow_seconds", "gauge", "seconds",
	       "How long this scrape held a thread of the process stopped.");
	for (size_t i = 0; i < n; i++) {
		start_sample(f, "memattach_scrape_borrow_seconds", &t[i]);
		fprintf(f, "} %.9f\n", t[i].borrow_ns / 1e9);
	}
	family(f, "memattach_scrape_failures", "counter", NULL,
	       "Scrapes of the process that could not read its allocator.");
	for (size_t i = 0; i < n; i++) {
		start_sample(f, "memattach_scrape_failures_total", &t[i]);
		fprintf(f, "} %" PRIu64 "\n", t[i].failures);
	}
}

void ma_om_write(FILE *f, const struct ma_om_target *t, size_t n, bool exporter)
{
	write_gauges(f, t, n);
	write_bin_waste(f, t, n);
	if (exporter)
		write_exporter(f, t, n);
	fputs("# EOF\n", f);
}
