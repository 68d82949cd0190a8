/*
 * jectl.c - mallctl calls in the target: names and buffers go to the
 * session's scratch area, results come back with one read.
 */
#include <string.h>

#include "jectl.h"
#include "ma_error.h"

/* Layout of one request in scratch: [oldlen u64][out buf][name]. */
static int mallctl_raw(struct ma_session *s, const char *name, void *out, size_t outlen,
		       const void *in, size_t inlen)
{
	size_t nlen = strlen(name) + 1;
	uint64_t base, a_oldlen, a_out, a_name, a_in = 0, ret;
	unsigned char buf[4096];
	size_t total = 8 + ((outlen + 15) & ~(size_t)15) + nlen;
	uint64_t oldlen = outlen;
	int rc;

	if (total > sizeof(buf) || inlen > 2048)
		return ma_fail(MA_E_INTERNAL, "mallctl request too large");
	ma_session_reset(s);
	base = ma_session_alloc(s, total + inlen + 16);
	if (!base)
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	a_oldlen = base;
	a_out = base + 8;
	a_name = a_out + ((outlen + 15) & ~(size_t)15);
	memset(buf, 0, total);
	memcpy(buf, &oldlen, 8);
	memcpy(buf + (a_name - base), name, nlen);
	if (in && inlen) {
		a_in = (base + total + 15) & ~15ULL;
		if ((rc = ma_mem_write(s->t->pid, a_in, in, inlen)))
			return rc;
	}
	if ((rc = ma_mem_write(s->t->pid, base, buf, total)))
		return rc;
	{
		uint64_t args[5] = { a_name, out ? a_out : 0, out ? a_oldlen : 0, a_in, inlen };

		rc = ma_session_call(s, s->t->je.mallctl, args, 5, &ret);
	}
	if (rc)
		return rc;
	if ((int)ret != 0)
		return ma_fail(MA_E_JEMALLOC, "mallctl(\"%s\") failed: %s", name, strerror((int)ret));
	if (out) {
		if ((rc = ma_mem_read(s->t->pid, base, buf, 8 + outlen)))
			return rc;
		memcpy(&oldlen, buf, 8);
		if (oldlen != outlen)
			return ma_fail(MA_E_JEMALLOC, "mallctl(\"%s\") returned %llu bytes, expected %zu",
				       name, (unsigned long long)oldlen, outlen);
		memcpy(out, buf + 8, outlen);
	}
	return 0;
}

int ma_mallctl_read(struct ma_session *s, const char *name, void *out, size_t len)
{
	return mallctl_raw(s, name, out, len, NULL, 0);
}

int ma_mallctl_write(struct ma_session *s, const char *name, const void *in, size_t len)
{
	return mallctl_raw(s, name, NULL, 0, in, len);
}

int ma_mallctl_read_string(struct ma_session *s, const char *name, char *buf, size_t buflen)
{
	uint64_t p;
	int rc = ma_mallctl_read(s, name, &p, sizeof(p));

	if (rc)
		return rc;
	if (!p || buflen == 0)
		return ma_fail(MA_E_JEMALLOC, "mallctl(\"%s\") returned NULL", name);
	memset(buf, 0, buflen);
	/* The string may sit near the end of a mapping: read in small steps. */
	for (size_t off = 0; off + 1 < buflen; off += 32) {
		size_t n = buflen - 1 - off < 32 ? buflen - 1 - off : 32;

		if (ma_mem_read(s->t->pid, p + off, buf + off, n) != 0) {
			ma_err_clear();
			break;
		}
		if (memchr(buf + off, '\0', n))
			break;
	}
	buf[buflen - 1] = '\0';
	return 0;
}

int ma_mallctl_nametomib(struct ma_session *s, const char *name, size_t *mib, size_t *miblen)
{
	size_t nlen = strlen(name) + 1, cap = *miblen;
	uint64_t a_len, a_mib, a_name, ret, len64 = cap;
	int rc;

	if (!s->t->je.mallctlnametomib)
		return ma_fail(MA_E_NOJEMALLOC, "mallctlnametomib not found in the target");
	ma_session_reset(s);
	a_len = ma_session_alloc(s, 8);
	a_mib = ma_session_alloc(s, cap * 8);
	a_name = ma_session_alloc(s, nlen);
	if (!a_name)
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->pid, a_len, &len64, 8)) ||
	    (rc = ma_mem_write(s->t->pid, a_name, name, nlen)))
		return rc;
	{
		uint64_t args[3] = { a_name, a_mib, a_len };

		rc = ma_session_call(s, s->t->je.mallctlnametomib, args, 3, &ret);
	}
	if (rc)
		return rc;
	if ((int)ret != 0)
		return ma_fail(MA_E_JEMALLOC, "mallctlnametomib(\"%s\") failed: %s", name,
			       strerror((int)ret));
	if ((rc = ma_mem_read(s->t->pid, a_len, &len64, 8)))
		return rc;
	if (len64 > cap)
		return ma_fail(MA_E_JEMALLOC, "mallctlnametomib(\"%s\"): bad length", name);
	*miblen = len64;
	return ma_mem_read(s->t->pid, a_mib, mib, len64 * 8);
}

