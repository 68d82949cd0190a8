/*
 * live.c - one visit to a live target (live.h).
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "holdprio.h"
#include "live.h"
#include "runclock.h"
#include "testhooks.h"
#include "ma_error.h"
#include "safepoint.h"
#include "stubsite.h"

/* Does T map a dynamic loader (ld-*), and has it one thread only? */
static bool maybe_loading(const struct ma_target *t)
{
	char path[64];
	struct dirent *d;
	DIR *dir;
	int threads = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", t->pid);
	if (!ma_target_maps_loader(t) || !(dir = opendir(path)))
		return false;
	while (threads < 2 && (d = readdir(dir)))
		threads += d->d_name[0] != '.';
	closedir(dir);
	return threads == 1;
}

/*
 * Is T perhaps a program being loaded: its mappings changed within 10 ms,
 * or a dynamic loader mapped and one thread only (the loader may be
 * waiting for a CPU between two libraries)?
 */
static bool maps_moving(const struct ma_target *t)
{
	struct ma_target now;
	struct timespec pause = { 0, 10 * 1000000L };
	bool moved;

	nanosleep(&pause, NULL);
	if (ma_target_maps_now(t, &now) != 0) {
		ma_err_clear();
		return false;
	}
	moved = now.nmaps != t->nmaps || maybe_loading(t);
	ma_target_release(&now);
	return moved;
}

/*
 * Has the process exec'd since T was read, or is a thread of it in
 * execve?  Maps not as read tell an exec only while no thread is going:
 * a process being killed loses its maps too (its main thread exits first).
 */
static bool exec_seen(const struct ma_target *t)
{
	uint64_t mallctl = t->je.mallctl;

	if (ma_process_in_exec(t->pid))
		return true;
	return !ma_process_going(t->pid) && ma_target_maps_unchanged(t, &mallctl, 1) != 0;
}

int ma_live_fail_if_exec(struct ma_live *l, int rc)
{
	struct timespec pause = { 0, 10 * 1000000L };
	char why[512];
	bool exec = false;

	/*
	 * A failure while the process lives on (a thread gone, its maps not
	 * as read): did it exec?  Then that is what to say.  A thread gone
	 * may be the exec's doing before the exec shows: look a few times.
	 * While threads are going (a kill, whose threads may wait for a CPU
	 * on a busy machine), look for up to half a second: it ends as an
	 * exit or as an exec.
	 */
	if (rc == 0 || rc == MA_E_USAGE || !l->t.je.mallctl)
		return rc;
	snprintf(why, sizeof(why), "%s", ma_errmsg());
	for (int i = 0; !exec && i < 50; i++) {
		if (i && i >= (rc == MA_E_EXITED ? 5 : 1) && !ma_process_going(l->t.pid))
			break;
		if (i)
			nanosleep(&pause, NULL);
		if (ma_process_exited(l->t.pid))
			return ma_fail_if_exited(l->t.pid, ma_fail(rc, "%s", why));
		exec = exec_seen(&l->t);
	}
	if (!exec)
		return ma_fail_if_exited(l->t.pid, ma_fail(rc, "%s", why));
	ma_err_clear();
	l->exec_seen = true;
	return ma_fail(MA_E_EXITED, "process %d replaced its program (exec) while memattach attached; "
		       "run memattach again", l->t.pid);
}

