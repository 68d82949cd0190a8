/*
 * agent_detour - the frag agent's detour writer (attach/agent/agent_detour.c)
 * against threads that never stop calling the functions it rewrites.
 *
 * Three functions written here in assembly (a long prologue of pushes,
 * saved registers written and a frame allocated before the instruction
 * replaced; scratch registers written first; the replaced instruction at
 * the entry) are planned by the detour planner, their trampolines laid in
 * a page within reach, and the agent (loaded from its file) writes and
 * takes back the jumps over and over while:
 *   - three threads call them without pause, checking every result and,
 *     through call_checked, every callee-saved register and the stack;
 *   - a fourth sends those threads SIGUSR1 without pause: the handler
 *     calls the functions too, from wherever the thread was interrupted
 *     (in a prologue, at the patch point, in a trampoline);
 *   - a fifth forks without pause; each child calls the functions in its
 *     copy of the code and exits: a child copied between two steps of a
 *     patch point would find no writer there and wait forever (a hang
 *     the parent counts after 5 s).
 * A thread that ran half an old and half a new instruction, resumed in
 * the middle of a jump, or came back from the hop with a register or the
 * stack wrong, crashes the test or counts an error.  Both paths must have
 * run: calls through the wrappers and calls past restored bytes.
 *
 * usage: agent_detour [CYCLES]   (default 1000 write/take-back cycles)
 */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_abi.h"
#include "arch.h"
#include "check.h"

__asm__(".text\n"
	".p2align 4\n"
	".globl d_prologue\nd_prologue:\n" /* 2 * arg + 0x12345, through a long prologue */
	"  push %r15\n  push %r14\n  push %r13\n  push %r12\n  push %rbp\n  push %rbx\n"
	"  mov %rdi, %rbx\n"
	"  sub $0x18, %rsp\n"
	"  mov %edi, (%rsp)\n"
	"  mov $0x12345, %r12d\n" /* the first of 5 bytes: P */
	"  lea (%rbx,%rbx,1), %rax\n"
	"  add %r12, %rax\n"
	"  add $0x18, %rsp\n"
	"  pop %rbx\n  pop %rbp\n  pop %r12\n  pop %r13\n  pop %r14\n  pop %r15\n"
	"  ret\n"
	".p2align 4\n"
	".globl d_scratch\nd_scratch:\n" /* 3 * arg + 0xa48, scratch registers first */
	"  mov %rdi, %rax\n"
	"  lea (%rdi,%rdi,1), %rcx\n"
	"  mov $0xa48, %edx\n" /* P */
	"  add %rcx, %rax\n"
	"  add %rdx, %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl d_entry\nd_entry:\n" /* arg + 1 (arg <= 4096) or arg + 2: P at the entry */
	"  cmp $0x1000, %rdi\n"
	"  ja 1f\n"
	"  lea 1(%rdi), %rax\n"
	"  ret\n"
	"1: lea 2(%rdi), %rax\n"
	"  ret\n"
	".p2align 4\n"
	".globl d_straddle\nd_straddle:\n" /* 5 * arg + 0x777: P across a 16-byte block */
	"  push %rbx\n"                      /* +0 */
	"  mov %rdi, %rbx\n"                 /* +1 */
	"  lea (%rdi,%rdi,4), %rcx\n"        /* +4 */
	"  xor %edx, %edx\n"                 /* +8 */
	"  xor %esi, %esi\n"                 /* +10 */
	"  mov $0x777, %eax\n"               /* +12: P, bytes 12..16 */
	"  add %rcx, %rax\n"
	"  pop %rbx\n"
	"  ret\n"
	".p2align 4\n"
	".globl d_end\nd_end:\n");
long d_prologue(long), d_scratch(long), d_entry(long), d_straddle(long);
extern char d_end[];

