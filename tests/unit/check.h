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
#endif
