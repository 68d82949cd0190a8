/*
 * jectl.h - mallctl and friends, called inside the target through a session.
 */
#ifndef MA_JECTL_H
#define MA_JECTL_H

#include <stddef.h>
#include <stdint.h>

#include "jestats.h"
#include "remote.h"

/* mallctl(name, out, &len, NULL, 0); LEN must match the value's size. */
int ma_mallctl_read(struct ma_session *s, const char *name, void *out, size_t len);
/* mallctl(name, NULL, NULL, in, len); IN may be NULL with len 0 (a command). */
int ma_mallctl_write(struct ma_session *s, const char *name, const void *in, size_t len);
/* Read a NUL-terminated string value (const char *) into BUF. */
int ma_mallctl_read_string(struct ma_session *s, const char *name, char *buf, size_t buflen);
/* mallctlnametomib; *miblen in: capacity, out: length. */
int ma_mallctl_nametomib(struct ma_session *s, const char *name, size_t *mib, size_t *miblen);
/* mallctlbymib read. */
int ma_mallctlbymib_read(struct ma_session *s, const size_t *mib, size_t miblen, void *out,
			 size_t len);

/* Refresh `epoch`, then read version, options and the headline counters. */
int ma_collect_stats(struct ma_session *s, struct ma_je_stats *st);

#endif
