/*
 * tests/unit/emit.c - the JSON writer every command uses (analysis/emit.c):
 * commas and nesting, the escapes RFC 8259 requires, the control and
 * terminal characters written as \uXXXX (no control byte in a document),
 * bytes that are not UTF-8 replaced by U+FFFD, valid UTF-8 kept, NaN and
 * infinities as null, the integer extremes.  The expected document was
 * checked once with Python's json module; here it is compared byte for byte.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "emit.h"

static char *write_doc(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct ma_json j;

	if (!f)
		return NULL;
	ma_json_init(&j, f);
	ma_json_obj_open(&j, NULL);
	ma_json_str(&j, "q", "a\"b\\c/d");
	ma_json_str(&j, "ctl", "\n\t\x01\x1b[31m\x7f");
	ma_json_str(&j, "c1", "x\xc2\x85y\xc2\x9b");
	ma_json_str(&j, "utf8", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	ma_json_str(&j, "bad", "a\xff" "b\xc3" "c\xe2\x82" "d\xed\xa0\x80" "e\xc0\xaf");
	ma_json_str(&j, "bidi", "\xe2\x80\xae" "x");
	ma_json_str(&j, "null", NULL);
	ma_json_double(&j, "nan", NAN);
	ma_json_double(&j, "inf", -INFINITY);
	ma_json_double(&j, "d", 0.1);
	ma_json_double(&j, "big", 1e300);
	ma_json_i64(&j, "min", INT64_MIN);
	ma_json_u64(&j, "max", UINT64_MAX);
	ma_json_arr_open(&j, "a");
	ma_json_u64(&j, NULL, 1);
	ma_json_obj_open(&j, NULL);
	ma_json_obj_close(&j);
	ma_json_arr_open(&j, NULL);
	ma_json_arr_close(&j);
	ma_json_bool(&j, NULL, true);
	ma_json_null(&j, NULL);
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
	fclose(f);
	return buf;
}

int main(void)
{
	static const char want[] =
		"{\"q\":\"a\\\"b\\\\c/d\","
		"\"ctl\":\"\\n\\t\\u0001\\u001b[31m\\u007f\","
		"\"c1\":\"x\\u0085y\\u009b\","
		"\"utf8\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
		"\"bad\":\"a\\ufffdb\\ufffdc\\ufffd\\ufffdd\\ufffd\\ufffd\\ufffde\\ufffd\\ufffd\","
		"\"bidi\":\"\\u202ex\","
		"\"null\":null,\"nan\":null,\"inf\":null,\"d\":0.1,\"big\":1e+300,"
		"\"min\":-9223372036854775808,\"max\":18446744073709551615,"
		"\"a\":[1,{},[],true,null]}\n";
	char *doc = write_doc();
	bool no_control = doc != NULL;

	CHECK("a document was written", doc != NULL);
	for (const char *p = doc; p && *p; p++)
		if ((unsigned char)*p < 0x20 && p[1] != '\0') /* the final newline only */
			no_control = false;
	CHECK("no control byte in the document", no_control);
	CHECK("quote and backslash escaped, solidus kept", doc && strstr(doc, "\"a\\\"b\\\\c/d\""));
	CHECK("newline and tab short, other controls and DEL as \\u00XX",
	      doc && strstr(doc, "\"\\n\\t\\u0001\\u001b[31m\\u007f\""));
	CHECK("C1 controls (U+0085, CSI U+009B) as \\u00XX", doc && strstr(doc, "\"x\\u0085y\\u009b\""));
	CHECK("valid UTF-8 kept as it is", doc && strstr(doc, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
	CHECK("invalid bytes, truncated sequences, surrogates, overlongs: U+FFFD",
	      doc && strstr(doc, "\"a\\ufffdb\\ufffdc\\ufffd\\ufffdd\\ufffd\\ufffd\\ufffde\\ufffd\\ufffd\""));
	CHECK("a bidi override escaped (it would reorder a terminal's text)", doc && strstr(doc, "\\u202ex"));
	CHECK("NaN, infinity and a NULL string as null",
	      doc && strstr(doc, "\"null\":null,\"nan\":null,\"inf\":null"));
	CHECK("integer extremes exact", doc && strstr(doc, "-9223372036854775808") &&
						strstr(doc, "18446744073709551615"));
	CHECK("commas and nesting: empty object and array inside an array",
	      doc && strstr(doc, "\"a\":[1,{},[],true,null]}"));
	CHECK("the whole document, byte for byte", doc && strcmp(doc, want) == 0);
	if (doc && strcmp(doc, want) != 0)
		printf("# got: %s", doc);
	free(doc);
	CHECK_DONE();
}
