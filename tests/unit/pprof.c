/*
 * tests/unit/pprof.c - the pprof protobuf (analysis/pprof.c) of a profile
 * with known stacks, read back here with zlib and a small protobuf reader:
 * the string table starts empty, the sample types are inuse_objects/count
 * and inuse_space/bytes, one sample per stack with bytes carrying the
 * profile's unsampled objects and bytes, leaf first, every location and
 * function id resolving, and the sampling period.
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "heapprof.h"
#include "pprof.h"
#include "profile.h"
#include "symbolize.h"

#include "check.h"


/* ---- a protobuf reader: enough for profile.proto ---- */
struct pb {
	const uint8_t *p, *end;
	bool bad;
};

static uint64_t pb_varint(struct pb *b)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		if (b->p >= b->end) {
			b->bad = true;
			return 0;
		}
		v |= (uint64_t)(*b->p & 0x7f) << shift;
		if (!(*b->p++ & 0x80))
			return v;
	}
	b->bad = true;
	return 0;
}

/* The next field: its number and wire type; a length-delimited one in *SUB. */
static bool pb_next(struct pb *b, unsigned *field, unsigned *wire, uint64_t *v, struct pb *sub)
{
	uint64_t key;

	if (b->p >= b->end || b->bad)
		return false;
	key = pb_varint(b);
	*field = (unsigned)(key >> 3);
	*wire = (unsigned)(key & 7);
	if (*wire == 0) {
		*v = pb_varint(b);
	} else if (*wire == 2) {
		uint64_t n = pb_varint(b);

		if (n > (uint64_t)(b->end - b->p)) {
			b->bad = true;
			return false;
		}
		*sub = (struct pb){ b->p, b->p + n, false };
		b->p += n;
	} else {
		b->bad = true; /* profile.proto uses varints and bytes only */
		return false;
	}
	return !b->bad;
}

#define MAXN 64
struct prof {
	const char *strings[MAXN];
	size_t nstrings;
	int64_t types[2][2]; /* sample_type: (type, unit) string indexes */
	size_t ntypes;
	uint64_t sample_loc[MAXN][8], sample_val[MAXN][2];
	size_t sample_nloc[MAXN], nsamples;
	uint64_t loc_id[MAXN], loc_fn[MAXN];
	size_t nlocs;
	uint64_t fn_id[MAXN], fn_name[MAXN];
	size_t nfns;
	int64_t period, period_type[2];
	bool bad;
};

/* Packed or not: each varint of a repeated field. */
static void repeated(unsigned wire, uint64_t v, struct pb *sub, uint64_t *out, size_t *n, size_t max)
{
	if (wire == 0) {
		if (*n < max)
			out[(*n)++] = v;
		return;
	}
	while (sub->p < sub->end && !sub->bad) {
		uint64_t x = pb_varint(sub);

		if (*n < max)
			out[(*n)++] = x;
	}
}

static void read_profile(const uint8_t *data, size_t len, struct prof *r)
{
	struct pb b = { data, data + len, false }, sub, s2;
	unsigned f, w, f2, w2;
	uint64_t v, v2;

	memset(r, 0, sizeof(*r));
	while (pb_next(&b, &f, &w, &v, &sub)) {
		if (f == 6 && w == 2 && r->nstrings < MAXN) {
			char *s = strndup((const char *)sub.p, (size_t)(sub.end - sub.p));

			r->strings[r->nstrings++] = s;
		} else if ((f == 1 || f == 11) && w == 2) { /* sample_type, period_type */
			int64_t t[2] = { 0, 0 };

			while (pb_next(&sub, &f2, &w2, &v2, &s2))
				if ((f2 == 1 || f2 == 2) && w2 == 0)
					t[f2 - 1] = (int64_t)v2;
			if (f == 1 && r->ntypes < 2)
				memcpy(r->types[r->ntypes++], t, sizeof(t));
			else if (f == 11)
				memcpy(r->period_type, t, sizeof(t));
		} else if (f == 2 && w == 2 && r->nsamples < MAXN) { /* sample */
			size_t i = r->nsamples++, nv = 0;

			while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
				if (f2 == 1)
					repeated(w2, v2, &s2, r->sample_loc[i], &r->sample_nloc[i], 8);
				else if (f2 == 2)
					repeated(w2, v2, &s2, r->sample_val[i], &nv, 2);
			}
		} else if (f == 4 && w == 2 && r->nlocs < MAXN) { /* location */
			size_t i = r->nlocs++;

			while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
				if (f2 == 1 && w2 == 0)
					r->loc_id[i] = v2;
				else if (f2 == 4 && w2 == 2) { /* line: function_id */
					struct pb s3;
					unsigned f3, w3;
					uint64_t v3;

					while (pb_next(&s2, &f3, &w3, &v3, &s3))
						if (f3 == 1 && w3 == 0)
							r->loc_fn[i] = v3;
				}
			}
		} else if (f == 5 && w == 2 && r->nfns < MAXN) { /* function */
			size_t i = r->nfns++;

			while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
				if (f2 == 1 && w2 == 0)
					r->fn_id[i] = v2;
				else if (f2 == 2 && w2 == 0)
					r->fn_name[i] = v2;
			}
		} else if (f == 12 && w == 0) {
			r->period = (int64_t)v;
		}
	}
	r->bad = b.bad;
}

