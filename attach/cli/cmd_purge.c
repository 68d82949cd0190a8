/*
 * cmd_purge.c - memattach purge PID [--json]: return every unused dirty
 * and muzzy page of every arena to the OS (arena.4096.purge), and show
 * what it gave back.
 */
#include <stdio.h>
#include <string.h>

#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "jectl.h"
#include "headline.h"
#include "ma_error.h"

#define PURGE_TIMEOUT_MS 60000

static const char about[] =
	"Purge-and-measure: read jemalloc's statistics and VmRSS of process PID,\n"
	"run arena.4096.purge (all unused dirty and muzzy pages of all arenas go\n"
	"back to the OS), read them again, and show before / after / delta for\n"
	"resident, mapped, retained, active, allocated, RSS and the parts of\n"
	"resident memory (dirty, muzzy, metadata_resident, outside_jemalloc; see\n"
	"'memattach stats --help'), and how long the purge held the borrowed\n"
	"thread.  'allocated' does not change: a purge frees nothing the program\n"
	"holds; dirty and muzzy go to 0 unless the program freed meanwhile.\n";

struct side {
	struct ma_je_stats st;
	struct ma_headline h;
	uint64_t rss;
};

struct purge_result {
	pid_t pid, tid;
	struct side before, after;
	uint64_t purge_ns, held_ns;
};

static const struct {
	const char *name, *what;
	bool from_pages; /* needs the page counts (a jemalloc that reports them) */
} metrics[] = {
	{ "resident", "jemalloc pages resident in RAM", false },
	{ "mapped", "jemalloc's mapped active extents", false },
	{ "retained", "kept for reuse, not resident (virtual)", false },
	{ "active", "pages in active extents", false },
	{ "allocated", "live bytes (a purge does not change them)", false },
	{ "rss", "VmRSS of the process", false },
	{ "dirty", "unused pages kept (what a purge returns)", true },
	{ "muzzy", "unused pages advised lazily free", true },
	{ "metadata_resident", "jemalloc's bookkeeping in RAM", true },
	{ "outside_jemalloc", "VmRSS - resident: code, stacks, mappings", false },
};

/* A row's description goes on under itself when longer than a line. */
#define ROW_HANG 58

#define NMETRICS (sizeof(metrics) / sizeof(metrics[0]))

static int64_t metric(const struct side *s, size_t k)
{
	const int64_t v[] = { (int64_t)s->st.resident,	 (int64_t)s->st.mapped,
			      (int64_t)s->st.retained,	 (int64_t)s->st.active,
			      (int64_t)s->st.allocated,	 (int64_t)s->rss,
			      (int64_t)s->h.dirty,	 (int64_t)s->h.muzzy,
			      (int64_t)s->h.metadata_resident, s->h.outside_jemalloc };

	return v[k];
}

/* A metric both sides have. */
static bool shown(const struct purge_result *r, size_t k)
{
	return !metrics[k].from_pages || (r->before.h.have_pages && r->after.h.have_pages);
}

/* Metric K's value V; VmRSS as vm_rss (as stats and snapshots), and as rss, its name before 0.10. */
static void json_metric(struct ma_json *j, size_t k, int64_t v)
{
	if (strcmp(metrics[k].name, "rss") == 0)
		ma_json_i64(j, "vm_rss", v);
	ma_json_i64(j, metrics[k].name, v);
}

static void print_json(const struct purge_result *r)
{
	const char *sides[2] = { "before", "after" };
	const struct side *sv[2] = { &r->before, &r->after };
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "pid", r->pid);
	for (int s = 0; s < 2; s++) {
		ma_json_obj_open(&j, sides[s]);
		for (size_t k = 0; k < NMETRICS; k++)
			if (shown(r, k))
				json_metric(&j, k, metric(sv[s], k));
		ma_json_obj_close(&j);
	}
	ma_json_obj_open(&j, "delta");
	for (size_t k = 0; k < NMETRICS; k++)
		if (shown(r, k))
			json_metric(&j, k, metric(&r->after, k) - metric(&r->before, k));
	ma_json_obj_close(&j);
	ma_json_u64(&j, "purge_ns", r->purge_ns);
	ma_json_u64(&j, "held_ns", r->held_ns);
	ma_json_i64(&j, "thread", r->tid);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/*
 * What the deltas mean: a purge returns unused whole pages (dirty, muzzy)
 * and nothing else; zero deltas most often mean there were none (decay or
 * background threads had returned them), and slab waste is never returned.
 */
