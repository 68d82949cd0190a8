/*
 * stats_json.c - a small JSON tree parser, tolerant of jemalloc's
 * unescaped and truncated strings, and the extraction of the headline and
 * bin table from malloc_stats_print output.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ma_error.h"
#include "stats_json.h"
#include "input.h"

/* jemalloc formats "\"%s\"" into a 256-byte buffer: 254 bytes survive. */
#define JE_STR_CUT 254
#define MAX_DEPTH 64

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_OBJ, J_ARR };

/* Nodes refer to slices of the input; children are a linked list. */
struct jnode {
	enum jtype type;
	const char *key, *val; /* slices of the input */
	size_t keylen, vallen;
	bool b;
	int first, last, next; /* node indices, -1 for none */
};

struct jparser {
	const char *p, *end, *start;
	struct jnode *n;
	size_t nn, cap;
	int depth;
};

static int perr(struct jparser *jp, const char *what)
{
	if (jp->p >= jp->end)
		what = "document ends early (truncated file?)";
	return ma_fail(MA_E_FORMAT, "not valid JSON at byte %zu: %s", (size_t)(jp->p - jp->start),
		       what);
}

static void skip_ws(const char **p, const char *end)
{
	while (*p < end && isspace((unsigned char)**p))
		(*p)++;
}

static int new_node(struct jparser *jp, enum jtype t)
{
	if (jp->nn == jp->cap) {
		size_t cap = jp->cap ? jp->cap * 2 : 1024;
		struct jnode *n = realloc(jp->n, cap * sizeof(*n));

		if (!n)
			return ma_fail(MA_E_NOMEM, "out of memory");
		jp->n = n;
		jp->cap = cap;
	}
	memset(&jp->n[jp->nn], 0, sizeof(jp->n[0]));
	jp->n[jp->nn].type = t;
	jp->n[jp->nn].first = jp->n[jp->nn].last = jp->n[jp->nn].next = -1;
	return (int)jp->nn++;
}

/* True if Q..end starts like an object key: "ident" then ':'. */
static bool looks_like_key(const char *q, const char *end)
{
	if (q >= end || *q != '"')
		return false;
	for (q++; q < end && (isalnum((unsigned char)*q) || *q == '_' || *q == '.' || *q == '-'); q++)
		;
	if (q >= end || *q != '"')
		return false;
	q++;
	skip_ws(&q, end);
	return q < end && *q == ':';
}

/*
 * Could valid JSON continue at Q after a string value inside an object
 * (IN_ARRAY false) or an array?  Used to tell a closing quote from an
 * unescaped quote that is part of the value.
 */
static bool can_follow_value(const char *q, const char *end, bool in_array)
{
	skip_ws(&q, end);
	if (q >= end || *q == '}' || *q == ']')
		return true;
	if (*q != ',')
		return false;
	q++;
	skip_ws(&q, end);
	if (in_array)
		return q < end && strchr("\"{[-0123456789tfn", *q) != NULL;
	return looks_like_key(q, end);
}

/* A key: ordinary JSON string (jemalloc's keys are fixed identifiers). */
static int parse_key(struct jparser *jp, const char **s, size_t *len)
{
	const char *q;

	if (jp->p >= jp->end || *jp->p != '"')
		return perr(jp, "expected a key");
	for (q = jp->p + 1; q < jp->end && *q != '"'; q++)
		if (*q == '\\')
			q++;
	if (q >= jp->end) {
		jp->p = jp->end;
		return perr(jp, "unterminated key");
	}
	*s = jp->p + 1;
	*len = (size_t)(q - *s);
	jp->p = q + 1;
	return 0;
}

