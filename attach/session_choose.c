/*
 * session_choose.c - choosing the thread to borrow: rounds over the
 * process's threads, best first, each judged by thread_try
 * (session_thread.c), until one is held or the run's deadline; the
 * refusal that says why none could be.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ma_error.h"
#include "remote.h"
#include "runclock.h"
#include "safepoint.h"
#include "session_int.h"

static bool wanted(const struct ma_session_opts *o, const struct ma_thread_info *ti)
{
	return o->tid == 0 || o->tid == ti->tid;
}

/*
 * The threads to try: all of them, best first, or just TID (one /proc
 * look, not a listing: flushing every thread's tcache stays linear).
 */
static int list_candidates(pid_t pid, pid_t tid, struct ma_thread_info **out, size_t *n)
{
	char path[64];

	if (!tid)
		return ma_list_threads(pid, out, n);
	*n = 0;
	if (!(*out = calloc(1, sizeof(**out))))
		return ma_fail(MA_E_NOMEM, "out of memory");
	snprintf(path, sizeof(path), "/proc/%d/task/%d", pid, tid);
	if (access(path, F_OK) == 0) {
		ma_read_thread_info(pid, tid, *out);
		*n = 1;
	}
	return 0;
}

/* Thread TID first if it ranks with the best of TI (sorted best first). */
static void prefer_first(struct ma_thread_info *ti, size_t n, pid_t tid)
{
	for (size_t k = 1; tid && k < n; k++) {
		struct ma_thread_info t = ti[k];

		if (t.tid != tid)
			continue;
		if (strcmp(ma_thread_rank_class(&t), ma_thread_rank_class(&ti[0])) == 0) {
			memmove(&ti[1], &ti[0], k * sizeof(ti[0]));
			ti[0] = t;
		}
		return;
	}
}

/* One round over the candidates: how each was refused. */
struct round_tally {
	size_t tried, hopeless, fresh, waits, busy; /* busy: refused for now only */
	pid_t fresh_tid, wait_tid;
	char wait_who[80], wait_in[40];
	char last[400]; /* the last refusal, any kind */
	char last_who[80], last_why[256];
	bool last_gone; /* LAST is an exited thread's */
	size_t tallied; /* refusals counted */
	char last_busy[400]; /* the last refusal that waiting may end */
};

/* Count TI's refusal (WHY, V as thread_try gave it) into T. */
static void tally_refusal(struct round_tally *t, const struct thread_verdict *v,
			  const struct ma_thread_info *ti, const char *why)
{
	/* An exited thread's refusal says least: it never hides another's (a tracer's). */
	bool gone = v->gone || v->rc == MA_E_EXITED;

	if (!gone || !t->tallied || t->last_gone) {
		snprintf(t->last, sizeof(t->last), "thread %d (%s): %s", ti->tid, ti->name, why);
		snprintf(t->last_who, sizeof(t->last_who), "thread %d (%s)", ti->tid, ti->name);
		snprintf(t->last_why, sizeof(t->last_why), "%s", why);
		t->last_gone = gone;
	}
	t->tallied++;
	t->hopeless += v->hopeless;
	if (v->eintr_wait && !t->waits++) {
		t->wait_tid = ti->tid;
		snprintf(t->wait_who, sizeof(t->wait_who), "thread %d (%s)", ti->tid, ti->name);
		if (ma_arch_syscall_name(v->eintr_nr))
			snprintf(t->wait_in, sizeof(t->wait_in), "%s", ma_arch_syscall_name(v->eintr_nr));
	}
	if (v->fresh) {
		t->fresh++;
		t->fresh_tid = ti->tid;
	}
	if (!v->hopeless && !v->eintr_wait) {
		t->busy++;
		snprintf(t->last_busy, sizeof(t->last_busy), "%s", t->last);
	}
}

/*
 * Every thread tried was refused for a reason no wait can end (T): say
 * which, and what would help instead of a longer --timeout.
 */
