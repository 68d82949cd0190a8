/* format.h - human-readable numbers for tables. */
#ifndef MA_FORMAT_H
#define MA_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* "12.3 MiB", "512 B"; returns BUF. */
const char *ma_fmt_bytes(char *buf, size_t len, uint64_t n);

#endif