/* A string value; tolerant of unescaped quotes and jemalloc's cut. */
static int parse_string_value(struct jparser *jp, int node, bool in_array)
{
	const char *s = jp->p + 1, *q;

	for (q = s; q < jp->end; q++) {
		if ((size_t)(q - s) == JE_STR_CUT && *q != '"' && can_follow_value(q, jp->end, in_array))
			break; /* cut by jemalloc: no closing quote */
		if (*q == '\\' && q + 1 < jp->end) {
			q++;
			continue;
		}
		if (*q == '"' && can_follow_value(q + 1, jp->end, in_array))
			break;
	}
	if (q >= jp->end) {
		jp->p = jp->end;
		return perr(jp, "unterminated string");
	}
	jp->n[node].val = s;
	jp->n[node].vallen = (size_t)(q - s);
	jp->p = *q == '"' ? q + 1 : q;
	return 0;
}

static int parse_value(struct jparser *jp, int *out, bool in_array);

/* Object or array; children linked in order. */
static int parse_container(struct jparser *jp, int node, bool is_obj)
{
	char close = is_obj ? '}' : ']';
	int rc, child;

	if (++jp->depth > MAX_DEPTH)
		return perr(jp, "nested too deeply");
	jp->p++;
	skip_ws(&jp->p, jp->end);
	if (jp->p < jp->end && *jp->p == close) {
		jp->p++;
		jp->depth--;
		return 0;
	}
	for (;;) {
		const char *key = NULL;
		size_t keylen = 0;

		skip_ws(&jp->p, jp->end);
		if (is_obj) {
			if ((rc = parse_key(jp, &key, &keylen)))
				return rc;
			skip_ws(&jp->p, jp->end);
			if (jp->p >= jp->end || *jp->p != ':')
				return perr(jp, "expected ':'");
			jp->p++;
		}
		if ((rc = parse_value(jp, &child, !is_obj)))
			return rc;
		jp->n[child].key = key;
		jp->n[child].keylen = keylen;
		if (jp->n[node].last >= 0)
			jp->n[jp->n[node].last].next = child;
		else
			jp->n[node].first = child;
		jp->n[node].last = child;
		skip_ws(&jp->p, jp->end);
		if (jp->p < jp->end && *jp->p == ',') {
			jp->p++;
			continue;
		}
		if (jp->p < jp->end && *jp->p == close) {
			jp->p++;
			jp->depth--;
			return 0;
		}
		return perr(jp, jp->p >= jp->end ? "document ends early (truncated file?)"
						  : "expected ',' or a closing bracket");
	}
}

static int parse_value(struct jparser *jp, int *out, bool in_array)
{
	const char *q;
	int node, rc;

	skip_ws(&jp->p, jp->end);
	if (jp->p >= jp->end)
		return perr(jp, "document ends early (truncated file?)");
	switch (*jp->p) {
	case '{':
	case '[':
		if ((node = new_node(jp, *jp->p == '{' ? J_OBJ : J_ARR)) < 0)
			return node;
		*out = node;
		return parse_container(jp, node, *jp->p == '{');
	case '"':
		if ((node = new_node(jp, J_STR)) < 0)
			return node;
		*out = node;
		return parse_string_value(jp, node, in_array);
	}
	if (jp->end - jp->p >= 4 && memcmp(jp->p, "true", 4) == 0) {
		if ((node = new_node(jp, J_BOOL)) < 0)
			return node;
		jp->n[node].b = true;
		jp->p += 4;
	} else if (jp->end - jp->p >= 5 && memcmp(jp->p, "false", 5) == 0) {
		if ((node = new_node(jp, J_BOOL)) < 0)
			return node;
		jp->p += 5;
	} else if (jp->end - jp->p >= 4 && memcmp(jp->p, "null", 4) == 0) {
		if ((node = new_node(jp, J_NULL)) < 0)
			return node;
		jp->p += 4;
	} else if (*jp->p == '-' || isdigit((unsigned char)*jp->p)) {
		if ((node = new_node(jp, J_NUM)) < 0)
			return node;
		for (q = jp->p + 1; q < jp->end && strchr("0123456789.eE+-", *q); q++)
			;
		jp->n[node].val = jp->p;
		jp->n[node].vallen = (size_t)(q - jp->p);
		jp->p = q;
	} else {
		return perr(jp, "unexpected character");
	}
	*out = node;
	rc = 0;
	return rc;
}

/* ---- lookups ---- */

