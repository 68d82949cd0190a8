/*
 * jefind.c - finding jemalloc in a target: mallctl and its friends in the
 * mapped objects, jemalloc's code ranges and TLS, the loader, libc's
 * fork and epoll, and the jemalloc processes of the machine.
 */
#include <ctype.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <signal.h>
#include <unistd.h>

#include "arch.h"
#include "elfsyms.h"
#include "ma_error.h"
#include "steps.h"
#include "target.h"
#include "input.h"


const char *ma_je_flavour_name(enum ma_je_flavour f)
{
	switch (f) {
	case MA_JE_PREFIX_JE: return "je_";
	case MA_JE_PREFIX_RJEM: return "_rjem_";
	default: return "unprefixed";
	}
}

static bool is_libjemalloc(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return strstr(base, "jemalloc") != NULL && strstr(base, ".so") != NULL;
}

static const char *const api_names[] = {
	"malloc", "calloc", "realloc", "free", "mallocx", "rallocx", "xallocx", "sallocx",
	"dallocx", "sdallocx", "nallocx", "mallctl", "mallctlnametomib", "mallctlbymib",
	"malloc_stats_print", "malloc_usable_size", "posix_memalign", "aligned_alloc",
	"memalign", "valloc", "pvalloc", NULL,
};

static bool is_jemalloc_symbol(const char *name, const char *prefix)
{
	size_t pl = strlen(prefix);

	if (strncmp(name, "je_", 3) == 0 || strncmp(name, "_rjem_je_", 9) == 0)
		return true;
	if (pl && strncmp(name, prefix, pl) == 0)
		return true;
	if (pl == 0)
		for (int i = 0; api_names[i]; i++)
			if (name[0] == api_names[i][0] && strcmp(name, api_names[i]) == 0)
				return true;
	return false;
}

