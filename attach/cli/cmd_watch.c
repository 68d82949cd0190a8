/*
 * cmd_watch.c - memattach watch PID [--interval TIME] [-o DIR]
 * [--duration TIME] [--reset-hwm]: peak capture.  Poll VmRSS and VmHWM; at
 * each new high of the watch take a heap dump (only the latest is kept),
 * record RSS, HWM and the allocator headline as a time series, and chart
 * it at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "capture.h"
#include "fragctl.h"
#include "cmdutil.h"
#include "options.h"
#include "emit.h"
#include "commands.h"
#include "format.h"
#include "jectl.h"
#include "headline.h"
#include "ma_error.h"
#include "safepoint.h"
#include "series.h"

static const char about[] =
	"Peak capture.  Every --interval read VmRSS/VmHWM of process PID and\n"
	"jemalloc's allocated/active/resident and the parts of resident memory\n"
	"(one short thread borrow each).  At each new high of the watch, take a\n"
	"heap dump to DIR/peak.heap, replacing the previous one, so DIR/peak.heap\n"
	"is the heap at the highest peak seen.  A new high is VmRSS 1 MiB above the\n"
	"last high (the first sample is the start), or VmHWM rising by more than\n"
	"512 KiB (a peak between two samples that beat the process's lifetime\n"
	"maximum).  VmHWM is that lifetime maximum, so a peak lower than an\n"
	"old one shows only in VmRSS; --reset-hwm resets it at the start so\n"
	"VmHWM sees every peak of the\n"
	"watch, even between samples.  The summary gives the watch's highest\n"
	"point apart from the lifetime VmHWM.  The series goes to DIR/series.csv\n"
	"as it is taken; DIR/chart.svg (the series with the dump moments marked)\n"
	"is written at the end.  Stops on Ctrl-C, after --duration, or when the\n"
	"process exits, keeping what it has.  Heap dumps need the process started\n"
	"with MALLOC_CONF=prof:true,prof_active:true,prof_final:false; without it\n"
	"only the series is recorded.\n";

struct watch {
	const char *cmd, *dir;
	pid_t pid;
	long interval_ms, duration_ms;
	bool json; /* --json: the summary as JSON, the running lines on stderr */
	FILE *say; /* where the running lines go */
	struct ma_session_opts o; /* per sample: a short search for a safe thread */
	struct ma_live l; /* the target open for the whole watch, a thread borrowed per sample */
	struct ma_series series;
	FILE *csv;
	int dirfd;		/* the output folder, created or checked private */
	bool prof_warned, exited, reset_hwm;
	struct ma_peaks peaks; /* the new highs and the highest point (series.h) */
	uint64_t lifetime_hwm;
	uint64_t t0_ns;
	unsigned dumps, skipped;
	char last_skip[400]; /* why the last skipped sample borrowed no thread */
	unsigned behind; /* samples that ended past the next one's time (--interval too short) */
	char path[4096];
};

static const char *in_dir(struct watch *w, const char *name)
{
	snprintf(w->path, sizeof(w->path), "%s/%s", w->dir, name);
	return w->path;
}

/* Heap dump into DIR/peak.heap, replacing the previous one only if whole. */
static int take_dump(struct watch *w, struct ma_session *s, const struct ma_je_stats *st,
		     size_t *n)
{
	struct ma_agent_profile agent;
	struct ma_outfile of;
	int rc;

	if ((rc = ma_outfile_openat(&of, w->dirfd, "peak.heap", in_dir(w, "peak.heap"))))
		return rc;
	rc = ma_capture_heap_dump(s, st, of.fd, n, &agent);
	if (rc) {
		ma_outfile_abort(&of);
		return rc;
	}
	return ma_outfile_commit(&of);
}

/* After a failure: is the process gone (or going)?  Then it is no error. */
static bool target_gone(pid_t pid, int rc)
{
	if (rc == MA_E_NOPROC || rc == MA_E_EXITED || rc == MA_E_ZOMBIE)
		return true;
	/*
	 * A process on its way out can fail a visit in other ways while its
	 * main thread still shows as alive: give it 100 ms to become a
	 * zombie (a clean-clone CI run saw watch exit 1 there, once).
	 */
	for (int i = 0; i < 10; i++) {
		struct ma_proc_status ps;
		struct timespec ts = { 0, 10000000 };

		if (ma_process_status(pid, &ps) != 0 || ps.state == 'Z' || ps.state == 'X') {
			ma_err_clear();
			return true;
		}
		nanosleep(&ts, NULL);
	}
	return false;
}

