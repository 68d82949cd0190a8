/*
 * Unit test of the inline-detour planner (attach/arch_x86_64_detour.c),
 * judged by running what it plans in this process:
 *   - small functions written here in assembly, one per kind of start
 *     (an immediate compare, a RIP-relative load, a prologue of pushes,
 *     saved registers written and the stack grown, a scratch register
 *     written first, a tail jump, endbr64): detoured, each must give its
 *     own result through the wrapper with every callee-saved register and
 *     the stack as they were, and again once the bytes are restored; the
 *     ones no safe plan exists for (a call, a syscall or a branch before
 *     any 5-byte instruction, an argument, an unsaved register or memory
 *     written, a loop back onto the patch) are refused;
 *   - every entry point of Debian's libjemalloc.so.2, opened with dlopen:
 *     the C API's are each planned, detoured in turn and called (malloc,
 *     free, calloc, realloc, the aligned ones, the *allocx family), and
 *     so are operator new and delete where a plan exists: the wrapper
 *     runs, the allocator still works;
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
	".globl t_cmp\nt_cmp:\n" /* cmp $imm32 (7 bytes) first: P at +0 */
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
	".globl t_prologue\nt_prologue:\n" /* pushes, a saved register written, the stack grown: undone by the hop */
	"  push %r15\n"
	"  push %r14\n"
	"  mov %rdi, %r14\n"
	"  push %rbx\n"
	"  sub $0x28, %rsp\n"
	"  mov %edi, (%rsp)\n" /* the frame it allocated: may be written */
	"  mov $0x77, %ebx\n" /* 5 bytes at +15: its first two bytes in two blocks, not P */
	"  mov %fs:0x28, %rax\n" /* 9 bytes at +20: P */
	"  mov $3, %r15d\n"
	"  lea (%r14,%r15,1), %rax\n"
	"  add %rbx, %rax\n"
	"  add $0x28, %rsp\n"
	"  pop %rbx\n"
	"  pop %r14\n"
	"  pop %r15\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_scratch\nt_scratch:\n" /* a scratch register written first (free's start) */
	"  mov %rdi, %rax\n"
	"  mov $-0xa48, %rdx\n"
	"  add %rdx, %rax\n"
	"  add $0xa48, %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_tail\nt_tail:\n" /* a tail jump (jmp rel32): the whole function */
	"  .byte 0xe9\n" /* jmp rel32 t_cmp, whatever the assembler would choose */
	"  .long t_cmp - (. + 4)\n"
	"  int3\n"
	"  int3\n"
	"  int3\n"
	".p2align 4\n"
	".globl t_endbr\nt_endbr:\n" /* endbr64 stays; the walk starts after it */
	"  endbr64\n"
	"  push %rbx\n"
	"  mov %rdi, %rbx\n"
	"  lea 0x1003(%rbx), %rax\n"
	"  sub $0x1000, %rax\n"
	"  pop %rbx\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_late_syscall\nt_late_syscall:\n" /* the syscall comes after P */
	"  mov $39, %eax\n"
	"  syscall\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_call\nt_call:\n" /* a call first: refused */
	"  call t_cmp\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_syscall\nt_syscall:\n" /* a syscall before any P: refused */
	"  xor %eax, %eax\n"
	"  syscall\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_short\nt_short:\n" /* a branch before any P: refused */
	"  test %rdi, %rdi\n"
	"  je 1f\n"
	"  lea 5(%rdi), %rax\n"
	"  ret\n"
	"1: mov $77, %eax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_argwrite\nt_argwrite:\n" /* the argument overwritten before P: refused */
	"  shl $1, %rdi\n"
	"  lea 0x1000(%rdi), %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_unsaved\nt_unsaved:\n" /* a callee-saved register written unsaved: refused */
	"  mov %rdi, %rbx\n"
	"  lea 0x1000(%rbx), %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_memwrite\nt_memwrite:\n" /* memory written before P (the caller's stack): refused */
	"  mov %edi, 8(%rsp)\n"
	"  lea 0x1000(%rdi), %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_loop\nt_loop:\n" /* the loop's branch lands on P: refused */
	"1: add $0x1000, %rax\n"
	"  cmp %rdi, %rax\n"
	"  jb 1b\n"
	"  ret\n"
	".p2align 4\n"
	".globl t_end\nt_end:\n"
	".data\n"
	"t_data: .quad 100\n"
	".text\n");

