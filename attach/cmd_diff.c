/*
 * cmd_diff.c - compare two heap dumps (possibly of different binaries) by
 * allocation site: growers and shrinkers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "emit.h"
#include "ma_error.h"
#include "profcmd.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memattach diff A B [--top N] [--json] [--binary-a PATH] [--binary-b PATH]\n\n"
		"Compare two jemalloc heap dumps (e.g. before and after a change, from\n"
		"two different builds): allocation sites are aligned by their demangled\n"
		"name, which survives unrelated rebuilds, and listed by growth (B - A)\n"
		"and by shrinkage, with each side's scaled bytes and scale (scale ~1: a\n"
		"few large blocks; >>1: many small ones, look a frame or two up).\n\n"
		"  --top N, -n N          growers and shrinkers shown (default 15 each)\n"
		"  --json                 JSON: a{}, b{}, delta_bytes, growers[], shrinkers[]\n"
		"  --binary-a PATH        main executable for A (--binary: both)\n"
		"  --binary-b PATH        main executable for B\n"
		"%s"
		"\nSnapshot directories (memattach snapshot) are not supported yet.\n"
		"exit status: 0 success, 1 unreadable dump, 2 usage error\n",
		ma_profcmd_help);
}

struct dsite {
	const char *name;
	double a, b; /* scaled bytes */
	double a_objs, b_objs;
	uint64_t a_raw, b_raw;
};

struct side {
	const char *name;
	double bytes, objs;
	uint64_t raw;
};

static int cmp_side(const void *x, const void *y)
{
	return strcmp(((const struct side *)x)->name, ((const struct side *)y)->name);
}

/* Sites of B->prof merged by display name, sorted by name. */
static struct side *sides(struct ma_profbundle *b, size_t *n)
{
	struct side *s = malloc((b->prof.nsites + 1) * sizeof(*s));
	size_t out = 0;

	if (!s)
		return NULL;
	for (size_t i = 0; i < b->prof.nsites; i++) {
		uint32_t fn = b->prof.sites[i];

		s[i] = (struct side){ ma_sym_func_name(&b->sym, fn), b->prof.fs[fn].flat,
				      b->prof.fs[fn].flat_objs, b->prof.fs[fn].raw_flat };
	}
	qsort(s, b->prof.nsites, sizeof(*s), cmp_side);
	for (size_t i = 0; i < b->prof.nsites; i++) {
		if (out && strcmp(s[out - 1].name, s[i].name) == 0) {
			s[out - 1].bytes += s[i].bytes;
			s[out - 1].objs += s[i].objs;
			s[out - 1].raw += s[i].raw;
		} else {
			s[out++] = s[i];
		}
	}
	*n = out;
	return s;
}

static int cmp_delta_desc(const void *x, const void *y)
{
	const struct dsite *a = x, *b = y;
	double da = a->b - a->a, db = b->b - b->a;

	if (da != db)
		return da > db ? -1 : 1;
	return strcmp(a->name, b->name);
}

static double scale_of(double bytes, uint64_t raw)
{
	return raw ? bytes / (double)raw : 0;
}

static void json_side(struct ma_json *j, const char *key, struct ma_profbundle *b)
{
	ma_json_obj_open(j, key);
	ma_json_str(j, "dump", b->path);
	ma_json_u64(j, "period", b->hp.period);
	ma_json_u64(j, "total_raw_bytes", b->prof.total_raw_bytes);
	ma_json_u64(j, "total_scaled_bytes", (uint64_t)llround(b->prof.total_bytes));
	ma_json_obj_close(j);
}