/* VmHWM now, or 0 if it cannot be read (then nothing is folded in). */
static uint64_t hwm_now(pid_t pid)
{
	struct ma_proc_status ps;
	uint64_t hwm = ma_process_status(pid, &ps) == 0 ? ps.vm_hwm : 0;

	ma_err_clear();
	return hwm;
}

/* A timeline entry goes on under its text, right of its time. */
#define TIMELINE_HANG 12

/*
 * A new high is about to be dumped: read /proc again now that the thread
 * is stopped, so the row (and the baseline after the dump) is the height
 * the dump shows, not the height a moment before the stop.  False if the
 * process is no longer at a new high then (it freed the peak between the
 * two reads): a dump now would replace the kept dump of a higher point
 * with one of a lower.
 */
static bool still_high_at_stop(struct watch *w, struct ma_proc_status *ps, struct ma_sample *x,
			       uint64_t *level)
{
	struct ma_proc_status now;
	bool high = true;

	if (ma_process_status(w->pid, &now) == 0 && now.vm_hwm >= ps->vm_hwm) {
		*ps = now;
		x->rss = now.vm_rss;
		x->hwm = now.vm_hwm;
		w->lifetime_hwm = now.vm_hwm;
		high = ma_peaks_sample(&w->peaks, now.vm_rss, now.vm_hwm, x->t_ms, level);
	}
	ma_err_clear();
	return high;
}

/* One sample: /proc status, then (if a thread is safe) stats and maybe a dump. */
static int sample(struct watch *w)
{
	struct ma_sample x = { 0 };
	struct ma_proc_status ps;
	struct ma_je_stats st;
	struct ma_headline h;
	uint64_t level = 0, hwm_end;
	bool high;
	size_t n = 0;
	char b[32], c[32], d[32], e[32];
	int rc;

	if (ma_process_status(w->pid, &ps) || ps.state == 'Z' || ps.state == 'X') {
		w->exited = true;
		return 0;
	}
	x.t_ms = (ma_now_ns() - w->t0_ns) / 1000000;
	x.rss = ps.vm_rss;
	x.hwm = ps.vm_hwm;
	w->lifetime_hwm = ps.vm_hwm;
	high = ma_peaks_sample(&w->peaks, ps.vm_rss, ps.vm_hwm, x.t_ms, &level);
	rc = ma_live_borrow(&w->l, &w->o);
	if (rc) {
		if (target_gone(w->pid, rc)) {
			w->exited = true;
			return 0;
		}
		if (rc != MA_E_NOSAFE && rc != MA_E_TIMEOUT)
			return rc;
		w->skipped++; /* busy in jemalloc right now: no stats this time */
		snprintf(w->last_skip, sizeof(w->last_skip), "%s", ma_errmsg());
		ma_err_clear();
	} else {
		if (high)
			high = still_high_at_stop(w, &ps, &x, &level);
		rc = ma_collect_stats(&w->l.s, &st);
		if (!rc) {
			x.have_stats = true;
			x.allocated = st.allocated;
			x.active = st.active;
			x.resident = st.resident;
			ma_headline_compute(&st, ps.vm_rss, &h);
			x.have_pages = h.have_pages;
			x.dirty = h.dirty;
			x.muzzy = h.muzzy;
			x.metadata_resident = h.metadata_resident;
			x.outside_jemalloc = h.outside_jemalloc;
			if (high && (st.opt_prof || ma_agent_profiling(&w->l.t))) {
				rc = take_dump(w, &w->l.s, &st, &n);
				if (!rc) {
					x.dump = true;
					w->dumps++;
					ma_peaks_taken(&w->peaks, level, ps.vm_hwm);
					ma_fprint_wrapped(w->say, TIMELINE_HANG,
							 "%8.3f s  new high %s (VmRSS %s, VmHWM "
							 "%s): heap dump kept in %s (%s)\n",
							 x.t_ms / 1000.0,
							 ma_fmt_bytes(b, sizeof(b), level),
							 ma_fmt_bytes(c, sizeof(c), ps.vm_rss),
							 ma_fmt_bytes(d, sizeof(d), ps.vm_hwm),
							 in_dir(w, "peak.heap"),
							 ma_fmt_bytes(e, sizeof(e), n));
				}
			} else if (high) {
				ma_peaks_taken(&w->peaks, level, ps.vm_hwm);
				if (!w->prof_warned)
					ma_cmd_note(w->cmd, "process %d has heap profiling off: "
						    "recording the series only ('memattach profile "
						    "start %d' or a restart with %s gives peak dumps)",
						    w->pid, w->pid, ma_prof_restart_hint(&w->l.t));
				w->prof_warned = true;
			}
		}
		hwm_end = hwm_now(w->pid);
		if (ma_live_restore(&w->l) && !rc)
			rc = MA_E_INTERNAL;
		ma_peaks_absorb_own(&w->peaks, x.hwm, hwm_end);
		if (rc && target_gone(w->pid, rc)) {
			w->exited = true;
			return 0;
		}
		if (rc)
			ma_cmd_note(w->cmd, "sample at %.3f s: %s", x.t_ms / 1000.0, ma_errmsg());
		ma_err_clear();
	}
	if ((rc = ma_series_add(&w->series, &x)))
		return rc;
	ma_series_csv_row(w->csv, &x);
	fflush(w->csv);
	return 0;
}

