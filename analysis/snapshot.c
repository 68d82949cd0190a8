/*
 * snapshot.c - read a snapshot directory back (manifest.json with a small
 * tolerant reader, bins from stats.json) and diff two of them.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ma_error.h"
#include "headline.h"
#include "input.h"
#include "snapshot.h"
#include "stats_json.h"

/* ---- manifest.json ---- */

#define MF_MAX_DEPTH 16
#define MF_PATH_MAX 128
#define MF_STR_MAX 4096

enum mf_kind { MF_STR, MF_U64, MF_I64, MF_HEAP };

/* Keys kept, by dotted path; REQ: the bit that must be seen, or 0. */
struct mf_field {
	const char *path;
	enum mf_kind kind;
	size_t off, size;
	unsigned req;
};

#define STR(p, f, r) { p, MF_STR, offsetof(struct ma_snap_manifest, f), \
		       sizeof(((struct ma_snap_manifest *)0)->f), r }
#define U64(p, f, r) { p, MF_U64, offsetof(struct ma_snap_manifest, f), sizeof(uint64_t), r }
#define I64(p, f, r) { p, MF_I64, offsetof(struct ma_snap_manifest, f), sizeof(int64_t), r }

static const struct mf_field fields[] = {
	STR("format", format, 1u << 0),
	U64("format_version", format_version, 1u << 1),
	I64("pid", pid, 0),
	STR("comm", comm, 0),
	STR("exe", exe, 0),
	STR("time", time, 0),
	I64("unix_time", unix_time, 0),
	STR("jemalloc_version", jemalloc_version, 0),
	U64("vm_rss", vm_rss, 1u << 2),
	U64("vm_hwm", vm_hwm, 1u << 3),
	U64("headline.allocated", allocated, 1u << 4),
	U64("headline.active", active, 1u << 5),
	U64("headline.resident", resident, 1u << 6),
	U64("headline.mapped", mapped, 1u << 7),
	U64("headline.retained", retained, 1u << 8),
	U64("headline.metadata", metadata, 1u << 9),
	U64("headline.tcache_bytes", tcache_bytes, 1u << 10),
	STR("files.stats", stats_file, 1u << 11),
	{ "files.heap", MF_HEAP, offsetof(struct ma_snap_manifest, heap_file),
	  sizeof(((struct ma_snap_manifest *)0)->heap_file), 1u << 12 },
	STR("heap_skipped", heap_skipped, 0),
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
#define MF_REQUIRED ((1u << 13) - 1)

#undef STR
#undef U64
#undef I64

struct mreader {
	const char *p, *start, *end;
	char path[MF_PATH_MAX];
	char str[MF_STR_MAX];
	int depth;
	struct ma_snap_manifest *m;
};

/* A scalar token: what set_field needs to know about it. */
struct mscalar {
	enum { SC_STR, SC_NUM, SC_NULL, SC_OTHER } type;
	const char *s; /* SC_STR */
	bool neg, integral;
	uint64_t u;
};

static int merr(struct mreader *r, const char *what)
{
	return ma_fail(MA_E_FORMAT, "manifest.json is not valid JSON at byte %zu: %s",
		       (size_t)(r->p - r->start), r->p >= r->end ? "document ends early" : what);
}

static void skip_ws(struct mreader *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static const struct mf_field *field_at(const char *path)
{
	for (size_t i = 0; i < NFIELDS; i++)
		if (strcmp(fields[i].path, path) == 0)
			return &fields[i];
	return NULL;
}

static void set_field(struct mreader *r, const struct mscalar *v)
{
	const struct mf_field *f = field_at(r->path);
	char *at;

	if (!f)
		return;
	at = (char *)r->m + f->off;
	if ((f->kind == MF_STR || f->kind == MF_HEAP) && v->type == SC_STR) {
		snprintf(at, f->size, "%s", v->s);
		if (f->kind == MF_HEAP)
			r->m->has_heap = true;
	} else if (f->kind == MF_HEAP && v->type == SC_NULL) {
		at[0] = '\0';
		r->m->has_heap = false;
	} else if (f->kind == MF_U64 && v->type == SC_NUM && !v->neg && v->integral) {
		memcpy(at, &v->u, sizeof(v->u));
	} else if (f->kind == MF_I64 && v->type == SC_NUM && v->integral && v->u <= INT64_MAX) {
		int64_t i = v->neg ? -(int64_t)v->u : (int64_t)v->u;

		memcpy(at, &i, sizeof(i));
	} else {
		return; /* wrong type: as if absent */
	}
	r->m->seen |= f->req;
}

static int hex4(const char *p, unsigned *out)
{
	*out = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
			     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
						    : 16u;
		if (d == 16)
			return -1;
		*out = *out * 16 + d;
	}
	return 0;
}

/* The escape after the backslash at r->p, as one byte in *C. */
static int unescape(struct mreader *r, char *c)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e;
	unsigned u;

	if (++r->p >= r->end)
		return merr(r, "");
	if (*r->p == 'u') {
		if (r->end - r->p < 5 || hex4(r->p + 1, &u))
			return merr(r, "bad \\u escape");
		r->p += 5;
		*c = u < 0x80 ? (char)u : '?'; /* the manifest's strings are ASCII */
		return 0;
	}
	if (!*r->p || !(e = strchr(from, *r->p)))
		return merr(r, "bad escape");
	*c = to[e - from];
	r->p++;
	return 0;
}

