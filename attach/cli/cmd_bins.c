/*
 * cmd_bins.c - memattach bins (PID | --stats FILE.json) [--flush-tcache]
 * [--top N] [--json]: slab waste per size class, live or from a file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "jectl.h"
#include "bins_report.h"
#include "ma_error.h"
#include "safepoint.h"
#include "stats_json.h"

static const char about[] =
	"Slab waste by jemalloc size class.  For each small bin: region size, regions\n"
	"per slab, slab size, live regions, slabs, non-full slabs, utilization, waste\n"
	"(slabs * slab size - live regions * size), live objects per non-full slab,\n"
	"and what that suggests.  Live mode reads the counters inside process PID;\n"
	"--stats reads the JSON of malloc_stats_print (memattach stats-dump, or\n"
	"malloc_stats_print(..., \"J\")).  Both give the same table for the same state.\n";

void ma_flush_emit_json(struct ma_json *j, const struct ma_flush_result *fr)
{
	if (!fr || !fr->done)
		return;
	ma_json_obj_open(j, "tcache_flush");
	ma_json_u64(j, "threads", fr->threads);
	ma_json_u64(j, "flushed", fr->flushed);
	ma_json_u64(j, "skipped", fr->skipped);
	ma_json_u64(j, "no_tcache", fr->no_tcache);
	ma_json_u64(j, "skipped_eintr_waits", fr->eintr_waits);
	ma_json_obj_close(j);
}

void ma_bins_emit_json(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
		       const struct ma_flush_result *fr)
{
	struct ma_bin_summary sum;
	struct ma_json j;

	ma_bins_summary(t, st, &sum);
	ma_json_init(&j, f);
	ma_json_obj_open(&j, NULL);
	ma_json_u64(&j, "allocated", st->allocated);
	ma_json_u64(&j, "active", st->active);
	ma_json_u64(&j, "resident", st->resident);
	ma_json_u64(&j, "tcache_bytes", t->tcache_bytes);
	ma_json_u64(&j, "slab_gap", sum.slab_waste);
	ma_json_u64(&j, "page_gap", sum.page_slack);
	ma_json_u64(&j, "small_waste", sum.small_waste);
	ma_json_double(&j, "small_waste_share", sum.waste_share);
	ma_flush_emit_json(&j, fr);
	ma_json_arr_open(&j, "bins");
	for (size_t i = 0; i < t->nbins; i++) {
		const struct ma_bin *b = &t->bins[i];
		struct ma_bin_row r;

		ma_bins_row(t, i, &r);
		ma_json_obj_open(&j, NULL);
		ma_json_u64(&j, "size", b->size);
		ma_json_u64(&j, "nregs", b->nregs);
		ma_json_u64(&j, "slab_size", b->slab_size);
		ma_json_u64(&j, "curregs", b->curregs);
		ma_json_u64(&j, "curslabs", b->curslabs);
		ma_json_u64(&j, "nonfull_slabs", b->nonfull_slabs);
		ma_json_double(&j, "util", r.util);
		ma_json_u64(&j, "waste", r.waste);
		ma_json_double(&j, "live_per_nonfull", r.live_per_nonfull);
		ma_json_str(&j, "regime", ma_bin_regime_name(r.regime));
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* Where a header row's description and a regime's advice go on. */
#define HEADER_HANG 34
#define REGIME_HANG 10

static void header_row(FILE *f, const char *name, uint64_t v, const char *what)
{
	char b[32];

	ma_fprint_wrapped(f, HEADER_HANG, "%-20s %11s  %s\n", name, ma_fmt_bytes(b, sizeof(b), v),
			  what);
}

