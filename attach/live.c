/*
 * live.c - one visit to a live target (live.h).
 */
#include <string.h>

#include "live.h"
#include "ma_error.h"
#include "safepoint.h"

int ma_live_open(struct ma_live *l, pid_t pid)
{
	int rc;

	memset(l, 0, sizeof(*l));
	ma_install_signal_guards();
	l->open = true; /* a half-read target (maps) is released by ma_live_end too */
	if ((rc = ma_target_open(&l->t, pid)))
		return rc;
	return ma_fail_if_exited(pid, ma_target_find_jemalloc(&l->t));
}

int ma_live_borrow(struct ma_live *l, const struct ma_session_opts *o)
{
	struct ma_session_opts again = *o;
	int rc;

	if (!again.prefer_tid)
		again.prefer_tid = l->last_tid;
	/* a failed open holds nothing */
	rc = ma_fail_if_exited(l->t.pid, ma_session_open(&l->s, &l->t, &again));
	l->borrowed = rc == 0;
	if (l->borrowed)
		l->last_tid = l->s.tid;
	return rc;
}

int ma_live_begin(struct ma_live *l, pid_t pid, const struct ma_session_opts *o,
		  ma_live_prep_fn prep, void *ctx)
{
	int rc;

	ma_run_deadline_set(o->run_ms); /* the run starts here */
	if ((rc = ma_live_open(l, pid)) ||
	    (prep && (rc = ma_fail_if_exited(pid, prep(&l->t, ctx)))) || (rc = ma_live_borrow(l, o)))
		ma_live_end(l);
	return rc;
}

int ma_live_restore(struct ma_live *l)
{
	int rc;

	if (!l->borrowed)
		return 0;
	l->borrowed = false;
	rc = ma_fail_if_exited(l->t.pid, ma_session_close(&l->s));
	ma_unwind_release(); /* the unwinder's view of this stop */
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
