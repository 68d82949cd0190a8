/*
 * format.c - the one byte formatter (format.h).
 */
#include <stdio.h>

#include "format.h"

const char *ma_fmt_scaled_bytes(char *buf, size_t len, double v, bool plus)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	const char *sign = v < 0 ? "-" : v > 0 && plus ? "+" : "";
	double a = v < 0 ? -v : v;
	int u = 0;

	while (a >= 1024 && u < 6) {
		a /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%s%.0f B", sign, a);
	else
		snprintf(buf, len, "%s%.*f %s", sign, a < 10 ? 2 : a < 100 ? 1 : 0, a, units[u]);
	return buf;
}

const char *ma_fmt_bytes(char *buf, size_t len, uint64_t n)
{
	return ma_fmt_scaled_bytes(buf, len, (double)n, false);
}

const char *ma_fmt_signed_bytes(char *buf, size_t len, int64_t n, bool plus)
{
	return ma_fmt_scaled_bytes(buf, len, (double)n, plus); /* INT64_MIN is exact in a double */
}
