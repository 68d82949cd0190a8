/*
 * error.c - the first failure message of an operation (ma_error.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "ma_error.h"

static char errbuf[1024];

int ma_fail(int code, const char *fmt, ...)
{
	if (errbuf[0] == '\0') {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *ma_errmsg(void)
{
	return errbuf;
}

void ma_err_clear(void)
{
	errbuf[0] = '\0';
}
