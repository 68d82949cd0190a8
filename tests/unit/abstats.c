/*
 * Unit test: `memattach ab`'s statistics (analysis/abstats.c).  Student's
 * t points against published values; a known comparison; and, over
 * thousands of simulated experiments with a fixed seed, that A/A runs are
 * called significant about 5% of the time, that the interval of B/A holds
 * the true ratio about 95% of the time, and that a 10% difference with
 * 8 runs a side is found.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "abstats.h"
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static double uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

/* Box-Muller: one normal draw of mean M and standard deviation S. */
static double normal(double m, double s)
{
	return m + s * sqrt(-2 * log(uniform())) * cos(2 * M_PI * uniform());
}

static int near(double x, double want, double tol)
{
	return fabs(x - want) <= tol;
}

static void test_t(void)
{
	char name[96];
	/* Published two-sided 95% points (df: 1, 2, 5, 10, 30, 40, 60, 120, infinity). */
	static const double df[] = { 1, 2, 5, 10, 30, 40, 60, 120, 1e9 };
	static const double want[] = { 12.706, 4.303, 2.571, 2.228, 2.042, 2.021, 2.000, 1.980, 1.960 };

	for (size_t i = 0; i < sizeof(df) / sizeof(df[0]); i++) {
		snprintf(name, sizeof(name), "t(0.975, %g) = %.3f (got %.4f)", df[i], want[i], ma_t975(df[i]));
		CHECK(name, near(ma_t975(df[i]), want[i], 0.0015));
	}
	CHECK("t between whole degrees of freedom lies between their points",
	      ma_t975(7.5) < ma_t975(7) && ma_t975(7.5) > ma_t975(8));
}

static void test_known(void)
{
	const double a[] = { 10, 11, 9, 10, 10 }, b[] = { 20, 21, 19, 20, 20 };
	const double zero[] = { 0, 0, 0 };
	struct ma_ab_compare c;
	char name[160];

	CHECK("one sample a side is refused", ma_ab_compare(a, 1, b, 5, &c) == -1);
	CHECK("known: compared", ma_ab_compare(a, 5, b, 5, &c) == 0);
	snprintf(name, sizeof(name), "known: means 10 and 20, sd 0.707, B/A 2 in [%.3f, %.3f], significant",
		 c.ratio_low, c.ratio_high);
	CHECK(name, near(c.a_mean, 10, 1e-9) && near(c.b_mean, 20, 1e-9) && near(c.a_sd, sqrt(0.5), 1e-9) &&
			    c.have_ratio && near(c.ratio, 2, 1e-9) && c.ratio_low > 1.8 &&
			    c.ratio_high < 2.2 && c.significant);
	/* Welch with equal n and sd: df = 2(n - 1) = 8; the difference's half-width t(8) * sqrt(0.5/5 * 2). */
	snprintf(name, sizeof(name), "known: B - A = 10 +- %.3f, df %.2f", c.diff_high - c.diff, c.df);
	CHECK(name, near(c.diff, 10, 1e-9) && near(c.df, 8, 1e-9) &&
			    near(c.diff_high - c.diff, 2.306 * sqrt(0.2), 1e-3));
	CHECK("A/A of the same samples: B/A 1, not significant",
	      ma_ab_compare(a, 5, a, 5, &c) == 0 && near(c.ratio, 1, 1e-12) && !c.significant);
	CHECK("both sides 0 (a metric purged to nothing): no ratio, not significant",
	      ma_ab_compare(zero, 3, zero, 3, &c) == 0 && !c.have_ratio && !c.significant);
	CHECK("A 0, B not: no ratio, the difference decides",
	      ma_ab_compare(zero, 3, a, 5, &c) == 0 && !c.have_ratio && c.significant);
}

/* TRIALS experiments of N runs a side, A ~ N(100, 5), B ~ N(100 * FACTOR, 5 * FACTOR). */
static void simulate(int trials, int n, double factor, int *significant, int *covered)
{
	double a[64], b[64];
	struct ma_ab_compare c;

	*significant = *covered = 0;
	for (int t = 0; t < trials; t++) {
		for (int i = 0; i < n; i++) {
			a[i] = normal(100, 5);
			b[i] = normal(100 * factor, 5 * factor);
		}
		ma_ab_compare(a, (size_t)n, b, (size_t)n, &c);
		*significant += c.significant;
		*covered += c.ratio_low <= factor && factor <= c.ratio_high;
	}
}

static void test_simulated(void)
{
	const int trials = 4000;
	int sig, cov;
	char name[160];

	/* 4,000 trials: the count of a 5% event has sd 14, so 5% +- 1.5% is over 4 sd. */
	simulate(trials, 5, 1.0, &sig, &cov);
	snprintf(name, sizeof(name), "A/A, 5 runs a side: called significant in %.2f%% of %d experiments (5%% expected)",
		 100.0 * sig / trials, trials);
	CHECK(name, sig > trials * 0.035 && sig < trials * 0.065);
	simulate(trials, 20, 1.0, &sig, &cov);
	snprintf(name, sizeof(name), "A/A, 20 runs a side: called significant in %.2f%% (5%% expected)",
		 100.0 * sig / trials);
	CHECK(name, sig > trials * 0.035 && sig < trials * 0.065);
	simulate(trials, 8, 1.1, &sig, &cov);
	snprintf(name, sizeof(name), "B 10%% larger, 8 runs a side: the interval holds 1.1 in %.2f%% (95%% expected)",
		 100.0 * cov / trials);
	CHECK(name, cov > trials * 0.935 && cov < trials * 0.965);
	snprintf(name, sizeof(name), "B 10%% larger (sd 5%%), 8 runs a side: found in %.2f%% of experiments",
		 100.0 * sig / trials);
	CHECK(name, sig > trials * 0.88); /* a t test's power there: about 0.93 */
}

int main(void)
{
	test_t();
	test_known();
	test_simulated();
	CHECK_DONE();
}