/* Sleep MS in short slices so Ctrl-C and the deadline are seen quickly. */
static void pause_ms(long ms)
{
	for (long left = ms; left > 0 && !ma_interrupted; left -= 20) {
		struct timespec ts = { 0, (left < 20 ? left : 20) * 1000000L };

		nanosleep(&ts, NULL);
	}
}

static int write_chart(struct watch *w)
{
	struct ma_outfile of;
	char title[160];
	FILE *f;

	if (ma_outfile_openat(&of, w->dirfd, "chart.svg", in_dir(w, "chart.svg")))
		return MA_E_IO;
	if (!(f = ma_outfile_stream(&of))) {
		ma_outfile_abort(&of);
		return MA_E_IO;
	}
	snprintf(title, sizeof(title), "memattach watch %d: %zu samples, %u heap dumps", w->pid,
		 w->series.n, w->dumps);
	ma_series_svg(f, &w->series, title);
	if (fclose(f) != 0) {
		ma_outfile_abort(&of);
		return ma_fail(MA_E_IO, "cannot write chart");
	}
	return ma_outfile_commit(&of);
}

static int parse_args(int argc, char **argv, struct watch *w)
{
	const struct ma_opt opts[] = {
		{ .kind = MA_OPT_DURATION, .name = "--interval", .metavar = "TIME", .dst = &w->interval_ms,
		  .unit_ms = 1, .min = 1, .max = 3600000,
		  .help = "polling period: milliseconds, or with a unit (250ms, 2s, 1m; default 500ms; at most an hour)" },
		{ .kind = MA_OPT_STR, .name = "-o", .alias = "--out", .metavar = "DIR", .dst = &w->dir,
		  .help = "output directory: created (mode 0700), or an existing one of this user's "
			  "that no one else can write (default memattach-watch-PID, or a new "
			  "memattach-watch-PID.XXXXXX when that name is another user's)" },
		{ .kind = MA_OPT_DURATION, .name = "--duration", .metavar = "TIME", .dst = &w->duration_ms,
		  .unit_ms = 1000,
		  .help = "stop after TIME: seconds, or with a unit (90s, 5m, 1h; default: until Ctrl-C "
			  "or exit)" },
		MA_FLAG("--json", &w->json,
			"the summary at the end as JSON on stdout (pid, dir, reason, samples, "
			"samples_without_stats, heap_dumps, peak, peak_at_s, lifetime_hwm, files[]); the "
			"running lines then go to stderr"),
		MA_FLAG("--reset-hwm", &w->reset_hwm,
			"reset the process's VmHWM to its VmRSS at the start (writes 5 to "
			"/proc/PID/clear_refs): this changes what the process itself reads as its peak "
			"(VmHWM, getrusage's ru_maxrss)"),
		MA_OPTS_BORROW_WITH(&w->o,
				    "end each sample's run (a reading, or a heap dump) within TIME "
				    "(milliseconds, or with a unit: 500ms, 2s; default: 500ms to find a "
				    "thread; a sample that finds none is kept without allocator stats)"),
		MA_OPTS_END,
	};
	int rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){
		.cmd = argv[0], .args = "PID", .about = about, .opts = opts, .pid = &w->pid,
		.footer = "exit status: 0 stopped normally (incl. Ctrl-C and target exit),\n"
			  "             1 could not start, 2 usage error" });

	if (rc)
		return rc;
	if (!w->pid) {
		return ma_usage_error(argv[0], "a PID is required");
	}
	return 0;
}

