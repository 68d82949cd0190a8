/*
 * cmd_frag.c - memattach frag start|report|status|stop: attribute slab
 * waste (active - allocated) of a running process to the allocation sites
 * whose survivors pin half-empty slabs, through an agent loaded into the
 * target (fragctl.h); the numbers come from analysis/frag.c.
 */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bins.h"
#include "bins_report.h"
#include "cmdutil.h"
#include "options.h"
#include "outfile.h"
#include "commands.h"
#include "emit.h"
#include "flush.h"
#include "format.h"
#include "frag.h"
#include "fragctl.h"
#include "jectl.h"
#include "livesym.h"
#include "ma_error.h"
#include "safepoint.h"
#include "frag_int.h"

static const char about[] =
	"Attribute the slab waste of a running process (active - allocated: free\n"
	"regions in partly used slabs) to the allocation sites whose surviving\n"
	"objects pin those slabs.  No restart and no special build: 'start' loads a\n"
	"small agent into the process (dlopen of a memfd; nothing on disk) that\n"
	"points the GOT slots of the allocation functions at its wrappers (where\n"
	"jemalloc is linked statically: a jump written over one instruction of each\n"
	"of its entry points) and samples live allocations with their\n"
	"stacks; 'report' asks jemalloc (experimental.utilization.batch_query) how\n"
	"full each sampled object's slab is and estimates, per stack, the waste its\n"
	"survivors pin; 'stop' restores the slots (or the entry points) and frees\n"
	"the agent's memory.\n"
	"Reports cover allocations made since 'frag start'.  With --strict, start\n"
	"never writes the target's code: where that jump would be needed it refuses.\n";

#define DEFAULT_SHIFT 8
#define MIN_CAPACITY (1ULL << 16) /* 64 stripes of 1024 slots */
#define DEFAULT_MAX_SAMPLES 4000000
#define STACK_CAP (1ULL << 16)
#define FRAME_CAP (1ULL << 21)


/* --skip REGEX: one more regex; 0, or the usage error's exit status. */
static int add_skip(struct frag_args *a, const char *re)
{
	char msg[128];
	int e;

	if (a->nskip == MAX_SKIP)
		return ma_usage_error("frag", "at most %d --skip options", MAX_SKIP);
	if ((e = regcomp(&a->skip[a->nskip], re, REG_EXTENDED | REG_NOSUB))) {
		regerror(e, &a->skip[a->nskip], msg, sizeof(msg));
		return ma_usage_error("frag", "bad --skip regex '%s': %s", re, msg);
	}
	a->nskip++;
	return 0;
}

static void release_skips(struct frag_args *a)
{
	for (size_t i = 0; i < a->nskip; i++)
		regfree(&a->skip[i]);
	a->nskip = 0;
}

/* D's frames whose name a --skip regex matches (none without --skip); 0 or MA_E_NOMEM. */
static int mark_skipped(const struct frag_args *a, struct ma_frag_data *d)
{
	if (!a->nskip || !d->frame_name)
		return 0;
	if (!(d->frame_skip = calloc(d->nframes + 1, sizeof(*d->frame_skip))))
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < d->nframes; i++)
		for (size_t k = 0; k < a->nskip && !d->frame_skip[i]; k++)
			d->frame_skip[i] = d->frame_name[i] &&
					   regexec(&a->skip[k], d->frame_name[i], 0, NULL, 0) == 0;
	return 0;
}

/* --skip REGEX (ctx: the frag arguments). */
static int skip_opt(const struct ma_opt *o, const char *value)
{
	return add_skip(o->ctx, value);
}

#define FRAG_JSON(a) MA_FLAG("--json", &(a)->json, "machine-readable output (sizes in bytes)")

/*
 * The table of subcommand SUB (start, report, status, stop) into OPTS (room
 * for FRAG_MAX_OPTS), and its spec.  False if SUB is none of them.
 */
#define FRAG_MAX_OPTS 16
/* Table T (NULL: no such subcommand) into OPTS, and its spec: ABOUT_TEXT, ARGS after the command. */
static bool fill_table(const struct ma_opt *t, struct frag_args *a, const char *about_text, const char *args,
		       struct ma_opt *opts, struct ma_cmd_spec *c)
{
	size_t n = 0;

	if (!t)
		return false;
	while (t[n].kind != MA_OPT_END)
		n++;
	memcpy(opts, t, (n + 1) * sizeof(*t));
	*c = (struct ma_cmd_spec){ .opts = opts, .about = about_text, .footer = MA_FOOTER_EXIT,
				   .pid = &a->pid, .args = args };
	return true;
}

