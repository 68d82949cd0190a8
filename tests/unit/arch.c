/*
 * Unit test of the return stub and the state area (arch_x86_64.c): the
 * offsets remote_call.c relies on hold, and the self-restore path, run for
 * real in this process, puts back every general register, the flags, the
 * stack pointer, the signal mask and the SSE state, then jumps to the
 * resume address.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include "arch.h"
#include "check.h"

static bool is_syscall(const unsigned char *code, size_t end)
{
	return code[end - 2] == 0x0f && code[end - 1] == 0x05;
}

static void offsets(void)
{
	struct ma_cpu_state xs;
	struct user_regs_struct r;
	unsigned char code[MA_STUB_REGION];
	size_t n;

	ma_arch_state_alloc(&xs);
	memset(xs.xstate, 0, MA_XSTATE_MAX);
	xs.xstate_len = 2696;
	memset(&r, 0, sizeof(r));
	r.rsp = 0x7fff00001000;
	r.rip = 0x401000;
	n = ma_arch_build_stub(code, 0x10000, 0x7ffe00000000, &r, &xs, &(struct ma_stub_opts){ true, true, true });
	CHECK("stub (rt_sigreturn ending): code ends before the slots", n <= MA_STUB_SLOT_RSP);
	CHECK("stub (rt_sigreturn ending): sigaltstack, rt_sigreturn and the trap's syscall end at "
	      "MA_STUB_{ALTSTACK,SIGRETURN}_SYSCALL_END, MA_STUB_TRAP_END",
	      is_syscall(code, MA_STUB_ALTSTACK_SYSCALL_END) &&
		      is_syscall(code, MA_STUB_SIGRETURN_SYSCALL_END) && is_syscall(code, MA_STUB_TRAP_END) &&
		      code[MA_STUB_ALTSTACK_SYSCALL_END - 14] == 0xb8 && code[MA_STUB_ALTSTACK_SYSCALL_END - 13] == 131 &&
		      code[MA_STUB_SIGRETURN_SYSCALL_END - 7] == 0xb8 && code[MA_STUB_SIGRETURN_SYSCALL_END - 6] == 15);
	CHECK("stub: header, batch runner and append callback fit between the slots and the region's end",
	      MA_STUB_HEADER + 168 <= MA_STUB_BATCH && MA_STUB_BATCH - MA_STUB_HEADER >= 168 &&
		      MA_STUB_BATCH + ma_arch_build_batch(code + MA_STUB_BATCH) <= MA_STUB_APPEND &&
		      ma_arch_build_append_cb(code + MA_STUB_APPEND, MA_APPEND_CB_MAX) > 0);
	n = ma_arch_build_stub(code, 0x10000, 0x7ffe00000000, &r, &xs, &(struct ma_stub_opts){ true, false, true });
	CHECK("stub (pop ending): code ends before the slots, trap's syscall at MA_STUB_TRAP_END",
	      n <= MA_STUB_SLOT_RSP && is_syscall(code, MA_STUB_TRAP_END));
	CHECK("stub: syscall at MA_STUB_SYSCALL",
	      code[MA_STUB_SYSCALL] == 0x0f && code[MA_STUB_SYSCALL + 1] == 0x05);
	CHECK("stub: marker end follows it", MA_STUB_MARKER_END == MA_STUB_SYSCALL + 2);
	CHECK("stub: restore path's syscalls end at MA_STUB_{PENDING,ACTION,RESTORE}_SYSCALL_END",
	      is_syscall(code, MA_STUB_PENDING_SYSCALL_END) &&
		      is_syscall(code, MA_STUB_ACTION_SYSCALL_END) &&
		      is_syscall(code, MA_STUB_RESTORE_SYSCALL_END));
	CHECK("stub: rip slots hold the resume ip and the one after the syscall",
	      memcmp(code + MA_STUB_SLOT_RIP, &r.rip, 8) == 0 &&
		      *(uint64_t *)(code + MA_STUB_SLOT_RIP_EINTR) == r.rip + 2);
	CHECK("stub: rsp slot holds the word below the red zone",
	      *(uint64_t *)(code + MA_STUB_SLOT_RSP) == r.rsp - 136);
	CHECK("stub: slots between the code and the header", MA_STUB_SLOT_RESTART + 8 <= MA_STUB_HEADER);
	CHECK("area: 64-byte aligned below the red zone and the ip slot",
	      ma_arch_state_area_addr(&r, 2696) % 64 == 0 &&
		      ma_arch_state_area_addr(&r, 2696) + ma_arch_state_area_size(2696) <= r.rsp - 136);
	ma_arch_state_free(&xs);
}

/* Filled by the landing code: the registers as the stub left them, and ymm0. */
uint64_t landed[17];
unsigned char landed_ymm0[32];
static unsigned char want_ymm0[32];
/* The alternate stack the child set up: it must be the same after the stub. */
static stack_t want_altstack;
/* A handler saw a context (registers, ip, stack pointer, xmm0) that is not the thread's own. */
static volatile int context_bad;
static bool check_context;
static uint64_t want[17];
static uint64_t want_mask;
static uint64_t want_rip; /* where the thread resumes: a handler's context has it */
/* 1: the stub restarted the syscall, 2: it resumed after it (EINTR) */
volatile uint64_t outcome;
static uint64_t want_outcome;
static volatile int handled[65];
static int want_handled[65];
void landing(void);
void check_landed(void);
void syscall_pad(void);
/*
 * syscall_pad stands for a `syscall` instruction (2 bytes): the restart
 * resumes at it, EINTR right after it.  Either way the registers are kept
 * (mov to memory and jmp touch no register and no flag).
 */
