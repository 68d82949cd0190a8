/*
 * cmd_ab.c - memattach ab: the memory of two builds or configurations of a
 * daemon, compared over many fresh runs of each (A/B), each metric as B/A
 * with a 95% interval.
 *
 * A sample: run the side's command to completion (it starts the daemon and
 * lets it do the measured work), find the daemon (--pid CMD prints its PID,
 * or the newest jemalloc process whose name matches --match), read its
 * VmHWM (the sample's peak), purge every arena and read jemalloc's
 * statistics in one borrow, keep a snapshot under -o DIR, and (fresh
 * lifecycle) stop the daemon.  Sides alternate or go in random order
 * within each pair, so a drift of the machine hits both alike.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "abstats.h"
#include "cmdutil.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "headline.h"
#include "jectl.h"
#include "ma_error.h"
#include "options.h"
#include "profcmd.h"
#include "target.h"

static const char about[] =
	"A/B memory comparison over fresh daemon runs.  Each sample runs a side's\n"
	"command with sh -c to completion (MEMATTACH_AB_SIDE=a or b in its\n"
	"environment): it starts the daemon and has it do the measured work.  Then\n"
	"memattach finds the daemon (--pid CMD prints its PID; --match REGEX takes\n"
	"the newest jemalloc process whose name matches), reads its VmHWM (the\n"
	"sample's peak), purges every arena and reads allocated, active,\n"
	"resident, slab_waste, dirty and metadata, keeps a snapshot with -o DIR\n"
	"(memattach diff opens any two), and with --lifecycle fresh (the default)\n"
	"stops the daemon (--stop CMD, else SIGTERM, and waits up to 30 s for it to\n"
	"exit).  The report gives per metric each side's mean +- sd and B/A with\n"
	"its 95% interval (delta method on the log ratio, Welch's degrees of\n"
	"freedom), \"significant\" when the interval excludes 1.  A progress line\n"
	"per sample goes to stderr.\n";

#define MAX_RUNS 1000
#define STOP_WAIT_MS 30000

enum { M_HWM, M_ALLOCATED, M_ACTIVE, M_RESIDENT, M_SLAB_WASTE, M_DIRTY, M_METADATA, NMETRICS };

static const char *const metric_names[NMETRICS] = {
	"vm_hwm", "allocated", "active", "resident", "slab_waste", "dirty", "metadata",
};

struct ab_args {
	const char *cmd[2]; /* -a, -b */
	const char *pid_cmd, *match, *stop_cmd, *out, *svg;
	long runs;
	bool warmup, json, reuse, random_order, heap;
	char tmpdir[64]; /* the snapshots' folder when --heap is given without -o */
	FILE *tsv; /* -o DIR/samples.tsv */
	const char *snapdir; /* -o DIR, or tmpdir */
	struct ma_session_opts o;
	struct ma_profcmd pc; /* --heap: how dumps are read (--skip) */
	regex_t re;
	bool have_re;
};

/* The samples kept (warm-up ones dropped), per side and metric. */
struct ab_samples {
	double *v[2][NMETRICS];
	size_t n[2];
};

/*
 * --heap: each kept sample's bytes per allocation site (the leaf function
 * after jemalloc's frames, as aggregate reports it), as jeprof unsamples.
 */
struct ab_site {
	char *name;
	double *v[2]; /* per kept sample of each side; 0 where the site did not appear */
	struct ma_ab_compare c;
};

struct ab_sites {
	struct ab_site *s;
	size_t n, cap;
	size_t runs; /* room in each v[] */
};

/* One sample's readings. */
struct ab_reading {
	struct ma_je_stats st;
	struct ma_headline h;
	uint64_t hwm;
};

/* VALUE of option NAME, one of FIRST and SECOND: *SECOND_CHOSEN, or a usage error. */
static int one_of(const char *name, const char *value, const char *first, const char *second,
		  bool *second_chosen)
{
	if (strcmp(value, first) != 0 && strcmp(value, second) != 0)
		return ma_usage_error("ab", "%s %s: expected %s or %s", name, value, first, second);
	*second_chosen = strcmp(value, second) == 0;
	return 0;
}

static int lifecycle_opt(const struct ma_opt *o, const char *value)
{
	return one_of(o->name, value, "fresh", "reuse", &((struct ab_args *)o->ctx)->reuse);
}

static int order_opt(const struct ma_opt *o, const char *value)
{
	return one_of(o->name, value, "alternate", "random", &((struct ab_args *)o->ctx)->random_order);
}

/*
 * Run CMD with sh -c, MEMATTACH_AB_SIDE=SIDE (and MEMATTACH_AB_PID=PID if
 * PID) in its environment; its stdout into OUT (OUTLEN bytes, NUL-ended)
 * if OUT, else inherited.  The exit status as wait() gives it, or -1.
 */
