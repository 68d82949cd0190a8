/*
 * abstats.c - B against A for `memattach ab`: means, standard deviations,
 * and B/A with a 95% interval.
 *
 * The ratio's interval comes from the delta method on the log of the ratio
 * of means (its variance is the sum of each side's squared coefficient of
 * variation over its sample count), with Welch's degrees of freedom, so the
 * two sides may differ in spread and count.  Memory figures of repeated
 * fresh runs are positive and roughly symmetric around their mean; the
 * log scale keeps the interval on the right side of zero and makes B/A and
 * A/B mirror images.
 */
#include <math.h>
#include <string.h>

#include "abstats.h"

/* Two-sided 95% points of Student's t for 1..30 degrees of freedom. */
static const double t975_table[31] = {
	0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201,
	2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
	2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
};

double ma_t975(double df)
{
	const double z = 1.959963985;
	double lo, w;
	int k;

	if (df < 1)
		df = 1;
	if (df > 30) {
		/* Cornish-Fisher expansion around the normal point: within 1e-3 from 30 on. */
		double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;

		return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df * df) +
		       (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df * df * df);
	}
	k = (int)df;
	if (k >= 30)
		return t975_table[30];
	/* Between two whole degrees of freedom: linear in 1/df, as the quantile nearly is. */
	lo = t975_table[k];
	w = (1.0 / k - 1.0 / df) / (1.0 / k - 1.0 / (k + 1));
	return lo + w * (t975_table[k + 1] - lo);
}

static void mean_sd(const double *x, size_t n, double *mean, double *sd)
{
	double s = 0, ss = 0;

	for (size_t i = 0; i < n; i++)
		s += x[i];
	*mean = s / (double)n;
	for (size_t i = 0; i < n; i++)
		ss += (x[i] - *mean) * (x[i] - *mean);
	*sd = sqrt(ss / (double)(n - 1));
}

/* Welch's degrees of freedom for the variances of two means VA, VB from NA, NB samples. */
static double welch_df(double va, size_t na, double vb, size_t nb)
{
	double den = va * va / (double)(na - 1) + vb * vb / (double)(nb - 1);

	return den > 0 ? (va + vb) * (va + vb) / den : 0;
}

int ma_ab_compare(const double *a, size_t na, const double *b, size_t nb, struct ma_ab_compare *c)
{
	double va, vb, se, t;

	memset(c, 0, sizeof(*c));
	if (na < 2 || nb < 2)
		return -1;
	c->na = na;
	c->nb = nb;
	mean_sd(a, na, &c->a_mean, &c->a_sd);
	mean_sd(b, nb, &c->b_mean, &c->b_sd);

	va = c->a_sd * c->a_sd / (double)na;
	vb = c->b_sd * c->b_sd / (double)nb;
	c->df = welch_df(va, na, vb, nb);
	t = c->df > 0 ? ma_t975(c->df) : 0;
	se = sqrt(va + vb);
	c->diff = c->b_mean - c->a_mean;
	c->diff_low = c->diff - t * se;
	c->diff_high = c->diff + t * se;

	c->have_ratio = c->a_mean > 0 && c->b_mean > 0;
	if (c->have_ratio) {
		double la = va / (c->a_mean * c->a_mean), lb = vb / (c->b_mean * c->b_mean);
		double df = welch_df(la, na, lb, nb), tl = df > 0 ? ma_t975(df) : 0;
		double sl = sqrt(la + lb);

		c->ratio = c->b_mean / c->a_mean;
		c->ratio_low = c->ratio * exp(-tl * sl);
		c->ratio_high = c->ratio * exp(tl * sl);
		c->significant = c->ratio_low > 1 || c->ratio_high < 1;
	} else {
		c->significant = c->diff_low > 0 || c->diff_high < 0;
	}
	return 0;
}
