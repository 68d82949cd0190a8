/*
 * Unit test: two heap profiles compared site by site (ma_site_diff):
 * one name seen twice is one site, sites only in A or B count from zero,
 * the order is by growth, and growers/shrinkers stop at TOP and at
 * changes that round to 0 B.
 */
#include <string.h>

#include "check.h"
#include "profdiff.h"

static const struct ma_site_delta *find(const struct ma_site_diff *d, const char *name)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->d[i].name, name) == 0)
			return &d->d[i];
	return NULL;
}

int main(void)
{
	const struct ma_site_total a[] = {
		{ "grow", 100, 1, 10 },	    { "same", 50, 5, 5 },  { "shrink", 300, 3, 30 },
		{ "gone", 40, 4, 4 },	    { "grow", 20, 2, 2 }, /* the same name again: summed */
		{ "tiny", 10, 1, 1 },
	};
	const struct ma_site_total b[] = {
		{ "shrink", 100, 1, 10 }, { "new", 70, 7, 7 }, { "same", 50, 5, 5 },
		{ "grow", 420, 4, 42 },	  { "tiny", 10.4, 1, 1 }, /* +0.4 B rounds to 0 */
	};
	struct ma_site_diff d;
	const struct ma_site_delta *g;

	CHECK("diff computed", ma_site_diff(a, 6, b, 5, 10, &d) == 0);
	CHECK("one entry per name: 6 sites", d.n == 6);
	g = find(&d, "grow");
	CHECK("a site seen twice in A is summed (120 B, 3 objects, 12 raw)",
	      g && g->a == 120 && g->a_objs == 3 && g->a_raw == 12);
	CHECK("its B side (420 B, raw 42)", g && g->b == 420 && g->b_raw == 42);
	CHECK("the biggest grower first", strcmp(d.d[0].name, "grow") == 0);
	CHECK("then the new site", strcmp(d.d[1].name, "new") == 0 && d.d[1].a == 0 && d.d[1].b == 70);
	CHECK("the biggest shrinker last", strcmp(d.d[d.n - 1].name, "shrink") == 0);
	CHECK("a site gone from B counts B as 0", find(&d, "gone") && find(&d, "gone")->b == 0);
	CHECK("growers: grow, new (tiny's +0.4 B rounds to 0)", d.ngrow == 2);
	CHECK("shrinkers: shrink, gone", d.nshrink == 2);
	for (size_t i = 1; i < d.n; i++)
		if (d.d[i - 1].b - d.d[i - 1].a < d.d[i].b - d.d[i].a)
			CHECK("ordered by growth", 0);
	ma_site_diff_release(&d);

	CHECK("top 1", ma_site_diff(a, 6, b, 5, 1, &d) == 0 && d.ngrow == 1 && d.nshrink == 1);
	ma_site_diff_release(&d);
	CHECK("nothing on either side", ma_site_diff(a, 0, b, 0, 5, &d) == 0 && d.n == 0 && d.ngrow == 0);
	ma_site_diff_release(&d);

	CHECK("scale: 420 B from 42 sampled", ma_site_scale(420, 42) == 10);
	CHECK("scale without samples: 0", ma_site_scale(5, 0) == 0);
	CHECK_DONE();
}
