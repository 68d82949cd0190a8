/*
 * cmd_stats_dump.c - memattach stats-dump PID -o FILE: jemalloc's own
 * malloc_stats_print JSON, taken inside the live process.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "format.h"
#include "jectl.h"
#include "emit.h"
#include "ma_error.h"
#include "stats_json.h"

#define STATS_PRINT_TIMEOUT_MS 20000

static const char about[] =
	"Run malloc_stats_print(cb, buf, \"J\") inside the running process PID and\n"
	"write its JSON, byte for byte, to FILE (readable by 'memattach bins --stats'\n"
	"and by any tool that reads jemalloc's stats JSON).  The text goes through a\n"
	"buffer mapped in the target, never through a file the target opens.  FILE\n"
	"appears only when complete.  Note: jemalloc counts its own 64 KiB print\n"
	"buffer in the numbers it prints.\n";

struct printed {
	char *buf;
	size_t len;
};

static int print_stats(struct ma_session *s, void *ctx)
{
	struct printed *p = ctx;

	return ma_je_stats_print(s, "J", STATS_PRINT_TIMEOUT_MS, &p->buf, &p->len);
}

static void print_json(pid_t pid, const char *out, size_t len, const struct ma_je_stats *st,
		       const struct ma_live_visit *v)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "pid", pid);
	ma_json_str(&j, "file", out);
	ma_json_u64(&j, "bytes", len);
	ma_json_str(&j, "version", st->version);
	ma_json_u64(&j, "narenas", st->narenas);
	ma_json_i64(&j, "tid", v->tid);
	ma_json_u64(&j, "held_ns", v->held_ns);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

int cmd_stats_dump(int argc, char **argv)
{
	struct ma_session_opts o = { .deadline_ms = 2000 };
	const char *out = NULL;
	struct ma_outfile of;
	struct ma_je_stats st;
	struct ma_bin_table bt;
	struct ma_live_visit v;
	struct printed p = { 0 };
	char *buf = NULL, sz[32];
	size_t len = 0;
	pid_t pid = 0;
	bool json = false;
	int rc;

	const struct ma_opt opts[] = {
		MA_STR_REQUIRED("-o", "FILE", &out, "output file (required; - for the standard output)"),
		MA_FLAG("--json", &json,
			"what was written, as JSON: pid, file, bytes, version, narenas, tid, held_ns (not "
			"with -o -)"),
		MA_OPTS_BORROW(&o),
		MA_OPTS_END,
	};

	if ((rc = ma_opts_parse_pid(argc, argv, about, opts, &pid)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if ((rc = ma_check_pid_outfile(argv[0], pid, out, json)))
		return rc;
	/* Fail on an unwritable destination before touching the target. */
	if (ma_outfile_open(&of, out))
		return ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s", ma_errmsg());
	rc = ma_live_run(&(struct ma_live_cmd){ .cmd = argv[0], .pid = pid, .o = &o,
						.body = print_stats, .what = "malloc_stats_print",
						.visit = &v },
			 &p);
	buf = p.buf;
	len = p.len;
	/* Check what we got is whole before it replaces anything. */
	if (!rc && ma_stats_json_parse(buf, len, &st, &bt)) {
		rc = ma_cmd_error(argv[0], MA_EXIT_FAIL, "the target printed unusable stats: %s",
				  ma_errmsg());
	} else if (!rc) {
		ma_bin_table_release(&bt);
		if (ma_write_all(of.fd, buf, len) || ma_outfile_commit(&of))
			rc = ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s", ma_errmsg());
	}
	if (rc)
		ma_outfile_abort(&of);
	else if (json)
		print_json(pid, out, len, &st, &v);
	else
		/* With -o -, the JSON is the output: the summary goes with the messages. */
		ma_fprint_wrapped(ma_outfile_is_stdout(out) ? stderr : stdout, 2,
				  "wrote %s: %s of malloc_stats_print JSON, jemalloc %s, %u "
				 "arenas\nthread %d held %.3f ms\n",
				 ma_outfile_is_stdout(out) ? "the standard output" : ma_printable(out),
				 ma_fmt_bytes(sz, sizeof(sz), len), ma_printable(st.version),
				 st.narenas, v.tid, v.held_ns / 1e6);
	free(buf);
	return rc;
}