/* VmHWM := VmRSS for PID (the kernel's clear_refs "5"). */
static int reset_hwm(pid_t pid)
{
	char path[64];
	int fd, ok;

	/* A live thread's entry: the main thread may have exited. */
	pid_t live = ma_live_thread_of(pid);

	snprintf(path, sizeof(path), "/proc/%d/clear_refs", live ? live : pid);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return ma_fail(MA_E_IO, "--reset-hwm: cannot open %s: %s", path, strerror(errno));
	ok = write(fd, "5", 1) == 1;
	if (!ok)
		ma_fail(MA_E_IO, "--reset-hwm: cannot write %s: %s", path, strerror(errno));
	close(fd);
	return ok ? 0 : MA_E_IO;
}

/*
 * The output folder: -o's, new or a private one of ours; by default
 * "memattach-watch-PID", or a new "memattach-watch-PID.XXXXXX" when that
 * name is taken by a folder that is not ours alone.
 */
static int open_out_dir(struct watch *w, char *defdir, size_t deflen)
{
	bool existed;
	int rc;

	if (w->dir)
		return ma_outdir_open(w->dir, &w->dirfd, &existed);
	snprintf(defdir, deflen, "memattach-watch-%d", w->pid);
	w->dir = defdir;
	if ((rc = ma_outdir_open(w->dir, &w->dirfd, &existed)) != MA_E_PERM)
		return rc;
	ma_err_clear();
	snprintf(defdir, deflen, "memattach-watch-%d.XXXXXX", w->pid);
	if (!mkdtemp(defdir))
		return ma_fail(MA_E_IO, "cannot create '%s': %s", defdir, strerror(errno));
	return ma_outdir_open(w->dir, &w->dirfd, &existed);
}