/* FN(ARG) with known values in the callee-saved registers; *BAD set if one or the stack came back wrong. */
long call_checked(long (*fn)(long), long arg, long *bad);
__asm__(".text\n"
	".globl call_checked\ncall_checked:\n"
	"  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
	"  push %rdx\n" /* BAD, at 0(%rsp); the stack 16-byte aligned at the call */
	"  mov %rdi, %rax\n  mov %rsi, %rdi\n"
	"  mov $0x1111, %rbx\n  mov $0x2222, %rbp\n  mov $0x3333, %r12\n"
	"  mov $0x4444, %r13\n  mov $0x5555, %r14\n  mov $0x6666, %r15\n"
	"  mov %rsp, %r11\n  push %r11\n  sub $8, %rsp\n" /* the stack pointer, to compare after */
	"  call *%rax\n"
	"  add $8, %rsp\n  pop %r11\n"
	"  cmp %rsp, %r11\n  jne 9f\n"
	"  cmp $0x1111, %rbx\n  jne 9f\n  cmp $0x2222, %rbp\n  jne 9f\n  cmp $0x3333, %r12\n  jne 9f\n"
	"  cmp $0x4444, %r13\n  jne 9f\n  cmp $0x5555, %r14\n  jne 9f\n  cmp $0x6666, %r15\n  jne 9f\n"
	"  jmp 8f\n"
	"9: mov (%rsp), %rdx\n  movq $1, (%rdx)\n"
	"8: pop %rdx\n"
	"  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
	"  ret\n");

enum { NFN = 4 };

struct target_fn {
	const char *name;
	long (*fn)(long);
	const void *next;
	long (*want)(long);
};

static long want_prologue(long x) { return 2 * x + 0x12345; }
static long want_scratch(long x) { return 3 * x + 0xa48; }
static long want_entry(long x) { return (unsigned long)x > 0x1000 ? x + 2 : x + 1; }
static long want_straddle(long x) { return 5 * x + 0x777; }

static const struct target_fn fns[NFN] = {
	{ "d_prologue", d_prologue, (const void *)d_scratch, want_prologue },
	{ "d_scratch", d_scratch, (const void *)d_entry, want_scratch },
	{ "d_entry", d_entry, (const void *)d_straddle, want_entry },
	{ "d_straddle", d_straddle, (const void *)d_end, want_straddle },
};

/* The jump at AT fits in one aligned 16-byte block: the agent writes it in one store. */
static bool one_store(uint64_t at)
{
	return (at & 15) + MA_AGENT_PATCH_LEN <= 16;
}

/* The wrappers: count, then call the function's original. */
typedef long (*fn1)(long);
static fn1 originals[NFN];
static atomic_ulong wrapped[NFN];

static long wrap0(long a) { atomic_fetch_add_explicit(&wrapped[0], 1, memory_order_relaxed); return originals[0](a); }
static long wrap1(long a) { atomic_fetch_add_explicit(&wrapped[1], 1, memory_order_relaxed); return originals[1](a); }
static long wrap2(long a) { atomic_fetch_add_explicit(&wrapped[2], 1, memory_order_relaxed); return originals[2](a); }
static long wrap3(long a) { atomic_fetch_add_explicit(&wrapped[3], 1, memory_order_relaxed); return originals[3](a); }
static fn1 const wrappers[NFN] = { wrap0, wrap1, wrap2, wrap3 };

static atomic_bool running = true;
static atomic_ulong calls, wrong, clobbered;

/* One call of each function through call_checked, each result checked. */
static void call_all(unsigned *seed)
{
	for (int i = 0; i < NFN; i++) {
		long arg = rand_r(seed) % 10000, bad = 0;
		long got = call_checked(fns[i].fn, arg, &bad);

		atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
		if (got != fns[i].want(arg))
			atomic_fetch_add_explicit(&wrong, 1, memory_order_relaxed);
		if (bad)
			atomic_fetch_add_explicit(&clobbered, 1, memory_order_relaxed);
	}
}

static void on_usr1(int sig)
{
	unsigned seed = (unsigned)(uintptr_t)&sig;

	call_all(&seed);
}

static void *caller(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	while (atomic_load_explicit(&running, memory_order_relaxed))
		call_all(&seed);
	return NULL;
}

static pthread_t callers[3];
static atomic_ulong signals_sent;

static void *signaller(void *arg)
{
	(void)arg;
	while (atomic_load_explicit(&running, memory_order_relaxed))
		for (int i = 0; i < 3; i++)
			if (pthread_kill(callers[i], SIGUSR1) == 0)
				atomic_fetch_add_explicit(&signals_sent, 1, memory_order_relaxed);
	return NULL;
}

static atomic_ulong forks, child_failed, child_hung;
static atomic_ulong raw_forks, raw_failed, raw_hung;
static uint64_t patch_at[NFN]; /* where each function's jump goes */