/* What tcache_bytes means for the waste figures, true to what the flush did. */
static const char *tcache_note(const struct ma_bin_table *t, const struct ma_flush_result *fr)
{
	static char b[256];

	if (!t->tcache_bytes)
		return "nothing cached in thread caches: the waste below is exact";
	if (!fr || !fr->done)
		return "cached in thread caches and counted as live: the waste below is a lower "
		       "bound (--flush-tcache empties the caches of every thread it can borrow)";
	if (fr->skipped)
		snprintf(b, sizeof(b), "still cached after the flush: in the caches of the %u "
			 "thread%s that could not be borrowed, and refilled by threads that allocated "
			 "since; the waste below is a lower bound by at most this", fr->skipped,
			 fr->skipped == 1 ? "" : "s");
	else
		snprintf(b, sizeof(b), "still cached after the flush: refilled by threads that "
			 "allocated since (every thread was flushed); the waste below is a lower "
			 "bound by at most this");
	return b;
}

static void print_header(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
			 const struct ma_bin_summary *sum, const struct ma_flush_result *fr)
{
	char share[64];

	header_row(f, "allocated", st->allocated, "live bytes the program asked for");
	header_row(f, "active", st->active, "pages in active extents");
	header_row(f, "resident", st->resident, "jemalloc pages resident in RAM");
	header_row(f, "active - allocated", sum->slab_waste,
		   "free space inside active pages: slab waste, large-size padding");
	header_row(f, "resident - active", sum->page_slack,
		   "unused dirty pages and jemalloc's metadata (see 'stats')");
	snprintf(share, sizeof(share), "%.1f%% of active - allocated", 100 * sum->waste_share);
	header_row(f, "small-bin waste", sum->small_waste, share);
	if (fr && fr->done) {
		char eintr[160] = "";

		/* The parts of "skipped" in parentheses: the counts add up to the threads. */
		if (fr->eintr_waits)
			snprintf(eintr, sizeof(eintr), " (%u in a wait a stop would end with "
				 "EINTR, left alone with --strict; %u unsafe at that moment)",
				 fr->eintr_waits, fr->skipped - fr->eintr_waits);
		ma_fprint_wrapped(f, 2, "tcache flush: %u of %u threads flushed, %u without "
				  "tcache, %u skipped%s%s\n", fr->flushed, fr->threads,
				  fr->no_tcache, fr->skipped, eintr,
				  fr->skipped ? "; their cached regions still count as live" : "");
	}
	header_row(f, "tcache_bytes", t->tcache_bytes, tcache_note(t, fr));
}

int ma_bins_print_table(FILE *f, const struct ma_je_stats *st, const struct ma_bin_table *t,
			const struct ma_flush_result *fr, long top)
{
	struct ma_bin_summary sum;
	struct ma_bin_row *rows;
	bool seen[4] = { false, false, false, false };
	size_t shown = 0;
	int rc;

	if ((rc = ma_bins_rows(t, &rows)))
		return rc;
	ma_bins_summary(t, st, &sum);
	print_header(f, st, t, &sum, fr);
	ma_bins_sort_by_waste(rows, t->nbins);
	fprintf(f, "\n%6s %6s %6s %9s %8s %8s %6s %11s %12s  %s\n", "size", "nregs", "slab",
		"curregs", "curslabs", "nonfull", "util", "waste", "live/nonfull", "regime");
	for (size_t i = 0; i < t->nbins && (top == 0 || shown < (size_t)top); i++) {
		const struct ma_bin *b = &t->bins[rows[i].index];
		char w[32];

		if (!b->curslabs)
			continue;
		fprintf(f, "%6llu %6llu %6llu %9llu %8llu %8llu %5.1f%% %11s %12.1f  %s\n",
			(unsigned long long)b->size, (unsigned long long)b->nregs,
			(unsigned long long)b->slab_size, (unsigned long long)b->curregs,
			(unsigned long long)b->curslabs, (unsigned long long)b->nonfull_slabs,
			100 * rows[i].util, ma_fmt_bytes(w, sizeof(w), rows[i].waste),
			rows[i].live_per_nonfull, ma_bin_regime_name(rows[i].regime));
		seen[rows[i].regime] = true;
		shown++;
	}
	if (!shown)
		fprintf(f, "  (no small-bin slab in use)\n");
	fprintf(f, "\n");
	for (int r = MA_REGIME_SPARSE; r <= MA_REGIME_HALF_FULL; r++)
		if (seen[r])
			ma_fprint_wrapped(f, REGIME_HANG, "%-9s %s\n", ma_bin_regime_name(r),
					  ma_bin_regime_advice(r));
	free(rows);
	return 0;
}

