/*
 * main.c - memattach's command dispatch.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_abi.h"
#include "commands.h"
#include "elfsyms.h"
#include "format.h"
#include "target.h"
#include "unwtable.h"
#include "testhooks.h"

/* The release: bumped with each change users see in the commands or outputs. */
#define MA_VERSION "0.10.0"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "stats", cmd_stats, "headline jemalloc metrics of a live process" },
	{ "threads", cmd_threads, "stacks of a process's threads, safe to hijack or not" },
	{ "bins", cmd_bins, "slab waste per size class (live or from stats JSON)" },
	{ "purge", cmd_purge, "purge unused dirty/muzzy pages and measure" },
	{ "heap-dump", cmd_heap_dump, "write a heap profile dump of a live process" },
	{ "stats-dump", cmd_stats_dump, "write malloc_stats_print JSON of a live process" },
	{ "watch", cmd_watch, "capture the heap at each new RSS high-water mark" },
	{ "snapshot", cmd_snapshot, "save stats, bins and a heap dump to a directory" },
	{ "export", cmd_export, "serve live jemalloc metrics to Prometheus (OpenMetrics)" },
	{ "aggregate", cmd_aggregate, "allocation sites holding the heap, from a dump" },
	{ "stacks", cmd_stacks, "full call chains of the sites matching a string" },
	{ "diff", cmd_diff, "compare two dumps or two snapshots" },
	{ "frag", cmd_frag, "attribute slab fragmentation to allocation sites" },
	{ "profile", cmd_profile, "heap profile of a process started without prof (start|status|stop)" },
	{ "ps", cmd_ps, "list the processes that hold a jemalloc" },
	{ "ab", cmd_ab, "compare the memory of two daemon builds over fresh runs" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: memattach COMMAND [ARGS...]\n\n"
		   "Attach to a running jemalloc process without stopping it, or analyse\n"
		   "saved heap dumps and stats files.\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'memattach COMMAND --help' (or 'memattach help COMMAND') describes one "
		   "command;\n'memattach --version' prints the version.\n"
		   "exit status: 0 success, 1 the operation failed, 2 usage error\n");
}

/*
 * MEMATTACH_TEST_WORK=1: what the run read of the target's files, on
 * stderr -- for the tests that per-binary work is done once per run, not
 * once per thread (tests/attach/bigbin_once.sh).
 */
static void print_work(void)
{
	const struct ma_elf_work *w;
	size_t n = ma_elf_work_list(&w);
	const char *e = ma_test_env("WORK");

	if (!e || *e != '1')
		return;
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "memattach-test: elf %s opens=%u scans=%u loads=%u entries=%llu\n",
			ma_printable(w[i].what), w[i].opens, w[i].scans, w[i].loads,
			(unsigned long long)w[i].entries);
	fprintf(stderr, "memattach-test: unwind-tables described=%lu\n", ma_unw_tables_described());
	fprintf(stderr, "memattach-test: maps read=%lu\n", ma_target_maps_read());
}

/*
 * A command's output must reach its reader: a full disk or a closed pipe
 * on stdout is a failure (exit 1), not a success with nothing written.
 */
static int finish(const char *cmd, int rc)
{
	print_work();
	if ((fflush(stdout) != 0 || ferror(stdout)) && rc == MA_EXIT_OK) {
		fprintf(stderr, "memattach %s: cannot write the output: %s\n", cmd,
			strerror(errno ? errno : EIO));
		return MA_EXIT_FAIL;
	}
	return rc;
}

int main(int argc, char **argv)
{
	static char *help_args[4];
	const struct command *match = NULL;
	size_t len;
	int nmatch = 0;

	if (argc < 2) {
		fprintf(stderr, "memattach: a command is required; see 'memattach --help'\n");
		return MA_EXIT_USAGE;
	}
	if (ma_is_help(argv[1]) || (strcmp(argv[1], "help") == 0 && argc < 3)) {
		usage(stdout);
		return finish("memattach", MA_EXIT_OK);
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("memattach %s (frag agent ABI %d)\n", MA_VERSION, MA_AGENT_VERSION);
		return finish("memattach", MA_EXIT_OK);
	}
	if (strcmp(argv[1], "help") == 0) {
		/* "help CMD" is "CMD --help" */
		static char help_flag[] = "--help";

		help_args[0] = argv[0];
		help_args[1] = argv[2];
		help_args[2] = help_flag;
		argv = help_args;
		argc = 3;
	}
	/* An exact name wins; otherwise any unique prefix works. */
	len = strlen(argv[1]);
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strcmp(commands[i].name, argv[1]) == 0) {
			match = &commands[i];
			nmatch = 1;
			break;
		}
		if (strncmp(commands[i].name, argv[1], len) == 0) {
			match = &commands[i];
			nmatch++;
		}
	}
	if (nmatch != 1) {
		fprintf(stderr, "memattach: %s command '%s'; try 'memattach --help'\n",
			nmatch ? "ambiguous" : "unknown", argv[1]);
		return MA_EXIT_USAGE;
	}
	return finish(match->name, match->fn(argc - 1, argv + 1));
}
