/*
 * Unit test of the inline-detour planner (attach/arch_x86_64_detour.c),
 * judged by running what it plans in this process:
 *   - small functions written here in assembly, one per kind of first
 *     bytes (an immediate compare, a RIP-relative load, a short
 *     conditional branch, a tail jump, endbr64): detoured, each must give
 *     its own result through the wrapper, and back once the bytes are
 *     restored; the ones no safe plan exists for (a call, a syscall or a
 *     short jump in the first bytes, a loop back into them) are refused;
 *   - every entry point of Debian's libjemalloc.so.2, opened with dlopen:
 *     each is planned, and the C API's are detoured in turn and called
 *     (malloc, free, calloc, realloc, the aligned ones, the *allocx
 *     family, operator new and delete): the wrapper runs, the allocator
 *     still works;
 *   - jemalloc linked into the static and the prefixed daemon fixtures:
 *     every C API entry point planned from the file (`detour --plan
 *     PREFIX FILE...` does only this, for tests/attach/version_matrix.sh).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch.h"
#include "check.h"
#include "elfsyms.h"

/* ---- the wrapper: counts, then calls the original with six arguments ---- */

typedef long (*fn6)(long, long, long, long, long, long);
static fn6 original;
static long wrapper_hits;

static long wrapper(long a, long b, long c, long d, long e, long f)
{
	wrapper_hits++;
	return original(a, b, c, d, e, f);
}

/* ---- functions with the first bytes the planner must handle ---- */

__asm__(".text\n"
	".p2align 4\n"
	".globl t_cmp\nt_cmp:\n" /* cmp $imm32 (7 bytes), then ja */
	"  cmp $0x1000, %rdi\n"
	"  ja 1f\n"
	"  lea 1(%rdi), %rax\n"
	"  ret\n"
	"1: lea 2(%rdi), %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_riprel\nt_riprel:\n" /* a RIP-relative load first */
	"  mov t_data(%rip), %rax\n"
	"  add %rdi, %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_jcc8\nt_jcc8:\n" /* test (3) + je rel8 (2): the jump is displaced */
	"  test %rdi, %rdi\n"
	"  je 1f\n"
	"  lea 5(%rdi), %rax\n"
	"  ret\n"
	"1: mov $77, %eax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_tail\nt_tail:\n" /* a tail jump (jmp rel32): the whole function */
	"  .byte 0xe9\n" /* jmp rel32 t_cmp, whatever the assembler would choose */
	"  .long t_cmp - (. + 4)\n"
	"  int3\n"
	"  int3\n"
	"  int3\n"
	".p2align 4\n"
	".globl t_endbr\nt_endbr:\n" /* endbr64 stays; the patch starts after it */
	"  endbr64\n"
	"  push %rbx\n"
	"  mov %rdi, %rbx\n"
	"  lea 3(%rbx), %rax\n"
	"  pop %rbx\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_late_syscall\nt_late_syscall:\n" /* the syscall comes after the displaced bytes */
	"  mov $39, %eax\n"
	"  syscall\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_call\nt_call:\n" /* a call in the first bytes: refused */
	"  call t_cmp\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_syscall\nt_syscall:\n" /* a syscall in the first bytes: refused */
	"  xor %eax, %eax\n"
	"  syscall\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_short\nt_short:\n" /* leaves after 2 bytes: refused */
	"  jmp 1f\n"
	"1: ret\n"
	".p2align 4\n"
	".globl t_loop\nt_loop:\n" /* the loop's branch lands inside the first 5 bytes: refused */
	"  xor %eax, %eax\n"
	"1: add $1, %rax\n"
	"  cmp %rdi, %rax\n"
	"  jb 1b\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_end\nt_end:\n"
	".data\n"
	"t_data: .quad 100\n"
	".text\n");

long t_cmp(long), t_riprel(long), t_jcc8(long), t_tail(long), t_endbr(long), t_late_syscall(long),
	t_call(long), t_syscall(long), t_short(long), t_loop(long);
extern char t_end[];

struct case_fn {
	const char *name;
	long (*fn)(long);
	const void *next; /* the function after it (its bytes end there) */
	bool plannable;
	long arg;
};

/* ---- a trampoline page within reach, and writing over code ---- */

