/*
 * tests/unit/bins.c - slab waste per size class (analysis/bins.c) on
 * tables whose answers are worked out by hand: utilization, waste, live
 * regions per partly-empty slab and the regime at each threshold,
 * inconsistent counters (a racing print) that must neither underflow nor
 * divide by zero, the sort by waste with its tie rule, and the summary
 * against the headline counters.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bins.h"
#include "check.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

int main(void)
{
	struct ma_bin bins[] = {
		/* 64-byte class: 64 regions in a 4 KiB slab; 10 slabs, 4 of them partly empty,
		 * 400 live: 6 full slabs hold 384, so 16 live in 4 slabs: 4 each of 64 */
		{ .size = 64, .nregs = 64, .slab_size = 4096, .curregs = 400, .curslabs = 10,
		  .nonfull_slabs = 4 },
		/* 48-byte class, every slab full */
		{ .size = 48, .nregs = 256, .slab_size = 12288, .curregs = 512, .curslabs = 2,
		  .nonfull_slabs = 0 },
		/* 128-byte class: 32 per slab, 3 slabs all partly empty, 30 live: 10 per slab
		 * of 32 = 0.3125: mixed */
		{ .size = 128, .nregs = 32, .slab_size = 4096, .curregs = 30, .curslabs = 3,
		  .nonfull_slabs = 3 },
		/* 256-byte class: 16 per slab, 1 slab, 8 live: 0.5: half-full */
		{ .size = 256, .nregs = 16, .slab_size = 4096, .curregs = 8, .curslabs = 1,
		  .nonfull_slabs = 1 },
		/* racing counters: more live regions than the slabs hold, more non-full than slabs */
		{ .size = 32, .nregs = 128, .slab_size = 4096, .curregs = 1000, .curslabs = 2,
		  .nonfull_slabs = 5 },
		/* an unused class */
		{ .size = 80, .nregs = 51, .slab_size = 4096 },
		/* exactly at the sparse threshold: 4 of 16 = 0.25 is mixed, not sparse */
		{ .size = 512, .nregs = 16, .slab_size = 8192, .curregs = 4, .curslabs = 1,
		  .nonfull_slabs = 1 },
		/* exactly at the half-full threshold: 40 of 100 = 0.40 is half-full */
		{ .size = 40, .nregs = 100, .slab_size = 4000, .curregs = 40, .curslabs = 1,
		  .nonfull_slabs = 1 },
	};
	struct ma_bin_table t = { .bins = bins, .nbins = sizeof(bins) / sizeof(bins[0]) };
	struct ma_bin_row r, *rows;
	struct ma_bin_summary sum;
	struct ma_je_stats st;

	ma_bins_row(&t, 0, &r);
	CHECK("64 B: utilization 400 of 640", NEAR(r.util, 400.0 / 640.0));
	CHECK("64 B: waste 10 slabs * 4096 - 400 * 64 = 15360", r.waste == 15360);
	CHECK("64 B: 4 live per partly-empty slab", NEAR(r.live_per_nonfull, 4.0));
	CHECK("64 B: 4 of 64 per slab is sparse", r.regime == MA_REGIME_SPARSE);
	CHECK("the row says its bin", r.index == 0);

	ma_bins_row(&t, 1, &r);
	CHECK("full slabs: no waste, utilization 1", r.waste == 0 && NEAR(r.util, 1.0));
	CHECK("full slabs: regime none", r.regime == MA_REGIME_NONE && r.live_per_nonfull == 0);

	ma_bins_row(&t, 2, &r);
	CHECK("128 B: 10 live per slab of 32", NEAR(r.live_per_nonfull, 10.0));
	CHECK("128 B: 0.31 is mixed", r.regime == MA_REGIME_MIXED);
	CHECK("128 B: waste 3 * 4096 - 30 * 128 = 8448", r.waste == 8448);

	ma_bins_row(&t, 3, &r);
	CHECK("256 B: 8 of 16 is half-full", r.regime == MA_REGIME_HALF_FULL);
	CHECK("256 B: waste 4096 - 8 * 256 = 2048", r.waste == 2048);

	ma_bins_row(&t, 4, &r);
	CHECK("racing counters: waste floors at 0 (1000 * 32 > 2 * 4096)", r.waste == 0);
	CHECK("racing counters: live per partly-empty slab from what is left, finite",
	      isfinite(r.live_per_nonfull) && r.live_per_nonfull >= 0);

	ma_bins_row(&t, 5, &r);
	CHECK("unused class: all zero, no division by zero",
	      r.waste == 0 && r.util == 0 && r.live_per_nonfull == 0 && r.regime == MA_REGIME_NONE);

	ma_bins_row(&t, 6, &r);
	CHECK("a quarter exactly is not sparse", r.regime == MA_REGIME_MIXED);
	ma_bins_row(&t, 7, &r);
	CHECK("40% exactly is half-full", r.regime == MA_REGIME_HALF_FULL);

	CHECK("rows for every bin", ma_bins_rows(&t, &rows) == 0);
	ma_bins_sort_by_waste(rows, t.nbins);
	CHECK("sorted: largest waste first (64 B: 15360)", rows[0].index == 0 && rows[0].waste == 15360);
	CHECK("sorted: then 128 B (8448)", rows[1].index == 2);
	{
		bool ordered = true, ties_in_bin_order = true;

		for (size_t i = 1; i < t.nbins; i++) {
			ordered &= rows[i - 1].waste >= rows[i].waste;
			if (rows[i - 1].waste == rows[i].waste)
				ties_in_bin_order &= rows[i - 1].index < rows[i].index;
		}
		CHECK("sorted: never increasing", ordered);
		CHECK("sorted: equal waste in bin order", ties_in_bin_order);
	}
	free(rows);

	memset(&st, 0, sizeof(st));
	st.allocated = 1000000;
	st.active = 1000000 + 40000;
	st.resident = st.active + 65536;
	ma_bins_summary(&t, &st, &sum);
	/* 64 B 15360, 128 B 8448, 256 B 4096 - 8*256, 512 B 8192 - 4*512, 40 B 4000 - 40*40 */
	CHECK("summary: small waste is the sum of the rows (34400)",
	      sum.small_waste == 15360 + 8448 + 2048 + 6144 + 2400);
	CHECK("summary: slab waste = active - allocated", sum.slab_waste == st.active - st.allocated);
	CHECK("summary: page slack = resident - active", sum.page_slack == 65536);
	CHECK("summary: the share of the slab waste the bins explain",
	      NEAR(sum.waste_share, (double)sum.small_waste / (double)sum.slab_waste));
	st.active = st.allocated;
	ma_bins_summary(&t, &st, &sum);
	CHECK("summary: no gap, share 0 (no division by zero)", sum.slab_waste == 0 && sum.waste_share == 0);

	CHECK("regime names", strcmp(ma_bin_regime_name(MA_REGIME_SPARSE), "sparse") == 0 &&
				      strcmp(ma_bin_regime_name(MA_REGIME_HALF_FULL), "half-full") == 0);
	CHECK("every regime has advice", ma_bin_regime_advice(MA_REGIME_MIXED)[0] &&
						ma_bin_regime_advice(MA_REGIME_NONE)[0]);
	CHECK_DONE();
}