__asm__(".text\n"
	".globl syscall_pad\n"
	"syscall_pad:\n"
	"  jmp 1f\n" /* 2 bytes: here is the restart */
	"  movq $2, outcome(%rip)\n  jmp landing\n"
	"1: movq $1, outcome(%rip)\n  jmp landing\n"
	".globl landing\n"
	"landing:\n"
	"  mov %rax, landed+0(%rip)\n  mov %rbx, landed+8(%rip)\n  mov %rcx, landed+16(%rip)\n"
	"  mov %rdx, landed+24(%rip)\n  mov %rsi, landed+32(%rip)\n  mov %rdi, landed+40(%rip)\n"
	"  mov %rbp, landed+48(%rip)\n  mov %r8, landed+56(%rip)\n  mov %r9, landed+64(%rip)\n"
	"  mov %r10, landed+72(%rip)\n  mov %r11, landed+80(%rip)\n  mov %r12, landed+88(%rip)\n"
	"  mov %r13, landed+96(%rip)\n  mov %r14, landed+104(%rip)\n  mov %r15, landed+112(%rip)\n"
	"  mov %rsp, landed+120(%rip)\n  pushfq\n  popq landed+128(%rip)\n"
	"  vmovdqu %ymm0, landed_ymm0(%rip)\n"
	"  and $-16, %rsp\n  call check_landed\n  hlt\n");

/* Exit status 0 if every register, the flags, the mask and the outcome came back. */
void check_landed(void)
{
	sigset_t cur;
	uint64_t m = 0;

	for (int i = 0; i < 17; i++)
		if (landed[i] != want[i]) {
			fprintf(stderr, "# register %d: %#lx, want %#lx\n", i, (unsigned long)landed[i], (unsigned long)want[i]);
			_exit(10 + i);
		}
	sigprocmask(SIG_BLOCK, NULL, &cur);
	for (int sig = 1; sig <= 64; sig++)
		if (sigismember(&cur, sig) == 1)
			m |= 1ULL << (sig - 1);
	if (m != want_mask)
		_exit(9);
	if (outcome != want_outcome)
		_exit(8);
	for (int sig = 1; sig <= 64; sig++)
		if (handled[sig] != want_handled[sig])
			_exit(7);
	if (memcmp(landed_ymm0, want_ymm0, 32) != 0)
		_exit(6);
	{
		stack_t ss;

		if (sigaltstack(NULL, &ss) != 0 || ss.ss_sp != want_altstack.ss_sp ||
		    ss.ss_size != want_altstack.ss_size || ss.ss_flags != want_altstack.ss_flags)
			_exit(5);
	}
	if (context_bad)
		_exit(4);
	_exit(0);
}

/* The scenarios' handler (run with SA_SIGINFO): counts, and checks the context it was given. */
static void on_signal(int sig)
{
	handled[sig]++;
}

