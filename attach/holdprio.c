/*
 * holdprio.c - real-time priority for the hold only (holdprio.h).
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>

#include "holdprio.h"

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

static struct {
	bool raised;
	int policy;
	struct sched_param param;
	int nice;
	char got[32];
} prio = { .got = "unchanged" };

/* The lowest nice value this process may set (RLIMIT_NICE: 20 - limit). */
/*
 * The whole run's niceness: a larger share of a busy machine's CPU for
 * memattach's own few milliseconds of work (reading the target, symbols),
 * so that --timeout is its bound there too, without the real-time
 * priority that only the hold gets (a long symbol read must not keep the
 * target's other threads off a CPU).
 */
#define RUN_NICE (-10)

static int lowest_permitted_nice(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NICE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return -20;
	return rl.rlim_cur >= 40 ? -20 : 20 - (int)rl.rlim_cur;
}

void ma_run_priority_raise(void)
{
	int want = lowest_permitted_nice(), now;

	if (want < RUN_NICE)
		want = RUN_NICE;
	errno = 0;
	now = getpriority(PRIO_PROCESS, 0);
	if (errno == 0 && want < now)
		setpriority(PRIO_PROCESS, 0, want); /* not permitted: the run goes on as it is */
}

void ma_hold_priority_raise(void)
{
	/* Reset on fork: nothing memattach starts inherits the priority. */
	struct sched_param fifo = { .sched_priority = 1 };
	int lowest;

	if (prio.raised)
		return;
	prio.policy = sched_getscheduler(0);
	if (prio.policy < 0 || sched_getparam(0, &prio.param) != 0)
		return;
	errno = 0;
	prio.nice = getpriority(PRIO_PROCESS, 0);
	if (errno)
		return;
	if (prio.policy == SCHED_FIFO || prio.policy == SCHED_RR) {
		snprintf(prio.got, sizeof(prio.got), "unchanged"); /* real-time already */
		return;
	}
	if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo) == 0) {
		prio.raised = true;
		snprintf(prio.got, sizeof(prio.got), "SCHED_FIFO 1");
		return;
	}
	lowest = lowest_permitted_nice();
	if (lowest < prio.nice && setpriority(PRIO_PROCESS, 0, lowest) == 0) {
		prio.raised = true;
		snprintf(prio.got, sizeof(prio.got), "nice %d", lowest);
		return;
	}
	snprintf(prio.got, sizeof(prio.got), "unchanged");
}

void ma_hold_priority_drop(void)
{
	if (!prio.raised)
		return;
	prio.raised = false;
	sched_setscheduler(0, prio.policy, &prio.param);
	setpriority(PRIO_PROCESS, 0, prio.nice);
}

const char *ma_hold_priority_got(void)
{
	return prio.got;
}