/* Open the target once (maps, jemalloc symbols) and the output directory. */
static int start(struct watch *w, char *defdir, size_t deflen)
{
	int fd;

	ma_err_clear();
	if (ma_live_open(&w->l, w->pid))
		return ma_cmd_error(w->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	if (w->reset_hwm && reset_hwm(w->pid))
		return ma_cmd_error(w->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	if (open_out_dir(w, defdir, deflen))
		return ma_cmd_error(w->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	/* What killed watches left here goes now, whether or not this one takes a dump. */
	ma_remove_stale_temps_at(w->dirfd, "peak.heap");
	ma_remove_stale_temps_at(w->dirfd, "chart.svg");
	/* A private folder of ours: no one else can have put a link here. */
	fd = openat(w->dirfd, "series.csv", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	w->csv = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!w->csv) {
		if (fd >= 0)
			close(fd);
		return ma_cmd_error(w->cmd, MA_EXIT_FAIL, "cannot create '%s': %s",
				    in_dir(w, "series.csv"), strerror(errno));
	}
	ma_series_csv_header(w->csv);
	return 0;
}

/* The summary for scripts (--json): why it stopped, what it saw, what it wrote. */
static void print_json(const struct watch *w, const char *why)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "pid", w->pid);
	ma_json_str(&j, "dir", w->dir);
	ma_json_str(&j, "reason", why);
	ma_json_u64(&j, "samples", w->series.n);
	ma_json_u64(&j, "samples_without_stats", w->skipped);
	ma_json_u64(&j, "heap_dumps", w->dumps);
	ma_json_u64(&j, "peak", w->peaks.top); /* "highest during the watch" */
	ma_json_double(&j, "peak_at_s", w->peaks.top_t_ms / 1000.0);
	ma_json_u64(&j, "lifetime_hwm", w->lifetime_hwm);
	ma_json_bool(&j, "hwm_reset", w->reset_hwm);
	ma_json_u64(&j, "ran_behind", w->behind);
	ma_json_arr_open(&j, "files");
	ma_json_str(&j, NULL, "series.csv");
	ma_json_str(&j, NULL, "chart.svg");
	if (w->dumps)
		ma_json_str(&j, NULL, "peak.heap");
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

int cmd_watch(int argc, char **argv)
{
	struct watch w = { .cmd = argv[0], .interval_ms = 500, .o = { .deadline_ms = 500 },
			   .dirfd = -1 };
	char defdir[64], b[32], c[32];
	const char *why = "interrupted";
	uint64_t deadline, next_ns;
	int rc;

	if ((rc = parse_args(argc, argv, &w)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if ((rc = start(&w, defdir, sizeof(defdir)))) {
		if (w.csv)
			fclose(w.csv);
		if (w.dirfd >= 0)
			close(w.dirfd);
		ma_live_end(&w.l);
		return rc;
	}
	w.say = w.json ? stderr : stdout;
	ma_fprint_wrapped(w.say, 2, "watching process %d every %ld ms into %s/ (Ctrl-C to stop)\n", w.pid,
			 w.interval_ms, w.dir);
	fflush(stdout);
	w.t0_ns = ma_now_ns();
	next_ns = w.t0_ns;
	deadline = w.duration_ms ? w.t0_ns + (uint64_t)w.duration_ms * 1000000ULL : 0;
	while (!ma_interrupted) {
		if ((rc = sample(&w))) {
			why = NULL;
			ma_cmd_error(w.cmd, MA_EXIT_FAIL, "%s (stopping, keeping what was taken)",
				     ma_errmsg());
			break;
		}
		fflush(stdout);
		if (w.exited) {
			why = "the process exited";
			break;
		}
		if (deadline && ma_now_ns() >= deadline) {
			why = "duration reached";
			break;
		}
		/* On a fixed schedule: a sample that ends past the next one's time is counted. */
		next_ns += (uint64_t)w.interval_ms * 1000000ULL;
		if (ma_now_ns() >= next_ns) {
			w.behind++;
			next_ns = ma_now_ns();
		} else {
			pause_ms((long)((next_ns - ma_now_ns()) / 1000000ULL));
		}
	}
	fclose(w.csv);
	if (write_chart(&w)) {
		ma_cmd_error(w.cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
		rc = rc ? rc : MA_E_IO;
	}
	if (why && w.json)
		print_json(&w, why);
	else if (why)
		ma_fprint_wrapped(w.say, 2, "stopped (%s): %zu samples (%u without allocator stats), %u "
				 "heap dumps, highest during the watch %s at %.3f s (lifetime "
				 "VmHWM %s%s); %s/series.csv, %s/chart.svg%s%s\n", why,
				 w.series.n, w.skipped, w.dumps, ma_fmt_bytes(b, sizeof(b), w.peaks.top),
				 w.peaks.top_t_ms / 1000.0, ma_fmt_bytes(c, sizeof(c), w.lifetime_hwm),
				 w.reset_hwm ? ", reset at the start" : "", w.dir, w.dir,
				 w.dumps ? ", " : "", w.dumps ? in_dir(&w, "peak.heap") : "");
	if (why && w.behind)
		ma_fprint_wrapped(w.say, 2, "ran behind %u time%s: a sample took longer than --interval "
				 "%ld ms (one every %.0f ms on average); a longer --interval keeps "
				 "the schedule\n", w.behind, w.behind == 1 ? "" : "s",
				 w.interval_ms,
				 w.series.n ? (double)(ma_now_ns() - w.t0_ns) / 1e6 /
						      (double)w.series.n
					    : 0.0);
	if (!rc && w.series.n && w.skipped == w.series.n) {
		ma_cmd_error(w.cmd, MA_EXIT_FAIL, "no sample could read the allocator (%zu samples, "
			     "none borrowed a thread); the last: %s", w.series.n, w.last_skip);
		rc = MA_E_NOSAFE;
	}
	ma_series_release(&w.series);
	ma_live_end(&w.l);
	close(w.dirfd);
	return rc ? MA_EXIT_FAIL : MA_EXIT_OK;
}
