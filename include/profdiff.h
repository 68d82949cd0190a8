/*
 * profdiff.h - what changed between two heap profiles, allocation site by
 * allocation site (memattach diff A.heap B.heap).
 *
 * Sites are compared by display name: the same function in two builds, or
 * two functions that demangle to one name, are one site.
 */
#ifndef MA_PROFDIFF_H
#define MA_PROFDIFF_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"

/* One allocation site of one profile: unsampled bytes and objects, sampled bytes. */
struct ma_site_total {
	const char *name;
	double bytes, objs;
	uint64_t raw;
};

/* One site in A and B (zero where absent). */
struct ma_site_delta {
	const char *name;
	double a, b, a_objs, b_objs; /* unsampled */
	uint64_t a_raw, b_raw; /* sampled */
};

struct ma_site_diff {
	struct ma_site_delta *d; /* every site, by b - a descending, ties by name */
	size_t n;
	size_t ngrow; /* d[0..ngrow) grew (by at least 0.5 B), at most TOP of them */
	size_t nshrink; /* d[n-1], d[n-2]... (nshrink of them) shrank, at most TOP */
};

/* The allocation sites of P (functions with flat bytes), names from P's symbolizer.  0 or MA_E_NOMEM. */
int ma_profile_site_totals(const struct ma_profile *p, struct ma_site_total **out, size_t *n);

/*
 * Compare sites A and B (any order; one name may appear several times and
 * is summed).  Names are not copied: they must outlive OUT.  0 or MA_E_NOMEM.
 */
int ma_site_diff(const struct ma_site_total *a, size_t na, const struct ma_site_total *b, size_t nb,
		 size_t top, struct ma_site_diff *out);
void ma_site_diff_release(struct ma_site_diff *d);

/* Unsampled bytes per sampled byte of a site (0 without samples). */
double ma_site_scale(double bytes, uint64_t raw);

#endif