int ma_live_open(struct ma_live *l, pid_t pid)
{
	int rc;

	memset(l, 0, sizeof(*l));
	ma_install_signal_guards();
	l->open = true; /* a half-read target (maps) is released by ma_live_end too */
	rc = ma_target_open(&l->t, pid);
	/*
	 * No mappings to read while the process lives, or only zombies seen:
	 * an exec between its old memory and its new one (a non-leader's exec
	 * leaves the leader a zombie until it takes its pid).  Look again (up
	 * to 5 times, 10 ms apart).
	 */
	for (int i = 0; i < 5 && ((rc == MA_E_PERM && !ma_process_exited(pid)) || rc == MA_E_ZOMBIE);
	     i++) {
		struct timespec pause = { 0, 10 * 1000000L };

		nanosleep(&pause, NULL);
		ma_err_clear();
		ma_target_release(&l->t);
		rc = ma_target_open(&l->t, pid);
	}
	if (rc)
		return rc;
	rc = ma_target_find_jemalloc(&l->t);
	/*
	 * No jemalloc in a process that needs it (DT_NEEDED) or whose maps
	 * are moving: one that just started or called exec, its loader still
	 * mapping libraries.  Look again (up to 10 times, 10 ms apart) rather
	 * than say it has none.
	 */
	for (int i = 0; rc == MA_E_NOJEMALLOC && i < 10; i++) {
		char why[512];

		snprintf(why, sizeof(why), "%s", ma_errmsg());
		if (l->t.je_pending) {
			struct timespec pause = { 0, 10 * 1000000L };

			nanosleep(&pause, NULL); /* its loader maps libjemalloc soon */
		} else if (!maps_moving(&l->t)) {
			ma_fail(rc, "%s", why); /* the look may have said something else */
			break;
		}
		ma_err_clear();
		ma_target_release(&l->t);
		if ((rc = ma_target_open(&l->t, pid)))
			return rc;
		rc = ma_target_find_jemalloc(&l->t);
	}
	if (rc == 0)
		rc = ma_stubsite_find(&l->t);
	return ma_fail_if_exited(pid, rc);
}

/* PID's threads, and how many of them are jemalloc's background threads (by name). */
static void count_threads(pid_t pid, int *threads, int *bg)
{
	char path[96], name[32];
	struct dirent *d;
	FILE *f;
	DIR *dir;

	*threads = *bg = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	if ((dir = opendir(path))) {
		while ((d = readdir(dir))) {
			if (d->d_name[0] == '.')
				continue;
			++*threads;
			snprintf(path, sizeof(path), "/proc/%d/task/%.20s/comm", pid, d->d_name);
			if ((f = fopen(path, "re"))) {
				if (fgets(name, sizeof(name), f) &&
				    strncmp(name, "jemalloc_bg_thd", 15) == 0)
					++*bg;
				fclose(f);
			}
		}
		closedir(dir);
	}
}

/* PID's threads, those of them that are jemalloc's background threads, and its mappings. */
static void count_process(pid_t pid, int *threads, int *bg, int *maps)
{
	char path[64];
	FILE *f;
	int c;

	count_threads(pid, threads, bg);
	*maps = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	if ((f = fopen(path, "re"))) {
		while ((c = getc(f)) != EOF)
			*maps += c == '\n';
		fclose(f);
	}
}

int ma_live_borrow(struct ma_live *l, const struct ma_session_opts *o)
{
	struct ma_session_opts again = *o;
	int rc;

	/* A named thread may have no allocator state: count what the process has now. */
	l->threads_before = -1;
	memset(&l->growth, 0, sizeof(l->growth));
	if (o->tid && o->fresh_ok)
		count_process(l->t.pid, &l->threads_before, &l->bg_before, &l->maps_before);

	if (!again.prefer_tid)
		again.prefer_tid = l->last_tid;
	/* a failed open holds nothing */
	rc = ma_live_fail_if_exec(l, ma_fail_if_exited(l->t.pid, ma_session_open(&l->s, &l->t, &again)));
	l->borrowed = rc == 0;
	if (l->borrowed)
		l->last_tid = l->s.tid;
	return rc;
}

/* A thread of our own made in a thread of the program, which then goes back: 0 or MA_E_*. */
static int make_own_thread_once(struct ma_live *l, const struct ma_session_opts *o)
{
	struct ma_session_opts maker = *o;
	char why[512];
	int rc, rc2;

	maker.data_size = 4096; /* on the thread's stack: the maker maps nothing */
	maker.for_dlopen = true; /* pthread_create takes the loader's TLS lock */
	maker.pass_setxid = true; /* ... and the thread-stack lock, which a setuid() holds */
	/* Set through the call too: a wait there on a lock of the loader gives it up (session_run.c). */
	l->t.for_thread_create = true;
	l->t.loader_lock_given_up = false;
	if ((rc = ma_live_borrow(l, &maker))) {
		l->t.for_thread_create = false;
		return rc;
	}
	/* pthread_create's syscalls (clone3, the new stack's mmap) are not judged against a filter. */
	rc = ma_session_filtered(&l->s) ? ma_fail(MA_E_SECCOMP, "the thread runs under seccomp")
					: ma_own_thread_make(&l->s, &l->own);
	snprintf(why, sizeof(why), "%s", rc ? ma_errmsg() : "");
	l->t.for_thread_create = false;
	rc2 = ma_live_restore(l);
	l->maker_hold_ns += l->s.stopped_ns;
	if (l->s.longest_stop_ns > l->maker_longest_ns) {
		l->maker_longest_ns = l->s.longest_stop_ns;
		l->maker_longest_cpu_wait_ns = l->s.longest_stop_cpu_wait_ns;
	}
	l->maker_tid = l->s.tid;
	if (rc || rc2)
		memset(&l->own, 0, sizeof(l->own)); /* one made sleeps out its time and exits */
	if (rc && why[0]) /* the call's reason, not what the give-back left */
		return ma_fail(rc, "%s", why);
	if (rc)
		return ma_fail(rc, "its call failed without a reason (code %d)", rc);
	return rc2;
}

