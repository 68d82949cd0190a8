/*
 * series.c - watch's time series: CSV rows and an SVG chart.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "ma_error.h"
#include "series.h"

int ma_series_add(struct ma_series *s, const struct ma_sample *x)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		struct ma_sample *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return ma_fail(MA_E_NOMEM, "out of memory");
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = *x;
	return 0;
}

void ma_series_release(struct ma_series *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

void ma_series_csv_header(FILE *f)
{
	fputs("t_ms,rss,hwm,allocated,active,resident,dump,dirty,muzzy,metadata_resident,"
	      "outside_jemalloc\n", f);
}

void ma_series_csv_row(FILE *f, const struct ma_sample *x)
{
	fprintf(f, "%llu,%llu,%llu,", (unsigned long long)x->t_ms, (unsigned long long)x->rss,
		(unsigned long long)x->hwm);
	if (x->have_stats)
		fprintf(f, "%llu,%llu,%llu,", (unsigned long long)x->allocated,
			(unsigned long long)x->active, (unsigned long long)x->resident);
	else
		fputs(",,,", f);
	fprintf(f, "%d,", x->dump ? 1 : 0);
	if (x->have_stats && x->have_pages)
		fprintf(f, "%llu,%llu,%llu,%lld\n", (unsigned long long)x->dirty,
			(unsigned long long)x->muzzy, (unsigned long long)x->metadata_resident,
			(long long)x->outside_jemalloc);
	else
		fputs(",,,\n", f);
}

#define W 900
#define H 420
#define ML 80 /* left margin: the byte axis */
#define MR 150 /* right margin: the legend */
#define MT 40
#define MB 50

static uint64_t field(const struct ma_sample *x, int k)
{
	switch (k) {
	case 0:
		return x->rss;
	case 1:
		return x->hwm;
	case 2:
		return x->allocated;
	case 3:
		return x->active;
	default:
		return x->resident;
	}
}

double ma_nice_step(double max, int nticks)
{
	double raw, mag, frac;

	if (max <= 0 || nticks < 1)
		return 0;
	raw = max / nticks;
	mag = pow(10, floor(log10(raw)));
	frac = raw / mag;
	return (frac <= 1 ? 1 : frac <= 2 ? 2 : frac <= 5 ? 5 : 10) * mag;
}

/* The byte unit the axis labels use for values up to MAX. */
static void byte_unit(double max, double *div, const char **name)
{
	static const char *const names[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	*div = 1;
	while (u < 4 && max >= 1024 * *div) {
		*div *= 1024;
		u++;
	}
	*name = names[u];
}

/* Round ticks on both axes; *ytop and *ttop become the axes' round ends. */
static void axes(FILE *f, uint64_t ymax, uint64_t tmax, double *ytop, double *ttop)
{
	double div, ystep, tstep, pw = W - ML - MR, ph = H - MB - MT;
	const char *unit;
	int n;

	byte_unit((double)ymax, &div, &unit);
	ystep = ma_nice_step((double)ymax / div, 5);
	*ytop = ceil((double)ymax / div / ystep) * ystep * div;
	n = (int)llround(*ytop / div / ystep);
	for (int i = 0; i <= n; i++) {
		double y = H - MB - ph * i / n;

		fprintf(f, "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n",
			ML - 6, y + 4, ystep * i, i ? unit : "");
		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
			ML, y, W - MR, y);
	}
	tstep = ma_nice_step(tmax / 1000.0, 6);
	*ttop = ceil(tmax / 1000.0 / tstep) * tstep * 1000.0;
	n = (int)llround(*ttop / 1000.0 / tstep);
	for (int i = 0; i <= n; i++) {
		double x = ML + pw * i / n;

		fprintf(f, "<text class=\"xtick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g s</text>\n",
			x, H - MB + 18, tstep * i);
	}
}

