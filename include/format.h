/* format.h - human-readable numbers for tables. */
#ifndef MA_FORMAT_H
#define MA_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "12.3 MiB", "512 B"; returns BUF. */
const char *ma_fmt_bytes(char *buf, size_t len, uint64_t n);
/* Bytes with a sign: "-1.0 MiB", and "+1.0 MiB" for a rise if PLUS; returns BUF. */
const char *ma_fmt_signed_bytes(char *buf, size_t len, int64_t n, bool plus);

#endif
