/*
 * cmd_heap_dump.c - memattach heap-dump PID -o FILE [--activate]: a
 * jemalloc heap profile of a live process, taken through a memfd.
 */
#include <stdio.h>
#include <string.h>

#include "capture.h"
#include "fragctl.h"
#include "cmdutil.h"
#include "options.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "jectl.h"
#include "ma_error.h"

static const char about[] =
	"Write a jemalloc heap profile (heap_v2) of the running process PID to FILE,\n"
	"as 'prof.dump' inside it.  The target writes into a memfd that only\n"
	"memattach reads (via /proc/PID/fd), never to a path on disk: this works\n"
	"for a process in another mount namespace and leaves nothing behind.\n"
	"FILE appears only when complete.  The process must have been started\n"
	"with MALLOC_CONF=prof:true,prof_active:true,prof_final:false (or\n"
	"_RJEM_MALLOC_CONF for Rust's tikv-jemallocator), or be profiled by\n"
	"'memattach profile start PID' (then the dump holds the allocations made\n"
	"since that start, live and cumulative, at its --rate).  Read the dump\n"
	"with 'memattach aggregate FILE'.\n";

struct heap_dump {
	const char *cmd;
	bool activate, json, agent_only;
	struct ma_outfile of;
	struct ma_je_stats st;
	struct ma_agent_profile agent; /* the agent's profile was written (rate non-zero) */
	size_t n; /* bytes written */
	pid_t tid; /* the borrowed thread and how long it was held */
	uint64_t held_ns;
};

/* Read the stats, then dump into the outfile.  Message on failure. */
static int dump(struct ma_session *s, void *ctx)
{
	struct heap_dump *d = ctx;
	const struct ma_je_stats *st = &d->st;
	const char *cmd = d->cmd;
	bool on = true;
	int rc;

	if ((rc = ma_collect_stats(s, &d->st)))
		return rc;
	if (d->agent_only || (!st->opt_prof && ma_agent_profiling(s->t)))
		return ma_capture_agent_heap_dump(s->t, d->of.fd, &d->n, &d->agent);
	if (!st->opt_prof)
		return ma_fail(MA_E_JEMALLOC,
			       "process %d was not started with heap profiling; 'memattach profile "
			       "start %d' profiles it from now on without a restart, or restart it with %s",
			       s->t->pid, s->t->pid, ma_prof_restart_hint(s->t));
	if (!st->prof_active && d->activate) {
		if ((rc = ma_mallctl_write(s, "prof.active", &on, sizeof(on))))
			return rc;
		ma_cmd_note(cmd, "prof.active set to true: the profile holds only allocations "
			    "sampled from now on");
	} else if (!st->prof_active) {
		ma_cmd_note(cmd, "warning: profiling is inactive (prof.active=false): the dump "
			    "holds only what was sampled while it was active; --activate turns "
			    "it on");
	}
	return ma_capture_heap_dump(s, st, d->of.fd, &d->n, &d->agent);
}

