/*
 * runclock.c - the monotonic clock and the run's bound (runclock.h).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runclock.h"

volatile sig_atomic_t ma_interrupted;

static uint64_t run_deadline_ns; /* 0: none */

uint64_t ma_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t ma_unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * How long this process has been running (0 unknown): its start in
 * /proc/self/stat, in clock ticks since boot, against CLOCK_BOOTTIME.
 */
static uint64_t since_start_ns(void)
{
	char buf[1024], *p;
	unsigned long long start;
	struct timespec boot;
	uint64_t start_ns, now_ns;
	long tick = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/self/stat", "re");
	size_t n;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (!(p = strrchr(buf, ')')) || tick <= 0 ||
	    sscanf(p + 1, " %*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
		   &start) != 1 ||
	    clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
		return 0;
	start_ns = start * (1000000000ULL / (uint64_t)tick);
	now_ns = (uint64_t)boot.tv_sec * 1000000000ULL + (uint64_t)boot.tv_nsec;
	return now_ns > start_ns ? now_ns - start_ns : 0;
}

void ma_run_deadline_set(int ms)
{
	static bool first = true;
	uint64_t now = ma_now_ns(), spent = 0;

	/*
	 * The first run of a process counts from the process's start: its
	 * loading and reading of the target are part of what the user timed
	 * (on a loaded machine they alone took 0.2 s).  Later runs (watch,
	 * export) count from their own start.
	 */
	if (first && ms > 0) {
		spent = since_start_ns();
		if (spent > (uint64_t)ms * 1000000ULL / 2)
			spent = (uint64_t)ms * 1000000ULL / 2; /* never more than half of it */
	}
	first = first && ms <= 0;
	run_deadline_ns = ms > 0 ? now - spent + (uint64_t)ms * 1000000ULL : 0;
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
