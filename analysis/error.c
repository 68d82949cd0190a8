#include <stdarg.h>
#include <stdio.h>

#include "ma_error.h"

static char errbuf[1024];
static int errcode;

int ma_fail(int code, const char *fmt, ...)
{
	if (errbuf[0] == '\0') {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
		va_end(ap);
		errcode = code;
	}
	return code;
}

const char *ma_errmsg(void)
{
	return errbuf;
}

int ma_errcode(void)
{
	return errcode;
}

void ma_err_clear(void)
{
	errbuf[0] = '\0';
	errcode = 0;
}
