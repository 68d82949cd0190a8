/*
 * abstats.h - the statistics of `memattach ab` (analysis/abstats.c): per
 * metric, the samples of side A and side B, their means and standard
 * deviations, and B/A with a 95% interval.
 */
#ifndef MA_ABSTATS_H
#define MA_ABSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct ma_ab_compare {
	size_t na, nb;
	double a_mean, b_mean, a_sd, b_sd; /* sd: sample standard deviation (n - 1) */
	/*
	 * B/A and its 95% interval: the delta method on log(mean B / mean A)
	 * with Welch's degrees of freedom.  have_ratio false when a mean is 0
	 * or below (a metric purged to nothing): the difference then decides.
	 */
	bool have_ratio;
	double ratio, ratio_low, ratio_high;
	/* B - A and its 95% interval (Welch). */
	double diff, diff_low, diff_high;
	double df; /* Welch's degrees of freedom (0: both sides exactly constant) */
	/* The interval excludes "no difference" (1 for the ratio, else 0 for the difference). */
	bool significant;
};

/*
 * Compare the NA samples A with the NB samples B into *C.  Each side needs
 * at least 2 samples: -1 otherwise (C left zeroed), else 0.
 */
int ma_ab_compare(const double *a, size_t na, const double *b, size_t nb, struct ma_ab_compare *c);

/* One metric of an A/B run, for the SVG. */
struct ma_ab_metric {
	const char *name;
	const double *a, *b; /* c.na and c.nb values */
	struct ma_ab_compare c;
	bool bytes; /* values are bytes (axis labels in KiB/MiB) */
};

/*
 * One small histogram per metric on F: A's and B's samples over the same
 * bins, each side's mean marked, B/A and its interval in the title.
 */
void ma_ab_svg(FILE *f, const struct ma_ab_metric *m, size_t n, const char *title);

/* The 0.975 quantile of Student's t with DF degrees of freedom (DF >= 1; real DF interpolated). */
double ma_t975(double df);

#endif
