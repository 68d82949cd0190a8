/*
 * Unit test: the one byte formatter (format.h): whole bytes below 1 KiB,
 * three significant digits above, signs, and the extremes; and the layout
 * of text for a terminal (ma_wrap_text).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "format.h"

static int is(const char *got, const char *want)
{
	if (strcmp(got, want) != 0)
		printf("# got '%s', want '%s'\n", got, want);
	return strcmp(got, want) == 0;
}

/* Does ma_wrap_text(TEXT, WIDTH, HANG) give WANT? */
static int wraps(const char *text, size_t width, size_t hang, const char *want)
{
	char *got = ma_wrap_text(text, width, hang);
	int ok = got && strcmp(got, want) == 0;

	if (!ok)
		printf("# got '%s', want '%s'\n", got ? got : "(null)", want);
	free(got);
	return ok;
}

static void check_wrap(void)
{
	CHECK("a line that fits is left as it is", wraps("a b  c", 6, 2, "a b  c"));
	CHECK("a long line breaks at its last space that fits, hanging",
	      wraps("memattach x: one two three", 16, 2, "memattach x: one\n  two three"));
	CHECK("every line of the text is wrapped on its own",
	      wraps("aaa bbb\nccc ddd eee", 7, 1, "aaa bbb\nccc ddd\n eee"));
	CHECK("a word longer than the width overflows whole, never cut",
	      wraps("abc /a/very/long/path b", 8, 2, "abc\n  /a/very/long/path\n  b"));
	CHECK("no break before the hanging indent: a table row's prefix stays whole",
	      wraps("name      longdescription", 12, 10, "name      longdescription"));
	CHECK("alignment spaces kept, spaces at a break dropped",
	      wraps("x   1   2     3", 9, 4, "x   1   2\n    3"));
	CHECK("UTF-8 counts one column per character, not per byte",
	      wraps("\xc3\xa9\xc3\xa9 \xc3\xa9\xc3\xa9", 5, 0, "\xc3\xa9\xc3\xa9 \xc3\xa9\xc3\xa9"));
	CHECK("a text without a newline at its end gets none", wraps("", 5, 0, ""));
	CHECK("a final newline stays", wraps("aa bb\n", 3, 0, "aa\nbb\n"));
	CHECK("glued words move together and are written with a space",
	      wraps("see 'a\x1f" "b\x1f" "c'", 8, 2, "see\n  'a b c'"));
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
	check_wrap();
	CHECK_DONE();
}
