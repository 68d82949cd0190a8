#include <math.h>

#include "emit.h"

void ma_json_init(struct ma_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->need_comma[0] = false;
}

void ma_json_write_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; s && *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
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