static bool frag_table(const char *sub, struct frag_args *a, struct ma_opt *opts, struct ma_cmd_spec *c)
{
	const struct ma_opt start[] = {
		{ .kind = MA_OPT_COUNT, .name = "--shift", .metavar = "N", .dst = &a->shift, .max = 20,
		  .help = "sample each allocation with probability 1/2^N (default 8; 0 records every "
			  "allocation).  Costs: hooks put every malloc/free on jemalloc's slow path; "
			  "sampled ones unwind" },
		{ .kind = MA_OPT_COUNT, .name = "--focus", .metavar = "SIZE", .dst = &a->focus, .min = 1,
		  .help = "record every allocation of one small size class (and nothing else): the "
			  "report then says, per 4 KiB page, whether its survivors come from one leaf "
			  "(cohort) or several (mixed), exactly" },
		{ .kind = MA_OPT_COUNT, .name = "--max-samples", .metavar = "N", .dst = &a->max_samples,
		  .min = 1,
		  .help = "samples held at most (default 4000000, 16 bytes each, in a table that grows "
			  "as needed; each of its 64 stripes holds N/64, rounded up); samples beyond it "
			  "are dropped and counted (status and report say so)" },
		MA_FLAG("--hooks", &a->hooks,
			"where jemalloc is linked statically: sample through jemalloc's hooks instead of "
			"inline detours (the hooks crash programs whose threads come and go)"),
		FRAG_JSON(a), MA_OPTS_BORROW(&a->o), MA_OPTS_END,
	};
	const struct ma_opt report[] = {
		{ .kind = MA_OPT_STR, .name = "--from", .metavar = "FILE", .dst = &a->from, .in_args = true,
		  .help = "recompute a report saved with -o (no process needed)" },
		MA_STR("-o", "FILE", &a->out, "also save the samples, stacks (with names) and slab answers"),
		MA_TOP("--top", NULL, &a->top, "rows per table (default 15, 0 = all)"),
		MA_FLAG("--no-flush", &a->no_flush,
			"do not flush the threads' tcaches first (cached regions then count as live and "
			"the waste is a lower bound)"),
		{ .kind = MA_OPT_CALL, .name = "--skip", .metavar = "REGEX", .takes_value = true,
		  .call = skip_opt, .ctx = a,
		  .help = "also drop a stack's leading frames whose name matches REGEX (extended regex, "
			  "e.g. 'xmalloc|operator new'), keeping at least one, as aggregate's --skip: "
			  "sites and leaves are then their callers; repeatable" },
		FRAG_JSON(a), MA_OPTS_BORROW(&a->o), MA_OPTS_END,
	};
	const struct ma_opt other[] = { FRAG_JSON(a), MA_OPTS_BORROW(&a->o), MA_OPTS_END };
	const struct ma_opt *t = strcmp(sub, "start") == 0    ? start
				 : strcmp(sub, "report") == 0 ? report
				 : strcmp(sub, "status") == 0 || strcmp(sub, "stop") == 0 ? other
											 : NULL;

	return fill_table(t, a, about, strcmp(sub, "report") == 0 ? "(PID | --from FILE)" : "PID", opts, c);
}

static const char *const frag_subs[] = { "start", "report", "status", "stop" };

/* Does subcommand SUB's table name the option ARG (LEN bytes)? */
static bool sub_takes(const char *sub, struct frag_args *a, const char *arg, size_t len)
{
	struct ma_opt opts[FRAG_MAX_OPTS];
	struct ma_cmd_spec c;

	if (!frag_table(sub, a, opts, &c))
		return false;
	for (const struct ma_opt *o = opts; o->kind != MA_OPT_END; o++)
		if ((strlen(o->name) == len && strncmp(o->name, arg, len) == 0) ||
		    (o->alias && strlen(o->alias) == len && strncmp(o->alias, arg, len) == 0))
			return true;
	return false;
}

/* ARG, an option SUB does not take, of another subcommand: say so.  0 if it is none. */
static int other_subs_option(const char *sub, const char *arg, struct frag_args *a)
{
	size_t len = strcspn(arg, "=");

	if (sub_takes(sub, a, arg, len))
		return 0;
	for (size_t k = 0; k < 4; k++)
		if (strcmp(frag_subs[k], sub) != 0 && sub_takes(frag_subs[k], a, arg, len))
			return ma_usage_error("frag", "frag %s does not take %.*s (an option of frag %s)",
					      sub, (int)len, arg, frag_subs[k]);
	return 0;
}

/* A subcommand's option table into OPTS, and its spec (frag_table, profile_table). */
typedef bool subs_table_fn(const char *sub, struct frag_args *a, struct ma_opt *opts, struct ma_cmd_spec *c);

/*
 * `memattach NAME --help` for a command of subcommands SUBS[0..N) (USAGE:
 * its first line): each subcommand's options, then what it does (ABOUT).
 */
static void subs_usage(const char *name, const char *usage, const char *const *subs, size_t n,
		       subs_table_fn *table, const char *about_text, struct frag_args *a)
{
	printf("usage: memattach %s\n", usage);
	for (size_t k = 0; k < n; k++) {
		struct ma_opt opts[FRAG_MAX_OPTS];
		struct ma_cmd_spec c;
		char cmd[32];

		table(subs[k], a, opts, &c);
		snprintf(cmd, sizeof(cmd), "%s %s", name, subs[k]);
		c.cmd = cmd;
		c.about = NULL;
		c.footer = NULL;
		putchar('\n');
		ma_opts_usage(stdout, &c);
	}
	printf("\n%s\n%s\n", about_text, MA_FOOTER_EXIT);
}

/* `memattach frag --help`: each subcommand's options, then what frag does. */
static void frag_usage(struct frag_args *a)
{
	subs_usage("frag", "frag start|report|status|stop ...", frag_subs, 4, frag_table, about, a);
}

/*
 * The subcommand of command NAME (argv[1]; LIST names them all for
 * messages) into A->sub, its table into OPTS and C (C->cmd: CMD, "NAME
 * SUB").  0; -1 after printing USAGE for --help; or a usage error's status.
 */
static int pick_sub(int argc, char **argv, struct frag_args *a, const char *name, const char *list,
		    subs_table_fn *table, void (*usage)(struct frag_args *), struct ma_opt *opts,
		    struct ma_cmd_spec *c, char *cmd, size_t cmdlen)
{
	if (argc < 2 || ma_is_help(argv[1])) {
		if (argc < 2)
			return ma_usage_error(name, "missing subcommand: %s", list);
		usage(a);
		return -1;
	}
	a->sub = argv[1];
	if (!table(a->sub, a, opts, c))
		return ma_usage_error(name, "unknown subcommand '%s': %s", a->sub, list);
	snprintf(cmd, cmdlen, "%s %s", name, a->sub);
	c->cmd = cmd;
	return 0;
}