static int run_shell(const char *cmd, char side, pid_t pid, char *out, size_t outlen)
{
	int fds[2] = { -1, -1 }, status;
	size_t got = 0;
	pid_t child;

	if (out && pipe2(fds, O_CLOEXEC) != 0)
		return -1;
	if ((child = fork()) < 0) {
		if (out) {
			close(fds[0]);
			close(fds[1]);
		}
		return -1;
	}
	if (child == 0) {
		char s[2] = { side, 0 }, p[24];

		setenv("MEMATTACH_AB_SIDE", s, 1);
		if (pid) {
			snprintf(p, sizeof(p), "%d", pid);
			setenv("MEMATTACH_AB_PID", p, 1);
		}
		if (out && dup2(fds[1], STDOUT_FILENO) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (out) {
		ssize_t n;

		close(fds[1]);
		while ((n = read(fds[0], out + got, outlen - 1 - got)) > 0 || (n < 0 && errno == EINTR))
			if (n > 0 && (got += (size_t)n) == outlen - 1)
				break;
		out[got] = '\0';
		close(fds[0]);
	}
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

/* "exited with status N" / "killed by signal N" for a wait() status. */
static const char *status_words(int status, char *buf, size_t len)
{
	if (status < 0)
		snprintf(buf, len, "could not be run (%s)", strerror(errno));
	else if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "was killed by signal %d", WTERMSIG(status));
	return buf;
}

static bool name_matches(void *ctx, const char *comm)
{
	return regexec(ctx, comm, 0, NULL, 0) == 0;
}

/* Now in clock ticks since boot, the unit of a process's start time (rounded down). */
static int64_t boot_ticks_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return ((int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec) / (1000000000LL / sysconf(_SC_CLK_TCK));
}

/*
 * Is PID a descendant of this process?  ab is a child subreaper
 * (PR_SET_CHILD_SUBREAPER): a daemon its side command started, forked
 * into the background and orphaned, is re-parented to ab, not to init.
 * A process of anyone else (another user's, of the same name) is not.
 */
static bool our_descendant(pid_t pid)
{
	pid_t self = getpid();

	for (int depth = 0; pid > 1 && depth < 64; depth++)
		if ((pid = ma_process_parent(pid)) == self)
			return true;
	return false;
}

/* The PID a --pid command printed (0 and an error if none). */
static pid_t pid_from_command(struct ab_args *a, char side)
{
	char out[256], words[64];
	int st = run_shell(a->pid_cmd, side, 0, out, sizeof(out));
	long pid;
	char *end;

	if (st != 0) {
		ma_fail(MA_E_NOPROC, "--pid command %s", status_words(st, words, sizeof(words)));
		return 0;
	}
	for (size_t n = strlen(out); n && (out[n - 1] == '\n' || out[n - 1] == ' '); n--)
		out[n - 1] = '\0';
	pid = strtol(out, &end, 10);
	if (pid <= 0 || pid > 0x3fffffff || *end) {
		ma_fail(MA_E_NOPROC, "--pid command printed no PID (%.40s)", out);
		return 0;
	}
	return (pid_t)pid;
}

/* The newest jemalloc process whose name matches, started at BORN or later (0 and an error if none). */
static pid_t newest_match(struct ab_args *a, int64_t born)
{
	static struct ma_je_process found[256];
	size_t n = ma_jemalloc_processes(name_matches, &a->re, found, 256);
	pid_t best = 0;
	int64_t best_start = -1;

	for (size_t i = 0; i < n; i++) {
		int64_t t = ma_process_start_ticks(found[i].pid);

		if (born && (t < born || !our_descendant(found[i].pid)))
			continue;
		if (t > best_start || (t == best_start && found[i].pid > best))
			best = found[i].pid, best_start = t;
	}
	if (!best)
		ma_fail(MA_E_NOPROC, "no jemalloc process whose name matches --match %s%s", a->match,
			born ? " among those the sample's command started (a daemon started by a "
			       "service manager is not one: name it with --pid and stop it with --stop)"
			     : "");
	return best;
}

/*
 * The daemon of this sample, whose side command began at tick BEGAN: from
 * --pid CMD, or the newest match.  With a fresh lifecycle it must have
 * started since then: ab stops it afterwards, and a stale pid file or
 * another instance of the same program must never be the one stopped.
 * 0 if none (error set).
 */
static pid_t find_daemon(struct ab_args *a, char side, int64_t began)
{
	int64_t born = a->reuse ? 0 : began, started;
	pid_t pid;

	if (!a->pid_cmd)
		return newest_match(a, born);
	if (!(pid = pid_from_command(a, side)))
		return 0;
	started = ma_process_start_ticks(pid);
	if (born && started >= 0 && started < born) {
		ma_fail(MA_E_NOPROC, "process %d (from --pid) started before this sample's command: "
			"not its daemon (a stale pid file?); it is left alone", pid);
		return 0;
	}
	/* ab signals it itself only if the sample's command started it. */
	if (born && !a->stop_cmd && !our_descendant(pid)) {
		ma_fail(MA_E_NOPROC, "process %d (from --pid) was not started by the sample's command "
			"(a daemon of a service manager? give --stop CMD); it is left alone", pid);
		return 0;
	}
	return pid;
}

/* The live part of a sample: purge every arena, then read the statistics. */
static int purge_and_read(struct ma_session *s, void *ctx)
{
	struct ab_reading *r = ctx;
	struct ma_proc_status ps;
	int rc;

	if ((rc = ma_mallctl_write(s, "arena.4096.purge", NULL, 0)) || (rc = ma_collect_stats(s, &r->st)))
		return rc;
	if ((rc = ma_process_status(s->t->pid, &ps)))
		return rc;
	ma_headline_compute(&r->st, ps.vm_rss, &r->h);
	return 0;
}

static void reading_values(const struct ab_reading *r, double v[NMETRICS])
{
	v[M_HWM] = (double)r->hwm;
	v[M_ALLOCATED] = (double)r->st.allocated;
	v[M_ACTIVE] = (double)r->st.active;
	v[M_RESIDENT] = (double)r->st.resident;
	v[M_SLAB_WASTE] = (double)r->h.slab_waste;
	v[M_DIRTY] = (double)r->h.dirty;
	v[M_METADATA] = (double)r->st.metadata;
}

/* A snapshot of PID into DIR (cmd_snapshot, its stdout silenced): 0 or an exit status. */
static int snapshot_into(pid_t pid, const char *dir)
{
	char p[24];
	char *argv[] = { "snapshot", p, "-o", (char *)dir, NULL };
	int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY | O_CLOEXEC), rc;

	snprintf(p, sizeof(p), "%d", pid);
	fflush(stdout);
	if (saved < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0) {
		if (saved >= 0)
			close(saved);
		if (null >= 0)
			close(null);
		return MA_EXIT_FAIL;
	}
	rc = cmd_snapshot(4, argv);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	close(null);
	return rc;
}

/* The site named NAME (added, zeroed, if new); NULL out of memory. */
static struct ab_site *site_of(struct ab_sites *t, const char *name)
{
	struct ab_site *x;

	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->s[i].name, name) == 0)
			return &t->s[i];
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		struct ab_site *s = realloc(t->s, cap * sizeof(*s));

		if (!s)
			return NULL;
		t->s = s;
		t->cap = cap;
	}
	x = &t->s[t->n];
	memset(x, 0, sizeof(*x));
	if (!(x->name = strdup(name)) || !(x->v[0] = calloc(t->runs, sizeof(double))) ||
	    !(x->v[1] = calloc(t->runs, sizeof(double)))) {
		free(x->name);
		free(x->v[0]);
		return NULL;
	}
	t->n++;
	return x;
}

