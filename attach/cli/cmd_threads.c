/*
 * cmd_threads.c - memattach threads PID: each thread's stack and whether it
 * is safe to borrow for a jemalloc call.  Each thread is stopped only while
 * its own stack is unwound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "livesym.h"
#include "cmdutil.h"
#include "options.h"
#include "holdprio.h"
#include "commands.h"
#include "emit.h"
#include "format.h"
#include "ma_error.h"
#include "remote.h"
#include "safepoint.h"

static const char about[] =
	"List the threads of PID with their state, the syscall they are blocked\n"
	"in, their stack (unwound remotely, each thread stopped only while its\n"
	"own stack is read), and what a run with the same options would do with\n"
	"each:\n"
	"  SAFE               borrowed\n"
	"  UNSAFE             not borrowed: a frame in jemalloc (it may hold an\n"
	"                     allocator lock), no allocator state yet (a call\n"
	"                     would create it; --tid of another command borrows\n"
	"                     it anyway)...\n"
	"  OK, WAIT RE-ISSUED in epoll_wait or a like wait that a stop ends with\n"
	"                     EINTR: borrowed when no thread is safe, its wait\n"
	"                     issued again at once; not stopped to be looked at\n"
	"  ONLY WITH --tid    the same with --strict\n"
	"Threads are listed in the order memattach tries them: untimed waits,\n"
	"timed waits, uninterruptible, running, waits a stop ends with EINTR,\n"
	"jemalloc's background threads (never); among equals the one idle\n"
	"longest first, since borrowing it delays the least work (a serving\n"
	"thread that waits between requests has just run).\n";

/* --tid: keep only thread TID of TI (MA_E_NOPROC if PID has none such). */
static int keep_only(struct ma_thread_info *ti, size_t *n, pid_t tid, pid_t pid)
{
	for (size_t i = 0; i < *n; i++)
		if (ti[i].tid == tid) {
			ti[0] = ti[i];
			*n = 1;
			return 0;
		}
	return ma_fail(MA_E_NOPROC, "process %d has no thread %d", pid, tid);
}

static void describe_syscall(long nr, char *buf, size_t len)
{
	const char *n = ma_arch_syscall_name(nr);

	if (nr == -2)
		snprintf(buf, len, "running");
	else if (nr < 0)
		snprintf(buf, len, "not in a syscall");
	else if (n)
		snprintf(buf, len, "in %s", n);
	else
		snprintf(buf, len, "in syscall %ld", nr);
}

struct thread_report {
	struct ma_thread_info ti;
	struct ma_backtrace bt;
	enum ma_verdict verdict;
	char why[256];
};

/* The verdict column: what a run with the same options would do with the thread. */
static const char *verdict_text(enum ma_verdict v)
{
	switch (v) {
	case MA_VERDICT_SAFE: return "SAFE";
	case MA_VERDICT_EINTR_WAIT: return "OK, WAIT RE-ISSUED";
	case MA_VERDICT_NAMED_ONLY: return "ONLY WITH --tid";
	default: return "UNSAFE";
	}
}

static const char *verdict_key(enum ma_verdict v)
{
	switch (v) {
	case MA_VERDICT_SAFE: return "safe";
	case MA_VERDICT_EINTR_WAIT: return "wait_reissued";
	case MA_VERDICT_NAMED_ONLY: return "only_with_tid";
	default: return "unsafe";
	}
}

/* FRAME's object: the path of the mapping, as /proc/PID/maps shows it. */
static const char *frame_object(const struct ma_livesym *ls, const struct ma_frame *f)
{
	const struct ma_mapping *m;

	if (f && f->obj != MA_NONE)
		return ls->sym.objs[f->obj].dump_path;
	m = f ? ma_target_mapping_at(ls->t, f->pc) : NULL;
	return m ? m->path : NULL;
}

