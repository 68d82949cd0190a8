/*
 * commands.h - one entry point per subcommand (attach/cli/cmd_<name>.c).
 *
 * Each receives argv with argv[0] = the subcommand name and returns the
 * process exit status: 0 success, 1 the operation failed, 2 usage error.
 */
#ifndef MA_COMMANDS_H
#define MA_COMMANDS_H

#define MA_EXIT_OK 0
#define MA_EXIT_FAIL 1
#define MA_EXIT_USAGE 2

int cmd_stats(int argc, char **argv);
int cmd_threads(int argc, char **argv);
int cmd_bins(int argc, char **argv);
int cmd_purge(int argc, char **argv);
int cmd_heap_dump(int argc, char **argv);
int cmd_stats_dump(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_aggregate(int argc, char **argv);
int cmd_stacks(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_frag(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_ab(int argc, char **argv);

/* Shared by commands: print "memattach CMD: MSG" to stderr, MSG in its
 * printable form (format.h; pass names raw), laid out for a terminal
 * (continuation lines indented), return EXIT. */
int ma_cmd_error(const char *cmd, int exit_code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same for a warning or a note (no exit status). */
void ma_cmd_note(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True if ARG is -h or --help. */
int ma_is_help(const char *arg);

#endif
