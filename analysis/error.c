/*
 * error.c - the first failure message of an operation (ma_error.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "format.h"
#include "ma_error.h"

static char errbuf[1024];

/*
 * Messages name the target, its threads and files: the message is kept in
 * its printable form (format.h), wherever it is printed later.
 */
int ma_fail(int code, const char *fmt, ...)
{
	if (errbuf[0] == '\0') {
		char raw[sizeof(errbuf)];
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(raw, sizeof(raw), fmt, ap);
		va_end(ap);
		ma_printable_into(errbuf, sizeof(errbuf), raw);
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
