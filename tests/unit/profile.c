/*
 * Unit test: the stacks of a profile whose allocation site matches a
 * substring (ma_profile_match_leaf, memattach stacks): every stack with
 * that leaf and no other, heaviest first, their total; empty and
 * leafless stacks never match.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heapprof.h"
#include "ma_error.h"
#include "profile.h"
#include "symbolize.h"

#include "check.h"


int main(void)
{
	struct ma_heapprof hp;
	struct ma_symbolizer sym;
	struct ma_profile p;
	size_t *hits = NULL, n = 0;
	double bytes = 0;
	char leaf[256];

	CHECK("dump parsed (4 stacks), symbolizer, profile",
	      test_profile(test_dump, &hp, &sym, &p) && hp.nstacks == 4);
	snprintf(leaf, sizeof(leaf), "%s", ma_sym_func_name(&sym, sym.frames[ma_profile_frame(&p, 0, 0)].func));
	CHECK("the leaf of stack 0 has a name", leaf[0] != '\0');

	CHECK("match the leaf of stack 0",
	      ma_profile_match_leaf(&p, leaf, &hits, &n, &bytes) == 0);
	CHECK("two stacks share it (the empty one does not count)", n == 2);
	CHECK("heaviest first: stack 2 (2 MB) then stack 0 (1 MB)", n == 2 && hits[0] == 2 && hits[1] == 0);
	CHECK("total is their sum",
	      n == 2 && bytes == ma_profile_stack_bytes(&p, 0) + ma_profile_stack_bytes(&p, 2) && bytes > 0);
	free(hits);

	CHECK("no match", ma_profile_match_leaf(&p, "no such function", &hits, &n, &bytes) == 0 && n == 0 &&
			   bytes == 0);
	free(hits);
	CHECK("the empty needle matches every stack with bytes",
	      ma_profile_match_leaf(&p, "", &hits, &n, &bytes) == 0 && n == 3 && hits[0] == 1);
	free(hits);
	ma_profile_release(&p);
	ma_sym_release(&sym);
	ma_heapprof_release(&hp);
	CHECK_DONE();
}
