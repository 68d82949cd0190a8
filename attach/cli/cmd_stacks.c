/*
 * cmd_stacks.c - the full call chains of the allocation sites matching a
 * substring, from a heap dump.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmdutil.h"
#include "commands.h"
#include "emit.h"
#include "ma_error.h"
#include "profcmd.h"

static const char about[] =
	"The full call chains (allocation site first) of the stacks whose\n"
	"allocation site matches SUBSTRING, in its mangled or demangled form\n"
	"(demangled Rust/C++ names look like '<app::Foo>::bar'), heaviest first.\n";

/* Where a frame's object and file:line go when they do not fit beside its name:
 * under it, 4 columns in (they start with a space of their own, the second of
 * the two that set them off from the name). */
#define FRAME_HANG 3

/* Say how many more stacks hold NEEDLE in a deeper frame (a caller, not the site). */
static void hint_deeper(const struct ma_profile *p, const char *needle, size_t nleaf)
{
	size_t *all = NULL, nall = 0;
	double bytes = 0;

	if (ma_profile_match(p, needle, true, &all, &nall, &bytes) == 0 && nall > nleaf)
		ma_print_wrapped(2, "\n(%zu more stack%s hold '%s' in a deeper frame, as a caller; "
				 "--any-frame shows them)\n", nall - nleaf, nall - nleaf == 1 ? "" : "s",
				 ma_printable(needle));
	free(all);
	ma_err_clear();
}

/* The stacks that matched, heaviest first: hits[0..n), the first shown printed. */
struct stacks_match {
	const size_t *hits;
	size_t n, shown;
	double bytes;
};

