/*
 * cmd_diff.c - compare two heap dumps (possibly of different binaries) by
 * allocation site: growers and shrinkers; or two snapshot directories
 * (memattach snapshot): headline counters, bins, then their heap dumps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmdutil.h"
#include "profdiff.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "ma_error.h"
#include "profcmd.h"
#include "snapshot.h"

#define HEAP_TOP 15 /* growers and shrinkers shown by default */
#define BINS_TOP 10 /* bin rows shown by default */

static const char about[] =
	"Compare two jemalloc heap dumps (e.g. before and after a change, from\n"
	"two different builds): allocation sites are aligned by their demangled\n"
	"name, which survives unrelated rebuilds, and listed by growth (B - A)\n"
	"and by shrinkage, with each side's scaled bytes and scale (scale ~1: a\n"
	"few large blocks; >>1: many small ones, look a frame or two up).\n\n"
	"A and B may instead be two snapshot directories (memattach snapshot PID\n"
	"-o DIR): then the report is the headline counters (allocated, active,\n"
	"resident, mapped, retained, metadata, tcache_bytes, VmRSS, VmHWM,\n"
	"page_slack = resident - active, slab_waste = active - allocated) with\n"
	"A, B, B - A and the change in %; the small bins whose waste or live\n"
	"regions changed, by |waste change|; and the diff of the two heap dumps\n"
	"as above (or why a snapshot has none: taken without prof:true).  A\n"
	"snapshot directory and a dump file cannot be mixed: pass DIR/heap.heap.\n";

#define STR_(x) #x
#define STR(x) STR_(x)

static void json_side(struct ma_json *j, const char *key, struct ma_profbundle *b)
{
	ma_json_obj_open(j, key);
	ma_json_str(j, "dump", b->path);
	ma_json_u64(j, "period", b->hp.period);
	ma_json_u64(j, "total_raw_bytes", b->prof.total_raw_bytes);
	ma_json_u64(j, "total_scaled_bytes", (uint64_t)llround(b->prof.total_bytes));
	ma_json_obj_close(j);
}

/* One site's two sides, each key KEY_A or KEY_B made from the field's name (as bins: waste_a). */
static void json_site_sides(struct ma_json *j, const struct ma_site_delta *s, const char *key_a,
			    const char *key_b)
{
	const char *keys[2] = { key_a, key_b };
	char k[40];

	for (int side = 0; side < 2; side++) {
		double bytes = side ? s->b : s->a, objs = side ? s->b_objs : s->a_objs;
		uint64_t raw = side ? s->b_raw : s->a_raw;

		snprintf(k, sizeof(k), keys[side], "scaled_bytes");
		ma_json_u64(j, k, (uint64_t)llround(bytes));
		snprintf(k, sizeof(k), keys[side], "raw_bytes");
		ma_json_u64(j, k, raw);
		snprintf(k, sizeof(k), keys[side], "objects");
		ma_json_u64(j, k, (uint64_t)llround(objs));
		snprintf(k, sizeof(k), keys[side], "scale");
		ma_json_double(j, k, ma_site_scale(bytes, raw));
	}
}

