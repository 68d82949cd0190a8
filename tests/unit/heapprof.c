/*
 * Unit test: the heap_v2 parser on committed sample dumps
 * (fixtures/dumps/, written by fixtures/prof/prof_c.c) and on small
 * hand-made inputs; unsampling per stack with jeprof's formula.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heapprof.h"
#include "ma_error.h"

static int parse_str(struct ma_heapprof *hp, const char *s)
{
	ma_err_clear();
	return ma_heapprof_parse(hp, s, strlen(s), "test");
}

int main(void)
{
	struct ma_heapprof a, b, t, h;
	double sum = 0;
	int rc;

	rc = ma_heapprof_load(&a, "fixtures/dumps/prof_c.heap");
	CHECK("sample dump parses", rc == 0);
	CHECK("period 2^19", a.period == 524288);
	CHECK("has stacks", a.nstacks >= 5);
	CHECK("has MAPPED_LIBRARIES", a.has_maps && a.nmaps > 10);
	CHECK("not truncated, no warnings", !a.truncated && a.nwarnings == 0);
	for (size_t i = 0; i < a.nstacks; i++)
		sum += (double)a.stacks[i].bytes;
	CHECK("stacks hold the 48 MiB of site_big_malloc at least", sum >= 48.0 * 1048576);
	CHECK("maps sorted", a.nmaps < 2 || a.maps[0].start < a.maps[1].start);
	CHECK("an executable mapping of libjemalloc", ({
		      bool found = false;
		      for (size_t i = 0; i < a.nmaps; i++)
			      if (a.maps[i].exec && a.maps[i].path && strstr(a.maps[i].path, "libjemalloc"))
				      found = true;
		      found;
	      }));

	rc = ma_heapprof_load(&b, "fixtures/dumps/prof_c_crlf.heap");
	CHECK("CRLF dump parses", rc == 0);
	CHECK("CRLF same stacks", rc == 0 && b.nstacks == a.nstacks && b.npcs == a.npcs && b.nmaps == a.nmaps);
	CHECK("CRLF same pcs", rc == 0 && b.npcs == a.npcs && memcmp(a.pcs, b.pcs, a.npcs * 8) == 0);
	CHECK("CRLF paths have no CR", rc == 0 && b.nmaps && b.maps[b.nmaps - 1].path &&
					       !strchr(b.maps[b.nmaps - 1].path, '\r'));
	ma_heapprof_release(&b);

	rc = ma_heapprof_load(&t, "fixtures/dumps/prof_c_truncated.heap");
	CHECK("truncated dump parses", rc == 0);
	CHECK("truncated dump flagged", rc == 0 && t.truncated && strstr(t.warning, "truncated"));
	CHECK("truncated dump keeps complete stacks", rc == 0 && t.nstacks >= 1 && t.nstacks < a.nstacks);
	ma_heapprof_release(&t);
	ma_heapprof_release(&a);

	/* Per-stack unsampling: each stack by its own average size. */
	rc = parse_str(&h, "heap_v2/524288\n  t*: 2: 1000064 [0: 0]\n"
			   "@ 0x1 0x2\n  t*: 1: 1000000 [0: 0]\n  t0: 1: 1000000 [0: 0]\n"
			   "@ 0x3\n  t*: 1: 64 [0: 0]\n\nMAPPED_LIBRARIES:\n");
	CHECK("hand-made dump parses", rc == 0 && h.nstacks == 2 && h.npcs == 3);
	CHECK("large stack scale ~1",
	      rc == 0 && fabs(h.stacks[0].scale - 1 / (1 - exp(-1000000.0 / 524288))) < 1e-9);
	CHECK("small stack scale ~8192",
	      rc == 0 && fabs(h.stacks[1].scale - 1 / (1 - exp(-64.0 / 524288))) < 1e-6);
	ma_heapprof_release(&h);

	/* The agent's line after the header: read back, written again, the same. */
	rc = parse_str(&h, "heap_v2/4096\n" MA_HP_AGENT_LINE "1796557357594337535 only (profile start)\n"
			   "  t*: 1: 64 [1: 64]\n@ 0x1\n  t*: 1: 64 [1: 64]\n\nMAPPED_LIBRARIES:\n");
	CHECK("agent dump: parsed, no warning, the start read",
	      rc == 0 && h.from_agent && h.agent_since_unix_ns == 1796557357594337535ULL &&
		      h.nwarnings == 0 && h.nstacks == 1);
	{
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		struct ma_heapprof again;

		CHECK("agent dump written again", f && ma_heapprof_write(&h, f) == 0 && fclose(f) == 0);
		CHECK("its second line names the agent and the start",
		      buf && strstr(buf, "\n" MA_HP_AGENT_LINE "1796557357594337535 ") ==
				     strchr(buf, '\n'));
		CHECK("and parses to the same start", buf && ma_heapprof_parse(&again, buf, len, "again") == 0 &&
							      again.from_agent &&
							      again.agent_since_unix_ns == h.agent_since_unix_ns);
		ma_heapprof_release(&again);
		free(buf);
	}
	ma_heapprof_release(&h);
	rc = parse_str(&h, "heap_v2/4096\n  t*: 1: 64 [1: 64]\n@ 0x1\n  t*: 1: 64 [1: 64]\n");
	CHECK("jemalloc's dump: not the agent's", rc == 0 && !h.from_agent);
	ma_heapprof_release(&h);

	/* Bad input: message names what was found. */
	CHECK("empty rejected", parse_str(&h, "") == MA_E_FORMAT && strstr(ma_errmsg(), "empty"));
	CHECK("gperftools rejected",
	      parse_str(&h, "heap profile:    1:  2 [ 3:  4] @ heapprofile\n") == MA_E_FORMAT &&
		      strstr(ma_errmsg(), "heap profile:"));
	CHECK("garbage rejected", parse_str(&h, "\x7f" "ELF\x02\x01\x01") == MA_E_FORMAT &&
					  strstr(ma_errmsg(), "binary data"));
	CHECK("bad period rejected", parse_str(&h, "heap_v2/0\n") == MA_E_FORMAT);
	CHECK("huge period rejected", parse_str(&h, "heap_v2/99999999999999999999999\n") == MA_E_FORMAT);
	/* Absurd counts: warned and skipped, never fatal. */
	rc = parse_str(&h, "heap_v2/524288\n@ 0x1\n  t*: 0: 5000 [0: 0]\n"
			   "@ 0x2\n  t*: 99999999999999999999999: 1 [0: 0]\n"
			   "@ 0xzz\n  t*: 1: 1 [0: 0]\nMAPPED_LIBRARIES:\n");
	CHECK("absurd counts tolerated", rc == 0 && h.nwarnings >= 2);
	CHECK("0 objects: bytes unscaled", rc == 0 && h.nstacks >= 1 && h.stacks[0].scale == 1.0);
	ma_heapprof_release(&h);
	CHECK("missing file", ma_heapprof_load(&h, "/nonexistent/x.heap") == MA_E_IO);
	CHECK_DONE();
}