static void print_stacks_json(struct ma_profbundle *b, const char *dump, const char *needle,
			      const struct stacks_match *m)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_str(&j, "dump", dump);
	ma_json_str(&j, "match", needle);
	ma_json_u64(&j, "period", b->hp.period);
	ma_json_u64(&j, "matched_stacks", m->n);
	ma_json_u64(&j, "matched_scaled_bytes", (uint64_t)llround(m->bytes));
	ma_json_u64(&j, "total_scaled_bytes", (uint64_t)llround(b->prof.total_bytes));
	ma_json_arr_open(&j, "stacks");
	for (size_t h = 0; h < m->shown; h++) {
		size_t i = m->hits[h];
		const struct ma_hp_stack *st = &b->hp.stacks[i];

		ma_json_obj_open(&j, NULL);
		ma_json_u64(&j, "scaled_bytes", (uint64_t)llround(ma_profile_stack_bytes(&b->prof, i)));
		ma_json_u64(&j, "raw_bytes", st->bytes);
		ma_json_u64(&j, "objects", (uint64_t)llround(ma_profile_stack_objs(&b->prof, i)));
		ma_json_u64(&j, "raw_objects", st->objs);
		ma_json_double(&j, "scale", st->scale);
		ma_json_arr_open(&j, "frames");
		for (uint32_t k = 0; k < b->prof.chain_len[i]; k++) {
			const struct ma_frame *f = &b->sym.frames[ma_profile_frame(&b->prof, i, k)];

			ma_json_obj_open(&j, NULL);
			ma_json_str(&j, "name", ma_sym_func_name(&b->sym, f->func));
			ma_json_str(&j, "symbol", b->sym.funcs[f->func].key);
			ma_json_str(&j, "object", ma_sym_obj_name(&b->sym, f->obj));
			if (f->file) {
				ma_json_str(&j, "file", f->file);
				ma_json_i64(&j, "line", f->line);
			}
			ma_json_obj_close(&j);
		}
		ma_json_arr_close(&j);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

static void print_stacks_text(struct ma_profbundle *b, const char *needle, bool any_frame,
			      const struct stacks_match *m)
{
	char s1[32], s2[32];

	ma_print_wrapped(2, "%zu stacks with %s matching '%s': %s of %s (%.1f%%)\n", m->n,
			 any_frame ? "a frame" : "an allocation site", ma_printable(needle),
			 ma_fmt_scaled_bytes(s1, sizeof(s1), m->bytes, false),
			 ma_fmt_scaled_bytes(s2, sizeof(s2), b->prof.total_bytes, false),
			 b->prof.total_bytes > 0 ? 100 * m->bytes / b->prof.total_bytes : 0);
	for (size_t h = 0; h < m->shown; h++) {
		size_t i = m->hits[h];
		const struct ma_hp_stack *st = &b->hp.stacks[i];

		printf("\n#%zu  %s scaled, %s raw in %llu sampled objects, scale %.1f\n", h + 1,
		       ma_fmt_scaled_bytes(s1, sizeof(s1), ma_profile_stack_bytes(&b->prof, i), false),
		       ma_fmt_scaled_bytes(s2, sizeof(s2), (double)st->bytes, false),
		       (unsigned long long)st->objs, st->scale);
		for (uint32_t k = 0; k < b->prof.chain_len[i]; k++) {
			const struct ma_frame *f = &b->sym.frames[ma_profile_frame(&b->prof, i, k)];

			char where[8192];
			int n = snprintf(where, sizeof(where), " [%s]",
					 ma_printable(ma_sym_obj_name(&b->sym, f->obj)));

			if (f->file && n > 0 && (size_t)n < sizeof(where))
				snprintf(where + n, sizeof(where) - (size_t)n, "  %s:%d",
					 ma_printable(f->file), f->line);
			ma_print_named("  ", ma_printable(ma_sym_func_name(&b->sym, f->func)),
				       where, FRAME_HANG);
		}
	}
	if (m->n > m->shown)
		printf("\n(%zu more stacks; -n N shows more)\n", m->n - m->shown);
	if (!any_frame)
		hint_deeper(&b->prof, needle, m->n);
}

int cmd_stacks(int argc, char **argv)
{
	struct ma_profcmd c;
	struct ma_profbundle b;
	const char *dump = NULL, *needle = NULL;
	size_t *hits = NULL, nhits = 0;
	double hit_bytes = 0;
	bool any_frame = false;
	int rc;

	ma_profcmd_init(&c, argv[0], 10);
	{
		const char *args[2] = { NULL, NULL };
		const struct ma_opt opts[] = {
			MA_TOP("--top", "-n", &c.top, "stacks shown (default 10, 0 = all)"),
			MA_FLAG("--any-frame", &any_frame,
				"match SUBSTRING in any frame of a stack, not only its allocation site (as "
				"pprof's -focus)"),
			MA_FLAG("--json", &c.json,
				"JSON: stacks[{scaled_bytes, raw_bytes, objects, scale, frames[{name, "
				"symbol, object, file, line}]}]"),
			MA_OPTS_PROFCMD(&c),
			MA_OPTS_END,
		};

		rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){
			.cmd = argv[0], .args = "DUMP SUBSTRING", .about = about, .opts = opts,
			.footer = "\nexit status: 0 success (also when nothing matches), 1 unreadable "
				  "dump,\n2 usage error",
			.positional = args, .npositional = 2 });
		if (rc) {
			ma_profcmd_release(&c);
			return rc < 0 ? MA_EXIT_OK : rc;
		}
		dump = args[0];
		needle = args[1];
	}
	if (!dump || !needle) {
		ma_profcmd_release(&c);
		return ma_usage_error(argv[0], "a DUMP file and a SUBSTRING are required");
	}
	rc = ma_profcmd_load(&c, &b, dump);
	if (rc) {
		ma_profcmd_release(&c);
		return rc;
	}
	if (ma_profile_match(&b.prof, needle, any_frame, &hits, &nhits, &hit_bytes)) {
		rc = ma_cmd_error(c.cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
		goto out;
	}
	struct stacks_match m = { hits, nhits, nhits < (size_t)c.top ? nhits : (size_t)c.top, hit_bytes };

	if (c.json)
		print_stacks_json(&b, dump, needle, &m);
	else
		print_stacks_text(&b, needle, any_frame, &m);
	rc = fflush(stdout) ? ma_cmd_error(c.cmd, MA_EXIT_FAIL, "cannot write output") : MA_EXIT_OK;
out:
	free(hits);
	ma_profbundle_release(&b);
	ma_profcmd_release(&c);
	return rc;
}
