/*
 * livesym.h - the heap-dump symbolizer (symbolize.h) pointed at a live
 * target: its mappings stand in for a dump's MAPPED_LIBRARIES and its files
 * are opened through /proc/PID/map_files, so 'threads' names frames exactly
 * as 'aggregate' does (separate debug files, demangling) -- for display
 * only: the safety verdict compares addresses with jemalloc's code ranges.
 */
#ifndef MA_LIVESYM_H
#define MA_LIVESYM_H

#include <stdbool.h>
#include <stdint.h>

#include "heapprof.h"
#include "symbolize.h"
#include "target.h"

struct ma_livesym {
	const struct ma_target *t;
	struct ma_heapprof maps; /* only maps/nmaps are filled */
	struct ma_symbolizer sym;
};

/* 0 or MA_E_NOMEM.  T must outlive LS. */
int ma_livesym_init(struct ma_livesym *ls, const struct ma_target *t);
/*
 * The innermost frame at IP; RETURN_ADDR says IP is a return address (a
 * caller's frame), whose call instruction is the byte before it.  NULL only
 * on OOM; valid until the next call.
 */
const struct ma_frame *ma_livesym_frame(struct ma_livesym *ls, uint64_t ip, bool return_addr);
/* What ma_livesym_prepare takes for the frame at IP (see ma_livesym_frame). */
static inline uint64_t ma_livesym_key(uint64_t ip, bool return_addr)
{
	return return_addr ? ip : ip + 1;
}
/*
 * Look up ahead the frames to be asked for, KEYS[0..N) (ma_livesym_key of
 * each): one pass over a big binary's symbol tables for all of them,
 * instead of loading and sorting its symbols.  0 or MA_E_NOMEM.
 */
int ma_livesym_prepare(struct ma_livesym *ls, const uint64_t *keys, size_t n);
void ma_livesym_release(struct ma_livesym *ls);

#endif
