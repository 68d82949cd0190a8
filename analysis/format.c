#include <stdio.h>

#include "format.h"

const char *ma_fmt_bytes(char *buf, size_t len, uint64_t n)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

const char *ma_fmt_signed_bytes(char *buf, size_t len, int64_t n, bool plus)
{
	char b[32];
	uint64_t m = n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n;

	snprintf(buf, len, "%s%s", n < 0 ? "-" : n > 0 && plus ? "+" : "",
		 ma_fmt_bytes(b, sizeof(b), m));
	return buf;
}
