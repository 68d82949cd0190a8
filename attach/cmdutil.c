#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cmdutil.h"
#include "commands.h"
#include "ma_error.h"
#include "safepoint.h"

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