int ma_mallctlbymib_read(struct ma_session *s, const size_t *mib, size_t miblen, void *out,
			 size_t len)
{
	uint64_t a_len, a_mib, a_out, ret, len64 = len;
	int rc;

	if (!s->t->je.mallctlbymib)
		return ma_fail(MA_E_NOJEMALLOC, "mallctlbymib not found in the target");
	ma_session_reset(s);
	a_len = ma_session_alloc(s, 8);
	a_mib = ma_session_alloc(s, miblen * 8);
	a_out = ma_session_alloc(s, len);
	if (!a_out)
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->pid, a_len, &len64, 8)) ||
	    (rc = ma_mem_write(s->t->pid, a_mib, mib, miblen * 8)))
		return rc;
	{
		uint64_t args[6] = { a_mib, miblen, a_out, a_len, 0, 0 };

		rc = ma_session_call(s, s->t->je.mallctlbymib, args, 6, &ret);
	}
	if (rc)
		return rc;
	if ((int)ret != 0)
		return ma_fail(MA_E_JEMALLOC, "mallctlbymib failed: %s", strerror((int)ret));
	return ma_mem_read(s->t->pid, a_out, out, len);
}

/* Read an optional value; absent names (e.g. no prof support) leave *out. */
static void read_optional(struct ma_session *s, const char *name, void *out, size_t len)
{
	if (ma_mallctl_read(s, name, out, len) != 0)
		ma_err_clear();
}

int ma_collect_stats(struct ma_session *s, struct ma_je_stats *st)
{
	uint64_t epoch = 1;
	size_t sz;
	ssize_t ssz;
	int rc;
	struct {
		const char *name;
		uint64_t *dst;
	} headline[] = {
		{ "stats.allocated", &st->allocated }, { "stats.active", &st->active },
		{ "stats.resident", &st->resident },   { "stats.mapped", &st->mapped },
		{ "stats.retained", &st->retained },   { "stats.metadata", &st->metadata },
	};

	memset(st, 0, sizeof(*st));
	if ((rc = ma_mallctl_write(s, "epoch", &epoch, sizeof(epoch))))
		return rc;
	for (size_t i = 0; i < sizeof(headline) / sizeof(headline[0]); i++) {
		if ((rc = ma_mallctl_read(s, headline[i].name, &sz, sizeof(sz)))) {
			if (rc == MA_E_JEMALLOC)
				return ma_fail(rc, "jemalloc in the target has no statistics (%s)",
					       ma_errmsg());
			return rc;
		}
		*headline[i].dst = sz;
	}
	if (ma_mallctl_read_string(s, "version", st->version, sizeof(st->version)))
		ma_err_clear();
	read_optional(s, "opt.prof", &st->opt_prof, sizeof(bool));
	read_optional(s, "opt.prof_active", &st->opt_prof_active, sizeof(bool));
	read_optional(s, "prof.active", &st->prof_active, sizeof(bool));
	sz = 0;
	read_optional(s, "opt.lg_prof_sample", &sz, sizeof(sz));
	st->lg_prof_sample = sz;
	read_optional(s, "opt.tcache", &st->opt_tcache, sizeof(bool));
	read_optional(s, "opt.background_thread", &st->opt_background_thread, sizeof(bool));
	read_optional(s, "background_thread", &st->background_thread, sizeof(bool));
	read_optional(s, "arenas.narenas", &st->narenas, sizeof(unsigned));
	ssz = 0;
	read_optional(s, "opt.dirty_decay_ms", &ssz, sizeof(ssz));
	st->dirty_decay_ms = ssz;
	ssz = 0;
	read_optional(s, "opt.muzzy_decay_ms", &ssz, sizeof(ssz));
	st->muzzy_decay_ms = ssz;
	return 0;
}
