/*
 * profcmd.h - what the heap-profile commands (aggregate, stacks, diff)
 * share: their common options and loading a dump into a profile.
 * Implemented in attach/cli/cmd_profcommon.c; only used by cmd_* code.
 */
#ifndef MA_PROFCMD_H
#define MA_PROFCMD_H

#include <regex.h>
#include <stdbool.h>
#include <stdio.h>

#include "format.h"
#include "options.h"
#include "heapprof.h"
#include "profile.h"
#include "symbolize.h"

#define MA_PROFCMD_MAX_LIST 16

struct ma_profcmd {
	const char *cmd; /* for messages */
	struct ma_sym_opts sym;
	struct ma_prefix_map maps[MA_PROFCMD_MAX_LIST];
	char *map_from[MA_PROFCMD_MAX_LIST]; /* maps[i].from, owned */
	struct ma_prof_opts prof;
	regex_t skip[MA_PROFCMD_MAX_LIST];
	bool json;
	bool allow_truncated; /* report from a dump cut inside MAPPED_LIBRARIES */
	long top; /* -n / --top */
};

/* A loaded dump: parsed, symbolizer ready, profile built. */
struct ma_profbundle {
	const char *path;
	struct ma_heapprof hp;
	struct ma_symbolizer sym;
	struct ma_profile prof;
	bool loaded;
};

void ma_profcmd_init(struct ma_profcmd *c, const char *cmd, long default_top);
void ma_profcmd_release(struct ma_profcmd *c);

/* --prefix-map OLD=NEW and --skip REGEX, repeatable (ctx: the struct ma_profcmd). */
int ma_profcmd_prefix_map(const struct ma_opt *o, const char *value);
int ma_profcmd_skip(const struct ma_opt *o, const char *value);

/* The options every heap-profile command takes, into C: symbols, frames, input. */
#define MA_OPTS_PROFCMD(c)                                                                         \
	MA_HEADING("symbols:"),                                                                   \
	MA_STR("--binary", "PATH", &(c)->sym.binary,                                              \
	       "use PATH for the dump's main executable (when the file in the dump is gone or "   \
	       "was rebuilt)"),                                                                   \
	{ .kind = MA_OPT_CALL, .name = "--prefix-map", .metavar = "OLD=NEW", .takes_value = true, \
	  .call = ma_profcmd_prefix_map, .ctx = (c),                                              \
	  .help = "read files under OLD from NEW instead (dumps taken in a container); "          \
		  "repeatable" },                                                                 \
	MA_FLAG("--lines", &(c)->sym.lines, "file:line and inlined functions (DWARF, slower)"),  \
	MA_HEADING("frames:"),                                                                    \
	MA_FLAG("--keep-allocator-frames", &(c)->prof.keep_allocator,                             \
		"keep jemalloc's own leading frames"),                                            \
	{ .kind = MA_OPT_CALL, .name = "--skip", .metavar = "REGEX", .takes_value = true,         \
	  .call = ma_profcmd_skip, .ctx = (c),                                                    \
	  .help = "also drop leading frames matching REGEX (extended regex on demangled or "      \
		  "mangled names, e.g. 'alloc::raw_vec|operator new'); repeatable" },              \
	MA_HEADING("input:"),                                                                     \
	MA_FLAG("--allow-truncated", &(c)->allow_truncated,                                       \
		"report from a dump cut inside MAPPED_LIBRARIES (refused otherwise: frames in the "  \
		"objects cut off would stay unnamed)")

/* Load PATH into B, print warnings to stderr.  0, or an exit status. */
int ma_profcmd_load(struct ma_profcmd *c, struct ma_profbundle *b, const char *path);
void ma_profbundle_release(struct ma_profbundle *b);


#endif