static void sites_release(struct ab_sites *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->s[i].name);
		free(t->s[i].v[0]);
		free(t->s[i].v[1]);
	}
	free(t->s);
}

/*
 * The heap dump of the sample's snapshot SNAP, by site, into column K of
 * side S: 0, or an exit status after a message naming the sample CMDNAME.
 */
static int add_heap_sites(struct ab_sites *t, struct ma_profcmd *pc, const char *cmdname, const char *snap,
			  int s, size_t k)
{
	char path[4200];
	struct ma_profbundle b;
	int rc;

	snprintf(path, sizeof(path), "%s/heap.heap", snap);
	if (access(path, R_OK) != 0)
		return ma_cmd_error(cmdname, MA_EXIT_FAIL, "--heap: the daemon gave no heap dump (it "
				    "runs without prof: start it with MALLOC_CONF=prof:true in its "
				    "environment, or have the side command run 'memattach profile start "
				    "PID' once the daemon is up, before its workload); its snapshot says "
				    "why in %s/manifest.json", snap);
	pc->cmd = cmdname;
	if ((rc = ma_profcmd_load(pc, &b, path)))
		return rc;
	for (size_t i = 0; i < b.prof.nsites; i++) {
		uint32_t f = b.prof.sites[i];
		struct ab_site *x = site_of(t, ma_sym_func_name(&b.sym, f));

		if (!x) {
			rc = ma_cmd_error(cmdname, MA_EXIT_FAIL, "out of memory");
			break;
		}
		x->v[s][k] += b.prof.fs[f].flat;
	}
	ma_profbundle_release(&b);
	return rc;
}

/* Largest |B - A| first. */
static int by_abs_diff(const void *x, const void *y)
{
	double a = fabs(((const struct ab_site *)x)->c.diff), b = fabs(((const struct ab_site *)y)->c.diff);

	return (a < b) - (a > b);
}