static const char *s_at(const struct prof *r, int64_t i)
{
	return i >= 0 && (size_t)i < r->nstrings ? r->strings[i] : "(out of range)";
}

/* The name of location ID's function, or NULL. */
static const char *loc_name(const struct prof *r, uint64_t id)
{
	for (size_t i = 0; i < r->nlocs; i++)
		if (r->loc_id[i] == id)
			for (size_t k = 0; k < r->nfns; k++)
				if (r->fn_id[k] == r->loc_fn[i])
					return s_at(r, (int64_t)r->fn_name[k]);
	return NULL;
}

int main(void)
{
	struct ma_heapprof hp;
	struct ma_symbolizer sym;
	struct ma_profile p;
	char path[] = "/tmp/ma-pprof-unit.XXXXXX";
	int fd = mkstemp(path);
	uint8_t *data = malloc(1 << 20);
	int len = -1;
	struct prof r;
	double total = 0;
	bool ids_resolve = true, leaf_first = false, values_match = true;

	CHECK("profile", test_profile(test_dump, &hp, &sym, &p));
	CHECK("written", fd >= 0 && ma_pprof_write(fd, path, &p) == 0);
	{
		gzFile g = gzopen(path, "rb");

		if (g && data)
			len = gzread(g, data, 1 << 20);
		if (g)
			gzclose(g);
	}
	unlink(path);
	CHECK("gzip that reads back", len > 0);
	read_profile(data, len > 0 ? (size_t)len : 0, &r);
	CHECK("protobuf that reads back", !r.bad);
	CHECK("string table starts with the empty string", r.nstrings > 0 && r.strings[0][0] == '\0');
	CHECK("sample types: inuse_objects/count, inuse_space/bytes",
	      r.ntypes == 2 && strcmp(s_at(&r, r.types[0][0]), "inuse_objects") == 0 &&
		      strcmp(s_at(&r, r.types[0][1]), "count") == 0 &&
		      strcmp(s_at(&r, r.types[1][0]), "inuse_space") == 0 &&
		      strcmp(s_at(&r, r.types[1][1]), "bytes") == 0);
	CHECK("one sample per stack with bytes (3 of 4)", r.nsamples == 3);
	for (size_t i = 0; i < r.nsamples; i++) {
		bool found = false;

		total += (double)r.sample_val[i][1];
		for (size_t k = 0; k < r.sample_nloc[i]; k++)
			ids_resolve &= loc_name(&r, r.sample_loc[i][k]) != NULL;
		/* the 3 MB stack: leaf 0x2000, then 0x5000 */
		if (r.sample_nloc[i] == 2 && loc_name(&r, r.sample_loc[i][0]) &&
		    strstr(loc_name(&r, r.sample_loc[i][0]), "2000") &&
		    strstr(loc_name(&r, r.sample_loc[i][1]), "5000"))
			leaf_first = true;
		for (size_t s = 0; s < 3; s++)
			if (llround(ma_profile_stack_bytes(&p, s)) == (long long)r.sample_val[i][1] &&
			    llround(ma_profile_stack_objs(&p, s)) == (long long)r.sample_val[i][0])
				found = true;
		values_match &= found;
	}
	CHECK("every location id and function id resolves to a name", ids_resolve);
	CHECK("locations leaf first (0x2000 then its caller 0x5000)", leaf_first);
	CHECK("each sample's objects and bytes are one stack's, unsampled", values_match);
	CHECK("the bytes add up to the profile's",
	      fabs(total - (ma_profile_stack_bytes(&p, 0) + ma_profile_stack_bytes(&p, 1) +
			    ma_profile_stack_bytes(&p, 2))) <= 3);
	CHECK("period: 524288 bytes (of inuse_space)",
	      r.period == 524288 && strstr(s_at(&r, r.period_type[0]), "space") &&
		      strcmp(s_at(&r, r.period_type[1]), "bytes") == 0);
	for (size_t i = 0; i < r.nstrings; i++)
		free((void *)r.strings[i]);
	free(data);
	ma_profile_release(&p);
	ma_sym_release(&sym);
	ma_heapprof_release(&hp);
	CHECK_DONE();
}