static int parse_args(int argc, char **argv, struct frag_args *a)
{
	struct ma_opt opts[FRAG_MAX_OPTS];
	struct ma_cmd_spec c;
	char cmd[32];
	int rc;

	if ((rc = pick_sub(argc, argv, a, "frag", "start, report, status or stop", frag_table, frag_usage,
			   opts, &c, cmd, sizeof(cmd))))
		return rc;
	for (int i = 2; i < argc; i++)
		if (argv[i][0] == '-' && !ma_is_help(argv[i]) && (rc = other_subs_option(a->sub, argv[i], a)))
			return rc;
	if ((rc = ma_opts_parse(argc - 1, argv + 1, &c)))
		return rc;
	a->have_shift = ma_opts_given(argc, argv, "--shift");
	a->have_focus = ma_opts_given(argc, argv, "--focus");
	if (a->have_shift && a->have_focus)
		return ma_usage_error(cmd, "--shift and --focus exclude each other");
	if (a->from && a->pid)
		return ma_usage_error(cmd, "give either a PID or --from FILE");
	if (!a->from && !a->pid)
		return ma_usage_error(cmd, "frag %s needs a PID%s", a->sub,
				      strcmp(a->sub, "report") == 0 ? " or --from FILE" : "");
	if (a->from && a->out)
		return ma_usage_error(cmd, "-o saves a live report; with --from the file is already saved");
	return 0;
}

static uint64_t next_pow2(uint64_t v)
{
	uint64_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/* --max-samples, or its default. */
static uint64_t max_samples(const struct frag_args *a)
{
	return (uint64_t)(a->max_samples ? a->max_samples : DEFAULT_MAX_SAMPLES);
}

/* The samples each stripe of the table holds at most (the agent's rounding). */
static uint64_t stripe_max(uint64_t max)
{
	return (max + MA_AGENT_STRIPES - 1) / MA_AGENT_STRIPES;
}

/*
 * The bound of the sample table's slots: a stripe's slots are a power of
 * two kept at most 7/8 full, so that its bound of samples (not the load)
 * is what stops it.
 */
static uint64_t choose_capacity(uint64_t max)
{
	uint64_t per = stripe_max(max), slots = next_pow2(per + per / 7 + 1) * MA_AGENT_STRIPES;

	return slots < MIN_CAPACITY ? MIN_CAPACITY : slots;
}

/* The small size classes, for a message about a --focus SIZE that is not one. */
static void class_list(const struct ma_bin_table *bt, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < bt->nbins && used + 16 < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%llu", i ? " " : "",
					 (unsigned long long)bt->bins[i].size);
}

static bool is_small_class(const struct ma_bin_table *bt, uint64_t size)
{
	for (size_t i = 0; i < bt->nbins; i++)
		if (bt->bins[i].size == size)
			return true;
	return false;
}


/* What a live frag command carries through ma_live_run. */
struct frag_live {
	const char *cmd;
	struct frag_args *a;
	bool loading; /* start: the agent may be loaded by this run */
	bool walks_link_map; /* start, report, stop with GOT slots: the agent calls dl_iterate_phdr */
	bool flush; /* report: every tcache flushed first */
	struct ma_flush_result *fr;
	struct ma_agent_start_opts so; /* start */
	struct ma_agent_view before, after; /* the agent as found, and after the command */
	bool inflight; /* stop: wrappers were still recording; stop again */
	uint64_t pause_ns, pause_max_ns; /* the program's threads' holds: their sum, the longest */
	uint64_t hold_max_ns; /* the longest hold of one thread of the program */
	uint64_t hold_max_cpu_wait_ns; /* ... of which it waited for a CPU (the scheduler's part) */
	uint64_t work_ns; /* the work's thread's holds (a thread of our own when own_thread) */
	bool own_thread; /* the work ran in a thread of memattach's own (ownthread.h) */
	unsigned own_retries; /* makings of that thread given up at a loader lock, tried again */
	bool hooks_borrowed; /* jemalloc's hooks change: the work stays in a program thread */
	struct ma_frag_data *d; /* report */
	struct frag_timing *tm; /* report */
};

/* Does this start install jemalloc's hooks, or this stop remove them? */
static bool hooks_in_play(struct ma_target *t, const struct frag_live *fl)
{
	uint32_t mech = ma_agent_mechanism_for(t);

	if (fl->loading)
		return mech == MA_AGENT_MECH_HOOKS || (mech == MA_AGENT_MECH_DETOUR && fl->a->hooks);
	return fl->before.loaded && fl->before.ctl.mechanism == MA_AGENT_MECH_HOOKS;
}

/*
 * Before a session: (report) flush every tcache; wait until no call of a
 * killed memattach still runs in the agent (it would race ours over the
 * agent's memory); before the agent's first load, and before each walk of
 * the link map (the GOT mechanism's start, report and stop), no thread may
 * be inside the dynamic loader, whose lock ours would wait for.
 */
static int prepare(struct ma_target *t, void *ctx)
{
	struct frag_live *fl = ctx;
	char why[300];
	int rc;

	uint64_t t0 = ma_now_ns();

	if (fl->flush && (rc = ma_flush_all_tcaches(t, 300, fl->a->o.strict, fl->fr)))
		return rc;
	if (fl->tm)
		fl->tm->flush_ns = ma_now_ns() - t0;
	if ((rc = ma_agent_wait_idle(t, 30000)) || (rc = ma_agent_find(t, &fl->before)))
		return rc;
	/*
	 * Hooks installed or removed mark every thread "recompute" (settle_threads),
	 * and a thread of memattach's own ends right after its work, leaving a
	 * dangling entry in jemalloc's thread list (an outside attack: a thread
	 * spinning in arena_stats_merge, then a deadlock, 3 of 3): with the
	 * hooks the work stays in a borrowed thread of the program.
	 */
	if (hooks_in_play(t, fl)) {
		fl->hooks_borrowed |= !fl->a->o.tid && fl->a->o.own_thread;
		fl->a->o.own_thread = false;
	}
	fl->walks_link_map = ma_agent_mechanism_for(t) == MA_AGENT_MECH_GOT &&
			     (fl->loading || fl->before.ctl.state == MA_AGENT_RUNNING);
	if ((fl->before.loaded || !fl->loading) && !fl->walks_link_map)
		return 0;
	/*
	 * A thread seen in the loader is usually passing through (a lazy
	 * binding, __tls_get_addr): look again a few times before refusing.
	 */
	for (int tries = 0; (rc = ma_agent_loader_busy(t, fl->a->o.strict, why, sizeof(why))) > 0 && tries < 20; tries++)
		usleep(10000);
	if (rc > 0)
		return ma_fail(MA_E_NOSAFE, "%s; retry when it has finished", why);
	return rc;
}

