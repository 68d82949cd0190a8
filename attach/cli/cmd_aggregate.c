/*
 * cmd_aggregate.c - which allocation sites hold the heap, from a heap dump.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdutil.h"
#include "outfile.h"
#include "jectl.h"
#include "commands.h"
#include "emit.h"
#include "flame.h"
#include "ma_error.h"
#include "pprof.h"
#include "profcmd.h"
#include "stats_json.h"

#define CONTEXT_FRAMES 3
#define STATS_TOLERANCE 0.10

static const char about[] =
	"Where the heap is: the allocation sites of a jemalloc heap_v2 dump\n"
	"(MALLOC_CONF=prof:true), unsampled per stack as jeprof does, by scaled\n"
	"in-use bytes.  'scale' is scaled/raw: ~1 means one or a few large\n"
	"allocations (raw bytes are real), >>1 many small ones.\n";

struct stats_check {
	bool have;
	uint64_t allocated;
	double ratio; /* scaled total / allocated */
	bool off;
	bool partial; /* the dump holds only what an agent saw since it started */
};

static void frame_label(struct ma_profbundle *b, uint32_t fr, char *buf, size_t size)
{
	const struct ma_frame *f = &b->sym.frames[fr];
	const char *name = ma_sym_func_name(&b->sym, f->func);

	if (f->file)
		snprintf(buf, size, "%s (%s:%d)", name, f->file, f->line);
	else
		snprintf(buf, size, "%s", name);
}

/* Where a site's and a caller's file:line go when they do not fit beside the name. */
#define SITE_COLUMN 59
#define CALLER_HANG (SITE_COLUMN + 3)

/* The table's line for frame FR: LEAD, its name, its file:line in parentheses if known. */
static void print_frame_line(struct ma_profbundle *b, uint32_t fr, const char *lead, size_t hang)
{
	const struct ma_frame *f = &b->sym.frames[fr];
	char where[4096] = "";

	if (f->file)
		snprintf(where, sizeof(where), "(%s:%d)", ma_printable(f->file), f->line);
	ma_print_named(lead, ma_printable(ma_sym_func_name(&b->sym, f->func)), where, hang);
}

/*
 * "churn": the sites by bytes allocated since the profile began, freed or
 * not (dumps with cumulative counts: memattach profile's; jemalloc's with
 * prof_accum).
 */
