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
#include <stdint.h>
#include <string.h>

#include "abstats.h"
#include "emit.h"
#include "format.h"

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

/* ---- the SVG: a grid of panels, two columns ---- */

enum { PANEL_W = 420, PANEL_H = 170, COLS = 2, TOP = 40, BINS = 12, PAD = 36 };

static void axis_label(char *buf, size_t len, double v, bool bytes)
{
	if (bytes)
		ma_fmt_bytes(buf, len, v > 0 ? (uint64_t)v : 0);
	else
		snprintf(buf, len, "%.3g", v);
}

/* Bin counts of X (N values) over [LO, LO + BINS * W). */
static void bin_counts(const double *x, size_t n, double lo, double w, int counts[BINS])
{
	memset(counts, 0, BINS * sizeof(int));
	for (size_t i = 0; i < n; i++) {
		int k = w > 0 ? (int)((x[i] - lo) / w) : BINS / 2;

		counts[k < 0 ? 0 : k >= BINS ? BINS - 1 : k]++;
	}
}

static void panel(FILE *f, const struct ma_ab_metric *m, int x0, int y0)
{
	static const char *const color[2] = { "#1f77b4", "#ff7f0e" };
	double lo = INFINITY, hi = -INFINITY, w, pw = PANEL_W - 2 * PAD, ph = PANEL_H - 70;
	int counts[2][BINS], cmax = 1;
	char l1[32], l2[32], head[160];

	for (size_t i = 0; i < m->c.na; i++)
		lo = fmin(lo, m->a[i]), hi = fmax(hi, m->a[i]);
	for (size_t i = 0; i < m->c.nb; i++)
		lo = fmin(lo, m->b[i]), hi = fmax(hi, m->b[i]);
	if (!(hi > lo)) /* all equal: one bin in the middle */
		lo -= 1, hi += 1;
	w = (hi - lo) / BINS * (1 + 1e-9);
	bin_counts(m->a, m->c.na, lo, w, counts[0]);
	bin_counts(m->b, m->c.nb, lo, w, counts[1]);
	for (int s = 0; s < 2; s++)
		for (int k = 0; k < BINS; k++)
			cmax = counts[s][k] > cmax ? counts[s][k] : cmax;
	if (m->c.have_ratio)
		snprintf(head, sizeof(head), "%s: B/A %.3f [%.3f, %.3f]%s", m->name, m->c.ratio,
			 m->c.ratio_low, m->c.ratio_high, m->c.significant ? " significant" : "");
	else
		snprintf(head, sizeof(head), "%s: no ratio (a mean is 0)", m->name);
	fprintf(f, "<g transform=\"translate(%d,%d)\">\n<text x=\"%d\" y=\"18\" font-size=\"13\">", x0, y0,
		PAD);
	ma_xml_text(f, head, SIZE_MAX);
	fputs("</text>\n", f);
	/* the bars: A left half of each bin, B right half */
	for (int s = 0; s < 2; s++)
		for (int k = 0; k < BINS; k++) {
			double bh = ph * counts[s][k] / cmax, bx = PAD + pw * k / BINS + s * pw / BINS / 2;

			if (counts[s][k])
				fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
					   "fill=\"%s\"><title>%c: %d</title></rect>\n",
					bx, 30 + ph - bh, pw / BINS / 2 - 1, bh, color[s], 'A' + s, counts[s][k]);
		}
	/* each side's mean, dashed */
	for (int s = 0; s < 2; s++) {
		double mean = s ? m->c.b_mean : m->c.a_mean, mx = PAD + pw * (mean - lo) / (w * BINS);

		fprintf(f, "<line x1=\"%.1f\" y1=\"28\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
			   "stroke-dasharray=\"4,3\"/>\n", mx, mx, 30 + ph, color[s]);
	}
	axis_label(l1, sizeof(l1), lo, m->bytes);
	axis_label(l2, sizeof(l2), lo + w * BINS, m->bytes);
	fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n"
		   "<text x=\"%d\" y=\"%.1f\">%s</text><text x=\"%.1f\" y=\"%.1f\" "
		   "text-anchor=\"end\">%s</text>\n</g>\n",
		PAD, 30 + ph, PAD + pw, 30 + ph, PAD, 46 + ph, l1, PAD + pw, 46 + ph, l2);
}

void ma_ab_svg(FILE *f, const struct ma_ab_metric *m, size_t n, const char *title)
{
	int rows = (int)((n + COLS - 1) / COLS), width = COLS * PANEL_W, height = TOP + rows * PANEL_H;

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		   "font-family=\"sans-serif\" font-size=\"11\">\n"
		   "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"24\" "
		   "font-size=\"15\">",
		width, height, PAD);
	ma_xml_text(f, title, SIZE_MAX);
	fprintf(f, "</text>\n<text x=\"%d\" y=\"24\" text-anchor=\"end\"><tspan fill=\"#1f77b4\">"
		   "&#9632; A</tspan> <tspan fill=\"#ff7f0e\">&#9632; B</tspan> (dashed: means)</text>\n",
		width - PAD);
	for (size_t i = 0; i < n; i++)
		panel(f, &m[i], (int)(i % COLS) * PANEL_W, TOP + (int)(i / COLS) * PANEL_H);
	fputs("</svg>\n", f);
}