static void on_signal_info(int sig, siginfo_t *si, void *ucv)
{
	const ucontext_t *uc = ucv;
	const greg_t *g = uc->uc_mcontext.gregs;
	/* want[]: rax rbx rcx rdx rsi rdi rbp r8 ... r15 rsp; rip is the landing's */
	static const int regs[16] = { REG_RAX, REG_RBX, REG_RCX, REG_RDX, REG_RSI, REG_RDI, REG_RBP,
				      REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14,
				      REG_R15, REG_RSP };

	(void)si;
	on_signal(sig);
	/* Two handlers at once: the kernel sets up the second on top of the first (its ip is the handler's). */
	if (!check_context || g[REG_RIP] == (greg_t)(uintptr_t)on_signal_info)
		return;
	for (int i = 0; i < 16; i++)
		if ((uint64_t)g[regs[i]] != want[i])
			context_bad = 1;
	if ((uint64_t)g[REG_RIP] != want_rip)
		context_bad = 1;
	if (memcmp(uc->uc_mcontext.fpregs->_xmm[0].element, want_ymm0, 16) != 0)
		context_bad = 1;
}

#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516
#define NO_HANDLER ((void (*)(int))0) /* leave the disposition as it is */

/* One signal the child makes pending (blocked) before it runs the stub. */
struct pending_sig {
	int sig;
	void (*handler)(int); /* on_signal, SIG_IGN, SIG_DFL */
	int flags;	      /* SA_RESTART or 0 */
	bool in_mask;	      /* blocked by the restored mask too */
};

struct scenario {
	const char *name;
	long stopped_ax;       /* rax as stopped: -ERESTART*, or 0 (not in a syscall) */
	bool may_ask;
	struct pending_sig sigs[3];
	int nsigs;
	bool want_eintr;
	long trap_rax; /* 0: enter after the marker; else at the trap's end with this rax */
};

/*
 * A legacy+AVX xsave image (standard format) of 832 bytes: default FCW
 * and MXCSR, xmm0 and the upper half of ymm0 set, all else in init state.
 */
static void avx_image(struct ma_cpu_state *xs)
{
	memset(xs->xstate, 0, MA_XSTATE_MAX);
	xs->xstate[0] = 0x7f;
	xs->xstate[1] = 0x03;
	xs->xstate[24] = 0x80;
	xs->xstate[25] = 0x1f;
	xs->xstate[512] = 0x7; /* XSTATE_BV: x87, SSE, AVX */
	for (int i = 0; i < 16; i++) {
		want_ymm0[i] = (unsigned char)(0xa0 + i);      /* xmm0 at 160 */
		want_ymm0[16 + i] = (unsigned char)(0x50 + i); /* its upper half at 576 */
	}
	memcpy(xs->xstate + 160, want_ymm0, 16);
	memcpy(xs->xstate + 576, want_ymm0 + 16, 16);
	xs->xstate_len = 832;
}