static void print_churn_json(struct ma_json *j, struct ma_profcmd *c, struct ma_profbundle *b)
{
	const struct ma_profile *p = &b->prof;
	size_t n = p->nchurn < (size_t)c->top ? p->nchurn : (size_t)c->top;

	ma_json_arr_open(j, "churn");
	for (size_t i = 0; i < n; i++) {
		uint32_t fn = p->churn_order[i];
		const struct ma_fstat *fs = &p->fs[fn];

		ma_json_obj_open(j, NULL);
		ma_json_str(j, "leaf", ma_sym_func_name(&b->sym, fn));
		ma_json_u64(j, "accum_bytes", (uint64_t)llround(fs->accum));
		ma_json_u64(j, "accum_objects", (uint64_t)llround(fs->accum_objs));
		ma_json_u64(j, "accum_se_bytes", (uint64_t)llround(ma_profile_se(fs->accum_var)));
		ma_json_u64(j, "live_bytes", (uint64_t)llround(fs->flat));
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

/* The standard error as a share of EST, for the tables' "se" column ("12%"; "-" if no estimate). */
static const char *se_text(char *buf, size_t len, double est, double var)
{
	double se = ma_profile_se(var);

	if (est <= 0)
		snprintf(buf, len, "-");
	else if (se / est < 0.0005)
		snprintf(buf, len, "0%%");
	else
		snprintf(buf, len, "%.*f%%", se / est < 0.1 ? 1 : 0, 100 * se / est);
	return buf;
}

/* The churn table: sites by bytes allocated since the profile began. */
static void print_churn_table(struct ma_profcmd *c, struct ma_profbundle *b)
{
	const struct ma_profile *p = &b->prof;
	size_t n = p->nchurn < (size_t)c->top ? p->nchurn : (size_t)c->top;
	char s1[32], s2[32], se[16];

	if (!p->nchurn)
		return;
	printf("\nallocated since the profile began (live or freed): %s in %.0f objects\n",
	       ma_fmt_scaled_bytes(s1, sizeof(s1), p->total_accum_bytes, false), p->total_accum_objs);
	printf("%11s %7s %10s %11s  %s\n", "allocated", "se", "objects", "live", "allocation site");
	for (size_t i = 0; i < n; i++) {
		uint32_t fn = p->churn_order[i];
		const struct ma_fstat *fs = &p->fs[fn];

		printf("%11s %7s %10.0f %11s  %s\n", ma_fmt_scaled_bytes(s1, sizeof(s1), fs->accum, false),
		       se_text(se, sizeof(se), fs->accum, fs->accum_var), fs->accum_objs,
		       ma_fmt_scaled_bytes(s2, sizeof(s2), fs->flat, false),
		       ma_printable(ma_sym_func_name(&b->sym, fn)));
	}
	if (p->nchurn > n)
		printf("(%zu more sites; --top N shows more)\n", p->nchurn - n);
}

static void print_json(struct ma_profcmd *c, struct ma_profbundle *b, bool cum,
		       const struct stats_check *sc)
{
	struct ma_profile *p = &b->prof;
	struct ma_json j;
	char label[4096];
	size_t n;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_str(&j, "dump", b->path);
	ma_json_u64(&j, "period", b->hp.period);
	ma_json_str(&j, "source", b->hp.from_agent ? "agent" : "jemalloc");
	if (b->hp.from_agent)
		ma_json_u64(&j, "since_unix_ns", b->hp.agent_since_unix_ns);
	ma_json_u64(&j, "stacks", b->hp.nstacks);
	ma_json_bool(&j, "truncated", b->hp.truncated);
	ma_json_u64(&j, "total_raw_bytes", p->total_raw_bytes);
	ma_json_u64(&j, "total_scaled_bytes", (uint64_t)llround(p->total_bytes));
	ma_json_u64(&j, "total_raw_objects", p->total_raw_objs);
	ma_json_u64(&j, "total_objects", (uint64_t)llround(p->total_objs));
	ma_json_u64(&j, "total_accum_bytes", (uint64_t)llround(p->total_accum_bytes));
	ma_json_u64(&j, "total_accum_objects", (uint64_t)llround(p->total_accum_objs));
	ma_json_arr_open(&j, "sites");
	n = p->nsites < (size_t)c->top ? p->nsites : (size_t)c->top;
	for (size_t i = 0; i < n; i++) {
		uint32_t fn = p->sites[i];
		const struct ma_fstat *fs = &p->fs[fn];
		size_t st = fs->best_stack;

		ma_json_obj_open(&j, NULL);
		ma_json_str(&j, "leaf", ma_sym_func_name(&b->sym, fn));
		ma_json_str(&j, "symbol", b->sym.funcs[fn].key);
		ma_json_str(&j, "object", ma_sym_obj_name(&b->sym, b->sym.funcs[fn].obj));
		ma_json_u64(&j, "scaled_bytes", (uint64_t)llround(fs->flat));
		ma_json_u64(&j, "raw_bytes", fs->raw_flat);
		ma_json_u64(&j, "objects", (uint64_t)llround(fs->flat_objs));
		ma_json_u64(&j, "raw_objects", fs->raw_flat_objs);
		ma_json_u64(&j, "se_bytes", (uint64_t)llround(ma_profile_se(fs->flat_var)));
		ma_json_u64(&j, "accum_bytes", (uint64_t)llround(fs->accum));
		ma_json_u64(&j, "accum_objects", (uint64_t)llround(fs->accum_objs));
		ma_json_u64(&j, "accum_se_bytes", (uint64_t)llround(ma_profile_se(fs->accum_var)));
		ma_json_double(&j, "scale", fs->raw_flat ? fs->flat / (double)fs->raw_flat : 1.0);
		ma_json_double(&j, "share", p->total_bytes > 0 ? fs->flat / p->total_bytes : 0);
		ma_json_u64(&j, "stacks", fs->nstacks);
		ma_json_arr_open(&j, "frames");
		for (size_t k = 0; k < p->chain_len[st] && k <= CONTEXT_FRAMES; k++) {
			frame_label(b, ma_profile_frame(p, st, k), label, sizeof(label));
			ma_json_str(&j, NULL, label);
		}
		ma_json_arr_close(&j);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	print_churn_json(&j, c, b);
	if (cum) {
		ma_json_arr_open(&j, "functions");
		n = p->ncum < (size_t)c->top ? p->ncum : (size_t)c->top;
		for (size_t i = 0; i < n; i++) {
			uint32_t fn = p->cum_order[i];

			ma_json_obj_open(&j, NULL);
			ma_json_str(&j, "name", ma_sym_func_name(&b->sym, fn));
			ma_json_u64(&j, "flat_bytes", (uint64_t)llround(p->fs[fn].flat));
			ma_json_u64(&j, "cum_bytes", (uint64_t)llround(p->fs[fn].cum));
			ma_json_double(&j, "cum_share", p->total_bytes > 0 ? p->fs[fn].cum / p->total_bytes : 0);
			ma_json_obj_close(&j);
		}
		ma_json_arr_close(&j);
	}
	if (sc->have) {
		ma_json_obj_open(&j, "stats");
		ma_json_u64(&j, "allocated", sc->allocated);
		ma_json_double(&j, "scaled_over_allocated", sc->ratio);
		if (!sc->partial)
			ma_json_bool(&j, "within_tolerance", !sc->off);
		ma_json_obj_close(&j);
	}
	ma_json_arr_open(&j, "warnings");
	if (b->hp.nwarnings)
		ma_json_str(&j, NULL, b->hp.warning);
	if (b->sym.nwarnings)
		ma_json_str(&j, NULL, b->sym.warning);
	for (unsigned i = 0; i < b->sym.nalso; i++)
		ma_json_str(&j, NULL, b->sym.also[i]);
	if (b->sym.opts.lines && ma_sym_no_lines_note(&b->sym))
		ma_json_str(&j, NULL, b->sym.note);
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

static void print_table(struct ma_profcmd *c, struct ma_profbundle *b, bool cum)
{
	struct ma_profile *p = &b->prof;
	char s1[32], s2[32], se[16], lead[160];
	size_t n;

	ma_print_wrapped(2, "dump %s: heap_v2, sampling period %s, %zu stacks%s\n",
			 ma_printable(b->path),
			 ma_fmt_scaled_bytes(s1, sizeof(s1), (double)b->hp.period, false),
			 b->hp.nstacks, b->hp.truncated ? " (truncated)" : "");
	if (b->hp.from_agent)
		ma_print_wrapped(2, "written by memattach's agent: the allocations made since %s "
				 "(profile start) only\n",
				 ma_clock_time(b->hp.agent_since_unix_ns, s1, sizeof(s1)));
	printf("in use: %s unsampled in %.0f objects (raw samples: %s in %llu objects)\n\n",
	       ma_fmt_scaled_bytes(s1, sizeof(s1), p->total_bytes, false), p->total_objs,
	       ma_fmt_scaled_bytes(s2, sizeof(s2), (double)p->total_raw_bytes, false),
	       (unsigned long long)p->total_raw_objs);
	if (cum) {
		printf("%11s %11s %6s  %s\n", "cum", "flat", "cum%", "function");
		n = p->ncum < (size_t)c->top ? p->ncum : (size_t)c->top;
		for (size_t i = 0; i < n; i++) {
			uint32_t fn = p->cum_order[i];

			printf("%11s %11s %5.1f%%  %s\n", ma_fmt_scaled_bytes(s1, sizeof(s1), p->fs[fn].cum, false),
			       ma_fmt_scaled_bytes(s2, sizeof(s2), p->fs[fn].flat, false),
			       p->total_bytes > 0 ? 100 * p->fs[fn].cum / p->total_bytes : 0,
			       ma_printable(ma_sym_func_name(&b->sym, fn)));
		}
		return;
	}
	printf("%11s %7s %11s %10s %8s %6s  %s\n", "scaled", "se", "raw", "objects", "scale", "share",
	       "allocation site  (<- callers)");
	n = p->nsites < (size_t)c->top ? p->nsites : (size_t)c->top;
	for (size_t i = 0; i < n; i++) {
		uint32_t fn = p->sites[i];
		const struct ma_fstat *fs = &p->fs[fn];
		size_t st = fs->best_stack;

		snprintf(lead, sizeof(lead), "%11s %7s %11s %10.0f %8.1f %5.1f%%  ",
			 ma_fmt_scaled_bytes(s1, sizeof(s1), fs->flat, false),
			 se_text(se, sizeof(se), fs->flat, fs->flat_var),
			 ma_fmt_scaled_bytes(s2, sizeof(s2), (double)fs->raw_flat, false),
			 fs->flat_objs, fs->raw_flat ? fs->flat / (double)fs->raw_flat : 1.0,
			 p->total_bytes > 0 ? 100 * fs->flat / p->total_bytes : 0);
		print_frame_line(b, ma_profile_frame(p, st, 0), lead, SITE_COLUMN);
		snprintf(lead, sizeof(lead), "%*s<- ", SITE_COLUMN, "");
		for (size_t k = 1; k < p->chain_len[st] && k <= CONTEXT_FRAMES; k++)
			print_frame_line(b, ma_profile_frame(p, st, k), lead, CALLER_HANG);
	}
	if (p->nsites > n)
		printf("(%zu more sites; --top N shows more)\n", p->nsites - n);
	print_churn_table(c, b);
}

/* stats.allocated of a malloc_stats_print JSON file. */
static int stats_allocated(const char *path, uint64_t *allocated)
{
	struct ma_je_stats st;

	if (ma_stats_json_load(path, &st, NULL))
		return -1;
	*allocated = st.allocated;
	return 0;
}

static int read_allocated(struct ma_session *s, void *ctx)
{
	struct ma_je_stats st;
	int rc = ma_collect_stats(s, &st);

	if (!rc)
		*(uint64_t *)ctx = st.allocated;
	return rc;
}

/* stats.allocated of a live process (prints its own error). */
static int live_allocated(const char *cmd, pid_t pid, const struct ma_session_opts *o,
			  uint64_t *allocated)
{
	return ma_live_run(&(struct ma_live_cmd){ .cmd = cmd, .pid = pid, .o = o,
						  .body = read_allocated },
			   allocated);
}

struct flame_job {
	struct ma_profile *prof;
	const char *dump;
};

static int flame_into(FILE *f, void *ctx)
{
	struct flame_job *job = ctx;

	return ma_flame_svg(f, job->prof, job->dump);
}

/* The flame graph into a new file PATH (replaced only once complete). */
static int write_svg(struct ma_profcmd *c, const char *path, struct ma_profile *prof,
		     const char *dump)
{
	return ma_write_file(c->cmd, path, flame_into, &(struct flame_job){ prof, dump });
}

/* The pprof profile into a new file PATH. */
static int write_pprof(struct ma_profcmd *c, const char *path, struct ma_profile *prof)
{
	struct ma_outfile of;
	int rc = ma_outfile_open(&of, path);

	if (!rc) {
		if ((rc = ma_pprof_write(of.fd, path, prof)) == 0)
			rc = ma_outfile_commit(&of);
		else
			ma_outfile_abort(&of);
	}
	return rc ? ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg()) : 0;
}

/* --stats FILE or --pid PID: SC gets stats.allocated and how TOTAL (the
 * unsampled total) compares; a warning when it is off by more than the
 * tolerance.  Returns the exit status of a failure, or 0. */
static int compare_with_stats(struct ma_profcmd *c, const struct ma_heapprof *hp, double total,
			      const char *stats, pid_t pid, struct ma_session_opts *o,
			      struct stats_check *sc)
{
	char s1[32], s2[32];

	if (stats ? stats_allocated(stats, &sc->allocated) != 0
		  : live_allocated(c->cmd, pid, o, &sc->allocated) != 0)
		return stats ? ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg()) : MA_EXIT_FAIL;
	sc->have = true;
	sc->ratio = sc->allocated ? total / (double)sc->allocated : 0;
	/* An agent's dump leaves out what was allocated before it started: no tolerance. */
	sc->partial = hp->from_agent;
	sc->off = !sc->partial && fabs(sc->ratio - 1) > STATS_TOLERANCE;
	if (sc->off)
		ma_cmd_note(c->cmd, "warning: the unsampled total %s is %.0f%% %s stats.allocated %s; "
			    "the sampling missed or overweighted small allocations: restart with "
			    "MALLOC_CONF=prof:true,lg_prof_sample:17 (128 KiB sampling) for a closer "
			    "picture",
			    ma_fmt_scaled_bytes(s1, sizeof(s1), total, false), fabs(sc->ratio - 1) * 100,
			    sc->ratio < 1 ? "below" : "above",
			    ma_fmt_scaled_bytes(s2, sizeof(s2), (double)sc->allocated, false));
	return 0;
}

int cmd_aggregate(int argc, char **argv)
{
	struct ma_profcmd c;
	struct ma_profbundle b;
	struct stats_check sc = { 0 };
	const char *dump = NULL, *svg = NULL, *pprof = NULL, *stats = NULL;
	bool cum = false, folded = false, borrow_opts = false;
	struct ma_session_opts o = { .deadline_ms = 2000 };
	pid_t pid = 0;
	int rc = MA_EXIT_OK;

	ma_profcmd_init(&c, argv[0], 20);
	{
		const struct ma_opt opts[] = {
			MA_HEADING("output:"),
			MA_TOP("--top", "-n", &c.top, "sites shown (default 20, 0 = all)"),
			MA_FLAG("--cum", &cum, "inclusive totals per function instead of sites"),
			MA_FLAG("--json", &c.json,
				"JSON: period, total_raw_bytes, total_scaled_bytes, sites[{leaf, "
				"scaled_bytes, raw_bytes, objects, scale, share, frames}]"),
			MA_FLAG("--folded", &folded,
				"'frame;frame;leaf bytes' per stack (flamegraph.pl, inferno, speedscope)"),
			MA_STR("--svg", "FILE", &svg, "write a flame graph to open in a browser"),
			MA_STR("--pprof", "FILE", &pprof, "write gzipped pprof protobuf (go tool pprof)"),
			MA_STR("--stats", "FILE.json", &stats,
			       "compare the scaled total with stats.allocated of a malloc_stats_print "
			       "JSON file (stats-dump)"),
			{ .kind = MA_OPT_ID, .name = "--pid", .metavar = "PID", .dst = &pid,
			  .help = "the same with stats.allocated read live from PID, borrowing one of "
				  "its threads as stats does (with the three options below)" },
			MA_OPTS_BORROW_WITH(&o, "with --pid: end that run within TIME (milliseconds, or "
						"with a unit: 500ms, 2s; default 2s)"),
			MA_OPTS_PROFCMD(&c),
			MA_OPTS_END,
		};

		rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){
			.cmd = argv[0], .args = "DUMP", .about = about, .opts = opts,
			.footer = "\nexit status: 0 success, 1 unreadable or invalid dump, 2 usage error",
			.positional = &dump, .npositional = 1 });
		if (rc) {
			ma_profcmd_release(&c);
			return rc < 0 ? MA_EXIT_OK : rc;
		}
		borrow_opts = ma_opts_given(argc, argv, "--timeout") || ma_opts_given(argc, argv, "--tid") ||
			      ma_opts_given(argc, argv, "--strict");
	}
	if (!dump) {
		ma_profcmd_release(&c);
		return ma_usage_error(argv[0], "a DUMP file is required");
	}
	if (c.json && folded) {
		ma_profcmd_release(&c);
		return ma_cmd_error(c.cmd, MA_EXIT_USAGE, "--json and --folded are exclusive");
	}
	c.sym.per_pc = pprof != NULL; /* pprof locations are addresses */
	rc = ma_profcmd_load(&c, &b, dump);
	if (rc) {
		ma_profcmd_release(&c);
		return rc;
	}
	if (stats && pid) {
		rc = ma_cmd_error(c.cmd, MA_EXIT_USAGE, "give --stats FILE or --pid PID, not both");
		goto out;
	}
	if (borrow_opts && !pid) {
		rc = ma_cmd_error(c.cmd, MA_EXIT_USAGE, "--timeout, --tid and --strict go with "
				  "--pid PID (they say how to borrow one of its threads)");
		goto out;
	}
	if ((stats || pid) && (rc = compare_with_stats(&c, &b.hp, b.prof.total_bytes, stats, pid, &o, &sc)))
		goto out;
	if (svg && write_svg(&c, svg, &b.prof, dump)) {
		rc = MA_EXIT_FAIL;
		goto out;
	}
	if (pprof && write_pprof(&c, pprof, &b.prof)) {
		rc = MA_EXIT_FAIL;
		goto out;
	}
	if (folded)
		ma_flame_folded(stdout, &b.prof);
	else if (c.json)
		print_json(&c, &b, cum, &sc);
	else {
		print_table(&c, &b, cum);
		if (sc.have) {
			char s1[32];

			printf("\nstats.allocated %s: unsampled total is %.1f%% of it%s\n",
			       ma_fmt_scaled_bytes(s1, sizeof(s1), (double)sc.allocated, false), sc.ratio * 100,
			       sc.off	    ? " (off by more than 10%)"
			       : sc.partial ? " (the agent's profile leaves out the objects allocated "
					      "before it started)"
					    : "");
		}
	}
	if (fflush(stdout) != 0)
		rc = ma_cmd_error(c.cmd, MA_EXIT_FAIL, "cannot write output");
out:
	ma_profbundle_release(&b);
	ma_profcmd_release(&c);
	return rc;
}