static int add_range(struct ma_jemalloc *je, uint64_t lo, uint64_t hi)
{
	struct ma_range *p = realloc(je->text, (je->ntext + 1) * sizeof(*p));

	if (!p)
		return ma_fail(MA_E_NOMEM, "out of memory");
	je->text = p;
	je->text[je->ntext++] = (struct ma_range){ lo, hi };
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const struct ma_range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void merge_ranges(struct ma_jemalloc *je)
{
	size_t out = 0;

	qsort(je->text, je->ntext, sizeof(*je->text), cmp_range);
	for (size_t i = 0; i < je->ntext; i++) {
		if (out && je->text[i].lo <= je->text[out - 1].hi + 64) {
			if (je->text[i].hi > je->text[out - 1].hi)
				je->text[out - 1].hi = je->text[i].hi;
			continue;
		}
		je->text[out++] = je->text[i];
	}
	je->ntext = out;
}

/* Source files of jemalloc 5.x; a local symbol after such a FILE is its. */
static const char *const je_sources[] = {
	"jemalloc", "arena", "background_thread", "base", "bin", "bin_info", "bitmap",
	"buf_writer", "cache_bin", "ckh", "counter", "ctl", "decay", "div", "ecache", "edata",
	"edata_cache", "ehooks", "emap", "eset", "exp_grow", "extent", "extent_dss",
	"extent_mmap", "fxp", "san", "san_bump", "hook", "hpa", "hpa_hooks", "hpdata",
	"inspect", "large", "log", "malloc_io", "mutex", "nstime", "pa", "pa_extra", "pai",
	"pac", "pages", "peak_event", "prof", "prof_data", "prof_log", "prof_recent",
	"prof_stats", "prof_sys", "psset", "rtree", "safety_check", "sc", "sec", "stats", "sz",
	"tcache", "test_hooks", "thread_event", "ticker", "tsd", "witness", "jemalloc_cpp",
	"zone", "mutex_pool", "hash", "prng", "valgrind", "chunk", "chunk_dss", "chunk_mmap",
	"huge", "quarantine", "util", "atomic", "mb", "nstime", "spin", "prof_sys", NULL,
};

static bool is_jemalloc_file(const char *file)
{
	const char *base = strrchr(file, '/');
	size_t n;

	base = base ? base + 1 : file;
	n = strcspn(base, "."); /* arena.pic.o, arena.o, arena.c -> arena */
	for (int i = 0; je_sources[i]; i++)
		if (strlen(je_sources[i]) == n && strncmp(base, je_sources[i], n) == 0)
			return true;
	return false;
}

/* One pass over a static binary's symbols for jemalloc's code (static_text_ranges). */
struct je_text_pass {
	struct ma_jemalloc *je;
	uint64_t lo, hi; /* the span of the named functions, .cold parts left out */
	bool have_files;
	const char *file; /* the last FILE symbol judged (the locals after one share it) */
	bool file_is_je;
	uint64_t *zero; /* jemalloc's functions without a size, to be sized afterwards */
	size_t nzero, capzero;
};

static int je_text_visit(void *ctx, const struct ma_elf_sym *s)
{
	struct je_text_pass *p = ctx;
	struct ma_jemalloc *je = p->je;

	if (s->type != 2 /* STT_FUNC */)
		return 0;
	if (s->file && s->file != p->file) {
		p->file = s->file;
		p->file_is_je = is_jemalloc_file(s->file);
	}
	if (s->file && p->file_is_je)
		p->have_files = true;
	if (!(s->file && p->file_is_je) && !is_jemalloc_symbol(s->name, je->prefix))
		return 0;
	if (!s->size) {
		if (p->nzero == p->capzero) {
			size_t nc = p->capzero ? p->capzero * 2 : 16;
			uint64_t *z = realloc(p->zero, nc * sizeof(*z));

			if (!z)
				return MA_E_NOMEM;
			p->zero = z;
			p->capzero = nc;
		}
		p->zero[p->nzero++] = s->addr;
		return 0;
	}
	if (add_range(je, s->addr + je->bias, s->addr + s->size + je->bias))
		return MA_E_NOMEM;
	if (strstr(s->name, ".cold"))
		return 0;
	if (s->addr < p->lo)
		p->lo = s->addr;
	if (s->addr + s->size > p->hi)
		p->hi = s->addr + s->size;
	return 0;
}

/* The functions without a size reach to the next symbol (as a sorted table says). */
static int size_zero_ranges(struct je_text_pass *p, struct ma_elf *e)
{
	struct ma_elf_sym *at = calloc(p->nzero ? p->nzero : 1, sizeof(*at));
	bool *ok = calloc(p->nzero ? p->nzero : 1, sizeof(*ok));
	int rc = at && ok ? ma_elf_syms_at(e, p->zero, p->nzero, at, ok) : MA_E_NOMEM;

	for (size_t i = 0; !rc && i < p->nzero; i++) {
		uint64_t end = ok[i] ? at[i].addr + at[i].size : p->zero[i];

		if (end <= p->zero[i])
			continue;
		if (add_range(p->je, p->zero[i] + p->je->bias, end + p->je->bias))
			rc = MA_E_NOMEM;
		if (p->zero[i] < p->lo)
			p->lo = p->zero[i];
		if (end > p->hi)
			p->hi = end;
	}
	free(at);
	free(ok);
	return rc;
}

/*
 * Statically linked jemalloc has no file of its own.  Its code is every
 * function named like jemalloc (je_* internals, the public API) plus the
 * local functions that follow one of jemalloc's FILE symbols in .symtab.
 * Without FILE symbols, fall back to the span of the named functions (too
 * wide rather than too narrow: a wrongly "unsafe" thread is only skipped).
 * One pass over the tables, whatever their size.
 */
static int static_text_ranges(struct ma_jemalloc *je, struct ma_elf *e)
{
	struct je_text_pass p = { .je = je, .lo = UINT64_MAX };
	int rc = ma_elf_scan(e, je_text_visit, &p);

	if (!rc && p.nzero)
		rc = size_zero_ranges(&p, e);
	if (!rc && !p.have_files && p.lo < p.hi && add_range(je, p.lo + je->bias, p.hi + je->bias))
		rc = MA_E_NOMEM;
	free(p.zero);
	return rc ? ma_fail(MA_E_NOMEM, "out of memory") : 0;
}

static int shared_text_ranges(struct ma_jemalloc *je, const struct ma_target *t,
			      const struct ma_mapping *first)
{
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i];

		if (ma_target_same_object(m, first) && m->perms[2] == 'x' && add_range(je, m->start, m->end))
			return MA_E_NOMEM;
	}
	return 0;
}

static const char *const prefixes[] = { "", "je_", "_rjem_" };

/* Look for mallctl in one ELF; fill JE and return 1 if found. */
/*
 * The file's first bytes of each function we will call, to compare with
 * the target's memory once a thread is seized: a layout read while the
 * dynamic loader was still mapping (a process just started or exec'd)
 * gives addresses where other bytes sit, and nothing must be called there.
 */
