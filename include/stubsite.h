/*
 * stubsite.h - where memattach's stub goes in a target: slack bytes after
 * the end of an executable PT_LOAD segment, inside its last page, in a
 * private file mapping: mapped executable, yet part of no segment, so no
 * thread ever runs or reads them.
 */
#ifndef MA_STUBSITE_H
#define MA_STUBSITE_H

#include <stddef.h>

#include "target.h"

/* Find T's stub sites (after ma_target_find_jemalloc).  MA_E_INTERNAL if there is none. */
int ma_stubsite_find(struct ma_target *t);
/* The bytes the file holds at stub site SITE (what to put back), read when the site was found. */
const unsigned char *ma_stubsite_original(const struct ma_target *t, size_t site);

#endif
