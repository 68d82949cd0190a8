/*
 * ma_error.h - error codes and the first-error-wins message buffer.
 *
 * Every function that can fail returns 0 or a negative MA_E_* code and, on
 * failure, records a one-line human message with ma_fail().  The first
 * message recorded wins: a low-level cause is not overwritten by the
 * generic "operation failed" of its callers.  Only cmd_* code prints it.
 * The message is kept in its printable form (format.h): it may name the
 * target's process, threads and files.
 */
#ifndef MA_ERROR_H
#define MA_ERROR_H

enum ma_errcode {
	MA_OK = 0,
	MA_E_USAGE = -1,      /* bad command line */
	MA_E_NOPROC = -2,     /* no such process / thread */
	MA_E_PERM = -3,       /* permission denied */
	MA_E_TRACED = -4,     /* another tracer is attached */
	MA_E_NOJEMALLOC = -5, /* no mallctl in the target */
	MA_E_STRIPPED = -6,   /* static binary without symbols */
	MA_E_NOSAFE = -7,     /* no thread is safe to hijack */
	MA_E_TIMEOUT = -8,    /* time box exceeded */
	MA_E_FAULT = -9,      /* injected call faulted */
	MA_E_IO = -10,        /* file or /proc I/O failed */
	MA_E_FORMAT = -11,    /* input file has the wrong format */
	MA_E_NOMEM = -12,     /* out of memory (ours) */
	MA_E_JEMALLOC = -13,  /* mallctl returned an error */
	MA_E_ZOMBIE = -14,    /* target is a zombie / exiting */
	MA_E_EXITED = -15,    /* target exited during the operation */
	MA_E_INTERNAL = -16,
	MA_E_SECCOMP = -17,   /* a seccomp filter would refuse or kill our calls */
	MA_E_STOPPED = -18,   /* the process is stopped by job control */
	MA_E_NOSTATE = -19,   /* the thread never called into jemalloc */
};

/* Record a message (printf-style) unless one is already recorded; returns code. */
int ma_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The recorded message, or "" if none. */
const char *ma_errmsg(void);
/* Forget the recorded message (e.g. after a retry succeeded). */
void ma_err_clear(void);

#endif
