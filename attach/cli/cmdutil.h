/*
 * cmdutil.h - helpers shared by the live commands: parse a PID, open the
 * target, find jemalloc, open a session, with one error message each.
 */
#ifndef MA_CMDUTIL_H
#define MA_CMDUTIL_H

#include <stdbool.h>
#include <sys/types.h>

#include "remote.h"
#include "target.h"

/* Parse a positive pid; false if ARG is not one. */
bool ma_parse_pid(const char *arg, pid_t *pid);
/* Parse a non-negative integer option value; false if malformed. */
bool ma_parse_long(const char *arg, long *out);

/* Does the process name COMM match RE (a compiled regex_t)?  For ma_jemalloc_processes. */
bool ma_comm_matches(void *re, const char *comm);

/* A usage error: one line on stderr pointing at --help; returns exit 2. */
int ma_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * The usage error for argv[I], which the command did not accept: an option
 * of the command (found in its USAGE text) with a missing or malformed
 * value says which value it wants; an unknown option or a stray argument
 * says so.  Returns exit status 2.
 */
int ma_arg_error(const char *cmd, const char *usage, int argc, char **argv, int i);

/*
 * The arguments every live command takes: the PID, --timeout MS (how long
 * to look for a thread safe to borrow) and --tid TID (borrow that thread,
 * still refused if unsafe).  True if argv[*i] was one (and *i moved past
 * its value).
 */
bool ma_parse_live_arg(int argc, char **argv, int *i, pid_t *pid, struct ma_session_opts *o);

/*
 * Open PID, locate jemalloc and borrow a safe thread.  On failure prints
 * "memattach CMD: <reason>" and returns exit status 1 (0 on success).
 */
int ma_attach(const char *cmd, pid_t pid, const struct ma_session_opts *o, struct ma_target *t,
	      struct ma_session *s);
/*
 * The operation failed with the thread still borrowed: print that failure
 * (one line, after "WHAT: " if WHAT is given), then restore and detach,
 * reporting a failure to restore as well.  Returns exit status 1.
 */
int ma_fail_and_detach(const char *cmd, struct ma_session *s, const char *what);
/* Restore and detach; prints an error if that failed.  Returns 0 or 1. */
int ma_detach(const char *cmd, struct ma_session *s);

#endif
