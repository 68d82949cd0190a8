/*
 * Unit test: the snapshot manifest reader (a manifest as 'memattach
 * snapshot' writes it, tolerated variations, and what it must refuse) and
 * the headline and bin differences between two snapshots.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ma_error.h"
#include "snapshot.h"

static const char manifest[] =
	"{\"format\":\"memattach-snapshot\",\"format_version\":1,\"pid\":16023,\"comm\":\"main\","
	"\"exe\":\"/work/main/build/fixtures/frag\",\"time\":\"2026-11-29T21:20:51Z\","
	"\"unix_time\":1795987251,\"jemalloc_version\":\"5.3.0-0-g54eaed1d\","
	"\"vm_rss\":7266304,\"vm_hwm\":7266304,\"headline\":{\"allocated\":2277696,"
	"\"active\":2355200,\"resident\":5373952,\"mapped\":12840960,\"retained\":4460544,"
	"\"metadata\":3068464,\"tcache_bytes\":34688},\"options\":{\"prof\":true,"
	"\"prof_active\":true,\"lg_prof_sample\":19,\"tcache\":true,\"narenas\":10},"
	"\"files\":{\"stats\":\"stats.json\",\"bins\":\"bins.json\",\"heap\":\"heap.heap\"},"
	"\"thread\":16023,\"held_ns\":4237706}\n";

/* A copy of MANIFEST with the first FROM replaced by TO. */
static char *replace(const char *from, const char *to)
{
	const char *at = strstr(manifest, from);
	size_t n = strlen(manifest) - strlen(from) + strlen(to);
	char *s = malloc(n + 1);

	if (!at || !s)
		abort();
	snprintf(s, n + 1, "%.*s%s%s", (int)(at - manifest), manifest, to, at + strlen(from));
	return s;
}

static int parse_mut(const char *from, const char *to, struct ma_snap_manifest *m)
{
	char *s = replace(from, to);
	int rc;

	ma_err_clear();
	rc = ma_snap_manifest_parse(s, strlen(s), m);
	free(s);
	return rc;
}

static void test_manifest(void)
{
	struct ma_snap_manifest m;
	int rc = ma_snap_manifest_parse(manifest, strlen(manifest), &m);

	CHECK("manifest parses", rc == 0);
	CHECK("manifest pid, comm, exe, time", m.pid == 16023 && strcmp(m.comm, "main") == 0 &&
						      strcmp(m.exe, "/work/main/build/fixtures/frag") == 0 &&
						      m.unix_time == 1795987251 &&
						      strcmp(m.time, "2026-11-29T21:20:51Z") == 0);
	CHECK("manifest headline", m.allocated == 2277696 && m.active == 2355200 &&
					   m.resident == 5373952 && m.mapped == 12840960 &&
					   m.retained == 4460544 && m.metadata == 3068464 &&
					   m.tcache_bytes == 34688 && m.vm_rss == 7266304 &&
					   m.vm_hwm == 7266304);
	CHECK("manifest files", m.has_heap && strcmp(m.heap_file, "heap.heap") == 0 &&
					strcmp(m.stats_file, "stats.json") == 0);

	rc = parse_mut("\"heap\":\"heap.heap\"}",
		       "\"heap\":null},\"heap_skipped\":\"heap profiling is off; restart with "
		       "MALLOC_CONF=prof:true\\n \\\"x\\\" \\u0041\"",
		       &m);
	CHECK("null heap: no heap, the reason unescaped",
	      rc == 0 && !m.has_heap && m.heap_file[0] == '\0' &&
		      strcmp(m.heap_skipped, "heap profiling is off; restart with "
					     "MALLOC_CONF=prof:true\n \"x\" A") == 0);
	rc = parse_mut("\"thread\"", "\"later\":[1,{\"a\":[true,false,null]},-2.5e3,\"s\"],"
				     "\"headline2\":{\"allocated\":1},\"thread\"",
		       &m);
	CHECK("unknown keys of any type are skipped", rc == 0 && m.allocated == 2277696);
	rc = parse_mut("{\"format\":", " \n\t{ \"format\" : ", &m);
	CHECK("whitespace is tolerated", rc == 0 && m.pid == 16023);
}

