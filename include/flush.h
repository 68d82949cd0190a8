/*
 * flush.h - flush every thread's tcache, so that slab waste is exact.
 */
#ifndef MA_FLUSH_H
#define MA_FLUSH_H

#include <stdbool.h>

#include "target.h"

/* Outcome of flushing every thread's tcache (thread.tcache.flush each). */
struct ma_flush_result {
	bool done; /* a flush was requested */
	unsigned threads, flushed, skipped, no_tcache;
	unsigned eintr_waits; /* of skipped: blocked in a wait a stop ends with EINTR, not stopped */
	char first_skipped[160]; /* why the first skipped thread was skipped */
};

/*
 * Flush the tcache of every thread of T that is safe to borrow, one
 * session per thread (each stopped only for its own flush).  A thread that
 * never called into jemalloc is counted in no_tcache, not given a tcache.
 * A thread blocked in a wait that a stop ends with EINTR (epoll_wait...)
 * is flushed too, its wait issued again (remote.h, strict); with STRICT it
 * is never stopped: skipped, and counted in eintr_waits too.
 */
int ma_flush_all_tcaches(struct ma_target *t, int deadline_ms, bool strict,
			 struct ma_flush_result *fr);

#endif
