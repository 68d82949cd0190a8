/*
 * frag.c - slab waste attributed to allocation sites, from the frag
 * agent's samples (frag.h has the estimator), and the saved form of those
 * samples so a report can be recomputed offline.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "frag.h"
#include "input.h"
#include "ma_error.h"

#define PAGE_SHIFT 12

static const char no_stack[] = "(stack not recorded)";

/*
 * The program's frames of stack I: the allocator's own leading frames
 * dropped, then the --skip ones (keeping at least one of those).
 */
static void program_frames(const struct ma_frag_data *d, size_t i, uint32_t *first, uint32_t *n)
{
	const struct ma_frag_stack *st = &d->stacks[i];
	uint32_t k = 0;

	while (k < st->n && d->frame_alloc && d->frame_alloc[st->off + k])
		k++;
	while (k + 1 < st->n && d->frame_skip && d->frame_skip[st->off + k])
		k++;
	*first = st->off + k;
	*n = st->n - k;
}

static const char *leaf_of(const struct ma_frag_data *d, uint32_t first, uint32_t n)
{
	if (!n)
		return no_stack;
	return d->frame_name && d->frame_name[first] ? d->frame_name[first] : "?";
}

/* Sort context for grouping stacks by their program frames. */
static const struct ma_frag_data *sort_d;

static int cmp_program_stack(const void *a, const void *b)
{
	uint32_t fa, na, fb, nb;

	program_frames(sort_d, *(const size_t *)a, &fa, &na);
	program_frames(sort_d, *(const size_t *)b, &fb, &nb);
	if (na != nb)
		return na < nb ? -1 : 1;
	for (uint32_t i = 0; i < na; i++)
		if (sort_d->frames[fa + i] != sort_d->frames[fb + i])
			return sort_d->frames[fa + i] < sort_d->frames[fb + i] ? -1 : 1;
	return 0;
}

static int cmp_site_waste(const void *a, const void *b)
{
	const struct ma_frag_site *x = a, *y = b;

	if (x->waste != y->waste)
		return x->waste > y->waste ? -1 : 1;
	return x->samples > y->samples ? -1 : x->samples < y->samples;
}

static const struct ma_frag_leaf *sort_leaves;