static void record_code_bytes(struct ma_jemalloc *je, const struct ma_elf *e)
{
	const uint64_t fns[MA_CODE_CHECKS] = { je->mallctl, je->mallctlnametomib, je->mallctlbymib,
					       je->malloc_stats_print };

	for (int i = 0; i < MA_CODE_CHECKS; i++) {
		uint64_t vaddr = fns[i] - je->bias;

		je->code_addr[i] = 0;
		for (size_t k = 0; fns[i] && k < e->nsegs; k++) {
			const struct ma_elf_seg *g = &e->segs[k];

			if (vaddr < g->vaddr || vaddr + MA_CODE_CHECK_LEN > g->vaddr + g->filesz)
				continue;
			if (pread(e->fd, je->code_bytes[i], MA_CODE_CHECK_LEN,
				  (off_t)(g->offset + (vaddr - g->vaddr))) == MA_CODE_CHECK_LEN)
				je->code_addr[i] = fns[i];
			break;
		}
	}
}

static int code_changed(const struct ma_target *t)
{
	return ma_fail(MA_E_EXITED,
		       "process %d is starting or replacing its program (jemalloc's code is not "
		       "where its mappings said); run memattach again",
		       t->pid);
}

int ma_target_code_unchanged(const struct ma_target *t)
{
	unsigned char now[MA_CODE_CHECKS][MA_CODE_CHECK_LEN];
	struct iovec local[MA_CODE_CHECKS], remote[MA_CODE_CHECKS];
	int which[MA_CODE_CHECKS], n = 0;

	/* All in one read: this runs while a thread is held. */
	for (int i = 0; i < MA_CODE_CHECKS; i++)
		if (t->je.code_addr[i]) {
			which[n] = i;
			local[n] = (struct iovec){ now[n], MA_CODE_CHECK_LEN };
			remote[n++] = (struct iovec){ (void *)(uintptr_t)t->je.code_addr[i], MA_CODE_CHECK_LEN };
		}
	if (n && process_vm_readv(t->proc_pid, local, (unsigned long)n, remote, (unsigned long)n, 0) !=
		     (ssize_t)n * MA_CODE_CHECK_LEN)
		for (int k = 0; k < n; k++)
			if (ma_mem_read(t->proc_pid, t->je.code_addr[which[k]], now[k], MA_CODE_CHECK_LEN)) {
				ma_err_clear();
				return code_changed(t);
			}
	for (int k = 0; k < n; k++)
		if (memcmp(now[k], t->je.code_bytes[which[k]], MA_CODE_CHECK_LEN) != 0)
			return code_changed(t);
	return 0;
}

/*
 * tsd's state byte: the one byte of the initial image that holds
 * "uninitialized" (6 in 5.2-5.3, 5 upstream; every other field starts
 * otherwise in every version we build).  Two candidates, or none: unknown.
 */
static void find_state_byte(struct ma_jemalloc *je)
{
	int found = 0;

	je->tls_state_off = -1;
	for (size_t i = 0; i < je->tls_len && je->tls_image; i++) {
		if (je->tls_image[i] != 5 && je->tls_image[i] != 6)
			continue;
		if (found++)
			break;
		je->tls_state_off = (int)i;
		je->tls_state_uninit = je->tls_image[i];
	}
	if (found != 1)
		je->tls_state_off = -1;
}

/*
 * libjemalloc's TLS (its tsd) is reached through one slot the loader
 * fills with the block's offset from the thread pointer.  A statically
 * linked jemalloc shares the executable's TLS block with the program's own
 * thread-locals: tls_slot stays 0, and find_static_tls looks for its one
 * variable there instead.
 */
static int find_tls(struct ma_jemalloc *je, const struct ma_elf *e)
{
	uint64_t slot;

	if (ma_elf_tls_image(e, &je->tls_image, &je->tls_len))
		return MA_E_NOMEM;
	find_state_byte(je);
	if (je->tls_len && ma_elf_find_reloc(e, MA_ARCH_R_TLS_TPOFF, &slot))
		je->tls_slot = slot + je->bias;
	return 0;
}

static bool is_main_executable(const struct ma_target *t, const struct ma_mapping *m);

/*
 * jemalloc linked into the program: its thread-local state is the symbol
 * tsd_tls (je_tsd_tls under jemalloc's private prefix) in the program's
 * own TLS block, which x86-64's glibc places right below the thread
 * pointer, at minus its size rounded up to its alignment (the executable
 * is the first TLS module).  A thread whose copy of that one variable is
 * still its initial image never called into jemalloc, as for the shared
 * library.  Found only if the symbol table names it; else, as before, no
 * thread can be told apart.
 */
