/*
 * pprof.c - profile.proto encoder (just the fields we need), gzipped.
 *
 * Field numbers from github.com/google/pprof/proto/profile.proto:
 * Profile{1 sample_type, 2 sample, 3 mapping, 4 location, 5 function,
 * 6 string_table, 11 period_type, 12 period, 14 default_sample_type},
 * ValueType{1 type, 2 unit}, Sample{1 location_id (packed), 2 value
 * (packed)}, Mapping{1 id, 2 memory_start, 3 memory_limit, 4 file_offset,
 * 5 filename, 6 build_id, 7 has_functions, 8 has_filenames,
 * 9 has_line_numbers, 10 has_inline_frames}, Location{1 id, 2 mapping_id,
 * 3 address, 4 line}, Line{1 function_id, 2 line}, Function{1 id, 2 name,
 * 3 system_name, 4 filename}.
 *
 * One Mapping per mapping of the dump's MAPPED_LIBRARIES that holds a
 * location (path, offsets, build ID of the file we read), and locations at
 * their run-time addresses: pprof can then find the binaries and show
 * source (-list) and disassembly (-disasm).
 */
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "heapprof.h"
#include "ma_error.h"
#include "pprof.h"

struct buf {
	unsigned char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct buf *b, const void *d, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t nc = b->cap ? b->cap * 2 : 4096;
		unsigned char *np;