static void json_sites(struct ma_json *j, const char *key, struct ma_site_delta *d, size_t from, size_t n,
		       int step)
{
	ma_json_arr_open(j, key);
	for (size_t k = 0; k < n; k++) {
		struct ma_site_delta *s = &d[(long)from + step * (long)k];

		ma_json_obj_open(j, NULL);
		ma_json_str(j, "leaf", s->name);
		ma_json_i64(j, "delta_bytes", (int64_t)llround(s->b - s->a));
		json_site_sides(j, s, "%s_a", "%s_b");
		/* The names before 0.10 (a_scaled_bytes...), kept for one release. */
		json_site_sides(j, s, "a_%s", "b_%s");
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

static void table_sites(const char *title, struct ma_site_delta *d, size_t from, size_t n, int step)
{
	char s1[32], s2[32], s3[32];

	printf("\n%s:\n%11s %11s %11s %8s %8s  %s\n", title, "delta", "A", "B", "scale A", "scale B",
	       "allocation site");
	for (size_t k = 0; k < n; k++) {
		struct ma_site_delta *s = &d[(long)from + step * (long)k];

		printf("%11s %11s %11s %8.1f %8.1f  %s\n",
		       ma_fmt_scaled_bytes(s1, sizeof(s1), s->b - s->a, false), ma_fmt_scaled_bytes(s2, sizeof(s2), s->a, false),
		       ma_fmt_scaled_bytes(s3, sizeof(s3), s->b, false), ma_site_scale(s->a, s->a_raw),
		       ma_site_scale(s->b, s->b_raw), ma_printable(s->name));
	}
	if (!n)
		printf("  (none)\n");
}


/* ---- two dumps ---- */

struct ddiff {
	struct ma_profbundle a, b;
	struct ma_site_diff sd;
};

static void ddiff_release(struct ddiff *dd)
{
	ma_site_diff_release(&dd->sd);
	ma_profbundle_release(&dd->a);
	ma_profbundle_release(&dd->b);
	memset(dd, 0, sizeof(*dd));
}

/* Load dumps PA and PB and compute the sites; 0 or an exit status (printed). */
static int ddiff_load(struct ma_profcmd *c, const char *pa, const char *pb, const char *const bin[2],
		      long top, struct ddiff *dd)
{
	const char *both = c->sym.binary;
	struct ma_site_total *sa = NULL, *sb = NULL;
	size_t na = 0, nb = 0;
	int rc;

	memset(dd, 0, sizeof(*dd));
	c->sym.binary = bin[0] ? bin[0] : both;
	rc = ma_profcmd_load(c, &dd->a, pa);
	c->sym.binary = bin[1] ? bin[1] : both;
	if (!rc)
		rc = ma_profcmd_load(c, &dd->b, pb);
	c->sym.binary = both;
	if (rc)
		return rc;
	if (ma_profile_site_totals(&dd->a.prof, &sa, &na) ||
	    ma_profile_site_totals(&dd->b.prof, &sb, &nb) ||
	    ma_site_diff(sa, na, sb, nb, top > 0 ? (size_t)top : 0, &dd->sd))
		rc = ma_cmd_error(c->cmd, MA_EXIT_FAIL, "out of memory");
	free(sa);
	free(sb);
	return rc;
}

/* The dump diff as a JSON object (KEY NULL: the top-level value). */
static void ddiff_json(struct ma_json *j, const char *key, struct ddiff *dd)
{
	ma_json_obj_open(j, key);
	json_side(j, "a", &dd->a);
	json_side(j, "b", &dd->b);
	ma_json_i64(j, "delta_bytes", (int64_t)llround(dd->b.prof.total_bytes - dd->a.prof.total_bytes));
	json_sites(j, "growers", dd->sd.d, 0, dd->sd.ngrow, 1);
	json_sites(j, "shrinkers", dd->sd.d, dd->sd.n ? dd->sd.n - 1 : 0, dd->sd.nshrink, -1);
	ma_json_obj_close(j);
}

static void print_dump_side(const char *tag, struct ma_profbundle *b)
{
	char s1[32], s2[32];

	ma_print_wrapped(2, "%s %s: %s unsampled (%s raw, period %llu)\n", tag,
			 ma_printable(b->path),
			 ma_fmt_scaled_bytes(s1, sizeof(s1), b->prof.total_bytes, false),
			 ma_fmt_scaled_bytes(s2, sizeof(s2), (double)b->prof.total_raw_bytes,
					     false),
			 (unsigned long long)b->hp.period);
}

static void ddiff_print(struct ddiff *dd)
{
	double ta = dd->a.prof.total_bytes, tb = dd->b.prof.total_bytes;
	char s[32], pct[32];

	print_dump_side("A", &dd->a);
	print_dump_side("B", &dd->b);
	/* A change from nothing has no percentage: it is new. */
	if (ta > 0)
		snprintf(pct, sizeof(pct), "%+.1f%%", 100 * (tb - ta) / ta);
	else
		snprintf(pct, sizeof(pct), "%s", tb > 0 ? "new" : "no change");
	printf("B - A: %s (%s)\n", ma_fmt_scaled_bytes(s, sizeof(s), tb - ta, false), pct);
	table_sites("growers", dd->sd.d, 0, dd->sd.ngrow, 1);
	table_sites("shrinkers", dd->sd.d, dd->sd.n ? dd->sd.n - 1 : 0, dd->sd.nshrink, -1);
}

static int diff_dumps(struct ma_profcmd *c, const char *const path[2], const char *const bin[2])
{
	struct ddiff dd;
	int rc;

	if ((rc = ddiff_load(c, path[0], path[1], bin, c->top ? c->top : HEAP_TOP, &dd))) {
		ddiff_release(&dd);
		return rc;
	}
	if (c->json) {
		struct ma_json j;

		ma_json_init(&j, stdout);
		ddiff_json(&j, NULL, &dd);
		ma_json_end(&j);
	} else {
		ddiff_print(&dd);
	}
	ddiff_release(&dd);
	return 0;
}

/* ---- two snapshot directories ---- */

struct sdiff {
	struct ma_snapshot a, b;
	struct ma_snap_headline_row head[MA_SNAP_NHEADLINE];
	struct ma_snap_bin_delta *bins;
	size_t nbins;
	long bins_top;
	bool heap;
	struct ddiff dd;
	char heap_skipped[1200];
};

static void sdiff_release(struct sdiff *sd)
{
	ma_snapshot_release(&sd->a);
	ma_snapshot_release(&sd->b);
	free(sd->bins);
	ddiff_release(&sd->dd);
}

/* Why the heap part is missing ("" if both snapshots have a dump). */
static void heap_skip_reason(struct sdiff *sd)
{
	const struct ma_snapshot *s[2] = { &sd->a, &sd->b };
	size_t n = 0;

	sd->heap_skipped[0] = '\0';
	for (int i = 0; i < 2; i++) {
		if (s[i]->m.has_heap)
			continue;
		n += (size_t)snprintf(sd->heap_skipped + n, sizeof(sd->heap_skipped) - n,
				      "%sno heap dump in %s (%s): %s", n ? "; " : "", i ? "B" : "A",
				      s[i]->dir,
				      s[i]->m.heap_skipped[0] ? s[i]->m.heap_skipped : "not recorded why");
		if (n >= sizeof(sd->heap_skipped))
			break;
	}
}

static int sdiff_load(struct ma_profcmd *c, const char *const path[2], const char *const bin[2],
		      struct sdiff *sd)
{
	struct ma_snapshot *s[2] = { &sd->a, &sd->b };

	for (int i = 0; i < 2; i++)
		if (ma_snapshot_load(path[i], s[i]))
			return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	ma_snap_headline_diff(&sd->a.m, &sd->b.m, sd->head);
	if (ma_snap_bins_diff(&sd->a.bins, &sd->b.bins, &sd->bins, &sd->nbins))
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	sd->bins_top = c->top ? c->top : BINS_TOP;
	heap_skip_reason(sd);
	if (sd->heap_skipped[0])
		return 0;
	sd->heap = true;
	return ddiff_load(c, sd->a.heap_path, sd->b.heap_path, bin, c->top ? c->top : HEAP_TOP,
			  &sd->dd);
}

static void json_snap_side(struct ma_json *j, const char *key, const struct ma_snapshot *s)
{
	ma_json_obj_open(j, key);
	ma_json_str(j, "dir", s->dir);
	ma_json_i64(j, "pid", s->m.pid);
	ma_json_str(j, "comm", s->m.comm);
	ma_json_str(j, "exe", s->m.exe);
	ma_json_str(j, "time", s->m.time);
	ma_json_i64(j, "unix_time", s->m.unix_time);
	ma_json_str(j, "jemalloc_version", s->m.jemalloc_version);
	if (s->m.has_heap) {
		ma_json_str(j, "heap", s->heap_path);
		ma_json_null(j, "heap_skipped");
	} else {
		ma_json_null(j, "heap");
		ma_json_str(j, "heap_skipped", s->m.heap_skipped);
	}
	ma_json_obj_close(j);
}

static void json_headline(struct ma_json *j, const struct sdiff *sd)
{
	ma_json_arr_open(j, "headline");
	for (int i = 0; i < MA_SNAP_NHEADLINE; i++) {
		const struct ma_snap_headline_row *r = &sd->head[i];

		ma_json_obj_open(j, NULL);
		ma_json_str(j, "key", r->key);
		ma_json_u64(j, "a", r->a);
		ma_json_u64(j, "b", r->b);
		ma_json_i64(j, "delta", r->delta);
		if (r->has_pct)
			ma_json_double(j, "delta_pct", r->pct);
		else
			ma_json_null(j, "delta_pct");
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

static void json_bins(struct ma_json *j, const struct sdiff *sd)
{
	ma_json_u64(j, "bins_changed", sd->nbins);
	ma_json_arr_open(j, "bins");
	for (size_t i = 0; i < sd->nbins && i < (size_t)sd->bins_top; i++) {
		const struct ma_snap_bin_delta *d = &sd->bins[i];

		ma_json_obj_open(j, NULL);
		ma_json_u64(j, "size", d->size);
		ma_json_u64(j, "waste_a", d->waste_a);
		ma_json_u64(j, "waste_b", d->waste_b);
		ma_json_i64(j, "waste_delta", d->waste_delta);
		ma_json_u64(j, "curregs_a", d->curregs_a);
		ma_json_u64(j, "curregs_b", d->curregs_b);
		ma_json_i64(j, "curregs_delta", d->curregs_delta);
		ma_json_u64(j, "curslabs_a", d->curslabs_a);
		ma_json_u64(j, "curslabs_b", d->curslabs_b);
		ma_json_i64(j, "curslabs_delta", d->curslabs_delta);
		ma_json_double(j, "util_a", d->util_a);
		ma_json_double(j, "util_b", d->util_b);
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

static void sdiff_json(struct sdiff *sd)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	json_snap_side(&j, "a", &sd->a);
	json_snap_side(&j, "b", &sd->b);
	json_headline(&j, sd);
	json_bins(&j, sd);
	if (sd->heap) {
		ddiff_json(&j, "heap", &sd->dd);
		ma_json_null(&j, "heap_skipped");
	} else {
		ma_json_null(&j, "heap");
		ma_json_str(&j, "heap_skipped", sd->heap_skipped);
	}
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* "+1.5 MiB", "-512 B", "0 B". */
static void print_snap_side(const char *tag, const struct ma_snapshot *s)
{
	const char *v = ma_printable(s->m.jemalloc_version), *g = strstr(v, "-g");

	/* without the git hash */
	ma_print_wrapped(2, "%s %s: pid %lld (%s) at %s, jemalloc %.*s\n", tag,
			 ma_printable(s->dir), (long long)s->m.pid, ma_printable(s->m.comm),
			 ma_printable(s->m.time),
			 g ? (int)(g - v) : (int)strlen(v), v);
}

static void print_header(const struct sdiff *sd)
{
	print_snap_side("A", &sd->a);
	print_snap_side("B", &sd->b);
	if (sd->a.m.unix_time && sd->b.m.unix_time)
		printf("B taken %+lld s after A\n",
		       (long long)(sd->b.m.unix_time - sd->a.m.unix_time));
	if (strcmp(sd->a.m.exe, sd->b.m.exe) != 0)
		ma_print_wrapped(2, "note: different executables (%s, %s)\n",
				 ma_printable(sd->a.m.exe), ma_printable(sd->b.m.exe));
}

static void print_headline(const struct sdiff *sd)
{
	char s1[32], s2[32], s3[32], pct[32];

	printf("\n%-14s %11s %11s %12s %9s\n", "headline", "A", "B", "B - A", "change");
	for (int i = 0; i < MA_SNAP_NHEADLINE; i++) {
		const struct ma_snap_headline_row *r = &sd->head[i];

		if (r->has_pct)
			snprintf(pct, sizeof(pct), "%+.1f%%", r->pct);
		else
			snprintf(pct, sizeof(pct), "%s", r->b ? "new" : "-");
		printf("%-14s %11s %11s %12s %9s\n", r->label, ma_fmt_bytes(s1, sizeof(s1), r->a),
		       ma_fmt_bytes(s2, sizeof(s2), r->b),
		       ma_fmt_signed_bytes(s3, sizeof(s3), r->delta, true), pct);
	}
}

static void print_bins(const struct sdiff *sd)
{
	size_t shown = sd->nbins < (size_t)sd->bins_top ? sd->nbins : (size_t)sd->bins_top;
	char s1[32], s2[32], s3[32];

	printf("\nbins whose waste or live regions changed: %zu of %zu", sd->nbins,
	       sd->b.bins.nbins);
	if (shown < sd->nbins)
		printf(", top %zu by |waste change|", shown);
	printf("\n%6s %10s %10s %9s %11s %11s %12s\n", "size", "curregs A", "curregs B", "change",
	       "waste A", "waste B", "change");
	for (size_t i = 0; i < shown; i++) {
		const struct ma_snap_bin_delta *d = &sd->bins[i];

		printf("%6llu %10llu %10llu %+9lld %11s %11s %12s\n", (unsigned long long)d->size,
		       (unsigned long long)d->curregs_a, (unsigned long long)d->curregs_b,
		       (long long)d->curregs_delta, ma_fmt_bytes(s1, sizeof(s1), d->waste_a),
		       ma_fmt_bytes(s2, sizeof(s2), d->waste_b),
		       ma_fmt_signed_bytes(s3, sizeof(s3), d->waste_delta, true));
	}
	if (!sd->nbins)
		printf("  (none)\n");
}

static void sdiff_print(struct sdiff *sd)
{
	print_header(sd);
	print_headline(sd);
	print_bins(sd);
	if (sd->heap) {
		printf("\nheap dumps:\n");
		ddiff_print(&sd->dd);
	} else {
		ma_print_wrapped(2, "\nheap dumps: not compared: %s\n",
				 ma_printable(sd->heap_skipped));
	}
}

static int diff_snapshots(struct ma_profcmd *c, const char *const path[2],
			  const char *const bin[2])
{
	struct sdiff sd;
	int rc;

	memset(&sd, 0, sizeof(sd));
	if (!(rc = sdiff_load(c, path, bin, &sd))) {
		if (c->json)
			sdiff_json(&sd);
		else
			sdiff_print(&sd);
	}
	sdiff_release(&sd);
	return rc;
}

/* ---- command line ---- */

static bool is_dir(const char *p, bool *exists)
{
	struct stat st;

	*exists = stat(p, &st) == 0;
	return *exists && S_ISDIR(st.st_mode);
}

/* 1: snapshot directories, 0: dumps, or an exit status < 0 (printed). */
static int snapshot_mode(const char *cmd, const char *const path[2])
{
	bool ex[2], dir[2];

	dir[0] = is_dir(path[0], &ex[0]);
	dir[1] = is_dir(path[1], &ex[1]);
	if (!dir[0] && !dir[1])
		return 0;
	for (int i = 0; i < 2; i++)
		if (dir[i] && ex[!i] && !dir[!i])
			return -ma_cmd_error(cmd, MA_EXIT_USAGE,
					     "'%s' is a snapshot directory but '%s' is a file: mixing "
					     "them is not supported yet; pass two snapshot directories "
					     "or two dumps (e.g. %s/heap.heap)",
					     path[i], path[!i], path[i]);
	return 1; /* a missing side fails when loaded, naming it */
}

/* Options and the two paths; 0, -1 (--help shown) or an exit status. */
static int parse_args(struct ma_profcmd *c, int argc, char **argv, const char *path[2],
		      const char *bin[2])
{
	const struct ma_opt opts[] = {
		MA_TOP("--top", "-n", &c->top,
		       "growers and shrinkers shown (default " STR(HEAP_TOP) " each, 0 = all); with "
		       "snapshots also bin rows (default " STR(BINS_TOP) ")"),
		MA_FLAG("--json", &c->json,
			"JSON: a{}, b{}, delta_bytes, growers[], shrinkers[]; snapshots: a{}, b{}, "
			"headline[{key,a,b,delta, delta_pct}], bins_changed, bins[{size,waste_a, "
			"waste_b,waste_delta,curregs_a,...}], heap (the dump diff object, or null), "
			"heap_skipped"),
		MA_STR("--binary-a", "PATH", &bin[0], "main executable for A (--binary: both)"),
		MA_STR("--binary-b", "PATH", &bin[1], "main executable for B"),
		MA_OPTS_PROFCMD(c),
		MA_OPTS_END,
	};
	int rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){
		.cmd = argv[0], .args = "A B", .about = about, .opts = opts,
		.footer = "\nexit status: 0 success, 1 unreadable dump or snapshot, 2 usage error",
		.positional = path, .npositional = 2 });

	if (rc)
		return rc;
	if (!path[1])
		return ma_usage_error(c->cmd, "two dumps or two snapshot directories are required");
	return 0;
}

int cmd_diff(int argc, char **argv)
{
	struct ma_profcmd c;
	const char *path[2] = { NULL, NULL }, *bin[2] = { NULL, NULL };
	int rc, mode;

	ma_profcmd_init(&c, argv[0], 0); /* 0: the default of each table */
	rc = parse_args(&c, argc, argv, path, bin);
	if (rc) {
		ma_profcmd_release(&c);
		return rc < 0 ? MA_EXIT_OK : rc;
	}
	mode = snapshot_mode(c.cmd, path);
	if (mode < 0)
		rc = -mode;
	else if (mode)
		rc = diff_snapshots(&c, path, bin);
	else
		rc = diff_dumps(&c, path, bin);
	if (!rc && fflush(stdout))
		rc = ma_cmd_error(c.cmd, MA_EXIT_FAIL, "cannot write output");
	ma_profcmd_release(&c);
	return rc;
}
