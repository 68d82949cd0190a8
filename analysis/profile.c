/*
 * profile.c - drop allocator frames, unsample, total per function.
 */
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ma_error.h"
#include "profile.h"

double ma_profile_se(double var)
{
	return var > 0 ? sqrt(var) : 0;
}

/* Sampling variance of the estimate EST made from N samples at scale S (see ma_profile_se). */
static double estimate_var(double est, uint64_t n, double s)
{
	return n && s > 1 ? est * est * (1 - 1 / s) / (double)n : 0;
}

double ma_profile_stack_bytes(const struct ma_profile *p, size_t i)
{
	const struct ma_hp_stack *s = &p->hp->stacks[i];

	return (double)s->bytes * s->scale;
}

double ma_profile_stack_objs(const struct ma_profile *p, size_t i)
{
	const struct ma_hp_stack *s = &p->hp->stacks[i];

	return (double)s->objs * s->scale;
}

static bool skipped(struct ma_profile *p, const struct ma_prof_opts *o, uint32_t fn)
{
	struct ma_fstat *f = &p->fs[fn];

	if (!o->nskip)
		return false;
	if (!f->skip) {
		const char *dem = ma_sym_func_name(p->sym, fn);
		const char *key = p->sym->funcs[fn].key;

		f->skip = -1;
		for (size_t i = 0; i < o->nskip; i++)
			if (regexec(&o->skip[i], dem, 0, NULL, 0) == 0 ||
			    regexec(&o->skip[i], key, 0, NULL, 0) == 0)
				f->skip = 1;
	}
	return f->skip > 0;
}

/*
 * The per-frame and per-function arrays the stack loop touches for every
 * frame, packed so that they stay in cache (a profile over a big binary
 * has 100,000s of functions and the frames hit them at random).
 */
struct hot {
	uint32_t *func; /* per frame: sym->frames[f].func */
	size_t nframes, cap_frames;
	struct cum_acc {
		double cum;
		uint32_t stamp; /* last stack counted (1-based) */
	} *acc; /* per function */
	size_t nacc, cap_acc;
};

static size_t grown(size_t cap, size_t need)
{
	size_t c = cap ? cap : 4096;

	while (c < need)
		c *= 2;
	return c;
}

static int hot_grow(struct hot *h, const struct ma_symbolizer *sym)
{
	if (sym->nframes > h->cap_frames) {
		size_t c = grown(h->cap_frames, sym->nframes);
		uint32_t *f = realloc(h->func, c * sizeof(*f));

		if (!f)
			return -1;
		h->func = f;
		h->cap_frames = c;
	}
	for (; h->nframes < sym->nframes; h->nframes++)
		h->func[h->nframes] = sym->frames[h->nframes].func;
	if (sym->nfuncs > h->cap_acc) {
		size_t c = grown(h->cap_acc, sym->nfuncs);
		struct cum_acc *a = realloc(h->acc, c * sizeof(*a));

		if (!a)
			return -1;
		memset(a + h->cap_acc, 0, (c - h->cap_acc) * sizeof(*a));
		h->acc = a;
		h->cap_acc = c;
	}
	h->nacc = sym->nfuncs;
	return 0;
}

static int grow_fs(struct ma_profile *p)
{
	size_t n = p->sym->nfuncs;
	struct ma_fstat *fs;

	if (n <= p->nfs)
		return 0;
	if (n > p->cap_fs) {
		size_t c = grown(p->cap_fs, n);

		if (!(fs = realloc(p->fs, c * sizeof(*fs))))
			return ma_fail(MA_E_NOMEM, "out of memory");
		p->fs = fs;
		p->cap_fs = c;
	}
	memset(p->fs + p->nfs, 0, (n - p->nfs) * sizeof(*p->fs));
	p->nfs = n;
	return 0;
}

static const struct ma_profile *sort_prof;

static int cmp_accum(const void *a, const void *b)
{
	const struct ma_fstat *x = &sort_prof->fs[*(const uint32_t *)a];
	const struct ma_fstat *y = &sort_prof->fs[*(const uint32_t *)b];

	if (x->accum != y->accum)
		return x->accum > y->accum ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : *(const uint32_t *)a > *(const uint32_t *)b;
}