static int find_static_tls(struct ma_jemalloc *je, struct ma_elf *e)
{
	static const char *const names[] = { "je_tsd_tls", "_rjem_je_tsd_tls", "tsd_tls" };
	struct ma_elf_sym sym;
	uint64_t memsz, align, vaddr, firstbyte, block;
	unsigned char *image;
	size_t len;
	const struct ma_elf_sym *tsd = &sym;

	if (!ma_elf_tls_layout(e, &memsz, &align, &vaddr) || !ma_elf_tls_sym(e, names, 3, &sym) ||
	    !sym.size || sym.addr + sym.size > memsz || (align & (align - 1)))
		return 0;
	if (ma_elf_tls_image(e, &image, &len))
		return MA_E_NOMEM;
	if (!image || len < tsd->addr + tsd->size) {
		free(image);
		return 0;
	}
	/* glibc's offset of the first module's block (TLS_TCB_AT_TP) */
	firstbyte = (0 - (vaddr & (align - 1))) & (align - 1);
	block = ((memsz - firstbyte + align - 1) & ~(align - 1)) + firstbyte;
	je->tls_image = malloc(tsd->size);
	if (!je->tls_image) {
		free(image);
		return MA_E_NOMEM;
	}
	memcpy(je->tls_image, image + tsd->addr, tsd->size);
	free(image);
	je->tls_len = tsd->size;
	find_state_byte(je);
	je->tls_tpoff = (int64_t)tsd->addr - (int64_t)block;
	je->have_tpoff = true;
	je->tls_static = true;
	return 0;
}

int ma_target_read_tls_offset(struct ma_target *t, pid_t tid)
{
	struct ma_jemalloc *je = &t->je;

	if (!je->tls_slot && !je->tls_static)
		return -1;
	/* The thread's memory is the process's: read it through the thread. */
	if (!je->have_tpoff) {
		if (ma_mem_read(tid, je->tls_slot, &je->tls_tpoff, sizeof(je->tls_tpoff)) != 0) {
			ma_err_clear();
			return -1;
		}
		je->have_tpoff = true;
	}
	if (!je->tls_now) {
		if (!(je->tls_now = calloc(1, je->tls_len)))
			return -1;
		ma_kernel_touch(je->tls_now, je->tls_len);
	}
	return 0;
}

enum ma_je_thread_state ma_thread_je_state(struct ma_target *t, pid_t tid, uint64_t tp)
{
	struct ma_jemalloc *je = &t->je;
	unsigned char *now;
	int uninit = je->tls_state_uninit, state;

	if ((!je->tls_slot && !je->tls_static) || ma_target_read_tls_offset(t, tid) != 0)
		return MA_JE_STATE_UNKNOWN;
	now = je->tls_now;
	if (ma_mem_read(tid, tp + (uint64_t)je->tls_tpoff, now, je->tls_len) != 0) {
		ma_err_clear();
		return MA_JE_STATE_UNKNOWN;
	}
	if (memcmp(now, je->tls_image, je->tls_len) == 0)
		return MA_JE_STATE_NONE;
	if (je->tls_state_off < 0)
		return MA_JE_STATE_FULL;
	state = now[je->tls_state_off];
	if (state == uninit - 3)
		return MA_JE_STATE_MINIMAL;
	if (state == uninit - 2 || state == uninit - 1)
		return MA_JE_STATE_EXITING;
	/* Below: nominal.  Above uninitialized: not the state byte after all. */
	return MA_JE_STATE_FULL;
}

/* What probe_object looks up, for each prefix. */
static const char *const je_api[] = { "mallctl", "mallctlnametomib", "mallctlbymib",
				      "malloc_stats_print", "malloc_usable_size" };
#define NPREFIXES (sizeof(prefixes) / sizeof(prefixes[0]))
#define NAPI (sizeof(je_api) / sizeof(je_api[0]))

