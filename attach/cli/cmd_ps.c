/*
 * cmd_ps.c - memattach ps: the processes that hold a jemalloc (by their
 * maps and symbols, nothing stopped), to find a PID; bash completion uses
 * it for PID arguments.
 */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "target.h"

static const char about[] =
	"List the processes that hold a jemalloc -- linked to libjemalloc, or\n"
	"with jemalloc built in (static, _rjem_ or je_ prefixed) -- found from\n"
	"their maps and symbols, without stopping anything: PID, name, VmRSS and\n"
	"the object that holds jemalloc.  Only processes this user may read are\n"
	"seen.  REGEX: only processes whose name (comm) matches the extended REGEX.\n";

#define MAX_PROCESSES 4096

static void print_json(const struct ma_je_process *p, size_t n)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_arr_open(&j, "processes");
	for (size_t i = 0; i < n; i++) {
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "pid", p[i].pid);
		ma_json_str(&j, "comm", p[i].comm);
		ma_json_u64(&j, "vm_rss", p[i].vm_rss);
		ma_json_str(&j, "object", p[i].object);
		ma_json_bool(&j, "static", p[i].is_static);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* The column of JEMALLOC IN, where "(built in)" goes when it does not fit beside a path. */
#define OBJECT_COLUMN 38

static void print_text(const struct ma_je_process *p, size_t n)
{
	char rss[32], lead[96];

	printf("%7s  %-16s %10s  %s\n", "PID", "NAME", "VmRSS", "JEMALLOC IN");
	for (size_t i = 0; i < n; i++) {
		snprintf(lead, sizeof(lead), "%7d  %-16s %10s  ", p[i].pid, ma_printable(p[i].comm),
			 ma_fmt_bytes(rss, sizeof(rss), p[i].vm_rss));
		ma_print_named(lead, ma_printable(p[i].object), p[i].is_static ? "(built in)" : "",
			       OBJECT_COLUMN);
	}
}

int cmd_ps(int argc, char **argv)
{
	const char *pattern = NULL;
	bool json = false, pids = false;
	struct ma_je_process *found;
	regex_t re;
	size_t n;

	const struct ma_opt opts[] = {
		MA_FLAG("--json", &json, "processes[{pid, comm, vm_rss, object, static}]"),
		MA_FLAG("--pids", &pids, "just the PIDs, one per line"),
		MA_OPTS_END,
	};
	int rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){
		.cmd = argv[0], .args = "[REGEX]", .about = about, .opts = opts,
		.footer = "exit status: 0 success (also when none is found), 2 usage error",
		.positional = &pattern, .npositional = 1 });

	if (rc)
		return rc < 0 ? MA_EXIT_OK : rc;
	if (json && pids)
		return ma_usage_error(argv[0], "--json and --pids exclude each other");
	if (pattern && regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		return ma_usage_error(argv[0], "'%s' is not a valid extended regex", pattern);
	found = malloc(MAX_PROCESSES * sizeof(*found));
	if (!found) {
		if (pattern)
			regfree(&re);
		return ma_cmd_error(argv[0], MA_EXIT_FAIL, "out of memory");
	}
	n = ma_jemalloc_processes(pattern ? ma_comm_matches : NULL, pattern ? &re : NULL, found,
				  MAX_PROCESSES);
	if (json)
		print_json(found, n);
	else if (pids)
		for (size_t i = 0; i < n; i++)
			printf("%d\n", found[i].pid);
	else
		print_text(found, n);
	free(found);
	if (pattern)
		regfree(&re);
	return MA_EXIT_OK;
}
