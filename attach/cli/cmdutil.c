#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdutil.h"
#include "commands.h"
#include "ma_error.h"
#include "safepoint.h"

int ma_cmd_error(const char *cmd, int exit_code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "memattach %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return exit_code;
}

int ma_is_help(const char *arg)
{
	return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

bool ma_comm_matches(void *re, const char *comm)
{
	return regexec(re, comm, 0, NULL, 0) == 0;
}

bool ma_parse_long(const char *arg, long *out)
{
	char *end;
	long v;

	if (!arg || !*arg)
		return false;
	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || *end || v < 0)
		return false;
	*out = v;
	return true;
}

bool ma_parse_pid(const char *arg, pid_t *pid)
{
	long v;

	if (!ma_parse_long(arg, &v) || v <= 0 || v > INT_MAX)
		return false;
	*pid = (pid_t)v;
	return true;
}

int ma_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "memattach %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "; see 'memattach %s --help'\n", cmd);
	return MA_EXIT_USAGE;
}

/* Does USAGE mention option OPT as a whole word? */
static bool usage_has_option(const char *usage, const char *opt)
{
	size_t n = strlen(opt);

	for (const char *p = strstr(usage, opt); p; p = strstr(p + 1, opt)) {
		char after = p[n], before = p == usage ? ' ' : p[-1];

		if (!(after == '-' || (after >= 'a' && after <= 'z')) && before != '-' &&
		    !(before >= 'a' && before <= 'z'))
			return true;
	}
	return false;
}

int ma_arg_error(const char *cmd, const char *usage, int argc, char **argv, int i)
{
	static const struct {
		const char *opt, *want;
	} values[] = {
		{ "--timeout", "milliseconds, 0 to 600000" },
		{ "--tid", "a thread id (a positive number)" },
		{ "--top", "a count, 0 or more" },
		{ "--interval", "milliseconds, more than 0" },
		{ "--duration", "whole seconds, 0 or more" },
		{ "--pid", "a process id (a positive number)" },
	};
	const char *a = argv[i];

	if (a[0] != '-' || a[1] == '\0')
		return ma_usage_error(cmd, "unexpected argument '%s'", a);
	if (!usage_has_option(usage, a))
		return ma_usage_error(cmd, "unknown option '%s'", a);
	for (size_t k = 0; k < sizeof(values) / sizeof(values[0]); k++) {
		if (strcmp(a, values[k].opt) != 0)
			continue;
		if (i + 1 >= argc)
			return ma_usage_error(cmd, "%s needs a value: %s", a, values[k].want);
		return ma_usage_error(cmd, "%s '%s': expected %s", a, argv[i + 1], values[k].want);
	}
	if (i + 1 >= argc)
		return ma_usage_error(cmd, "%s needs a value", a);
	return ma_usage_error(cmd, "%s given twice, or with '%s' out of place", a, argv[i + 1]);
}

bool ma_parse_live_arg(int argc, char **argv, int *i, pid_t *pid, struct ma_session_opts *o)
{
	const char *arg = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
	long v;

	if (strcmp(arg, "--timeout") == 0 && ma_parse_long(val, &v) && v <= 600000) {
		o->deadline_ms = (int)v;
		++*i;
		return true;
	}
	if (strcmp(arg, "--tid") == 0 && val && ma_parse_pid(val, &o->tid)) {
		/* Asked for by name: borrowed even if that creates its jemalloc state. */
		o->fresh_ok = true;
		++*i;
		return true;
	}
	return !*pid && ma_parse_pid(arg, pid);
}

int ma_attach(const char *cmd, pid_t pid, const struct ma_session_opts *o, struct ma_target *t,
	      struct ma_session *s)
{
	int rc;

	ma_err_clear();
	ma_install_signal_guards();
	rc = ma_target_open(t, pid);
	if (!rc)
		rc = ma_target_find_jemalloc(t);
	if (!rc)
		rc = ma_session_open(s, t, o);
	if (rc) {
		ma_cmd_error(cmd, MA_EXIT_FAIL, "%s", ma_errmsg()[0] ? ma_errmsg() : "attach failed");
		ma_target_release(t);
		return MA_EXIT_FAIL;
	}
	return 0;
}

int ma_fail_and_detach(const char *cmd, struct ma_session *s, const char *what)
{
	ma_cmd_error(cmd, MA_EXIT_FAIL, "%s%s%s", what ? what : "", what ? ": " : "", ma_errmsg());
	ma_err_clear();
	ma_detach(cmd, s);
	return MA_EXIT_FAIL;
}

int ma_detach(const char *cmd, struct ma_session *s)
{
	int rc = ma_session_close(s);

	ma_unwind_release();
	if (rc) {
		ma_cmd_error(cmd, MA_EXIT_FAIL, "restoring thread %d: %s", s->tid, ma_errmsg());
		return MA_EXIT_FAIL;
	}
	return 0;
}