static void json_sites(struct ma_json *j, const char *key, struct dsite *d, size_t from, size_t n,
		       int step)
{
	ma_json_arr_open(j, key);
	for (size_t k = 0; k < n; k++) {
		struct dsite *s = &d[(long)from + step * (long)k];

		ma_json_obj_open(j, NULL);
		ma_json_str(j, "leaf", s->name);
		ma_json_i64(j, "delta_bytes", (int64_t)llround(s->b - s->a));
		ma_json_u64(j, "a_scaled_bytes", (uint64_t)llround(s->a));
		ma_json_u64(j, "b_scaled_bytes", (uint64_t)llround(s->b));
		ma_json_u64(j, "a_raw_bytes", s->a_raw);
		ma_json_u64(j, "b_raw_bytes", s->b_raw);
		ma_json_u64(j, "a_objects", (uint64_t)llround(s->a_objs));
		ma_json_u64(j, "b_objects", (uint64_t)llround(s->b_objs));
		ma_json_double(j, "a_scale", scale_of(s->a, s->a_raw));
		ma_json_double(j, "b_scale", scale_of(s->b, s->b_raw));
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

static void table_sites(const char *title, struct dsite *d, size_t from, size_t n, int step)
{
	char s1[32], s2[32], s3[32];

	printf("\n%s:\n%11s %11s %11s %8s %8s  %s\n", title, "delta", "A", "B", "scale A", "scale B",
	       "allocation site");
	for (size_t k = 0; k < n; k++) {
		struct dsite *s = &d[(long)from + step * (long)k];

		printf("%11s %11s %11s %8.1f %8.1f  %s\n",
		       ma_prof_fmt_bytes(s1, sizeof(s1), s->b - s->a), ma_prof_fmt_bytes(s2, sizeof(s2), s->a),
		       ma_prof_fmt_bytes(s3, sizeof(s3), s->b), scale_of(s->a, s->a_raw),
		       scale_of(s->b, s->b_raw), s->name);
	}
	if (!n)
		printf("  (none)\n");
}

int cmd_diff(int argc, char **argv)
{
	struct ma_profcmd c;
	struct ma_profbundle ba = { 0 }, bb = { 0 };
	const char *path[2] = { NULL, NULL }, *bin[2] = { NULL, NULL }, *v;
	struct side *sa = NULL, *sb = NULL;
	struct dsite *d = NULL;
	size_t na = 0, nb = 0, nd = 0, ngrow = 0, nshrink = 0, i, k;
	int rc, r;

	ma_profcmd_init(&c, argv[0], 15);
	for (int a = 1; a < argc; a++) {
		if (ma_is_help(argv[a])) {
			usage(stdout);
			ma_profcmd_release(&c);
			return MA_EXIT_OK;
		}
		r = ma_profcmd_opt(&c, argc, argv, &a);
		if (r == 0) {
			if ((r = ma_profcmd_value(c.cmd, "--binary-a", argc, argv, &a, &v)) > 0)
				bin[0] = v;
			else if (r == 0 && (r = ma_profcmd_value(c.cmd, "--binary-b", argc, argv, &a, &v)) > 0)
				bin[1] = v;
			else if (r == 0 && argv[a][0] == '-' && argv[a][1] != '\0')
				r = -ma_cmd_error(c.cmd, 1, "unknown option '%s'; see --help", argv[a]);
			else if (r == 0 && !path[0])
				path[0] = argv[a], r = 1;
			else if (r == 0 && !path[1])
				path[1] = argv[a], r = 1;
			else if (r == 0)
				r = -ma_cmd_error(c.cmd, 1, "two dumps only (got '%s' too)", argv[a]);
		}
		if (r < 0) {
			ma_profcmd_release(&c);
			return MA_EXIT_USAGE;
		}
	}
	if (!path[1]) {
		usage(stderr);
		ma_profcmd_release(&c);
		return MA_EXIT_USAGE;
	}
	for (int s = 0; s < 2; s++) {
		struct stat st;

		if (stat(path[s], &st) == 0 && S_ISDIR(st.st_mode)) {
			ma_profcmd_release(&c);
			return ma_cmd_error(c.cmd, MA_EXIT_USAGE,
					    "'%s' is a directory: diffing snapshot directories is not "
					    "supported yet; pass the two heap dump files", path[s]);
		}
	}
	{
		const char *both = c.sym.binary;

		c.sym.binary = bin[0] ? bin[0] : both;
		rc = ma_profcmd_load(&c, &ba, path[0]);
		if (rc)
			goto out;
		c.sym.binary = bin[1] ? bin[1] : both;
		rc = ma_profcmd_load(&c, &bb, path[1]);
		if (rc)
			goto out;
	}
	sa = sides(&ba, &na);
	sb = sides(&bb, &nb);
	d = malloc((na + nb + 1) * sizeof(*d));
	if (!sa || !sb || !d) {
		rc = ma_cmd_error(c.cmd, MA_EXIT_FAIL, "out of memory");
		goto out;
	}
	for (i = 0, k = 0; i < na || k < nb;) {
		int cmp = i == na ? 1 : k == nb ? -1 : strcmp(sa[i].name, sb[k].name);
		struct dsite *x = &d[nd++];

		memset(x, 0, sizeof(*x));
		if (cmp <= 0) {
			x->name = sa[i].name;
			x->a = sa[i].bytes;
			x->a_objs = sa[i].objs;
			x->a_raw = sa[i].raw;
			i++;
		}
		if (cmp >= 0) {
			x->name = sb[k].name;
			x->b = sb[k].bytes;
			x->b_objs = sb[k].objs;
			x->b_raw = sb[k].raw;
			k++;
		}
	}
	qsort(d, nd, sizeof(*d), cmp_delta_desc);
	while (ngrow < nd && ngrow < (size_t)c.top && llround(d[ngrow].b - d[ngrow].a) > 0)
		ngrow++;
	while (nshrink < nd && nshrink < (size_t)c.top &&
	       llround(d[nd - 1 - nshrink].b - d[nd - 1 - nshrink].a) < 0)
		nshrink++;
	if (c.json) {
		struct ma_json j;

		ma_json_init(&j, stdout);
		ma_json_obj_open(&j, NULL);
		json_side(&j, "a", &ba);
		json_side(&j, "b", &bb);
		ma_json_i64(&j, "delta_bytes", (int64_t)llround(bb.prof.total_bytes - ba.prof.total_bytes));
		json_sites(&j, "growers", d, 0, ngrow, 1);
		json_sites(&j, "shrinkers", d, nd - 1, nshrink, -1);
		ma_json_obj_close(&j);
		ma_json_end(&j);
	} else {
		char s1[32], s2[32], s3[32];

		printf("A %s: %s unsampled (%s raw, period %llu)\n", path[0],
		       ma_prof_fmt_bytes(s1, sizeof(s1), ba.prof.total_bytes),
		       ma_prof_fmt_bytes(s2, sizeof(s2), (double)ba.prof.total_raw_bytes),
		       (unsigned long long)ba.hp.period);
		printf("B %s: %s unsampled (%s raw, period %llu)\n", path[1],
		       ma_prof_fmt_bytes(s1, sizeof(s1), bb.prof.total_bytes),
		       ma_prof_fmt_bytes(s2, sizeof(s2), (double)bb.prof.total_raw_bytes),
		       (unsigned long long)bb.hp.period);
		printf("B - A: %s (%+.1f%%)\n",
		       ma_prof_fmt_bytes(s3, sizeof(s3), bb.prof.total_bytes - ba.prof.total_bytes),
		       ba.prof.total_bytes > 0
			       ? 100 * (bb.prof.total_bytes - ba.prof.total_bytes) / ba.prof.total_bytes
			       : 0);
		table_sites("growers", d, 0, ngrow, 1);
		table_sites("shrinkers", d, nd ? nd - 1 : 0, nshrink, -1);
	}
	rc = fflush(stdout) ? ma_cmd_error(c.cmd, MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
out:
	free(sa);
	free(sb);
	free(d);
	ma_profbundle_release(&ba);
	ma_profbundle_release(&bb);
	ma_profcmd_release(&c);
	return rc;
}
