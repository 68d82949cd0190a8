#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmdutil.h"
#include "commands.h"
#include "format.h"
#include "ma_error.h"
#include "outfile.h"
#include "safepoint.h"

void ma_put_wrapped(FILE *f, size_t hang, const char *text)
{
	char *wrapped = ma_wrap_text(text, MA_TEXT_WIDTH, hang);

	if (wrapped)
		fputs(wrapped, f);
	else /* out of memory: the text as it is */
		for (const char *p = text; *p; p++)
			fputc(*p == MA_WRAP_GLUE ? ' ' : *p, f);
	free(wrapped);
}

static void vprint_wrapped(FILE *f, size_t hang, const char *fmt, va_list ap)
{
	char *text;

	if (vasprintf(&text, fmt, ap) < 0) {
		fputs(fmt, f); /* out of memory: the text without its values */
		return;
	}
	ma_put_wrapped(f, hang, text);
	free(text);
}

const char *ma_clock_time(uint64_t unix_ns, char *buf, size_t len)
{
	time_t t = (time_t)(unix_ns / 1000000000ULL);
	struct tm tm;

	if (!localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "?");
	return buf;
}

void ma_print_named(const char *lead, const char *name, const char *where, size_t hang)
{
	size_t cols = ma_text_columns(lead) + ma_text_columns(name);

	if (!*where)
		printf("%s%s\n", lead, name);
	else if (cols + 1 + ma_text_columns(where) <= MA_TEXT_WIDTH)
		printf("%s%s %s\n", lead, name, where);
	else {
		size_t w = ma_text_columns(where);

		/* A place too long for the hang ends at the width instead (or starts the line). */
		if (hang + w > MA_TEXT_WIDTH)
			hang = w < MA_TEXT_WIDTH ? MA_TEXT_WIDTH - w : 0;
		printf("%s%s\n%*s%s\n", lead, name, (int)hang, "", where);
	}
}

void ma_fprint_wrapped(FILE *f, size_t hang, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprint_wrapped(f, hang, fmt, ap);
	va_end(ap);
}

void ma_print_wrapped(size_t hang, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprint_wrapped(stdout, hang, fmt, ap);
	va_end(ap);
}

/*
 * "memattach CMD: <FMT, AP>SUFFIX" and a newline on stderr, the message in
 * its printable form (format.h): what it names (the target's process,
 * threads, paths; command-line words) cannot write escape sequences to the
 * terminal or lines of its own.  Laid out for a terminal, its continuation
 * lines indented under "memattach".
 */
static void put_message(const char *cmd, const char *suffix, const char *fmt, va_list ap)
{
	char *msg = NULL, *line = NULL;

	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	if (msg && asprintf(&line, "memattach %s: %s%s\n", cmd, ma_printable(msg), suffix) < 0)
		line = NULL;
	if (line) /* else out of memory: the message as it is, or without its values */
		ma_put_wrapped(stderr, MA_MESSAGE_HANG, line);
	else
		fprintf(stderr, "memattach %s: %s%s\n", cmd, ma_printable(msg ? msg : fmt), suffix);
	free(line);
	free(msg);
}

int ma_cmd_error(const char *cmd, int exit_code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	put_message(cmd, "", fmt, ap);
	va_end(ap);
	return exit_code;
}

void ma_cmd_note(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	put_message(cmd, "", fmt, ap);
	va_end(ap);
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

bool ma_parse_duration_ms(const char *arg, long unit_ms, long *ms)
{
	static const struct {
		const char *suffix;
		long ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "", 0 } };
	char *end;
	long v;

	if (!arg || *arg < '0' || *arg > '9')
		return false;
	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno)
		return false;
	for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
		long u = units[k].ms ? units[k].ms : unit_ms;

		if (strcmp(end, units[k].suffix) != 0)
			continue;
		if (v > LONG_MAX / u)
			return false;
		*ms = v * u;
		return true;
	}
	return false;
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
	char suffix[128];
	va_list ap;

	/* the command to run is one piece, never broken */
	snprintf(suffix, sizeof(suffix), "; see 'memattach%c%s%c--help'", MA_WRAP_GLUE, cmd,
		 MA_WRAP_GLUE);
	va_start(ap, fmt);
	put_message(cmd, suffix, fmt, ap);
	va_end(ap);
	return MA_EXIT_USAGE;
}