static int probe_object(struct ma_target *t, const struct ma_mapping *first, struct ma_elf *e)
{
	struct ma_jemalloc *je = &t->je;
	char names[NPREFIXES][NAPI][64];
	const char *want[NPREFIXES * NAPI];
	struct ma_elf_sym s[NPREFIXES * NAPI];
	bool found[NPREFIXES * NAPI];

	/* Every name of every flavour in one pass: a big binary's tables are read once. */
	for (size_t p = 0; p < NPREFIXES; p++)
		for (size_t k = 0; k < NAPI; k++) {
			snprintf(names[p][k], sizeof(names[p][k]), "%s%s", prefixes[p], je_api[k]);
			want[p * NAPI + k] = names[p][k];
		}
	if (ma_elf_syms_named(e, want, NPREFIXES * NAPI, s, found))
		return MA_E_NOMEM;
	for (size_t p = 0; p < NPREFIXES; p++) {
		const struct ma_elf_sym *api = &s[p * NAPI];
		const bool *have = &found[p * NAPI];

		if (!have[0] || api[0].type != 2)
			continue;
		je->prefix = prefixes[p];
		je->flavour = (enum ma_je_flavour)p;
		je->object = strdup(first->path);
		je->is_static = !is_libjemalloc(first->path);
		je->tls_state_off = -1;
		je->bias = ma_target_load_bias(first, e);
		je->mallctl = api[0].addr + je->bias;
		je->mallctlnametomib = have[1] ? api[1].addr + je->bias : 0;
		je->mallctlbymib = have[2] ? api[2].addr + je->bias : 0;
		je->malloc_stats_print = have[3] ? api[3].addr + je->bias : 0;
		je->malloc_usable_size = have[4] ? api[4].addr + je->bias : 0;
		record_code_bytes(je, e);
		if (!je->is_static && find_tls(je, e))
			return MA_E_NOMEM;
		if (je->is_static && is_main_executable(t, first) && find_static_tls(je, e))
			return MA_E_NOMEM;
		if (je->is_static ? static_text_ranges(je, e) : shared_text_ranges(je, t, first))
			return MA_E_NOMEM;
		merge_ranges(je);
		return 1;
	}
	return 0;
}

/*
 * The dynamic loader's code: a thread in it may be relocating or loading
 * objects (startup, dlopen, lazy binding), with the loader's lock held or
 * jemalloc's own GOT not yet filled in.
 */
/*
 * A dynamically linked program between its exec and its loader's mapping
 * of libc: the dynamic loader (ld-*) is mapped, libc is not.
 */
/* Is a mapping of T's an object whose file name starts with PREFIX? */
static bool maps_object(const struct ma_target *t, const char *prefix)
{
	size_t plen = strlen(prefix);

	for (size_t i = 0; i < t->nmaps; i++) {
		const char *base = t->maps[i].path ? strrchr(t->maps[i].path, '/') : NULL;

		if (base && strncmp(base + 1, prefix, plen) == 0)
			return true;
	}
	return false;
}

bool ma_target_maps_loader(const struct ma_target *t)
{
	return maps_object(t, "ld-");
}

static bool still_loading(const struct ma_target *t)
{
	return ma_target_maps_loader(t) && !maps_object(t, "libc.so") && !maps_object(t, "libc-");
}

static void find_loader(struct ma_target *t)
{
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i];
		const char *base = m->path ? strrchr(m->path, '/') : NULL;

		if (!base || m->perms[2] != 'x' || strncmp(base + 1, "ld-", 3) != 0)
			continue;
		if (!t->loader.hi || m->start < t->loader.lo)
			t->loader.lo = m->start;
		if (m->end > t->loader.hi)
			t->loader.hi = m->end;
	}
}

/*
 * memattach's frag agent (a memfd-backed library): a thread inside it runs
 * an allocation hook, called from jemalloc and perhaps holding the agent's
 * lock.  No unwinder finds its unwind tables (the file cannot be opened by
 * path), so the walk ends in it: its range must be checked by itself.
 */
static void find_agent(struct ma_target *t)
{
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i];

		if (!m->path || strcmp(m->path, "/memfd:memattach-agent") != 0)
			continue;
		if (!t->agent.hi || m->start < t->agent.lo)
			t->agent.lo = m->start;
		if (m->end > t->agent.hi)
			t->agent.hi = m->end;
	}
}

static bool is_libc(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0;
}

/* What find_libc_functions looks up in libc, in one pass. */
enum { LF_FORK, LF_LIBC_FORK, LF_DLOPEN, LF_DLERROR, LF_EPOLL_WAIT, LF_EPOLL_PWAIT, LF_TID_DESC,
       LF_CREATE, LF_ATTR_INIT, LF_ATTR_SETDETACH, LF_ATTR_DESTROY,
       LF_ATTR_SETSTACKSIZE, LF_SLEEP, LF_SYSCALL, LF_FIND_OBJECT,
       LF_LOCKED,
       LF_STACK_LOCKED = LF_LOCKED + 10 };