static int lasting_refusal(const struct ma_session *s, const struct ma_session_opts *o,
			   const struct round_tally *t)
{
	char tid[48] = "";

	if (t->waits) {
		if (!o->no_tid_option)
			snprintf(tid, sizeof(tid), "--tid %d borrows it, or ", t->wait_tid);
		return ma_fail(MA_E_NOSAFE,
			       "with --strict, no thread of process %d can be borrowed: %s%s is "
			       "blocked in %s, which a stop ends with EINTR (memattach issues it "
			       "again at once; only a memattach killed in between leaves the EINTR "
			       "to the program)%s; %sleave out --strict",
			       s->t->pid, t->wait_who, t->waits > 1 ? " (and others)" : "", t->wait_in,
			       t->tried > t->waits ? ", and the others are jemalloc's background "
						     "threads or never called into jemalloc" : "",
			       tid);
	}
	if (t->fresh) {
		if (o->no_tid_option)
			snprintf(tid, sizeof(tid), "this command never borrows such a thread");
		else
			snprintf(tid, sizeof(tid), "--tid %d borrows one anyway", t->fresh_tid);
		return ma_fail(MA_E_NOSAFE,
			       "no thread of process %d can be borrowed without leaving a trace: "
			       "the ones safe to borrow never called into jemalloc, and a call "
			       "would create their allocator state (a tcache; with "
			       "background_thread:true perhaps a background thread); %s",
			       s->t->pid, tid);
	}
	if (o->tid)
		return ma_fail(MA_E_NOSAFE, "%s cannot be borrowed: %s", t->last_who, t->last_why);
	return ma_fail(MA_E_NOSAFE, "no thread of process %d can be borrowed (last: %s)", s->t->pid,
		       t->last);
}

/* The deadline passed with some thread refused only for the moment (T->busy). */
static int deadline_refusal(const struct ma_session *s, const struct ma_session_opts *o,
			    const struct round_tally *t)
{
	size_t lasting = t->tried - t->busy;
	char others[160] = "";

	if (lasting)
		snprintf(others, sizeof(others), " (%zu other thread%s refused for reasons that "
			 "last)", lasting, lasting > 1 ? "s" : "");
	return ma_fail(MA_E_NOSAFE,
		       "no thread of process %d was safe to borrow within %d ms (last: %s)%s; "
		       "that may pass: try again, or give a longer --timeout",
		       s->t->pid, o->deadline_ms, t->last_busy, others);
}

/*
 * The run's deadline came in a round before thread number TRIED of N could
 * be stopped: the last full round (PREV) says why none could be borrowed,
 * else this one so far (T), else how far the run got.
 */
static int deadline_cut(const struct ma_session *s, const struct ma_session_opts *o,
			const struct round_tally *prev, const struct round_tally *t, size_t tried,
			size_t n)
{
	if (prev->busy)
		return deadline_refusal(s, o, prev);
	if (t->busy)
		return deadline_refusal(s, o, t);
	if (tried <= 1)
		return ma_fail(MA_E_NOSAFE, "the run's --timeout (%d ms) ran out before a thread "
			       "of process %d could be tried; give a longer --timeout",
			       o->deadline_ms, s->t->pid);
	return ma_fail(MA_E_NOSAFE, "the run's --timeout (%d ms) ran out after %zu of the %zu "
		       "threads of process %d were tried (none could be borrowed; last: %s); give "
		       "a longer --timeout", o->deadline_ms, tried - 1, n, s->t->pid, t->last);
}