/* Wait up to 5 s for child PID: 0 exited 0, 1 other status, 2 hung (killed). */
static int reap(pid_t pid)
{
	struct timespec pause = { 0, 1000000 };
	int status;

	for (int i = 0; i < 5000; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
		nanosleep(&pause, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return 2;
}

/* A child's calls: of every function, or (RAW) of those whose jump is one store. */
static void child_calls(bool raw)
{
	for (int k = 0; k < 20; k++)
		for (int i = 0; i < NFN; i++)
			if ((!raw || one_store(patch_at[i])) && fns[i].fn(k * 37) != fns[i].want(k * 37))
				_exit(3);
	_exit(0);
}

/*
 * fork() and, every other time, the raw fork syscall, which runs no
 * atfork handler: its child may copy the code at any instant, so only the
 * patch points written in one store are sure to be whole in it.
 */
static void *forker(void *arg)
{
	(void)arg;
	for (unsigned long n = 0; atomic_load_explicit(&running, memory_order_relaxed); n++) {
		bool raw = n & 1;
		pid_t pid = raw ? (pid_t)syscall(SYS_fork) : fork();

		if (pid == 0)
			child_calls(raw);
		if (pid < 0)
			continue;
		atomic_fetch_add_explicit(raw ? &raw_forks : &forks, 1, memory_order_relaxed);
		switch (reap(pid)) {
		case 1: atomic_fetch_add_explicit(raw ? &raw_failed : &child_failed, 1, memory_order_relaxed); break;
		case 2: atomic_fetch_add_explicit(raw ? &raw_hung : &child_hung, 1, memory_order_relaxed); break;
		default: break;
		}
	}
	return NULL;
}

/* The protection /proc/self/maps shows for address A ("r-xp"), into OUT[5]. */
static void prot_of(uint64_t a, char out[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long lo, hi;
	char perms[5];

	strcpy(out, "?");
	while (f && fscanf(f, "%lx-%lx %4s%*[^\n]", &lo, &hi, perms) == 3)
		if (a >= lo && a < hi) {
			strcpy(out, perms);
			break;
		}
	if (f)
		fclose(f);
}

static uint8_t *page_near(uint64_t addr)
{
	for (uint64_t d = 1 << 20; d < (1ULL << 30); d += 1 << 20) {
		void *p = mmap((void *)((addr - d) & ~4095ULL), 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (p != MAP_FAILED)
			return p;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char exe[PATH_MAX], agent_path[PATH_MAX + 32], name[300];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int cycles = argc > 1 ? atoi(argv[1]) : 1000;
	struct ma_agent_patch list[NFN];
	struct ma_detour_plan plan;
	uint8_t *tramp = page_near((uint64_t)d_prologue);
	void *agent;
	pthread_t sig, fk;

	if (n <= 0 || !tramp)
		return 2;
	exe[n] = '\0';
	snprintf(agent_path, sizeof(agent_path), "%s/agent/memattach-agent.so", dirname(dirname(dirname(exe))));
	agent = dlopen(agent_path, RTLD_NOW | RTLD_LOCAL);
	CHECK("the agent loads", agent != NULL);
	if (!agent)
		CHECK_DONE();
	int (*patch)(const struct ma_agent_patch *, uint64_t, uint64_t) =
		(int (*)(const struct ma_agent_patch *, uint64_t, uint64_t))dlsym(agent, "ma_agent_patch");
	CHECK("the agent has its writer", patch != NULL);
	if (!patch)
		CHECK_DONE();
	for (int i = 0; i < NFN; i++) {
		size_t len = (size_t)((const char *)fns[i].next - (const char *)fns[i].fn);
		uint8_t *t = tramp + 256 * i;
		bool ok = ma_arch_detour_plan((const uint8_t *)fns[i].fn, len, (uint64_t)fns[i].fn, 1, 0,
					      (uint64_t)t, (uint64_t)wrappers[i], &plan);

		snprintf(name, sizeof name, "%s: planned (%s; the %u-byte instruction at +%u)", fns[i].name,
			 ok ? "ok" : plan.reason, plan.patch_len, plan.patch_off);
		CHECK(name, ok);
		if (!ok)
			CHECK_DONE();
		memcpy(t, plan.tramp_code, plan.tramp_len);
		originals[i] = (fn1)plan.original;
		list[i].at = patch_at[i] = plan.entry + plan.patch_off;
		memcpy(list[i].before, (const void *)(uintptr_t)list[i].at, MA_AGENT_PATCH_LEN);
		memcpy(list[i].after, plan.patch, MA_AGENT_PATCH_LEN);
	}
	__builtin___clear_cache((char *)tramp, (char *)tramp + 4096);
	signal(SIGUSR1, on_usr1);
	for (int i = 0; i < 3; i++)
		pthread_create(&callers[i], NULL, caller, (void *)(uintptr_t)(i + 1));
	pthread_create(&sig, NULL, signaller, NULL);
	pthread_create(&fk, NULL, forker, NULL);

	int written = 0, taken_back = 0, first_rc = 0;

	for (int c = 0; c < cycles; c++) {
		int rc = patch(list, NFN, 0);

		written += rc == NFN;
		first_rc = first_rc ? first_rc : (rc == NFN ? 0 : rc);
		usleep(c % 7 == 0 ? 100 : 0); /* now and then, let the callers run through the wrappers */
		rc = patch(list, NFN, 1);
		taken_back += rc == NFN;
		first_rc = first_rc ? first_rc : (rc == NFN ? 0 : rc);
	}
	atomic_store(&running, false);
	pthread_join(sig, NULL);
	pthread_join(fk, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(callers[i], NULL);

	unsigned long through = wrapped[0] + wrapped[1] + wrapped[2] + wrapped[3];
	int in_one = 0;

	for (int i = 0; i < NFN; i++)
		in_one += one_store(patch_at[i]);

	printf("# %d cycles; %lu calls (%lu through the wrappers), %lu signals sent\n", cycles,
	       (unsigned long)calls, through, (unsigned long)signals_sent);
	snprintf(name, sizeof name, "every write and take-back done (%d and %d of %d; first error %d)", written,
		 taken_back, cycles, first_rc);
	CHECK(name, written == cycles && taken_back == cycles);
	snprintf(name, sizeof name, "every result right (%lu wrong of %lu)", (unsigned long)wrong,
		 (unsigned long)calls);
	CHECK(name, wrong == 0 && calls > 0);
	snprintf(name, sizeof name, "callee-saved registers and the stack intact (%lu calls not)",
		 (unsigned long)clobbered);
	CHECK(name, clobbered == 0);
	snprintf(name, sizeof name, "calls ran through the wrappers (%lu, %lu, %lu, %lu) and past restored bytes (%lu)",
		 (unsigned long)wrapped[0], (unsigned long)wrapped[1], (unsigned long)wrapped[2],
		 (unsigned long)wrapped[3], (unsigned long)(calls - through));
	CHECK(name, wrapped[0] && wrapped[1] && wrapped[2] && wrapped[3] && calls > through);
	snprintf(name, sizeof name, "both ways of writing ran: %d jumps in one store, %d in three steps", in_one,
		 NFN - in_one);
	CHECK(name, in_one > 0 && in_one < NFN);
	snprintf(name, sizeof name, "%lu fork children called the functions in their copy: %lu wrong, %lu hung",
		 (unsigned long)forks, (unsigned long)child_failed, (unsigned long)child_hung);
	CHECK(name, forks > 0 && child_failed == 0 && child_hung == 0);
	snprintf(name, sizeof name,
		 "%lu children of the raw fork syscall called the functions written in one store: %lu wrong, %lu hung",
		 (unsigned long)raw_forks, (unsigned long)raw_failed, (unsigned long)raw_hung);
	CHECK(name, raw_forks > 0 && raw_failed == 0 && raw_hung == 0);
	bool restored = true;

	for (int i = 0; i < NFN; i++)
		restored &= memcmp((const void *)(uintptr_t)list[i].at, list[i].before, MA_AGENT_PATCH_LEN) == 0;
	CHECK("the original bytes back at the end", restored);

	/* Protections: the text's back to what it was; a page the target made writable stays so. */
	char before[5] = "?", after[5];

	prot_of(patch_at[0], after);
	snprintf(name, sizeof name, "the text pages are r-x again after the cycles (%s)", after);
	CHECK(name, strncmp(after, "r-x", 3) == 0);
	uint64_t page = patch_at[0] & ~4095ULL;
	int rc1 = -1, rc2 = -1;

	if (mprotect((void *)page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) {
		prot_of(patch_at[0], before);
		rc1 = patch(list, 1, 0);
		rc2 = patch(list, 1, 1);
		prot_of(patch_at[0], after);
		mprotect((void *)page, 4096, PROT_READ | PROT_EXEC);
	}
	snprintf(name, sizeof name, "a page the target made %s is %s after a write and a take-back (%d, %d)",
		 before, after, rc1, rc2);
	CHECK(name, rc1 == 1 && rc2 == 1 && strncmp(before, "rwx", 3) == 0 && strncmp(after, "rwx", 3) == 0);
	CHECK_DONE();
}
