/*
 * frag.h - attribution of slab waste to allocation sites (analysis/frag.c),
 * from the agent's live samples and their slabs' utilization.
 *
 * Each sampled live pointer p in a slab with nregs regions of which nfree
 * are free carries an unbiased share of that slab's waste:
 *     nfree * region_size / (r * live),  live = nregs - nfree,
 *     region_size = extent_size / nregs, r = 1/2^shift (1 in focus mode).
 * Summed over a slab's live regions (each sampled with probability r) the
 * expectation is the slab's free bytes: the slab's waste is split evenly
 * among the survivors that pin it.  Per size class, sum(1) / sum(1/live)
 * over the samples is the mean number of live regions per slab, exactly
 * in expectation, whatever the sampling rate (each slab contributes r on
 * average to the denominator).
 */
#ifndef MA_FRAG_H
#define MA_FRAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ma_frag_sample {
	uint64_t ptr;
	uint32_t stack, size; /* stack index; usable size (focus mode) or 0 */
	uint64_t nfree, nregs, extent; /* batch_query's answer (zeros: no answer) */
};

struct ma_frag_stack {
	uint32_t off, n; /* frames[off .. off+n), innermost first */
};

/* Everything a report is computed from; also what `frag report -o` saves. */
struct ma_frag_data {
	uint32_t mode, shift; /* enum ma_agent_mode */
	uint64_t focus_size;
	uint64_t pid;
	uint64_t started_unix_ns, captured_unix_ns;
	uint64_t recorded, removed, dropped_full, dropped_stacks, truncated_stacks, query_failed;
	bool have_bins; /* bins_waste: small-bin waste (bins) read right after the query */
	uint64_t bins_waste;
	struct ma_frag_sample *s;
	size_t n;
	struct ma_frag_stack *stacks;
	size_t nstacks;
	uint64_t *frames; /* return addresses */
	size_t nframes;
	/* per frame, filled by the caller (symbolizer): display name, allocator's own code */
	char **frame_name;
	bool *frame_alloc;
	/*
	 * per frame, or NULL: dropped from a stack's start after the
	 * allocator's frames, as aggregate's --skip does (not saved)
	 */
	bool *frame_skip;
};

struct ma_frag_site {
	size_t stack; /* a representative stack index (after trimming the allocator's frames) */
	uint32_t first, nframes; /* its program frames: frames[first .. first+nframes) */
	const char *leaf;
	double waste;
	uint64_t samples;
};

struct ma_frag_class {
	uint64_t size, nregs;
	uint64_t samples;
	double surv_per_slab, fill, waste;
};

struct ma_frag_leaf {
	const char *name;
	double waste;
	uint64_t samples;
};

/* Focus mode: pages by the set of leaves living on them. */
struct ma_frag_leafset {
	uint32_t *leaves; /* indexes into report.leaves, sorted */
	size_t nleaves;
	uint64_t pages;
};

struct ma_frag_focus_leaf {
	size_t leaf; /* index into report.leaves */
	uint64_t pages, sole_pages;
};

struct ma_frag_report {
	double attributed;
	uint64_t samples_used; /* samples with a slab answer */
	struct ma_frag_site *sites; /* by waste, descending */
	size_t nsites;
	struct ma_frag_class *classes; /* by size */
	size_t nclasses;
	struct ma_frag_leaf *leaves; /* by waste, descending */
	size_t nleaves;
	/* focus mode */
	uint64_t pages, cohort_pages, mixed_pages;
	struct ma_frag_leafset *leafsets; /* by pages, descending */
	size_t nleafsets;
	struct ma_frag_focus_leaf *focus_leaves; /* by pages, descending */
	size_t nfocus_leaves;
};

/* Compute R from D (whose frame names must be filled).  0 or MA_E_NOMEM. */
int ma_frag_compute(const struct ma_frag_data *d, struct ma_frag_report *r);
void ma_frag_report_release(struct ma_frag_report *r);
void ma_frag_data_release(struct ma_frag_data *d);

/* The saved form of D (`frag report -o`): a line-based text file. */
int ma_frag_save(FILE *f, const struct ma_frag_data *d);
/* Read a file written by ma_frag_save; 0 or MA_E_FORMAT/MA_E_IO with a message. */
int ma_frag_load(const char *path, struct ma_frag_data *d);

#endif