/* A string at r->p into BUF (cut at SIZE - 1 bytes). */
static int read_string(struct mreader *r, char *buf, size_t size)
{
	size_t n = 0;
	char c = 0;

	r->p++; /* the opening quote */
	while (r->p < r->end && *r->p != '"') {
		if ((unsigned char)*r->p < 0x20)
			return merr(r, "control character in a string");
		if (*r->p != '\\')
			c = *r->p++;
		else if (unescape(r, &c))
			return MA_E_FORMAT;
		if (n + 1 < size)
			buf[n++] = c;
	}
	if (r->p >= r->end)
		return merr(r, "");
	r->p++;
	buf[n] = '\0';
	return 0;
}

static int read_number(struct mreader *r, struct mscalar *v)
{
	const char *q = r->p;

	v->type = SC_NUM;
	v->neg = q < r->end && *q == '-';
	q += v->neg;
	if (q >= r->end || *q < '0' || *q > '9')
		return merr(r, "unexpected character");
	v->integral = true;
	for (v->u = 0; q < r->end && *q >= '0' && *q <= '9'; q++) {
		if (v->u > (UINT64_MAX - (uint64_t)(*q - '0')) / 10)
			v->integral = false; /* too large: kept as absent */
		v->u = v->u * 10 + (uint64_t)(*q - '0');
	}
	for (; q < r->end && strchr(".eE+-0123456789", *q) && *q; q++)
		v->integral = false;
	r->p = q;
	return 0;
}

static int read_literal(struct mreader *r, struct mscalar *v)
{
	static const char *const words[] = { "null", "true", "false" };

	for (int i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);

		if ((size_t)(r->end - r->p) >= n && memcmp(r->p, words[i], n) == 0) {
			r->p += n;
			v->type = i == 0 ? SC_NULL : SC_OTHER;
			return 0;
		}
	}
	return read_number(r, v);
}

static int read_value(struct mreader *r);