/* The stub built for a thread stopped as SC says, run for real in a child. */
static void self_restore(const struct scenario *sc, bool by_sigreturn, bool read_altstack)
{
	unsigned char *stub = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t stack_len = 1 << 16;
	unsigned char *stack = mmap(NULL, stack_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ma_cpu_state xs;
	struct user_regs_struct r;
	uint64_t area;
	unsigned char *img;
	pid_t child;
	int status;
	char name[256];

	ma_arch_state_alloc(&xs);
	avx_image(&xs);
	memset(&r, 0, sizeof(r));
	r.rax = 101, r.rbx = 102, r.rcx = 103, r.rdx = 104, r.rsi = 105, r.rdi = 106, r.rbp = 107;
	r.r8 = 108, r.r9 = 109, r.r10 = 110, r.r11 = 111, r.r12 = 112, r.r13 = 113, r.r14 = 114;
	r.r15 = 115;
	r.eflags = 0x202 | 0x1 | 0x80; /* IF, CF, SF */
	r.cs = 0x33, r.ss = 0x2b; /* user code and stack segments, as PTRACE_GETREGS gives them */
	r.rsp = (uint64_t)(stack + stack_len - 256);
	r.rip = (uint64_t)landing;
	xs.regs = r; /* as stopped: not in a syscall */
	want_outcome = 0;
	if (sc->stopped_ax) {
		/* Stopped in read (nr 0) with SC's restart code; RESUME has the restart applied. */
		xs.regs.rip = (uint64_t)syscall_pad + 2;
		xs.regs.rax = (uint64_t)sc->stopped_ax;
		xs.regs.orig_rax = 0;
		r.rip = (uint64_t)syscall_pad;
		r.rax = sc->stopped_ax == -ERESTART_RESTARTBLOCK ? 219 /* restart_syscall */ : 0;
		want_outcome = sc->want_eintr ? 2 : 1;
	}
	{
		uint64_t w[17] = { sc->want_eintr ? (uint64_t)-4 : r.rax, r.rbx, r.rcx, r.rdx, r.rsi,
				   r.rdi, r.rbp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15,
				   r.rsp, r.eflags };

		memcpy(want, w, sizeof(w));
	}
	want_rip = r.rip + (sc->want_eintr ? 2 : 0);
	check_context = by_sigreturn;
	want_mask = 1ULL << (SIGUSR2 - 1);
	memset(want_handled, 0, sizeof(want_handled));
	for (int i = 0; i < sc->nsigs; i++) {
		if (sc->sigs[i].in_mask)
			want_mask |= 1ULL << (sc->sigs[i].sig - 1);
		else if (sc->sigs[i].handler == on_signal)
			want_handled[sc->sigs[i].sig] = 1;
	}
	area = ma_arch_state_area_addr(&r, xs.xstate_len);
	img = aligned_alloc(64, ma_arch_state_area_size(xs.xstate_len));
	ma_arch_build_area(img, area, &r, &xs, want_mask, ~0ULL);
	memcpy((void *)area, img, ma_arch_state_area_size(xs.xstate_len));
	/* Below the red zone: what the ip slot held before must not matter. */
	*(uint64_t *)(r.rsp - 136) = 0xdeadbeef;
	ma_arch_build_stub(stub, (uint64_t)stub, area, &r, &xs,
			   &(struct ma_stub_opts){ sc->may_ask, by_sigreturn, read_altstack });
	mprotect(stub, 4096, PROT_READ | PROT_EXEC);
	/* In a child, signals pending and blocked, other registers: run the restore path. */
	child = fork();
	if (child == 0) {
		sigset_t all, none;

		static char alt[1 << 16];

		want_altstack = (stack_t){ .ss_sp = alt, .ss_size = sizeof(alt), .ss_flags = 0 };
		sigaltstack(&want_altstack, NULL);
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		for (int i = 0; i < sc->nsigs; i++) {
			struct sigaction sa;

			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = sc->sigs[i].handler;
			sa.sa_flags = sc->sigs[i].flags;
			if (sc->sigs[i].handler == on_signal) {
				sa.sa_sigaction = on_signal_info;
				sa.sa_flags |= SA_SIGINFO;
			}
			if (sc->sigs[i].handler != NO_HANDLER)
				sigaction(sc->sigs[i].sig, &sa, NULL);
			kill(getpid(), sc->sigs[i].sig);
		}
		sigemptyset(&none);
		/* Not what the stub must restore: */
		__asm__ volatile("vpcmpeqd %%ymm0, %%ymm0, %%ymm0" ::: "xmm0");
		if (sc->trap_rax)
			__asm__ volatile("mov %0, %%rsp\n mov %2, %%rax\n jmp *%1\n" ::"r"(area - 512),
					 "r"((uint64_t)stub + MA_STUB_TRAP_END), "r"(sc->trap_rax));
		__asm__ volatile("mov %0, %%rsp\n jmp *%1\n" ::"r"(area - 512),
				 "r"((uint64_t)stub + MA_STUB_MARKER_END));
		_exit(99);
	}
	waitpid(child, &status, 0);
	snprintf(name, sizeof(name), "self-restore (%s ending), %s: registers, flags, stack pointer, "
		 "mask, ymm0, alternate stack%s, %s",
		 by_sigreturn ? (read_altstack ? "rt_sigreturn" : "rt_sigreturn, altstack unread") : "pop",
		 sc->name,
		 by_sigreturn ? ", handlers given the thread's own context" : "",
		 !sc->stopped_ax ? "ip at resume" : sc->want_eintr ? "EINTR" : "restart");
	CHECK(name, WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		printf("# child status 0x%x (exit 10+i: register i differs, 9: mask, 8: restart/EINTR, "
		       "7: handlers run, 6: ymm0, 5: alternate stack, 4: a handler's context)\n", status);
	ma_arch_state_free(&xs);
	free(img);
	munmap(stub, 4096);
	munmap(stack, stack_len);
}

static const struct scenario scenarios[] = {
	{ "not in a syscall", 0, true, { { 0 } }, 0, false, 0 },
	{ "not in a syscall, a handler's signal waits", 0, true,
	  { { SIGUSR1, on_signal, 0, false } }, 1, false, 0 },
	{ "ERESTARTSYS, nothing waits", -ERESTARTSYS, true, { { 0 } }, 0, false, 0 },
	{ "ERESTARTSYS, handler without SA_RESTART", -ERESTARTSYS, true,
	  { { SIGUSR1, on_signal, 0, false } }, 1, true, 0 },
	{ "ERESTARTSYS, handler without SA_RESTART, stub may not ask", -ERESTARTSYS, false,
	  { { SIGUSR1, on_signal, 0, false } }, 1, false, 0 },
	{ "ERESTARTSYS, handler with SA_RESTART", -ERESTARTSYS, true,
	  { { SIGUSR1, on_signal, SA_RESTART, false } }, 1, false, 0 },
	{ "ERESTARTSYS, ignored signal", -ERESTARTSYS, true, { { SIGUSR1, SIG_IGN, 0, false } }, 1,
	  false, 0 },
	{ "ERESTARTSYS, default-ignored signal", -ERESTARTSYS, true,
	  { { SIGWINCH, SIG_DFL, 0, false } }, 1, false, 0 },
	{ "ERESTARTSYS, handler's signal blocked by the program", -ERESTARTSYS, true,
	  { { SIGUSR1, on_signal, 0, true } }, 1, false, 0 },
	{ "ERESTARTSYS, first handler SA_RESTART, second not", -ERESTARTSYS, true,
	  { { SIGUSR1, on_signal, SA_RESTART, false }, { SIGTERM, on_signal, 0, false } }, 2, false, 0 },
	{ "ERESTARTSYS, first no handler, then one without SA_RESTART", -ERESTARTSYS, true,
	  { { SIGWINCH, SIG_DFL, 0, false }, { 40, on_signal, 0, false } }, 2, true, 0 },
	{ "ERESTARTNOHAND, handler with SA_RESTART", -ERESTARTNOHAND, true,
	  { { SIGUSR1, on_signal, SA_RESTART, false } }, 1, true, 0 },
	{ "ERESTARTNOINTR, handler without SA_RESTART", -ERESTARTNOINTR, true,
	  { { SIGUSR1, on_signal, 0, false } }, 1, false, 0 },
	/* restart_syscall needs the restart block, which rt_sigreturn would discard: popped. */
	{ "ERESTART_RESTARTBLOCK, nothing waits", -ERESTART_RESTARTBLOCK, true, { { 0 } }, 0, false, 0 },
	{ "ERESTART_RESTARTBLOCK, handler with SA_RESTART", -ERESTART_RESTARTBLOCK, true,
	  { { SIGUSR1, on_signal, SA_RESTART, false } }, 1, true, 0 },
	/* The trap's ending: the kernel ran a handler (EINTR) or restarted into the block (0). */
	{ "trap ended with EINTR", -ERESTARTSYS, true, { { 0 } }, 0, true, -EINTR },
	{ "trap restarted into the block, handler without SA_RESTART waits", -ERESTARTSYS, true,
	  { { SIGUSR1, on_signal, 0, false } }, 1, true, 1 },
	{ "trap restarted into the block, nothing waits", -ERESTARTSYS, true, { { 0 } }, 0, false, 1 },
};

/* Which waits have a timeout: a NULL one waits without (sigwait, an outside attack). */
static void timed_waits(void)
{
	unsigned long long a[6] = { 0x1000, 0, 0, 8, 0, 0 };

	CHECK("rt_sigtimedwait with a NULL timeout (sigwait) waits without one",
	      !ma_arch_is_timed_wait(128, a));
	a[2] = 0x2000;
	CHECK("rt_sigtimedwait with a timeout is timed", ma_arch_is_timed_wait(128, a));
	a[2] = 0, a[3] = 0;
	CHECK("semtimedop with a NULL timeout waits without one", !ma_arch_is_timed_wait(220, a));
	CHECK("io_getevents with a NULL timeout waits without one", !ma_arch_is_timed_wait(208, a));
	a[4] = 0x3000;
	CHECK("mq_timedreceive with a timeout is timed", ma_arch_is_timed_wait(243, a));
	CHECK("nanosleep is always timed", ma_arch_is_timed_wait(35, a));
}

int main(void)
{
	offsets();
	timed_waits();
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		self_restore(&scenarios[i], true, true);
		self_restore(&scenarios[i], true, false);
		self_restore(&scenarios[i], false, true);
	}
	CHECK_DONE();
}
