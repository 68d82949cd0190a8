/*
 * heapprof.h - jemalloc heap profile dumps (heap_v2/<period>), parsed and
 * unsampled.
 *
 * A dump is read whole (mmap for regular files) and parsed in one pass into
 * flat arrays: one record per `@` stack, all return addresses in one pcs[]
 * array, and the MAPPED_LIBRARIES: section as a list of mappings.  The
 * parser is lenient: CRLF line ends, a file cut short (the dump ran out of
 * space, or was copied while being written) and odd count lines are warned
 * about and skipped, never fatal.  It fails only when the input is not a
 * heap_v2 dump at all, and then names what it found instead.
 *
 * Unsampling is per stack, as jeprof's AdjustSamples does it:
 * ratio = (bytes / objs) / period, scale = 1 / (1 - exp(-ratio)), and both
 * objs and bytes of that one stack are multiplied by scale.
 */
#ifndef MA_HEAPPROF_H
#define MA_HEAPPROF_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

/* jemalloc writes at most 128 frames; accept more, but not unbounded. */
#define MA_HP_MAX_FRAMES 4096

struct ma_hp_stack {
	size_t pc_first; /* index of the innermost pc in ma_heapprof.pcs */
	uint32_t npcs; /* return addresses, innermost first */
	uint64_t objs, bytes; /* t*: in-use counts as written (sampled) */
	uint64_t accum_objs, accum_bytes; /* the bracketed cumulative pair */
	double scale; /* unsampling factor for this stack (>= 1) */
};

struct ma_hp_map {
	uint64_t start, end, offset;
	uint64_t inode; /* the file's, as the dump lists it (0: none given) */
	unsigned dev_major, dev_minor; /* its device */
	bool exec; /* 'x' in the permissions */
	char perms[5]; /* as the dump gives them ("" if not given) */
	char *path; /* NULL for anonymous mappings; owned */
};

struct ma_heapprof {
	uint64_t period; /* sampling period in bytes (2^lg_prof_sample) */
	uint64_t hdr_objs, hdr_bytes; /* the header's t*: line (informational) */
	struct ma_hp_stack *stacks;
	size_t nstacks;
	uint64_t *pcs;
	size_t npcs;
	struct ma_hp_map *maps; /* sorted by start */
	size_t nmaps;
	bool has_maps; /* a MAPPED_LIBRARIES: section was present */
	/*
	 * Written by memattach's agent (profile start), not by jemalloc: it
	 * holds the allocations made since AGENT_SINCE_UNIX_NS only.  Said on
	 * the line after the header (MA_HP_AGENT_LINE), which jeprof skips.
	 */
	bool from_agent;
	uint64_t agent_since_unix_ns;
	bool truncated; /* the file ended early (see warning) */
	bool maps_cut; /* ...inside MAPPED_LIBRARIES: the mappings after the cut are unknown */
	size_t lines; /* lines read */
	unsigned nwarnings; /* problems skipped over */
	char warning[256]; /* the first of them (or the cut, if truncated), for the user */
};

/*
 * Parse LEN bytes at BUF (need not be NUL-terminated) into HP.  WHAT names
 * the input in messages.  0, or MA_E_FORMAT if this is not a heap_v2 dump,
 * or MA_E_NOMEM.  On success the caller owns HP (ma_heapprof_release).
 */
int ma_heapprof_parse(struct ma_heapprof *hp, const char *buf, size_t len, const char *what);
#define MA_HP_AGENT_LINE "# memattach agent profile: allocations since unix_ns "
/* Read and parse the file at PATH.  0, MA_E_IO, MA_E_FORMAT, MA_E_NOMEM. */
int ma_heapprof_load(struct ma_heapprof *hp, const char *path);
void ma_heapprof_release(struct ma_heapprof *hp);

/*
 * Write HP in jemalloc's heap_v2 format (what jemalloc's prof.dump
 * writes, without per-thread lines): its period, the totals, each stack
 * with its in-use and cumulative counts as sampled, its mappings.  0, or
 * MA_E_IO if F could not take it.
 */
int ma_heapprof_write(const struct ma_heapprof *hp, FILE *f);

/* The scale factor jeprof applies to a stack of OBJS objects, BYTES bytes. */
double ma_heapprof_scale(uint64_t objs, uint64_t bytes, uint64_t period);

/* The mapping containing ADDR, or NULL. */
const struct ma_hp_map *ma_heapprof_map_at(const struct ma_heapprof *hp, uint64_t addr);

#endif
