/*
 * cmd_snapshot.c - memattach snapshot PID -o DIR: everything one visit can
 * take (VmHWM/VmRSS, headline, stats JSON, bins, heap dump if profiling is
 * on) into a self-describing directory that 'memattach diff' can compare.
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

#include "bins.h"
#include "capture.h"
#include "fragctl.h"
#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "emit.h"
#include "headline_table.h"
#include "jectl.h"
#include "bins_report.h"
#include "ma_error.h"
#include "safepoint.h"

#define STATS_PRINT_TIMEOUT_MS 20000

static const char about[] =
	"One visit to process PID, saved to the new directory DIR:\n"
	"  manifest.json  what is in the directory: pid, time, binary, jemalloc\n"
	"                 version, VmRSS/VmHWM, headline counters and the parts\n"
	"                 of resident memory (see 'memattach stats --help'),\n"
	"                 file names\n"
	"  stats.json     malloc_stats_print JSON (as 'memattach stats-dump')\n"
	"  bins.json      the bin table (as 'memattach bins --json')\n"
	"  heap.heap      a heap dump (as 'memattach heap-dump'), only if the\n"
	"                 process runs with prof:true\n"
	"DIR appears only when complete (it must not exist, or be empty).  Compare\n"
	"two snapshots with 'memattach diff A B'.\n";

struct snap {
	const char *cmd, *dir;
	const char *base;	/* DIR's last component, in the folder parentfd */
	int parentfd, tmpfd;	/* DIR's folder; the new folder being filled */
	char tmp[PATH_MAX], path[PATH_MAX * 2 + 32];
	pid_t pid, proc_pid; /* proc_pid: see struct ma_target */
	struct ma_proc_status ps;
	struct ma_je_stats st;
	struct ma_bin_table bins;
	char *stats_json;
	size_t stats_len, heap_len;
	bool heap, activate, json;
	char heap_skip[256];
	char heap_note[256]; /* what the heap profile covers, when not everything */
	struct ma_agent_profile agent; /* heap.heap is the agent's profile (rate non-zero) */
	uint64_t held_ns;
	pid_t tid;
};

static const char *in_tmp(struct snap *sn, const char *name)
{
	snprintf(sn->path, sizeof(sn->path), "%s/%s", sn->dir, name);
	return sn->path;
}

/* Everything that needs the target, in one session. */
static int visit(struct ma_session *s, void *ctx)
{
	struct snap *sn = ctx;
	struct ma_outfile of;
	int rc;

	if ((rc = ma_collect_stats(s, &sn->st)) || (rc = ma_je_read_bins(s, &sn->bins)))
		return rc;
	if (ma_process_status(sn->pid, &sn->ps))
		ma_err_clear();
	sn->proc_pid = s->t->proc_pid;
	if ((rc = ma_je_stats_print(s, "J", STATS_PRINT_TIMEOUT_MS, &sn->stats_json,
				    &sn->stats_len)))
		return rc;
	if (!sn->st.opt_prof && !ma_agent_profiling(s->t)) {
		snprintf(sn->heap_skip, sizeof(sn->heap_skip),
			 "heap profiling is off; 'memattach profile start %d' profiles it without a "
			 "restart, or restart with %s", sn->pid, ma_prof_restart_hint(s->t));
		return 0;
	}
	if (!sn->st.opt_prof) {
		/* the agent's profile: what it covers is said below */
	} else if (!sn->st.prof_active && sn->activate) {
		bool on = true;

		if ((rc = ma_mallctl_write(s, "prof.active", &on, sizeof(on))))
			return rc;
		snprintf(sn->heap_note, sizeof(sn->heap_note),
			 "prof.active was false and was set to true now: the heap profile holds "
			 "only allocations sampled from now on");
	} else if (!sn->st.prof_active) {
		snprintf(sn->heap_note, sizeof(sn->heap_note),
			 "profiling is inactive (prof.active=false): the heap profile holds only "
			 "what was sampled while it was active; --activate turns it on");
	}
	if ((rc = ma_outfile_openat(&of, sn->tmpfd, "heap.heap", in_tmp(sn, "heap.heap"))))
		return rc;
	if ((rc = ma_capture_heap_dump(s, &sn->st, of.fd, &sn->heap_len, &sn->agent))) {
		ma_outfile_abort(&of);
		return rc;
	}
	if ((rc = ma_outfile_commit(&of)))
		return rc;
	sn->heap = true;
	if (sn->agent.rate)
		snprintf(sn->heap_note, sizeof(sn->heap_note),
			 "heap profile from memattach's agent: allocations since 'profile start' "
			 "(unix ns %llu), one sample per %llu bytes",
			 (unsigned long long)sn->agent.started_unix_ns, (unsigned long long)sn->agent.rate);
	return 0;
}

