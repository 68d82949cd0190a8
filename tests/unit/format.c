/*
 * Unit test: the one byte formatter (format.h): whole bytes below 1 KiB,
 * three significant digits above, signs, and the extremes.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "format.h"

static int is(const char *got, const char *want)
{
	if (strcmp(got, want) != 0)
		printf("# got '%s', want '%s'\n", got, want);
	return strcmp(got, want) == 0;
}

int main(void)
{
	char b[48];

	CHECK("0 B", is(ma_fmt_bytes(b, sizeof(b), 0), "0 B"));
	CHECK("1023 B", is(ma_fmt_bytes(b, sizeof(b), 1023), "1023 B"));
	CHECK("1 KiB: 1.00 KiB", is(ma_fmt_bytes(b, sizeof(b), 1024), "1.00 KiB"));
	CHECK("45.4 KiB", is(ma_fmt_bytes(b, sizeof(b), 46490), "45.4 KiB"));
	CHECK("399 KiB", is(ma_fmt_bytes(b, sizeof(b), 408166), "399 KiB"));
	CHECK("2.00 GiB", is(ma_fmt_bytes(b, sizeof(b), 2147483648ULL), "2.00 GiB"));
	CHECK("UINT64_MAX: 16.0 EiB", is(ma_fmt_bytes(b, sizeof(b), UINT64_MAX), "16.0 EiB"));
	CHECK("a fall: -1.00 MiB", is(ma_fmt_signed_bytes(b, sizeof(b), -1048576, true), "-1.00 MiB"));
	CHECK("a rise with plus: +512 B", is(ma_fmt_signed_bytes(b, sizeof(b), 512, true), "+512 B"));
	CHECK("a rise without plus", is(ma_fmt_signed_bytes(b, sizeof(b), 512, false), "512 B"));
	CHECK("zero has no sign", is(ma_fmt_signed_bytes(b, sizeof(b), 0, true), "0 B"));
	CHECK("INT64_MIN: -8.00 EiB", is(ma_fmt_signed_bytes(b, sizeof(b), INT64_MIN, true), "-8.00 EiB"));
	CHECK("scaled 1536.4: 1.50 KiB", is(ma_fmt_scaled_bytes(b, sizeof(b), 1536.4, false), "1.50 KiB"));
	CHECK("scaled -100.6: -101 B", is(ma_fmt_scaled_bytes(b, sizeof(b), -100.6, false), "-101 B"));
	CHECK("a small buffer is cut, not overrun", ma_fmt_bytes(b, 4, 408166) == b && strlen(b) == 3);
	CHECK_DONE();
}
