/*
 * openmetrics.c - OpenMetrics text for jemalloc readings (openmetrics.h).
 * Families are written whole (every target's sample together), as the
 * format requires; names follow Prometheus conventions (base unit bytes
 * or seconds in the name, counters end in _total).  The same readings can
 * be written in the older Prometheus text format 0.0.4 instead (what
 * promtool check metrics reads): see enum ma_om_format.
 */
#include <inttypes.h>
#include <locale.h>
#include <string.h>
#include <wchar.h>

#include "openmetrics.h"

/*
 * The length of the valid UTF-8 character at S (at most N bytes), or 0 if
 * S does not start with one.  glibc's decoder in the C.UTF-8 locale (built
 * in since glibc 2.35), used for this thread only, without touching the
 * program's locale; it takes code points above U+10FFFF, which are not
 * Unicode: those are refused here.
 */
static size_t utf8_char_len(const char *s, size_t n)
{
	static locale_t utf8;
	mbstate_t st;
	wchar_t wc;
	size_t len;
	locale_t old;

	if (!utf8 && !(utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0)))
		return (unsigned char)*s < 0x80; /* no decoder: keep ASCII only */
	memset(&st, 0, sizeof(st));
	old = uselocale(utf8);
	len = mbrtowc(&wc, s, n, &st);
	uselocale(old);
	if (len == (size_t)-1 || len == (size_t)-2 || len == 0 || (uint32_t)wc > 0x10FFFF)
		return 0;
	return len;
}

/* The code point of the UTF-8 character at P (LEN bytes, valid). */
static unsigned code_point(const unsigned char *p, size_t len)
{
	if (len == 1)
		return p[0];
	if (len == 2)
		return (p[0] & 0x1fu) << 6 | (p[1] & 0x3fu);
	if (len == 3)
		return (p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
	return 0x10000; /* four bytes: never a control */
}

/* A character a terminal would act on: C0 and C1 controls, DEL, bidirectional controls. */
static bool is_control(unsigned cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

/*
 * TEXT escaped for a label value or a HELP line: backslash and line feed
 * always, the double quote when QUOTE (label values in both formats, HELP
 * in OpenMetrics; text 0.0.4 has no \" escape in HELP).  Bytes that are
 * not UTF-8 become U+FFFD: Prometheus refuses a whole scrape over one
 * invalid label value, and a process name (comm) can hold any byte but
 * NUL and '/'.  Controls become the text \xNN or \uNNNN (written \\xNN):
 * `export --once` and a curl of /metrics reach a terminal, which must
 * show the target's name, not obey it.
 */
static void put_escaped(FILE *f, const char *text, bool quote)
{
	size_t n = strlen(text);

	while (n) {
		size_t len = utf8_char_len(text, n);
		unsigned cp = len ? code_point((const unsigned char *)text, len) : 0;

		if (len == 0) {
			fputs("\xEF\xBF\xBD", f); /* U+FFFD REPLACEMENT CHARACTER */
			text++, n--;
			continue;
		}
		if (*text == '\\')
			fputs("\\\\", f);
		else if (*text == '\n')
			fputs("\\n", f);
		else if (*text == '"' && quote)
			fputs("\\\"", f);
		else if (is_control(cp))
			fprintf(f, cp > 0xff ? "\\\\u%04x" : "\\\\x%02x", cp);
		else
			fwrite(text, 1, len, f);
		text += len, n -= len;
	}
}

/* A sample's name and its labels, up to the closing brace (more labels may follow). */
static void start_sample(FILE *f, const char *name, const struct ma_om_target *t)
{
	fprintf(f, "%s{pid=\"%d\",comm=\"", name, (int)t->pid);
	put_escaped(f, t->comm, true);
	fputc('"', f);
}

/*
 * A family's metadata.  OpenMetrics names a counter's family without the
 * _total its samples carry; text 0.0.4 has no families apart from samples,
 * so there the metadata names the sample (x_total), else promtool sees a
 * counter with no samples and an untyped x_total with no help.  UNIT is
 * OpenMetrics only.
 */
static void family(FILE *f, enum ma_om_format fmt, const char *name, const char *type,
		   const char *unit, const char *help)
{
	bool om = fmt == MA_OM_OPENMETRICS;
	const char *sample_suffix = !om && strcmp(type, "counter") == 0 ? "_total" : "";

	fprintf(f, "# TYPE %s%s %s\n", name, sample_suffix, type);
	if (unit && om)
		fprintf(f, "# UNIT %s %s\n", name, unit);
	fprintf(f, "# HELP %s%s ", name, sample_suffix);
	put_escaped(f, help, om);
	fputc('\n', f);
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

static void write_gauges(FILE *f, enum ma_om_format fmt, const struct ma_om_target *t, size_t n)
{
	for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
		family(f, fmt, gauges[g].name, "gauge", "bytes", gauges[g].help);
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
static void write_bin_waste(FILE *f, enum ma_om_format fmt, const struct ma_om_target *t,
			    size_t n)
{
	family(f, fmt, "jemalloc_bin_waste_bytes", "gauge", "bytes",
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

static void write_exporter(FILE *f, enum ma_om_format fmt, const struct ma_om_target *t,
			   size_t n)
{
	family(f, fmt, "memattach_scrape_success", "gauge", NULL,
	       "1 if this scrape read the process's allocator, else 0.");
	for (size_t i = 0; i < n; i++) {
		start_sample(f, "memattach_scrape_success", &t[i]);
		fprintf(f, "} %d\n", t[i].ok ? 1 : 0);
	}
	family(f, fmt, "memattach_scrape_borrow_seconds", "gauge", "seconds",
	       "How long this scrape held a thread of the process stopped.");
	for (size_t i = 0; i < n; i++) {
		start_sample(f, "memattach_scrape_borrow_seconds", &t[i]);
		fprintf(f, "} %.9f\n", t[i].borrow_ns / 1e9);
	}
	family(f, fmt, "memattach_scrape_failures", "counter", NULL,
	       "Scrapes of the process that could not read its allocator.");
	for (size_t i = 0; i < n; i++) {
		start_sample(f, "memattach_scrape_failures_total", &t[i]);
		fprintf(f, "} %" PRIu64 "\n", t[i].failures);
	}
}

void ma_om_write_format(FILE *f, const struct ma_om_target *t, size_t n, bool exporter,
			enum ma_om_format fmt)
{
	write_gauges(f, fmt, t, n);
	write_bin_waste(f, fmt, t, n);
	if (exporter)
		write_exporter(f, fmt, t, n);
	if (fmt == MA_OM_OPENMETRICS)
		fputs("# EOF\n", f);
}

void ma_om_write(FILE *f, const struct ma_om_target *t, size_t n, bool exporter)
{
	ma_om_write_format(f, t, n, exporter, MA_OM_OPENMETRICS);
}