long t_cmp(long), t_riprel(long), t_prologue(long), t_scratch(long), t_tail(long), t_endbr(long),
	t_late_syscall(long), t_call(long), t_syscall(long), t_short(long), t_argwrite(long), t_unsaved(long),
	t_memwrite(long), t_loop(long);
extern char t_end[];

/*
 * FN(ARG) with every callee-saved register holding a known value: a hop
 * that gives one back wrong, or leaves the stack moved, sets
 * clobbered_regs (or crashes the test).
 */
long call_checked(long (*fn)(long), long arg);
long clobbered_regs;
__asm__(".text\n"
	".globl call_checked\ncall_checked:\n"
	"  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
	"  sub $8, %rsp\n" /* 16-byte aligned at the call */
	"  mov %rdi, %rax\n  mov %rsi, %rdi\n"
	"  mov $0x1111, %rbx\n  mov $0x2222, %rbp\n  mov $0x3333, %r12\n"
	"  mov $0x4444, %r13\n  mov $0x5555, %r14\n  mov $0x6666, %r15\n"
	"  mov %rsp, %rcx\n  mov %rcx, (%rsp)\n" /* the stack pointer, to compare after */
	"  call *%rax\n"
	"  cmp $0x1111, %rbx\n  jne 9f\n  cmp $0x2222, %rbp\n  jne 9f\n  cmp $0x3333, %r12\n  jne 9f\n"
	"  cmp $0x4444, %r13\n  jne 9f\n  cmp $0x5555, %r14\n  jne 9f\n  cmp $0x6666, %r15\n  jne 9f\n"
	"  cmp (%rsp), %rsp\n  jne 9f\n"
	"  jmp 8f\n"
	"9: movq $1, clobbered_regs(%rip)\n"
	"8: add $8, %rsp\n"
	"  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
	"  ret\n");

struct case_fn {
	const char *name;
	long (*fn)(long);
	const void *next; /* the function after it (its bytes end there) */
	bool plannable;
	long arg;
	unsigned flags; /* for the planner (0: none) */
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

/* Detour FN (LEN bytes, NARGS arguments; FLAGS for the planner) to the wrapper: the plan, or false with it refused. */
static bool install(void *fn, size_t len, unsigned nargs, unsigned flags, struct ma_detour_plan *p,
		    uint8_t *saved)
{
	if (!ma_arch_detour_plan(fn, len, (uint64_t)fn, nargs, flags, (uint64_t)tramp_page, (uint64_t)wrapper, p))
		return false;
	memcpy(tramp_page, p->tramp_code, p->tramp_len);
	__builtin___clear_cache((char *)tramp_page, (char *)tramp_page + p->tramp_len);
	memcpy(saved, (uint8_t *)fn + p->patch_off, p->write_len);
	original = (fn6)p->original;
	wrapper_hits = 0;
	return write_code((uint64_t)fn + p->patch_off, p->patch, p->write_len);
}

static bool uninstall(void *fn, const struct ma_detour_plan *p, const uint8_t *saved)
{
	return write_code((uint64_t)fn + p->patch_off, saved, p->write_len);
}

static void local_functions(void)
{
	const struct case_fn cases[] = {
		{ "cmp $imm32", t_cmp, (void *)t_riprel, true, 5, 0 },
		{ "cmp $imm32 (the other branch)", t_cmp, (void *)t_riprel, true, 0x2000, 0 },
		{ "RIP-relative load", t_riprel, (void *)t_prologue, true, 7, 0 },
		{ "pushes, saved registers written, the stack grown, a block edge passed", t_prologue,
		  (void *)t_scratch, true, 40, 0 },
		{ "a scratch register written first", t_scratch, (void *)t_tail, true, 9, 0 },
		{ "tail jmp rel32", t_tail, (void *)t_endbr, true, 11, 0 },
		{ "endbr64 first", t_endbr, (void *)t_late_syscall, true, 4, 0 },
		{ "a syscall after P", t_late_syscall, (void *)t_call, true, 0, 0 },
		{ "a call first", t_call, (void *)t_syscall, false, 0, 0 },
		{ "a call first, moved (a C function)", t_call, (void *)t_syscall, true, 5, MA_DETOUR_MOVE_CALL },
		{ "a syscall before any P", t_syscall, (void *)t_short, false, 0, 0 },
		{ "a branch before any P", t_short, (void *)t_argwrite, false, 0, 0 },
		{ "the argument written before P", t_argwrite, (void *)t_unsaved, false, 0, 0 },
		{ "a callee-saved register written unsaved", t_unsaved, (void *)t_memwrite, false, 0, 0 },
		{ "memory written before P", t_memwrite, (void *)t_loop, false, 0, 0 },
		{ "a loop back onto P", t_loop, (void *)t_end, false, 3, 0 },
	};
	char name[160];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct case_fn *c = &cases[i];
		size_t len = (size_t)((const char *)c->next - (const char *)c->fn);
		struct ma_detour_plan p;
		uint8_t saved[32];
		long want, got, after;

		if (!c->plannable) {
			bool planned = ma_arch_detour_plan((void *)c->fn, len, (uint64_t)c->fn, 1, c->flags,
							   (uint64_t)tramp_page, (uint64_t)wrapper, &p);
			snprintf(name, sizeof name, "%s: refused (%s)", c->name, planned ? "planned!" : p.reason);
			CHECK(name, !planned && p.reason[0]);
			continue;
		}
		want = c->fn(c->arg);
		if (!install((void *)c->fn, len, 1, c->flags, &p, saved)) {
			snprintf(name, sizeof name, "%s: planned and written (%s)", c->name, p.reason);
			CHECK(name, false);
			continue;
		}
		clobbered_regs = 0;
		got = call_checked(c->fn, c->arg);
		snprintf(name, sizeof name, "%s: through the wrapper, %ld as before, callee-saved registers and "
			 "stack intact (%ld; %u-byte instruction replaced at +%u, a hop of %u bytes)",
			 c->name, want, got, p.patch_len, p.patch_off, p.hop_len);
		CHECK(name, got == want && wrapper_hits == 1 && !clobbered_regs);
		uninstall((void *)c->fn, &p, saved);
		after = c->fn(c->arg);
		snprintf(name, sizeof name, "%s: restored, the wrapper no longer runs", c->name);
		CHECK(name, after == want && wrapper_hits == 1);
	}
}