/* Compare every site; the significant ones first, largest difference first; how many. */
static size_t rank_sites(struct ab_sites *t, const size_t n[2])
{
	size_t sig = 0;

	for (size_t i = 0; i < t->n; i++) {
		ma_ab_compare(t->s[i].v[0], n[0], t->s[i].v[1], n[1], &t->s[i].c);
		/* For a site the question is whether B - A differs from 0. */
		t->s[i].c.significant = t->s[i].c.diff_low > 0 || t->s[i].c.diff_high < 0;
	}
	for (size_t i = 0; i < t->n; i++)
		if (t->s[i].c.significant) {
			struct ab_site tmp = t->s[sig];

			t->s[sig++] = t->s[i];
			t->s[i] = tmp;
		}
	qsort(t->s, sig, sizeof(*t->s), by_abs_diff);
	return sig;
}

/* SIGTERM (or --stop CMD) and wait up to STOP_WAIT_MS for PID to be gone. */
static int stop_daemon(struct ab_args *a, char side, pid_t pid, char *why, size_t whylen)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0), st;
	struct pollfd p;

	if (pfd < 0)
		return errno == ESRCH ? 0 : (snprintf(why, whylen, "pidfd_open: %s", strerror(errno)), -1);
	if (a->stop_cmd) {
		char words[64];

		if ((st = run_shell(a->stop_cmd, side, pid, NULL, 0)) != 0) {
			snprintf(why, whylen, "--stop command %s (the daemon is left running)",
				 status_words(st, words, sizeof(words)));
			close(pfd);
			return -1;
		}
	} else if (syscall(SYS_pidfd_send_signal, pfd, SIGTERM, NULL, 0) != 0 && errno != ESRCH) {
		snprintf(why, whylen, "SIGTERM: %s", strerror(errno));
		close(pfd);
		return -1;
	}
	p = (struct pollfd){ .fd = pfd, .events = POLLIN };
	while ((st = poll(&p, 1, STOP_WAIT_MS)) < 0 && errno == EINTR)
		;
	close(pfd);
	if (st == 1)
		return 0;
	snprintf(why, whylen, "still running %d s after %s", STOP_WAIT_MS / 1000,
		 a->stop_cmd ? "the --stop command" : "SIGTERM");
	return -1;
}

/*
 * DIR/samples.tsv, created once before the first sample (O_EXCL, no
 * symlink followed) and kept open: whoever else can write in DIR cannot
 * point it elsewhere between samples.  NULL with an error message.
 */
