/*
 * format.c - byte counts and the printable form of strings (format.h).
 */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <wctype.h>

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

/* ---- the printable form of strings from the target ---- */

/*
 * The C.UTF-8 locale (built into glibc since 2.35): its mbrtowc decodes
 * UTF-8 and its iswprint knows which characters print.  Looked up once;
 * (locale_t)0 if there is none, and then every non-ASCII byte is escaped.
 */
static locale_t utf8_locale(void)
{
	static locale_t loc;
	static bool looked_up;

	if (!looked_up) {
		loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
		looked_up = true;
	}
	return loc;
}

size_t ma_utf8_char(const char *s, uint32_t *cp)
{
	unsigned char c = (unsigned char)*s;
	locale_t loc, old;
	mbstate_t st;
	wchar_t wc;
	size_t n;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (!(loc = utf8_locale()))
		return 0;
	memset(&st, 0, sizeof(st));
	old = uselocale(loc);
	n = mbrtowc(&wc, s, strnlen(s, 4), &st);
	uselocale(old);
	/* glibc also decodes the old forms of code points above U+10FFFF,
	 * where UTF-8 (RFC 3629) and JSON end. */
	if (n == 0 || n > 4 || (uint32_t)wc > 0x10ffff || (wc >= 0xd800 && wc <= 0xdfff))
		return 0;
	*cp = (uint32_t)wc;
	return n;
}

/* Unicode's bidirectional controls: printed, they could reorder the rest
 * of the line (and make one name look like another). */
static bool is_bidi_control(uint32_t cp)
{
	return cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

bool ma_char_printable(uint32_t cp)
{
	locale_t loc;

	if (cp < 0x80)
		return cp >= 0x20 && cp != 0x7f;
	if (is_bidi_control(cp) || !(loc = utf8_locale()))
		return false;
	return iswprint_l((wint_t)cp, loc) != 0;
}

/* How many bytes at the start of S are shown as they are. */
static size_t printable_prefix(const char *s)
{
	const char *p = s;
	uint32_t cp;
	size_t n;

	while (*p && (n = ma_utf8_char(p, &cp)) && ma_char_printable(cp))
		p += n;
	return (size_t)(p - s);
}

static void put_hex_escape(char *dst, unsigned char c)
{
	static const char hex[] = "0123456789abcdef";

	dst[0] = '\\';
	dst[1] = 'x';
	dst[2] = hex[c >> 4];
	dst[3] = hex[c & 15];
}

/*
 * The next unit of the printable form of S (not at its end) into UNIT: a
 * character shown as it is, or each byte of one that is not as \xHH (one
 * byte where S is not UTF-8).  *IN gets the bytes of S it stands for;
 * returns its length (at most 16).
 */
static size_t next_unit(const char *s, char unit[static 16], size_t *in)
{
	uint32_t cp;
	size_t n = ma_utf8_char(s, &cp);

	if (n && ma_char_printable(cp)) {
		memcpy(unit, s, n);
		*in = n;
		return n;
	}
	*in = n ? n : 1;
	for (size_t i = 0; i < *in; i++)
		put_hex_escape(unit + 4 * i, (unsigned char)s[i]);
	return 4 * *in;
}

size_t ma_printable_into(char *dst, size_t size, const char *s)
{
	size_t len = 0, in, out;
	char unit[16];

	for (; *s; s += in) {
		out = next_unit(s, unit, &in);
		if (len + out >= size)
			break;
		memcpy(dst + len, unit, out);
		len += out;
	}
	dst[len] = '\0';
	return len;
}

const char *ma_printable(const char *s)
{
	static char *slot[MA_PRINTABLE_SLOTS];
	static unsigned next;
	size_t size;
	char *buf;

	if (!s || !s[printable_prefix(s)])
		return s;
	size = 4 * strlen(s) + 1;
	if (!(buf = realloc(slot[next], size)))
		return "?"; /* out of memory: nothing of S rather than S raw */
	slot[next] = buf;
	next = (next + 1) % MA_PRINTABLE_SLOTS;
	ma_printable_into(buf, size, s);
	return buf;
}

void ma_xml_text(FILE *f, const char *s, size_t max_chars)
{
	const char *p = ma_printable(s);
	size_t chars = 0;

	for (; p && *p; p++) {
		/* A character starts at every byte but a UTF-8 continuation byte. */
		if (((unsigned char)*p & 0xc0) != 0x80 && chars++ == max_chars)
			break;
		switch (*p) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*p, f);
		}
	}
	if (p && *p)
		fputs("..", f);
}

/* ---- lines laid out for a terminal ---- */

/* How many characters of S's first N bytes a terminal shows: one per
 * character (a UTF-8 continuation byte adds none). */
static size_t display_columns(const char *s, size_t n)
{
	size_t cols = 0;

	for (size_t i = 0; i < n; i++)
		cols += ((unsigned char)s[i] & 0xc0) != 0x80;
	return cols;
}

size_t ma_text_columns(const char *s)
{
	return display_columns(s, strlen(s));
}

/* One line of text (no newline in it, LEN bytes) wrapped into F. */
static void wrap_line(FILE *f, const char *line, size_t len, size_t width, size_t hang)
{
	const char *p = line, *end = line + len;
	size_t col = 0;

	while (p < end) {
		const char *word = p, *word_end;
		size_t gap, cols;

		while (word < end && *word == ' ')
			word++;
		for (word_end = word; word_end < end && *word_end != ' '; word_end++)
			;
		gap = (size_t)(word - p);
		cols = display_columns(word, (size_t)(word_end - word));
		/* A break helps only once the line holds more than its indent;
		 * spaces at the end of a line are no word and never break it. */
		if (word < end && col > hang && col + gap + cols > width) {
			fprintf(f, "\n%*s", (int)hang, "");
			col = hang;
		} else {
			fwrite(p, 1, gap, f);
			col += gap;
		}
		fwrite(word, 1, (size_t)(word_end - word), f);
		col += cols;
		p = word_end;
	}
}

char *ma_wrap_text(const char *text, size_t width, size_t hang)
{
	char *out = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&out, &size);

	if (!f)
		return NULL;
	for (const char *line = text, *nl;; line = nl + 1) {
		nl = strchrnul(line, '\n');
		wrap_line(f, line, (size_t)(nl - line), width, hang);
		if (!*nl)
			break;
		fputc('\n', f);
	}
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	for (char *g = strchr(out, MA_WRAP_GLUE); g; g = strchr(g + 1, MA_WRAP_GLUE))
		*g = ' ';
	return out;
}
