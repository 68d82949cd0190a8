/*
 * format.h - byte counts for tables, one format everywhere: whole bytes
 * below 1 KiB, else three significant digits in the largest binary unit
 * ("512 B", "2.00 KiB", "45.4 MiB", "399 GiB").  --json gives exact numbers.
 */
#ifndef MA_FORMAT_H
#define MA_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* N bytes; returns BUF. */
const char *ma_fmt_bytes(char *buf, size_t len, uint64_t n);
/* Bytes with a sign: "-1.00 MiB", and "+1.00 MiB" for a rise if PLUS; returns BUF. */
const char *ma_fmt_signed_bytes(char *buf, size_t len, int64_t n, bool plus);
/* A scaled (fractional) byte figure, signed as ma_fmt_signed_bytes; returns BUF. */
const char *ma_fmt_scaled_bytes(char *buf, size_t len, double v, bool plus);

#endif
