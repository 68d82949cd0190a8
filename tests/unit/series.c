/*
 * Unit test: round axis ticks of the watch chart (ma_nice_step) and the
 * chart's tick labels for a known series.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "series.h"

static void test_steps(void)
{
	CHECK("0..237 in 5 ticks: 50", ma_nice_step(237, 5) == 50);
	CHECK("0..33.7 in 5 ticks: 10", ma_nice_step(33.7, 5) == 10);
	CHECK("0..1 in 5 ticks: 0.2", ma_nice_step(1, 5) > 0.199 && ma_nice_step(1, 5) < 0.201);
	CHECK("0..9.5 in 6 ticks: 2", ma_nice_step(9.5, 6) == 2);
	CHECK("0..1000 in 5 ticks: 200", ma_nice_step(1000, 5) == 200);
	CHECK("nothing to show: 0", ma_nice_step(0, 5) == 0);
}

/* Every tick label of a chart whose values reach 237 MiB over 9.5 s is round. */
static void test_chart(void)
{
	struct ma_series s = { 0 };
	struct ma_sample x = { 0 };
	char *buf = NULL, *p;
	size_t len = 0;
	int yticks = 0, xticks = 0, round = 1;
	FILE *f;

	for (int i = 0; i <= 19; i++) {
		x.t_ms = (uint64_t)i * 500;
		x.rss = x.hwm = (uint64_t)(237.0 * i / 19 * 1048576);
		ma_series_add(&s, &x);
	}
	f = open_memstream(&buf, &len);
	ma_series_svg(f, &s, "t");
	fclose(f);
	for (p = buf; (p = strstr(p, "class=\"ytick\"")); p++) {
		double v = 0;
		char unit[8] = "";

		yticks++;
		if (sscanf(strchr(p, '>') + 1, "%lf %7[A-Za-z]", &v, unit) >= 1 &&
		    (long)v % 50 != 0)
			round = 0;
		if (v && strcmp(unit, "MiB") != 0)
			round = 0;
	}
	for (p = buf; (p = strstr(p, "class=\"xtick\"")); p++) {
		double v = -1;

		xticks++;
		if (sscanf(strchr(p, '>') + 1, "%lf", &v) != 1 || (long)(v * 10) % 10 != 0 ||
		    (long)v % 2 != 0)
			round = 0;
	}
	CHECK("y ticks 0, 50 MiB ... 250 MiB (6)", yticks == 6);
	CHECK("x ticks 0, 2 ... 10 s (6)", xticks == 6);
	CHECK("every tick label round", round);
	free(buf);
	ma_series_release(&s);
}

/*
 * watch's peaks (ma_peaks): a new high is VmRSS 1 MiB above the last high
 * or VmHWM more than 512 KiB above its last reading; memattach's own small
 * VmHWM rise folded in; the highest point kept with its time.
 */
static void test_peaks(void)
{
	const uint64_t M = 1ULL << 20, K = 1ULL << 10;
	struct ma_peaks p = { 0 };
	uint64_t level = 0;

	CHECK("peaks: the first sample is the baseline, no high",
	      !ma_peaks_sample(&p, 100 * M, 120 * M, 0, &level) && p.high == 100 * M);
	CHECK("peaks: VmRSS up by 1 MiB exactly is not a new high",
	      !ma_peaks_sample(&p, 101 * M, 120 * M, 100, &level));
	CHECK("peaks: VmRSS up by more than 1 MiB is, at VmRSS",
	      ma_peaks_sample(&p, 101 * M + 4 * K, 120 * M, 200, &level) && level == 101 * M + 4 * K);
	ma_peaks_taken(&p, level, 120 * M);
	CHECK("peaks: after it was taken, the same height is no new high",
	      !ma_peaks_sample(&p, 101 * M + 4 * K, 120 * M, 300, &level));
	CHECK("peaks: VmRSS falling is no new high", !ma_peaks_sample(&p, 90 * M, 120 * M, 400, &level));
	CHECK("peaks: VmHWM up by 512 KiB (our own visit's size) is not one",
	      !ma_peaks_sample(&p, 90 * M, 120 * M + 512 * K, 500, &level));
	CHECK("peaks: VmHWM up by more, between two samples: a new high at VmHWM",
	      ma_peaks_sample(&p, 90 * M, 125 * M, 600, &level) && level == 125 * M);
	CHECK("peaks: the highest point is that VmHWM, when it was seen",
	      p.top == 125 * M && p.top_t_ms == 600);
	ma_peaks_taken(&p, level, 125 * M);
	ma_peaks_absorb_own(&p, 125 * M, 125 * M + 300 * K);
	CHECK("peaks: a 300 KiB rise during our visit is folded in", p.last_hwm == 125 * M + 300 * K);
	CHECK("peaks: so the sample after it is no new high",
	      !ma_peaks_sample(&p, 90 * M, 125 * M + 700 * K, 700, &level));
	ma_peaks_absorb_own(&p, 125 * M, 127 * M);
	CHECK("peaks: a 2 MiB rise during the visit is the target's, not folded in",
	      p.last_hwm == 125 * M + 300 * K);
	CHECK("peaks: and the next sample sees it",
	      ma_peaks_sample(&p, 90 * M, 127 * M, 800, &level) && level == 127 * M);
	CHECK("peaks: VmRSS above VmHWM's rise: the level is the higher one",
	      ma_peaks_sample(&p, 130 * M, 128 * M, 900, &level) && level == 130 * M && p.top == 130 * M);
}

int main(void)
{
	test_steps();
	test_chart();
	test_peaks();
	CHECK_DONE();
}