static void test_manifest_refused(void)
{
	struct ma_snap_manifest m;
	int rc;

	rc = parse_mut("memattach-snapshot", "jeprof-bundle", &m);
	CHECK("other format: refused, naming it",
	      rc == MA_E_FORMAT && strstr(ma_errmsg(), "\"jeprof-bundle\""));
	rc = parse_mut("\"format\":\"memattach-snapshot\",", "", &m);
	CHECK("no format key: refused", rc == MA_E_FORMAT && strstr(ma_errmsg(), "no \"format\""));
	rc = parse_mut("\"format_version\":1", "\"format_version\":2", &m);
	CHECK("format_version 2: refused", rc == MA_E_FORMAT && strstr(ma_errmsg(), "version 2"));
	rc = parse_mut("\"retained\":4460544,", "", &m);
	CHECK("missing headline key: refused, naming it",
	      rc == MA_E_FORMAT && strstr(ma_errmsg(), "headline.retained"));
	rc = parse_mut("\"resident\":5373952", "\"resident\":\"5373952\"", &m);
	CHECK("headline value of the wrong type: refused",
	      rc == MA_E_FORMAT && strstr(ma_errmsg(), "headline.resident"));
	rc = parse_mut("\"active\":2355200", "\"active\":-1", &m);
	CHECK("negative size: refused", rc == MA_E_FORMAT);
	rc = parse_mut("\"stats\":\"stats.json\",", "", &m);
	CHECK("no stats file: refused", rc == MA_E_FORMAT && strstr(ma_errmsg(), "files.stats"));
	ma_err_clear();
	rc = ma_snap_manifest_parse(manifest, 100, &m);
	CHECK("truncated: refused", rc == MA_E_FORMAT && strstr(ma_errmsg(), "ends early"));
	ma_err_clear();
	rc = ma_snap_manifest_parse("[1,2]", 5, &m);
	CHECK("not an object: refused", rc == MA_E_FORMAT);
	rc = parse_mut("\"comm\":\"main\"", "\"comm\":\"ma\\qin\"", &m);
	CHECK("bad escape: refused", rc == MA_E_FORMAT);
	rc = parse_mut("}\n", "}}\n", &m);
	CHECK("text after the document: refused", rc == MA_E_FORMAT);
	ma_err_clear();
	{
		char deep[200];

		memset(deep, '[', sizeof(deep));
		rc = ma_snap_manifest_parse(deep, sizeof(deep), &m);
		CHECK("deep nesting: refused, no crash", rc == MA_E_FORMAT);
	}
}

static void test_headline(void)
{
	struct ma_snap_manifest a = { 0 }, b = { 0 };
	struct ma_snap_headline_row r[MA_SNAP_NHEADLINE];

	a.allocated = 1000, a.active = 1500, a.resident = 4000, a.vm_rss = 9000;
	b.allocated = 3000, b.active = 3200, b.resident = 3000, b.vm_rss = 4500;
	a.tcache_bytes = 0, b.tcache_bytes = 64;
	ma_snap_headline_diff(&a, &b, r);
	CHECK("headline: allocated row", strcmp(r[0].key, "allocated") == 0 && r[0].delta == 2000 &&
						 r[0].has_pct && r[0].pct == 200.0);
	CHECK("headline: VmRSS shrinks", strcmp(r[7].key, "vm_rss") == 0 && r[7].delta == -4500 &&
						 r[7].pct == -50.0);
	CHECK("headline: from 0 has no percentage", strcmp(r[6].key, "tcache_bytes") == 0 &&
							  !r[6].has_pct && r[6].delta == 64);
	CHECK("headline: page_slack = resident - active, 0 when below",
	      strcmp(r[9].key, "page_slack") == 0 && r[9].a == 2500 && r[9].b == 0 &&
		      r[9].delta == -2500);
	CHECK("headline: slab_waste = active - allocated",
	      strcmp(r[10].key, "slab_waste") == 0 && r[10].a == 500 && r[10].b == 200);
}

static void test_bins(void)
{
	/* size, nregs, slab_size, curregs, curslabs, nonfull */
	struct ma_bin ba[] = { { 8, 512, 4096, 10, 1, 1 },
			       { 16, 256, 4096, 256, 1, 0 },
			       { 32, 128, 4096, 5, 1, 1 },
			       { 48, 256, 12288, 0, 0, 0 } };
	struct ma_bin bb[] = { { 8, 512, 4096, 10, 1, 1 }, /* unchanged */
			       { 16, 256, 4096, 200, 1, 1 }, /* waste +56*16 */
			       { 48, 256, 12288, 1, 1, 1 }, /* waste +12240 */
			       { 64, 64, 4096, 2, 1, 1 } }; /* only in B */
	struct ma_bin_table ta = { ba, 4, 0 }, tb = { bb, 4, 0 };
	struct ma_snap_bin_delta *d = NULL;
	size_t n = 0;
	int rc = ma_snap_bins_diff(&ta, &tb, &d, &n);

	CHECK("bins diff: changed bins only", rc == 0 && n == 4);
	if (rc || n != 4)
		return;
	CHECK("bins diff: largest |waste delta| first", d[0].size == 48 && d[0].waste_delta == 12240);
	CHECK("bins diff: size only in B", d[1].size == 64 && d[1].waste_a == 0 &&
						   d[1].waste_b == 4096 - 128 &&
						   d[1].curregs_a == 0 && d[1].curregs_delta == 2);
	CHECK("bins diff: size only in A (gone in B)",
	      d[2].size == 32 && d[2].waste_delta == -(4096 - 5 * 32) && d[2].curregs_b == 0 &&
		      d[2].curslabs_delta == -1);
	CHECK("bins diff: curregs change", d[3].size == 16 && d[3].curregs_delta == -56 &&
						   d[3].waste_delta == 56 * 16 && d[3].util_a == 1.0);
	free(d);
}

int main(void)
{
	test_manifest();
	test_manifest_refused();
	test_headline();
	test_bins();
	CHECK_DONE();
}
