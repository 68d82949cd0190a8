/*
 * frag_int.h - what the parts of `memattach frag` share: its arguments,
 * the timing of a live report, and the report's printers
 * (cmd_fragprint.c), which cmd_frag.c calls.
 */
#ifndef MA_FRAG_INT_H
#define MA_FRAG_INT_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "flush.h"
#include "frag.h"
#include "remote.h"

#define MAX_SKIP 16

struct frag_args {
	const char *sub;
	pid_t pid;
	const char *from, *out;
	bool json, no_flush, have_shift, have_focus, hooks;
	long shift, focus, top, max_samples;
	bool profile; /* memattach profile: the agent keeps a heap profile */
	long rate; /* profile start --rate */
	struct ma_session_opts o;
	regex_t skip[MAX_SKIP];
	size_t nskip;
};

/* Where a live report's time went (CLOCK_MONOTONIC durations). */
struct frag_timing {
	uint64_t began_unix_ns; /* the report began (the clock frag start recorded its start by) */
	uint64_t began_ns, flush_ns, borrowed_ns, query_ns; /* borrowed_ns: when the thread was */
};

/* A report as JSON (--json), or as text, on the standard output. */
void frag_emit_json(const struct frag_args *a, const struct ma_frag_data *d,
		    const struct ma_frag_report *r, const struct ma_flush_result *fr,
		    const struct frag_timing *tm);
void frag_print_report(const struct frag_args *a, const struct ma_frag_data *d,
		       const struct ma_frag_report *r, const struct ma_flush_result *fr,
		       const struct frag_timing *tm);

#endif
