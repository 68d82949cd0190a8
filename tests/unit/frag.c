/*
 * tests/unit/frag.c - attribution of slab waste to allocation sites
 * (analysis/frag.c) on samples whose answers are worked out by hand: each
 * survivor's share of its slab's free bytes, per site and per leaf, the
 * allocator's leading frames dropped before grouping, the mean survivors
 * per slab of a size class (sum 1 / sum 1/live), the sampling weight 2^shift,
 * samples without a slab answer left out, and the saved form read back.
 * Then the estimator at shift 3 over 20,000 random slabs (fixed seed):
 * within 2% of the true free bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "frag.h"

#define NEAR(a, b, tol) (fabs((a) - (b)) <= (tol))

/* frames: 0 = an allocator frame, 1 = keep_a, 2 = keep_b; stacks: 0 = [0, 1], 1 = [0, 2], 2 = [2] */
static uint64_t frames[] = { 0x1000, 0x2000, 0x1000, 0x3000, 0x3000 };
static char *names[] = { "malloc", "keep_a", "malloc", "keep_b", "keep_b" };
static bool alloc[] = { true, false, true, false, false };
static struct ma_frag_stack stacks[] = { { 0, 2 }, { 2, 2 }, { 4, 1 } };

static void fill(struct ma_frag_data *d, struct ma_frag_sample *s, size_t n, uint32_t shift)
{
	memset(d, 0, sizeof(*d));
	d->shift = shift;
	d->s = s;
	d->n = n;
	d->stacks = stacks;
	d->nstacks = 3;
	d->frames = frames;
	d->nframes = 5;
	d->frame_name = names;
	d->frame_alloc = alloc;
}

static const struct ma_frag_site *site_named(const struct ma_frag_report *r, const char *leaf)
{
	for (size_t i = 0; i < r->nsites; i++)
		if (strcmp(r->sites[i].leaf, leaf) == 0)
			return &r->sites[i];
	return NULL;
}