/*
 * Our thread's first allocator call takes an arena, a new one where the
 * program has fewer threads than jemalloc has arenas; with jemalloc's
 * background threads on, jemalloc then starts one for that arena, and it
 * stays (redis-server: jemalloc-bg-thread is its default).  Their name
 * (jemalloc_bg_thd) shows them on: the work then stays in a program
 * thread, which has its arena.
 */
static bool jemalloc_background_threads(pid_t pid, char *why, size_t whylen)
{
	int threads, bg;

	count_threads(pid, &threads, &bg); /* not the maps: one read of each thread's name */
	if (!bg)
		return false;
	snprintf(why, whylen, "jemalloc's background threads are on (%d running): a thread of "
		 "memattach's own would get an arena of its own, and jemalloc would start a "
		 "background thread for it, which would stay", bg);
	return true;
}

/*
 * A program making threads without pause holds glibc's thread-stack lock
 * much of the time, and a maker whose first syscall waits for it gives
 * the call up (session_run.c: it cannot tell that lock's holder): a few
 * more tries, each a hold of a millisecond or so, a few ms apart, before
 * a thread of the program does all the work (tens of ms under churn).
 */
#define OWN_MAKE_TRIES 8

static int make_own_thread(struct ma_live *l, const struct ma_session_opts *o)
{
	int rc = 0;

	for (int i = 0; i < OWN_MAKE_TRIES; i++) {
		if (i)
			usleep(2000 * i);
		if ((rc = make_own_thread_once(l, o)) == 0 || !l->t.loader_lock_given_up ||
		    ma_run_deadline_passed())
			break;
		l->own_tries_given_up++;
		if (i + 1 < OWN_MAKE_TRIES)
			ma_err_clear();
	}
	return rc;
}

/*
 * Made, and asleep.  A signal whose handler runs in it (glibc's SIGSETXID,
 * which every setuid() of the program sends to every thread) ends its
 * sleep, and it exits: a second and third thread are tried.
 */
#define OWN_ENDED_TRIES 3

static int make_asleep(struct ma_live *l, const struct ma_session_opts *o)
{
	int rc = 0;

	for (int i = 0; i < OWN_ENDED_TRIES; i++) {
		if ((rc = make_own_thread(l, o)))
			return rc;
		if ((rc = ma_own_thread_wait_asleep(l->t.pid, &l->own, 2000)) != MA_E_EXITED ||
		    ma_run_deadline_passed())
			return rc;
		memset(&l->own, 0, sizeof(l->own)); /* it ended */
		if (i + 1 < OWN_ENDED_TRIES)
			ma_err_clear();
	}
	return rc;
}