static const char *const libc_names[] = {
	[LF_FORK] = "fork", [LF_LIBC_FORK] = "__libc_fork", [LF_DLOPEN] = "dlopen",
	[LF_DLERROR] = "dlerror", [LF_EPOLL_WAIT] = "epoll_wait", [LF_EPOLL_PWAIT] = "epoll_pwait",
	[LF_TID_DESC] = "_thread_db_pthread_tid",
	/* what a thread of memattach's own is made with (ownthread.h) */
	[LF_CREATE] = "pthread_create", [LF_ATTR_INIT] = "pthread_attr_init",
	[LF_ATTR_SETDETACH] = "pthread_attr_setdetachstate",
	[LF_ATTR_DESTROY] = "pthread_attr_destroy",
	[LF_ATTR_SETSTACKSIZE] = "pthread_attr_setstacksize", [LF_SLEEP] = "sleep",
	[LF_SYSCALL] = "syscall", [LF_FIND_OBJECT] = "_dl_find_object",
	/* the functions that hold the loader's locks (target.h) */
	[LF_LOCKED] = "dlopen", "dlmopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1",
	"dlinfo", "dl_iterate_phdr", "__libc_dlopen_mode",
	/* ... and those that hold the thread-stack lock or the default attributes' (target.h) */
	[LF_STACK_LOCKED] = "pthread_create", "pthread_join", "pthread_tryjoin_np",
	"pthread_timedjoin_np", "pthread_clockjoin_np", "pthread_detach", "pthread_exit",
	"pthread_getattr_default_np", "pthread_setattr_default_np",
	/* a setuid() holds it until every thread has taken glibc's SIGSETXID */
	"setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid",
	"setresgid", "setgroups",
};
#define NLIBC_NAMES (sizeof(libc_names) / sizeof(libc_names[0]))

static struct ma_range sym_range(const struct ma_elf_sym *s, uint64_t bias)
{
	return (struct ma_range){ s->addr + bias, s->addr + bias + s->size };
}

/* Is ADDR inside one of T's thread-stack lock holders already? */
static bool thread_fn_covers(const struct ma_target *t, uint64_t addr)
{
	for (size_t k = 0; k < t->nthread_fns; k++)
		if (addr >= t->thread_fns[k].lo && addr < t->thread_fns[k].hi)
			return true;
	return false;
}

/*
 * Where the hidden function at file address ADDR of E ends: at the next
 * symbol (a hidden function has none of its own in .dynsym; what follows
 * it up to the next one is covered too, which only refuses more).  0 if
 * none follows within 64 KiB.
 */
static uint64_t hidden_fn_end(struct ma_elf *e, uint64_t addr)
{
	uint64_t next = ma_elf_next_sym_addr(e, addr);

	return next && next - addr <= 65536 ? next : 0;
}

/*
 * The functions libc function F (a holder of the thread-stack lock) ends
 * by jumping to are holders too: glibc 2.36's pthread_join is a jmp to
 * the hidden __pthread_clockjoin_ex, which takes the lock and is not in
 * the dynamic symbol table.  A target inside another listed function
 * adds nothing.
 */
static void add_tail_callees(struct ma_target *t, struct ma_elf *e, uint64_t bias, struct ma_range f)
{
	uint8_t code[512];
	uint64_t to[4], end;
	size_t len = f.hi - f.lo, n;

	if (len > sizeof(code) || ma_mem_read(t->proc_pid, f.lo, code, len) != 0) {
		ma_err_clear();
		return;
	}
	n = ma_arch_jumps_out(code, len, f.lo, to, 4);
	for (size_t i = 0; i < n && t->nthread_fns < MA_MAX_THREAD_FNS; i++) {
		struct ma_range r = { to[i], 0 };

		if (thread_fn_covers(t, to[i]) || !(end = hidden_fn_end(e, to[i] - bias)))
			continue;
		r.hi = end + bias;
		t->thread_fns[t->nthread_fns++] = r;
	}
}

/* pthread_create & co. for a thread of memattach's own: all functions, all found, or none. */
static void find_own_fns(struct ma_target *t, const struct ma_elf_sym *s, const bool *found,
			 uint64_t bias)
{
	uint64_t a[LF_SLEEP - LF_CREATE + 1];

	for (int k = LF_CREATE; k <= LF_SLEEP; k++) {
		if (!found[k] || s[k].type != 2 || !s[k].addr)
			return;
		a[k - LF_CREATE] = s[k].addr + bias;
	}
	t->own_fns = (struct ma_own_fns){ a[0], a[1], a[2], a[3], a[4], a[5], { 0, 0 } };
	if (found[LF_SYSCALL] && s[LF_SYSCALL].type == 2 && s[LF_SYSCALL].addr && s[LF_SYSCALL].size)
		t->own_fns.syscall_fn = sym_range(&s[LF_SYSCALL], bias);
}