static FILE *open_samples_log(const char *dir)
{
	char path[4200];
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "%s/samples.tsv", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		ma_cmd_error("ab", MA_EXIT_FAIL, "cannot create %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	fprintf(f, "sample\tside\tkept\tpid");
	for (int m = 0; m < NMETRICS; m++)
		fprintf(f, "\t%s", metric_names[m]);
	fputc('\n', f);
	fflush(f);
	return f;
}

/* One sample's line in samples.tsv, written at once (the samples survive a failed run). */
static void log_sample(const struct ab_args *a, int k, char side, bool kept, pid_t pid,
		       const double v[NMETRICS])
{
	fprintf(a->tsv, "%d\t%c\t%d\t%d", k, side, kept, pid);
	for (int m = 0; m < NMETRICS; m++)
		fprintf(a->tsv, "\t%.0f", v[m]);
	fputc('\n', a->tsv);
	fflush(a->tsv);
}

/*
 * Sample K (1-based) of side SIDE: run, find, read, snapshot, stop.
 * V gets its values; 0 or an exit status after a message naming the sample.
 */
/* The reading of a found daemon PID: purge and stats, the snapshot, its heap by site. */
static int read_sample(struct ab_args *a, const char *cmdname, int k, char side, pid_t pid,
		       struct ab_reading *r, struct ab_sites *sites, long kidx)
{
	int rc;

	if ((rc = ma_live_run(&(struct ma_live_cmd){ .cmd = cmdname, .pid = pid, .o = &a->o,
						     .body = purge_and_read },
			      r)))
		return rc;
	if (a->snapdir) {
		char dir[4096];

		snprintf(dir, sizeof(dir), "%s/%03d-%c", a->snapdir, k, side);
		if ((rc = snapshot_into(pid, dir)))
			return ma_cmd_error(cmdname, rc, "the snapshot into %s failed (above)", dir);
		if (a->heap && kidx >= 0 && (rc = add_heap_sites(sites, &a->pc, cmdname, dir, side - 'a', (size_t)kidx)))
			return rc;
	}
	return 0;
}

static int one_sample(struct ab_args *a, int k, int total, char side, double v[NMETRICS], pid_t *pidp,
		      struct ab_sites *sites, long kidx)
{
	char cmdname[64], words[160], hwm[32], al[32];
	struct ab_reading r;
	struct ma_proc_status ps;
	int64_t began;
	pid_t pid;
	int st, rc;

	snprintf(cmdname, sizeof(cmdname), "ab: sample %d (%c)", k, side);
	began = boot_ticks_now();
	if ((st = run_shell(a->cmd[side - 'a'], side, 0, NULL, 0)) != 0)
		return ma_cmd_error(cmdname, MA_EXIT_FAIL, "-%c command %s", side,
				    status_words(st, words, sizeof(words)));
	if (!(pid = find_daemon(a, side, began)))
		return ma_cmd_error(cmdname, MA_EXIT_FAIL, "%s", ma_errmsg());
	*pidp = pid;
	memset(&r, 0, sizeof(r));
	if (ma_process_status(pid, &ps))
		return ma_cmd_error(cmdname, MA_EXIT_FAIL, "the daemon (pid %d): %s", pid, ma_errmsg());
	r.hwm = ps.vm_hwm;
	rc = read_sample(a, cmdname, k, side, pid, &r, sites, kidx);
	if (!rc) {
		reading_values(&r, v);
		fprintf(stderr, "ab: sample %d/%d (%c): pid %d, VmHWM %s, allocated %s\n", k, total, side,
			pid, ma_fmt_bytes(hwm, sizeof(hwm), r.hwm),
			ma_fmt_bytes(al, sizeof(al), r.st.allocated));
	}
	/* Stopped even when its reading failed: no daemon of ours is left behind. */
	if (!a->reuse && stop_daemon(a, side, pid, words, sizeof(words)) && !rc)
		rc = ma_cmd_error(cmdname, MA_EXIT_FAIL, "the daemon (pid %d) %s", pid, words);
	return rc;
}

/* The order of the sides: pairs, each "ab" (alternate) or either way (random). */
static void plan_order(const struct ab_args *a, char *order, int pairs)
{
	for (int i = 0; i < pairs; i++) {
		unsigned char coin = 0;

		if (a->random_order && getrandom(&coin, 1, 0) != 1)
			coin = (unsigned char)(time(NULL) + i);
		bool b_first = a->random_order && (coin & 1);

		order[2 * i] = b_first ? 'b' : 'a';
		order[2 * i + 1] = b_first ? 'a' : 'b';
	}
}

static int run_samples(struct ab_args *a, struct ab_samples *sm, struct ab_sites *sites)
{
	int pairs = (int)a->runs + (a->warmup ? 1 : 0), total = 2 * pairs, seen[2] = { 0, 0 };
	char *order = malloc((size_t)total);

	if (!order)
		return ma_cmd_error("ab", MA_EXIT_FAIL, "out of memory");
	plan_order(a, order, pairs);
	for (int k = 1; k <= total; k++) {
		char side = order[k - 1];
		int s = side - 'a', rc;
		double v[NMETRICS];
		pid_t pid = 0;
		bool kept;

		kept = !(a->warmup && seen[s]++ == 0);
		rc = one_sample(a, k, total, side, v, &pid, sites, kept ? (long)sm->n[s] : -1);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			; /* the sample's daemon, re-parented to us (and any other orphan of its command) */
		if (rc) {
			free(order);
			if (a->out)
				ma_cmd_note("ab", "the samples taken so far are in %s/ (samples.tsv, one "
					    "snapshot each)", a->out);
			return rc;
		}
		if (kept) {
			for (int m = 0; m < NMETRICS; m++)
				sm->v[s][m][sm->n[s]] = v[m];
			sm->n[s]++;
		}
		if (a->out)
			log_sample(a, k, side, kept, pid, v);
	}
	free(order);
	return MA_EXIT_OK;
}

static void print_json(const struct ab_args *a, const struct ab_samples *sm, const struct ma_ab_compare *c,
		       const struct ab_sites *sites, size_t nsig)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "runs", a->runs);
	ma_json_bool(&j, "warmup", a->warmup);
	ma_json_str(&j, "lifecycle", a->reuse ? "reuse" : "fresh");
	ma_json_str(&j, "order", a->random_order ? "random" : "alternate");
	ma_json_arr_open(&j, "metrics");
	for (int m = 0; m < NMETRICS; m++) {
		ma_json_obj_open(&j, NULL);
		ma_json_str(&j, "name", metric_names[m]);
		for (int s = 0; s < 2; s++) {
			ma_json_arr_open(&j, s ? "b" : "a");
			for (size_t i = 0; i < sm->n[s]; i++)
				ma_json_u64(&j, NULL, (uint64_t)sm->v[s][m][i]);
			ma_json_arr_close(&j);
		}
		ma_json_double(&j, "a_mean", c[m].a_mean);
		ma_json_double(&j, "b_mean", c[m].b_mean);
		ma_json_double(&j, "a_sd", c[m].a_sd);
		ma_json_double(&j, "b_sd", c[m].b_sd);
		if (c[m].have_ratio) {
			ma_json_double(&j, "ratio", c[m].ratio);
			ma_json_double(&j, "ci_low", c[m].ratio_low);
			ma_json_double(&j, "ci_high", c[m].ratio_high);
		} else {
			ma_json_null(&j, "ratio");
			ma_json_null(&j, "ci_low");
			ma_json_null(&j, "ci_high");
		}
		ma_json_double(&j, "diff", c[m].diff);
		ma_json_double(&j, "diff_ci_low", c[m].diff_low);
		ma_json_double(&j, "diff_ci_high", c[m].diff_high);
		ma_json_bool(&j, "significant", c[m].significant);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_bool(&j, "heap", a->heap);
	ma_json_arr_open(&j, "sites");
	for (size_t i = 0; i < nsig; i++) {
		const struct ab_site *x = &sites->s[i];

		ma_json_obj_open(&j, NULL);
		ma_json_str(&j, "name", x->name);
		ma_json_double(&j, "a_mean", x->c.a_mean);
		ma_json_double(&j, "b_mean", x->c.b_mean);
		ma_json_double(&j, "diff", x->c.diff);
		ma_json_double(&j, "ci_low", x->c.diff_low);
		ma_json_double(&j, "ci_high", x->c.diff_high);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* The sites whose B - A interval excludes 0, largest first (at most 20). */
static void print_sites(const struct ab_sites *sites, size_t nsig)
{
	char d[32], lo[32], hi[32], am[32], bm[32];

	if (!nsig) {
		printf("\nheap: no allocation site differs (no B - A interval excludes 0; %zu sites)\n",
		       sites->n);
		return;
	}
	printf("\nheap: allocation sites whose B - A bytes differ (95%% interval excludes 0), largest first:\n");
	printf("%12s %27s %10s %10s  %s\n", "B - A", "95% interval", "A mean", "B mean", "site");
	for (size_t i = 0; i < nsig && i < 20; i++) {
		const struct ab_site *x = &sites->s[i];
		char ci[64];

		snprintf(ci, sizeof(ci), "%s .. %s",
			 ma_fmt_signed_bytes(lo, sizeof(lo), (int64_t)x->c.diff_low, true),
			 ma_fmt_signed_bytes(hi, sizeof(hi), (int64_t)x->c.diff_high, true));
		printf("%12s %27s %10s %10s  ", ma_fmt_signed_bytes(d, sizeof(d), (int64_t)x->c.diff, true),
		       ci, ma_fmt_bytes(am, sizeof(am), (uint64_t)x->c.a_mean),
		       ma_fmt_bytes(bm, sizeof(bm), (uint64_t)x->c.b_mean));
		printf("%s\n", ma_printable(x->name));
	}
	if (nsig > 20)
		printf("(%zu more: --json lists them all)\n", nsig - 20);
}

static void print_table(const struct ab_args *a, const struct ab_samples *sm, const struct ma_ab_compare *c,
			const struct ab_sites *sites, size_t nsig)
{
	char x[32], y[32], z[32], w[32];

	printf("A/B over %zu runs of A and %zu of B (%s lifecycle, %s order%s)\n\n", sm->n[0], sm->n[1],
	       a->reuse ? "reused" : "fresh", a->random_order ? "random" : "alternating",
	       a->warmup ? ", first run of each side discarded" : "");
	printf("%-11s %21s %21s %7s %17s\n", "metric", "A mean +- sd", "B mean +- sd", "B/A", "95% interval");
	for (int m = 0; m < NMETRICS; m++) {
		char ia[48], ib[48], ci[40], r[16];

		snprintf(ia, sizeof(ia), "%s +- %s", ma_fmt_bytes(x, sizeof(x), (uint64_t)c[m].a_mean),
			 ma_fmt_bytes(y, sizeof(y), (uint64_t)c[m].a_sd));
		snprintf(ib, sizeof(ib), "%s +- %s", ma_fmt_bytes(z, sizeof(z), (uint64_t)c[m].b_mean),
			 ma_fmt_bytes(w, sizeof(w), (uint64_t)c[m].b_sd));
		if (c[m].have_ratio) {
			snprintf(r, sizeof(r), "%.4f", c[m].ratio);
			snprintf(ci, sizeof(ci), "%.4f-%.4f", c[m].ratio_low, c[m].ratio_high);
		} else {
			snprintf(r, sizeof(r), "-");
			snprintf(ci, sizeof(ci), "(a mean is 0)");
		}
		printf("%-11s %21s %21s %7s %17s%s\n", metric_names[m], ia, ib, r, ci,
		       c[m].significant ? "  significant" : "");
	}
	if (a->heap)
		print_sites(sites, nsig);
	if (a->out)
		printf("\nevery sample's snapshot is in %s/ (NNN-a, NNN-b: memattach diff opens any two); "
		       "histograms: %s/ab.svg\n", a->out, a->out);
	if (a->svg)
		printf("histograms: %s\n", a->svg);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) != 0 && errno != ENOENT;
}

/* Remove DIR, the folder of snapshots this run made (without -o), and all in it. */
static void remove_tree(const char *dir)
{
	if (nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
		ma_cmd_note("ab", "could not remove all of %s", dir);
}

/* Is DIR a folder with nothing in it? */
static bool dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool empty = d != NULL;

	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			empty = false;
			break;
		}
	if (d)
		closedir(d);
	return empty;
}

