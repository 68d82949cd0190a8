/*
 * format.h - how values are shown.
 *
 * Byte counts for tables, one format everywhere: whole bytes below 1 KiB,
 * else three significant digits in the largest binary unit ("512 B",
 * "2.00 KiB", "45.4 MiB", "399 GiB").  --json gives exact numbers.
 *
 * Strings read from the target (process and thread names, paths of its
 * mappings, symbol names from its files or heap dumps, jemalloc's version,
 * error messages naming any of these) are printed in their printable form:
 * every byte a terminal could act on is shown as \xHH (lower-case hex), so
 * a name can neither send escape sequences to root's terminal nor start a
 * line of its own.  Escaped are C0 controls (0x00-0x1f: newline and tab
 * too), DEL, bytes that are not UTF-8 (a lone 0x9b is a C1 CSI to many
 * terminals), and each byte of a UTF-8 character that is not printable (C1
 * controls U+0080-U+009F, line separators, unassigned code points) or that
 * reorders text (bidirectional controls).  Printable UTF-8 (C++ and Rust
 * symbols, non-ASCII names) stays as it is.  A backslash is not escaped,
 * so the printable form of a printable form is itself: a message may be
 * made printable at every layer it passes.
 */
#ifndef MA_FORMAT_H
#define MA_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* N bytes; returns BUF. */
const char *ma_fmt_bytes(char *buf, size_t len, uint64_t n);
/* Bytes with a sign: "-1.00 MiB", and "+1.00 MiB" for a rise if PLUS; returns BUF. */
const char *ma_fmt_signed_bytes(char *buf, size_t len, int64_t n, bool plus);
/* A scaled (fractional) byte figure, signed as ma_fmt_signed_bytes; returns BUF. */
const char *ma_fmt_scaled_bytes(char *buf, size_t len, double v, bool plus);

/*
 * S in its printable form, for a printf argument: S itself when nothing in
 * it needs escaping (NULL stays NULL), else a copy that stays valid until
 * MA_PRINTABLE_SLOTS more calls (one printf may take that many).  Not
 * thread-safe: memattach prints from one thread.
 */
#define MA_PRINTABLE_SLOTS 8
const char *ma_printable(const char *s);
/* The printable form of S into DST (SIZE > 0), cut before an escape or a
 * character that would not fit; returns its length. */
size_t ma_printable_into(char *dst, size_t size, const char *s);

/* The UTF-8 character at S (not at its end): its length (1-4) and code
 * point in *CP, or 0 if S does not start with valid UTF-8 (RFC 3629). */
size_t ma_utf8_char(const char *s, uint32_t *cp);
/* Is code point CP shown as it is (a printable character, no bidi control)? */
bool ma_char_printable(uint32_t cp);

/* XML character data (or a double-quoted attribute value) for S: its
 * printable form, at most MAX_CHARS characters of it, then ".." if cut. */
void ma_xml_text(FILE *f, const char *s, size_t max_chars);

/*
 * Text output fits a terminal of MA_TEXT_WIDTH columns (JSON and other
 * machine formats are never wrapped).  ma_wrap_text returns TEXT with each
 * line longer than WIDTH characters broken at its last space that fits and
 * continued after HANG spaces (a hanging indent: a message's continuation
 * under its first word, a table row's under its description column).  Only
 * spaces break a line, never before column HANG: a name or a path longer
 * than the room left stays whole and overflows.  Spaces inside a line
 * (table alignment) are kept; those at a break are dropped.  A string to
 * free; NULL when out of memory.
 */
#define MA_TEXT_WIDTH 100
char *ma_wrap_text(const char *text, size_t width, size_t hang);
/* A space that never breaks a line: written as a space by ma_wrap_text.  It
 * cannot come from a name, whose control bytes the printable form escapes. */
#define MA_WRAP_GLUE '\x1f'
/* The columns S takes on a terminal: one per UTF-8 character. */
size_t ma_text_columns(const char *s);

#endif
