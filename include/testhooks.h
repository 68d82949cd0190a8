/*
 * include/testhooks.h - the test hooks (MEMATTACH_TEST_* variables) exist
 * only in the test build, build/memattach-test (compiled with
 * -DMEMATTACH_TEST_BUILD): a hook such as MEMATTACH_TEST_IGNORE_FORK
 * switches a safety rule off, so the binary users run must not read them.
 * In it, ma_test_env("X") is always NULL and the names are not in the file.
 */
#ifndef MA_TESTHOOKS_H
#define MA_TESTHOOKS_H

#include <stdlib.h>

#ifdef MEMATTACH_TEST_BUILD
#define ma_test_env(name) getenv("MEMATTACH_TEST_" name)
#else
#define ma_test_env(name) ((const char *)NULL)
#endif

#endif
