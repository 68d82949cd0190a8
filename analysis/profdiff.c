/*
 * profdiff.c - two heap profiles compared by allocation site (profdiff.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ma_error.h"
#include "profdiff.h"

int ma_profile_site_totals(const struct ma_profile *p, struct ma_site_total **out, size_t *n)
{
	struct ma_site_total *s = malloc((p->nsites + 1) * sizeof(*s));

	if (!s)
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < p->nsites; i++) {
		uint32_t fn = p->sites[i];

		s[i] = (struct ma_site_total){ ma_sym_func_name(p->sym, fn), p->fs[fn].flat,
					       p->fs[fn].flat_objs, p->fs[fn].raw_flat };
	}
	*out = s;
	*n = p->nsites;
	return 0;
}

static int cmp_name(const void *x, const void *y)
{
	return strcmp(((const struct ma_site_total *)x)->name, ((const struct ma_site_total *)y)->name);
}

/* A copy of S sorted by name, one entry per name (summed); NULL when out of memory. */
static struct ma_site_total *by_name(const struct ma_site_total *s, size_t n, size_t *nout)
{
	struct ma_site_total *c = malloc((n + 1) * sizeof(*c));
	size_t out = 0;

	if (!c)
		return NULL;
	if (n)
		memcpy(c, s, n * sizeof(*c));
	qsort(c, n, sizeof(*c), cmp_name);
	for (size_t i = 0; i < n; i++) {
		if (out && strcmp(c[out - 1].name, c[i].name) == 0) {
			c[out - 1].bytes += c[i].bytes;
			c[out - 1].objs += c[i].objs;
			c[out - 1].raw += c[i].raw;
		} else {
			c[out++] = c[i];
		}
	}
	*nout = out;
	return c;
}

static int cmp_delta_desc(const void *x, const void *y)
{
	const struct ma_site_delta *a = x, *b = y;
	double da = a->b - a->a, db = b->b - b->a;

	if (da != db)
		return da > db ? -1 : 1;
	return strcmp(a->name, b->name);
}

/* Merge the name-sorted A and B into D->d. */
static void merge(const struct ma_site_total *a, size_t na, const struct ma_site_total *b, size_t nb,
		  struct ma_site_diff *d)
{
	size_t i = 0, k = 0;

	while (i < na || k < nb) {
		int cmp = i == na ? 1 : k == nb ? -1 : strcmp(a[i].name, b[k].name);
		struct ma_site_delta *x = &d->d[d->n++];

		memset(x, 0, sizeof(*x));
		if (cmp <= 0) {
			x->name = a[i].name;
			x->a = a[i].bytes;
			x->a_objs = a[i].objs;
			x->a_raw = a[i].raw;
			i++;
		}
		if (cmp >= 0) {
			x->name = b[k].name;
			x->b = b[k].bytes;
			x->b_objs = b[k].objs;
			x->b_raw = b[k].raw;
			k++;
		}
	}
	qsort(d->d, d->n, sizeof(*d->d), cmp_delta_desc);
}

int ma_site_diff(const struct ma_site_total *a, size_t na, const struct ma_site_total *b, size_t nb,
		 size_t top, struct ma_site_diff *out)
{
	struct ma_site_total *sa, *sb;
	size_t ua = 0, ub = 0, n;

	memset(out, 0, sizeof(*out));
	sa = by_name(a, na, &ua);
	sb = by_name(b, nb, &ub);
	out->d = malloc((ua + ub + 1) * sizeof(*out->d));
	if (!sa || !sb || !out->d) {
		free(sa);
		free(sb);
		ma_site_diff_release(out);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	merge(sa, ua, sb, ub, out);
	free(sa);
	free(sb);
	n = out->n;
	while (out->ngrow < n && out->ngrow < top && llround(out->d[out->ngrow].b - out->d[out->ngrow].a) > 0)
		out->ngrow++;
	while (out->nshrink < n && out->nshrink < top &&
	       llround(out->d[n - 1 - out->nshrink].b - out->d[n - 1 - out->nshrink].a) < 0)
		out->nshrink++;
	return 0;
}

void ma_site_diff_release(struct ma_site_diff *d)
{
	free(d->d);
	memset(d, 0, sizeof(*d));
}

double ma_site_scale(double bytes, uint64_t raw)
{
	return raw ? bytes / (double)raw : 0;
}
