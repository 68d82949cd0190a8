/*
 * profile.h - a symbolized, unsampled heap profile: per-stack user frames
 * and per-function flat (leaf) and cumulative (inclusive) totals.
 *
 * Built from a parsed dump (heapprof.h) and a symbolizer (symbolize.h).
 * Every stack loses its leading allocator frames (functions of the
 * libjemalloc object, or jemalloc's names when it is linked statically)
 * unless keep_allocator is set, then leading frames whose demangled or
 * mangled name matches one of the --skip regexes.  What remains is the
 * stack's "chain": frame indices, innermost (the allocation site) first.
 *
 * All byte and object figures are unsampled per stack (the stack's scale);
 * raw_* are the sampled numbers as written in the dump.
 */
#ifndef MA_PROFILE_H
#define MA_PROFILE_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heapprof.h"
#include "symbolize.h"

struct ma_prof_opts {
	bool keep_allocator; /* --keep-allocator-frames */
	const regex_t *skip; /* --skip REGEX..., extended syntax */
	size_t nskip;
};

struct ma_fstat {
	double flat, flat_objs; /* scaled, as the leaf (allocation site) */
	double flat_var; /* the sampling variance of flat (ma_profile_se) */
	/* allocated since the profile began, live or freed (the dumps' bracketed pair), scaled */
	double accum, accum_objs, accum_var;
	double cum; /* scaled, anywhere in the chain (once per stack) */
	uint64_t raw_flat, raw_flat_objs; /* sampled, as the leaf */
	uint32_t nstacks; /* stacks with this leaf */
	uint32_t best_stack; /* the heaviest of them, for context frames */
	double best_bytes;
	uint32_t stamp; /* last stack counted in cum (1-based) */
	signed char skip; /* --skip verdict cache: 0 unknown, 1 skip, -1 keep */
};

struct ma_profile {
	const struct ma_heapprof *hp;
	struct ma_symbolizer *sym;
	uint32_t *chain; /* frames of all stacks */
	size_t *chain_off; /* per stack: start in chain */
	uint32_t *chain_len; /* per stack: frames kept (0 for empty stacks) */
	struct ma_fstat *fs; /* per function of sym */
	size_t nfs, cap_fs;
	double total_bytes, total_objs; /* scaled */
	double total_accum_bytes, total_accum_objs; /* scaled; 0 where the dump has no cumulative counts */
	uint64_t total_raw_bytes, total_raw_objs;
	uint32_t *sites; /* functions with flat > 0, by flat descending */
	size_t nsites;
	uint32_t *cum_order; /* functions with cum > 0, by cum descending */
	size_t ncum;
	uint32_t *churn_order; /* functions with accum > 0, by accum descending */
	size_t nchurn;
};

/* 0 or MA_E_NOMEM.  HP and SYM must outlive P. */
int ma_profile_build(struct ma_profile *p, const struct ma_heapprof *hp,
		     struct ma_symbolizer *sym, const struct ma_prof_opts *opts);
void ma_profile_release(struct ma_profile *p);

/*
 * The standard error of an estimate whose sampling variance is VAR: a
 * stack of n samples at scale s (= 1/p) estimates B bytes with variance
 * B^2 (1 - p) / n (each object sampled independently with probability p,
 * as jemalloc's prof and memattach's agent do); a site sums its stacks'.
 */
double ma_profile_se(double var);

/* Scaled bytes and objects of stack I. */
double ma_profile_stack_bytes(const struct ma_profile *p, size_t i);
double ma_profile_stack_objs(const struct ma_profile *p, size_t i);

/*
 * The stacks whose allocation site (leaf function) has NEEDLE in its
 * symbol or display name, heaviest first (ties: dump order).  *HITS is
 * malloc'd (stack indices), *BYTES their scaled total.  Stacks with no
 * bytes or no frame left are never hits.  0 or MA_E_NOMEM.
 */
int ma_profile_match_leaf(const struct ma_profile *p, const char *needle, size_t **hits, size_t *n,
			  double *bytes);
/* The same, matching any frame of a stack (ANY_FRAME), as pprof's -focus. */
int ma_profile_match(const struct ma_profile *p, const char *needle, bool any_frame, size_t **hits,
		     size_t *n, double *bytes);

/* Frame (index into sym->frames) number K (0 = leaf) of stack I's chain. */
static inline uint32_t ma_profile_frame(const struct ma_profile *p, size_t i, size_t k)
{
	return p->chain[p->chain_off[i] + k];
}

#endif