struct jdoc {
	struct jnode *n;
};

static int child(const struct jdoc *d, int node, const char *key)
{
	size_t kl = strlen(key);

	if (node < 0 || d->n[node].type != J_OBJ)
		return -1;
	for (int c = d->n[node].first; c >= 0; c = d->n[c].next)
		if (d->n[c].keylen == kl && memcmp(d->n[c].key, key, kl) == 0)
			return c;
	return -1;
}

/* Follow a path of keys separated by '/' (keys may contain dots). */
static int path(const struct jdoc *d, int node, const char *p)
{
	char key[64];

	while (node >= 0 && *p) {
		size_t l = strcspn(p, "/");

		if (l >= sizeof(key))
			return -1;
		memcpy(key, p, l);
		key[l] = '\0';
		node = child(d, node, key);
		p += l + (p[l] == '/');
	}
	return node;
}

static size_t count(const struct jdoc *d, int arr)
{
	size_t k = 0;

	for (int c = arr >= 0 ? d->n[arr].first : -1; c >= 0; c = d->n[c].next)
		k++;
	return k;
}

/* Numeric value of NODE; false if it is not an integer. */
static bool num_i64(const struct jdoc *d, int node, int64_t *v, uint64_t *u)
{
	char buf[32];
	char *e;

	if (node < 0 || d->n[node].type != J_NUM || d->n[node].vallen >= sizeof(buf))
		return false;
	memcpy(buf, d->n[node].val, d->n[node].vallen);
	buf[d->n[node].vallen] = '\0';
	errno = 0;
	if (buf[0] == '-') {
		*v = strtoll(buf, &e, 10);
		*u = 0;
	} else {
		*u = strtoull(buf, &e, 10);
		*v = (int64_t)*u;
	}
	return !errno && !*e;
}

static bool get_u64(const struct jdoc *d, int node, const char *p, uint64_t *out)
{
	int64_t v;

	return num_i64(d, path(d, node, p), &v, out);
}

static void opt_bool(const struct jdoc *d, int node, const char *p, bool *out)
{
	int n = path(d, node, p);

	if (n >= 0 && d->n[n].type == J_BOOL)
		*out = d->n[n].b;
}

static void opt_i64(const struct jdoc *d, int node, const char *p, int64_t *out)
{
	uint64_t u;

	num_i64(d, path(d, node, p), out, &u);
}

/* ---- extraction ---- */

/* NEED_ALL: every headline counter, else just allocated (the others stay 0). */
static int read_headline(const struct jdoc *d, int je, struct ma_je_stats *st, bool need_all)
{
	static const char *const names[] = { "allocated", "active", "resident",
					     "mapped",	  "retained", "metadata" };
	uint64_t *dst[] = { &st->allocated, &st->active,   &st->resident,
			    &st->mapped,    &st->retained, &st->metadata };
	int stats = child(d, je, "stats"), v;
	uint64_t u;
	int64_t i;

	if (stats < 0)
		return ma_fail(MA_E_FORMAT, "no \"stats\" object in the jemalloc document "
					    "(jemalloc built without statistics, or printed with 'g'?)");
	for (size_t k = 0; k < 6; k++)
		if (!get_u64(d, stats, names[k], dst[k]) && (need_all || k == 0))
			return ma_fail(MA_E_FORMAT, "no integer jemalloc.stats.%s", names[k]);
	v = child(d, je, "version");
	if (v >= 0 && d->n[v].type == J_STR) {
		size_t l = d->n[v].vallen < sizeof(st->version) - 1 ? d->n[v].vallen
								     : sizeof(st->version) - 1;

		memcpy(st->version, d->n[v].val, l);
		st->version[l] = '\0';
	}
	opt_bool(d, je, "opt/prof", &st->opt_prof);
	opt_bool(d, je, "opt/prof_active", &st->opt_prof_active);
	opt_bool(d, je, "prof/active", &st->prof_active);
	opt_bool(d, je, "opt/tcache", &st->opt_tcache);
	opt_bool(d, je, "opt/background_thread", &st->opt_background_thread);
	if (get_u64(d, je, "opt/lg_prof_sample", &u))
		st->lg_prof_sample = u;
	if (get_u64(d, je, "arenas/narenas", &u))
		st->narenas = (unsigned)u;
	if (get_u64(d, je, "stats/background_thread/num_threads", &u))
		st->background_thread = u > 0;
	i = 0;
	opt_i64(d, je, "opt/dirty_decay_ms", &i);
	st->dirty_decay_ms = i;
	i = 0;
	opt_i64(d, je, "opt/muzzy_decay_ms", &i);
	st->muzzy_decay_ms = i;
	return 0;
}

