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
#include "heapprof.h"
#include "profile.h"
#include "symbolize.h"

#define MA_PROFCMD_MAX_LIST 16

struct ma_profcmd {
	const char *cmd; /* for messages */
	struct ma_sym_opts sym;
	struct ma_prefix_map maps[MA_PROFCMD_MAX_LIST];
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

/* Help text for the shared options. */
extern const char ma_profcmd_help[];

void ma_profcmd_init(struct ma_profcmd *c, const char *cmd, long default_top);
void ma_profcmd_release(struct ma_profcmd *c);
/* -h or --help anywhere in ARGV: print USAGE to stdout and return true. */
bool ma_profcmd_wants_help(int argc, char **argv, void (*usage)(FILE *f));

/*
 * If argv[*i] is a shared option, consume it (and its value) and return 1;
 * return 0 if it is not one; on a bad value print the error and return -1
 * (exit status 2).  Values are accepted as "--opt V" or "--opt=V".
 */
int ma_profcmd_opt(struct ma_profcmd *c, int argc, char **argv, int *i);

/* "--name V" / "--name=V" at argv[*i]: 1 and *val set, 0 not this option,
 * -1 value missing (printed). */
int ma_profcmd_value(const char *cmd, const char *name, int argc, char **argv, int *i,
		     const char **val);

/* Load PATH into B, print warnings to stderr.  0, or an exit status. */
int ma_profcmd_load(struct ma_profcmd *c, struct ma_profbundle *b, const char *path);
void ma_profbundle_release(struct ma_profbundle *b);


#endif
