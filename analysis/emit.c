#include <math.h>

#include "emit.h"
#include "format.h"

void ma_json_init(struct ma_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->need_comma[0] = false;
}

/* One character, code point CP (N bytes at S), inside a JSON string. */
static void json_char(FILE *f, const char *s, size_t n, uint32_t cp)
{
	switch (cp) {
	case '"': fputs("\\\"", f); return;
	case '\\': fputs("\\\\", f); return;
	case '\n': fputs("\\n", f); return;
	case '\r': fputs("\\r", f); return;
	case '\t': fputs("\\t", f); return;
	}
	/* What text output would escape is written as \uXXXX (RFC 8259 needs
	 * it below U+0020 only): the document shown on a terminal is safe too,
	 * and decodes to the same characters. */
	if (ma_char_printable(cp))
		fwrite(s, 1, n, f);
	else if (cp < 0x10000)
		fprintf(f, "\\u%04x", (unsigned)cp);
	else /* a UTF-16 surrogate pair */
		fprintf(f, "\\u%04x\\u%04x", (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
			(unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
}

void ma_json_write_string(FILE *f, const char *s)
{
	uint32_t cp;
	size_t n;

	fputc('"', f);
	for (; s && *s; s += n ? n : 1) {
		n = ma_utf8_char(s, &cp);
		if (n)
			json_char(f, s, n, cp);
		else
			fputs("\\ufffd", f); /* not UTF-8: a JSON string is Unicode text */
	}
	fputc('"', f);
}

static void prefix(struct ma_json *j, const char *key)
{
	if (j->need_comma[j->depth])
		fputc(',', j->f);
	j->need_comma[j->depth] = true;
	if (key) {
		ma_json_write_string(j->f, key);
		fputc(':', j->f);
	}
}

static void open_(struct ma_json *j, const char *key, char c)
{
	prefix(j, key);
	fputc(c, j->f);
	if (j->depth + 1 < MA_JSON_MAX_DEPTH)
		j->depth++;
	j->need_comma[j->depth] = false;
}

static void close_(struct ma_json *j, char c)
{
	fputc(c, j->f);
	if (j->depth > 0)
		j->depth--;
}

void ma_json_obj_open(struct ma_json *j, const char *key) { open_(j, key, '{'); }
void ma_json_obj_close(struct ma_json *j) { close_(j, '}'); }
void ma_json_arr_open(struct ma_json *j, const char *key) { open_(j, key, '['); }
void ma_json_arr_close(struct ma_json *j) { close_(j, ']'); }

void ma_json_u64(struct ma_json *j, const char *key, uint64_t v)
{
	prefix(j, key);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void ma_json_i64(struct ma_json *j, const char *key, int64_t v)
{
	prefix(j, key);
	fprintf(j->f, "%lld", (long long)v);
}

void ma_json_double(struct ma_json *j, const char *key, double v)
{
	prefix(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.6g", v);
	else
		fputs("null", j->f);
}

void ma_json_str(struct ma_json *j, const char *key, const char *s)
{
	prefix(j, key);
	if (s)
		ma_json_write_string(j->f, s);
	else
		fputs("null", j->f);
}

void ma_json_bool(struct ma_json *j, const char *key, bool v)
{
	prefix(j, key);
	fputs(v ? "true" : "false", j->f);
}

void ma_json_null(struct ma_json *j, const char *key)
{
	prefix(j, key);
	fputs("null", j->f);
}

void ma_json_end(struct ma_json *j)
{
	fputc('\n', j->f);
	fflush(j->f);
}
