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

int main(void)
{
	test_steps();
	test_chart();
	CHECK_DONE();
}