static uint8_t *tramp_page;

static uint8_t *page_near(uint64_t addr)
{
	long pg = sysconf(_SC_PAGESIZE);

	for (uint64_t d = 1 << 20; d < (1ULL << 30); d += 1 << 20) {
		uint64_t want = ((addr - d) & ~(uint64_t)(pg - 1));
		void *p = mmap((void *)want, pg, PROT_READ | PROT_WRITE | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (p != MAP_FAILED)
			return p;
	}
	return NULL;
}

static bool write_code(uint64_t at, const void *bytes, size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t lo = at & ~(uint64_t)(pg - 1), hi = (at + n + pg - 1) & ~(uint64_t)(pg - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
		return false;
	memcpy((void *)at, bytes, n);
	__builtin___clear_cache((char *)at, (char *)at + n);
	return mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC) == 0;
}

/* Detour FN (LEN bytes) to the wrapper: the plan, or false with it refused. */
static bool install(void *fn, size_t len, struct ma_detour_plan *p, uint8_t *saved)
{
	if (!ma_arch_detour_plan(fn, len, (uint64_t)fn, (uint64_t)tramp_page, (uint64_t)wrapper, p))
		return false;
	memcpy(tramp_page, p->tramp_code, p->tramp_len);
	__builtin___clear_cache((char *)tramp_page, (char *)tramp_page + p->tramp_len);
	memcpy(saved, (uint8_t *)fn + p->patch_off, p->patch_len);
	original = (fn6)p->original;
	wrapper_hits = 0;
	return write_code((uint64_t)fn + p->patch_off, p->patch, p->patch_len);
}

static bool uninstall(void *fn, const struct ma_detour_plan *p, const uint8_t *saved)
{
	return write_code((uint64_t)fn + p->patch_off, saved, p->patch_len);
}

static void local_functions(void)
{
	const struct case_fn cases[] = {
		{ "cmp $imm32", t_cmp, (void *)t_riprel, true, 5 },
		{ "cmp $imm32 (the other branch)", t_cmp, (void *)t_riprel, true, 0x2000 },
		{ "RIP-relative load", t_riprel, (void *)t_jcc8, true, 7 },
		{ "test + je rel8", t_jcc8, (void *)t_tail, true, 0 },
		{ "test + je rel8 (not taken)", t_jcc8, (void *)t_tail, true, 9 },
		{ "tail jmp rel32", t_tail, (void *)t_endbr, true, 11 },
		{ "endbr64 first", t_endbr, (void *)t_late_syscall, true, 4 },
		{ "a syscall after the displaced bytes", t_late_syscall, (void *)t_call, true, 0 },
		{ "a call first", t_call, (void *)t_syscall, false, 0 },
		{ "a syscall in the first bytes", t_syscall, (void *)t_short, false, 0 },
		{ "a short jmp first", t_short, (void *)t_loop, false, 0 },
		{ "a loop back into the first bytes", t_loop, (void *)t_end, false, 3 },
	};
	char name[160];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct case_fn *c = &cases[i];
		size_t len = (size_t)((const char *)c->next - (const char *)c->fn);
		struct ma_detour_plan p;
		uint8_t saved[32];
		long want, got, after;

		if (!c->plannable) {
			bool planned = ma_arch_detour_plan((void *)c->fn, len, (uint64_t)c->fn,
							   (uint64_t)tramp_page, (uint64_t)wrapper, &p);
			snprintf(name, sizeof name, "%s: refused (%s)", c->name, planned ? "planned!" : p.reason);
			CHECK(name, !planned && p.reason[0]);
			continue;
		}
		want = c->fn(c->arg);
		if (!install((void *)c->fn, len, &p, saved)) {
			snprintf(name, sizeof name, "%s: planned and written (%s)", c->name, p.reason);
			CHECK(name, false);
			continue;
		}
		got = c->fn(c->arg);
		snprintf(name, sizeof name, "%s: through the wrapper, %ld as before (%ld; %u bytes displaced at +%u)",
			 c->name, want, got, p.patch_len, p.patch_off);
		CHECK(name, got == want && wrapper_hits == 1);
		uninstall((void *)c->fn, &p, saved);
		after = c->fn(c->arg);
		snprintf(name, sizeof name, "%s: restored, the wrapper no longer runs", c->name);
		CHECK(name, after == want && wrapper_hits == 1);
	}
}