static int write_buf(struct snap *sn, const char *name, const char *buf, size_t len)
{
	struct ma_outfile of;
	int rc;

	if ((rc = ma_outfile_openat(&of, sn->tmpfd, name, in_tmp(sn, name))))
		return rc;
	if ((rc = ma_write_all(of.fd, buf, len)) || (rc = ma_outfile_commit(&of))) {
		ma_outfile_abort(&of);
		return rc;
	}
	return 0;
}

/* Write through a stdio stream into a new file of the snapshot (a folder of ours). */
static FILE *open_stream(struct snap *sn, const char *name)
{
	int fd = openat(sn->tmpfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (!f) {
		ma_fail(MA_E_IO, "cannot create '%s': %s", in_tmp(sn, name), strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	return f;
}

static int close_stream(struct snap *sn, FILE *f)
{
	if (fclose(f) != 0)
		return ma_fail(MA_E_IO, "cannot write in '%s'", sn->tmp);
	return 0;
}

static void manifest(struct snap *sn, FILE *f)
{
	char exe[PATH_MAX], link[64], when[32];
	struct ma_headline h;
	struct ma_json j;
	time_t now = time(NULL);
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", sn->proc_pid ? sn->proc_pid : sn->pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	ma_json_init(&j, f);
	ma_json_obj_open(&j, NULL);
	ma_json_str(&j, "format", "memattach-snapshot");
	ma_json_u64(&j, "format_version", 1);
	ma_json_i64(&j, "pid", sn->pid);
	ma_json_str(&j, "comm", sn->ps.name);
	ma_json_str(&j, "exe", exe);
	ma_json_str(&j, "time", when);
	ma_json_i64(&j, "unix_time", (int64_t)now);
	ma_json_str(&j, "jemalloc_version", sn->st.version);
	ma_json_u64(&j, "vm_rss", sn->ps.vm_rss);
	ma_json_u64(&j, "vm_hwm", sn->ps.vm_hwm);
	ma_json_obj_open(&j, "headline");
	ma_json_u64(&j, "allocated", sn->st.allocated);
	ma_json_u64(&j, "active", sn->st.active);
	ma_json_u64(&j, "resident", sn->st.resident);
	ma_json_u64(&j, "mapped", sn->st.mapped);
	ma_json_u64(&j, "retained", sn->st.retained);
	ma_json_u64(&j, "metadata", sn->st.metadata);
	ma_json_u64(&j, "tcache_bytes", sn->bins.tcache_bytes);
	ma_headline_compute(&sn->st, sn->ps.vm_rss, &h);
	ma_json_u64(&j, "page_slack", h.page_slack);
	ma_json_u64(&j, "slab_waste", h.slab_waste);
	ma_headline_json(&j, &h);
	ma_json_obj_close(&j);
	ma_json_obj_open(&j, "options");
	ma_json_bool(&j, "prof", sn->st.opt_prof);
	ma_json_bool(&j, "prof_active", sn->st.prof_active);
	ma_json_u64(&j, "lg_prof_sample", sn->st.lg_prof_sample);
	ma_json_bool(&j, "tcache", sn->st.opt_tcache);
	ma_json_u64(&j, "narenas", sn->st.narenas);
	ma_json_obj_close(&j);
	ma_json_obj_open(&j, "files");
	ma_json_str(&j, "stats", "stats.json");
	ma_json_str(&j, "bins", "bins.json");
	if (sn->heap)
		ma_json_str(&j, "heap", "heap.heap");
	else
		ma_json_null(&j, "heap");
	ma_json_obj_close(&j);
	if (!sn->heap)
		ma_json_str(&j, "heap_skipped", sn->heap_skip);
	if (sn->heap && sn->heap_note[0])
		ma_json_str(&j, "heap_note", sn->heap_note);
	ma_json_i64(&j, "thread", sn->tid);
	ma_json_u64(&j, "held_ns", sn->held_ns);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

static int write_files(struct snap *sn)
{
	FILE *f;
	int rc;

	if ((rc = write_buf(sn, "stats.json", sn->stats_json, sn->stats_len)))
		return rc;
	if (!(f = open_stream(sn, "bins.json")))
		return MA_E_IO;
	ma_bins_emit_json(f, &sn->st, &sn->bins, NULL);
	if ((rc = close_stream(sn, f)))
		return rc;
	/* The manifest last: a directory with a manifest is complete. */
	if (!(f = open_stream(sn, "manifest.json")))
		return MA_E_IO;
	manifest(sn, f);
	return close_stream(sn, f);
}

/* Remove the temporary folder and what is in it. */
static void remove_tmp(struct snap *sn)
{
	if (sn->tmpfd >= 0)
		close(sn->tmpfd);
	sn->tmpfd = -1;
	if (sn->tmp[0])
		ma_outdir_remove(sn->parentfd, sn->tmp);
}

/*
 * A new private folder next to DIR, filled and renamed to DIR once
 * complete.  DIR itself must not exist, or be an empty folder.
 */
static int make_tmp_dir(struct snap *sn)
{
	struct stat st;

	if (ma_outfile_is_stdout(sn->dir))
		return ma_fail(MA_E_IO, "'-' (the standard output) cannot hold a folder of files: "
			       "name a folder");
	if ((sn->parentfd = ma_open_parent(sn->dir, &sn->base)) < 0)
		return sn->parentfd; /* the message is set */
	if (!sn->base[0])
		return ma_fail(MA_E_IO, "cannot create '%s': name a folder", sn->dir);
	if (fstatat(sn->parentfd, sn->base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode) && st.st_uid != geteuid())
			return ma_fail(MA_E_IO, "'%s' is another user's folder (uid %u): nothing was "
				       "replaced; name a new folder", sn->dir, (unsigned)st.st_uid);
		if (S_ISLNK(st.st_mode))
			return ma_fail(MA_E_IO, "'%s' is a symbolic link (of uid %u), which memattach "
				       "does not follow: nothing was written; name a new folder",
				       sn->dir, (unsigned)st.st_uid);
		/* An empty folder of this user's is replaced (rmdir refuses any other). */
		if (!S_ISDIR(st.st_mode) || unlinkat(sn->parentfd, sn->base, AT_REMOVEDIR) != 0)
			return ma_fail(MA_E_IO, "'%s' already exists and is not an empty directory",
				       sn->dir);
	}
	return ma_outdir_make_temp(sn->parentfd, sn->base, sn->tmp, sizeof(sn->tmp), &sn->tmpfd);
}

/*
 * The finished folder takes its name.  rename(2) would replace any empty
 * folder of that name, whoever owns it: only the user's own is replaced;
 * another's, or anything else, is an error that says so.
 */
static int rename_into_place(struct snap *sn)
{
	struct stat sb;

	if (renameat2(sn->parentfd, sn->tmp, sn->parentfd, sn->base, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EEXIST)
		return -1;
	if (fstatat(sn->parentfd, sn->base, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return -1;
	if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
		return ma_fail(MA_E_IO, "%s exists and is not an empty folder of this user's "
			       "(uid %u, mode %04o): nothing was replaced", sn->dir,
			       (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777)), -1;
	return renameat(sn->parentfd, sn->tmp, sn->parentfd, sn->base);
}

/* What the snapshot wrote, for scripts (--json). */
static void print_json(const struct snap *sn)
{
	static const char *const files[] = { "manifest.json", "stats.json", "bins.json", "heap.heap" };
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "pid", sn->pid);
	ma_json_str(&j, "dir", sn->dir);
	ma_json_arr_open(&j, "files");
	for (size_t i = 0; i < (sn->heap ? 4 : 3); i++)
		ma_json_str(&j, NULL, files[i]);
	ma_json_arr_close(&j);
	ma_json_bool(&j, "heap", sn->heap);
	if (sn->heap && sn->heap_note[0])
		ma_json_str(&j, "heap_note", sn->heap_note);
	if (!sn->heap)
		ma_json_str(&j, "no_heap", sn->heap_skip);
	ma_json_i64(&j, "tid", sn->tid);
	ma_json_u64(&j, "held_ns", sn->held_ns);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

int cmd_snapshot(int argc, char **argv)
{
	struct ma_session_opts o = { .deadline_ms = 2000 };
	struct snap sn = { .cmd = argv[0], .parentfd = -1, .tmpfd = -1 };
	struct ma_live_visit v;
	int rc;

	const struct ma_opt opts[] = {
		MA_STR_REQUIRED("-o", "DIR", &sn.dir, "output directory (required)"),
		MA_FLAG("--activate", &sn.activate,
			"if profiling is enabled but inactive (prof_active:false), set prof.active=true "
			"first; without it the heap profile of an inactive profiler is said to be "
			"(nearly) empty, in the output and in manifest.json's heap_note"),
		MA_FLAG("--json", &sn.json,
			"what was written, as JSON: pid, dir, files[], heap (and heap_note, or no_heap: why "
			"not), tid, held_ns"),
		MA_OPTS_BORROW(&o),
		MA_OPTS_END,
	};

	if ((rc = ma_opts_parse_pid(argc, argv, about, opts, &sn.pid)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if (!sn.pid || !sn.dir) {
		return ma_usage_error(argv[0], "a PID and -o DIR are required");
	}
	if (make_tmp_dir(&sn)) {
		rc = ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s", ma_errmsg());
		if (sn.parentfd >= 0)
			close(sn.parentfd);
		return rc;
	}
	rc = ma_live_run(&(struct ma_live_cmd){ .cmd = argv[0], .pid = sn.pid, .o = &o,
						.body = visit, .visit = &v },
			 &sn);
	sn.tid = v.tid;
	sn.held_ns = v.held_ns;
	if (!rc && (write_files(&sn) || rename_into_place(&sn) != 0))
		rc = ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s",
				  ma_errmsg()[0] ? ma_errmsg() : strerror(errno));
	else if (!rc)
		ma_outdir_unmark(sn.tmpfd); /* complete under its name: no longer a temporary */
	if (rc)
		remove_tmp(&sn);
	else if (sn.json)
		print_json(&sn);
	else
		ma_print_wrapped(2, "wrote %s/: manifest.json, stats.json, bins.json%s\nthread %d "
				 "held %.3f ms%s%s\n", sn.dir, sn.heap ? ", heap.heap" : "",
				 sn.tid, sn.held_ns / 1e6,
				 sn.heap ? (sn.heap_note[0] ? "\nheap.heap: " : "")
					 : "\nno heap dump: ",
				 sn.heap ? sn.heap_note : sn.heap_skip);
	if (sn.tmpfd >= 0)
		close(sn.tmpfd);
	close(sn.parentfd);
	free(sn.stats_json);
	ma_bin_table_release(&sn.bins);
	return rc;
}
