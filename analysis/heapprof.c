/*
 * heapprof.c - parse jemalloc heap_v2 dumps and unsample them per stack.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heapprof.h"
#include "input.h"
#include "ma_error.h"

/* A line without its end (LF or CRLF); not NUL-terminated. */
struct line {
	const char *p, *end;
};

struct parser {
	const char *cur, *end;
	size_t lineno;
	struct ma_heapprof *hp;
	size_t cap_stacks, cap_pcs, cap_maps;
	bool long_line; /* a line longer than MAX_LINE was cut there */
};

/* jemalloc writes at most 128 frames a stack (~2.5 KiB) and /proc maps
 * lines of a path's length: a longer line is not part of a dump. */
#define MAX_LINE (1 << 20)

static bool next_line(struct parser *ps, struct line *l)
{
	size_t left = (size_t)(ps->end - ps->cur);
	const char *nl;

	if (ps->cur >= ps->end)
		return false;
	/* Never scan further than one line may be long. */
	nl = memchr(ps->cur, '\n', left > MAX_LINE ? MAX_LINE + 1 : left);
	l->p = ps->cur;
	if (!nl && left > MAX_LINE) {
		ps->long_line = true;
		l->end = ps->cur + MAX_LINE;
		ps->cur = ps->end;
		ps->lineno++;
		return true;
	}
	l->end = nl ? nl : ps->end;
	ps->cur = nl ? nl + 1 : ps->end;
	if (l->end > l->p && l->end[-1] == '\r')
		l->end--;
	ps->lineno++;
	return true;
}

