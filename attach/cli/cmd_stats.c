/*
 * cmd_stats.c - memattach stats PID [--json]: headline jemalloc metrics.
 */
#include <stdio.h>
#include <string.h>

#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "headline_table.h"
#include "capture.h"
#include "openmetrics.h"
#include "jectl.h"
#include "headline.h"
#include "ma_error.h"

static const char about[] =
	"Refresh jemalloc's statistics inside the running process PID and print\n"
	"its version, options and headline numbers: allocated, active, resident,\n"
	"mapped, retained, metadata, the process's VmRSS and VmHWM, and where\n"
	"VmRSS goes, exactly:\n"
	"  VmRSS = allocated + slab_waste + dirty + metadata_resident + outside_jemalloc\n"
	"slab_waste = active - allocated (free slots in live slabs and tcaches),\n"
	"dirty = unused pages jemalloc keeps (purge returns them), metadata_resident\n"
	"= resident - active - dirty, outside_jemalloc = VmRSS - resident (code,\n"
	"stacks, other mappings; negative when jemalloc counts pages never touched).\n"
	"muzzy pages (advised lazily free) are outside jemalloc's resident.\n"
	"page_slack (JSON, kept for compatibility) = dirty + metadata_resident.\n"
	"Only one thread is stopped, for well under a millisecond typically.\n";

struct stats_result {
	struct ma_je_stats st;
	struct ma_headline h;
	struct ma_proc_status ps;
	const struct ma_target *t;
	const struct ma_session *s;
	bool json;
};

static const char *linkage(const struct ma_target *t)
{
	return t->je.is_static ? "static" : "shared";
}

static void print_json(const struct stats_result *r)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "pid", r->t->pid);
	ma_json_str(&j, "version", r->st.version);
	ma_json_str(&j, "symbols", ma_je_flavour_name(r->t->je.flavour));
	ma_json_str(&j, "linkage", linkage(r->t));
	ma_json_str(&j, "object", r->t->je.object);
	ma_json_u64(&j, "allocated", r->st.allocated);
	ma_json_u64(&j, "active", r->st.active);
	ma_json_u64(&j, "resident", r->st.resident);
	ma_json_u64(&j, "mapped", r->st.mapped);
	ma_json_u64(&j, "retained", r->st.retained);
	ma_json_u64(&j, "metadata", r->st.metadata);
	ma_json_u64(&j, "vm_rss", r->ps.vm_rss);
	ma_json_u64(&j, "vm_hwm", r->ps.vm_hwm);
	/* The names before 0.10, kept for one release. */
	ma_json_u64(&j, "rss", r->ps.vm_rss);
	ma_json_u64(&j, "hwm", r->ps.vm_hwm);
	ma_json_u64(&j, "page_slack", r->h.page_slack);
	ma_json_u64(&j, "slab_waste", r->h.slab_waste);
	ma_headline_json(&j, &r->h);
	ma_json_obj_open(&j, "options");
	ma_json_bool(&j, "prof", r->st.opt_prof);
	ma_json_bool(&j, "prof_active", r->st.prof_active);
	ma_json_u64(&j, "lg_prof_sample", r->st.lg_prof_sample);
	ma_json_u64(&j, "narenas", r->st.narenas);
	ma_json_bool(&j, "tcache", r->st.opt_tcache);
	ma_json_bool(&j, "background_thread", r->st.background_thread);
	ma_json_i64(&j, "dirty_decay_ms", r->st.dirty_decay_ms);
	ma_json_i64(&j, "muzzy_decay_ms", r->st.muzzy_decay_ms);
	ma_json_obj_close(&j);
	ma_json_i64(&j, "thread", r->s->tid);
	ma_json_u64(&j, "calls", r->s->ncalls);
	ma_json_u64(&j, "pause_ns", r->s->stopped_ns);
	ma_json_i64(&j, "signals_redelivered", r->s->redelivered);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* A row's description goes on under itself when longer than a line. */
#define ROW_HANG 45

static void row(const char *name, uint64_t v, const char *what)
{
	char b[32];

	ma_print_wrapped(ROW_HANG, "  %-11s %12s  %15llu  %s\n", name,
			 ma_fmt_bytes(b, sizeof(b), v), (unsigned long long)v, what);
}