/* Object or array at r->p; object members extend the dotted path. */
static int read_container(struct mreader *r)
{
	bool obj = *r->p == '{';
	char close = obj ? '}' : ']';
	size_t plen = strlen(r->path);
	int rc;

	if (++r->depth > MF_MAX_DEPTH)
		return merr(r, "nested too deeply");
	r->p++;
	skip_ws(r);
	if (r->p < r->end && *r->p == close) {
		r->p++;
		r->depth--;
		return 0;
	}
	for (;;) {
		skip_ws(r);
		if (obj) {
			if (r->p >= r->end || *r->p != '"')
				return merr(r, "expected a key");
			if ((rc = read_string(r, r->str, sizeof(r->str))))
				return rc;
			snprintf(r->path + plen, sizeof(r->path) - plen, "%s%s", plen ? "." : "",
				 r->str);
			skip_ws(r);
			if (r->p >= r->end || *r->p != ':')
				return merr(r, "expected ':'");
			r->p++;
		} else {
			snprintf(r->path + plen, sizeof(r->path) - plen, "[]");
		}
		if ((rc = read_value(r)))
			return rc;
		r->path[plen] = '\0';
		skip_ws(r);
		if (r->p < r->end && *r->p == ',') {
			r->p++;
			continue;
		}
		if (r->p < r->end && *r->p == close) {
			r->p++;
			r->depth--;
			return 0;
		}
		return merr(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static int read_value(struct mreader *r)
{
	struct mscalar v = { .type = SC_OTHER };
	int rc;

	skip_ws(r);
	if (r->p >= r->end)
		return merr(r, "");
	if (*r->p == '{' || *r->p == '[')
		return read_container(r);
	if (*r->p == '"') {
		if ((rc = read_string(r, r->str, sizeof(r->str))))
			return rc;
		v.type = SC_STR;
		v.s = r->str;
	} else if ((rc = read_literal(r, &v))) {
		return rc;
	}
	set_field(r, &v);
	return 0;
}

static const char *first_missing(unsigned seen)
{
	for (size_t i = 0; i < NFIELDS; i++)
		if (fields[i].req && !(seen & fields[i].req))
			return fields[i].path;
	return "?";
}

int ma_snap_manifest_parse(const char *buf, size_t len, struct ma_snap_manifest *m)
{
	struct mreader *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return ma_fail(MA_E_NOMEM, "out of memory");
	memset(m, 0, sizeof(*m));
	r->p = r->start = buf;
	r->end = buf + len;
	r->m = m;
	skip_ws(r);
	if (r->p < r->end && *r->p != '{')
		rc = merr(r, "not a JSON object");
	else if (!(rc = read_value(r)) && (skip_ws(r), r->p < r->end))
		rc = merr(r, "text after the document");
	free(r);
	if (rc)
		return rc;
	if (!(m->seen & 1u))
		return ma_fail(MA_E_FORMAT, "manifest.json has no \"format\" key: not written by "
					    "'memattach snapshot'");
	if (strcmp(m->format, MA_SNAPSHOT_FORMAT) != 0)
		return ma_fail(MA_E_FORMAT, "manifest.json has format \"%s\", expected \"%s\"",
			       m->format, MA_SNAPSHOT_FORMAT);
	if (!(m->seen & 2u) || m->format_version != MA_SNAPSHOT_VERSION)
		return ma_fail(MA_E_FORMAT, "manifest.json has format_version %llu; this memattach "
					    "reads version %d",
			       (unsigned long long)m->format_version, MA_SNAPSHOT_VERSION);
	if ((m->seen & MF_REQUIRED) != MF_REQUIRED)
		return ma_fail(MA_E_FORMAT, "manifest.json has no valid \"%s\"", first_missing(m->seen));
	return 0;
}

/* ---- the directory ---- */

/* "a, b, c (and N more)" or "nothing": what DIR holds, for a message. */
static void list_dir(const char *dir, char *buf, size_t size)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t shown = 0, more = 0, used = 0;

	buf[0] = '\0';
	while (d && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (shown == 5 || used + strlen(e->d_name) + 3 >= size) {
			more++;
			continue;
		}
		used += (size_t)snprintf(buf + used, size - used, "%s%s", shown ? ", " : "",
					 e->d_name);
		shown++;
	}
	if (d)
		closedir(d);
	if (!shown)
		snprintf(buf, size, "nothing");
	else if (more && used < size)
		snprintf(buf + used, size - used, " (and %zu more)", more);
}

static int load_manifest(struct ma_snapshot *s)
{
	char path[4096], held[512];
	struct ma_input in;
	int rc;

	snprintf(path, sizeof(path), "%s/manifest.json", s->dir);
	if (access(path, F_OK) != 0 && errno == ENOENT) {
		list_dir(s->dir, held, sizeof(held));
		return ma_fail(MA_E_FORMAT, "'%s' is not a memattach snapshot: no manifest.json "
					    "(it holds %s)",
			       s->dir, held);
	}
	if ((rc = ma_input_load(&in, path, "snapshot manifest", MA_MAX_MANIFEST)))
		return rc;
	rc = ma_snap_manifest_parse(in.data, in.len, &s->m);
	ma_input_release(&in);
	return rc;
}

static bool plain_name(const char *name)
{
	return name[0] && !strchr(name, '/') && strcmp(name, "..") != 0;
}

int ma_snapshot_load(const char *dir, struct ma_snapshot *s)
{
	char path[4096];
	DIR *d;
	int rc;

	memset(s, 0, sizeof(*s));
	s->dir = dir;
	if (!(d = opendir(dir)))
		return ma_fail(MA_E_IO, "cannot open snapshot directory '%s': %s", dir,
			       strerror(errno));
	closedir(d);
	if ((rc = load_manifest(s)))
		return rc;
	if (!plain_name(s->m.stats_file) || (s->m.has_heap && !plain_name(s->m.heap_file)))
		return ma_fail(MA_E_FORMAT, "%s/manifest.json: file names must be plain names in "
					    "the directory",
			       dir);
	snprintf(path, sizeof(path), "%s/%s", dir, s->m.stats_file);
	if ((rc = ma_stats_json_load(path, &s->st, &s->bins)))
		return rc;
	if (s->m.has_heap)
		snprintf(s->heap_path, sizeof(s->heap_path), "%s/%s", dir, s->m.heap_file);
	return 0;
}

void ma_snapshot_release(struct ma_snapshot *s)
{
	ma_bin_table_release(&s->bins);
}

/* ---- differences ---- */

static void headline_row(struct ma_snap_headline_row *r, const char *key, const char *label,
			 uint64_t a, uint64_t b)
{
	r->key = key;
	r->label = label;
	r->a = a;
	r->b = b;
	r->delta = (int64_t)(b - a);
	r->has_pct = a != 0;
	r->pct = a ? 100.0 * ((double)b - (double)a) / (double)a : 0;
}

void ma_snap_headline_diff(const struct ma_snap_manifest *a, const struct ma_snap_manifest *b,
			   struct ma_snap_headline_row rows[MA_SNAP_NHEADLINE])
{
	struct ma_snap_headline_row *r = rows;

	headline_row(r++, "allocated", "allocated", a->allocated, b->allocated);
	headline_row(r++, "active", "active", a->active, b->active);
	headline_row(r++, "resident", "resident", a->resident, b->resident);
	headline_row(r++, "mapped", "mapped", a->mapped, b->mapped);
	headline_row(r++, "retained", "retained", a->retained, b->retained);
	headline_row(r++, "metadata", "metadata", a->metadata, b->metadata);
	headline_row(r++, "tcache_bytes", "tcache_bytes", a->tcache_bytes, b->tcache_bytes);
	headline_row(r++, "vm_rss", "VmRSS", a->vm_rss, b->vm_rss);
	headline_row(r++, "vm_hwm", "VmHWM", a->vm_hwm, b->vm_hwm);
	headline_row(r++, "page_slack", "page_slack", ma_page_slack(a->resident, a->active),
		     ma_page_slack(b->resident, b->active));
	headline_row(r, "slab_waste", "slab_waste", ma_slab_waste(a->active, a->allocated),
		     ma_slab_waste(b->active, b->allocated));
}

/* One side of a bin pair: its counters and row, or zeros. */
static void bin_side(const struct ma_bin_table *t, size_t i, bool have, uint64_t *curregs,
		     uint64_t *curslabs, uint64_t *waste, double *util)
{
	struct ma_bin_row row;

	*curregs = *curslabs = *waste = 0;
	*util = 0;
	if (!have)
		return;
	ma_bins_row(t, i, &row);
	*curregs = t->bins[i].curregs;
	*curslabs = t->bins[i].curslabs;
	*waste = row.waste;
	*util = row.util;
}

static void pair(const struct ma_bin_table *a, size_t i, bool ha, const struct ma_bin_table *b,
		 size_t k, bool hb, struct ma_snap_bin_delta *d)
{
	memset(d, 0, sizeof(*d));
	d->size = ha ? a->bins[i].size : b->bins[k].size;
	bin_side(a, i, ha, &d->curregs_a, &d->curslabs_a, &d->waste_a, &d->util_a);
	bin_side(b, k, hb, &d->curregs_b, &d->curslabs_b, &d->waste_b, &d->util_b);
	d->curregs_delta = (int64_t)(d->curregs_b - d->curregs_a);
	d->curslabs_delta = (int64_t)(d->curslabs_b - d->curslabs_a);
	d->waste_delta = (int64_t)(d->waste_b - d->waste_a);
}

static uint64_t mag(int64_t v)
{
	return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

static int cmp_waste_delta(const void *x, const void *y)
{
	const struct ma_snap_bin_delta *a = x, *b = y;

	if (mag(a->waste_delta) != mag(b->waste_delta))
		return mag(a->waste_delta) > mag(b->waste_delta) ? -1 : 1;
	return a->size < b->size ? -1 : a->size > b->size;
}

static int cmp_bin_size(const void *x, const void *y)
{
	const struct ma_bin *a = x, *b = y;

	return a->size < b->size ? -1 : a->size > b->size;
}

/* A copy of T sorted by size (bin order is by size already; not trusted). */
static int sorted_copy(const struct ma_bin_table *t, struct ma_bin_table *out)
{
	*out = *t;
	out->bins = malloc((t->nbins + 1) * sizeof(*t->bins));
	if (!out->bins)
		return ma_fail(MA_E_NOMEM, "out of memory");
	if (t->nbins)
		memcpy(out->bins, t->bins, t->nbins * sizeof(*t->bins));
	qsort(out->bins, t->nbins, sizeof(*t->bins), cmp_bin_size);
	return 0;
}

static size_t merge_bins(const struct ma_bin_table *a, const struct ma_bin_table *b,
			 struct ma_snap_bin_delta *d)
{
	size_t i = 0, k = 0, n = 0;

	while (i < a->nbins || k < b->nbins) {
		int c = i == a->nbins	? 1
			: k == b->nbins ? -1
					: cmp_bin_size(&a->bins[i], &b->bins[k]);

		pair(a, i, c <= 0, b, k, c >= 0, &d[n]);
		i += c <= 0;
		k += c >= 0;
		if (d[n].waste_delta || d[n].curregs_delta)
			n++;
	}
	return n;
}

int ma_snap_bins_diff(const struct ma_bin_table *a, const struct ma_bin_table *b,
		      struct ma_snap_bin_delta **out, size_t *n)
{
	struct ma_bin_table sa = { 0 }, sb = { 0 };
	int rc = 0;

	*out = NULL;
	*n = 0;
	if ((rc = sorted_copy(a, &sa)) || (rc = sorted_copy(b, &sb)))
		goto done;
	*out = malloc((a->nbins + b->nbins + 1) * sizeof(**out));
	if (!*out) {
		rc = ma_fail(MA_E_NOMEM, "out of memory");
		goto done;
	}
	*n = merge_bins(&sa, &sb, *out);
	qsort(*out, *n, sizeof(**out), cmp_waste_delta);
done:
	free(sa.bins);
	free(sb.bins);
	return rc;
}
