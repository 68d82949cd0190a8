/*
 * emit.h - a small streaming JSON writer (commas, escaping, nesting).
 *
 * Commands choose plain or JSON output once; JSON goes through this so every
 * command escapes strings the same way and keys stay snake_case.  Pass a
 * NULL key inside arrays and for the top-level value.
 */
#ifndef MA_EMIT_H
#define MA_EMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define MA_JSON_MAX_DEPTH 32

struct ma_json {
	FILE *f;
	int depth;
	bool need_comma[MA_JSON_MAX_DEPTH];
};

void ma_json_init(struct ma_json *j, FILE *f);
void ma_json_obj_open(struct ma_json *j, const char *key);
void ma_json_obj_close(struct ma_json *j);
void ma_json_arr_open(struct ma_json *j, const char *key);
void ma_json_arr_close(struct ma_json *j);
void ma_json_u64(struct ma_json *j, const char *key, uint64_t v);
void ma_json_i64(struct ma_json *j, const char *key, int64_t v);
void ma_json_double(struct ma_json *j, const char *key, double v);
void ma_json_str(struct ma_json *j, const char *key, const char *s);
void ma_json_bool(struct ma_json *j, const char *key, bool v);
void ma_json_null(struct ma_json *j, const char *key);
/* Finish the document with a newline. */
void ma_json_end(struct ma_json *j);

/*
 * Write S as a JSON string literal (quotes included) to F, as RFC 8259
 * wants it; the characters text output escapes (format.h) are written as
 * \uXXXX, so the document holds no control byte, and bytes that are not
 * UTF-8 become U+FFFD (a JSON string is Unicode text).
 */
void ma_json_write_string(FILE *f, const char *s);

#endif