static void print_table(const struct stats_result *r)
{
	const struct ma_je_stats *st = &r->st;

	ma_print_wrapped(2, "pid %d (%s): jemalloc %s\n", r->t->pid, ma_printable(r->ps.name),
			 st->version[0] ? ma_printable(st->version) : "(version unknown)");
	ma_print_wrapped(2, "  %s, %s symbols, in %s\n", linkage(r->t),
			 ma_je_flavour_name(r->t->je.flavour), ma_printable(r->t->je.object));
	ma_print_wrapped(9, "options: prof=%s%s lg_prof_sample=%llu narenas=%u tcache=%s "
			 "background_thread=%s dirty_decay_ms=%lld muzzy_decay_ms=%lld\n\n",
			 st->opt_prof ? "true" : "false",
			 st->opt_prof ? (st->prof_active ? " (active)" : " (inactive)") : "",
			 (unsigned long long)st->lg_prof_sample, st->narenas,
			 st->opt_tcache ? "true" : "false",
			 st->background_thread ? "true" : "false", (long long)st->dirty_decay_ms,
			 (long long)st->muzzy_decay_ms);
	row("allocated", st->allocated, "live bytes the program asked for");
	row("active", st->active, "pages in active extents (allocated + free slab regions)");
	row("resident", st->resident, "jemalloc pages resident in RAM");
	row("mapped", st->mapped, "mapped by jemalloc in active extents");
	row("retained", st->retained, "virtual memory kept for reuse, not resident");
	row("metadata", st->metadata, "jemalloc's own bookkeeping");
	row("VmRSS", r->ps.vm_rss, "process resident set (all memory, not just jemalloc)");
	row("VmHWM", r->ps.vm_hwm, "peak VmRSS");
	printf("\n");
	ma_print_decomposition(st, &r->h, r->ps.vm_rss);
	printf("\nborrowed thread %d for %.3f ms (%u calls)\n", r->s->tid, r->s->stopped_ns / 1e6,
	       r->s->ncalls);
}

/* The exporter's metrics for one process (one borrow, headline and bins). */
static int print_openmetrics(const char *cmd, pid_t pid, const struct ma_session_opts *o)
{
	struct ma_om_target t;

	memset(&t, 0, sizeof(t));
	ma_install_signal_guards();
	if (o->tid)
		return ma_usage_error(cmd, "--tid cannot be combined with --format openmetrics");
	if (ma_scrape_target(pid, o, &t)) {
		ma_cmd_error(cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
		return MA_EXIT_FAIL;
	}
	ma_om_write(stdout, &t, 1, false);
	ma_bin_table_release(&t.bins);
	return MA_EXIT_OK;
}

static int read_stats(struct ma_session *s, void *ctx)
{
	return ma_collect_stats(s, &((struct stats_result *)ctx)->st);
}

/* The thread is back: VmRSS now, the headline, printed with the target's names. */
static int report(struct ma_live *l, void *ctx)
{
	struct stats_result *r = ctx;

	memset(&r->ps, 0, sizeof(r->ps));
	if (ma_process_status(l->t.pid, &r->ps))
		ma_err_clear();
	ma_headline_compute(&r->st, r->ps.vm_rss, &r->h);
	r->t = &l->t;
	r->s = &l->s;
	if (r->json)
		print_json(r);
	else
		print_table(r);
	return MA_EXIT_OK;
}

/* One batch of mallctl reads: small enough for the thread's own stack (no mapping). */
#define STATS_DATA (16UL << 10)

int cmd_stats(int argc, char **argv)
{
	struct ma_session_opts o = { .deadline_ms = 2000 };
	struct stats_result r;
	bool json = false, openmetrics;
	const char *format = NULL;
	pid_t pid = 0;
	int rc;

	const struct ma_opt opts[] = {
		MA_FLAG("--json", &json, "machine-readable output (sizes in bytes)"),
		MA_STR("--format", "openmetrics", &format,
		       "the metrics 'memattach export' serves, for this process (OpenMetrics text, as "
		       "Prometheus scrapes it)"),
		MA_OPTS_BORROW(&o),
		MA_OPTS_END,
	};

	if ((rc = ma_opts_parse_pid(argc, argv, about, opts, &pid)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if (format && strcmp(format, "openmetrics") != 0)
		return ma_usage_error(argv[0], "--format '%s': the only format is 'openmetrics' (or --json)",
				      format);
	openmetrics = format != NULL;
	if (openmetrics && json)
		return ma_usage_error(argv[0], "--json and --format openmetrics: choose one output");
	if (!pid) {
		return ma_usage_error(argv[0], "a PID is required");
	}
	if (openmetrics)
		return print_openmetrics(argv[0], pid, &o); /* headline and bins: a scratch mapping */
	o.data_size = STATS_DATA;
	r.json = json;
	return ma_live_run(&(struct ma_live_cmd){ .cmd = argv[0], .pid = pid, .o = &o,
						  .body = read_stats, .report = report },
			   &r);
}