/* ---- Debian's libjemalloc.so.2 ---- */

static void *je;

/* The entry point NAME of the dlopen'ed jemalloc, and its size. */
static void *je_fn(const char *name, size_t *len)
{
	void *f = dlsym(je, name);
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	*len = 0;
	if (f && dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) && sym)
		*len = sym->st_size;
	return f;
}

typedef void *(*alloc1)(size_t);
typedef void (*free1)(void *);

/* One call of entry point NAME, detoured, as its kind requires; true if the allocator answered right. */
static bool exercise(const char *name)
{
	alloc1 jm_malloc = (alloc1)dlsym(je, "malloc");
	free1 jm_free = (free1)dlsym(je, "free");
	void *f = dlsym(je, name), *p = NULL;

	if (!strcmp(name, "malloc") || !strcmp(name, "valloc") || !strcmp(name, "_Znwm")) {
		p = ((alloc1)f)(64);
	} else if (!strcmp(name, "calloc")) {
		p = ((void *(*)(size_t, size_t))f)(4, 16);
		if (p && ((long *)p)[7] != 0)
			return false;
	} else if (!strcmp(name, "realloc")) {
		p = ((void *(*)(void *, size_t))f)(jm_malloc(16), 4096);
	} else if (!strcmp(name, "aligned_alloc") || !strcmp(name, "memalign")) {
		p = ((void *(*)(size_t, size_t))f)(256, 512);
		if ((uintptr_t)p % 256)
			return false;
	} else if (!strcmp(name, "posix_memalign")) {
		if (((int (*)(void **, size_t, size_t))f)(&p, 128, 100) || (uintptr_t)p % 128)
			return false;
	} else if (!strcmp(name, "mallocx")) {
		p = ((void *(*)(size_t, int))f)(64, 0);
	} else if (!strcmp(name, "rallocx")) {
		p = ((void *(*)(void *, size_t, int))f)(jm_malloc(16), 4096, 0);
	} else if (!strcmp(name, "xallocx")) {
		p = jm_malloc(64);
		if (((size_t (*)(void *, size_t, size_t, int))f)(p, 64, 0, 0) < 64)
			return false;
	} else if (!strcmp(name, "free") || !strcmp(name, "dallocx") || !strcmp(name, "_ZdlPv")) {
		((void (*)(void *, int))f)(jm_malloc(64), 0);
		return true;
	} else if (!strcmp(name, "sdallocx") || !strcmp(name, "_ZdlPvm")) {
		((void (*)(void *, size_t, int))f)(jm_malloc(64), 64, 0);
		return true;
	} else {
		return false;
	}
	if (!p)
		return false;
	memset(p, 0x5a, 64);
	jm_free(p);
	return true;
}

static void jemalloc_entry_points(void)
{
	static const char *const called[] = { "malloc", "calloc", "realloc", "free", "posix_memalign",
					      "aligned_alloc", "memalign", "valloc", "mallocx", "rallocx",
					      "xallocx", "sdallocx", "dallocx", "_Znwm", "_ZdlPv", "_ZdlPvm" };
	char name[200];

	je = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND); /* its own free for its free@plt */
	snprintf(name, sizeof name, "Debian's libjemalloc.so.2 opens (%s)", je ? "yes" : dlerror());
	CHECK(name, je != NULL);
	if (!je)
		return;
	for (size_t i = 0; i < sizeof called / sizeof called[0]; i++) {
		size_t len;
		void *f = je_fn(called[i], &len);
		struct ma_detour_plan p;
		uint8_t saved[32];
		bool ok;

		if (!f || !len) {
			snprintf(name, sizeof name, "jemalloc %s: found with its size", called[i]);
			CHECK(name, false);
			continue;
		}
		tramp_page = page_near((uint64_t)f);
		if (!tramp_page || !install(f, len, &p, saved)) {
			snprintf(name, sizeof name, "jemalloc %s: planned (%s)", called[i],
				 tramp_page ? p.reason : "no page within reach");
			CHECK(name, false);
			continue;
		}
		ok = exercise(called[i]);
		snprintf(name, sizeof name, "jemalloc %s detoured: the wrapper ran and the allocator answered (%u bytes displaced)",
			 called[i], p.patch_len);
		CHECK(name, ok && wrapper_hits >= 1);
		uninstall(f, &p, saved);
		wrapper_hits = 0;
		ok = exercise(called[i]);
		snprintf(name, sizeof name, "jemalloc %s restored: no wrapper", called[i]);
		CHECK(name, ok && wrapper_hits == 0);
		munmap(tramp_page, sysconf(_SC_PAGESIZE));
	}
}

