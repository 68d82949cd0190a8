/*
 * Unit test: the decomposition of resident memory (ma_headline_compute)
 * and its two gaps: the parts add up to VmRSS exactly, a gap a racy
 * reading makes negative is 0, and without page counts or VmRSS only what
 * can be known is filled in.
 */
#include "check.h"
#include "headline.h"

int main(void)
{
	struct ma_je_stats st = { 0 };
	struct ma_headline h;

	st.allocated = 1000000;
	st.active = 1200000;
	st.resident = 2000000;
	st.page = 4096;
	st.pdirty = 100; /* 409,600 B */
	st.pmuzzy = 10;
	ma_headline_compute(&st, 2500000, &h);
	CHECK("slab_waste = active - allocated", h.slab_waste == 200000);
	CHECK("page_slack = resident - active", h.page_slack == 800000);
	CHECK("dirty from pages", h.dirty == 409600 && h.muzzy == 40960 && h.have_pages);
	CHECK("metadata_resident = page_slack - dirty", h.metadata_resident == 800000 - 409600);
	CHECK("outside_jemalloc = VmRSS - resident", h.have_rss && h.outside_jemalloc == 500000);
	CHECK("the parts add up to VmRSS",
	      st.allocated + h.slab_waste + h.dirty + h.metadata_resident + (uint64_t)h.outside_jemalloc ==
		      2500000);

	ma_headline_compute(&st, 1500000, &h);
	CHECK("VmRSS below resident: outside_jemalloc negative", h.outside_jemalloc == -500000);

	st.page = 0;
	ma_headline_compute(&st, 0, &h);
	CHECK("no page counts: no dirty/metadata split", !h.have_pages && h.dirty == 0 && h.metadata_resident == 0);
	CHECK("no VmRSS: no outside_jemalloc", !h.have_rss && h.outside_jemalloc == 0);
	CHECK("the gaps still computed", h.slab_waste == 200000 && h.page_slack == 800000);

	CHECK("a racy reading (active < allocated): slab_waste 0", ma_slab_waste(10, 20) == 0);
	CHECK("resident < active: page_slack 0", ma_page_slack(10, 20) == 0);
	CHECK("the gaps themselves", ma_slab_waste(30, 20) == 10 && ma_page_slack(50, 20) == 30);
	CHECK_DONE();
}
