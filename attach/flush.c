/*
 * flush.c - empty every thread's tcache (thread.tcache.flush in each
 * thread that is safe to borrow), one short session per thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flush.h"
#include "jectl.h"
#include "ma_error.h"
#include "remote.h"
#include "runclock.h"
#include "safepoint.h"

int ma_flush_all_tcaches(struct ma_target *t, int deadline_ms, bool strict,
			 struct ma_flush_result *fr)
{
	struct ma_thread_info *ti = NULL;
	size_t n = 0;
	int rc;

	memset(fr, 0, sizeof(*fr));
	fr->done = true;
	if ((rc = ma_list_threads(t->pid, &ti, &n)))
		return rc;
	for (size_t i = 0; i < n && !ma_interrupted; i++) {
		struct ma_session_opts o = { .tid = ti[i].tid, .deadline_ms = deadline_ms,
					     .strict = strict, .visit = true };
		struct ma_session s;
		bool enabled = false;

		if (ma_run_deadline_passed()) {
			/* The rest are counted, not visited: the run must end now. */
			if (!fr->skipped)
				snprintf(fr->first_skipped, sizeof(fr->first_skipped),
					 "thread %d: the run's --timeout ran out", ti[i].tid);
			fr->threads += n - i;
			fr->skipped += n - i;
			break;
		}
		fr->threads++;
		if (strict && ma_thread_stop_ends_with_eintr(&ti[i])) {
			if (!fr->skipped)
				snprintf(fr->first_skipped, sizeof(fr->first_skipped),
					 "thread %d: blocked in a wait a stop ends with EINTR", ti[i].tid);
			fr->skipped++;
			fr->eintr_waits++;
			continue;
		}
		/* A thread busy in jemalloc now is skipped, never waited on long. */
		if ((rc = ma_session_open(&s, t, &o))) {
			if (rc == MA_E_EXITED || rc == MA_E_NOPROC) {
				fr->threads--;
			} else if (rc == MA_E_NOSTATE) {
				fr->no_tcache++; /* never allocated: nothing to flush, nothing created */
			} else {
				if (!fr->skipped)
					snprintf(fr->first_skipped, sizeof(fr->first_skipped),
						 "thread %d: %s", ti[i].tid, ma_errmsg());
				fr->skipped++;
			}
			ma_err_clear();
			continue;
		}
		rc = ma_mallctl_read(&s, "thread.tcache.enabled", &enabled, sizeof(enabled));
		if (!rc && enabled)
			rc = ma_mallctl_write(&s, "thread.tcache.flush", NULL, 0);
		if (rc) {
			if (!fr->skipped)
				snprintf(fr->first_skipped, sizeof(fr->first_skipped), "thread %d: %s",
					 ti[i].tid, ma_errmsg());
			fr->skipped++;
		} else if (enabled) {
			fr->flushed++;
		} else {
			fr->no_tcache++;
		}
		ma_err_clear();
		if (ma_session_close(&s))
			ma_err_clear();
	}
	free(ti);
	ma_unwind_release();
	return 0;
}
