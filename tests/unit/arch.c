/*
 * Unit test of the return stub and the state area (arch_x86_64.c): the
 * offsets remote_call.c relies on hold, and the self-restore path, run for
 * real in this process, puts back every general register, the flags, the
 * stack pointer, the signal mask and the SSE state, then jumps to the
 * resume address.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch.h"
#include "check.h"

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
	n = ma_arch_build_stub(code, 0x10000, 0x7ffe00000000, &r, &xs);
	CHECK("stub: code ends before the slots", n <= MA_STUB_SLOT_RSP);
	CHECK("stub: syscall at MA_STUB_SYSCALL",
	      code[MA_STUB_SYSCALL] == 0x0f && code[MA_STUB_SYSCALL + 1] == 0x05);
	CHECK("stub: marker end follows it", MA_STUB_MARKER_END == MA_STUB_SYSCALL + 2);
	CHECK("stub: restore path's syscall ends at MA_STUB_RESTORE_SYSCALL_END",
	      code[MA_STUB_RESTORE_SYSCALL_END - 2] == 0x0f && code[MA_STUB_RESTORE_SYSCALL_END - 1] == 0x05);
	CHECK("stub: rip slot holds the resume ip", memcmp(code + MA_STUB_SLOT_RIP, &r.rip, 8) == 0);
	CHECK("stub: rsp slot holds the resume sp", memcmp(code + MA_STUB_SLOT_RSP, &r.rsp, 8) == 0);
	CHECK("stub: header fits", MA_STUB_HEADER <= MA_STUB_REGION);
	CHECK("area: 64-byte aligned below the red zone",
	      ma_arch_state_area_addr(&r, 2696) % 64 == 0 &&
		      ma_arch_state_area_addr(&r, 2696) + ma_arch_state_area_size(2696) <= r.rsp - 128);
	ma_arch_state_free(&xs);
}

/* Filled by the landing code: the registers as the stub left them. */
uint64_t landed[17];
static uint64_t want[17];
static uint64_t want_mask;
void landing(void);
void check_landed(void);
/* Store rax..r15, rsp and rflags, then check them in C (in the child). */
__asm__(".text\n"
	".globl landing\n"
	"landing:\n"
	"  mov %rax, landed+0(%rip)\n  mov %rbx, landed+8(%rip)\n  mov %rcx, landed+16(%rip)\n"
	"  mov %rdx, landed+24(%rip)\n  mov %rsi, landed+32(%rip)\n  mov %rdi, landed+40(%rip)\n"
	"  mov %rbp, landed+48(%rip)\n  mov %r8, landed+56(%rip)\n  mov %r9, landed+64(%rip)\n"
	"  mov %r10, landed+72(%rip)\n  mov %r11, landed+80(%rip)\n  mov %r12, landed+88(%rip)\n"
	"  mov %r13, landed+96(%rip)\n  mov %r14, landed+104(%rip)\n  mov %r15, landed+112(%rip)\n"
	"  mov %rsp, landed+120(%rip)\n  pushfq\n  popq landed+128(%rip)\n"
	"  and $-16, %rsp\n  call check_landed\n  hlt\n");

/* Exit status 0 if every register, the flags and the mask came back. */
void check_landed(void)
{
	sigset_t cur;
	uint64_t m = 0;

	for (int i = 0; i < 17; i++)
		if (landed[i] != want[i])
			_exit(10 + i);
	sigprocmask(SIG_BLOCK, NULL, &cur);
	for (int sig = 1; sig <= 64; sig++)
		if (sigismember(&cur, sig) == 1)
			m |= 1ULL << (sig - 1);
	_exit(m == want_mask ? 0 : 9);
}

static void self_restore(void)
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

	ma_arch_state_alloc(&xs);
	memset(xs.xstate, 0, MA_XSTATE_MAX);
	/* A legacy-only xsave image: default FCW and MXCSR, everything else in init state. */
	xs.xstate[0] = 0x7f;
	xs.xstate[1] = 0x03;
	xs.xstate[24] = 0x80;
	xs.xstate[25] = 0x1f;
	xs.xstate_len = 576;
	memset(&r, 0, sizeof(r));
	r.rax = 101, r.rbx = 102, r.rcx = 103, r.rdx = 104, r.rsi = 105, r.rdi = 106, r.rbp = 107;
	r.r8 = 108, r.r9 = 109, r.r10 = 110, r.r11 = 111, r.r12 = 112, r.r13 = 113, r.r14 = 114;
	r.r15 = 115;
	r.eflags = 0x202 | 0x1 | 0x80; /* IF, CF, SF */
	r.rsp = (uint64_t)(stack + stack_len - 256);
	r.rip = (uint64_t)landing;
	{
		uint64_t w[17] = { r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.r8, r.r9, r.r10,
				   r.r11, r.r12, r.r13, r.r14, r.r15, r.rsp, r.eflags };

		memcpy(want, w, sizeof(w));
	}
	want_mask = 1ULL << (SIGUSR2 - 1);
	area = ma_arch_state_area_addr(&r, xs.xstate_len);
	img = aligned_alloc(64, ma_arch_state_area_size(xs.xstate_len));
	ma_arch_build_area(img, &r, &xs, want_mask);
	memcpy((void *)area, img, ma_arch_state_area_size(xs.xstate_len));
	ma_arch_build_stub(stub, (uint64_t)stub, area, &r, &xs);
	mprotect(stub, 4096, PROT_READ | PROT_EXEC);
	/* In a child, with other registers and an empty mask: run the restore path. */
	child = fork();
	if (child == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		__asm__ volatile("mov %0, %%rsp\n jmp *%1\n" ::"r"(area - 512),
				 "r"((uint64_t)stub + MA_STUB_MARKER_END));
		_exit(99);
	}
	waitpid(child, &status, 0);
	CHECK("self-restore: registers, flags, stack pointer and signal mask back, ip at resume",
	      WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		printf("# child status 0x%x (exit 10+i: register i differs, 9: mask)\n", status);
	ma_arch_state_free(&xs);
	free(img);
}

int main(void)
{
	offsets();
	self_restore();
	CHECK_DONE();
}