static int check_args(struct ab_args *a)
{
	int rc;

	if (!a->cmd[0] || !a->cmd[1])
		return ma_usage_error("ab", "-a CMD and -b CMD are required");
	if (!a->pid_cmd == !a->match)
		return ma_usage_error("ab", "give exactly one of --pid CMD and --match REGEX");
	if (a->match) {
		if ((rc = regcomp(&a->re, a->match, REG_EXTENDED | REG_NOSUB))) {
			char msg[128];

			regerror(rc, &a->re, msg, sizeof(msg));
			return ma_usage_error("ab", "--match %s: %s", a->match, msg);
		}
		a->have_re = true;
	}
	if (a->stop_cmd && a->reuse)
		return ma_usage_error("ab", "--stop CMD stops each sample's daemon: it goes with "
				      "--lifecycle fresh, not reuse");
	if (a->out && mkdir(a->out, 0755) != 0 && errno != EEXIST)
		return ma_cmd_error("ab", MA_EXIT_FAIL, "-o %s: %s", a->out, strerror(errno));
	if (a->out && !dir_empty(a->out))
		return ma_cmd_error("ab", MA_EXIT_FAIL, "-o %s: not an empty folder (another run's samples "
				    "would mix with these); name a new one", a->out);
	if (a->out && !(a->tsv = open_samples_log(a->out)))
		return MA_EXIT_FAIL;
	a->snapdir = a->out;
	if (a->heap && !a->out) {
		snprintf(a->tmpdir, sizeof(a->tmpdir), "/tmp/memattach-ab.XXXXXX");
		if (!mkdtemp(a->tmpdir)) {
			a->tmpdir[0] = '\0';
			return ma_cmd_error("ab", MA_EXIT_FAIL, "a folder for the snapshots: %s", strerror(errno));
		}
		a->snapdir = a->tmpdir;
	}
	return 0;
}