/* The holds of a start or stop (with WITH_MAX, stop's: the longest run's too) in JSON. */
static void emit_holds(struct ma_json *j, const struct frag_live *fl, bool with_max)
{
	ma_json_u64(j, "pause_ns", fl->pause_ns);
	if (with_max)
		ma_json_u64(j, "pause_max_ns", fl->pause_max_ns);
	ma_json_u64(j, "hold_max_ns", fl->hold_max_ns);
	ma_json_u64(j, "hold_max_cpu_wait_ns", fl->hold_max_cpu_wait_ns);
	ma_json_bool(j, "own_thread", fl->own_thread);
	ma_json_u64(j, "own_retries", fl->own_retries);
	ma_json_u64(j, "work_ns", fl->work_ns);
}

/* A live frag command: prepare, BODY with the thread borrowed, REPORT after. */
static int run_live(struct frag_live *fl, int (*body)(struct ma_session *, void *),
		    int (*report)(struct ma_live *, void *))
{
	return ma_live_run(&(struct ma_live_cmd){ .cmd = fl->cmd, .pid = fl->a->pid, .o = &fl->a->o,
						  .prep = prepare, .body = body, .report = report },
			   fl);
}

/*
 * After hooks were installed or removed: jemalloc 5.3 then marks every
 * thread's state "recompute", and a thread that exits before its next
 * allocator call skips its cleanup (tsd_cleanup has no case for that
 * state) and leaves a dangling entry in jemalloc's thread list, which
 * crashes the process later.  Each thread that is borrowed here makes
 * one allocator call (a tcache flush) and so leaves that state at once.
 * Best effort: a failure is reported, the command's result stands.  The
 * target is read anew: after a start the agent's code is mapped, and a
 * thread inside one of its hooks must be seen there (never borrowed).
 */
static void settle_threads(const char *cmd, pid_t pid, bool strict, struct ma_flush_result *fr)
{
	struct ma_live l;

	ma_err_clear();
	if (ma_live_open(&l, pid) || ma_flush_all_tcaches(&l.t, 300, strict, fr))
		ma_cmd_note(cmd, "warning: could not visit every thread after the hook change: %s",
			    ma_errmsg());
	ma_live_end(&l);
}

/* Start: the stats and bins (to check --focus), then the agent loaded and started. */
static int start_agent(struct ma_session *s, void *ctx)
{
	struct frag_live *fl = ctx;
	struct frag_args *a = fl->a;
	struct ma_bin_table bt = { 0 };
	struct ma_je_stats st;
	int rc;

	if ((rc = ma_collect_stats(s, &st)) || (rc = ma_je_read_bins(s, &bt))) {
		ma_bin_table_release(&bt);
		return rc;
	}
	if (a->have_focus && !is_small_class(&bt, (uint64_t)a->focus)) {
		char list[512];

		class_list(&bt, list, sizeof(list));
		ma_bin_table_release(&bt);
		return ma_fail(MA_E_USAGE, "--focus %ld is not a small size class of this jemalloc; "
			       "the classes are: %s", a->focus, list);
	}
	ma_bin_table_release(&bt);
	fl->so.mode = a->profile      ? MA_AGENT_MODE_PROFILE
		      : a->have_focus ? MA_AGENT_MODE_FOCUS
				      : MA_AGENT_MODE_SHIFT;
	fl->so.rate = a->profile ? (uint64_t)a->rate : 0;
	fl->so.shift = a->have_focus ? 0 : (uint32_t)a->shift;
	fl->so.focus_size = a->have_focus ? (uint64_t)a->focus : 0;
	fl->so.max_samples = max_samples(a);
	fl->so.allow_hooks = a->hooks;
	fl->so.no_code_writes = a->o.strict;
	fl->so.capacity = choose_capacity(fl->so.max_samples);
	fl->so.stack_cap = STACK_CAP;
	fl->so.frame_cap = FRAME_CAP;
	return ma_agent_start_in(s, &fl->so);
}

/*
 * Start and stop, the thread given back: after a hook change visit every
 * thread; then read the agent.
 */