/* ---- Debian's libjemalloc.so.2 ---- */

/* How many integer arguments entry point NAME (unprefixed) takes. */
static unsigned nargs_of(const char *name)
{
	static const struct { const char *name; unsigned n; } t[] = {
		{ "malloc", 1 }, { "calloc", 2 }, { "realloc", 2 }, { "free", 1 }, { "posix_memalign", 3 },
		{ "aligned_alloc", 2 }, { "memalign", 2 }, { "valloc", 1 }, { "mallocx", 2 }, { "rallocx", 3 },
		{ "xallocx", 4 }, { "sdallocx", 3 }, { "dallocx", 2 }, { "_Znwm", 1 }, { "_ZdlPv", 1 },
		{ "_ZdlPvm", 2 },
	};

	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(t[i].name, name))
			return t[i].n;
	return 6;
}

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
		if (!tramp_page || !install(f, len, nargs_of(called[i]), called[i][0] == '_' ? 0 : MA_DETOUR_MOVE_CALL,
					   &p, saved)) {
			/*
			 * The C API must be covered whole.  An operator may be
			 * refused (the sized delete starts with a test, a branch
			 * and a call), said so; frag then refuses such a target.
			 */
			bool operator = called[i][0] == '_';

			snprintf(name, sizeof name, "jemalloc %s: %s (%s)", called[i],
				 operator ? "planned, or refused with its reason" : "planned",
				 tramp_page ? p.reason : "no page within reach");
			CHECK(name, operator && tramp_page && p.reason[0]);
			if (tramp_page)
				munmap(tramp_page, sysconf(_SC_PAGESIZE));
			continue;
		}
		ok = exercise(called[i]);
		snprintf(name, sizeof name, "jemalloc %s detoured: the wrapper ran and the allocator answered "
			 "(the %u-byte instruction at +%u replaced; %s)", called[i], p.patch_len, p.patch_off,
			 (((uint64_t)f + p.patch_off) & 15) + 5 <= 16 ? "one store" : "in steps");
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
	size_t found = 0, planned = 0, one_store = 0;
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
		if (ma_arch_detour_plan(code, len, s->addr, nargs_of(entry_names[i]), MA_DETOUR_MOVE_CALL,
					s->addr - (16 << 20), 0x1000, &p)) {
			planned++;
			/* the agent writes a jump that fits one aligned 16-byte block in one store */
			one_store += ((s->addr + p.patch_off) & 15) + 5 <= 16;
		}
		else if (!refused[0])
			snprintf(refused, sizeof refused, "; %s: %s", sym, p.reason);
	}
	snprintf(name, sizeof name, "%s: every jemalloc entry point found has a plan (%zu of %zu, %zu written in "
		 "one store%s)", path, planned, found, one_store, refused);
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