/* libc's fork(), dlopen/dlerror, epoll_wait/epoll_pwait, the loader-lock holders, the tid's place. */
static void find_libc_functions(struct ma_target *t, struct ma_elf *e, uint64_t bias)
{
	struct ma_elf_sym s[NLIBC_NAMES];
	bool found[NLIBC_NAMES];
	const struct ma_elf_sym *fork;

	if (ma_elf_syms_named(e, libc_names, NLIBC_NAMES, s, found)) {
		ma_err_clear();
		return;
	}
	fork = found[LF_FORK] ? &s[LF_FORK] : found[LF_LIBC_FORK] ? &s[LF_LIBC_FORK] : NULL;
	if (fork) {
		t->fork_fn.lo = fork->addr + bias;
		t->fork_fn.hi = t->fork_fn.lo + (fork->size ? fork->size : 1);
	}
	if (!t->dlopen_fn && found[LF_DLOPEN] && s[LF_DLOPEN].type == 2)
		t->dlopen_fn = s[LF_DLOPEN].addr + bias;
	if (!t->dlerror_fn && found[LF_DLERROR] && s[LF_DLERROR].type == 2)
		t->dlerror_fn = s[LF_DLERROR].addr + bias;
	if (!t->pthread_tid_desc && found[LF_TID_DESC] && s[LF_TID_DESC].size == 12)
		t->pthread_tid_desc = s[LF_TID_DESC].addr + bias;
	for (size_t k = LF_LOCKED; k < LF_STACK_LOCKED && t->ndl_fns < MA_MAX_DL_FNS; k++)
		if (found[k] && s[k].size)
			t->dl_fns[t->ndl_fns++] = sym_range(&s[k], bias);
	for (size_t k = LF_STACK_LOCKED; k < NLIBC_NAMES && t->nthread_fns < MA_MAX_THREAD_FNS; k++)
		if (found[k] && s[k].size) {
			t->thread_fns[t->nthread_fns++] = sym_range(&s[k], bias);
			add_tail_callees(t, e, bias, sym_range(&s[k], bias));
		}
	find_own_fns(t, s, found, bias);
	if (found[LF_FIND_OBJECT] && s[LF_FIND_OBJECT].type == 2 && s[LF_FIND_OBJECT].addr)
		t->find_object_fn = s[LF_FIND_OBJECT].addr + bias;
	/* libc's own epoll_wait wrappers: r10 is theirs to clobber. */
	for (int k = 0; k < 2; k++)
		if (found[LF_EPOLL_WAIT + k] && s[LF_EPOLL_WAIT + k].size)
			t->epoll_fn[k] = sym_range(&s[LF_EPOLL_WAIT + k], bias);
}

/*
 * libc's fork(): between the atfork prepare and parent handlers a thread
 * holds every allocator lock (jemalloc's prefork handler took them) with
 * no jemalloc frame on its stack.  Looked up in libc, or in the executable
 * when libc is linked in statically.
 */
static void find_fork(struct ma_target *t)
{
	for (int pass = 0; pass < 2 && !t->fork_fn.hi; pass++) {
		for (size_t i = 0; i < t->nmaps && !t->fork_fn.hi; i++) {
			const struct ma_mapping *m = &t->maps[i], *first;
			struct ma_elf e;
			int fd;

			if (!m->path || m->path[0] != '/' || m->perms[2] != 'x')
				continue;
			if (pass == 0 ? !is_libc(m->path) : !is_main_executable(t, m))
				continue;
			first = ma_target_first_mapping(t, m);
			if ((fd = ma_target_open_mapped_file(t, first)) < 0 ||
			    ma_elf_open_fd(&e, fd, first->path) != 0) {
				ma_err_clear();
				continue;
			}
			find_libc_functions(t, &e, ma_target_load_bias(first, &e));
			if (pass == 0)
				t->libc_code = (struct ma_range){ m->start, m->end };
			ma_elf_release(&e);
		}
	}
}

/* Is M a mapping of the process's executable (/proc/PID/exe)? */
static bool is_main_executable(const struct ma_target *t, const struct ma_mapping *m)
{
	char path[64], exe[4096];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", t->proc_pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	if (n > 10 && strcmp(exe + n - 10, " (deleted)") == 0)
		exe[n - 10] = '\0';
	return m->path && strcmp(m->path, exe) == 0;
}

/*
 * Is the executable's code mapped?  Not for a moment during exec(): the
 * kernel maps the new program's segments one by one into the new,
 * empty address space.
 */
static bool exe_code_mapped(const struct ma_target *t)
{
	for (size_t i = 0; i < t->nmaps; i++)
		if (t->maps[i].path && t->maps[i].perms[2] == 'x' && is_main_executable(t, &t->maps[i]))
			return true;
	return false;
}