/* The thread is back: commit the file. */
static int commit(struct ma_live *l, void *ctx)
{
	struct heap_dump *d = ctx;

	d->tid = l->s.tid;
	d->held_ns = l->s.stopped_ns;
	if (ma_outfile_commit(&d->of))
		return ma_cmd_error(d->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	return MA_EXIT_OK;
}

int cmd_heap_dump(int argc, char **argv)
{
	struct ma_session_opts o = { .deadline_ms = 2000 };
	struct heap_dump d = { .cmd = argv[0] };
	const char *out = NULL;
	char sz[32];
	pid_t pid = 0;
	int rc;

	const struct ma_opt opts[] = {
		MA_STR_REQUIRED("-o", "FILE", &out, "output file (required; - for the standard output)"),
		MA_FLAG("--activate", &d.activate,
			"if profiling is enabled but inactive (prof_active:false), set prof.active=true "
			"first (the dump then only shows allocations made after this moment)"),
		MA_FLAG("--agent", &d.agent_only,
			"write the profile of memattach's agent (profile start) even where jemalloc's "
			"own profiling is on (to compare the two)"),
		MA_FLAG("--json", &d.json,
			"what was written, as JSON: pid, file, bytes, lg_prof_sample, tid, held_ns (not "
			"with -o -)"),
		MA_OPTS_BORROW(&o),
		MA_OPTS_END,
	};

	if ((rc = ma_opts_parse_pid(argc, argv, about, opts, &pid)))
		return rc < 0 ? MA_EXIT_OK : rc;
	if ((rc = ma_check_pid_outfile(argv[0], pid, out, d.json)))
		return rc;
	if (ma_outfile_open(&d.of, out))
		return ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s", ma_errmsg());
	if ((rc = ma_live_run(&(struct ma_live_cmd){ .cmd = argv[0], .pid = pid, .o = &o,
						     .body = dump, .report = commit },
			      &d))) {
		ma_outfile_abort(&d.of);
		return rc;
	}
	if (d.json) {
		struct ma_json j;

		ma_json_init(&j, stdout);
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "pid", pid);
		ma_json_str(&j, "file", out);
		ma_json_u64(&j, "bytes", d.n);
		ma_json_str(&j, "source", d.agent.rate ? "agent" : "jemalloc");
		if (d.agent.rate) {
			ma_json_u64(&j, "rate", d.agent.rate);
			ma_json_u64(&j, "since_unix_ns", d.agent.started_unix_ns);
			ma_json_u64(&j, "samples", d.agent.live_samples);
			ma_json_u64(&j, "samples_dropped", d.agent.dropped_full);
			ma_json_u64(&j, "unrecorded_bytes", d.agent.unrecorded_bytes);
		} else {
			ma_json_u64(&j, "lg_prof_sample", d.st.lg_prof_sample);
		}
		ma_json_i64(&j, "tid", d.tid);
		ma_json_u64(&j, "held_ns", d.held_ns);
		ma_json_obj_close(&j);
		ma_json_end(&j);
		return MA_EXIT_OK;
	}
	/* With -o -, the dump is the output: the summary goes with the messages. */
	if (d.agent.rate) {
		char since[64];

		ma_clock_time(d.agent.started_unix_ns, since, sizeof(since));
		ma_fprint_wrapped(ma_outfile_is_stdout(out) ? stderr : stdout, 2,
				  "wrote %s: %s heap profile from memattach's agent (allocations "
				  "since profile start at %s, one sample per %llu bytes; %.1f s ago)\n"
				  "thread %d held %.3f ms\n",
				  ma_outfile_is_stdout(out) ? "the standard output" : ma_printable(out),
				  ma_fmt_bytes(sz, sizeof(sz), d.n), since,
				  (unsigned long long)d.agent.rate,
				  (d.agent.captured_unix_ns - d.agent.started_unix_ns) / 1e9, d.tid,
				  d.held_ns / 1e6);
		if (d.agent.dropped_full || d.agent.unrecorded_bytes)
			ma_fprint_wrapped(stderr, 2, "memattach heap-dump: warning: the agent's "
					  "tables were full: %llu samples dropped, %llu sampled bytes "
					  "live without a stack (not in the dump)\n",
					  (unsigned long long)d.agent.dropped_full,
					  (unsigned long long)d.agent.unrecorded_bytes);
		return MA_EXIT_OK;
	}
	ma_fprint_wrapped(ma_outfile_is_stdout(out) ? stderr : stdout, 2,
			  "wrote %s: %s heap profile (sample period 2^%llu bytes)\n"
			  "thread %d held %.3f ms\n",
			  ma_outfile_is_stdout(out) ? "the standard output" : ma_printable(out),
			  ma_fmt_bytes(sz, sizeof(sz), d.n),
			 (unsigned long long)d.st.lg_prof_sample, d.tid, d.held_ns / 1e6);
	return MA_EXIT_OK;
}