static void warn(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warn(struct parser *ps, const char *fmt, ...)
{
	struct ma_heapprof *hp = ps->hp;

	if (hp->nwarnings++ == 0) {
		va_list ap;
		int n = snprintf(hp->warning, sizeof(hp->warning), "line %zu: ", ps->lineno);

		va_start(ap, fmt);
		if (n > 0 && (size_t)n < sizeof(hp->warning))
			vsnprintf(hp->warning + n, sizeof(hp->warning) - (size_t)n, fmt, ap);
		va_end(ap);
	}
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

static bool starts_with(const struct line *l, const char *s)
{
	size_t n = strlen(s);

	return (size_t)(l->end - l->p) >= n && memcmp(l->p, s, n) == 0;
}

/* Decimal u64; false on no digits or overflow. */
static bool parse_dec(const char **pp, const char *end, uint64_t *v)
{
	const char *p = *pp;
	uint64_t x = 0;

	if (p >= end || !isdigit((unsigned char)*p))
		return false;
	while (p < end && isdigit((unsigned char)*p)) {
		unsigned d = (unsigned)(*p - '0');

		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
		p++;
	}
	*pp = p;
	*v = x;
	return true;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Hex u64 with optional 0x; false on no digits or more than 16 of them. */
static bool parse_hex(const char **pp, const char *end, uint64_t *v)
{
	const char *p = *pp;
	uint64_t x = 0;
	int n = 0, d;

	if (end - p >= 2 && p[0] == '0' && (p[1] | 0x20) == 'x')
		p += 2;
	while (p < end && (d = hexval((unsigned char)*p)) >= 0) {
		if (++n > 16)
			return false;
		x = (x << 4) | (uint64_t)d;
		p++;
	}
	if (n == 0)
		return false;
	*pp = p;
	*v = x;
	return true;
}

/*
 * "  t*: <objs>: <bytes> [<accumobjs>: <accumbytes>]" or "t<uid>: ...".
 * Sets *total for t*.  False if the line is not a count line.
 */
static bool parse_counts(const struct line *l, bool *total, uint64_t v[4])
{
	const char *p = skip_ws(l->p, l->end), *end = l->end;

	if (p >= end || *p != 't')
		return false;
	p++;
	if (p < end && *p == '*') {
		*total = true;
		p++;
	} else {
		uint64_t uid;

		*total = false;
		if (!parse_dec(&p, end, &uid))
			return false;
	}
	if (p >= end || *p++ != ':')
		return false;
	p = skip_ws(p, end);
	if (!parse_dec(&p, end, &v[0]) || p >= end || *p++ != ':')
		return false;
	p = skip_ws(p, end);
	if (!parse_dec(&p, end, &v[1]))
		return false;
	v[2] = v[3] = 0;
	p = skip_ws(p, end);
	if (p < end && *p == '[') {
		p = skip_ws(p + 1, end);
		if (!parse_dec(&p, end, &v[2]) || p >= end || *p++ != ':')
			return false;
		p = skip_ws(p, end);
		if (!parse_dec(&p, end, &v[3]))
			return false;
		p = skip_ws(p, end);
		if (p >= end || *p != ']')
			return false;
	}
	return true;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *n;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 64;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / elem)
			return ma_fail(MA_E_NOMEM, "heap dump too large");
		ncap *= 2;
	}
	n = realloc(*arr, ncap * elem);
	if (!n)
		return ma_fail(MA_E_NOMEM, "out of memory reading heap dump");
	*arr = n;
	*cap = ncap;
	return 0;
}

/* "@ 0x... 0x..." -> a new stack (counts filled in later). */
static int parse_stack(struct parser *ps, const struct line *l, bool *ok)
{
	struct ma_heapprof *hp = ps->hp;
	const char *p = l->p + 1, *end = l->end;
	size_t first = hp->npcs;
	uint32_t n = 0;
	int rc;

	*ok = false;
	for (;;) {
		uint64_t pc;

		p = skip_ws(p, end);
		if (p >= end)
			break;
		if (!parse_hex(&p, end, &pc) || (p < end && *p != ' ' && *p != '\t')) {
			warn(ps, "bad address in stack; stack skipped");
			hp->npcs = first;
			return 0;
		}
		if (n == MA_HP_MAX_FRAMES) {
			warn(ps, "stack deeper than %d frames; cut", MA_HP_MAX_FRAMES);
			break;
		}
		rc = grow((void **)&hp->pcs, &ps->cap_pcs, hp->npcs + 1, sizeof(uint64_t));
		if (rc)
			return rc;
		hp->pcs[hp->npcs++] = pc;
		n++;
	}
	if (n == 0) {
		warn(ps, "empty stack skipped");
		return 0;
	}
	rc = grow((void **)&hp->stacks, &ps->cap_stacks, hp->nstacks + 1, sizeof(*hp->stacks));
	if (rc)
		return rc;
	hp->stacks[hp->nstacks] = (struct ma_hp_stack){ .pc_first = first, .npcs = n, .scale = 1 };
	*ok = true;
	return 0;
}

/* "start-end perms offset dev inode   path" */
static int parse_map(struct parser *ps, const struct line *l)
{
	struct ma_heapprof *hp = ps->hp;
	const char *p = l->p, *end = l->end, *perm;
	uint64_t start, stop, off, major, minor, inode;
	struct ma_hp_map *m;
	size_t perm_len;
	bool exec;
	int rc;

	if (!parse_hex(&p, end, &start) || p >= end || *p++ != '-' ||
	    !parse_hex(&p, end, &stop) || stop < start) {
		if (skip_ws(l->p, l->end) != l->end)
			warn(ps, "unreadable line in MAPPED_LIBRARIES: skipped");
		return 0;
	}
	p = skip_ws(p, end);
	perm = p;
	while (p < end && *p != ' ')
		p++;
	exec = p - perm >= 3 && perm[2] == 'x';
	perm_len = (size_t)(p - perm);
	p = skip_ws(p, end);
	if (!parse_hex(&p, end, &off))
		off = 0;
	/* dev ("fe:00", hex) and inode (decimal): which file it was */
	p = skip_ws(p, end);
	if (!parse_hex(&p, end, &major) || p >= end || *p++ != ':' || !parse_hex(&p, end, &minor))
		major = minor = 0;
	while (p < end && *p != ' ' && *p != '\t')
		p++;
	p = skip_ws(p, end);
	for (inode = 0; p < end && *p >= '0' && *p <= '9' && inode < UINT64_MAX / 10 - 9; p++)
		inode = inode * 10 + (uint64_t)(*p - '0');
	while (p < end && *p != ' ' && *p != '\t')
		p++;
	p = skip_ws(p, end);
	rc = grow((void **)&hp->maps, &ps->cap_maps, hp->nmaps + 1, sizeof(*hp->maps));
	if (rc)
		return rc;
	m = &hp->maps[hp->nmaps];
	*m = (struct ma_hp_map){ .start = start, .end = stop, .offset = off, .inode = inode,
				 .dev_major = (unsigned)major, .dev_minor = (unsigned)minor };
	m->exec = exec;
	if (perm_len == 4) {
		memcpy(m->perms, perm, 4);
		m->perms[4] = '\0';
	}
	if (p < end) {
		m->path = strndup(p, (size_t)(end - p));
		if (!m->path)
			return ma_fail(MA_E_NOMEM, "out of memory");
	}
	hp->nmaps++;
	return 0;
}

/* Describe what the first line holds instead of a heap_v2 header. */
static void describe(char *buf, size_t size, const struct line *l)
{
	size_t n = (size_t)(l->end - l->p), out = 0;
	bool binary = false;

	if (n > 40)
		n = 40;
	for (size_t i = 0; i < n; i++)
		if (!isprint((unsigned char)l->p[i]) && l->p[i] != '\t')
			binary = true;
	if (binary) {
		snprintf(buf, size, "binary data");
		return;
	}
	out += (size_t)snprintf(buf, size, "'");
	for (size_t i = 0; i < n && out + 5 < size; i++)
		buf[out++] = l->p[i];
	snprintf(buf + out, size - out, "%s'", (size_t)(l->end - l->p) > n ? "..." : "");
}

static int check_header(struct parser *ps, const char *what)
{
	struct ma_heapprof *hp = ps->hp;
	struct line l;
	char desc[80];
	const char *p, *end = ps->end;
	bool got;

	/* The header is short: look for its end in the first 4 KiB only, so a
	 * file of binary data or zeros is refused without being read whole. */
	if (end - ps->cur > 4096)
		ps->end = ps->cur + 4096;
	got = next_line(ps, &l);
	ps->end = end;
	if (!got || (l.p == l.end && ps->cur >= ps->end))
		return ma_fail(MA_E_FORMAT, "'%s' is empty, not a jemalloc heap dump", what);
	if (starts_with(&l, "heap_v2/")) {
		p = l.p + 8;
		if (!parse_dec(&p, l.end, &hp->period) || hp->period == 0 ||
		    skip_ws(p, l.end) != l.end)
			return ma_fail(MA_E_FORMAT, "'%s': bad sampling period in header line 'heap_v2/%.*s'",
				       what, (int)(l.end - l.p > 48 ? 40 : l.end - l.p - 8), l.p + 8);
		return 0;
	}
	describe(desc, sizeof(desc), &l);
	if (starts_with(&l, "heap profile:") || starts_with(&l, "heap_v1"))
		return ma_fail(MA_E_FORMAT, "'%s' is a gperftools/old jemalloc heap profile (%s); "
					    "only jemalloc's heap_v2 format is supported", what, desc);
	if (starts_with(&l, "--- "))
		return ma_fail(MA_E_FORMAT, "'%s' looks like a symbolized jeprof --raw profile (%s); "
					    "pass the original heap_v2 dump", what, desc);
	if (l.end - l.p >= 2 && (unsigned char)l.p[0] == 0x1f && (unsigned char)l.p[1] == 0x8b)
		return ma_fail(MA_E_FORMAT, "'%s' is gzip-compressed (a pprof profile?); "
					    "expected a jemalloc heap_v2 dump", what);
	if (l.p < l.end && l.p[0] == '{')
		return ma_fail(MA_E_FORMAT, "'%s' is JSON (stats?), not a jemalloc heap dump", what);
	return ma_fail(MA_E_FORMAT, "'%s' is not a jemalloc heap dump: expected 'heap_v2/<period>' "
				    "on line 1, found %s", what, desc);
}

double ma_heapprof_scale(uint64_t objs, uint64_t bytes, uint64_t period)
{
	double ratio, s;

	/* Period 1 (lg_prof_sample:0, profile --rate 1): every allocation was recorded. */
	if (objs == 0 || bytes == 0 || period <= 1)
		return 1.0;
	ratio = ((double)bytes / (double)objs) / (double)period;
	/* -expm1(-r) == 1 - exp(-r), accurate for small r. */
	s = 1.0 / -expm1(-ratio);
	return isfinite(s) && s >= 1.0 ? s : 1.0;
}

static int cmp_map(const void *a, const void *b)
{
	const struct ma_hp_map *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* The t*: counts V of the stack just read: it is complete. */
static void close_stack(struct parser *ps, const uint64_t *v)
{
	struct ma_heapprof *hp = ps->hp;
	struct ma_hp_stack *s = &hp->stacks[hp->nstacks];

	if (v[0] == 0 && v[1] != 0)
		warn(ps, "%llu bytes in 0 objects: counted unscaled", (unsigned long long)v[1]);
	else if (v[1] < v[0])
		warn(ps, "%llu objects in only %llu bytes", (unsigned long long)v[0],
		     (unsigned long long)v[1]);
	s->objs = v[0];
	s->bytes = v[1];
	s->accum_objs = v[2];
	s->accum_bytes = v[3];
	s->scale = ma_heapprof_scale(v[0], v[1], hp->period);
	hp->nstacks++;
}

/*
 * After the last line of a dump of LEN bytes: was it cut (a stack without
 * its counts, PENDING; no list of mappings; or, MAPS_UNENDED, cut inside
 * that list, whose last line, LAST_LINE_MAP, is then dropped)?  The cut
 * is the warning shown.  The mappings are sorted.
 */
static void finish(struct ma_heapprof *hp, bool pending, bool maps_unended, bool last_line_map, size_t len,
		   const char *what)
{
	if (pending) {
		/* The last stack's count line is missing: the file was cut. */
		hp->npcs = hp->stacks[hp->nstacks].pc_first;
		hp->truncated = true;
	}
	if (!hp->has_maps)
		hp->truncated = true;
	if (maps_unended) {
		/* jemalloc ends every line: the file was cut inside the list of
		 * mappings, and its last line is part of one. */
		hp->maps_cut = hp->truncated = true;
		if (last_line_map)
			free(hp->maps[--hp->nmaps].path);
	}
	if (hp->truncated) {
		/* The cut explains everything else: it is the message shown. */
		snprintf(hp->warning, sizeof(hp->warning),
			 "'%s' is truncated: read %zu stacks in %zu lines (%zu bytes), %s", what,
			 hp->nstacks, hp->lines, len,
			 maps_unended   ? "cut inside MAPPED_LIBRARIES: frames in objects listed after "
					  "the cut stay unnamed"
			 : hp->has_maps ? "the last stack has no counts"
					: "no MAPPED_LIBRARIES: section (symbols only through --binary)");
		hp->nwarnings++;
	}
	if (hp->nmaps > 1)
		qsort(hp->maps, hp->nmaps, sizeof(*hp->maps), cmp_map);
}

int ma_heapprof_parse(struct ma_heapprof *hp, const char *buf, size_t len, const char *what)
{
	struct parser ps = { .cur = buf, .end = buf + len, .hp = hp };
	enum { HEADER, STACKS, MAPS } state = HEADER;
	bool pending = false; /* a stack line seen, its t*: line not yet */
	bool last_line_map = false;
	struct line l;
	int rc;

	memset(hp, 0, sizeof(*hp));
	rc = check_header(&ps, what);
	if (rc)
		goto fail;
	while (next_line(&ps, &l)) {
		const char *p = skip_ws(l.p, l.end);
		uint64_t v[4];
		bool total;

		if (ps.long_line) {
			rc = ma_fail(MA_E_FORMAT, "'%s': line %zu is longer than %d MiB: not part of a "
						  "heap_v2 dump", what, ps.lineno, MAX_LINE >> 20);
			goto fail;
		}
		if (state == MAPS) {
			size_t before = hp->nmaps;

			rc = parse_map(&ps, &l);
			if (rc)
				goto fail;
			last_line_map = hp->nmaps > before;
			continue;
		}
		if (p == l.end)
			continue;
		if (*p == '@') {
			if (pending)
				warn(&ps, "stack without a t*: count line skipped");
			rc = parse_stack(&ps, &l, &pending);
			if (rc)
				goto fail;
			state = STACKS;
			continue;
		}
		if (starts_with(&l, "MAPPED_LIBRARIES:")) {
			if (pending)
				warn(&ps, "stack without a t*: count line skipped");
			pending = false;
			state = MAPS;
			hp->has_maps = true;
			continue;
		}
		if (parse_counts(&l, &total, v)) {
			if (!total)
				continue; /* per-thread lines: the t*: line has the sum */
			if (state == HEADER) {
				hp->hdr_objs = v[0];
				hp->hdr_bytes = v[1];
			} else if (pending) {
				close_stack(&ps, v);
				pending = false;
			}
			continue;
		}
		if (state == HEADER && starts_with(&l, MA_HP_AGENT_LINE)) {
			const char *q = l.p + strlen(MA_HP_AGENT_LINE);

			hp->from_agent = parse_dec(&q, l.end, &hp->agent_since_unix_ns);
			if (!hp->from_agent)
				warn(&ps, "agent line without its start time");
			continue;
		}
		if (memchr(l.p, '\0', (size_t)(l.end - l.p))) {
			/* Text with NUL bytes is binary data (a file cut and
			 * zero-filled, or not a dump): no report from it. */
			rc = ma_fail(MA_E_FORMAT, "'%s': line %zu is binary data (NUL bytes), not "
						  "part of a heap_v2 dump", what, ps.lineno);
			goto fail;
		}
		warn(&ps, "unrecognized line skipped");
	}
	hp->lines = ps.lineno;
	finish(hp, pending, state == MAPS && len && buf[len - 1] != '\n', last_line_map, len, what);
	return 0;
fail:
	ma_heapprof_release(hp);
	return rc;
}

int ma_heapprof_load(struct ma_heapprof *hp, const char *path)
{
	struct ma_input in;
	int rc;

	memset(hp, 0, sizeof(*hp));
	if ((rc = ma_input_load(&in, path, "heap dump", MA_MAX_HEAP_DUMP)))
		return rc;
	rc = ma_heapprof_parse(hp, in.data, in.len, path);
	ma_input_release(&in);
	return rc;
}

void ma_heapprof_release(struct ma_heapprof *hp)
{
	for (size_t i = 0; i < hp->nmaps; i++)
		free(hp->maps[i].path);
	free(hp->maps);
	free(hp->stacks);
	free(hp->pcs);
	memset(hp, 0, sizeof(*hp));
}

const struct ma_hp_map *ma_heapprof_map_at(const struct ma_heapprof *hp, uint64_t addr)
{
	size_t lo = 0, hi = hp->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (hp->maps[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || addr >= hp->maps[lo - 1].end)
		return NULL;
	return &hp->maps[lo - 1];
}

/* One stack's count line: in use, then cumulative, as sampled. */
static void write_counts(FILE *f, uint64_t objs, uint64_t bytes, uint64_t aobjs, uint64_t abytes)
{
	fprintf(f, "  t*: %" PRIu64 ": %" PRIu64 " [%" PRIu64 ": %" PRIu64 "]\n", objs, bytes, aobjs,
		abytes);
}

int ma_heapprof_write(const struct ma_heapprof *hp, FILE *f)
{
	uint64_t objs = 0, bytes = 0, aobjs = 0, abytes = 0;

	for (size_t i = 0; i < hp->nstacks; i++) {
		objs += hp->stacks[i].objs;
		bytes += hp->stacks[i].bytes;
		aobjs += hp->stacks[i].accum_objs;
		abytes += hp->stacks[i].accum_bytes;
	}
	fprintf(f, "heap_v2/%" PRIu64 "\n", hp->period);
	if (hp->from_agent)
		fprintf(f, MA_HP_AGENT_LINE "%" PRIu64 " only (profile start)\n",
			hp->agent_since_unix_ns);
	write_counts(f, objs, bytes, aobjs, abytes);
	for (size_t i = 0; i < hp->nstacks; i++) {
		const struct ma_hp_stack *st = &hp->stacks[i];

		if (!st->npcs)
			continue; /* the format has no empty stack */
		fputc('@', f);
		for (uint32_t k = 0; k < st->npcs; k++)
			fprintf(f, " 0x%" PRIx64, hp->pcs[st->pc_first + k]);
		fputc('\n', f);
		write_counts(f, st->objs, st->bytes, st->accum_objs, st->accum_bytes);
	}
	fputs("\nMAPPED_LIBRARIES:\n", f);
	for (size_t i = 0; i < hp->nmaps; i++) {
		const struct ma_hp_map *m = &hp->maps[i];

		fprintf(f, "%08" PRIx64 "-%08" PRIx64 " %s %08" PRIx64 " %02x:%02x %" PRIu64 "%s%s\n",
			m->start, m->end, m->perms[0] ? m->perms : m->exec ? "r-xp" : "r--p", m->offset,
			m->dev_major, m->dev_minor, m->inode, m->path ? "                  " : "",
			m->path ? m->path : "");
	}
	fflush(f);
	return ferror(f) ? ma_fail(MA_E_IO, "could not write the heap profile") : 0;
}
