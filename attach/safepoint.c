/*
 * safepoint.c - remote unwinding (libunwind-ptrace) and the safety verdict.
 */
#include <dirent.h>
#include <errno.h>
#include <libunwind-ptrace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ma_error.h"
#include "safepoint.h"

static unw_addr_space_t addr_space;

int ma_unwind(pid_t tid, struct ma_backtrace *bt)
{
	unw_cursor_t c;
	void *upt;
	int rc;

	bt->n = 0;
	bt->complete = false;
	if (!addr_space) {
		addr_space = unw_create_addr_space(&_UPT_accessors, 0);
		if (!addr_space)
			return ma_fail(MA_E_INTERNAL, "libunwind: cannot create address space");
		unw_set_caching_policy(addr_space, UNW_CACHE_GLOBAL);
	}
	upt = _UPT_create(tid);
	if (!upt)
		return ma_fail(MA_E_NOMEM, "libunwind: cannot create ptrace context");
	rc = unw_init_remote(&c, addr_space, upt);
	if (rc < 0) {
		_UPT_destroy(upt);
		return ma_fail(MA_E_INTERNAL, "libunwind: cannot unwind thread %d (%d)", tid, rc);
	}
	do {
		unw_word_t ip = 0;

		unw_get_reg(&c, UNW_REG_IP, &ip);
		if (ip == 0)
			break;
		bt->ip[bt->n++] = ip;
		rc = unw_step(&c);
	} while (rc > 0 && bt->n < MA_MAX_FRAMES);
	bt->complete = rc == 0 || (rc > 0 && bt->n == MA_MAX_FRAMES) ||
		       (bt->n > 0 && bt->ip[bt->n - 1] == 0);
	_UPT_destroy(upt);
	return 0;
}

void ma_unwind_release(void)
{
	if (addr_space)
		unw_destroy_addr_space(addr_space);
	addr_space = NULL;
}

static bool is_bg_thread(const struct ma_thread_info *ti)
{
	return strncmp(ti->name, "jemalloc_bg_thd", 15) == 0;
}

bool ma_thread_is_safe(const struct ma_target *t, const struct ma_thread_info *ti,
		       const struct ma_backtrace *bt, char *why, size_t whylen)
{
	bool bg = is_bg_thread(ti);

	if (bt->n == 0) {
		snprintf(why, whylen, "stack could not be unwound");
		return false;
	}
	for (size_t i = 0; i < bt->n; i++) {
		/* Above frame 0 the ip is a return address: look at the call. */
		uint64_t pc = i == 0 ? bt->ip[i] : bt->ip[i] - 1;

		if (!ma_target_in_jemalloc(t, pc))
			continue;
		/*
		 * An idle background thread waits in pthread_cond_*wait called
		 * from jemalloc; the wait has released the lock.  Frame 0 must
		 * be outside jemalloc (in libc's futex wait).
		 */
		if (bg && i > 0 && ti->syscall == 202 /* futex */)
			break;
		snprintf(why, whylen, "frame #%zu (0x%llx) is in jemalloc: it may hold an allocator lock",
			 i, (unsigned long long)bt->ip[i]);
		return false;
	}
	if (!bt->complete) {
		snprintf(why, whylen, "stack unwinding stopped after %zu frames: cannot prove it is "
			 "outside jemalloc", bt->n);
		return false;
	}
	if (ti->syscall >= 0)
		snprintf(why, whylen, "blocked in syscall %ld, no frame in jemalloc", ti->syscall);
	else
		snprintf(why, whylen, "no frame in jemalloc");
	return true;
}

static void read_thread_info(pid_t pid, pid_t tid, struct ma_thread_info *ti)
{
	char path[96], buf[512];
	FILE *f;

	memset(ti, 0, sizeof(*ti));
	ti->tid = tid;
	ti->syscall = -2;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
	if ((f = fopen(path, "re"))) {
		if (fgets(ti->name, sizeof(ti->name), f))
			ti->name[strcspn(ti->name, "\n")] = '\0';
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	if ((f = fopen(path, "re"))) {
		if (fgets(buf, sizeof(buf), f)) {
			char *p = strrchr(buf, ')');

			if (p && p[1] == ' ')
				ti->state = p[2];
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
	if ((f = fopen(path, "re"))) {
		if (fgets(buf, sizeof(buf), f)) {
			if (strncmp(buf, "running", 7) == 0)
				ti->syscall = -2;
			else
				ti->syscall = strtol(buf, NULL, 10);
		}
		fclose(f);
	}
}

static int rank(const struct ma_thread_info *ti)
{
	if (is_bg_thread(ti))
		return 3;
	if ((ti->state == 'S' || ti->state == 'D') && ti->syscall >= 0)
		return ti->state == 'S' ? 0 : 1;
	return 2;
}

static int cmp_rank(const void *a, const void *b)
{
	const struct ma_thread_info *x = a, *y = b;
	int rx = rank(x), ry = rank(y);

	if (rx != ry)
		return rx - ry;
	return x->tid - y->tid;
}

int ma_list_threads(pid_t pid, struct ma_thread_info **out, size_t *n)
{
	char path[64];
	struct dirent *d;
	size_t cap = 0;
	DIR *dir;

	*out = NULL;
	*n = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return ma_fail(errno == ENOENT ? MA_E_NOPROC : MA_E_IO, "cannot list threads of %d: %s",
			       pid, strerror(errno));
	while ((d = readdir(dir))) {
		pid_t tid = (pid_t)atoi(d->d_name);

		if (tid <= 0)
			continue;
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct ma_thread_info *p = realloc(*out, nc * sizeof(*p));

			if (!p) {
				closedir(dir);
				return ma_fail(MA_E_NOMEM, "out of memory");
			}
			*out = p;
			cap = nc;
		}
		read_thread_info(pid, tid, &(*out)[(*n)++]);
	}
	closedir(dir);
	qsort(*out, *n, sizeof(**out), cmp_rank);
	return 0;
}
