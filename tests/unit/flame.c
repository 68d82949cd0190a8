/*
 * tests/unit/flame.c - the folded stacks and the flame graph (analysis/flame.c)
 * of a profile with known stacks (no mappings: frames are named by address):
 * one folded line per stack with bytes, root first, their bytes those of the
 * profile; in the SVG, each frame's box as wide as its share of the bytes,
 * children side by side inside their parent, a caller's bytes the sum of its
 * callees', and the title escaped for XML.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flame.h"
#include "heapprof.h"
#include "profile.h"
#include "symbolize.h"

#include "check.h"


static char *capture(struct ma_profile *p, bool svg)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int rc;

	if (!f)
		return NULL;
	rc = svg ? ma_flame_svg(f, p, "a<b&c \"q\"") : ma_flame_folded(f, p);
	fclose(f);
	if (rc) {
		free(buf);
		return NULL;
	}
	return buf;
}

/*
 * The box of frame NAME at depth Y (its rect's y) inside [LO, LO+W) of the
 * width: its data-x, data-w and the bytes in its title.
 */
struct box {
	double x, w;
	unsigned long long bytes;
};

static bool find_box(const char *svg, const char *name, int y, double lo, double w, struct box *b)
{
	char want[64], ywant[32];
	const char *p = svg;

	snprintf(want, sizeof(want), "data-n=\"%s\"><title>", name);
	snprintf(ywant, sizeof(ywant), " y=\"%d\"", y);
	while ((p = strstr(p, "<g data-x=\""))) {
		const char *end = strstr(p, "</g>");
		const char *t = strstr(p, want), *yy = strstr(p, ywant);

		if (!end)
			return false;
		if (t && t < end && yy && yy < end &&
		    sscanf(p, "<g data-x=\"%lf\" data-w=\"%lf\"", &b->x, &b->w) == 2 &&
		    sscanf(t + strlen(want) + strlen(name), " (%llu bytes", &b->bytes) == 1 &&
		    b->x >= lo - 1e-6 && b->x + b->w <= lo + w + 1e-6)
			return true;
		p = end;
	}
	return false;
}

int main(void)
{
	struct ma_heapprof hp;
	struct ma_symbolizer sym;
	struct ma_profile p;
	double s0, s1, s2, total;
	char *folded, *svg, line[128];
	struct box all, b5, b6, b51, b52, b61;

	CHECK("profile", test_profile(test_dump, &hp, &sym, &p));
	s0 = ma_profile_stack_bytes(&p, 0);
	s1 = ma_profile_stack_bytes(&p, 1);
	s2 = ma_profile_stack_bytes(&p, 2);
	total = s0 + s1 + s2;

	folded = capture(&p, false);
	CHECK("folded written", folded != NULL);
	snprintf(line, sizeof(line), "0x5000;0x1000 %.0f\n0x5000;0x2000 %.0f\n0x6000;0x1000 %.0f\n", s0, s1, s2);
	CHECK("folded: one line per stack with bytes, root first, the profile's bytes",
	      folded && strcmp(folded, line) == 0);
	if (folded && strcmp(folded, line) != 0)
		printf("# folded:\n%s# wanted:\n%s", folded, line);

	svg = capture(&p, true);
	CHECK("svg written", svg != NULL);
	CHECK("svg: a whole document", svg && strstr(svg, "<svg ") && strstr(svg, "</svg>"));
	CHECK("svg: the title escaped for XML", svg && strstr(svg, "a&lt;b&amp;c &quot;q&quot;") &&
						       !strstr(svg, "a<b&c"));
	/* rows: y=64 the root, 47 the callers, 30 the allocation sites */
	CHECK("svg: the root box, all the bytes, full width",
	      svg && find_box(svg, "all", 64, 0, 1, &all) && fabs(all.w - 1.0) < 1e-6 &&
		      fabs((double)all.bytes - total) <= 1);
	CHECK("svg: 0x5000 holds 1 + 3 MB, 0x6000 2 MB",
	      svg && find_box(svg, "0x5000", 47, 0, 1, &b5) && find_box(svg, "0x6000", 47, 0, 1, &b6) &&
		      fabs((double)b5.bytes - (s0 + s1)) <= 1 && fabs((double)b6.bytes - s2) <= 1);
	CHECK("svg: a box's width is its share of the bytes",
	      fabs(b5.w - (s0 + s1) / total) < 1e-5 && fabs(b6.w - s2 / total) < 1e-5);
	CHECK("svg: the callers side by side fill the root",
	      fabs(b5.w + b6.w - 1.0) < 1e-5 && (fabs(b6.x + b6.w - b5.x) < 1e-5 || fabs(b5.x + b5.w - b6.x) < 1e-5));
	CHECK("svg: the sites of 0x5000 inside it, their bytes its bytes",
	      find_box(svg, "0x1000", 30, b5.x, b5.w, &b51) && find_box(svg, "0x2000", 30, b5.x, b5.w, &b52) &&
		      fabs((double)b51.bytes - s0) <= 1 && fabs((double)b52.bytes - s1) <= 1 &&
		      fabs(b51.w + b52.w - b5.w) < 1e-5);
	CHECK("svg: the site of 0x6000 inside it, all its bytes",
	      find_box(svg, "0x1000", 30, b6.x, b6.w, &b61) && fabs((double)b61.bytes - s2) <= 1 &&
		      fabs(b61.w - b6.w) < 1e-5);
	free(folded);
	free(svg);
	ma_profile_release(&p);
	ma_sym_release(&sym);
	ma_heapprof_release(&hp);
	CHECK_DONE();
}