/* Leaf indexes by waste, then samples, descending. */
static int cmp_leaf_waste(const void *a, const void *b)
{
	const struct ma_frag_leaf *x = &sort_leaves[*(const uint32_t *)a];
	const struct ma_frag_leaf *y = &sort_leaves[*(const uint32_t *)b];

	if (x->waste != y->waste)
		return x->waste > y->waste ? -1 : 1;
	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Sort the leaves by waste and renumber the references to them (focus
 * mode's leaf sets and per-leaf pages); then drop what has no sample.
 */
static int sort_leaves_and_trim(struct ma_frag_report *r)
{
	uint32_t *order = malloc((r->nleaves + 1) * sizeof(*order));
	uint32_t *rank = malloc((r->nleaves + 1) * sizeof(*rank));
	struct ma_frag_leaf *sorted = malloc((r->nleaves + 1) * sizeof(*sorted));

	if (!order || !rank || !sorted) {
		free(order);
		free(rank);
		free(sorted);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < r->nleaves; i++)
		order[i] = i;
	sort_leaves = r->leaves;
	qsort(order, r->nleaves, sizeof(*order), cmp_leaf_waste);
	for (uint32_t i = 0; i < r->nleaves; i++) {
		rank[order[i]] = i;
		sorted[i] = r->leaves[order[i]];
	}
	for (size_t i = 0; i < r->nleafsets; i++) {
		for (size_t k = 0; k < r->leafsets[i].nleaves; k++)
			r->leafsets[i].leaves[k] = rank[r->leafsets[i].leaves[k]];
		qsort(r->leafsets[i].leaves, r->leafsets[i].nleaves, sizeof(uint32_t), cmp_u32);
	}
	for (size_t i = 0; i < r->nfocus_leaves; i++)
		r->focus_leaves[i].leaf = rank[r->focus_leaves[i].leaf];
	free(r->leaves);
	r->leaves = sorted;
	while (r->nleaves && !r->leaves[r->nleaves - 1].samples)
		r->nleaves--;
	while (r->nsites && !r->sites[r->nsites - 1].samples)
		r->nsites--;
	while (r->nfocus_leaves && !r->focus_leaves[r->nfocus_leaves - 1].pages)
		r->nfocus_leaves--;
	free(order);
	free(rank);
	return 0;
}

/* One sample's share of its slab's waste, in bytes; 0 if it pins no slab. */
static double sample_waste(const struct ma_frag_data *d, const struct ma_frag_sample *x)
{
	double r_inv = d->mode == 1 ? 1.0 : (double)(1ULL << d->shift);
	uint64_t live;

	if (x->nregs <= 1 || x->nfree >= x->nregs || !x->extent)
		return 0;
	live = x->nregs - x->nfree;
	return (double)x->nfree * ((double)x->extent / (double)x->nregs) * r_inv / (double)live;
}

/* Group stacks into sites: site_of[stack] = site index. */
static int build_sites(const struct ma_frag_data *d, struct ma_frag_report *r, size_t *site_of)
{
	size_t *order = malloc((d->nstacks ? d->nstacks : 1) * sizeof(*order));

	r->sites = calloc(d->nstacks ? d->nstacks : 1, sizeof(*r->sites));
	if (!order || !r->sites) {
		free(order);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < d->nstacks; i++)
		order[i] = i;
	sort_d = d;
	qsort(order, d->nstacks, sizeof(*order), cmp_program_stack);
	for (size_t i = 0; i < d->nstacks; i++) {
		if (i == 0 || cmp_program_stack(&order[i - 1], &order[i]) != 0) {
			struct ma_frag_site *s = &r->sites[r->nsites++];

			s->stack = order[i];
			program_frames(d, order[i], &s->first, &s->nframes);
			s->leaf = leaf_of(d, s->first, s->nframes);
		}
		site_of[order[i]] = r->nsites - 1;
	}
	free(order);
	return 0;
}

static int build_leaves(const struct ma_frag_data *d, struct ma_frag_report *r, size_t *leaf_of_site)
{
	size_t *order;

	r->leaves = calloc(r->nsites ? r->nsites : 1, sizeof(*r->leaves));
	order = malloc((r->nsites ? r->nsites : 1) * sizeof(*order));
	if (!r->leaves || !order) {
		free(order);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	(void)d;
	/* Sites are few (distinct stacks): a linear search per site is fine. */
	for (size_t i = 0; i < r->nsites; i++) {
		size_t k;

		for (k = 0; k < r->nleaves && strcmp(r->leaves[k].name, r->sites[i].leaf) != 0; k++)
			;
		if (k == r->nleaves)
			r->leaves[r->nleaves++].name = r->sites[i].leaf;
		r->leaves[k].waste += r->sites[i].waste;
		r->leaves[k].samples += r->sites[i].samples;
		leaf_of_site[i] = k;
	}
	free(order);
	return 0;
}

static int cmp_class(const void *a, const void *b)
{
	const struct ma_frag_class *x = a, *y = b;

	return x->size < y->size ? -1 : x->size > y->size;
}

/* Per size class: exact mean survivors per slab (sum 1 / sum 1/live) and waste. */
static int build_classes(const struct ma_frag_data *d, struct ma_frag_report *r)
{
	double *inv = calloc(64, sizeof(*inv));
	size_t cap = 64;

	r->classes = calloc(cap, sizeof(*r->classes));
	if (!inv || !r->classes) {
		free(inv);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < d->n; i++) {
		const struct ma_frag_sample *x = &d->s[i];
		uint64_t size;
		size_t k;

		if (x->nregs <= 1 || x->nfree >= x->nregs || !x->extent)
			continue;
		size = x->extent / x->nregs;
		for (k = 0; k < r->nclasses && r->classes[k].size != size; k++)
			;
		if (k == r->nclasses) {
			if (k == cap) {
				struct ma_frag_class *nc = realloc(r->classes, 2 * cap * sizeof(*nc));
				double *ni = realloc(inv, 2 * cap * sizeof(*ni));

				if (nc)
					r->classes = nc;
				if (ni)
					inv = ni;
				if (!nc || !ni) {
					free(inv);
					return ma_fail(MA_E_NOMEM, "out of memory");
				}
				memset(r->classes + cap, 0, cap * sizeof(*nc));
				memset(inv + cap, 0, cap * sizeof(*ni));
				cap *= 2;
			}
			r->classes[k].size = size;
			r->classes[k].nregs = x->nregs;
			r->nclasses++;
		}
		r->classes[k].samples++;
		r->classes[k].waste += sample_waste(d, x);
		inv[k] += 1.0 / (double)(x->nregs - x->nfree);
	}
	for (size_t k = 0; k < r->nclasses; k++) {
		r->classes[k].surv_per_slab = (double)r->classes[k].samples / inv[k];
		r->classes[k].fill = r->classes[k].surv_per_slab / (double)r->classes[k].nregs;
	}
	/* inv is in class order: sort only after it is used. */
	qsort(r->classes, r->nclasses, sizeof(*r->classes), cmp_class);
	free(inv);
	return 0;
}

struct page_leaf {
	uint64_t page;
	uint32_t leaf;
};

static int cmp_page_leaf(const void *a, const void *b)
{
	const struct page_leaf *x = a, *y = b;

	if (x->page != y->page)
		return x->page < y->page ? -1 : 1;
	return x->leaf < y->leaf ? -1 : x->leaf > y->leaf;
}

static int cmp_leafset(const void *a, const void *b)
{
	const struct ma_frag_leafset *x = a, *y = b;

	if (x->nleaves != y->nleaves)
		return x->nleaves < y->nleaves ? -1 : 1;
	return memcmp(x->leaves, y->leaves, x->nleaves * sizeof(*x->leaves));
}

static int cmp_leafset_pages(const void *a, const void *b)
{
	const struct ma_frag_leafset *x = a, *y = b;

	if (x->pages != y->pages)
		return x->pages > y->pages ? -1 : 1;
	return cmp_leafset(a, b);
}

static int cmp_focus_leaf(const void *a, const void *b)
{
	const struct ma_frag_focus_leaf *x = a, *y = b;

	if (x->pages != y->pages)
		return x->pages > y->pages ? -1 : 1;
	return x->leaf < y->leaf ? -1 : x->leaf > y->leaf;
}

/*
 * Focus mode: every live region of the class is a sample, so the set of
 * leaves on each 4 KiB page is exact.  A page is a cohort if one leaf
 * holds all its live regions.
 */
static int build_focus(const struct ma_frag_data *d, struct ma_frag_report *r,
		       const size_t *site_of, const size_t *leaf_of_site)
{
	struct page_leaf *pl = malloc((d->n ? d->n : 1) * sizeof(*pl));
	struct ma_frag_leafset *sets = NULL;
	size_t n = 0, nsets = 0;

	r->focus_leaves = calloc(r->nleaves ? r->nleaves : 1, sizeof(*r->focus_leaves));
	if (!pl || !r->focus_leaves)
		goto oom;
	for (size_t i = 0; i < d->n; i++) {
		pl[n].page = d->s[i].ptr >> PAGE_SHIFT;
		pl[n].leaf = (uint32_t)leaf_of_site[site_of[d->s[i].stack]];
		n++;
	}
	qsort(pl, n, sizeof(*pl), cmp_page_leaf);
	for (size_t k = 0; k < r->nleaves; k++)
		r->focus_leaves[k].leaf = k;
	r->nfocus_leaves = r->nleaves;
	if (!(sets = calloc(n ? n : 1, sizeof(*sets))))
		goto oom;
	for (size_t i = 0; i < n;) {
		size_t j = i, distinct = 0;
		struct ma_frag_leafset *s = &sets[nsets];

		while (j < n && pl[j].page == pl[i].page)
			j++;
		if (!(s->leaves = malloc((j - i) * sizeof(*s->leaves))))
			goto oom;
		for (size_t k = i; k < j; k++)
			if (k == i || pl[k].leaf != pl[k - 1].leaf)
				s->leaves[distinct++] = pl[k].leaf;
		s->nleaves = distinct;
		s->pages = 1;
		nsets++;
		r->pages++;
		if (distinct == 1) {
			r->cohort_pages++;
			r->focus_leaves[s->leaves[0]].sole_pages++;
		} else {
			r->mixed_pages++;
		}
		for (size_t k = 0; k < distinct; k++)
			r->focus_leaves[s->leaves[k]].pages++;
		i = j;
	}
	/* Merge identical leaf sets. */
	qsort(sets, nsets, sizeof(*sets), cmp_leafset);
	for (size_t i = 0; i < nsets; i++) {
		if (r->nleafsets && cmp_leafset(&sets[r->nleafsets - 1], &sets[i]) == 0) {
			sets[r->nleafsets - 1].pages++;
			free(sets[i].leaves);
			continue;
		}
		sets[r->nleafsets++] = sets[i];
	}
	qsort(sets, r->nleafsets, sizeof(*sets), cmp_leafset_pages);
	r->leafsets = sets;
	qsort(r->focus_leaves, r->nfocus_leaves, sizeof(*r->focus_leaves), cmp_focus_leaf);
	free(pl);
	return 0;
oom:
	for (size_t i = 0; sets && i < nsets; i++)
		free(sets[i].leaves);
	free(sets);
	free(pl);
	return ma_fail(MA_E_NOMEM, "out of memory");
}

int ma_frag_compute(const struct ma_frag_data *d, struct ma_frag_report *r)
{
	size_t *site_of = calloc(d->nstacks ? d->nstacks : 1, sizeof(*site_of));
	size_t *leaf_of_site = NULL;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!site_of)
		return ma_fail(MA_E_NOMEM, "out of memory");
	if ((rc = build_sites(d, r, site_of)))
		goto out;
	for (size_t i = 0; i < d->n; i++) {
		const struct ma_frag_sample *x = &d->s[i];
		struct ma_frag_site *s = &r->sites[site_of[x->stack < d->nstacks ? x->stack : 0]];
		double w = sample_waste(d, x);

		s->waste += w;
		s->samples++;
		r->attributed += w;
		if (x->nregs)
			r->samples_used++;
	}
	if (!(leaf_of_site = calloc(r->nsites ? r->nsites : 1, sizeof(*leaf_of_site)))) {
		rc = ma_fail(MA_E_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = build_leaves(d, r, leaf_of_site)) || (rc = build_classes(d, r)))
		goto out;
	if (d->mode == 1 && (rc = build_focus(d, r, site_of, leaf_of_site)))
		goto out;
	/* Sorting last: the indexes above refer to the unsorted arrays. */
	qsort(r->sites, r->nsites, sizeof(*r->sites), cmp_site_waste);
	rc = sort_leaves_and_trim(r);
out:
	free(site_of);
	free(leaf_of_site);
	if (rc)
		ma_frag_report_release(r);
	return rc;
}

void ma_frag_report_release(struct ma_frag_report *r)
{
	for (size_t i = 0; i < r->nleafsets; i++)
		free(r->leafsets[i].leaves);
	free(r->leafsets);
	free(r->focus_leaves);
	free(r->sites);
	free(r->classes);
	free(r->leaves);
	memset(r, 0, sizeof(*r));
}

void ma_frag_data_release(struct ma_frag_data *d)
{
	for (size_t i = 0; d->frame_name && i < d->nframes; i++)
		free(d->frame_name[i]);
	free(d->frame_name);
	free(d->frame_alloc);
	free(d->frame_skip);
	free(d->s);
	free(d->stacks);
	free(d->frames);
	memset(d, 0, sizeof(*d));
}

/* ---- the saved form ---- */

#define SAVE_MAGIC "memattach-frag 1"

int ma_frag_save(FILE *f, const struct ma_frag_data *d)
{
	fprintf(f, SAVE_MAGIC "\n");
	fprintf(f, "mode %s\nshift %u\nfocus_size %" PRIu64 "\npid %" PRIu64 "\n",
		d->mode == 1 ? "focus" : "shift", d->shift, d->focus_size, d->pid);
	fprintf(f, "started_unix_ns %" PRIu64 "\ncaptured_unix_ns %" PRIu64 "\n", d->started_unix_ns,
		d->captured_unix_ns);
	fprintf(f, "counters %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		d->recorded, d->removed, d->dropped_full, d->dropped_stacks, d->truncated_stacks,
		d->query_failed);
	if (d->have_bins)
		fprintf(f, "bins_waste %" PRIu64 "\n", d->bins_waste);
	fprintf(f, "frames %zu\n", d->nframes);
	for (size_t i = 0; i < d->nframes; i++)
		fprintf(f, "f %" PRIx64 " %d %s\n", d->frames[i], d->frame_alloc && d->frame_alloc[i],
			/* one line each: the printable form (format.h) */
			d->frame_name && d->frame_name[i] ? ma_printable(d->frame_name[i]) : "?");
	fprintf(f, "stacks %zu\n", d->nstacks);
	for (size_t i = 0; i < d->nstacks; i++)
		fprintf(f, "s %u %u\n", d->stacks[i].off, d->stacks[i].n);
	fprintf(f, "samples %zu\n", d->n);
	for (size_t i = 0; i < d->n; i++) {
		const struct ma_frag_sample *x = &d->s[i];

		fprintf(f, "p %" PRIx64 " %u %u %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", x->ptr, x->stack,
			x->size, x->nfree, x->nregs, x->extent);
	}
	fprintf(f, "end\n");
	return ferror(f) ? ma_fail(MA_E_IO, "write error") : 0;
}

struct loader {
	const char *path;
	char *p, *end;
	size_t line;
};

/* The next line (NUL-terminated in place), or NULL at the end. */
static char *next_line(struct loader *l)
{
	char *s = l->p, *nl;

	if (l->p >= l->end)
		return NULL;
	nl = memchr(l->p, '\n', (size_t)(l->end - l->p));
	if (nl) {
		*nl = '\0';
		l->p = nl + 1;
	} else {
		l->p = l->end;
	}
	l->line++;
	return s;
}

static int bad(const struct loader *l, const char *what)
{
	return ma_fail(MA_E_FORMAT, "%s:%zu: %s (not a file written by 'memattach frag report -o')",
		       l->path, l->line, what);
}

/* "KEY <u64>" into *V. */
static int keyed_u64(struct loader *l, const char *key, uint64_t *v)
{
	char *s = next_line(l), *e;
	size_t k = strlen(key);

	if (!s || strncmp(s, key, k) != 0 || s[k] != ' ')
		return bad(l, key);
	*v = strtoull(s + k + 1, &e, 10);
	return *e || e == s + k + 1 ? bad(l, key) : 0;
}

/* A count line "KEY N" that must not promise more lines than the file can hold. */
static int keyed_count(struct loader *l, const char *key, size_t *n)
{
	uint64_t v;
	int rc = keyed_u64(l, key, &v);

	if (rc)
		return rc;
	if (v > (uint64_t)(l->end - l->p) / 2)
		return bad(l, "count larger than the file");
	*n = (size_t)v;
	return 0;
}

static int load_body(struct loader *l, struct ma_frag_data *d)
{
	uint64_t v;
	char *s, mode[16];
	int rc;

	if (!(s = next_line(l)) || strcmp(s, SAVE_MAGIC) != 0)
		return bad(l, "no '" SAVE_MAGIC "' header");
	if (!(s = next_line(l)) || sscanf(s, "mode %15s", mode) != 1 ||
	    (strcmp(mode, "focus") && strcmp(mode, "shift")))
		return bad(l, "mode");
	d->mode = strcmp(mode, "focus") == 0;
	if ((rc = keyed_u64(l, "shift", &v)))
		return rc;
	if (v > 30)
		return bad(l, "shift out of range");
	d->shift = (uint32_t)v;
	if ((rc = keyed_u64(l, "focus_size", &d->focus_size)) || (rc = keyed_u64(l, "pid", &d->pid)) ||
	    (rc = keyed_u64(l, "started_unix_ns", &d->started_unix_ns)) ||
	    (rc = keyed_u64(l, "captured_unix_ns", &d->captured_unix_ns)))
		return rc;
	if (!(s = next_line(l)) ||
	    sscanf(s, "counters %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
		   &d->recorded, &d->removed, &d->dropped_full, &d->dropped_stacks,
		   &d->truncated_stacks, &d->query_failed) != 6)
		return bad(l, "counters");
	if (l->p < l->end && strncmp(l->p, "bins_waste ", 11) == 0) {
		if ((rc = keyed_u64(l, "bins_waste", &d->bins_waste)))
			return rc;
		d->have_bins = true;
	}
	if ((rc = keyed_count(l, "frames", &d->nframes)))
		return rc;
	d->frames = calloc(d->nframes + 1, sizeof(*d->frames));
	d->frame_alloc = calloc(d->nframes + 1, sizeof(*d->frame_alloc));
	d->frame_name = calloc(d->nframes + 1, sizeof(*d->frame_name));
	if (!d->frames || !d->frame_alloc || !d->frame_name)
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < d->nframes; i++) {
		int alloc, off = 0;

		if (!(s = next_line(l)) || sscanf(s, "f %" SCNx64 " %d %n", &d->frames[i], &alloc, &off) != 2 ||
		    !off || (alloc != 0 && alloc != 1))
			return bad(l, "frame line");
		d->frame_alloc[i] = alloc;
		if (!(d->frame_name[i] = strdup(s + off)))
			return ma_fail(MA_E_NOMEM, "out of memory");
	}
	if ((rc = keyed_count(l, "stacks", &d->nstacks)))
		return rc;
	if (!(d->stacks = calloc(d->nstacks + 1, sizeof(*d->stacks))))
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < d->nstacks; i++) {
		struct ma_frag_stack *st = &d->stacks[i];

		if (!(s = next_line(l)) || sscanf(s, "s %u %u", &st->off, &st->n) != 2 ||
		    (uint64_t)st->off + st->n > d->nframes)
			return bad(l, "stack line");
	}
	if ((rc = keyed_count(l, "samples", &d->n)))
		return rc;
	if (!(d->s = calloc(d->n + 1, sizeof(*d->s))))
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < d->n; i++) {
		struct ma_frag_sample *x = &d->s[i];

		if (!(s = next_line(l)) ||
		    sscanf(s, "p %" SCNx64 " %u %u %" SCNu64 " %" SCNu64 " %" SCNu64, &x->ptr, &x->stack,
			   &x->size, &x->nfree, &x->nregs, &x->extent) != 6 ||
		    x->stack >= d->nstacks || x->nfree > x->nregs)
			return bad(l, "sample line");
	}
	if (!(s = next_line(l)) || strcmp(s, "end") != 0)
		return bad(l, "truncated: no 'end' line");
	return 0;
}

int ma_frag_load(const char *path, struct ma_frag_data *d)
{
	struct ma_input in;
	struct loader l;
	char *copy;
	int rc;

	memset(d, 0, sizeof(*d));
	if ((rc = ma_input_load(&in, path, "frag samples", MA_MAX_HEAP_DUMP)))
		return rc;
	if (memchr(in.data, '\0', in.len)) {
		ma_input_release(&in);
		return ma_fail(MA_E_FORMAT, "%s: binary data, not a frag samples file", path);
	}
	/* A private copy: lines are cut in place. */
	if (!(copy = malloc(in.len + 1))) {
		ma_input_release(&in);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	memcpy(copy, in.data, in.len);
	l.path = path;
	l.p = copy;
	l.end = copy + in.len;
	l.line = 0;
	ma_input_release(&in);
	rc = load_body(&l, d);
	free(copy);
	if (rc)
		ma_frag_data_release(d);
	return rc;
}