int ma_target_find_jemalloc(struct ma_target *t)
{
	bool stripped_static = false;
	int pass, found = 0;

	ma_err_clear();
	/* Pass 0: objects named like jemalloc; pass 1: every other object. */
	for (pass = 0; pass < 2 && !found; pass++) {
		for (size_t i = 0; i < t->nmaps && !found; i++) {
			const struct ma_mapping *m = &t->maps[i], *first;
			struct ma_elf e;
			int fd;

			if (!m->path || m->path[0] != '/' || m->perms[2] != 'x')
				continue;
			if ((pass == 0) != is_libjemalloc(m->path))
				continue;
			first = ma_target_first_mapping(t, m);
			fd = ma_target_open_mapped_file(t, first);
			if (fd < 0)
				continue;
			if (ma_elf_open_fd(&e, fd, first->path) != 0) {
				ma_err_clear();
				continue;
			}
			found = probe_object(t, first, &e);
			/* jemalloc's messages start with "<jemalloc>": its code is here. */
			if (!found && !e.has_symtab && is_main_executable(t, first) &&
			    ma_elf_section_contains(&e, ".rodata", "<jemalloc>"))
				stripped_static = true;
			/* The program needs libjemalloc, not mapped yet: its loader is at work. */
			if (!found && is_main_executable(t, first) && ma_elf_needs(&e, "libjemalloc"))
				t->je_pending = true;
			ma_elf_release(&e);
			if (found < 0)
				return found;
		}
	}
	if (!found) {
		if (stripped_static)
			return ma_fail(MA_E_STRIPPED,
				       "process %d links jemalloc statically into a stripped binary: "
				       "no mallctl in its mapped objects and the executable has no "
				       ".symtab; run an unstripped build (or keep .symtab)",
				       t->pid);
		if (still_loading(t) || t->je_pending || !exe_code_mapped(t))
			return ma_fail(MA_E_NOJEMALLOC,
				       "process %d is still loading its libraries (it has just started "
				       "or called exec): no jemalloc mapped yet; run memattach again",
				       t->pid);
		return ma_fail(MA_E_NOJEMALLOC,
			       "process %d does not use jemalloc: no mallctl in its mapped objects",
			       t->pid);
	}
	find_fork(t);
	find_loader(t);
	find_agent(t);
	return 0;
}

bool ma_target_in_jemalloc(const struct ma_target *t, uint64_t addr)
{
	size_t lo = 0, hi = t->je.ntext;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->je.text[mid].hi <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->je.ntext && t->je.text[lo].lo <= addr && addr < t->je.text[lo].hi;
}

static int by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct ma_je_process *)a)->pid, y = ((const struct ma_je_process *)b)->pid;

	return (x > y) - (x < y);
}

/* Fill P if PID maps a jemalloc (its maps and symbols only). */
static bool probe_jemalloc(pid_t pid, struct ma_je_process *p)
{
	struct ma_target t;
	bool yes;

	if (ma_target_open(&t, pid)) {
		ma_err_clear();
		return false;
	}
	yes = ma_target_find_jemalloc(&t) == 0;
	if (yes) {
		snprintf(p->object, sizeof(p->object), "%s", t.je.object ? t.je.object : "?");
		p->is_static = t.je.is_static;
	}
	ma_target_release(&t);
	ma_err_clear();
	return yes;
}

size_t ma_jemalloc_processes(bool (*keep)(void *ctx, const char *comm), void *ctx,
			     struct ma_je_process *out, size_t max)
{
	struct dirent *d;
	size_t n = 0;
	DIR *dir = opendir("/proc");

	if (!dir)
		return 0;
	while ((d = readdir(dir)) && n < max) {
		struct ma_proc_status ps;
		char *end;
		long pid = strtol(d->d_name, &end, 10);

		if (*end || pid <= 0 || pid == getpid())
			continue;
		if (ma_proc_read_status((pid_t)pid, 0, &ps) != 0) {
			ma_err_clear();
			continue;
		}
		if (ps.state == 'Z' || (keep && !keep(ctx, ps.name)))
			continue;
		memset(&out[n], 0, sizeof(out[n]));
		if (!probe_jemalloc((pid_t)pid, &out[n]))
			continue;
		out[n].pid = (pid_t)pid;
		snprintf(out[n].comm, sizeof(out[n].comm), "%s", ps.name);
		out[n].vm_rss = ps.vm_rss;
		n++;
	}
	closedir(dir);
	qsort(out, n, sizeof(*out), by_pid);
	return n;
}