static void print_frames_json(struct ma_json *j, struct ma_livesym *ls,
			      const struct ma_backtrace *bt)
{
	ma_json_arr_open(j, "frames");
	for (size_t k = 0; k < bt->n; k++) {
		const struct ma_frame *f = ma_livesym_frame(ls, bt->ip[k], k > 0);
		bool named = f && f->named;

		ma_json_obj_open(j, NULL);
		ma_json_u64(j, "ip", bt->ip[k]);
		ma_json_str(j, "function", named ? ma_sym_func_name(&ls->sym, f->func) : NULL);
		ma_json_u64(j, "offset", named ? f->sym_off + (k ? 1 : 0) : 0);
		ma_json_str(j, "object", frame_object(ls, f));
		ma_json_bool(j, "jemalloc", ma_target_in_jemalloc(ls->t, k ? bt->ip[k] - 1 : bt->ip[k]));
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

/* Why the thread is where it is in the borrow order: its class, how long idle. */
static void describe_order(const struct thread_report *r, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s", ma_thread_rank_class(&r->ti));

	if (r->ti.idle_ns && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, ", idle %.3f s", (double)r->ti.idle_ns / 1e9);
}

static void print_json(const struct ma_target *t, struct thread_report *r, size_t n,
		       struct ma_livesym *ls)
{
	struct ma_json j;
	char sc[64];

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_i64(&j, "pid", t->pid);
	ma_json_str(&j, "jemalloc_object", t->je.object);
	ma_json_arr_open(&j, "threads");
	for (size_t i = 0; i < n; i++) {
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "tid", r[i].ti.tid);
		ma_json_str(&j, "name", r[i].ti.name);
		snprintf(sc, sizeof(sc), "%c", r[i].ti.state ? r[i].ti.state : '?');
		ma_json_str(&j, "state", sc);
		ma_json_i64(&j, "syscall", r[i].ti.syscall);
		ma_json_bool(&j, "safe", r[i].verdict == MA_VERDICT_SAFE);
		ma_json_str(&j, "verdict", verdict_key(r[i].verdict));
		ma_json_str(&j, "reason", r[i].why);
		ma_json_u64(&j, "order", i + 1);
		ma_json_str(&j, "order_class", ma_thread_rank_class(&r[i].ti));
		ma_json_u64(&j, "idle_ns", r[i].ti.idle_ns);
		print_frames_json(&j, ls, &r[i].bt);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* Where a thread's header and a frame go on when longer than a line. */
#define THREAD_HANG 4
#define FRAME_HANG 6

/* "function+0xoff (object)" or "0xip (object)", the object under it if both do not fit. */
static void print_frame_text(struct ma_livesym *ls, const struct ma_backtrace *bt, size_t k)
{
	const struct ma_frame *f = ma_livesym_frame(ls, bt->ip[k], k > 0);
	const char *obj = frame_object(ls, f);
	uint64_t pc = k ? bt->ip[k] - 1 : bt->ip[k];
	char lead[16], *name = NULL, *where = NULL;
	int a, b;

	snprintf(lead, sizeof(lead), "  #%-2zu ", k);
	if (f && f->named)
		a = asprintf(&name, "%s+0x%llx", ma_printable(ma_sym_func_name(&ls->sym, f->func)),
			     (unsigned long long)(f->sym_off + (k ? 1 : 0)));
	else
		a = asprintf(&name, "0x%llx", (unsigned long long)bt->ip[k]);
	b = asprintf(&where, "(%s)%s", obj ? ma_printable(obj) : "?",
		     ma_target_in_jemalloc(ls->t, pc) ? "  [jemalloc]" : "");
	if (a < 0)
		name = NULL; /* undefined after a failed asprintf */
	if (b < 0)
		where = NULL;
	if (name && where)
		ma_print_named(lead, name, where, FRAME_HANG);
	else
		printf("%s0x%llx\n", lead, (unsigned long long)bt->ip[k]); /* out of memory */
	free(name);
	free(where);
}

static void print_text(const struct ma_target *t, struct thread_report *r, size_t n,
		       struct ma_livesym *ls)
{
	unsigned nsafe = 0, nwait = 0, nnamed = 0;
	char sc[64], order[96];

	char head[600];
	int len;

	for (size_t i = 0; i < n; i++) {
		nsafe += r[i].verdict == MA_VERDICT_SAFE;
		nwait += r[i].verdict == MA_VERDICT_EINTR_WAIT;
		nnamed += r[i].verdict == MA_VERDICT_NAMED_ONLY;
	}
	len = snprintf(head, sizeof(head), "pid %d: %zu thread%s, %u safe to borrow", t->pid, n,
		       n == 1 ? "" : "s", nsafe);
	if (nwait && len < (int)sizeof(head))
		len += snprintf(head + len, sizeof(head) - len,
				", %u borrowed if none is (its wait re-issued)", nwait);
	if (nnamed && len < (int)sizeof(head))
		snprintf(head + len, sizeof(head) - len, ", %u more only with --tid (--strict)", nnamed);
	ma_print_wrapped(2, "%s; jemalloc in %s\n", head, ma_printable(t->je.object));
	for (size_t i = 0; i < n; i++) {
		describe_syscall(r[i].ti.syscall, sc, sizeof(sc));
		describe_order(&r[i], order, sizeof(order));
		ma_print_wrapped(THREAD_HANG, "\nthread %d \"%s\" state %c, %s: %s (%s)\n",
				 r[i].ti.tid, ma_printable(r[i].ti.name),
				 r[i].ti.state ? r[i].ti.state : '?', sc,
				 verdict_text(r[i].verdict), ma_printable(r[i].why));
		printf("  borrow order %zu: %s\n", i + 1, order);
		for (size_t k = 0; k < r[i].bt.n; k++)
			print_frame_text(ls, &r[i].bt, k);
	}
}

/* Every frame to be named, looked up at once (a big binary's symbols are read once). */
static int prepare_names(struct ma_livesym *ls, const struct thread_report *r, size_t n)
{
	size_t nkeys = 0, k = 0;
	uint64_t *keys;
	int rc;

	for (size_t i = 0; i < n; i++)
		nkeys += r[i].bt.n;
	if (!(keys = malloc((nkeys ? nkeys : 1) * sizeof(*keys))))
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		for (size_t f = 0; f < r[i].bt.n; f++)
			keys[k++] = ma_livesym_key(r[i].bt.ip[f], f > 0);
	rc = ma_livesym_prepare(ls, keys, nkeys);
	free(keys);
	return rc;
}

int cmd_threads(int argc, char **argv)
{
	struct ma_thread_info *ti = NULL;
	struct thread_report *r = NULL;
	struct ma_livesym ls;
	struct ma_live l = { 0 };
	bool json = false;
	pid_t pid = 0;
	size_t n = 0;
	int rc;

	struct ma_session_opts o = { .deadline_ms = 5000 };
	const struct ma_opt opts[] = {
		MA_FLAG("--json", &json, "machine-readable output"),
		{ .kind = MA_OPT_CALL, .name = "--tid", .metavar = "TID", .takes_value = true,
		  .call = ma_opt_tid, .ctx = &o, .help = "only that thread" },
		{ .kind = MA_OPT_CALL, .name = "--timeout", .metavar = "TIME", .takes_value = true,
		  .call = ma_opt_timeout, .ctx = &o,
		  .help = "end the whole run within TIME (milliseconds, or with a unit: 500ms, 2s; "
			  "default: each thread's look waits up to 5s for another memattach run on PID "
			  "to end)" },
		MA_FLAG("--strict", &o.strict,
			"the verdicts of a run with --strict (threads itself never stops a thread in "
			"such a wait)"),
		{ .kind = MA_OPT_CALL, .name = "--allow-eintr-wait", .call = ma_opt_allow_eintr,
		  .ctx = &o, .hidden = true },
		MA_OPTS_END,
	};

	if ((rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){ .cmd = argv[0], .args = "PID",
								   .about = about, .opts = opts,
								   .pid = &pid })))
		return rc < 0 ? MA_EXIT_OK : rc;
	if (!pid) {
		return ma_usage_error(argv[0], "a PID is required");
	}
	/* Only the target: no thread is borrowed, each is stopped just to be looked at. */
	ma_run_deadline_set(o.run_ms);
	ma_run_priority_raise();
	if ((rc = ma_live_open(&l, pid)) || (rc = ma_fail_if_exited(pid, ma_list_threads(pid, &ti, &n))))
		goto out;
	if (o.tid && (rc = keep_only(ti, &n, o.tid, pid)))
		goto out;
	if (!(r = calloc(n ? n : 1, sizeof(*r)))) {
		rc = ma_fail(MA_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && !ma_interrupted; i++) {
		r[i].ti = ti[i];
		rc = ma_inspect_thread(&l.t, &ti[i], o.deadline_ms, o.strict ? MA_LOOK_STRICT : 0, &r[i].bt, r[i].why,
				       sizeof(r[i].why), &r[i].verdict);
		if (rc == MA_E_PERM || rc == MA_E_TRACED)
			break;
		if (rc) {
			snprintf(r[i].why, sizeof(r[i].why), "%s", ma_errmsg());
			ma_err_clear();
			rc = 0;
		}
	}
	ma_unwind_release();
	/* A table of a process that exited meanwhile would list threads as "went away". */
	if (!rc && ma_process_exited(pid))
		rc = MA_E_EXITED;
	if ((rc = ma_fail_if_exited(pid, rc)) || (rc = ma_livesym_init(&ls, &l.t)))
		goto out;
	if ((rc = prepare_names(&ls, r, n))) {
		ma_livesym_release(&ls);
		goto out;
	}
	if (json)
		print_json(&l.t, r, n, &ls);
	else
		print_text(&l.t, r, n, &ls);
	ma_livesym_release(&ls);
out:
	if (rc && (rc = ma_live_fail_if_exec(&l, rc))) /* an exec explains it: say that */
		ma_cmd_error(argv[0], MA_EXIT_FAIL, "%s", ma_errmsg());
	free(r);
	free(ti);
	ma_live_end(&l);
	return rc ? MA_EXIT_FAIL : MA_EXIT_OK;
}