		while (nc < b->len + n)
			nc *= 2;
		np = realloc(b->p, nc);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void varint(struct buf *b, uint64_t v)
{
	unsigned char t[10];
	size_t n = 0;

	do {
		t[n] = v & 0x7f;
		v >>= 7;
		if (v)
			t[n] |= 0x80;
		n++;
	} while (v);
	put(b, t, n);
}

static void field_varint(struct buf *b, unsigned field, uint64_t v)
{
	varint(b, (uint64_t)field << 3);
	varint(b, v);
}

static void field_bytes(struct buf *b, unsigned field, const void *d, size_t n)
{
	varint(b, (uint64_t)field << 3 | 2);
	varint(b, n);
	put(b, d, n);
}

static void field_msg(struct buf *b, unsigned field, struct buf *m)
{
	field_bytes(b, field, m->p, m->len);
	if (m->oom)
		b->oom = true;
	m->len = 0;
}

struct strtab {
	struct buf out; /* the encoded string_table fields */
	int64_t n;
};

static int64_t str(struct strtab *t, const char *s)
{
	field_bytes(&t->out, 6, s, strlen(s));
	return t->n++;
}

static void value_type(struct buf *b, unsigned field, int64_t type, int64_t unit)
{
	struct buf m = { 0 };

	field_varint(&m, 1, (uint64_t)type);
	field_varint(&m, 2, (uint64_t)unit);
	field_msg(b, field, &m);
	free(m.p);
}

/* The dump's mapping holding run-time address PC, as an index, or -1. */
static long map_index(const struct ma_heapprof *hp, uint64_t pc)
{
	const struct ma_hp_map *m = ma_heapprof_map_at(hp, pc);

	return m ? (long)(m - hp->maps) : -1;
}

static void build_id_hex(const struct ma_symobj *o, char *out, size_t n)
{
	size_t k = 0;

	out[0] = '\0';
	if (!o->ok)
		return;
	for (size_t i = 0; i < o->elf.build_id_len && k + 3 <= n; i++)
		k += (size_t)snprintf(out + k, n - k, "%02x", o->elf.build_id[i]);
}

/* Mapping messages for the dump's mappings marked in USED (ids = index + 1). */
static void write_mappings(struct buf *out, struct strtab *st, struct ma_profile *p,
			   const bool *used)
{
	const struct ma_heapprof *hp = p->hp;
	struct ma_symbolizer *sym = p->sym;
	struct buf m = { 0 };

	for (size_t i = 0; i < hp->nmaps; i++) {
		uint32_t oi = sym->map_obj ? sym->map_obj[i] : MA_NONE;
		const struct ma_symobj *o = oi != MA_NONE ? &sym->objs[oi] : NULL;
		char bid[160];

		if (!used[i])
			continue;
		field_varint(&m, 1, i + 1);
		field_varint(&m, 2, hp->maps[i].start);
		field_varint(&m, 3, hp->maps[i].end);
		field_varint(&m, 4, hp->maps[i].offset);
		if (o)
			field_varint(&m, 5, (uint64_t)str(st, o->path));
		else if (hp->maps[i].path)
			field_varint(&m, 5, (uint64_t)str(st, hp->maps[i].path));
		if (o) {
			build_id_hex(o, bid, sizeof(bid));
			if (bid[0])
				field_varint(&m, 6, (uint64_t)str(st, bid));
		}
		field_varint(&m, 7, o && o->ok); /* has_functions: symbolized */
		field_varint(&m, 8, sym->opts.lines && o && o->lines_found);
		field_varint(&m, 9, sym->opts.lines && o && o->lines_found);
		field_varint(&m, 10, sym->opts.lines && o && o->lines_found);
		field_msg(out, 3, &m);
	}
	free(m.p);
}

int ma_pprof_write(int fd, const char *path, struct ma_profile *p)
{
	struct ma_symbolizer *sym = p->sym;
	struct buf out = { 0 }, m = { 0 }, packed = { 0 }, line = { 0 };
	struct strtab st = { 0 };
	int64_t *func_name = NULL; /* per function: string index of its name, 0 = unused */
	bool *loc_used = NULL, *map_used = NULL;
	const char **func_file = NULL;
	int64_t s_objects, s_count, s_space, s_bytes;
	gzFile gz;
	int rc = 0;

	func_name = calloc(sym->nfuncs + 1, sizeof(int64_t));
	loc_used = calloc(sym->nframes + 1, sizeof(bool));
	func_file = calloc(sym->nfuncs + 1, sizeof(char *));
	map_used = calloc(p->hp->nmaps + 1, sizeof(bool));
	if (!func_name || !loc_used || !func_file || !map_used)
		goto oom;
	str(&st, ""); /* string_table[0] must be "" */
	s_objects = str(&st, "inuse_objects");
	s_count = str(&st, "count");
	s_space = str(&st, "inuse_space");
	s_bytes = str(&st, "bytes");
	value_type(&out, 1, s_objects, s_count);
	value_type(&out, 1, s_space, s_bytes);

	for (size_t i = 0; i < p->hp->nstacks; i++) {
		uint32_t n = p->chain_len[i];
		double bytes = ma_profile_stack_bytes(p, i);

		if (n == 0 || bytes <= 0)
			continue;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t fr = ma_profile_frame(p, i, k);

			varint(&packed, (uint64_t)fr + 1);
			loc_used[fr] = true;
		}
		field_msg(&m, 1, &packed);
		varint(&packed, (uint64_t)llround(ma_profile_stack_objs(p, i)));
		varint(&packed, (uint64_t)llround(bytes));
		field_msg(&m, 2, &packed);
		field_msg(&out, 2, &m);
	}
	for (size_t fr = 0; fr < sym->nframes; fr++) {
		const struct ma_frame *f = &sym->frames[fr];
		long mi;

		if (!loc_used[fr])
			continue;
		mi = map_index(p->hp, f->pc);
		if (!func_name[f->func])
			func_name[f->func] = -1; /* used; named below */
		if (f->file && !func_file[f->func])
			func_file[f->func] = f->file;
		field_varint(&m, 1, fr + 1);
		if (mi >= 0) {
			field_varint(&m, 2, (uint64_t)mi + 1);
			map_used[mi] = true;
		}
		field_varint(&m, 3, f->pc);
		field_varint(&line, 1, (uint64_t)f->func + 1);
		if (f->line > 0)
			field_varint(&line, 2, (uint64_t)f->line);
		field_msg(&m, 4, &line);
		field_msg(&out, 4, &m);
	}
	for (size_t fn = 0; fn < sym->nfuncs; fn++) {
		if (!func_name[fn])
			continue;
		field_varint(&m, 1, fn + 1);
		field_varint(&m, 2, (uint64_t)str(&st, ma_sym_func_name(sym, (uint32_t)fn)));
		field_varint(&m, 3, (uint64_t)str(&st, sym->funcs[fn].key));
		if (func_file[fn])
			field_varint(&m, 4, (uint64_t)str(&st, func_file[fn]));
		field_msg(&out, 5, &m);
	}
	write_mappings(&out, &st, p, map_used);
	put(&out, st.out.p, st.out.len);
	value_type(&out, 11, s_space, s_bytes);
	field_varint(&out, 12, p->hp->period);
	field_varint(&out, 14, (uint64_t)s_space);
	if (out.oom || st.out.oom || m.oom || packed.oom || line.oom)
		goto oom;

	/* gzclose closes the descriptor it is given: give it its own. */
	gz = gzdopen(fcntl(fd, F_DUPFD_CLOEXEC, 0), "wb");
	if (!gz) {
		rc = ma_fail(MA_E_IO, "cannot create '%s': %s", path, strerror(errno));
		goto out;
	}
	if (out.len && gzwrite(gz, out.p, (unsigned)out.len) != (int)out.len) {
		gzclose(gz);
		rc = ma_fail(MA_E_IO, "cannot write '%s'", path);
		goto out;
	}
	if (gzclose(gz) != Z_OK)
		rc = ma_fail(MA_E_IO, "cannot write '%s'", path);
	goto out;
oom:
	rc = ma_fail(MA_E_NOMEM, "out of memory writing pprof");
out:
	free(func_name);
	free(loc_used);
	free(map_used);
	free(func_file);
	free(out.p);
	free(m.p);
	free(packed.p);
	free(line.p);
	free(st.out.p);
	return rc;
}
