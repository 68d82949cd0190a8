/*
 * options.h - the option system of the commands: one table per command
 * carrying each option's name, value, metavar, help and value checks.  The
 * usage (--help) is generated from it, every bad value is named with what
 * it should be, and the options of every command that borrows a thread are
 * one shared group (MA_OPTS_BORROW).
 */
#ifndef MA_OPTIONS_H
#define MA_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "remote.h"

enum ma_opt_kind {
	MA_OPT_END = 0,
	MA_OPT_FLAG, /* bool *dst = true */
	MA_OPT_STR, /* const char **dst */
	MA_OPT_COUNT, /* long *dst, from min (to max, if max) ; zero_all: 0 means all (LONG_MAX) */
	MA_OPT_DURATION, /* long *dst in ms: a bare number in unit_ms, or with a unit; min..max ms */
	MA_OPT_ID, /* pid_t *dst: a process or thread id (metavar PID or TID) */
	MA_OPT_CALL, /* call(opt, value): 0, or an exit status after its own message */
	MA_OPT_HEADING, /* a heading in the usage ("symbols:"), from help */
};

struct ma_opt {
	enum ma_opt_kind kind;
	const char *name, *alias; /* "--top", "-n" */
	const char *metavar; /* "N", "FILE", "TIME"; NULL for a flag */
	const char *help; /* one paragraph; the usage wraps it */
	void *dst;
	long min, max, unit_ms;
	bool zero_all; /* MA_OPT_COUNT */
	bool hidden; /* accepted, not listed (an old spelling) */
	bool required; /* shown without brackets in the synopsis (the command checks it is there) */
	bool in_args; /* not in the synopsis's options: the command's args name it */
	bool takes_value; /* MA_OPT_CALL */
	int (*call)(const struct ma_opt *o, const char *value);
	void *ctx; /* for call */
};

/* What a command's command line holds, and what its usage says. */
struct ma_cmd_spec {
	const char *cmd; /* "stats" (frag's subcommands: "frag start") */
	const char *args; /* the arguments before the options in the synopsis: "PID" */
	const char *about; /* what the command does: paragraphs, already laid out */
	const struct ma_opt *opts; /* ended by MA_OPT_END */
	const char *footer; /* after the options (exit status...), or NULL */
	pid_t *pid; /* a PID argument, or NULL */
	const char **positional; /* other free arguments, in order, or NULL */
	size_t npositional;
};

/*
 * Parse ARGV (argv[0] the command) against C: -h/--help prints the usage
 * and returns -1; a usage error is printed (one message naming the option,
 * the value and what it should be) and returns 2; 0 when parsed.  Values
 * come as "--name VALUE" or "--name=VALUE".
 */
int ma_opts_parse(int argc, char **argv, const struct ma_cmd_spec *c);
/*
 * ma_opts_parse for the usual live command: "CMD PID [options]", ABOUT,
 * OPTS, the usual exit statuses.
 */
int ma_opts_parse_pid(int argc, char **argv, const char *about, const struct ma_opt *opts, pid_t *pid);
/* Was option NAME given in ARGV (as "NAME" or "NAME=...")? */
bool ma_opts_given(int argc, char **argv, const char *name);
/* The usage of C, generated from its table, on F. */
void ma_opts_usage(FILE *f, const struct ma_cmd_spec *c);

#define MA_FLAG(n, d, h) { .kind = MA_OPT_FLAG, .name = (n), .dst = (d), .help = (h) }
#define MA_STR(n, m, d, h) { .kind = MA_OPT_STR, .name = (n), .metavar = (m), .dst = (d), .help = (h) }
#define MA_STR_REQUIRED(n, m, d, h) \
	{ .kind = MA_OPT_STR, .name = (n), .metavar = (m), .dst = (d), .help = (h), .required = true }
/* A count where 0 means all. */
#define MA_TOP(n, a, d, h) \
	{ .kind = MA_OPT_COUNT, .name = (n), .alias = (a), .metavar = "N", .dst = (d), .zero_all = true, .help = (h) }
#define MA_HEADING(h) { .kind = MA_OPT_HEADING, .help = (h) }
#define MA_OPTS_END { .kind = MA_OPT_END }

/* The borrow group's value handlers (ctx: the struct ma_session_opts). */
int ma_opt_timeout(const struct ma_opt *o, const char *value);
int ma_opt_tid(const struct ma_opt *o, const char *value);
int ma_opt_allow_eintr(const struct ma_opt *o, const char *value);

#define MA_HELP_TIMEOUT                                                                         \
	"end the whole run within TIME (milliseconds, or with a unit: 500ms, 2s, 1m): the wait " \
	"for its turn, finding a thread, its calls (default: 2000ms to find one, then each "     \
	"call its own limit)"
#define MA_HELP_TID                                                                            \
	"borrow this thread (still refused if unsafe; one that never called into jemalloc is " \
	"borrowed: that creates its allocator state: a tcache, and perhaps an arena, its "     \
	"mappings and a jemalloc background thread; the run then says what the process gained)"
#define MA_HELP_STRICT                                                                        \
	"never stop a thread blocked in epoll_wait and the like (by default one is borrowed "  \
	"when no better thread exists: its wait is issued again at once; only a memattach "    \
	"killed within microseconds of that stop leaves it an EINTR, as a SIGSTOP would), "   \
	"nor the main thread or one with children while a signal the program ignores could " \
	"then wake such a wait"

/*
 * The options of a command that borrows a thread, into the session options
 * O: --timeout (help TIMEOUT_HELP), --tid, --strict (and the old
 * --allow-eintr-wait, the default now, accepted unlisted).
 */
#define MA_OPTS_BORROW_WITH(o, timeout_help)                                                      \
	{ .kind = MA_OPT_CALL, .name = "--timeout", .metavar = "TIME", .takes_value = true,       \
	  .call = ma_opt_timeout, .ctx = (o), .help = (timeout_help) },                          \
	{ .kind = MA_OPT_CALL, .name = "--tid", .metavar = "TID", .takes_value = true,           \
	  .call = ma_opt_tid, .ctx = (o), .help = MA_HELP_TID },                                 \
	{ .kind = MA_OPT_FLAG, .name = "--strict", .dst = &(o)->strict, .help = MA_HELP_STRICT }, \
	{ .kind = MA_OPT_CALL, .name = "--allow-eintr-wait", .call = ma_opt_allow_eintr,         \
	  .ctx = (o), .hidden = true }
#define MA_OPTS_BORROW(o) MA_OPTS_BORROW_WITH(o, MA_HELP_TIMEOUT)

#define MA_FOOTER_EXIT "exit status: 0 success, 1 the operation failed, 2 usage error"

#endif
