/*
 * check.h - minimal unit-test macros: each CHECK prints PASS or FAIL.
 */
#ifndef MA_CHECK_H
#define MA_CHECK_H
#include <stdio.h>

static int check_failures;

#define CHECK(name, cond)                                                         \
	do {                                                                      \
		if (cond) {                                                       \
			printf("PASS %s\n", name);                                \
		} else {                                                          \
			printf("FAIL %s (%s:%d: %s)\n", name, __FILE__, __LINE__, \
			       #cond);                                            \
			check_failures++;                                         \
		}                                                                 \
	} while (0)

#define CHECK_DONE() return check_failures ? 1 : 0

/*
 * The profile of the heap_v2 text DUMP (allocator frames kept, frames
 * named by address when it lists no mappings), for the tests of what is
 * computed from a profile.  True when every step worked.
 */
#ifdef MA_PROFILE_H
#include <string.h>
/*
 * The dump the profile tests share: stacks (leaf first) 0x1000<-0x5000
 * 1 MB, 0x2000<-0x5000 3 MB, 0x1000<-0x6000 2 MB, and an empty one at
 * 0x1000<-0x7000; no mappings, so frames are named by address.
 */
static const char test_dump[] = "heap_v2/524288\n  t*: 4: 4000064 [0: 0]\n"
				"@ 0x1000 0x5000\n  t*: 1: 1000000 [0: 0]\n"
				"@ 0x2000 0x5000\n  t*: 1: 3000000 [0: 0]\n"
				"@ 0x1000 0x6000\n  t*: 1: 2000000 [0: 0]\n"
				"@ 0x1000 0x7000\n  t*: 0: 0 [0: 0]\n"
				"\nMAPPED_LIBRARIES:\n";

static inline bool test_profile(const char *dump, struct ma_heapprof *hp, struct ma_symbolizer *sym,
				struct ma_profile *p)
{
	struct ma_sym_opts so = { 0 };
	struct ma_prof_opts po = { .keep_allocator = true };

	return ma_heapprof_parse(hp, dump, strlen(dump), "test") == 0 && ma_sym_init(sym, hp, &so) == 0 &&
	       ma_profile_build(p, hp, sym, &po) == 0;
}
#endif
#endif