static int choose_thread_loop(struct ma_session *s, const struct ma_session_opts *o)
{
	uint64_t deadline = ma_now_ns() + (uint64_t)ma_run_ms_left(o->deadline_ms) * 1000000ULL;
	char why[256] = "";
	bool seen = false, fresh = false;

	struct round_tally prev = { .busy = 0 };

	for (unsigned round = 0;; round++) {
		struct round_tally t = { .wait_in = "a wait", .last = "no thread found" };
		struct ma_thread_info *ti;
		size_t n;
		bool lasting;
		int rc = list_candidates(s->t->pid, o->tid, &ti, &n);

		if (rc)
			return rc;
		prefer_first(ti, n, o->prefer_tid);
		for (size_t i = 0; i < n; i++) {
			if (!wanted(o, &ti[i]))
				continue;
			seen = true;
			if (o->tid && ma_thread_is_jemalloc_bg(&ti[i])) {
				free(ti);
				return ma_fail(MA_E_NOSAFE,
					       "thread %d is one of jemalloc's background threads: it "
					       "runs inside jemalloc (and may hold its locks), so it is "
					       "never borrowed; give another --tid or none",
					       o->tid);
			}
			t.tried++;
			if (ma_thread_is_jemalloc_bg(&ti[i])) {
				/* It runs inside jemalloc: never borrowed, so never stopped. */
				t.hopeless++;
				continue;
			}
			/* A refusal says its own reason, never the previous thread's. */
			snprintf(why, sizeof(why), "refused without a reason recorded");
			struct thread_verdict v = thread_try(s, &ti[i], NULL, why, sizeof(why));

			rc = v.rc;
			fresh = v.fresh;
			if (rc == 0) {
				free(ti);
				return 0;
			}
			if (rc == MA_E_TIMEOUT && !s->seized) {
				/* The deadline came before this thread's stop. */
				size_t tried = t.tried;

				free(ti);
				ma_err_clear();
				return deadline_cut(s, o, &prev, &t, tried, n);
			}
			if (rc == MA_E_PERM || rc == MA_E_TRACED) {
				free(ti);
				return rc;
			}
			if (rc == MA_E_STOPPED) {
				/* No thread of a stopped process runs until SIGCONT: say so now. */
				free(ti);
				return ma_fail(MA_E_NOSAFE,
					       "process %d is stopped (SIGSTOP or Ctrl-Z); continue it "
					       "with 'kill -CONT %d' and run memattach again",
					       s->t->pid, s->t->pid);
			}
			if (rc == MA_E_EXITED && ma_process_exited(s->t->pid)) {
				free(ti);
				return ma_fail_if_exited(s->t->pid, rc);
			}
			if (rc == MA_E_EXITED && s->exec_seen) {
				free(ti);
				return rc; /* its message: the exec */
			}
			if (rc == MA_E_TIMEOUT && s->seized) {
				/* Stuck in an uninterruptible sleep: it stops when it can. */
				stops_add_straggler(s->t->pid, ti[i].tid, ti[i].eintr_wait);
				s->seized = false;
			}
			/* A failure (it exited...), not a verdict: its message says why. */
			if (rc != MA_E_NOSAFE && rc != MA_E_TIMEOUT && ma_errmsg()[0])
				snprintf(why, sizeof(why), "%s", ma_errmsg());
			ma_err_clear();
			tally_refusal(&t, &v, &ti[i], why);
		}
		free(ti);
		/* Waiting cannot help a thread that has exited or that another
		 * program traces: say so now rather than at the deadline. */
		if (o->tid && fresh)
			return ma_fail(MA_E_NOSTATE, "%s has never called into jemalloc (it has no "
				       "allocator state)", t.last_who);
		if (o->tid && !seen && ma_process_exited(s->t->pid))
			return ma_fail(MA_E_EXITED, "process %d exited", s->t->pid);
		if (o->tid && !seen)
			return ma_fail(MA_E_NOPROC, "thread %d is not a thread of process %d", o->tid,
				       s->t->pid);
		/*
		 * Every thread is either never borrowable or in a wait we do not
		 * stop (an event loop in epoll_wait, its helpers idle since they
		 * started): say so and how to go on, at once when none waits,
		 * else after a few rounds (the loop may run meanwhile, and be
		 * taken while it runs) or at the deadline.
		 */
		lasting = t.tried && t.busy == 0;
		if (lasting && (!t.waits || round >= 20 || ma_now_ns() >= deadline))
			return lasting_refusal(s, o, &t);
		if (ma_interrupted)
			return ma_fail(MA_E_NOSAFE, "interrupted while looking for a safe thread");
		if (ma_now_ns() >= deadline)
			return t.busy ? deadline_refusal(s, o, &t)
				      : ma_fail(MA_E_NOSAFE, "no thread of process %d found to borrow",
						s->t->pid);
		prev = t;
		/* Let the threads run a little: a lock holder finishes. */
		usleep(round < 20 ? 500 : 5000);
	}
}

int choose_thread(struct ma_session *s, const struct ma_session_opts *o)
{
	int rc;

	ma_unwind_prepare(); /* outside the holds; a failure is reported by the walk */
	stops_reaper_timer(true);
	rc = choose_thread_loop(s, o);
	stops_reaper_timer(false);
	return rc;
}