struct svg_job {
	const struct ab_samples *sm;
	const struct ma_ab_compare *c;
};

static int histograms_into(FILE *f, void *ctx)
{
	const struct svg_job *job = ctx;
	struct ma_ab_metric m[NMETRICS];

	for (int k = 0; k < NMETRICS; k++)
		m[k] = (struct ma_ab_metric){ .name = metric_names[k], .a = job->sm->v[0][k],
					      .b = job->sm->v[1][k], .c = job->c[k], .bytes = true };
	ma_ab_svg(f, m, NMETRICS, "memattach ab: the samples of A and B per metric");
	return 0;
}

/* The histograms of every metric into a new file PATH (replaced only once complete). */
static int write_svg(const char *path, const struct ab_samples *sm, const struct ma_ab_compare *c)
{
	return ma_write_file("ab", path, histograms_into, &(struct svg_job){ sm, c });
}

int cmd_ab(int argc, char **argv)
{
	struct ab_args a = { .runs = 5, .o = { .deadline_ms = 2000, .call_timeout_ms = 60000 } };
	struct ab_samples sm = { 0 };
	struct ab_sites sites = { 0 };
	struct ma_ab_compare c[NMETRICS];
	size_t nsig = 0;
	int rc;

	ma_profcmd_init(&a.pc, "ab", 0);
	const struct ma_opt opts[] = {
		MA_STR_REQUIRED("-a", "CMD", &a.cmd[0], "side A: a shell command that starts the daemon "
				"and has it do the measured work, then returns"),
		MA_STR_REQUIRED("-b", "CMD", &a.cmd[1], "side B: the same for the other build or configuration"),
		MA_STR("--pid", "CMD", &a.pid_cmd, "a shell command printing the daemon's PID (run after "
		       "each side's command, MEMATTACH_AB_SIDE set)"),
		MA_STR("--match", "REGEX", &a.match, "take the newest jemalloc process whose name "
		       "matches REGEX (extended regex) instead"),
		{ .kind = MA_OPT_COUNT, .name = "--runs", .metavar = "N", .dst = &a.runs, .min = 2,
		  .max = MAX_RUNS, .help = "samples kept per side (default 5)" },
		MA_FLAG("--warmup", &a.warmup, "run each side once more first and discard that sample"),
		{ .kind = MA_OPT_CALL, .name = "--lifecycle", .metavar = "fresh|reuse", .takes_value = true,
		  .call = lifecycle_opt, .ctx = &a,
		  .help = "fresh (default): stop the daemon after each sample, so each starts anew; "
			  "reuse: leave it running (the side's command then drives the running one)" },
		MA_STR("--stop", "CMD", &a.stop_cmd, "a shell command that stops the daemon "
		       "(MEMATTACH_AB_PID and MEMATTACH_AB_SIDE set); default SIGTERM"),
		{ .kind = MA_OPT_CALL, .name = "--order", .metavar = "alternate|random", .takes_value = true,
		  .call = order_opt, .ctx = &a,
		  .help = "alternate (default): A, B, A, B...; random: each pair in a random order" },
		MA_FLAG("--json", &a.json, "machine-readable output: runs, metrics[{name, a[], b[], a_mean, "
			"b_mean, a_sd, b_sd, ratio, ci_low, ci_high, diff, diff_ci_low, diff_ci_high, "
			"significant}] (bytes)"),
		MA_FLAG("--heap", &a.heap, "also compare heap profiles: each sample's heap dump (the daemon "
			"runs with MALLOC_CONF=prof:true, or the side command runs 'memattach profile start "
			"PID' before the daemon's workload: then the agent's profile), by allocation site; "
			"the report names the sites whose B - A bytes have a 95% interval that excludes 0, "
			"largest first"),
		{ .kind = MA_OPT_CALL, .name = "--skip", .metavar = "REGEX", .takes_value = true,
		  .call = ma_profcmd_skip, .ctx = &a.pc,
		  .help = "with --heap: also drop a stack's leading frames matching REGEX (a program's "
			  "own allocation wrappers, e.g. 'zmalloc|zcalloc'), as aggregate's --skip; "
			  "repeatable" },
		MA_STR("-o", "DIR", &a.out, "keep every sample's snapshot (DIR/NNN-a, DIR/NNN-b) and "
		       "DIR/samples.tsv, written as the samples are taken, and the histograms in DIR/ab.svg"),
		MA_STR("--svg", "FILE", &a.svg, "one small histogram per metric, A and B side by side, "
		       "into FILE"),
		/* The borrow options but --tid: each sample is another process. */
		{ .kind = MA_OPT_CALL, .name = "--timeout", .metavar = "TIME", .takes_value = true,
		  .call = ma_opt_timeout, .ctx = &a.o,
		  .help = "each sample's reading of the daemon ends within TIME (milliseconds, or with "
			  "a unit: 500ms, 2s, 1m; default: 2000ms to find a thread, then each call its "
			  "own limit)" },
		{ .kind = MA_OPT_FLAG, .name = "--strict", .dst = &a.o.strict, .help = MA_HELP_STRICT },
		MA_OPTS_END,
	};
	const struct ma_cmd_spec spec = { .cmd = "ab", .about = about, .opts = opts,
					  .footer = MA_FOOTER_EXIT };

	if ((rc = ma_opts_parse(argc, argv, &spec))) {
		ma_profcmd_release(&a.pc);
		return rc < 0 ? MA_EXIT_OK : rc;
	}
	if ((rc = check_args(&a)))
		goto out;
	for (int s = 0; s < 2; s++)
		for (int m = 0; m < NMETRICS; m++)
			if (!(sm.v[s][m] = calloc((size_t)a.runs, sizeof(double)))) {
				rc = ma_cmd_error("ab", MA_EXIT_FAIL, "out of memory");
				goto out;
			}
	/* The side commands' daemons, once orphaned, become ours: see our_descendant(). */
	if (!a.reuse && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
		rc = ma_cmd_error("ab", MA_EXIT_FAIL, "PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
		goto out;
	}
	sites.runs = (size_t)a.runs;
	if ((rc = run_samples(&a, &sm, &sites)))
		goto out;
	for (int m = 0; m < NMETRICS; m++)
		ma_ab_compare(sm.v[0][m], sm.n[0], sm.v[1][m], sm.n[1], &c[m]);
	if (a.heap)
		nsig = rank_sites(&sites, sm.n);
	if (a.out) {
		char path[4200];

		snprintf(path, sizeof(path), "%s/ab.svg", a.out);
		if ((rc = write_svg(path, &sm, c)))
			goto out;
	}
	if (a.svg && (rc = write_svg(a.svg, &sm, c)))
		goto out;
	if (a.json)
		print_json(&a, &sm, c, &sites, nsig);
	else
		print_table(&a, &sm, c, &sites, nsig);
	rc = fflush(stdout) ? ma_cmd_error("ab", MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
out:
	for (int s = 0; s < 2; s++)
		for (int m = 0; m < NMETRICS; m++)
			free(sm.v[s][m]);
	if (a.have_re)
		regfree(&a.re);
	sites_release(&sites);
	ma_profcmd_release(&a.pc);
	if (a.tsv)
		fclose(a.tsv);
	if (a.tmpdir[0])
		remove_tree(a.tmpdir);
	return rc;
}