static void by_hand(void)
{
	/* 64-byte class (64 per 4 KiB slab).  Slab A: 60 free, 4 live: 3 sampled from
	 * keep_a, 1 from keep_b, each 60 * 64 / 4 = 960 bytes.  Slab B: 32 free, 32
	 * live, all keep_b (stacks 1 and 2, the same site once malloc is dropped):
	 * each 32 * 64 / 32 = 64 bytes.  One sample with no answer. */
	struct ma_frag_sample s[37];
	struct ma_frag_data d;
	struct ma_frag_report r;
	const struct ma_frag_site *a, *b;
	size_t n = 0;

	for (int i = 0; i < 3; i++)
		s[n++] = (struct ma_frag_sample){ .ptr = 0x10000 + 64 * i, .stack = 0, .nfree = 60, .nregs = 64, .extent = 4096 };
	s[n++] = (struct ma_frag_sample){ .ptr = 0x10100, .stack = 1, .nfree = 60, .nregs = 64, .extent = 4096 };
	for (int i = 0; i < 32; i++)
		s[n++] = (struct ma_frag_sample){ .ptr = 0x20000 + 64 * i, .stack = (uint32_t)(1 + i % 2), .nfree = 32, .nregs = 64, .extent = 4096 };
	s[n++] = (struct ma_frag_sample){ .ptr = 0x30000, .stack = 0 }; /* no answer */
	fill(&d, s, n, 0);
	CHECK("compute (shift 0)", ma_frag_compute(&d, &r) == 0);
	CHECK("attributed: all the free bytes, 60*64 + 32*64 = 5888", NEAR(r.attributed, 5888, 1e-6));
	CHECK("samples used: the 36 with an answer", r.samples_used == 36);
	a = site_named(&r, "keep_a");
	b = site_named(&r, "keep_b");
	CHECK("two sites: stacks through malloc grouped by their program frames", r.nsites == 2 && a && b);
	/* its samples count the one without an answer too: what the agent holds */
	CHECK("keep_a: 3 * 960 = 2880, from 4 samples", a && NEAR(a->waste, 2880, 1e-6) && a->samples == 4);
	CHECK("keep_b: 960 + 32 * 64 = 3008", b && NEAR(b->waste, 3008, 1e-6) && b->samples == 33);
	CHECK("sites by waste, largest first", r.nsites == 2 && r.sites[0].waste >= r.sites[1].waste);
	CHECK("one class, 64 bytes", r.nclasses == 1 && r.classes[0].size == 64);
	CHECK("survivors per slab: 36 / (4 * 1/4 + 32 * 1/32) = 18", NEAR(r.classes[0].surv_per_slab, 18, 1e-9));
	CHECK("fill 18 / 64", NEAR(r.classes[0].fill, 18.0 / 64, 1e-12));
	CHECK("leaves: keep_b first", r.nleaves == 2 && strcmp(r.leaves[0].name, "keep_b") == 0);
	ma_frag_report_release(&r);

	/* At shift 2 each sample stands for 4: every share four times as large. */
	fill(&d, s, n, 2);
	CHECK("compute (shift 2)", ma_frag_compute(&d, &r) == 0);
	CHECK("shift 2: each sample weighs 4 (4 * 5888)", NEAR(r.attributed, 4 * 5888, 1e-6));
	CHECK("shift 2: survivors per slab unchanged (18)", NEAR(r.classes[0].surv_per_slab, 18, 1e-9));
	ma_frag_report_release(&r);

	/* Saved and read back: the same report. */
	{
		char path[] = "/tmp/ma-frag-unit.XXXXXX";
		int fd = mkstemp(path);
		FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
		struct ma_frag_data l;
		struct ma_frag_report r2;
		bool same = false;

		fill(&d, s, n, 0);
		CHECK("saved", f && ma_frag_save(f, &d) == 0 && fclose(f) == 0);
		if (ma_frag_load(path, &l) == 0) {
			l.frame_name = names;
			l.frame_alloc = alloc;
			same = l.n == d.n && l.nstacks == d.nstacks && l.nframes == d.nframes &&
			       ma_frag_compute(&l, &r2) == 0 && NEAR(r2.attributed, 5888, 1e-6) &&
			       r2.samples_used == 36;
			if (same)
				ma_frag_report_release(&r2);
			l.frame_name = NULL;
			l.frame_alloc = NULL;
			ma_frag_data_release(&l);
		}
		unlink(path);
		CHECK("read back: the same samples, stacks and report", same);
	}
}

/* xorshift64*, fixed seed: the same slabs every run. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dULL;
}

static void unbiased(void)
{
	/* 20,000 slabs of 64 regions with 1..64 survivors each, every survivor
	 * sampled with probability 1/8: the estimate of the free bytes is unbiased. */
	size_t cap = 20000 * 64 / 4, n = 0;
	struct ma_frag_sample *s = malloc(cap * sizeof(*s));
	struct ma_frag_data d;
	struct ma_frag_report r;
	double truth = 0, inv_truth = 0;
	size_t slabs = 20000;

	for (size_t k = 0; k < slabs && s; k++) {
		uint64_t live = 1 + next() % 64;

		truth += (double)(64 - live) * 64;
		inv_truth += 1.0;
		for (uint64_t i = 0; i < live; i++)
			if (next() % 8 == 0 && n < cap)
				s[n++] = (struct ma_frag_sample){ .ptr = k * 4096 + i * 64, .stack = 0,
								  .nfree = 64 - live, .nregs = 64, .extent = 4096 };
	}
	fill(&d, s, n, 3);
	CHECK("compute (20,000 random slabs, shift 3)", s && ma_frag_compute(&d, &r) == 0);
	CHECK("shift 3: the estimate within 2% of the true free bytes",
	      NEAR(r.attributed, truth, 0.02 * truth));
	CHECK("shift 3: mean survivors per slab within 2% of the truth (32.5)",
	      r.nclasses == 1 && NEAR(r.classes[0].surv_per_slab, 32.5, 0.02 * 32.5));
	(void)inv_truth;
	ma_frag_report_release(&r);
	free(s);
}

int main(void)
{
	by_hand();
	unbiased();
	CHECK_DONE();
}
