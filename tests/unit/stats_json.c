/*
 * Unit test: malloc_stats_print JSON parsing (committed real outputs of
 * jemalloc 5.3.0, and mutations of them with jemalloc's unescaped and cut
 * strings), and the bin table arithmetic.  Run from the repository root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bins.h"
#include "check.h"
#include "headline.h"
#include "ma_error.h"
#include "stats_json.h"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *b;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(*len + 1);
	if (b && fread(b, 1, *len, f) != *len) {
		free(b);
		b = NULL;
	}
	fclose(f);
	if (b)
		b[*len] = '\0';
	return b;
}

/* A copy of DOC with the first FROM replaced by TO. */
static char *replace(const char *doc, const char *from, const char *to)
{
	const char *at = strstr(doc, from);
	size_t n = strlen(doc) - strlen(from) + strlen(to);
	char *r;

	if (!at)
		return NULL;
	r = malloc(n + 1);
	memcpy(r, doc, (size_t)(at - doc));
	strcpy(r + (at - doc), to);
	strcat(r, at + strlen(from));
	return r;
}

static int parse(const char *doc, struct ma_je_stats *st, struct ma_bin_table *t)
{
	ma_err_clear();
	return ma_stats_json_parse(doc, strlen(doc), st, t);
}

static void test_one_arena(void)
{
	struct ma_je_stats st;
	struct ma_bin_table t;
	struct ma_bin_row r;
	size_t len;
	char *doc = slurp("fixtures/stats/one_arena.json", &len);

	CHECK("one_arena.json readable", doc != NULL);
	if (!doc)
		return;
	CHECK("one arena parses", parse(doc, &st, &t) == 0);
	CHECK("headline allocated", st.allocated == 209728);
	CHECK("36 bins", t.nbins == 36);
	CHECK("bin 3 constants", t.nbins > 3 && t.bins[3].size == 48 && t.bins[3].nregs == 256 &&
					 t.bins[3].slab_size == 12288);
	CHECK("bin 3 counters from arena 0",
	      t.nbins > 3 && t.bins[3].curregs == 700 && t.bins[3].curslabs == 4 &&
		      t.bins[3].nonfull_slabs == 3);
	CHECK("tcache_bytes", t.tcache_bytes == 9600);
	CHECK("version", strncmp(st.version, "5.3.0-0-g", 9) == 0);
	CHECK("prof compiled, not enabled", !st.opt_prof);
	if (t.nbins > 3) {
		ma_bins_row(&t, 3, &r);
		/* 4 slabs of 12288 minus 700 regions of 48 */
		CHECK("bin 3 waste", r.waste == 4 * 12288 - 700 * 48);
		/* (700 - 1 full slab * 256) / 3 non-full */
		CHECK("bin 3 live per nonfull", r.live_per_nonfull > 147.99 && r.live_per_nonfull < 148.01);
		CHECK("bin 3 regime half-full", r.regime == MA_REGIME_HALF_FULL);
	}
	ma_bin_table_release(&t);

	/* jemalloc does not escape: a quote inside prof_prefix. */
	{
		char *m = replace(doc, "\"prof_prefix\":\"jeprof\"", "\"prof_prefix\":\"je\"pr,of\"");

		CHECK("unescaped quote tolerated", m && parse(m, &st, &t) == 0 && t.nbins == 36 &&
							   st.allocated == 209728);
		ma_bin_table_release(&t);
		free(m);
	}
	/* A string cut at 254 bytes, without its closing quote. */
	{
		char cut[300] = "\"prof_prefix\":\"";

		memset(cut + strlen(cut), 'a', 254);
		cut[15 + 254] = '\0';
		char *m = replace(doc, "\"prof_prefix\":\"jeprof\"", cut);

		CHECK("cut string tolerated", m && parse(m, &st, &t) == 0 && t.nbins == 36 &&
						      t.bins[3].curregs == 700);
		ma_bin_table_release(&t);
		free(m);
	}
	/* A truncated file is an error, not a partial table. */
	{
		char *m = strdup(doc);

		m[len / 2] = '\0';
		CHECK("truncated document rejected", parse(m, &st, &t) == MA_E_FORMAT &&
							     strstr(ma_errmsg(), "ends early") != NULL);
		free(m);
	}
	free(doc);
}

