/*
 * cmd_fragprint.c - the printers of `memattach frag report`: the report
 * analysis/frag.c computed, as text or JSON.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bins_report.h"
#include "cmdutil.h"
#include "emit.h"
#include "format.h"
#include "frag_int.h"

static uint64_t round_bytes(double v)
{
	return v <= 0 ? 0 : (uint64_t)(v + 0.5);
}

static size_t shown(long top, size_t n)
{
	return top > 0 && (size_t)top < n ? (size_t)top : n;
}

void frag_emit_json(const struct frag_args *a, const struct ma_frag_data *d,
		      const struct ma_frag_report *r, const struct ma_flush_result *fr,
		      const struct frag_timing *tm)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	if (d->pid)
		ma_json_u64(&j, "pid", d->pid);
	ma_json_str(&j, "mode", d->mode == 1 ? "focus" : "shift");
	ma_json_u64(&j, "shift", d->shift);
	ma_json_u64(&j, "samples", d->n);
	ma_json_u64(&j, "attributed_waste", round_bytes(r->attributed));
	if (d->have_bins)
		ma_json_u64(&j, "bins_waste", d->bins_waste);
	else
		ma_json_null(&j, "bins_waste");
	ma_json_u64(&j, "started_unix_ns", d->started_unix_ns);
	ma_json_u64(&j, "captured_unix_ns", d->captured_unix_ns);
	if (tm) {
		ma_json_u64(&j, "report_began_unix_ns", tm->began_unix_ns);
		ma_json_u64(&j, "flush_ns", tm->flush_ns);
		ma_json_u64(&j, "borrow_ns", tm->borrowed_ns - tm->began_ns - tm->flush_ns);
		ma_json_u64(&j, "query_ns", tm->query_ns);
	}
	ma_json_u64(&j, "recorded", d->recorded);
	ma_json_u64(&j, "removed", d->removed);
	ma_json_u64(&j, "dropped_full", d->dropped_full);
	ma_json_u64(&j, "dropped_stacks", d->dropped_stacks);
	ma_json_u64(&j, "query_failed", d->query_failed);
	ma_flush_emit_json(&j, fr);
	ma_json_arr_open(&j, "sites");
	for (size_t i = 0; i < shown(a->top, r->nsites); i++) {
		const struct ma_frag_site *s = &r->sites[i];

		ma_json_obj_open(&j, NULL);
		ma_json_str(&j, "leaf", s->leaf);
		ma_json_arr_open(&j, "stack");
		for (uint32_t k = 0; k < s->nframes; k++)
			ma_json_str(&j, NULL, d->frame_name[s->first + k]);
		ma_json_arr_close(&j);
		ma_json_u64(&j, "waste", round_bytes(s->waste));
		ma_json_u64(&j, "samples", s->samples);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_arr_open(&j, "leaves_by_waste");
	for (size_t i = 0; i < shown(a->top, r->nleaves); i++) {
		ma_json_obj_open(&j, NULL);
		ma_json_str(&j, "leaf", r->leaves[i].name);
		ma_json_u64(&j, "waste", round_bytes(r->leaves[i].waste));
		ma_json_u64(&j, "samples", r->leaves[i].samples);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_arr_open(&j, "classes");
	for (size_t i = 0; i < r->nclasses; i++) {
		const struct ma_frag_class *c = &r->classes[i];

		ma_json_obj_open(&j, NULL);
		ma_json_u64(&j, "size", c->size);
		ma_json_u64(&j, "nregs", c->nregs);
		ma_json_u64(&j, "samples", c->samples);
		ma_json_double(&j, "surv_per_slab", c->surv_per_slab);
		ma_json_double(&j, "fill", c->fill);
		ma_json_u64(&j, "waste", round_bytes(c->waste));
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	if (d->mode == 1) {
		ma_json_u64(&j, "focus_size", d->focus_size);
		ma_json_u64(&j, "pages", r->pages);
		ma_json_u64(&j, "cohort_pages", r->cohort_pages);
		ma_json_u64(&j, "mixed_pages", r->mixed_pages);
		ma_json_arr_open(&j, "leaves");
		for (size_t i = 0; i < r->nfocus_leaves; i++) {
			const struct ma_frag_focus_leaf *fl = &r->focus_leaves[i];

			ma_json_obj_open(&j, NULL);
			ma_json_str(&j, "leaf", r->leaves[fl->leaf].name);
			ma_json_u64(&j, "pages", fl->pages);
			ma_json_u64(&j, "sole_pages", fl->sole_pages);
			ma_json_obj_close(&j);
		}
		ma_json_arr_close(&j);
		ma_json_arr_open(&j, "leaf_sets");
		for (size_t i = 0; i < shown(a->top, r->nleafsets); i++) {
			ma_json_obj_open(&j, NULL);
			ma_json_arr_open(&j, "leaves");
			for (size_t k = 0; k < r->leafsets[i].nleaves; k++)
				ma_json_str(&j, NULL, r->leaves[r->leafsets[i].leaves[k]].name);
			ma_json_arr_close(&j);
			ma_json_u64(&j, "pages", r->leafsets[i].pages);
			ma_json_obj_close(&j);
		}
		ma_json_arr_close(&j);
	}
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

static double pct(double part, double whole)
{
	return whole > 0 ? 100.0 * part / whole : 0;
}

static double seconds_between(uint64_t from_ns, uint64_t to_ns)
{
	return to_ns > from_ns ? (double)(to_ns - from_ns) / 1e9 : 0;
}

/*
 * When the samples were read, and, for a live report, where its own time
 * went before that: a report can take long (every thread's tcache flushed
 * first, a thread to borrow, the agent's query), and the window it covers
 * ends when the samples were read, not when the report was asked for.
 */