/* ---- jemalloc linked into an executable: planned from the file ---- */

static const char *const entry_names[] = { "malloc", "calloc", "realloc", "free", "posix_memalign",
					   "aligned_alloc", "memalign", "valloc", "mallocx", "rallocx",
					   "xallocx", "sdallocx", "dallocx" };

/* LEN bytes of E at link-time address VADDR (from its PT_LOAD segments). */
static bool read_vaddr(const struct ma_elf *e, uint64_t vaddr, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < e->nsegs; i++) {
		const struct ma_elf_seg *g = &e->segs[i];

		if (vaddr >= g->vaddr && vaddr + len <= g->vaddr + g->filesz)
			return pread(e->fd, buf, len, (off_t)(g->offset + vaddr - g->vaddr)) == (ssize_t)len;
	}
	return false;
}

/*
 * Every entry point of the jemalloc in PATH (names under PREFIX) has a
 * plan: frag's detours would cover that executable whole.
 */
static void plan_file(const char *path, const char *prefix)
{
	struct ma_elf e;
	char name[300], sym[64], refused[200] = "";
	size_t found = 0, planned = 0;
	static uint8_t code[1 << 16];

	if (ma_elf_open(&e, path)) {
		snprintf(name, sizeof name, "%s opens (make fixtures builds it)", path);
		CHECK(name, false);
		return;
	}
	for (size_t i = 0; i < sizeof entry_names / sizeof entry_names[0]; i++) {
		const struct ma_elf_sym *s;
		struct ma_detour_plan p;
		size_t len;

		snprintf(sym, sizeof sym, "%s%s", prefix, entry_names[i]);
		s = ma_elf_sym_by_name(&e, sym);
		if (!s || !s->size)
			continue;
		found++;
		len = s->size < sizeof code ? s->size : sizeof code;
		if (!read_vaddr(&e, s->addr, code, len))
			continue;
		if (ma_arch_detour_plan(code, len, s->addr, s->addr - (16 << 20), 0x1000, &p))
			planned++;
		else if (!refused[0])
			snprintf(refused, sizeof refused, "; %s: %s", sym, p.reason);
	}
	snprintf(name, sizeof name, "%s: every jemalloc entry point found has a plan (%zu of %zu%s)", path,
		 planned, found, refused);
	CHECK(name, found >= 10 && planned == found);
	ma_elf_release(&e);
}

int main(int argc, char **argv)
{
	/* detour --plan PREFIX FILE...: only plan_file, for the version matrix */
	if (argc >= 4 && strcmp(argv[1], "--plan") == 0) {
		for (int i = 3; i < argc; i++)
			plan_file(argv[i], argv[2]);
		CHECK_DONE();
	}
	/*
	 * libjemalloc.so.2 keeps its thread state in initial-exec TLS: dlopen
	 * needs more static TLS room than glibc leaves by default.  Once, run
	 * again with a tunable that leaves enough.
	 */
	if (argc == 1 && !getenv("MA_DETOUR_TLS")) {
		setenv("MA_DETOUR_TLS", "1", 1);
		setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=65536", 1);
		execv("/proc/self/exe", argv);
	}
	tramp_page = page_near((uint64_t)t_cmp);
	CHECK("a trampoline page within 1 GiB of the code", tramp_page != NULL);
	if (!tramp_page)
		CHECK_DONE();
	local_functions();
	munmap(tramp_page, sysconf(_SC_PAGESIZE));
	tramp_page = NULL;
	jemalloc_entry_points();
	plan_file("build/fixtures/daemon_static", "");
	plan_file("build/fixtures/daemon_prefixed", "_rjem_");
	CHECK_DONE();
}