int ma_check_pid_outfile(const char *cmd, pid_t pid, const char *out, bool json)
{
	if (!pid || !out)
		return ma_usage_error(cmd, "a PID and -o FILE are required");
	if (json && ma_outfile_is_stdout(out))
		return ma_usage_error(cmd, "-o - and --json both want the standard output");
	return 0;
}

/*
 * The borrowed thread had no allocator state (a --tid of it): say that the
 * run created it, and what the process gained meanwhile.
 */
static void note_growth(const char *cmd, const struct ma_live *l)
{
	const struct ma_live_growth *g = &l->growth;

	if (!g->created)
		return;
	fprintf(stderr, "memattach %s: thread %d had never called into jemalloc: this run created "
		"its allocator state\n", cmd, l->s.tid);
	fprintf(stderr, "memattach %s: since before the run, process %d has %+d thread%s (%+d "
		"jemalloc background) and %+d mapping%s\n", cmd, l->t.pid, g->threads,
		g->threads == 1 || g->threads == -1 ? "" : "s", g->bg_threads, g->maps,
		g->maps == 1 || g->maps == -1 ? "" : "s");
}

int ma_live_run(const struct ma_live_cmd *c, void *ctx)
{
	struct ma_live l;
	int rc, rc2;

	ma_err_clear();
	if (ma_live_begin(&l, c->pid, c->o, c->prep, ctx)) {
		ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg()[0] ? ma_errmsg() : "attach failed");
		ma_live_end(&l);
		return MA_EXIT_FAIL;
	}
	if ((rc = ma_live_fail_if_exec(&l, ma_fail_if_exited(c->pid, c->body(&l.s, ctx))))) {
		ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s%s%s", c->what ? c->what : "", c->what ? ": " : "",
			     ma_errmsg());
		ma_err_clear();
	}
	if ((rc2 = ma_live_restore(&l)) && !l.exec_seen)
		rc2 = ma_live_fail_if_exec(&l, rc2);
	if (rc2) {
		/* A process that exited (or exec'd) has nothing to restore: that is the news. */
		if (rc2 == MA_E_EXITED && (ma_process_exited(c->pid) || l.exec_seen)) {
			if (rc != MA_E_EXITED)
				ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
		} else {
			ma_cmd_error(c->cmd, MA_EXIT_FAIL, "restoring thread %d: %s", l.s.tid,
				     ma_errmsg());
		}
		rc = MA_E_INTERNAL;
	}
	note_growth(c->cmd, &l);
	if (c->visit)
		*c->visit = (struct ma_live_visit){ l.s.tid, l.s.stopped_ns, l.s.ncalls };
	rc = rc ? MA_EXIT_FAIL : c->report ? c->report(&l, ctx) : MA_EXIT_OK;
	ma_live_end(&l);
	return rc;
}

int ma_write_file(const char *cmd, const char *path, int (*write)(FILE *f, void *ctx), void *ctx)
{
	struct ma_outfile of;
	bool ok = false;
	FILE *f;

	if (ma_outfile_open(&of, path) == 0) {
		if ((f = ma_outfile_stream(&of))) {
			ok = write(f, ctx) == 0;
			ok = fclose(f) == 0 && ok;
		}
		if (ok)
			ok = ma_outfile_commit(&of) == 0;
		else
			ma_outfile_abort(&of);
	}
	if (ok)
		return 0;
	return ma_cmd_error(cmd, MA_EXIT_FAIL, "cannot write '%s': %s", path,
			    ma_errmsg()[0] ? ma_errmsg() : "I/O error");
}
