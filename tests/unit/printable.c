/*
 * Unit test: the printable form of strings from the target (format.h), the
 * JSON string writer (emit.h) and XML text (format.h).  Control bytes, DEL,
 * bytes that are not UTF-8, C1 and bidi controls are escaped; printable
 * UTF-8 stays; a cut never splits an escape or a character; the printable
 * form of a printable form is itself; JSON decodes to the original text.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "emit.h"
#include "format.h"
#include "ma_error.h"

static int is(const char *got, const char *want)
{
	if (!got || strcmp(got, want) != 0)
		printf("# got '%s', want '%s'\n", got ? ma_printable(got) : "(null)", want);
	return got && strcmp(got, want) == 0;
}

/* What F writes for S, in a buffer the caller frees. */
static char *json_of(const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ma_json_write_string(f, s);
	fclose(f);
	return buf;
}

static char *xml_of(const char *s, size_t max_chars)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ma_xml_text(f, s, max_chars);
	fclose(f);
	return buf;
}

static int json_is(const char *s, const char *want)
{
	char *got = json_of(s);
	int ok = is(got, want);

	free(got);
	return ok;
}

static int xml_is(const char *s, size_t max_chars, const char *want)
{
	char *got = xml_of(s, max_chars);
	int ok = is(got, want);

	free(got);
	return ok;
}

static void printable_form(void)
{
	const char *plain = "worker_1 /usr/lib/libjemalloc.so.2";

	CHECK("plain ASCII is the string itself", ma_printable(plain) == plain);
	CHECK("NULL stays NULL", ma_printable(NULL) == NULL);
	CHECK("ESC [ and OSC ... BEL", is(ma_printable("a\x1b[31m\x1b]0;t\x07z"),
					 "a\\x1b[31m\\x1b]0;t\\x07z"));
	CHECK("newline, tab, CR, NUL-free C0 and DEL",
	      is(ma_printable("l1\nl2\tx\ry\x01\x7f"), "l1\\x0al2\\x09x\\x0dy\\x01\\x7f"));
	CHECK("a lone C1 byte (not UTF-8)", is(ma_printable("x\x9b" "31m"), "x\\x9b31m"));
	CHECK("C1 CSI encoded in UTF-8 (U+009B)", is(ma_printable("x\xc2\x9by"), "x\\xc2\\x9by"));
	CHECK("invalid bytes one by one", is(ma_printable("\xff\xfe" "a\xc3"), "\\xff\\xfea\\xc3"));
	CHECK("overlong '/' and a surrogate", is(ma_printable("\xc0\xaf\xed\xa0\x80"),
						  "\\xc0\\xaf\\xed\\xa0\\x80"));
	CHECK("above U+10FFFF is not UTF-8", is(ma_printable("\xf4\x90\x80\x80"),
						 "\\xf4\\x90\\x80\\x80"));
	CHECK("a right-to-left override (bidi control)",
	      is(ma_printable("a\xe2\x80\xae" "b"), "a\\xe2\\x80\\xaeb"));
	CHECK("a line separator (U+2028)", is(ma_printable("a\xe2\x80\xa8" "b"), "a\\xe2\\x80\\xa8b"));
	const char *utf8 = "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 std::vector<int>::push_back";
	CHECK("printable UTF-8 and C++ names stay as they are", ma_printable(utf8) == utf8);
	CHECK("a backslash is not escaped", is(ma_printable("a\\x1b\\"), "a\\x1b\\"));
	const char *once = ma_printable("\x1b]0;\xff\xc2\x9b\n");
	CHECK("the printable form of a printable form is itself", ma_printable(once) == once);

	const char *slot[MA_PRINTABLE_SLOTS];
	char want[MA_PRINTABLE_SLOTS][8];
	int all = 1;

	for (int i = 0; i < MA_PRINTABLE_SLOTS; i++) {
		char s[4] = { 'n', (char)('0' + i), '\x07', 0 };

		slot[i] = ma_printable(s);
		snprintf(want[i], sizeof(want[i]), "n%d\\x07", i);
	}
	for (int i = 0; i < MA_PRINTABLE_SLOTS; i++)
		all &= is(slot[i], want[i]);
	CHECK("one printf's worth of results stay valid together", all);
}

static void cut(void)
{
	char b[16];

	CHECK("cut before an escape, not inside it",
	      ma_printable_into(b, 8, "abcde\x1b") == 5 && is(b, "abcde"));
	CHECK("cut before a character, not inside it",
	      ma_printable_into(b, 6, "abcd\xc3\xa9") == 4 && is(b, "abcd"));
	CHECK("what fits is whole", ma_printable_into(b, 10, "ab\x1b\xc3\xa9") == 8 &&
					    is(b, "ab\\x1b\xc3\xa9"));
	CHECK("size 1: empty", ma_printable_into(b, 1, "\x1b") == 0 && is(b, ""));
}

static void json(void)
{
	CHECK("JSON: quote, backslash and the short forms",
	      json_is("\"\\\n\r\t", "\"\\\"\\\\\\n\\r\\t\""));
	CHECK("JSON: ESC, BEL, DEL as \\u escapes",
	      json_is("\x1b[31m\x07\x7f", "\"\\u001b[31m\\u0007\\u007f\""));
	CHECK("JSON: C1 (U+009B) as \\u009b, no raw 0x9b", json_is("a\xc2\x9b", "\"a\\u009b\""));
	CHECK("JSON: bytes that are not UTF-8 become U+FFFD",
	      json_is("a\x9b\xff" "b\xc3", "\"a\\ufffd\\ufffdb\\ufffd\""));
	CHECK("JSON: printable UTF-8 as it is",
	      json_is("caf\xc3\xa9 \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\""));
	CHECK("JSON: a bidi control as \\u202e", json_is("\xe2\x80\xae", "\"\\u202e\""));
	CHECK("JSON: a noncharacter above U+FFFF (U+1FFFF) as a surrogate pair",
	      json_is("\xf0\x9f\xbf\xbf", "\"\\ud83f\\udfff\""));
	CHECK("JSON: NULL is an empty string", json_is(NULL, "\"\""));
}

static void xml(void)
{
	CHECK("XML: markup characters", xml_is("a<b>&\"c\"", 100, "a&lt;b&gt;&amp;&quot;c&quot;"));
	CHECK("XML: controls in their printable form", xml_is("f\x1b\x07", 100, "f\\x1b\\x07"));
	CHECK("XML: not UTF-8 in its printable form", xml_is("f\xff", 100, "f\\xff"));
	CHECK("XML: cut after MAX characters, not inside one",
	      xml_is("\xc3\xa9\xc3\xa9\xc3\xa9", 2, "\xc3\xa9\xc3\xa9.."));
	CHECK("XML: uncut when it fits", xml_is("abc", 3, "abc"));
}

static void error_messages(void)
{
	ma_err_clear();
	ma_fail(-1, "process %d (%s) is traced by %s", 7, "\x1b]0;x\x07", "a\nb");
	CHECK("ma_fail keeps the message printable",
	      is(ma_errmsg(), "process 7 (\\x1b]0;x\\x07) is traced by a\\x0ab"));
	ma_err_clear();
}

int main(void)
{
	printable_form();
	cut();
	json();
	xml();
	error_messages();
	CHECK_DONE();
}