static void test_two_arenas(void)
{
	struct ma_je_stats st;
	struct ma_bin_table t, u;
	size_t len;
	char *doc = slurp("fixtures/stats/two_arenas.json", &len), *m;

	CHECK("two_arenas.json readable", doc != NULL);
	if (!doc)
		return;
	CHECK("merged parses", parse(doc, &st, &t) == 0);
	CHECK("merged counters", t.nbins == 36 && t.bins[1].curregs == 100 && t.bins[7].curregs == 100 &&
					 t.bins[13].curregs == 64 && t.tcache_bytes == 21744);
	/* Without "merged" the numbered arenas are summed: same table. */
	m = replace(doc, "\"merged\":", "\"zzzzzz\":");
	CHECK("summed arenas parse", m && parse(m, &st, &u) == 0);
	CHECK("sum equals merged", u.nbins == t.nbins &&
					   memcmp(u.bins, t.bins, t.nbins * sizeof(*t.bins)) == 0 &&
					   u.tcache_bytes == t.tcache_bytes);
	ma_bin_table_release(&t);
	ma_bin_table_release(&u);
	free(m);
	/* Dirty pages: the merged entry's, or the numbered arenas' summed. */
	m = replace(doc, "\"pdirty\":0,", "\"pdirty\":3,"); /* arena 1 only */
	CHECK("page counts from merged", m && parse(m, &st, &t) == 0 && st.page == 4096 &&
						 st.pdirty == 8 && st.pmuzzy == 0);
	ma_bin_table_release(&t);
	free(m);
	m = replace(doc, "\"merged\":", "\"zzzzzz\":");
	if (m) {
		char *m2 = replace(m, "\"pdirty\":0,", "\"pdirty\":3,");

		CHECK("page counts summed over arenas", m2 && parse(m2, &st, &t) == 0 &&
								st.pdirty == 8 + 3);
		ma_bin_table_release(&t);
		free(m2);
	}
	free(m);
	m = replace(doc, "\"page\":4096", "\"pagex\":4096");
	CHECK("no page size: no page counts", m && parse(m, &st, &t) == 0 && st.page == 0);
	ma_bin_table_release(&t);
	free(m);
	free(doc);
}

/* resident = active + dirty + metadata_resident; VmRSS = resident + outside. */
static void test_headline(void)
{
	struct ma_je_stats st = { .allocated = 1000, .active = 8192, .resident = 40960,
				  .pdirty = 5, .pmuzzy = 2, .page = 4096 };
	struct ma_headline h;

	ma_headline_compute(&st, 36864, &h);
	CHECK("slab_waste", h.slab_waste == 7192);
	CHECK("dirty, muzzy in bytes", h.dirty == 20480 && h.muzzy == 8192 && h.have_pages);
	CHECK("metadata_resident = resident - active - dirty", h.metadata_resident == 12288);
	CHECK("page_slack = dirty + metadata_resident", h.page_slack == 32768);
	CHECK("outside_jemalloc may be negative", h.have_rss && h.outside_jemalloc == -4096);
	CHECK("the parts add up to VmRSS",
	      (int64_t)(st.allocated + h.slab_waste + h.dirty + h.metadata_resident) +
			      h.outside_jemalloc == 36864);
	st.page = 0;
	ma_headline_compute(&st, 0, &h);
	CHECK("without page counts or VmRSS: only the gaps", !h.have_pages && !h.have_rss &&
							       h.dirty == 0 && h.page_slack == 32768);
}

static void test_other_json(void)
{
	struct ma_je_stats st;
	struct ma_bin_table t;

	CHECK("other JSON rejected", parse("{\"name\": \"x\", \"list\": [\"a\",\"b\"]}", &st, &t) ==
					     MA_E_FORMAT &&
				     strstr(ma_errmsg(), "jemalloc") != NULL);
	CHECK("not JSON rejected", parse("hello", &st, &t) == MA_E_FORMAT);
	CHECK("no bins rejected",
	      parse("{\"jemalloc\":{\"stats\":{\"allocated\":1,\"active\":1,\"resident\":1,"
		    "\"mapped\":1,\"retained\":1,\"metadata\":1}}}",
		    &st, &t) == MA_E_FORMAT &&
		      strstr(ma_errmsg(), "bin") != NULL);
}

static void test_rows(void)
{
	struct ma_bin bins[2] = {
		{ 192, 64, 12288, 128, 64, 64 }, /* 2 per slab, all non-full */
		{ 64, 64, 4096, 0, 0, 0 },	 /* empty */
	};
	struct ma_bin_table t = { bins, 2, 0 };
	struct ma_je_stats st = { .allocated = 100, .active = 1000, .resident = 1500 };
	struct ma_bin_summary sum;
	struct ma_bin_row r;

	ma_bins_row(&t, 0, &r);
	CHECK("sparse waste", r.waste == 64 * 12288 - 128 * 192);
	CHECK("sparse live per nonfull", r.live_per_nonfull == 2.0);
	CHECK("sparse regime", r.regime == MA_REGIME_SPARSE);
	ma_bins_row(&t, 1, &r);
	CHECK("empty bin: no waste, no regime", r.waste == 0 && r.regime == MA_REGIME_NONE);
	ma_bins_summary(&t, &st, &sum);
	CHECK("summary gaps", sum.slab_waste == 900 && sum.page_slack == 500);
	/* inconsistent counters (a racing print) must not underflow */
	bins[1] = (struct ma_bin){ 64, 64, 4096, 100, 1, 0 };
	ma_bins_row(&t, 1, &r);
	CHECK("overfull bin clamps to zero", r.waste == 0 && r.live_per_nonfull == 0);
}

int main(void)
{
	test_one_arena();
	test_two_arenas();
	test_other_json();
	test_rows();
	test_headline();
	CHECK_DONE();
}