static void print_meaning(const struct purge_result *r)
{
	const struct ma_headline *b = &r->before.h;
	char w[40], u[40];

	if (!b->have_pages)
		return;
	ma_fmt_bytes(w, sizeof(w), b->slab_waste);
	ma_fmt_bytes(u, sizeof(u), b->dirty + b->muzzy);
	if (b->dirty + b->muzzy == 0)
		printf("\nnothing to return: dirty and muzzy were already 0\n(%s).\n",
		       r->before.st.background_thread ? "jemalloc's background threads return them as "
							"they decay"
						      : "decay had returned them");
	else
		printf("\n%s of unused pages (dirty + muzzy) were there to return.\n", u);
	printf("Slab waste (%s, free space inside live slabs) is not something a purge\n"
	       "returns: see 'memattach bins'.\n", w);
}

static void print_table(const struct purge_result *r)
{
	char a[40], b[40], d[40];

	printf("purge of process %d (arena.4096.purge)\n\n", r->pid);
	printf("%-17s %12s %12s %12s\n", "", "before", "after", "delta");
	for (size_t k = 0; k < NMETRICS; k++) {
		int64_t x = metric(&r->before, k), y = metric(&r->after, k);

		if (!shown(r, k))
			continue;
		ma_print_wrapped(ROW_HANG, "%-17s %12s %12s %12s  %s\n", metrics[k].name,
				 ma_fmt_signed_bytes(a, sizeof(a), x, false),
				 ma_fmt_signed_bytes(b, sizeof(b), y, false),
				 ma_fmt_signed_bytes(d, sizeof(d), y - x, true), metrics[k].what);
	}
	print_meaning(r);
	printf("\nthe purge call held thread %d for %.3f ms (%.3f ms in all, with the readings)\n",
	       r->tid, r->purge_ns / 1e6, r->held_ns / 1e6);
}

/* Headline stats and VmRSS, as close together as possible. */
static int measure(struct ma_session *s, struct side *sd)
{
	struct ma_proc_status ps;
	int rc = ma_collect_stats(s, &sd->st);

	if (rc)
		return rc;
	if ((rc = ma_process_status(s->t->pid, &ps)))
		return rc;
	sd->rss = ps.vm_rss;
	ma_headline_compute(&sd->st, sd->rss, &sd->h);
	return 0;
}

/* Measure, purge every arena, measure again. */
static int purge(struct ma_session *s, void *ctx)
{
	struct purge_result *r = ctx;
	uint64_t t0;
	int rc;

	if ((rc = measure(s, &r->before)))
		return rc;
	t0 = ma_now_ns();
	rc = ma_mallctl_write(s, "arena.4096.purge", NULL, 0);
	r->purge_ns = ma_now_ns() - t0;
	return rc ? rc : measure(s, &r->after);
}

int cmd_purge(int argc, char **argv)
{
	struct ma_session_opts o = { .deadline_ms = 2000, .call_timeout_ms = PURGE_TIMEOUT_MS };
	struct purge_result r;
	struct ma_live_visit v;
	bool json = false;
	int rc;

	memset(&r, 0, sizeof(r));
	const struct ma_opt opts[] = {
		MA_FLAG("--json", &json, "machine-readable output (sizes in bytes, times in ns)"),
		MA_OPTS_BORROW(&o),
		MA_OPTS_END,
	};

	if ((rc = ma_opts_parse_pid(argc, argv, about, opts, &r.pid)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if (!r.pid) {
		return ma_usage_error(argv[0], "a PID is required");
	}
	if ((rc = ma_live_run(&(struct ma_live_cmd){ .cmd = argv[0], .pid = r.pid, .o = &o,
						     .body = purge, .visit = &v },
			      &r)))
		return rc;
	r.tid = v.tid;
	r.held_ns = v.held_ns;
	if (json)
		print_json(&r);
	else
		print_table(&r);
	return MA_EXIT_OK;
}