int ma_live_borrow_own(struct ma_live *l, const struct ma_session_opts *o)
{
	struct ma_session_opts mine = *o;
	/* The test build can take the borrowed path instead (=0), to compare. */
	const char *own = ma_test_env("OWN_THREAD");
	int rc;

	memset(&l->own, 0, sizeof(l->own));
	l->own_used = false;
	l->own_why[0] = '\0';
	l->maker_hold_ns = l->maker_longest_ns = l->maker_longest_cpu_wait_ns = 0;
	l->maker_tid = 0;
	l->own_tries_given_up = 0;
	if (own && own[0] == '0')
		return ma_live_borrow(l, o);
	if (!o->tid && !ma_process_thread_room(l->t.pid, l->own_why, sizeof(l->own_why)))
		return ma_live_borrow(l, o);
	if (!o->tid && jemalloc_background_threads(l->t.pid, l->own_why, sizeof(l->own_why)))
		return ma_live_borrow(l, o);
	/* Its stack may be new: the maps are read again for its judgement. */
	const char *step = o->tid ? "--tid names the thread"
			 : !ma_own_thread_possible(&l->t)
			 ? "no pthread_create and its attribute setters found in the target's libc "
			   "(glibc 2.34 or later has them)"
			 : make_asleep(l, o) ? "making it failed"
			 : ma_target_maps_refresh(&l->t) ? "the maps could not be read again"
			 : NULL;

	if (step) {
		snprintf(l->own_why, sizeof(l->own_why), "%s",
			 !o->tid && ma_errmsg()[0] ? ma_errmsg() : step);
		ma_err_clear();
		ma_own_thread_end(l->t.pid, &l->own); /* if made and asleep; else it sleeps out its time */
		return ma_live_borrow(l, o);
	}
	mine.tid = l->own.tid;
	mine.own_tp = l->own.pd;
	mine.fresh_ok = true;
	mine.pass_setxid = true; /* a setuid() of the program is not held up by our work */
	mine.strict = false;
	if ((rc = ma_live_borrow(l, &mine)) == 0) {
		l->threads_before = -1; /* its allocator state is ours to create: no note */
		l->own_used = true;
		return 0;
	}
	if (ma_thread_going(l->t.pid, l->own.tid))
		snprintf(l->own_why, sizeof(l->own_why), "memattach's thread %d ended before it could "
			 "be used (a signal's handler, such as glibc's SIGSETXID that each setuid() sends, "
			 "ends its sleep)", l->own.tid);
	else
		snprintf(l->own_why, sizeof(l->own_why), "%s", ma_errmsg());
	ma_own_thread_end(l->t.pid, &l->own);
	ma_err_clear();
	return ma_live_borrow(l, o);
}

int ma_live_begin(struct ma_live *l, pid_t pid, const struct ma_session_opts *o,
		  ma_live_prep_fn prep, void *ctx)
{
	int rc;

	ma_run_deadline_set(o->run_ms); /* the run starts here */
	ma_run_priority_raise();
	if ((rc = ma_live_fail_if_exec(l, ma_live_open(l, pid))) ||
	    (prep && (rc = ma_live_fail_if_exec(l, ma_fail_if_exited(pid, prep(&l->t, ctx))))) ||
	    (rc = o->own_thread ? ma_live_borrow_own(l, o) : ma_live_borrow(l, o)))
		ma_live_end(l);
	/* A step that failed without a word, on a process that is gone: that is the news. */
	if (rc && !ma_errmsg()[0] && ma_process_exited(pid))
		rc = ma_fail(MA_E_EXITED, "process %d exited during the run", pid);
	return rc;
}

int ma_live_restore(struct ma_live *l)
{
	int rc;

	if (!l->borrowed)
		return 0;
	l->borrowed = false;
	rc = ma_fail_if_exited(l->t.pid, ma_session_close(&l->s));
	ma_unwind_release();
	if (l->own.tid && l->s.tid == l->own.tid)
		ma_own_thread_end(l->t.pid, &l->own);
	if (l->s.creates_state && l->threads_before >= 0) {
		int threads, bg, maps;

		count_process(l->t.pid, &threads, &bg, &maps);
		l->growth = (struct ma_live_growth){ true, threads - l->threads_before,
						     bg - l->bg_before, maps - l->maps_before };
	} /* the unwinder's view of this stop */
	return rc;
}

int ma_live_end(struct ma_live *l)
{
	int rc = ma_live_restore(l);

	if (l->open)
		ma_target_release(&l->t);
	l->open = false;
	ma_run_deadline_set(0);
	return rc;
}

uint64_t ma_live_program_hold_ns(const struct ma_live *l)
{
	return l->maker_hold_ns + (l->own_used ? 0 : l->s.stopped_ns);
}

uint64_t ma_live_program_longest_hold_ns(const struct ma_live *l)
{
	uint64_t s = l->own_used ? 0 : l->s.longest_stop_ns;

	return l->maker_longest_ns > s ? l->maker_longest_ns : s;
}

uint64_t ma_live_program_longest_hold_cpu_wait_ns(const struct ma_live *l)
{
	uint64_t s = l->own_used ? 0 : l->s.longest_stop_ns;

	return l->maker_longest_ns > s ? l->maker_longest_cpu_wait_ns
				       : l->own_used ? 0 : l->s.longest_stop_cpu_wait_ns;
}