static void print_window(const struct ma_frag_data *d, const struct frag_timing *tm)
{
	double age = seconds_between(d->started_unix_ns, d->captured_unix_ns);
	char when[32];

	ma_print_wrapped(2, "since: frag start at %s, %.1f s before the samples were read\n",
	       ma_clock_time(d->started_unix_ns, when, sizeof(when)), age);
	if (!tm)
		return;
	ma_print_wrapped(8, "report: began %.1f s after frag start; read the samples %.1f s later "
			 "(tcache flush %.1f s, finding jemalloc, the run lock and a thread %.1f s, "
			 "the agent's query %.1f s)\n",
	       seconds_between(d->started_unix_ns, tm->began_unix_ns),
	       seconds_between(tm->began_ns, tm->borrowed_ns + tm->query_ns),
	       (double)tm->flush_ns / 1e9,
	       seconds_between(tm->began_ns + tm->flush_ns, tm->borrowed_ns),
	       (double)tm->query_ns / 1e9);
}

static void print_header(const struct frag_args *a, const struct ma_frag_data *d,
			 const struct ma_frag_report *r, const struct ma_flush_result *fr,
			 const struct frag_timing *tm)
{
	char b1[32], b2[32];

	if (a->from)
		ma_print_wrapped(2, "frag report of %s (process %llu)\n", ma_printable(a->from),
				 (unsigned long long)d->pid);
	else
		printf("frag report of process %d\n", a->pid);
	if (d->mode == 1)
		ma_print_wrapped(2, "covers: every allocation of the %llu B class made since frag start and still "
		       "live\n", (unsigned long long)d->focus_size);
	else
		ma_print_wrapped(2, "covers: allocations made since frag start and still live, 1 in %llu sampled "
		       "(--shift %u)\n", 1ULL << d->shift, d->shift);
	print_window(d, tm);
	ma_print_wrapped(2, "samples: %zu live (recorded %llu, removed %llu)\n", d->n,
	       (unsigned long long)d->recorded, (unsigned long long)d->removed);
	if (d->dropped_full || d->dropped_stacks || d->query_failed)
		ma_print_wrapped(2, "bounds hit: %llu samples dropped (table full), %llu without a "
				 "stack (stack table full), %llu not answered by batch_query\n",
				 (unsigned long long)d->dropped_full,
				 (unsigned long long)d->dropped_stacks,
				 (unsigned long long)d->query_failed);
	if (fr && fr->done)
		ma_print_wrapped(2, "tcache flush: %u of %u threads flushed, %u without tcache, "
				 "%u skipped\n", fr->flushed, fr->threads, fr->no_tcache,
				 fr->skipped);
	ma_fmt_bytes(b1, sizeof(b1), round_bytes(r->attributed));
	if (d->have_bins)
		ma_print_wrapped(2, "attributed waste: %s of %s small-bin waste in the process "
				 "now (%.0f%%; the rest is pinned by objects allocated before frag "
				 "start or not sampled)\n", b1,
				 ma_fmt_bytes(b2, sizeof(b2), d->bins_waste),
				 pct(r->attributed, (double)d->bins_waste));
	else
		printf("attributed waste: %s\n", b1);
}