static int settle_and_read(struct ma_live *l, void *ctx)
{
	struct frag_live *fl = ctx;

	uint64_t held = ma_live_program_hold_ns(l), longest = ma_live_program_longest_hold_ns(l);

	fl->pause_ns += held;
	if (held > fl->pause_max_ns)
		fl->pause_max_ns = held;
	if (longest > fl->hold_max_ns) {
		fl->hold_max_ns = longest;
		fl->hold_max_cpu_wait_ns = ma_live_program_longest_hold_cpu_wait_ns(l);
	}
	fl->work_ns += l->s.stopped_ns;
	fl->own_thread = l->own_used;
	fl->own_retries += l->own_tries_given_up;
	if (!l->own_used && l->own_why[0] && !fl->a->o.tid && l->maker_hold_ns)
		ma_cmd_note(fl->cmd, "a thread of the program did the work, held %.1f ms, after "
			    "memattach's tries to make a thread of its own had held thread %d %.1f ms "
			    "(the longest hold %.1f ms): %s", l->s.stopped_ns / 1e6, l->maker_tid,
			    l->maker_hold_ns / 1e6, longest / 1e6, l->own_why);
	else if (fl->hooks_borrowed)
		ma_cmd_note(fl->cmd, "a thread of the program did the work, held %.1f ms (with "
			    "jemalloc's hooks: a thread of memattach's own, ending right after the hook "
			    "change, would leave a dangling entry in jemalloc's thread list)",
			    l->s.stopped_ns / 1e6);
	else if (!l->own_used && l->own_why[0] && !fl->a->o.tid)
		ma_cmd_note(fl->cmd, "a thread of the program did the work, held %.1f ms (memattach "
			    "could not make a thread of its own: %s)", l->s.stopped_ns / 1e6, l->own_why);
	if (ma_agent_mechanism_for(&l->t) == MA_AGENT_MECH_HOOKS)
		settle_threads(fl->cmd, l->t.pid, fl->a->o.strict, fl->fr);
	if (ma_agent_find(&l->t, &fl->after))
		return ma_cmd_error(fl->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	return MA_EXIT_OK;
}

/* An agent's mode as --json names it. */
static const char *mode_key(uint32_t mode)
{
	return mode == MA_AGENT_MODE_FOCUS ? "focus" : mode == MA_AGENT_MODE_PROFILE ? "profile" : "shift";
}

/* How the agent sees allocations, for messages. */
static const char *mechanism_text(uint32_t m)
{
	return m == MA_AGENT_MECH_GOT	   ? "the agent's wrappers (GOT slots)"
	       : m == MA_AGENT_MECH_DETOUR ? "the agent's wrappers (a jump written into each entry point)"
					   : "jemalloc's hooks";
}

static void print_profile_started(const struct frag_args *a, const struct ma_agent_view *v,
				  const struct ma_agent_start_opts *so)
{
	char b[32];

	if (so->rate <= 1)
		ma_print_wrapped(2, "heap profile started in process %d: every allocation is "
				 "recorded with its stack (--rate 1)\n", a->pid);
	else
		ma_print_wrapped(2, "heap profile started in process %d: allocations sampled "
				 "as jemalloc's prof does, one sample per %s allocated on average "
				 "(--rate %llu)\n", a->pid, ma_fmt_bytes(b, sizeof(b), so->rate),
				 (unsigned long long)so->rate);
	ma_print_wrapped(2, "every malloc/free now goes through %s; heap-dump, snapshot "
			 "and watch write this profile (allocations made from now "
			 "on); 'memattach profile stop %d' undoes it\n",
			 mechanism_text(v->ctl.mechanism), a->pid);
}

static int do_start(struct frag_args *a)
{
	struct ma_flush_result fr = { 0 };
	const char *cmd = a->profile ? "profile start" : "frag start";
	struct frag_live fl = { .cmd = cmd, .a = a, .loading = true, .fr = &fr };
	const struct ma_agent_start_opts *so = &fl.so;
	const struct ma_agent_view *v = &fl.after;
	char b[32], r[32];
	int rc;

	a->o.for_dlopen = true;
	/*
	 * The load's map changes hold no thread of the program.  Not with
	 * --strict: a thread of our own runs code no stop watches (its rseq
	 * registration, its exit), which a seccomp filter the program
	 * installs meanwhile could refuse.
	 */
	a->o.own_thread = !a->o.strict;
	if ((rc = run_live(&fl, start_agent, settle_and_read)))
		return rc;
	if (a->json) {
		struct ma_json j;

		ma_json_init(&j, stdout);
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "pid", a->pid);
		ma_json_str(&j, "mode", mode_key(so->mode));
		if (a->profile)
			ma_json_u64(&j, "rate", so->rate);
		ma_json_u64(&j, "shift", so->shift);
		ma_json_u64(&j, "focus_size", so->focus_size);
		ma_json_u64(&j, "capacity", so->capacity);
		ma_json_u64(&j, "max_samples", stripe_max(so->max_samples) * MA_AGENT_STRIPES);
		ma_json_u64(&j, "table_bytes", v->table_bytes);
		ma_json_u64(&j, "table_resident_bytes", v->table_resident);
		ma_json_u64(&j, "agent_base", v->base);
		emit_holds(&j, &fl, false);
		ma_json_obj_close(&j);
		ma_json_end(&j);
	} else if (a->profile) {
		print_profile_started(a, v, so);
	} else {
		if (a->have_focus)
			ma_print_wrapped(2, "frag agent started in process %d: every allocation "
			       "of the %ld B class is recorded\n", a->pid, a->focus);
		else
			ma_print_wrapped(2, "frag agent started in process %d: 1 in %llu "
			       "allocations sampled (--shift %u)\n", a->pid, 1ULL << so->shift,
			       so->shift);
		ma_print_wrapped(2, "tables: %s reserved, %s resident now, growing as samples "
		       "come, up to %llu samples\n", ma_fmt_bytes(b, sizeof(b), v->table_bytes),
		       ma_fmt_bytes(r, sizeof(r), v->table_resident),
		       (unsigned long long)(stripe_max(so->max_samples) * MA_AGENT_STRIPES));
		ma_print_wrapped(2, "every malloc/free now goes through %s; 'memattach frag report "
		       "%d' attributes the waste of allocations made from now on, 'memattach "
		       "frag stop %d' undoes it\n", mechanism_text(v->ctl.mechanism), a->pid, a->pid);
	}
	return fflush(stdout) ? ma_cmd_error(cmd, MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
}

static int stop_agent(struct ma_session *s, void *ctx)
{
	struct frag_live *fl = ctx;
	const struct ma_agent_ctl *c = &fl->before.ctl;

	/* The other command's agent is not ours to stop. */
	if (fl->before.loaded && !fl->before.foreign && c->state == MA_AGENT_RUNNING &&
	    (c->mode == MA_AGENT_MODE_PROFILE) != fl->a->profile)
		return ma_fail(MA_E_JEMALLOC, "the agent in process %d keeps %s, not %s; "
			       "'memattach %s stop %d' stops it", fl->a->pid, ma_agent_mode_name(c->mode),
			       fl->a->profile ? "a heap profile" : "frag's samples",
			       c->mode == MA_AGENT_MODE_PROFILE ? "profile" : "frag", fl->a->pid);

	return ma_agent_stop_in(s, &fl->inflight);
}

/*
 * Stop, then, while a wrapper is still recording (the agent waits for it
 * only a few milliseconds, holding the borrowed thread), stop again in a
 * new run 20 ms later, for up to STOP_RETRY_MS and at least STOP_MIN_RUNS
 * runs (on a loaded machine one run alone may take longer than that).
 * *FIRST gets the agent as the first run found it.
 */
#define STOP_RETRY_MS 10000
#define STOP_MIN_RUNS 5
static int stop_until_quiet(struct frag_live *fl, struct ma_agent_view *first, int *nruns)
{
	uint64_t t0 = ma_now_ns();
	int rc, runs = 0;

	do {
		if (runs)
			usleep(20000);
		if (runs >= STOP_MIN_RUNS && ma_now_ns() - t0 > STOP_RETRY_MS * 1000000ULL)
			return ma_cmd_error(fl->cmd, MA_EXIT_FAIL, "process %d: the agent's wrappers "
					    "were still recording after %d s (%d tries): nothing "
					    "records any more; run 'memattach frag stop %d' again to "
					    "release its tables", fl->a->pid, STOP_RETRY_MS / 1000, runs,
					    fl->a->pid);
		fl->inflight = false;
		if ((rc = run_live(fl, stop_agent, settle_and_read)))
			return rc;
		if (!runs++)
			*first = fl->before;
	} while (fl->inflight);
	*nruns = runs;
	return 0;
}

static int do_stop(struct frag_args *a)
{
	struct ma_flush_result fr = { 0 };
	const char *cmd = a->profile ? "profile stop" : "frag stop";
	struct frag_live fl = { .cmd = cmd, .a = a, .fr = &fr };
	struct ma_agent_view first = { 0 };
	const struct ma_agent_view *before = &first, *after = &fl.after;
	char b[32], r[32];
	int rc, runs = 0;

	a->o.own_thread = !a->o.strict; /* the unmapping holds no thread of the program (as in start) */
	if ((rc = stop_until_quiet(&fl, &first, &runs)))
		return rc;
	if (a->json) {
		struct ma_json j;

		ma_json_init(&j, stdout);
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "pid", a->pid);
		ma_json_u64(&j, "released_bytes", before->table_bytes);
		ma_json_u64(&j, "released_resident_bytes", before->table_resident);
		ma_json_u64(&j, "samples_dropped", before->live);
		ma_json_i64(&j, "stop_runs", runs);
		ma_json_bool(&j, "code_mapped", after->loaded);
		ma_json_u64(&j, "mappings_left", after->nmaps);
		ma_json_u64(&j, "mapped_bytes_left", after->mapped);
		emit_holds(&j, &fl, true);
		ma_json_obj_close(&j);
		ma_json_end(&j);
	} else {
		ma_print_wrapped(2, "%s stopped in process %d: %s, tables released (%s "
		       "reserved, %s resident; %llu samples)\n",
		       a->profile ? "heap profile" : "frag agent", a->pid,
		       before->ctl.mechanism == MA_AGENT_MECH_GOT ? "slots restored" :
		       before->ctl.mechanism == MA_AGENT_MECH_DETOUR ? "entry points restored" :
		       "hooks removed", ma_fmt_bytes(b, sizeof(b), before->table_bytes),
		       ma_fmt_bytes(r, sizeof(r), before->table_resident),
		       (unsigned long long)before->live);
		if (runs > 1)
			ma_print_wrapped(2, "a wrapper was still recording: stopped in %d runs, "
			       "each letting the thread go after a few milliseconds\n", runs);
		if (after->loaded)
			ma_print_wrapped(2, "its library stays mapped: %u mappings, %s (code %s); "
			       "a thread may still be about to enter a wrapper or hook it loaded "
			       "before the removal, so unmapping it is not provably safe; the "
			       "next start reuses it\n", after->nmaps,
			       ma_fmt_bytes(b, sizeof(b), after->mapped),
			       ma_fmt_bytes(r, sizeof(r), after->hi - after->lo));
	}
	return fflush(stdout) ? ma_cmd_error(cmd, MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
}

static const char *state_name(uint32_t s)
{
	switch (s) {
	case MA_AGENT_IDLE: return "stopped";
	case MA_AGENT_RUNNING: return "running";
	case MA_AGENT_STOPPING: return "stopping";
	case MA_AGENT_FORKED: return "inherited through fork (records nothing)";
	default: return "unknown";
	}
}

static int do_status(struct frag_args *a)
{
	const char *cmd = a->profile ? "profile status" : "frag status";
	struct ma_agent_view v;
	struct ma_live l;
	int rc;

	ma_err_clear();
	rc = ma_live_open(&l, a->pid);
	if (!rc)
		rc = ma_agent_find(&l.t, &v);
	ma_live_end(&l);
	if (rc)
		return ma_cmd_error(cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	if (a->json) {
		struct ma_json j;

		ma_json_init(&j, stdout);
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "pid", a->pid);
		ma_json_bool(&j, "loaded", v.loaded);
		ma_json_str(&j, "state", v.loaded ? (v.foreign ? "foreign" : state_name(v.ctl.state))
						  : "absent");
		if (v.loaded && !v.foreign && v.ctl.state != MA_AGENT_IDLE) {
			ma_json_str(&j, "mode", mode_key(v.ctl.mode));
			ma_json_u64(&j, "rate", v.ctl.rate);
			ma_json_u64(&j, "shift", v.ctl.shift);
			ma_json_u64(&j, "focus_size", v.ctl.focus_size);
			ma_json_u64(&j, "samples", v.live);
			ma_json_u64(&j, "recorded", v.recorded);
			ma_json_u64(&j, "removed", v.removed);
			ma_json_u64(&j, "dropped_full", v.dropped_full);
			ma_json_u64(&j, "dropped_stacks", v.ctl.dropped_stacks);
			ma_json_u64(&j, "stacks", v.ctl.nstacks);
			ma_json_u64(&j, "memory_bytes", v.table_bytes);
			ma_json_str(&j, "mechanism", v.ctl.mechanism == MA_AGENT_MECH_GOT ? "got" :
				    v.ctl.mechanism == MA_AGENT_MECH_DETOUR ? "detour" : "hooks");
			ma_json_u64(&j, "detours", v.ctl.ndetours);
			ma_json_u64(&j, "slots_patched", v.ctl.slots_patched);
			ma_json_u64(&j, "slots_failed", v.ctl.slots_failed);
			ma_json_u64(&j, "slots_foreign", v.ctl.slots_foreign);
			ma_json_u64(&j, "unwinder_samples", v.ctl.unwinder_samples);
			ma_json_u64(&j, "memory_resident_bytes", v.table_resident);
			ma_json_u64(&j, "started_unix_ns", v.ctl.started_unix_ns);
		}
		ma_json_obj_close(&j);
		ma_json_end(&j);
	} else if (!v.loaded) {
		printf("process %d: no agent (neither frag nor profile)\n", a->pid);
	} else if (v.foreign) {
		printf("process %d: an agent of another memattach version is loaded\n", a->pid);
	} else {
		char b[32], r[32];

		printf("process %d: %s %s", a->pid,
		       v.ctl.state != MA_AGENT_IDLE && v.ctl.mode == MA_AGENT_MODE_PROFILE ? "heap profile"
											 : "frag agent",
		       state_name(v.ctl.state));
		if (v.ctl.state == MA_AGENT_IDLE) {
			printf(" (code mapped, no hooks, no tables)\n");
		} else {
			if (v.ctl.mode == MA_AGENT_MODE_FOCUS)
				printf(", focus on the %llu B class\n", (unsigned long long)v.ctl.focus_size);
			else if (v.ctl.mode == MA_AGENT_MODE_PROFILE)
				printf(", one sample per %llu bytes allocated on average (--rate)\n",
				       (unsigned long long)v.ctl.rate);
			else
				printf(", 1 in %llu allocations sampled (--shift %u)\n",
				       1ULL << v.ctl.shift, v.ctl.shift);
			ma_print_wrapped(2, "samples held %llu (recorded %llu, removed %llu), %llu stacks\n",
			       (unsigned long long)v.live, (unsigned long long)v.recorded,
			       (unsigned long long)v.removed, (unsigned long long)v.ctl.nstacks);
			ma_print_wrapped(2, "tables: %s reserved, %s resident\n",
			       ma_fmt_bytes(b, sizeof(b), v.table_bytes),
			       ma_fmt_bytes(r, sizeof(r), v.table_resident));
			if (v.dropped_full || v.ctl.dropped_stacks)
				ma_print_wrapped(2, "bounds hit: %llu samples dropped (table "
						 "full), %llu recorded without a stack (stack "
						 "table full)\n",
						 (unsigned long long)v.dropped_full,
						 (unsigned long long)v.ctl.dropped_stacks);
		}
	}
	return fflush(stdout) ? ma_cmd_error(cmd, MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
}

/* Names and allocator flags of every frame, from the live target's files. */
static int name_frames(const struct ma_target *t, struct ma_frag_data *d)
{
	struct ma_livesym ls;

	d->frame_name = calloc(d->nframes + 1, sizeof(*d->frame_name));
	d->frame_alloc = calloc(d->nframes + 1, sizeof(*d->frame_alloc));
	if (!d->frame_name || !d->frame_alloc || ma_livesym_init(&ls, t))
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < d->nframes; i++) {
		uint64_t ip = d->frames[i];
		const struct ma_frame *f = ma_livesym_frame(&ls, ip, true);
		const char *name = f ? ma_sym_func_name(&ls.sym, f->func) : NULL;

		d->frame_alloc[i] = ma_target_in_jemalloc(t, ip - 1) || (f && ls.sym.funcs[f->func].allocator);
		d->frame_name[i] = strdup(name ? name : "?");
		if (!d->frame_name[i]) {
			ma_livesym_release(&ls);
			return ma_fail(MA_E_NOMEM, "out of memory");
		}
	}
	ma_livesym_release(&ls);
	return 0;
}

/* Report: query the agent, read the stats and bins, in one session. */
static int query_agent(struct ma_session *s, void *ctx)
{
	struct frag_live *fl = ctx;
	struct ma_bin_table bt = { 0 };
	struct ma_bin_summary sum;
	struct ma_je_stats st;
	int rc;

	fl->tm->borrowed_ns = ma_now_ns();
	rc = ma_agent_query_in(s, fl->d);
	fl->tm->query_ns = ma_now_ns() - fl->tm->borrowed_ns;
	if (!rc && !(rc = ma_collect_stats(s, &st)) &&
	    !(rc = ma_je_read_bins(s, &bt))) {
		ma_bins_summary(&bt, &st, &sum);
		fl->d->bins_waste = sum.small_waste;
		fl->d->have_bins = true;
	}
	ma_bin_table_release(&bt);
	return rc;
}

/* The thread given back: name the frames from the target's files. */
static int name_live_frames(struct ma_live *l, void *ctx)
{
	struct frag_live *fl = ctx;

	if (name_frames(&l->t, fl->d))
		return ma_cmd_error(fl->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	return MA_EXIT_OK;
}

/* Flush tcaches, then query the agent and read the bins in one session. */
static int collect_live(struct frag_args *a, struct ma_frag_data *d, struct ma_flush_result *fr,
			struct frag_timing *tm)
{
	struct frag_live fl = { .cmd = "frag report", .a = a, .flush = !a->no_flush, .fr = fr, .d = d,
				.tm = tm };
	tm->began_unix_ns = ma_unix_ns();
	tm->began_ns = ma_now_ns();

	return run_live(&fl, query_agent, name_live_frames);
}

/* The samples into a new file PATH (replaced only once complete); 0 or MA_E_IO. */
static int save_samples(const char *path, const struct ma_frag_data *d)
{
	struct ma_outfile of;
	bool ok = false;
	FILE *f;

	if (ma_outfile_open(&of, path))
		return MA_E_IO;
	if ((f = ma_outfile_stream(&of))) {
		ok = ma_frag_save(f, d) == 0;
		ok = fclose(f) == 0 && ok;
	}
	if (!ok) {
		ma_outfile_abort(&of);
		return MA_E_IO;
	}
	return ma_outfile_commit(&of);
}

static int do_report(struct frag_args *a)
{
	const char *cmd = "frag report";
	struct ma_flush_result fr = { 0 };
	struct ma_frag_data d = { 0 };
	struct frag_timing timing = { 0 }, *tm = a->from ? NULL : &timing;
	struct ma_frag_report r;
	int rc;

	if (a->from) {
		if (ma_frag_load(a->from, &d))
			return ma_cmd_error(cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	} else if ((rc = collect_live(a, &d, &fr, tm))) {
		ma_frag_data_release(&d);
		return rc;
	}
	if (a->out && save_samples(a->out, &d)) {
		ma_frag_data_release(&d);
		return ma_cmd_error(cmd, MA_EXIT_FAIL, "cannot write '%s': %s", a->out,
				    ma_errmsg()[0] ? ma_errmsg() : "I/O error");
	}
	if (mark_skipped(a, &d) || ma_frag_compute(&d, &r)) {
		ma_frag_data_release(&d);
		return ma_cmd_error(cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	}
	if (a->json)
		frag_emit_json(a, &d, &r, &fr, tm);
	else
		frag_print_report(a, &d, &r, &fr, tm);
	ma_frag_report_release(&r);
	ma_frag_data_release(&d);
	return fflush(stdout) ? ma_cmd_error(cmd, MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
}

int cmd_frag(int argc, char **argv)
{
	struct frag_args a = { .shift = DEFAULT_SHIFT, .top = 15, .o = { .deadline_ms = 2000 } };
	int rc;

	if ((rc = parse_args(argc, argv, &a))) {
		release_skips(&a);
		return rc < 0 ? MA_EXIT_OK : rc;
	}
	if (strcmp(a.sub, "start") == 0)
		return do_start(&a);
	if (strcmp(a.sub, "stop") == 0)
		return do_stop(&a);
	if (strcmp(a.sub, "status") == 0)
		return do_status(&a);
	rc = do_report(&a);
	release_skips(&a);
	return rc;
}

/* ---- memattach profile start|status|stop: the same agent, keeping a heap profile ---- */

static const char profile_about[] =
	"Profile the heap of a running process that was not started with\n"
	"jemalloc's profiling (prof:true), without restarting it.  'start' loads\n"
	"the agent 'frag' uses (dlopen of a memfd; nothing on disk) and samples\n"
	"allocations with their stacks as jemalloc's own profiler does: each with\n"
	"probability 1 - exp(-size/RATE), counted per stack, removed when freed.\n"
	"While it runs, heap-dump, snapshot, watch and aggregate --pid of that\n"
	"process read its profile (a heap_v2 dump of the allocations made since\n"
	"'profile start', live and cumulative); with prof active they keep using\n"
	"jemalloc's own.  'stop' restores the entry points and frees its memory.\n";

#define DEFAULT_RATE 524288 /* jemalloc's lg_prof_sample:19 */
#define MAX_RATE (1L << 40)

static bool profile_table(const char *sub, struct frag_args *a, struct ma_opt *opts,
			  struct ma_cmd_spec *c)
{
	const struct ma_opt start[] = {
		{ .kind = MA_OPT_COUNT, .name = "--rate", .metavar = "BYTES", .dst = &a->rate, .min = 1,
		  .max = MAX_RATE,
		  .help = "one sample per BYTES allocated on average (default 524288, jemalloc's "
			  "lg_prof_sample:19): each allocation is sampled with probability "
			  "1 - exp(-size/BYTES); 1 records every allocation" },
		{ .kind = MA_OPT_COUNT, .name = "--max-samples", .metavar = "N", .dst = &a->max_samples,
		  .min = 1,
		  .help = "samples held at most (default 4000000); samples beyond it are dropped and "
			  "counted (status says so)" },
		FRAG_JSON(a), MA_OPTS_BORROW(&a->o), MA_OPTS_END,
	};
	const struct ma_opt other[] = { FRAG_JSON(a), MA_OPTS_BORROW(&a->o), MA_OPTS_END };
	const struct ma_opt *t = strcmp(sub, "start") == 0 ? start
				 : strcmp(sub, "status") == 0 || strcmp(sub, "stop") == 0 ? other
											 : NULL;

	return fill_table(t, a, profile_about, "PID", opts, c);
}

static const char *const profile_subs[] = { "start", "status", "stop" };

static void profile_usage(struct frag_args *a)
{
	subs_usage("profile", "profile start|status|stop PID ...", profile_subs, 3, profile_table,
		   profile_about, a);
}

int cmd_profile(int argc, char **argv)
{
	struct frag_args a = { .profile = true, .rate = DEFAULT_RATE, .o = { .deadline_ms = 2000 } };
	struct ma_opt opts[FRAG_MAX_OPTS];
	struct ma_cmd_spec c;
	char cmd[32];
	int rc;

	if ((rc = pick_sub(argc, argv, &a, "profile", "start, status or stop", profile_table, profile_usage,
			   opts, &c, cmd, sizeof(cmd))))
		return rc < 0 ? MA_EXIT_OK : rc;
	if ((rc = ma_opts_parse(argc - 1, argv + 1, &c)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if (!a.pid)
		return ma_usage_error(cmd, "profile %s needs a PID", a.sub);
	if (strcmp(a.sub, "start") == 0)
		return do_start(&a);
	if (strcmp(a.sub, "stop") == 0)
		return do_stop(&a);
	return do_status(&a);
}