static int read_bin_constants(const struct jdoc *d, int je, struct ma_bin_table *t)
{
	int arr = path(d, je, "arenas/bin");

	if (arr < 0 || d->n[arr].type != J_ARR || count(d, arr) == 0)
		return ma_fail(MA_E_FORMAT, "no bin constants (jemalloc.arenas.bin): the stats were "
					    "printed without bin details; capture them with "
					    "'memattach stats-dump' (option \"J\")");
	t->nbins = count(d, arr);
	/* jemalloc has SC_NBINS small size classes: 36 with 4 KiB pages, a
	 * few hundred at most with the largest pages and smallest quantum. */
	if (t->nbins > MA_MAX_BINS)
		return ma_fail(MA_E_FORMAT, "jemalloc.arenas.bin lists %zu bins; jemalloc has at "
					    "most %d small size classes: this is not its output",
			       t->nbins, MA_MAX_BINS);
	t->bins = calloc(t->nbins, sizeof(*t->bins));
	if (!t->bins)
		return ma_fail(MA_E_NOMEM, "out of memory");
	/* Walk the array once: indexing per element would be quadratic. */
	int b = d->n[arr].first;

	for (size_t j = 0; j < t->nbins; j++, b = d->n[b].next) {
		if (!get_u64(d, b, "size", &t->bins[j].size) ||
		    !get_u64(d, b, "nregs", &t->bins[j].nregs) ||
		    !get_u64(d, b, "slab_size", &t->bins[j].slab_size))
			return ma_fail(MA_E_FORMAT, "jemalloc.arenas.bin[%zu] lacks size, nregs or "
						    "slab_size", j);
	}
	return 0;
}

/* Add one arena's (or the merged) per-bin counters and tcache bytes. */
static int add_arena(const struct jdoc *d, int arena, const char *name, struct ma_bin_table *t)
{
	int arr = child(d, arena, "bins");
	uint64_t u;

	if (arr < 0 || count(d, arr) < t->nbins)
		return ma_fail(MA_E_FORMAT, "\"stats.arenas\".%s has no per-bin counters for all "
					    "%zu bins (printed without 'b' details?)", name, t->nbins);
	int b = d->n[arr].first; /* count(arr) >= nbins: b stays valid */

	for (size_t j = 0; j < t->nbins; j++, b = d->n[b].next) {
		uint64_t r, s, nf;

		if (!get_u64(d, b, "curregs", &r) || !get_u64(d, b, "curslabs", &s) ||
		    !get_u64(d, b, "nonfull_slabs", &nf))
			return ma_fail(MA_E_FORMAT, "\"stats.arenas\".%s.bins[%zu] lacks curregs, "
						    "curslabs or nonfull_slabs", name, j);
		t->bins[j].curregs += r;
		t->bins[j].curslabs += s;
		t->bins[j].nonfull_slabs += nf;
	}
	if (get_u64(d, arena, "tcache_bytes", &u))
		t->tcache_bytes += u;
	return 0;
}

static bool all_digits(const char *s, size_t n)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return true;
}

