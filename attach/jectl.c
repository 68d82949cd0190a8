/*
 * jectl.c - mallctl calls in the target: names and buffers go to the
 * session's scratch area, results come back with one read.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "bins.h"
#include "jectl.h"
#include "ma_error.h"

/*
 * A mallctl NAME refused with ERR.  ENOENT: this jemalloc does not know the
 * name (built without it, --disable-stats, or a version that lacks it);
 * memattach never decides by version string, so that is what it says.
 */
static int mallctl_refused(const struct ma_session *s, const char *name, int err)
{
	if (err == ENOENT)
		return ma_fail(MA_E_JEMALLOC, "the jemalloc in process %d does not know mallctl \"%s\" "
			       "(built without it, e.g. --disable-stats, or a version without that "
			       "name): this command needs it", s->t->pid, name);
	return ma_fail(MA_E_JEMALLOC, "mallctl(\"%s\") failed: %s", name, strerror(err));
}


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
		if ((rc = ma_mem_write(s->t->proc_pid, a_in, in, inlen)))
			return rc;
	}
	if ((rc = ma_mem_write(s->t->proc_pid, base, buf, total)))
		return rc;
	{
		uint64_t args[5] = { a_name, out ? a_out : 0, out ? a_oldlen : 0, a_in, inlen };

		rc = ma_session_call(s, s->t->je.mallctl, args, 5, &ret);
	}
	if (rc)
		return rc;
	if ((int)ret != 0)
		return mallctl_refused(s, name, (int)ret);
	if (out) {
		if ((rc = ma_mem_read(s->t->proc_pid, base, buf, 8 + outlen)))
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

/* Copy a NUL-terminated string from the target; it may end near a page edge. */
static void read_target_string(pid_t pid, uint64_t p, char *buf, size_t buflen)
{
	memset(buf, 0, buflen);
	for (size_t off = 0; off + 1 < buflen; off += 32) {
		size_t n = buflen - 1 - off < 32 ? buflen - 1 - off : 32;

		if (ma_mem_read(pid, p + off, buf + off, n) != 0) {
			ma_err_clear();
			break;
		}
		if (memchr(buf + off, '\0', n))
			break;
	}
	buf[buflen - 1] = '\0';
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
	if ((rc = ma_mem_write(s->t->proc_pid, a_len, &len64, 8)) ||
	    (rc = ma_mem_write(s->t->proc_pid, a_name, name, nlen)))
		return rc;
	{
		uint64_t args[3] = { a_name, a_mib, a_len };

		rc = ma_session_call(s, s->t->je.mallctlnametomib, args, 3, &ret);
	}
	if (rc)
		return rc;
	if ((int)ret != 0)
		return mallctl_refused(s, name, (int)ret);
	if ((rc = ma_mem_read(s->t->proc_pid, a_len, &len64, 8)))
		return rc;
	if (len64 > cap)
		return ma_fail(MA_E_JEMALLOC, "mallctlnametomib(\"%s\"): bad length", name);
	*miblen = len64;
	return ma_mem_read(s->t->proc_pid, a_mib, mib, len64 * 8);
}

int ma_ctl_batch_init(struct ma_ctl_batch *b, struct ma_session *s, size_t max_entries,
		      size_t payload_bytes)
{
	memset(b, 0, sizeof(*b));
	b->s = s;
	b->max_entries = max_entries;
	b->payload_off = max_entries * sizeof(struct ma_batch_entry);
	b->cap = b->payload_off + payload_bytes;
	b->used = b->payload_off;
	ma_session_reset(s);
	b->base = ma_session_alloc(s, b->cap);
	/* The session's local memory if it is large enough (faster in the hold). */
	if ((b->img = ma_session_local(s, b->cap))) {
		b->img_is_session_local = true;
		memset(b->img, 0, b->cap);
	} else {
		b->img = calloc(1, b->cap);
	}
	b->items = calloc(max_entries ? max_entries : 1, sizeof(*b->items));
	if (!b->base || !b->img || !b->items) {
		ma_ctl_batch_release(b);
		return ma_fail(b->base ? MA_E_NOMEM : MA_E_INTERNAL,
			       "cannot prepare a batch of %zu mallctl calls", max_entries);
	}
	return 0;
}

void ma_ctl_batch_release(struct ma_ctl_batch *b)
{
	if (b->img_is_session_local)
		ma_session_local_release(b->img);
	else
		free(b->img);
	b->img_is_session_local = false;
	free(b->items);
	b->img = NULL;
	b->items = NULL;
}

/* Reserve LEN bytes (16-aligned) of payload; offset or 0 if full. */
static size_t payload(struct ma_ctl_batch *b, size_t len)
{
	size_t off = b->used;

	len = (len + 15) & ~(size_t)15;
	if (off + len > b->cap)
		return 0;
	b->used += len;
	return off;
}

static int add_entry(struct ma_ctl_batch *b, uint64_t fn, const uint64_t *args, int nargs,
		     const char *name, size_t len_off, size_t out_off, size_t outlen)
{
	struct ma_batch_entry e;
	size_t off;

	if (b->n == b->max_entries)
		return ma_fail(MA_E_INTERNAL, "mallctl batch full");
	memset(&e, 0, sizeof(e));
	e.fn = fn;
	memcpy(e.args, args, (size_t)nargs * sizeof(uint64_t));
	e.ret = (uint64_t)-1; /* stays if the call never ran */
	off = b->n * sizeof(e);
	memcpy(b->img + off, &e, sizeof(e));
	b->items[b->n] = (struct ma_ctl_item){ off, len_off, out_off, outlen, name };
	return (int)b->n++;
}

/* Queue a read through FN with its name/mib argument(s) prepared by the caller. */
static int queue_read(struct ma_ctl_batch *b, uint64_t fn, uint64_t a0, uint64_t a1, bool bymib,
		      const char *name, size_t outlen)
{
	size_t len_off = payload(b, 8), out_off = payload(b, outlen);
	uint64_t len = outlen;

	if (!len_off || !out_off)
		return ma_fail(MA_E_INTERNAL, "mallctl batch payload full");
	memcpy(b->img + len_off, &len, 8);
	if (bymib) {
		uint64_t args[6] = { a0, a1, b->base + out_off, b->base + len_off, 0, 0 };

		return add_entry(b, fn, args, 6, name, len_off, out_off, outlen);
	} else {
		uint64_t args[5] = { a0, b->base + out_off, b->base + len_off, 0, 0 };

		return add_entry(b, fn, args, 5, name, len_off, out_off, outlen);
	}
}

static size_t put_string(struct ma_ctl_batch *b, const char *str)
{
	size_t n = strlen(str) + 1, off = payload(b, n);

	if (off)
		memcpy(b->img + off, str, n);
	return off;
}

int ma_ctl_batch_read(struct ma_ctl_batch *b, const char *name, size_t outlen)
{
	size_t name_off = put_string(b, name);

	if (!name_off)
		return ma_fail(MA_E_INTERNAL, "mallctl batch payload full");
	return queue_read(b, b->s->t->je.mallctl, b->base + name_off, 0, false, name, outlen);
}

int ma_ctl_batch_read_mib(struct ma_ctl_batch *b, const size_t *mib, size_t miblen,
			  size_t outlen)
{
	size_t mib_off = payload(b, miblen * 8);

	if (!mib_off)
		return ma_fail(MA_E_INTERNAL, "mallctl batch payload full");
	if (!b->s->t->je.mallctlbymib)
		return ma_fail(MA_E_NOJEMALLOC, "mallctlbymib not found in the target");
	memcpy(b->img + mib_off, mib, miblen * 8);
	return queue_read(b, b->s->t->je.mallctlbymib, b->base + mib_off, miblen, true, NULL,
			  outlen);
}

int ma_ctl_batch_write(struct ma_ctl_batch *b, const char *name, const void *in, size_t inlen)
{
	size_t name_off = put_string(b, name), in_off = inlen ? payload(b, inlen) : 0;
	uint64_t args[5];

	if (!name_off || (inlen && !in_off))
		return ma_fail(MA_E_INTERNAL, "mallctl batch payload full");
	if (inlen)
		memcpy(b->img + in_off, in, inlen);
	args[0] = b->base + name_off;
	args[1] = 0;
	args[2] = 0;
	args[3] = inlen ? b->base + in_off : 0;
	args[4] = inlen;
	return add_entry(b, b->s->t->je.mallctl, args, 5, name, 0, 0, 0);
}

int ma_ctl_batch_run(struct ma_ctl_batch *b)
{
	pid_t pid = b->s->t->proc_pid;
	int rc;

	if ((rc = ma_mem_write(pid, b->base, b->img, b->used)))
		return rc;
	if ((rc = ma_session_call_batch(b->s, b->base, b->n, 0)))
		return rc;
	return ma_mem_read(pid, b->base, b->img, b->used);
}

int ma_ctl_batch_result(struct ma_ctl_batch *b, int i, void *out, size_t outlen)
{
	const struct ma_ctl_item *it;
	struct ma_batch_entry e;
	uint64_t len;

	if (i < 0 || (size_t)i >= b->n)
		return ma_fail(MA_E_INTERNAL, "bad mallctl batch index");
	it = &b->items[i];
	memcpy(&e, b->img + it->entry_off, sizeof(e));
	if ((int)e.ret != 0)
		return mallctl_refused(b->s, it->name ? it->name : "(by mib)", (int)e.ret);
	if (!out)
		return 0;
	memcpy(&len, b->img + it->len_off, 8);
	if (len != outlen || outlen != it->outlen)
		return ma_fail(MA_E_JEMALLOC, "mallctl(\"%s\") returned %llu bytes, expected %zu",
			       it->name ? it->name : "(by mib)", (unsigned long long)len, outlen);
	memcpy(out, b->img + it->out_off, outlen);
	return 0;
}

/* An optional value: absent names (no prof support...) leave *out alone. */
static void result_optional(struct ma_ctl_batch *b, int i, void *out, size_t len)
{
	if (i < 0 || ma_ctl_batch_result(b, i, out, len) != 0)
		ma_err_clear();
}

/* Dirty and muzzy pages of all arenas; st->page stays 0 unless all three were read. */
static void read_page_counts(struct ma_ctl_batch *b, int idirty, int imuzzy, int ipage,
			     struct ma_je_stats *st)
{
	size_t dirty, muzzy, page;

	if (ma_ctl_batch_result(b, idirty, &dirty, sizeof(dirty)) ||
	    ma_ctl_batch_result(b, imuzzy, &muzzy, sizeof(muzzy)) ||
	    ma_ctl_batch_result(b, ipage, &page, sizeof(page))) {
		ma_err_clear();
		return;
	}
	st->pdirty = dirty;
	st->pmuzzy = muzzy;
	st->page = page;
}

int ma_collect_stats(struct ma_session *s, struct ma_je_stats *st)
{
	static const char *const headline[] = {
		"stats.allocated", "stats.active", "stats.resident",
		"stats.mapped", "stats.retained", "stats.metadata",
	};
	uint64_t *dst[] = { &st->allocated, &st->active, &st->resident,
			    &st->mapped, &st->retained, &st->metadata };
	struct ma_ctl_batch b;
	int ih[6], iprof, iprof_act, iprof_active, ilg, itc, ibg_opt, ibg, inar, idirty, imuzzy, iver;
	int ipdirty, ipmuzzy, ipage;
	uint64_t epoch = 1, ver = 0;
	ssize_t ssz;
	size_t sz;
	int rc;

	memset(st, 0, sizeof(*st));
	if ((rc = ma_ctl_batch_init(&b, s, 28, 4096)))
		return rc;
	/* The epoch write comes first: the reads below see fresh values. */
	rc = ma_ctl_batch_write(&b, "epoch", &epoch, sizeof(epoch));
	for (int i = 0; i < 6 && rc >= 0; i++)
		rc = ih[i] = ma_ctl_batch_read(&b, headline[i], sizeof(size_t));
	iver = ma_ctl_batch_read(&b, "version", sizeof(uint64_t));
	iprof = ma_ctl_batch_read(&b, "opt.prof", sizeof(bool));
	iprof_act = ma_ctl_batch_read(&b, "opt.prof_active", sizeof(bool));
	iprof_active = ma_ctl_batch_read(&b, "prof.active", sizeof(bool));
	ilg = ma_ctl_batch_read(&b, "opt.lg_prof_sample", sizeof(size_t));
	itc = ma_ctl_batch_read(&b, "opt.tcache", sizeof(bool));
	ibg_opt = ma_ctl_batch_read(&b, "opt.background_thread", sizeof(bool));
	ibg = ma_ctl_batch_read(&b, "background_thread", sizeof(bool));
	inar = ma_ctl_batch_read(&b, "arenas.narenas", sizeof(unsigned));
	idirty = ma_ctl_batch_read(&b, "opt.dirty_decay_ms", sizeof(ssize_t));
	imuzzy = ma_ctl_batch_read(&b, "opt.muzzy_decay_ms", sizeof(ssize_t));
	/* Same epoch as the headline: resident = active + dirty + metadata in RAM. */
	ipdirty = ma_ctl_batch_read(&b, "stats.arenas.4096.pdirty", sizeof(size_t));
	ipmuzzy = ma_ctl_batch_read(&b, "stats.arenas.4096.pmuzzy", sizeof(size_t));
	ipage = ma_ctl_batch_read(&b, "arenas.page", sizeof(size_t));
	if (rc < 0 || imuzzy < 0 || ipage < 0 || (rc = ma_ctl_batch_run(&b))) {
		ma_ctl_batch_release(&b);
		return rc < 0 ? rc : MA_E_INTERNAL;
	}
	if ((rc = ma_ctl_batch_result(&b, 0, NULL, 0)))
		goto out;
	for (int i = 0; i < 6; i++) {
		if ((rc = ma_ctl_batch_result(&b, ih[i], &sz, sizeof(sz)))) {
			ma_err_clear();
			rc = ma_fail(MA_E_JEMALLOC, "jemalloc in the target has no statistics "
				     "(%s failed: was it configured with stats disabled?)",
				     headline[i]);
			goto out;
		}
		*dst[i] = sz;
	}
	result_optional(&b, iprof, &st->opt_prof, sizeof(bool));
	result_optional(&b, iprof_act, &st->opt_prof_active, sizeof(bool));
	result_optional(&b, iprof_active, &st->prof_active, sizeof(bool));
	sz = 0;
	result_optional(&b, ilg, &sz, sizeof(sz));
	st->lg_prof_sample = sz;
	result_optional(&b, itc, &st->opt_tcache, sizeof(bool));
	result_optional(&b, ibg_opt, &st->opt_background_thread, sizeof(bool));
	result_optional(&b, ibg, &st->background_thread, sizeof(bool));
	result_optional(&b, inar, &st->narenas, sizeof(unsigned));
	ssz = 0;
	result_optional(&b, idirty, &ssz, sizeof(ssz));
	st->dirty_decay_ms = ssz;
	ssz = 0;
	result_optional(&b, imuzzy, &ssz, sizeof(ssz));
	st->muzzy_decay_ms = ssz;
	result_optional(&b, iver, &ver, sizeof(ver));
	read_page_counts(&b, ipdirty, ipmuzzy, ipage, st);
	ma_ctl_batch_release(&b);
	/* The version string lives in the target: one more read, no call. */
	if (ver)
		read_target_string(s->t->proc_pid, ver, st->version, sizeof(st->version));
	return 0;
out:
	ma_ctl_batch_release(&b);
	return rc;
}

int ma_mallctl_write_cstr(struct ma_session *s, const char *name, const char *value,
			  int timeout_ms)
{
	size_t nlen = strlen(name) + 1, vlen = strlen(value) + 1;
	uint64_t a_name, a_val, a_ptr, ret;
	int rc;

	ma_session_reset(s);
	a_ptr = ma_session_alloc(s, 8);
	a_name = ma_session_alloc(s, nlen);
	a_val = ma_session_alloc(s, vlen);
	if (!a_val)
		return ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if ((rc = ma_mem_write(s->t->proc_pid, a_ptr, &a_val, 8)) ||
	    (rc = ma_mem_write(s->t->proc_pid, a_name, name, nlen)) ||
	    (rc = ma_mem_write(s->t->proc_pid, a_val, value, vlen)))
		return rc;
	{
		uint64_t args[5] = { a_name, 0, 0, a_ptr, 8 };

		rc = ma_session_call_timeout(s, s->t->je.mallctl, args, 5, &ret, timeout_ms);
	}
	if (rc)
		return rc;
	if ((int)ret != 0)
		return mallctl_refused(s, name, (int)ret);
	return 0;
}

int ma_je_read_bins(struct ma_session *s, struct ma_bin_table *t)
{
	/* name pattern and the mib position of the bin index */
	static const struct {
		const char *name;
		size_t pos, width;
	} f[6] = {
		{ "arenas.bin.0.size", 2, sizeof(size_t) },
		{ "arenas.bin.0.nregs", 2, sizeof(uint32_t) },
		{ "arenas.bin.0.slab_size", 2, sizeof(size_t) },
		{ "stats.arenas.4096.bins.0.curregs", 4, sizeof(size_t) },
		{ "stats.arenas.4096.bins.0.curslabs", 4, sizeof(size_t) },
		{ "stats.arenas.4096.bins.0.nonfull_slabs", 4, sizeof(size_t) },
	};
	size_t mib[6][8], miblen[6], tb = 0;
	struct ma_ctl_batch b;
	unsigned nbins = 0;
	int *idx = NULL, itb, rc;

	memset(t, 0, sizeof(*t));
	if ((rc = ma_mallctl_read(s, "arenas.nbins", &nbins, sizeof(nbins))))
		return rc;
	if (nbins == 0 || nbins > 1024)
		return ma_fail(MA_E_JEMALLOC, "arenas.nbins = %u is implausible", nbins);
	/* Names are translated once; the mib of each bin differs in one index. */
	for (size_t k = 0; k < 6; k++) {
		miblen[k] = 8;
		if ((rc = ma_mallctl_nametomib(s, f[k].name, mib[k], &miblen[k])))
			return rc;
		if (f[k].pos >= miblen[k])
			return ma_fail(MA_E_INTERNAL, "mib of %s too short", f[k].name);
	}
	if ((rc = ma_ctl_batch_init(&b, s, 6 * (size_t)nbins + 1, (6 * (size_t)nbins + 1) * 96)))
		return rc;
	idx = calloc(6 * (size_t)nbins, sizeof(*idx));
	t->bins = calloc(nbins, sizeof(*t->bins));
	if (!idx || !t->bins) {
		rc = ma_fail(MA_E_NOMEM, "out of memory");
		goto out;
	}
	t->nbins = nbins;
	/* One injected call reads every value: the thread stops once. */
	for (size_t j = 0; j < nbins; j++) {
		for (size_t k = 0; k < 6; k++) {
			mib[k][f[k].pos] = j;
			idx[j * 6 + k] = ma_ctl_batch_read_mib(&b, mib[k], miblen[k], f[k].width);
			if (idx[j * 6 + k] < 0) {
				rc = idx[j * 6 + k];
				goto out;
			}
		}
	}
	itb = ma_ctl_batch_read(&b, "stats.arenas.4096.tcache_bytes", sizeof(size_t));
	if (itb < 0 || (rc = ma_ctl_batch_run(&b))) {
		rc = itb < 0 ? itb : rc;
		goto out;
	}
	for (size_t j = 0; j < nbins && !rc; j++) {
		struct ma_bin *bn = &t->bins[j];
		uint64_t *dst[6] = { &bn->size,	   &bn->nregs,	  &bn->slab_size,
				     &bn->curregs, &bn->curslabs, &bn->nonfull_slabs };

		for (size_t k = 0; k < 6 && !rc; k++) {
			size_t v = 0;
			uint32_t v32 = 0;

			if (f[k].width == sizeof(v32)) {
				rc = ma_ctl_batch_result(&b, idx[j * 6 + k], &v32, sizeof(v32));
				v = v32;
			} else {
				rc = ma_ctl_batch_result(&b, idx[j * 6 + k], &v, sizeof(v));
			}
			*dst[k] = v;
		}
	}
	if (!rc)
		rc = ma_ctl_batch_result(&b, itb, &tb, sizeof(tb));
	t->tcache_bytes = tb;
out:
	free(idx);
	ma_ctl_batch_release(&b);
	if (rc)
		ma_bin_table_release(t);
	return rc;
}

/* One attempt with a CAP-byte buffer; *need gets the full output size. */
static int stats_print_once(struct ma_session *s, uint64_t cb, const char *opts, int timeout_ms,
			    size_t cap, char **out, size_t *len, size_t *need)
{
	uint64_t buf = 0, hdr[3], a_opts, ret;
	size_t maplen = cap + 4096;
	int rc;

	if ((rc = ma_session_map(s, maplen, &buf)))
		return rc;
	hdr[0] = buf + 4096;
	hdr[1] = buf + 4096 + cap;
	hdr[2] = 0;
	ma_session_reset(s);
	a_opts = ma_session_alloc(s, strlen(opts) + 1);
	if (!a_opts)
		rc = ma_fail(MA_E_INTERNAL, "scratch area exhausted");
	if (!rc && !(rc = ma_mem_write(s->t->proc_pid, buf, hdr, sizeof(hdr))))
		rc = ma_mem_write(s->t->proc_pid, a_opts, opts, strlen(opts) + 1);
	if (!rc) {
		uint64_t args[3] = { cb, buf, a_opts };

		rc = ma_session_call_timeout(s, s->t->je.malloc_stats_print, args, 3, &ret,
					     timeout_ms);
	}
	if (!rc)
		rc = ma_mem_read(s->t->proc_pid, buf, hdr, sizeof(hdr));
	if (!rc) {
		*len = hdr[0] - (buf + 4096);
		*need = *len + hdr[2];
		if (!hdr[2]) {
			*out = malloc(*len + 1);
			if (!*out)
				rc = ma_fail(MA_E_NOMEM, "out of memory");
			else if ((rc = ma_mem_read(s->t->proc_pid, buf + 4096, *out, *len)) == 0)
				(*out)[*len] = '\0';
			if (rc) {
				free(*out);
				*out = NULL;
			}
		}
	}
	/* After a timeout the thread may still write there: it stays mapped (and recorded). */
	ma_session_unmap(s, buf);
	return rc;
}

int ma_je_stats_print(struct ma_session *s, const char *opts, int timeout_ms, char **out,
		      size_t *len)
{
	size_t cap = 4UL << 20, need = 0;
	uint64_t cb = s->append_cb;
	int rc = 0;

	*out = NULL;
	*len = 0;
	if (!s->t->je.malloc_stats_print)
		return ma_fail(MA_E_NOJEMALLOC, "malloc_stats_print not found in the target");
	/* Pages of the buffer are touched only as far as the output goes. */
	for (int attempt = 0; attempt < 3; attempt++) {
		rc = stats_print_once(s, cb, opts, timeout_ms, cap, out, len, &need);
		if (rc || *out)
			break;
		cap = need + need / 4 + 65536; /* grew between the two prints? */
	}
	if (!rc && !*out)
		rc = ma_fail(MA_E_INTERNAL, "malloc_stats_print output kept growing (%zu bytes)", need);
	return rc;
}
