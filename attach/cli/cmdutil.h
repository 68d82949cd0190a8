/*
 * cmdutil.h - what the commands share: values and messages (the option
 * tables are options.h), and the run of a live command (ma_live_run).
 */
#ifndef MA_CMDUTIL_H
#define MA_CMDUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "live.h"
#include "remote.h"
#include "target.h"

/* Parse a positive pid; false if ARG is not one. */
bool ma_parse_pid(const char *arg, pid_t *pid);
/* Parse a non-negative integer option value; false if malformed. */
bool ma_parse_long(const char *arg, long *out);

/*
 * Parse a duration: a whole number, bare (in UNIT_MS milliseconds) or with
 * a unit: ms, s, m or h ("500ms", "2s", "5m").  False if malformed.
 */
bool ma_parse_duration_ms(const char *arg, long unit_ms, long *ms);

/* Does the process name COMM match RE (a compiled regex_t)?  For ma_jemalloc_processes. */
bool ma_comm_matches(void *re, const char *comm);

/*
 * Text output laid out for a terminal (format.h, MA_TEXT_WIDTH): the one
 * place a long line is broken.  ma_put_wrapped writes TEXT on F, each line
 * longer than the width continued after HANG spaces; ma_print_wrapped and
 * ma_fprint_wrapped are printf laid out so (names in the text already
 * printable).  Messages on stderr (ma_cmd_error, ma_cmd_note in commands.h,
 * ma_usage_error) continue MA_MESSAGE_HANG spaces in, under "memattach".
 * Never for JSON or the other machine formats.
 */
#define MA_MESSAGE_HANG 2
void ma_put_wrapped(FILE *f, size_t hang, const char *text);
void ma_print_wrapped(size_t hang, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ma_fprint_wrapped(FILE *f, size_t hang, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * A line that names something, LEAD (a row's numbers, its indent) and NAME
 * (printable), then WHERE (its object, file:line; may be empty) after a
 * space: on one line if that fits the width, else WHERE on a line of its own
 * after HANG spaces.  A name is never broken (a C++ signature has spaces);
 * one longer than a line overflows.
 */
void ma_print_named(const char *lead, const char *name, const char *where, size_t hang);
/* "2026-12-04 11:54:21" (local time) of a CLOCK_REALTIME reading in ns, into BUF ("?" if none). */
const char *ma_clock_time(uint64_t unix_ns, char *buf, size_t len);

/* A usage error: one message on stderr pointing at --help; returns exit 2. */
int ma_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The arguments of a command that writes a file of one process (heap-dump,
 * stats-dump): a PID and -o FILE are given, and --json (JSON on the standard
 * output) does not go with -o -.  Returns 0, or the usage error's exit 2. */
int ma_check_pid_outfile(const char *cmd, pid_t pid, const char *out, bool json);


/*
 * A live command's run, the one shape every live command has: open CMD's
 * target and find its jemalloc, PREP on it (optional, no thread stopped),
 * borrow a thread, BODY with it, give the thread back, then REPORT
 * (optional) with the target still open (to name results from it; the
 * session's tid and stopped_ns are final).  Everything is released on every
 * path.  A failure of any part prints "memattach CMD: [WHAT: ]<reason>"
 * (WHAT prefixes BODY's failures only); a body that failed is still
 * followed by restoring the thread, whose own failure is printed too.
 * VISIT (optional) gets the borrowed thread and how long it was held.
 * Returns the exit status: REPORT's, or 1 on a failure before it.
 */
struct ma_live_visit {
	pid_t tid;
	uint64_t held_ns;
	unsigned ncalls;
};
struct ma_live_cmd {
	const char *cmd;
	pid_t pid;
	const struct ma_session_opts *o;
	ma_live_prep_fn prep;
	int (*body)(struct ma_session *s, void *ctx); /* 0 or MA_E_* (with ma_fail) */
	const char *what;
	int (*report)(struct ma_live *l, void *ctx); /* an exit status */
	struct ma_live_visit *visit;
};
int ma_live_run(const struct ma_live_cmd *c, void *ctx);

/*
 * A new file PATH ("-": the standard output) written by WRITE(f, CTX)
 * (0 when all went well) under a temporary name, put in place only once
 * complete: 0, or an exit status after a message naming CMD and PATH.
 */
int ma_write_file(const char *cmd, const char *path, int (*write)(FILE *f, void *ctx), void *ctx);


#endif