static int cmp_flat(const void *a, const void *b)
{
	const struct ma_fstat *x = &sort_prof->fs[*(const uint32_t *)a];
	const struct ma_fstat *y = &sort_prof->fs[*(const uint32_t *)b];

	if (x->flat != y->flat)
		return x->flat > y->flat ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static int cmp_cum(const void *a, const void *b)
{
	const struct ma_fstat *x = &sort_prof->fs[*(const uint32_t *)a];
	const struct ma_fstat *y = &sort_prof->fs[*(const uint32_t *)b];

	if (x->cum != y->cum)
		return x->cum > y->cum ? -1 : 1;
	if (x->flat != y->flat)
		return x->flat > y->flat ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/*
 * The frames of stack ST into BUF (several per pc with lines: the inlined
 * chain), at most CAP: their count, or -1 when out of memory.
 */
static long expand_stack(struct ma_symbolizer *sym, const struct ma_heapprof *hp,
			 const struct ma_hp_stack *st, uint32_t *buf, size_t cap)
{
	bool lines = sym->opts.lines;
	size_t n = 0;

	for (uint32_t j = 0; j < st->npcs && n < cap; j++) {
		uint32_t f = ma_sym_pc(sym, hp->pcs[st->pc_first + j]);

		if (f == MA_NONE)
			return -1;
		if (!lines) { /* no inlined chains: skip a look at the frame */
			buf[n++] = f;
			continue;
		}
		for (; f != MA_NONE && n < cap; f = sym->frames[f].inline_next)
			buf[n++] = f;
	}
	return (long)n;
}

/* Append FRAMES[0..N) to P's chains (*CAP allocated, *USED taken): 0 or -1. */
static int append_chain(struct ma_profile *p, size_t *cap, size_t *used, const uint32_t *frames,
			size_t n)
{
	if (*used + n > *cap) {
		size_t nc = *cap ? *cap * 2 : 1 << 16;
		uint32_t *c;

		while (nc < *used + n)
			nc *= 2;
		c = realloc(p->chain, nc * sizeof(uint32_t));
		if (!c)
			return -1;
		p->chain = c;
		*cap = nc;
	}
	if (n)
		memcpy(p->chain + *used, frames, n * sizeof(uint32_t));
	*used += n;
	return 0;
}

/* Stack I's estimates, as ma_profile_build computes them. */
struct stack_est {
	double bytes, objs, abytes, ascale;
};

/* Stack I (its frames CHAIN[0..N), leaf first) into its leaf's flat figures and every frame's cum. */
static void add_stack(struct ma_profile *p, struct hot *hot, size_t i, const uint32_t *chain, size_t n,
		      const struct stack_est *e)
{
	const struct ma_hp_stack *st = &p->hp->stacks[i];
	struct ma_fstat *leaf = &p->fs[p->sym->frames[chain[0]].func];

	leaf->flat += e->bytes;
	leaf->flat_objs += e->objs;
	leaf->flat_var += estimate_var(e->bytes, st->objs, st->scale);
	leaf->accum += e->abytes;
	leaf->accum_objs += (double)st->accum_objs * e->ascale;
	leaf->accum_var += estimate_var(e->abytes, st->accum_objs, e->ascale);
	leaf->raw_flat += st->bytes;
	leaf->raw_flat_objs += st->objs;
	leaf->nstacks++;
	if (e->bytes > leaf->best_bytes || leaf->nstacks == 1) {
		leaf->best_bytes = e->bytes;
		leaf->best_stack = (uint32_t)i;
	}
	for (size_t j = 0; j < n; j++) {
		struct cum_acc *a = &hot->acc[hot->func[chain[j]]];

		if (a->stamp != i + 1) {
			a->stamp = (uint32_t)(i + 1);
			a->cum += e->bytes;
		}
	}
}

/* The sites in their three orders (by flat, cum and churn): 0 or -1. */
static int order_sites(struct ma_profile *p)
{
	p->sites = malloc((p->nfs + 1) * sizeof(uint32_t));
	p->cum_order = malloc((p->nfs + 1) * sizeof(uint32_t));
	p->churn_order = malloc((p->nfs + 1) * sizeof(uint32_t));
	if (!p->sites || !p->cum_order || !p->churn_order)
		return -1;
	for (size_t f = 0; f < p->nfs; f++) {
		/* A site of freed allocations only is in churn_order alone. */
		if (p->fs[f].flat > 0 || (p->fs[f].nstacks && p->fs[f].accum <= 0))
			p->sites[p->nsites++] = (uint32_t)f;
		if (p->fs[f].cum > 0)
			p->cum_order[p->ncum++] = (uint32_t)f;
		if (p->fs[f].accum > 0)
			p->churn_order[p->nchurn++] = (uint32_t)f;
	}
	sort_prof = p;
	qsort(p->sites, p->nsites, sizeof(uint32_t), cmp_flat);
	qsort(p->cum_order, p->ncum, sizeof(uint32_t), cmp_cum);
	qsort(p->churn_order, p->nchurn, sizeof(uint32_t), cmp_accum);
	return 0;
}

int ma_profile_build(struct ma_profile *p, const struct ma_heapprof *hp,
		     struct ma_symbolizer *sym, const struct ma_prof_opts *opts)
{
	static const struct ma_prof_opts none;
	const struct ma_prof_opts *o = opts ? opts : &none;
	uint32_t buf[MA_HP_MAX_FRAMES * 4];
	size_t cap = 0, used = 0;
	struct hot hot = { 0 };
	int rc = MA_E_NOMEM;

	memset(p, 0, sizeof(*p));
	p->hp = hp;
	p->sym = sym;
	p->chain_off = malloc((hp->nstacks + 1) * sizeof(size_t));
	p->chain_len = malloc((hp->nstacks + 1) * sizeof(uint32_t));
	if (!p->chain_off || !p->chain_len)
		goto oom;
	for (size_t i = 0; i < hp->nstacks; i++) {
		const struct ma_hp_stack *st = &hp->stacks[i];
		long got = expand_stack(sym, hp, st, buf, sizeof(buf) / sizeof(buf[0]));
		size_t n = got > 0 ? (size_t)got : 0, k = 0;
		struct stack_est e;

		if (got < 0 || grow_fs(p) || hot_grow(&hot, sym))
			goto oom;
		e.bytes = (double)st->bytes * st->scale;
		e.objs = (double)st->objs * st->scale;
		e.ascale = ma_heapprof_scale(st->accum_objs, st->accum_bytes, hp->period);
		e.abytes = (double)st->accum_bytes * e.ascale;
		/* Leading allocator frames, then --skip frames; keep at least one. */
		if (!o->keep_allocator)
			while (k + 1 < n && sym->funcs[sym->frames[buf[k]].func].allocator)
				k++;
		while (k + 1 < n && skipped(p, o, sym->frames[buf[k]].func))
			k++;
		p->chain_off[i] = used;
		p->chain_len[i] = (uint32_t)(n - k);
		if (append_chain(p, &cap, &used, buf + k, n - k))
			goto oom;
		p->total_bytes += e.bytes;
		p->total_objs += e.objs;
		p->total_raw_bytes += st->bytes;
		p->total_raw_objs += st->objs;
		p->total_accum_bytes += e.abytes;
		p->total_accum_objs += (double)st->accum_objs * e.ascale;
		if (n > k && (st->bytes != 0 || st->accum_bytes != 0))
			add_stack(p, &hot, i, buf + k, n - k, &e);
	}
	if (grow_fs(p) || hot_grow(&hot, sym))
		goto oom;
	for (size_t f = 0; f < p->nfs; f++) {
		p->fs[f].cum = hot.acc[f].cum;
		p->fs[f].stamp = hot.acc[f].stamp;
	}
	free(hot.func);
	free(hot.acc);
	hot.func = NULL;
	hot.acc = NULL;
	if (order_sites(p))
		goto oom;
	return 0;
oom:
	free(hot.func);
	free(hot.acc);
	ma_profile_release(p);
	return ma_fail(rc, "out of memory building the profile");
}

void ma_profile_release(struct ma_profile *p)
{
	free(p->chain);
	free(p->chain_off);
	free(p->chain_len);
	free(p->fs);
	free(p->sites);
	free(p->cum_order);
	free(p->churn_order);
	memset(p, 0, sizeof(*p));
}

static int cmp_stack_bytes(const void *a, const void *b, void *arg)
{
	const struct ma_profile *p = arg;
	size_t i = *(const size_t *)a, k = *(const size_t *)b;
	double x = ma_profile_stack_bytes(p, i), y = ma_profile_stack_bytes(p, k);

	if (x != y)
		return x > y ? -1 : 1;
	return i < k ? -1 : i > k;
}

/* Does function FN's name or key hold NEEDLE?  MATCH caches it: 0 unknown, 1 yes, 2 no. */
static bool func_matches(struct ma_symbolizer *sym, uint32_t fn, const char *needle,
			 unsigned char *match)
{
	if (!match[fn])
		match[fn] = (strstr(sym->funcs[fn].key, needle) ||
			     strstr(ma_sym_func_name(sym, fn), needle)) ? 1 : 2;
	return match[fn] == 1;
}

/* Does stack I match: its allocation site, or (ANY) any of its frames? */
static bool stack_matches(const struct ma_profile *p, size_t i, const char *needle, bool any,
			  unsigned char *match)
{
	struct ma_symbolizer *sym = p->sym;
	uint32_t depth = any ? p->chain_len[i] : 1;

	for (uint32_t k = 0; k < depth; k++)
		if (func_matches(sym, sym->frames[ma_profile_frame(p, i, k)].func, needle, match))
			return true;
	return false;
}

int ma_profile_match_leaf(const struct ma_profile *p, const char *needle, size_t **hits, size_t *n,
			  double *bytes)
{
	return ma_profile_match(p, needle, false, hits, n, bytes);
}

int ma_profile_match(const struct ma_profile *p, const char *needle, bool any_frame, size_t **hits,
		     size_t *n, double *bytes)
{
	struct ma_symbolizer *sym = p->sym;
	size_t *h = malloc((p->hp->nstacks + 1) * sizeof(*h)), nh = 0;
	unsigned char *match = calloc(sym->nfuncs + 1, 1); /* per function: 0 unknown, 1 yes, 2 no */
	double total = 0;

	if (!h || !match) {
		free(h);
		free(match);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < p->hp->nstacks; i++) {
		if (p->chain_len[i] == 0 || p->hp->stacks[i].bytes == 0)
			continue;
		if (stack_matches(p, i, needle, any_frame, match)) {
			h[nh++] = i;
			total += ma_profile_stack_bytes(p, i);
		}
	}
	free(match);
	qsort_r(h, nh, sizeof(*h), cmp_stack_bytes, (void *)p);
	*hits = h;
	*n = nh;
	*bytes = total;
	return 0;
}