struct bins_args {
	pid_t pid;
	const char *stats;
	bool json, flush;
	long top;
	struct ma_session_opts o;
};

static int parse_args(int argc, char **argv, struct bins_args *a)
{
	const struct ma_opt opts[] = {
		{ .kind = MA_OPT_STR, .name = "--stats", .metavar = "FILE", .dst = &a->stats, .in_args = true,
		  .help = "read FILE instead of a live process" },
		MA_FLAG("--flush-tcache", &a->flush,
			"first flush every thread's tcache (thread.tcache.flush in each thread that is "
			"safe to borrow), so the waste is exact rather than a lower bound"),
		MA_TOP("--top", "-n", &a->top, "table rows, largest waste first (default 20, 0 = all)"),
		MA_FLAG("--json", &a->json, "all bins in bin order, sizes in bytes"),
		MA_OPTS_BORROW(&a->o),
		MA_OPTS_END,
	};
	int rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){ .cmd = argv[0],
								 .args = "(PID | --stats FILE.json)",
								 .about = about, .opts = opts,
								 .footer = MA_FOOTER_EXIT, .pid = &a->pid });

	if (rc)
		return rc;
	if (!a->pid == !a->stats) {
		return ma_usage_error(argv[0], "give either a PID or --stats FILE");
	}
	if (a->stats && a->flush)
		return ma_usage_error(argv[0], "--flush-tcache needs a live PID");
	return 0;
}

struct live_bins {
	struct bins_args *a;
	struct ma_je_stats *st;
	struct ma_bin_table *t;
	struct ma_flush_result *fr;
};

/* --flush-tcache: every thread's tcache emptied before the session. */
static int flush_first(struct ma_target *t, void *ctx)
{
	struct live_bins *lb = ctx;

	return lb->a->flush ? ma_flush_all_tcaches(t, 300, lb->a->o.strict, lb->fr) : 0;
}

/* One session reads the headline and the bins. */
static int read_bins(struct ma_session *s, void *ctx)
{
	struct live_bins *lb = ctx;
	int rc = ma_collect_stats(s, lb->st);

	return rc ? rc : ma_je_read_bins(s, lb->t);
}

int cmd_bins(int argc, char **argv)
{
	struct bins_args a = { .top = 20, .o = { .deadline_ms = 2000 } };
	struct ma_flush_result fr = { 0 };
	struct ma_bin_table t = { 0 };
	struct ma_je_stats st;
	int rc;

	if ((rc = parse_args(argc, argv, &a)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if (a.stats) {
		if (ma_stats_json_load(a.stats, &st, &t))
			return ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s", ma_errmsg());
	} else if ((rc = ma_live_run(&(struct ma_live_cmd){ .cmd = argv[0], .pid = a.pid, .o = &a.o,
							    .prep = flush_first, .body = read_bins },
				     &(struct live_bins){ &a, &st, &t, &fr }))) {
		ma_bin_table_release(&t);
		return rc;
	}
	if (a.json)
		ma_bins_emit_json(stdout, &st, &t, &fr);
	else if (a.stats)
		ma_print_wrapped(2, "bins of %s (jemalloc %s)\n%s\n", ma_printable(a.stats),
				 ma_printable(st.version),
				 /* 5.3's print buffer is allocated before the epoch refresh */
				 strncmp(st.version, "5.3.", 4) == 0
					 ? "note: allocated/active/resident include "
					   "malloc_stats_print's own 64 KiB buffer\n"
					 : "");
	else
		ma_print_wrapped(2, "bins of process %d (jemalloc %s)\n\n", a.pid,
				 ma_printable(st.version));
	if (!a.json)
		ma_bins_print_table(stdout, &st, &t, &fr, a.top);
	ma_bin_table_release(&t);
	if (fflush(stdout))
		return ma_cmd_error(argv[0], MA_EXIT_FAIL, "cannot write output");
	return MA_EXIT_OK;
}
