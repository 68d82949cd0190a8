/*
 * runclock.c - the monotonic clock and the run's bound (runclock.h).
 */
#include <time.h>

#include "runclock.h"

static uint64_t run_deadline_ns; /* 0: none */

uint64_t ma_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void ma_run_deadline_set(int ms)
{
	run_deadline_ns = ms > 0 ? ma_now_ns() + (uint64_t)ms * 1000000ULL : 0;
}

int ma_run_ms_left(int want_ms)
{
	uint64_t now, left;

	if (!run_deadline_ns)
		return want_ms;
	now = ma_now_ns();
	if (now >= run_deadline_ns)
		return 0;
	left = (run_deadline_ns - now + 999999ULL) / 1000000ULL;
	return left < (uint64_t)want_ms ? (int)left : want_ms;
}

bool ma_run_deadline_passed(void)
{
	return run_deadline_ns && ma_now_ns() >= run_deadline_ns;
}
