/*
 * demangle.c - libiberty's cplus_demangle for C++ and Rust symbols.
 */
#include <ctype.h>
#include <libiberty/demangle.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"

/* True if S[0..n) ends with SUF followed only by ".<digits>" or nothing. */
static size_t strip_one(const char *s, size_t n)
{
	static const char *const sufs[] = { ".llvm.", ".cold", ".warm" };
	size_t end = n;

	/* Optional trailing ".<digits>" (".cold.1") for .cold/.warm. */
	for (size_t i = 0; i < sizeof(sufs) / sizeof(sufs[0]); i++) {
		size_t k = strlen(sufs[i]);
		const char *hit = NULL;

		for (const char *p = s; (p = memmem(p, (size_t)(s + n - p), sufs[i], k)); p++)
			hit = p;
		if (!hit || hit == s)
			continue;
		if (i == 0) {
			/* .llvm. followed by digits/hex to the end */
			const char *q = hit + k;

			if (q == s + n)
				continue;
			while (q < s + n && isxdigit((unsigned char)*q))
				q++;
			if (q == s + n)
				return (size_t)(hit - s);
		} else {
			const char *q = hit + k;

			if (q < s + n && *q == '.') {
				q++;
				while (q < s + n && isdigit((unsigned char)*q))
					q++;
			}
			if (q == s + n)
				return (size_t)(hit - s);
		}
	}
	return end;
}

size_t ma_demangle_base_len(const char *name)
{
	const char *at = strchr(name, '@');
	size_t n = strlen(name), m;

	/* Symbol versions ("memcpy@@GLIBC_2.14") are not part of the name. */
	if (at && at != name)
		n = (size_t)(at - name);
	while ((m = strip_one(name, n)) < n)
		n = m;
	return n;
}

/* A legacy Rust name ends in "17h<16 hex digits>E". */
static bool rust_legacy(const char *s, size_t n)
{
	if (n < 21 || s[n - 1] != 'E' || memcmp(s + n - 20, "17h", 3) != 0)
		return false;
	for (size_t i = n - 17; i < n - 1; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

char *ma_demangle(const char *name)
{
	size_t n = ma_demangle_base_len(name), m = n;
	char *base = strndup(name, n), *d, *dot, *r;

	if (!base)
		return NULL;
	if (!(base[0] == '_' && (base[1] == 'Z' || base[1] == 'R')))
		return base;
	/* Rust keeps a ".0"-style suffix after the name, as rustfilt does;
	 * C++ clones (".constprop.0") are libiberty's to print. */
	dot = strchr(base, '.');
	if (dot && (base[1] == 'R' || rust_legacy(base, (size_t)(dot - base))))
		m = (size_t)(dot - base);
	base[m] = '\0';
	d = cplus_demangle(base, DMGL_PARAMS | DMGL_ANSI);
	if (m < n)
		base[m] = '.';
	if (!d)
		return base;
	if (m == n) {
		free(base);
		return d;
	}
	r = malloc(strlen(d) + (n - m) + 1);
	if (r)
		sprintf(r, "%s%s", d, base + m);
	free(d);
	free(base);
	return r;
}