static int read_bin_counters(const struct jdoc *d, int je, struct ma_bin_table *t)
{
	int sa = child(d, je, "stats.arenas"), merged, rc, used = 0;

	if (sa < 0)
		return ma_fail(MA_E_FORMAT, "no \"stats.arenas\" object: the stats were printed "
					    "without arena details; capture them with 'memattach "
					    "stats-dump'");
	if ((merged = child(d, sa, "merged")) >= 0)
		return add_arena(d, merged, "merged", t);
	/* One arena printed without 'a' has no merged entry: sum the arenas. */
	for (int c = d->n[sa].first; c >= 0; c = d->n[c].next) {
		char name[32];

		if (!all_digits(d->n[c].key, d->n[c].keylen) || d->n[c].keylen >= sizeof(name))
			continue;
		memcpy(name, d->n[c].key, d->n[c].keylen);
		name[d->n[c].keylen] = '\0';
		if ((rc = add_arena(d, c, name, t)))
			return rc;
		used++;
	}
	if (!used)
		return ma_fail(MA_E_FORMAT, "\"stats.arenas\" has neither \"merged\" nor numbered "
					    "arenas");
	return 0;
}

/*
 * Dirty and muzzy pages of all arenas (the merged entry, or the sum of the
 * numbered ones) and the page size; st->page stays 0 if any is missing.
 */
static void read_page_counts(const struct jdoc *d, int je, struct ma_je_stats *st)
{
	int sa = child(d, je, "stats.arenas"), merged;
	uint64_t page, dirty = 0, muzzy = 0;
	bool all = true;

	if (sa < 0 || !get_u64(d, je, "arenas/page", &page))
		return;
	if ((merged = child(d, sa, "merged")) >= 0) {
		all = get_u64(d, merged, "pdirty", &dirty) && get_u64(d, merged, "pmuzzy", &muzzy);
	} else {
		for (int c = d->n[sa].first; c >= 0 && all; c = d->n[c].next) {
			uint64_t pd, pm;

			if (!all_digits(d->n[c].key, d->n[c].keylen))
				continue;
			all = get_u64(d, c, "pdirty", &pd) && get_u64(d, c, "pmuzzy", &pm);
			dirty += all ? pd : 0;
			muzzy += all ? pm : 0;
		}
	}
	if (!all)
		return;
	st->pdirty = dirty;
	st->pmuzzy = muzzy;
	st->page = page;
}

int ma_stats_json_parse(const char *buf, size_t len, struct ma_je_stats *st,
			struct ma_bin_table *t)
{
	struct jparser jp = { buf, buf + len, buf, NULL, 0, 0, 0 };
	struct jdoc d;
	int root, je, rc;

	memset(st, 0, sizeof(*st));
	if (t)
		memset(t, 0, sizeof(*t));
	rc = parse_value(&jp, &root, false);
	if (!rc) {
		skip_ws(&jp.p, jp.end);
		while (jp.p < jp.end && *jp.p == '\0') /* a NUL-terminated buffer */
			jp.p++;
		if (jp.p < jp.end)
			rc = perr(&jp, "text after the document");
	}
	d.n = jp.n;
	if (!rc) {
		je = child(&d, root, "jemalloc");
		if (je < 0)
			rc = ma_fail(MA_E_FORMAT, "no top-level \"jemalloc\" object: not the JSON "
						  "output of jemalloc's malloc_stats_print");
	}
	if (!rc)
		rc = read_headline(&d, je, st, t != NULL);
	if (!rc)
		read_page_counts(&d, je, st);
	if (!rc && t)
		rc = read_bin_constants(&d, je, t);
	if (!rc && t)
		rc = read_bin_counters(&d, je, t);
	free(jp.n);
	if (rc && t)
		ma_bin_table_release(t);
	return rc;
}

int ma_stats_json_load(const char *p, struct ma_je_stats *st, struct ma_bin_table *t)
{
	struct ma_input in;
	int rc;

	if ((rc = ma_input_load(&in, p, "malloc_stats_print JSON", MA_MAX_STATS_JSON)))
		return rc;
	rc = ma_stats_json_parse(in.data, in.len, st, t);
	ma_input_release(&in);
	if (rc) {
		/* The parser's message does not know the file: name it. */
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", ma_errmsg());
		ma_err_clear();
		ma_fail(rc, "'%s': %s", p, msg);
	}
	return rc;
}