/* Where a leaf set goes on: under its first name, after "%10llu pages = {". */
#define LEAF_SET_HANG 19

/* "N pages = {a, b}": a name that would pass the width starts a line of its own (never broken). */
static void print_leaf_set(const struct ma_frag_report *r, const struct ma_frag_leafset *ls)
{
	size_t col = LEAF_SET_HANG;

	printf("%10llu pages = {", (unsigned long long)ls->pages);
	for (size_t k = 0; k < ls->nleaves; k++) {
		const char *name = ma_printable(r->leaves[ls->leaves[k]].name);
		size_t w = ma_text_columns(name) + 1; /* and the ',' or '}' after it */

		if (k && col + 2 + w > MA_TEXT_WIDTH) {
			printf(",\n%*s", LEAF_SET_HANG, "");
			col = LEAF_SET_HANG;
		} else if (k) {
			printf(", ");
			col += 2;
		}
		printf("%s", name);
		col += w - 1;
	}
	printf("}\n");
}

void frag_print_report(const struct frag_args *a, const struct ma_frag_data *d,
			 const struct ma_frag_report *r, const struct ma_flush_result *fr,
			 const struct frag_timing *tm)
{
	char b[32];

	print_header(a, d, r, fr, tm);
	printf("\nleaves by pinned waste (cumulative over their stacks):\n");
	printf("%12s %6s %8s  %s\n", "waste", "share", "samples", "leaf");
	for (size_t i = 0; i < shown(a->top, r->nleaves); i++)
		printf("%12s %5.1f%% %8llu  %s\n",
		       ma_fmt_bytes(b, sizeof(b), round_bytes(r->leaves[i].waste)),
		       pct(r->leaves[i].waste, r->attributed), (unsigned long long)r->leaves[i].samples,
		       ma_printable(r->leaves[i].name));
	printf("\nsize classes (surv/slab and fill are exact means over the sampled slabs):\n");
	printf("%7s %6s %8s %10s %6s %12s\n", "size", "nregs", "samples", "surv/slab", "fill",
	       "waste");
	for (size_t i = 0; i < r->nclasses; i++) {
		const struct ma_frag_class *c = &r->classes[i];

		printf("%7llu %6llu %8llu %10.2f %5.1f%% %12s\n", (unsigned long long)c->size,
		       (unsigned long long)c->nregs, (unsigned long long)c->samples, c->surv_per_slab,
		       100 * c->fill, ma_fmt_bytes(b, sizeof(b), round_bytes(c->waste)));
	}
	if (d->mode == 1) {
		ma_print_wrapped(2, "\nfocus on the %llu B class, by 4 KiB page: %llu pages, %llu "
				 "cohort (%.1f%%: one leaf), %llu mixed (%.1f%%)\n",
				 (unsigned long long)d->focus_size, (unsigned long long)r->pages,
				 (unsigned long long)r->cohort_pages,
				 pct((double)r->cohort_pages, (double)r->pages),
				 (unsigned long long)r->mixed_pages,
				 pct((double)r->mixed_pages, (double)r->pages));
		printf("leaf sets by pages:\n");
		for (size_t i = 0; i < shown(a->top, r->nleafsets); i++)
			print_leaf_set(r, &r->leafsets[i]);
		printf("leaves: pages touched, pages where it is the sole occupant:\n");
		for (size_t i = 0; i < shown(a->top, r->nfocus_leaves); i++)
			printf("%10llu %10llu  %s\n", (unsigned long long)r->focus_leaves[i].pages,
			       (unsigned long long)r->focus_leaves[i].sole_pages,
			       ma_printable(r->leaves[r->focus_leaves[i].leaf].name));
	}
	printf("\ntop stacks by pinned waste:\n");
	for (size_t i = 0; i < shown(a->top ? a->top : 0, r->nsites) && i < 5; i++) {
		const struct ma_frag_site *s = &r->sites[i];

		printf("#%zu %s, %llu samples\n", i + 1, ma_fmt_bytes(b, sizeof(b), round_bytes(s->waste)),
		       (unsigned long long)s->samples);
		for (uint32_t k = 0; k < s->nframes && k < 12; k++)
			printf("    %s\n", ma_printable(d->frame_name[s->first + k]));
		if (!s->nframes)
			printf("    %s\n", ma_printable(s->leaf));
	}
}