void ma_series_svg(FILE *f, const struct ma_series *s, const char *title)
{
	static const char *const names[] = { "RSS", "HWM", "allocated", "active", "resident" };
	static const char *const colors[] = { "#d62728", "#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e" };
	uint64_t tmax = 1, ymax = 1;
	double pw = W - ML - MR, ph = H - MT - MB, ytop, ttop;
	size_t last_dump = (size_t)-1;

	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].t_ms > tmax)
			tmax = s->v[i].t_ms;
		for (int k = 0; k < 5; k++)
			if ((k < 2 || s->v[i].have_stats) && field(&s->v[i], k) > ymax)
				ymax = field(&s->v[i], k);
		if (s->v[i].dump)
			last_dump = i;
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		   "font-family=\"sans-serif\" font-size=\"12\">\n"
		   "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"24\" "
		   "font-size=\"15\">",
		W, H, ML);
	ma_xml_text(f, title, SIZE_MAX);
	fputs("</text>\n", f);
	/* axes, with round ticks; the plot spans 0 to the round ends */
	fprintf(f, "<g stroke=\"#444\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
		   "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n",
		ML, MT, ML, H - MB, ML, H - MB, W - MR, H - MB);
	axes(f, ymax, tmax, &ytop, &ttop);
	/* dump moments: dashed, the kept (last) one solid */
	for (size_t i = 0; i < s->n; i++) {
		double x;

		if (!s->v[i].dump)
			continue;
		x = ML + pw * (double)s->v[i].t_ms / ttop;
		fprintf(f, "<line class=\"dump\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
			   "stroke=\"#9467bd\" %s><title>heap dump at %.3f s%s</title></line>\n",
			x, MT, x, H - MB, i == last_dump ? "stroke-width=\"2\"" : "stroke-dasharray=\"4 3\"",
			s->v[i].t_ms / 1000.0, i == last_dump ? " (kept)" : "");
	}
	for (int k = 0; k < 5; k++) {
		bool open = false;

		fprintf(f, "<path class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"",
			names[k], colors[k]);
		for (size_t i = 0; i < s->n; i++) {
			double x, y;

			if (k >= 2 && !s->v[i].have_stats) {
				open = false; /* a gap where no thread could be borrowed */
				continue;
			}
			x = ML + pw * (double)s->v[i].t_ms / ttop;
			y = H - MB - ph * (double)field(&s->v[i], k) / ytop;
			fprintf(f, "%s%.1f %.1f ", open ? "L" : "M", x, y);
			open = true;
		}
		fputs("\"/>\n", f);
		fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/>"
			   "<text x=\"%d\" y=\"%d\">%s</text>\n",
			W - MR + 15, MT + 20 * k + 6, colors[k], W - MR + 32, MT + 20 * k + 10, names[k]);
	}
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#9467bd\" "
		   "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">heap dump</text>\n",
		W - MR + 15, MT + 110, W - MR + 27, MT + 110, W - MR + 32, MT + 114);
	fputs("</svg>\n", f);
}

static bool is_new_high(const struct ma_peaks *p, uint64_t rss, uint64_t hwm, uint64_t *level)
{
	bool hwm_rose = hwm > p->last_hwm + MA_OWN_HWM_SLACK;

	*level = hwm_rose && hwm > rss ? hwm : rss;
	return hwm_rose || rss > p->high + MA_PEAK_STEP;
}

bool ma_peaks_sample(struct ma_peaks *p, uint64_t rss, uint64_t hwm, uint64_t t_ms, uint64_t *level)
{
	bool high;

	if (!p->started) {
		p->started = true;
		p->high = rss;
		p->last_hwm = hwm;
	}
	high = is_new_high(p, rss, hwm, level);
	if ((high ? *level : rss) > p->top) {
		p->top = high ? *level : rss;
		p->top_t_ms = t_ms;
	}
	return high;
}

void ma_peaks_taken(struct ma_peaks *p, uint64_t level, uint64_t hwm)
{
	p->high = level;
	p->last_hwm = hwm;
}

void ma_peaks_absorb_own(struct ma_peaks *p, uint64_t hwm_before, uint64_t hwm_end)
{
	if (hwm_end > p->last_hwm && hwm_end - hwm_before <= MA_OWN_HWM_SLACK)
		p->last_hwm = hwm_end;
}
