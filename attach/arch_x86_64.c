/*
 * arch_x86_64.c - all x86-64 knowledge: registers, xstate, call set-up,
 * syscall restart, and the self-restoring return stub.
 */
#include <assert.h>
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include "steps.h"
#include <sys/syscall.h>
#include <sys/uio.h>

#include "arch.h"
#include "ma_error.h"

#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516
#define NR_restart_syscall 219

#define FLAG_TF 0x100
#define FLAG_DF 0x400
#define FLAG_AC 0x40000
/*
 * What a call must not inherit from the thread's own flags: the trap flag
 * (a trap per instruction), the direction flag (the ABI wants it clear at
 * a call) and alignment checking (Linux honours AC in user mode: jemalloc's
 * unaligned loads then fault, and the faulted call leaves its locks held).
 * The thread's flags come back with its registers.
 */
#define CALL_CLEARED_FLAGS (FLAG_TF | FLAG_DF | FLAG_AC)

int ma_arch_state_alloc(struct ma_cpu_state *s)
{
	memset(s, 0, sizeof(*s));
	s->xstate = aligned_alloc(64, MA_XSTATE_MAX);
	if (!s->xstate)
		return ma_fail(MA_E_NOMEM, "out of memory");
	return 0;
}

void ma_arch_state_free(struct ma_cpu_state *s)
{
	free(s->xstate);
	s->xstate = NULL;
}

static int ptrace_err(const char *what, pid_t tid)
{
	int e = errno;

	if (e == ESRCH)
		return ma_fail(MA_E_EXITED, "thread %d went away during %s", tid, what);
	return ma_fail(MA_E_INTERNAL, "%s of thread %d failed: %s", what, tid, strerror(e));
}

int ma_arch_get_regs(pid_t tid, struct user_regs_struct *r)
{
	if (ma_ptrace(PTRACE_GETREGS, tid, NULL, r) != 0)
		return ptrace_err("PTRACE_GETREGS", tid);
	return 0;
}

int ma_arch_set_regs(pid_t tid, const struct user_regs_struct *r)
{
	if (ma_ptrace(PTRACE_SETREGS, tid, NULL, (void *)r) != 0)
		return ptrace_err("PTRACE_SETREGS", tid);
	return 0;
}

int ma_arch_get_xstate(pid_t tid, struct ma_cpu_state *s)
{
	struct iovec iov = { s->xstate, MA_XSTATE_MAX };

	if (ma_ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &iov) != 0)
		return ptrace_err("PTRACE_GETREGSET(NT_X86_XSTATE)", tid);
	s->xstate_len = iov.iov_len;
	return 0;
}

int ma_arch_set_xstate(pid_t tid, const struct ma_cpu_state *s)
{
	struct iovec iov = { s->xstate, s->xstate_len };

	if (ma_ptrace(PTRACE_SETREGSET, tid, (void *)NT_X86_XSTATE, &iov) != 0)
		return ptrace_err("PTRACE_SETREGSET(NT_X86_XSTATE)", tid);
	return 0;
}

/* The FXSAVE/XSAVE image: the x87 control word, MXCSR, and the header's XSTATE_BV. */
#define XS_FCW 0
#define XS_MXCSR 24
#define XS_XSTATE_BV 512
#define FCW_DEFAULT 0x037f   /* every x87 exception masked, 64-bit precision, round to nearest */
#define MXCSR_DEFAULT 0x1f80 /* every SSE exception masked, round to nearest, no FTZ/DAZ */

int ma_arch_set_call_fpu(pid_t tid, const struct ma_cpu_state *s)
{
	static unsigned char img[MA_XSTATE_MAX] __attribute__((aligned(64)));
	uint16_t fcw = FCW_DEFAULT;
	uint32_t mxcsr = MXCSR_DEFAULT;
	uint64_t bv;
	struct iovec iov = { img, s->xstate_len };

	if (s->xstate_len < XS_XSTATE_BV + 8 || s->xstate_len > sizeof(img))
		return ma_fail(MA_E_INTERNAL, "thread %d's extended state is %zu bytes", tid,
			       (size_t)s->xstate_len);
	memcpy(img, s->xstate, s->xstate_len);
	memcpy(img + XS_FCW, &fcw, sizeof(fcw));
	memcpy(img + XS_MXCSR, &mxcsr, sizeof(mxcsr));
	/* x87 and SSE state present, so that the two words above are the ones loaded */
	memcpy(&bv, img + XS_XSTATE_BV, sizeof(bv));
	bv |= 3;
	memcpy(img + XS_XSTATE_BV, &bv, sizeof(bv));
	if (ma_ptrace(PTRACE_SETREGSET, tid, (void *)NT_X86_XSTATE, &iov) != 0)
		return ptrace_err("PTRACE_SETREGSET(NT_X86_XSTATE)", tid);
	return 0;
}

bool ma_arch_stopped_after_seccomp_change(const struct user_regs_struct *r)
{
	return (long)r->orig_rax == SYS_prctl || (long)r->orig_rax == SYS_seccomp;
}

bool ma_arch_single_steps(const struct user_regs_struct *r)
{
	return (r->eflags & FLAG_TF) != 0;
}

long ma_arch_restartable_syscall_nr(const struct user_regs_struct *r)
{
	return ma_arch_in_restartable_syscall(r) ? (long)r->orig_rax : -1;
}

bool ma_arch_in_restartable_syscall(const struct user_regs_struct *r)
{
	long ax = (long)r->rax;

	if ((long)r->orig_rax < 0)
		return false;
	return ax == -ERESTARTSYS || ax == -ERESTARTNOINTR || ax == -ERESTARTNOHAND ||
	       ax == -ERESTART_RESTARTBLOCK;
}

long ma_arch_restart_block_nr(const struct user_regs_struct *r)
{
	return (long)r->orig_rax >= 0 && (long)r->rax == -ERESTART_RESTARTBLOCK ? NR_restart_syscall
										 : -1;
}

void ma_arch_restart_as_issued(struct user_regs_struct *r)
{
	/* As the kernel restarts -ERESTARTNOINTR: the same number, the same arguments. */
	r->rax = r->orig_rax;
	r->rip -= MA_SYSCALL_INSN_LEN;
}

/*
 * Syscalls that fail with EINTR (not -ERESTART*) when a stop or a ptrace
 * interrupt wakes them, though no signal handler ran (see signal(7)), and
 * that can be issued again with no effect lost: they consumed nothing.
 */
bool ma_arch_interrupted_eintr(const struct user_regs_struct *r)
{
	static const long nrs[] = {
		0 /* read */, 1 /* write */, 17 /* pread64 */, 19 /* readv */, 20 /* writev */,
		40 /* sendfile */, 275 /* splice */,
		43 /* accept */, 44 /* sendto */, 45 /* recvfrom */, 46 /* sendmsg */,
		47 /* recvmsg */, 65 /* semop */,
		128 /* rt_sigtimedwait */, 208 /* io_getevents */, 220 /* semtimedop */,
		232 /* epoll_wait */, 243 /* mq_timedreceive */, 281 /* epoll_pwait */,
		288 /* accept4 */, 299 /* recvmmsg */, 307 /* sendmmsg */, 333 /* io_pgetevents */,
		426 /* io_uring_enter */, 441 /* epoll_pwait2 */,
	};

	if ((long)r->orig_rax < 0 || (long)r->rax != -EINTR)
		return false;
	for (size_t i = 0; i < sizeof(nrs) / sizeof(nrs[0]); i++)
		if ((long)r->orig_rax == nrs[i])
			return true;
	return false;
}

bool ma_arch_is_syscall_insn(const unsigned char insn[2])
{
	return insn[0] == 0x0f && insn[1] == 0x05;
}

void ma_arch_resume_regs(const struct user_regs_struct *saved, bool reissue_eintr,
			 struct user_regs_struct *out)
{
	*out = *saved;
	if (reissue_eintr && ma_arch_interrupted_eintr(saved)) {
		/* Our interrupt caused the EINTR: issue the syscall again. */
		ma_arch_restart_as_issued(out);
	} else if (ma_arch_in_restartable_syscall(saved)) {
		/* What the kernel's signal code does when no handler runs. */
		ma_arch_restart_as_issued(out);
		if ((long)saved->rax == -ERESTART_RESTARTBLOCK)
			out->rax = NR_restart_syscall;
	}
	out->orig_rax = (unsigned long long)-1;
}

void ma_arch_shorten_wait(struct user_regs_struct *r, uint64_t elapsed_ms)
{
	int timeout = (int)r->r10; /* epoll_wait's and epoll_pwait's 4th argument */

	if ((r->rax != 232 && r->rax != 281) || timeout <= 0)
		return;
	r->r10 = (unsigned long long)(elapsed_ms >= (uint64_t)timeout ? 0 : timeout - (int)elapsed_ms);
}

void ma_arch_setup_call(struct user_regs_struct *r, uint64_t fn, const uint64_t *args, int nargs,
			uint64_t stack_top, uint64_t ret)
{
	unsigned long long *argregs[6] = { &r->rdi, &r->rsi, &r->rdx, &r->rcx, &r->r8, &r->r9 };

	for (int i = 0; i < 6; i++)
		*argregs[i] = i < nargs ? args[i] : 0;
	(void)ret; /* the caller writes RET at stack_top - 8 */
	r->rsp = (stack_top & ~15ULL) - 8; /* as after a call: rsp % 16 == 8 */
	r->rip = fn;
	r->rax = 0; /* no vector args, for variadic callees */
	r->orig_rax = (unsigned long long)-1;
	r->eflags &= ~(unsigned long long)CALL_CLEARED_FLAGS;
}

void ma_arch_setup_syscall(struct user_regs_struct *r, uint64_t insn, long nr,
			   const uint64_t *args, int nargs)
{
	unsigned long long *argregs[6] = { &r->rdi, &r->rsi, &r->rdx, &r->r10, &r->r8, &r->r9 };

	for (int i = 0; i < 6; i++)
		*argregs[i] = i < nargs ? args[i] : 0;
	r->rax = (unsigned long long)nr;
	r->rip = insn;
	r->orig_rax = (unsigned long long)-1;
	r->eflags &= ~(unsigned long long)FLAG_TF;
}

void ma_arch_replace_syscall(struct user_regs_struct *r, long nr, const uint64_t *args, int nargs)
{
	unsigned long long *argregs[6] = { &r->rdi, &r->rsi, &r->rdx, &r->r10, &r->r8, &r->r9 };

	for (int i = 0; i < 6; i++)
		*argregs[i] = i < nargs ? args[i] : 0;
	r->orig_rax = (unsigned long long)nr;
}

uint64_t ma_arch_ip(const struct user_regs_struct *r) { return r->rip; }
uint64_t ma_arch_thread_pointer(const struct user_regs_struct *r) { return r->fs_base; }
uint64_t ma_arch_stack_pointer(const struct user_regs_struct *r) { return r->rsp; }
void ma_arch_set_ip(struct user_regs_struct *r, uint64_t ip) { r->rip = ip; }
void ma_arch_set_stack_pointer(struct user_regs_struct *r, uint64_t sp) { r->rsp = sp; }
void ma_arch_set_syscall_nr(struct user_regs_struct *r, long nr) { r->orig_rax = (unsigned long long)nr; }
bool ma_arch_is_vfork(long nr) { return nr == SYS_vfork; }

void ma_arch_syscall_info(const struct user_regs_struct *r, struct __ptrace_syscall_info *info)
{
	memset(info, 0, sizeof(*info));
	/* At a syscall's entry the kernel has put -ENOSYS in rax. */
	info->op = r->rax == (unsigned long long)-ENOSYS ? PTRACE_SYSCALL_INFO_ENTRY
							 : PTRACE_SYSCALL_INFO_EXIT;
	info->arch = MA_ARCH_AUDIT;
	info->instruction_pointer = r->rip;
	info->stack_pointer = r->rsp;
	info->entry.nr = r->orig_rax;
	info->entry.args[0] = r->rdi;
	info->entry.args[1] = r->rsi;
	info->entry.args[2] = r->rdx;
	info->entry.args[3] = r->r10;
	info->entry.args[4] = r->r8;
	info->entry.args[5] = r->r9;
	if (info->op == PTRACE_SYSCALL_INFO_EXIT) {
		info->exit.rval = (int64_t)r->rax;
		info->exit.is_error = (int64_t)r->rax < 0 && (int64_t)r->rax >= -4095;
	}
}

bool ma_arch_dwarf_reg(const struct user_regs_struct *r, int regno, uint64_t *val)
{
	/* The x86-64 psABI's DWARF numbers 0-16 (16: the return address, rip). */
	const unsigned long long *by_number[] = {
		&r->rax, &r->rdx, &r->rcx, &r->rbx, &r->rsi, &r->rdi, &r->rbp, &r->rsp,
		&r->r8,	 &r->r9,  &r->r10, &r->r11, &r->r12, &r->r13, &r->r14, &r->r15, &r->rip,
	};

	if (regno < 0 || regno >= (int)(sizeof(by_number) / sizeof(by_number[0])))
		return false;
	*val = *by_number[regno];
	return true;
}
uint64_t ma_arch_syscall_ret(const struct user_regs_struct *r) { return r->rax; }

/* orig_rax -1: the kernel's signal path then sees no syscall to restart. */
void ma_arch_finish_syscall(struct user_regs_struct *r, uint64_t value)
{
	r->rax = value;
	r->orig_rax = (uint64_t)-1;
}

/*
 * The state area, on the borrowed thread's own stack below its red zone,
 * is a signal frame's ucontext (what rt_sigreturn reads at the stack
 * pointer): flags, link, alternate stack (16), the registers in
 * sigcontext order (40), the signal mask (296); then the stub's own
 * words, and the xsave image at 384 (64-byte aligned) that the
 * sigcontext's fpstate points to, with the kernel's software fields set
 * so that rt_sigreturn restores every component the thread uses.
 */
#define AREA_UC_STACK 16 /* stack_t: ss_sp, ss_flags, ss_size */
#define AREA_MC 40	 /* struct sigcontext: r8 ... r15 rdi rsi rbp rbx rdx rax rcx rsp rip eflags */
#define MC_RAX (AREA_MC + 8 * 13)
#define MC_RIP (AREA_MC + 8 * 16)
#define MC_SEGS (AREA_MC + 8 * 18) /* cs, gs, fs, ss (16 bits each) */
#define MC_FPSTATE (AREA_MC + 8 * 23)
#define AREA_SIGMASK 296 /* uc_sigmask */
#define AREA_PENDING 304 /* the stub's rt_sigpending result */
#define AREA_ACTION 312	 /* the stub's rt_sigaction result (32 bytes) */
#define AREA_BLOCK 344	 /* the signals the trap's rt_sigprocmask blocks */
#define AREA_XSAVE 384
#define RED_ZONE 128
#define SA_RESTART_FLAG 0x10000000
#define UC_FLAGS 0x7 /* UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS, as the kernel's own */
#define SS_FLAGS_UNREAD 3 /* no valid mode: rt_sigreturn then leaves the alternate stack alone */
#define FP_XSTATE_MAGIC1 0x46505853U
#define FP_XSTATE_MAGIC2 0x46505845U
#define SW_BYTES 464 /* the xsave image's software fields (struct _fpx_sw_bytes) */
#define XFEATURE_TILE_DATA 18

_Static_assert(AREA_SIGMASK == MA_AREA_SIGMASK, "arch.h's MA_AREA_SIGMASK");
_Static_assert(AREA_UC_STACK == MA_AREA_UC_STACK, "arch.h's MA_AREA_UC_STACK");

size_t ma_arch_state_area_size(size_t xlen)
{
	return AREA_XSAVE + ((xlen + 4 + 63) & ~(size_t)63); /* + FP_XSTATE_MAGIC2 */
}

uint64_t ma_arch_state_area_addr(const struct user_regs_struct *saved, size_t xlen)
{
	/* 16 bytes between it and the red zone: the stub's final ip slot */
	return (saved->rsp - RED_ZONE - 16 - ma_arch_state_area_size(xlen)) & ~(uint64_t)63;
}

static uint64_t xsave_bv(const struct ma_cpu_state *xs)
{
	uint64_t bv;

	memcpy(&bv, xs->xstate + 512, sizeof(bv));
	return bv;
}

/* The features the kernel lets user space have: the word it puts first in NT_X86_XSTATE's software fields. */
static uint64_t user_features(const struct ma_cpu_state *xs)
{
	uint64_t f;
	uint32_t lo, hi;

	memcpy(&f, xs->xstate + SW_BYTES, sizeof(f));
	if (f)
		return f;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0)); /* XCR0 */
	return (uint64_t)hi << 32 | lo;
}

/*
 * What xrstor (ours or rt_sigreturn's) may restore: everything, except
 * AMX tile data when the saved image does not hold it: a thread that
 * never asked for AMX has it disabled (XFD), and touching it would fault.
 */
static uint64_t xrstor_mask(const struct ma_cpu_state *xs)
{
	return (xsave_bv(xs) & (1ULL << XFEATURE_TILE_DATA)) ? ~(uint64_t)0
							     : ~(uint64_t)(1ULL << XFEATURE_TILE_DATA);
}

/*
 * The size of the image rt_sigreturn restores: all of it, or up to the
 * tile data the thread does not hold (the kernel refuses a size beyond
 * the thread's own, and a thread without AMX has the smaller one).
 */
static uint32_t sigframe_xstate_size(const struct ma_cpu_state *xs)
{
	uint32_t a, b, c, d;

	if (!(user_features(xs) & ~xrstor_mask(xs)))
		return (uint32_t)xs->xstate_len;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0xd), "c"(XFEATURE_TILE_DATA));
	return b && b < xs->xstate_len ? b : (uint32_t)xs->xstate_len; /* b: the tile data's offset */
}

/* The xsave image as a signal frame's fpstate: software fields and the closing magic. */
static void put_sigframe_xstate(unsigned char *img, const struct ma_cpu_state *xs)
{
	uint32_t size = sigframe_xstate_size(xs), magic1 = FP_XSTATE_MAGIC1, ext = size + 4;
	uint32_t magic2 = FP_XSTATE_MAGIC2;
	uint64_t features = user_features(xs) & xrstor_mask(xs);

	memset(img + SW_BYTES, 0, 48);
	memcpy(img + SW_BYTES, &magic1, 4);
	memcpy(img + SW_BYTES + 4, &ext, 4);
	memcpy(img + SW_BYTES + 8, &features, 8);
	memcpy(img + SW_BYTES + 16, &size, 4);
	memcpy(img + size, &magic2, 4);
}

void ma_arch_build_area(unsigned char *area, uint64_t area_addr, const struct user_regs_struct *resume,
			const struct ma_cpu_state *xs, uint64_t sigmask, uint64_t block)
{
	uint64_t mc[18] = {
		resume->r8,  resume->r9,  resume->r10, resume->r11, resume->r12, resume->r13,
		resume->r14, resume->r15, resume->rdi, resume->rsi, resume->rbp, resume->rbx,
		resume->rdx, resume->rax, resume->rcx, resume->rsp, resume->rip,
		resume->eflags & ~(uint64_t)FLAG_TF,
	};
	uint16_t segs[4] = { (uint16_t)resume->cs, (uint16_t)resume->gs, (uint16_t)resume->fs,
			     (uint16_t)resume->ss };
	uint64_t flags = UC_FLAGS, ss_flags = SS_FLAGS_UNREAD, fpstate = area_addr + AREA_XSAVE;

	memset(area, 0, ma_arch_state_area_size(xs->xstate_len));
	memcpy(area, &flags, 8);
	memcpy(area + AREA_UC_STACK + 8, &ss_flags, 4);
	memcpy(area + AREA_MC, mc, sizeof(mc));
	memcpy(area + MC_SEGS, segs, sizeof(segs));
	memcpy(area + MC_FPSTATE, &fpstate, 8);
	memcpy(area + AREA_SIGMASK, &sigmask, sizeof(sigmask));
	memcpy(area + AREA_BLOCK, &block, sizeof(block));
	memcpy(area + AREA_XSAVE, xs->xstate, xs->xstate_len);
	put_sigframe_xstate(area + AREA_XSAVE, xs); /* xrstor ignores the software fields */
}

static void put32(unsigned char *p, int32_t v)
{
	memcpy(p, &v, 4);
}

/* Append BYTES to the code being built at *N. */
static void emit(unsigned char *code, size_t *n, const unsigned char *bytes, size_t len)
{
	memcpy(code + *n, bytes, len);
	*n += len;
}

/*
 * Append OP, a rip-relative disp32 to TARGET and TAIL immediate bytes
 * (the displacement counts from the end of the whole instruction).
 */
static void emit_riprel(unsigned char *code, size_t *n, uint64_t code_addr,
			const unsigned char *op, size_t oplen, uint64_t target, size_t tail)
{
	emit(code, n, op, oplen);
	put32(code + *n, (int32_t)(target - (code_addr + *n + 4 + tail)));
	*n += 4;
}

/*
 * The kernel's restart code that stands for the syscall the thread was
 * stopped in (XS->regs), as RESUME resumes it: -ERESTARTSYS (a handler
 * without SA_RESTART ends it with EINTR), -ERESTARTNOHAND (any handler
 * does: also for -ERESTART_RESTARTBLOCK and our own EINTR re-issue), or
 * -ERESTARTNOINTR (nothing does: also when RESUME restarts nothing).
 */
static long restart_kind(const struct ma_cpu_state *xs, const struct user_regs_struct *resume)
{
	long ax = (long)xs->regs.rax;

	if (resume->rip + MA_SYSCALL_INSN_LEN != xs->regs.rip || ax == -ERESTARTNOINTR)
		return -ERESTARTNOINTR;
	return ax == -ERESTARTSYS ? -ERESTARTSYS : -ERESTARTNOHAND;
}

/*
 * What a signal that waits for the thread when the stub gives it back
 * would have done to the syscall the thread was stopped in, as the
 * kernel's signal code decides it at the first handler it runs.  MAY_ASK:
 * the stub may make the two syscalls that find out (a seccomp filter
 * might forbid them; then the restart stays as RESUME has it).  *WATCH: 0
 * if no signal can change anything, else all signals; *RESTART: the
 * sa_flags bits that make the kernel restart anyway (SA_RESTART for
 * -ERESTARTSYS, none when any handler means EINTR).
 */
static void eintr_rule(const struct ma_cpu_state *xs, const struct user_regs_struct *resume,
		       bool may_ask, uint64_t *watch, uint64_t *restart)
{
	long kind = restart_kind(xs, resume);

	*watch = may_ask && kind != -ERESTARTNOINTR ? ~(uint64_t)0 : 0;
	*restart = kind == -ERESTARTSYS ? SA_RESTART_FLAG : 0;
}

void ma_arch_trap_regs(const struct ma_cpu_state *xs, const struct user_regs_struct *resume,
		       uint64_t stub_addr, uint64_t area_addr, struct user_regs_struct *out)
{
	*out = xs->regs;
	out->rip = stub_addr + MA_STUB_TRAP_END;
	out->rsp = area_addr; /* a handler's frame goes below the state area */
	out->orig_rax = 14;   /* rt_sigprocmask, what a restart issues */
	out->rax = (unsigned long long)restart_kind(xs, resume);
	out->rdi = 0; /* SIG_BLOCK */
	out->rsi = area_addr + AREA_BLOCK;
	out->rdx = 0;
	out->r10 = 8;
	out->eflags &= ~(unsigned long long)FLAG_TF;
}

/* A rel8 jump at AT (its opcode byte) to TARGET. */
static void patch_rel8(unsigned char *code, size_t at, size_t target)
{
	code[at + 1] = (unsigned char)(int8_t)((long)target - (long)(at + 2));
}

/* Where the two endings start (their syscalls: MA_STUB_*_SYSCALL_END). */
#define STUB_SIGRETURN_ENDING (MA_STUB_ALTSTACK_SYSCALL_END - 14)
#define STUB_POP_ENDING (MA_STUB_RESTORE_SYSCALL_END - 28)

/* A disp32 operand for a state-area offset. */
#define D32(x) (unsigned char)((x) & 0xff), (unsigned char)(((x) >> 8) & 0xff), 0x00, 0x00

/* A rel32 jump (E9) at *N to TARGET. */
static void emit_jmp32(unsigned char *code, size_t *n, size_t target)
{
	code[(*n)++] = 0xe9;
	put32(code + *n, (int32_t)((long)target - (long)(*n + 4)));
	*n += 4;
}

/*
 * The ending that gives the thread back by rt_sigreturn, as the end of a
 * signal handler does: registers, flags, xstate and signal mask in one
 * step, so a signal that waits is handled with the thread's own context,
 * never in the stub.  The alternate stack is read first, for
 * rt_sigreturn sets it from the frame.
 */
static void emit_sigreturn_ending(unsigned char *code, size_t *n, bool read_altstack)
{
	static const unsigned char ending[] = {
		0xb8, 0x83, 0x00, 0x00, 0x00, /* mov $131,%eax (sigaltstack) */
		0x31, 0xff, /* xor %edi,%edi: read only */
		0x48, 0x8d, 0x74, 0x24, MA_AREA_UC_STACK, /* lea UC_STACK(%rsp),%rsi */
		0x0f, 0x05, /* syscall */
		0xb8, 0x0f, 0x00, 0x00, 0x00, /* mov $15,%eax (rt_sigreturn) */
		0x0f, 0x05, /* syscall: does not return here */
	};
	size_t at = *n;

	emit(code, n, ending, sizeof(ending));
	/*
	 * A filter that forbids sigaltstack: no read.  The frame's alternate
	 * stack then has no valid mode, which rt_sigreturn ignores (it
	 * leaves the thread's alternate stack as it is).
	 */
	if (!read_altstack)
		code[at + 12] = code[at + 13] = 0x90; /* nop nop */
	/* Should rt_sigreturn ever return (a filter's errno), the pop ending. */
	emit_jmp32(code, n, STUB_POP_ENDING);
}

/*
 * The ending for a filter that forbids rt_sigreturn or sigaltstack: mask,
 * xstate, registers (popped from the frame), then ip and stack pointer in
 * one `ret`.  A signal that waits is handled just after the mask goes
 * back, in the stub.
 */
static void emit_pop_ending(unsigned char *code, size_t *n, uint64_t stub_addr, uint64_t mask)
{
	static const unsigned char setmask[] = {
		0xb8, 0x0e, 0x00, 0x00, 0x00, /* mov $14,%eax (rt_sigprocmask) */
		0xbf, 0x02, 0x00, 0x00, 0x00, /* mov $2,%edi (SIG_SETMASK) */
		0x48, 0x8d, 0xb4, 0x24, D32(AREA_SIGMASK), /* lea SIGMASK(%rsp),%rsi */
		0x31, 0xd2, /* xor %edx,%edx */
		0x41, 0xba, 0x08, 0x00, 0x00, 0x00, /* mov $8,%r10d */
		0x0f, 0x05, /* syscall */
	};
	static const unsigned char xrstor[] = {
		0x48, 0x0f, 0xae, 0xac, 0x24, D32(AREA_XSAVE), /* xrstor64 XSAVE(%rsp) */
		0x48, 0x8d, 0x64, 0x24, AREA_MC, /* lea MC(%rsp),%rsp */
	};
	static const unsigned char pops[] = {
		0x41, 0x58, 0x41, 0x59, 0x41, 0x5a, 0x41, 0x5b, /* r8 r9 r10 r11 */
		0x41, 0x5c, 0x41, 0x5d, 0x41, 0x5e, 0x41, 0x5f, /* r12 r13 r14 r15 */
		0x5f, 0x5e, 0x5d, 0x5b, 0x5a, 0x58, 0x59, /* rdi rsi rbp rbx rdx rax rcx */
		0x48, 0x8d, 0x64, 0x24, 0x10, /* lea 16(%rsp),%rsp: past rsp and rip */
		0x9d, /* popfq */
	};
	static const unsigned char mov_rsp[] = { 0x48, 0x8b, 0x25 }; /* mov d(%rip),%rsp */
	static const unsigned char ret_red[] = { 0xc2, RED_ZONE, 0x00 }; /* ret $128 */
	unsigned char mov_eax[5] = { 0xb8 }, mov_edx[5] = { 0xba };

	emit(code, n, setmask, sizeof(setmask));
	put32(mov_eax + 1, (int32_t)(uint32_t)mask);
	put32(mov_edx + 1, (int32_t)(uint32_t)(mask >> 32));
	emit(code, n, mov_eax, sizeof(mov_eax));
	emit(code, n, mov_edx, sizeof(mov_edx));
	emit(code, n, xrstor, sizeof(xrstor));
	emit(code, n, pops, sizeof(pops));
	/* rsp at the ip's slot, then ip and rsp back in one instruction: no signal comes between. */
	emit_riprel(code, n, stub_addr, mov_rsp, sizeof(mov_rsp), stub_addr + MA_STUB_SLOT_RSP, 0);
	emit(code, n, ret_red, sizeof(ret_red));
}

/*
 * The two ways the restore path ends.  rt_sigreturn gives a waiting
 * signal the thread's own context, but it also discards a syscall's
 * restart block (nanosleep, a timed futex or poll stopped with
 * -ERESTART_RESTARTBLOCK resume through restart_syscall, which then
 * fails with EINTR): such a restart pops instead, as does everything
 * under a seccomp filter that forbids rt_sigreturn or sigaltstack.
 */
bool ma_arch_stub_restore_pops(const struct ma_cpu_state *xs, const struct user_regs_struct *resume)
{
	return resume->rax == NR_restart_syscall && resume->rip + MA_SYSCALL_INSN_LEN == xs->regs.rip;
}

/* The stub's instructions (ma_arch_build_stub), a 0x00 where a jump is patched. */
static const unsigned char insn_marker[] = {
	0x48, 0x89, 0xc7, /* mov %rax,%rdi      (calls return here) */
	0xb8, 0x27, 0x00, 0x00, 0x00, /* mov $39,%eax (getpid) */
	0x0f, 0x05, /* syscall  <- the tracer stops here */
	0xeb, 0x00, /* jmp the restore path, past the trap (patched) */
};
static const unsigned char insn_trap[] = {
	0x0f, 0x05, /* syscall: what the kernel restarts into */
	0x48, 0x83, 0xf8, 0xfc, /* cmp $-4,%rax */
	0x75, 0x00, /* jne the restore path (patched) */
};
static const unsigned char insn_movabs_rsp[] = { 0x48, 0xbc }; /* movabs $imm64,%rsp */
static const unsigned char insn_cmp_watch[] = { 0x48, 0x83, 0x3d }; /* cmpq $imm8,d(%rip) */
static const unsigned char insn_pending[] = {
	0xb8, 0x7f, 0x00, 0x00, 0x00, /* mov $127,%eax (rt_sigpending) */
	0x48, 0x8d, 0xbc, 0x24, D32(AREA_PENDING), /* lea PENDING(%rsp),%rdi */
	0xbe, 0x08, 0x00, 0x00, 0x00, /* mov $8,%esi */
	0x0f, 0x05, /* syscall */
	0x48, 0x8b, 0x9c, 0x24, D32(AREA_PENDING), /* mov PENDING(%rsp),%rbx */
	0x48, 0x8b, 0x8c, 0x24, D32(AREA_SIGMASK), /* mov SIGMASK(%rsp),%rcx */
	0x48, 0xf7, 0xd1, /* not %rcx */
	0x48, 0x21, 0xcb, /* and %rcx,%rbx: pending, and unblocked once the mask is back */
};
static const unsigned char insn_and_watch[] = { 0x48, 0x23, 0x1d }; /* and d(%rip),%rbx */
static const unsigned char insn_next_signal[] = {
	0x48, 0x85, 0xdb, /* loop: test %rbx,%rbx */
	0x74, 0x00, /* jz keep (patched) */
	0x48, 0x0f, 0xbc, 0xfb, /* bsf %rbx,%rdi: the lowest, the kernel's first */
	0x48, 0x0f, 0xb3, 0xfb, /* btr %rdi,%rbx */
	0xff, 0xc7, /* inc %edi: the signal number */
	0xb8, 0x0d, 0x00, 0x00, 0x00, /* mov $13,%eax (rt_sigaction) */
	0x31, 0xf6, /* xor %esi,%esi */
	0x48, 0x8d, 0x94, 0x24, D32(AREA_ACTION), /* lea ACTION(%rsp),%rdx */
	0x41, 0xba, 0x08, 0x00, 0x00, 0x00, /* mov $8,%r10d */
	0x0f, 0x05, /* syscall */
	0x85, 0xc0, /* test %eax,%eax */
	0x75, 0x00, /* jnz loop (patched) */
	0x48, 0x83, 0xbc, 0x24, D32(AREA_ACTION), 0x01, /* cmpq $1,ACTION(%rsp) */
	0x76, 0x00, /* jbe loop: SIG_DFL or SIG_IGN runs no handler (patched) */
	0x48, 0x8b, 0x84, 0x24, D32(AREA_ACTION + 8), /* mov ACTION+8(%rsp),%rax */
};
static const unsigned char insn_and_restart[] = { 0x48, 0x23, 0x05 }; /* and d(%rip),%rax */
static const unsigned char insn_jnz8[] = { 0x75, 0x00 }; /* jnz keep: the kernel would restart (patched) */
static const unsigned char insn_eintr[] = {
	0x48, 0xc7, 0x84, 0x24, D32(MC_RAX), 0xfc, 0xff, 0xff, 0xff, /* movq $-4,rax in the frame */
};
static const unsigned char insn_mov_rax[] = { 0x48, 0x8b, 0x05 }; /* mov d(%rip),%rax */
static const unsigned char insn_je32[] = { 0x0f, 0x84, 0, 0, 0, 0 }; /* je keep (patched) */
static const unsigned char insn_store_rip[] = { 0x48, 0x89, 0x84, 0x24 }; /* mov %rax,d(%rsp) */

size_t ma_arch_build_stub(unsigned char *code, uint64_t stub_addr, uint64_t area_addr,
			  const struct user_regs_struct *resume, const struct ma_cpu_state *xs,
			  const struct ma_stub_opts *o)
{
	uint64_t rip_slot = resume->rsp - RED_ZONE - 8;
	uint64_t rip = resume->rip, rip_eintr = resume->rip + MA_SYSCALL_INSN_LEN, watch, restart;
	size_t n = 0, j_skip, j_done, loop, j_err, j_dfl, j_restart, keep, entry, j_trap, eintr_at;
	bool by_sigreturn = o->by_sigreturn;
	bool keep_sigreturns = by_sigreturn && !ma_arch_stub_restore_pops(xs, resume);
	/* The pop ending's `ret` takes the ip from below the red zone; rt_sigreturn from the frame. */
	int32_t pop_rip = (int32_t)(rip_slot - area_addr);

	eintr_rule(xs, resume, o->may_ask, &watch, &restart);
	memset(code, 0xcc, MA_STUB_REGION);
	emit(code, &n, insn_marker, sizeof(insn_marker));
	/*
	 * The insn_trap (ma_arch_trap_regs): the kernel's signal code either ran
	 * a handler and ended the syscall with EINTR (then here, rax -EINTR),
	 * or restarted it as our rt_sigprocmask(SIG_BLOCK) (then here, rax 0,
	 * signals blocked): the restore path, as after the insn_marker.
	 */
	emit(code, &n, insn_trap, sizeof(insn_trap));
	j_trap = n - 2;
	emit(code, &n, insn_movabs_rsp, sizeof(insn_movabs_rsp));
	emit(code, &n, (const unsigned char *)&area_addr, 8);
	eintr_at = n; /* jmp32 to the EINTR branch, patched below */
	n += 5;
	/* The restore path, from the insn_marker or the insn_trap. */
	entry = n;
	patch_rel8(code, MA_STUB_MARKER_END, entry);
	patch_rel8(code, j_trap, entry);
	emit(code, &n, insn_movabs_rsp, sizeof(insn_movabs_rsp));
	emit(code, &n, (const unsigned char *)&area_addr, 8);
	/*
	 * The thread was stopped in a syscall the stub restarts: a signal
	 * that waits for it now would have ended the syscall with EINTR if
	 * its handler says so.  Ask the kernel, as its signal code would.
	 */
	emit_riprel(code, &n, stub_addr, insn_cmp_watch, sizeof(insn_cmp_watch), stub_addr + MA_STUB_SLOT_WATCH, 1);
	code[n++] = 0x00; /* $0 */
	j_skip = n;
	emit(code, &n, insn_je32, sizeof(insn_je32));
	emit(code, &n, insn_pending, sizeof(insn_pending));
	emit_riprel(code, &n, stub_addr, insn_and_watch, sizeof(insn_and_watch), stub_addr + MA_STUB_SLOT_WATCH, 0);
	loop = n;
	j_done = n + 3;
	j_err = n + 40;
	j_dfl = n + 51;
	emit(code, &n, insn_next_signal, sizeof(insn_next_signal));
	emit_riprel(code, &n, stub_addr, insn_and_restart, sizeof(insn_and_restart),
		    stub_addr + MA_STUB_SLOT_RESTART, 0);
	j_restart = n;
	emit(code, &n, insn_jnz8, sizeof(insn_jnz8));
	/* EINTR: rax -EINTR and the ip after the syscall, then the ending. */
	{
		size_t at = eintr_at;

		emit_jmp32(code, &at, n);
	}
	emit(code, &n, insn_eintr, sizeof(insn_eintr));
	emit_riprel(code, &n, stub_addr, insn_mov_rax, sizeof(insn_mov_rax), stub_addr + MA_STUB_SLOT_RIP_EINTR, 0);
	emit(code, &n, insn_store_rip, sizeof(insn_store_rip));
	put32(code + n, by_sigreturn ? MC_RIP : pop_rip);
	n += 4;
	emit_jmp32(code, &n, by_sigreturn ? STUB_SIGRETURN_ENDING : STUB_POP_ENDING);
	/* Keep: resume as RESUME says (a restart, or no syscall at all). */
	keep = n;
	emit_riprel(code, &n, stub_addr, insn_mov_rax, sizeof(insn_mov_rax), stub_addr + MA_STUB_SLOT_RIP, 0);
	emit(code, &n, insn_store_rip, sizeof(insn_store_rip));
	put32(code + n, keep_sigreturns ? MC_RIP : pop_rip);
	n += 4;
	emit_jmp32(code, &n, keep_sigreturns ? STUB_SIGRETURN_ENDING : STUB_POP_ENDING);
	put32(code + j_skip + 2, (int32_t)((long)keep - (long)(j_skip + sizeof(insn_je32))));
	patch_rel8(code, j_done, keep);
	patch_rel8(code, j_err, loop);
	patch_rel8(code, j_dfl, loop);
	patch_rel8(code, j_restart, keep);
	assert(n <= STUB_SIGRETURN_ENDING);
	n = STUB_SIGRETURN_ENDING;
	emit_sigreturn_ending(code, &n, o->read_altstack);
	assert(n <= STUB_POP_ENDING);
	n = STUB_POP_ENDING;
	emit_pop_ending(code, &n, stub_addr, xrstor_mask(xs));
	assert(n <= MA_STUB_SLOT_RSP);
	memcpy(code + MA_STUB_SLOT_RSP, &rip_slot, 8);
	memcpy(code + MA_STUB_SLOT_RIP, &rip, 8);
	memcpy(code + MA_STUB_SLOT_RIP_EINTR, &rip_eintr, 8);
	memcpy(code + MA_STUB_SLOT_WATCH, &watch, 8);
	memcpy(code + MA_STUB_SLOT_RESTART, &restart, 8);
	return n;
}

uint64_t ma_arch_stub_retval(const struct user_regs_struct *r)
{
	return r->rdi;
}

size_t ma_arch_build_batch(unsigned char *code)
{
	/*
	 * void batch(struct ma_batch_entry *e, size_t n): for each entry,
	 * e->ret = e->fn(e->args[0..5]).  Callee-saved rbx/r12 walk the
	 * table; three pushes keep the stack 16-byte aligned at each call.
	 */
	static const unsigned char batch[] = {
		0x53, 0x41, 0x54, 0x41, 0x55, /* push rbx; push r12; push r13 */
		0x48, 0x89, 0xfb, /* mov rbx,rdi */
		0x49, 0x89, 0xf4, /* mov r12,rsi */
		0x4d, 0x85, 0xe4, /* loop: test r12,r12 */
		0x74, 0x29, /* je done */
		0x48, 0x8b, 0x7b, 0x08, /* mov rdi,[rbx+8] */
		0x48, 0x8b, 0x73, 0x10, /* mov rsi,[rbx+16] */
		0x48, 0x8b, 0x53, 0x18, /* mov rdx,[rbx+24] */
		0x48, 0x8b, 0x4b, 0x20, /* mov rcx,[rbx+32] */
		0x4c, 0x8b, 0x43, 0x28, /* mov r8,[rbx+40] */
		0x4c, 0x8b, 0x4b, 0x30, /* mov r9,[rbx+48] */
		0x31, 0xc0, /* xor eax,eax */
		0xff, 0x13, /* call [rbx] */
		0x48, 0x89, 0x43, 0x38, /* mov [rbx+56],rax */
		0x48, 0x83, 0xc3, 0x40, /* add rbx,64 */
		0x49, 0xff, 0xcc, /* dec r12 */
		0xeb, 0xd2, /* jmp loop */
		0x41, 0x5d, 0x41, 0x5c, 0x5b, 0xc3, /* done: pop r13; pop r12; pop rbx; ret */
	};

	memcpy(code, batch, sizeof(batch));
	return sizeof(batch);
}

size_t ma_arch_build_append_cb(unsigned char *code, size_t cap)
{
	/* Assembled from (Intel syntax), rdi = opaque, rsi = string:
	 *	mov rax,[rdi]; mov rcx,[rdi+8]
	 * 1:	movzx edx,byte [rsi]; test dl,dl; jz 3f; inc rsi
	 *	cmp rax,rcx; jae 2f; mov [rax],dl; inc rax; jmp 1b
	 * 2:	inc qword [rdi+16]; jmp 1b
	 * 3:	mov [rdi],rax; ret */
	static const unsigned char cb[] = {
		0x48, 0x8b, 0x07, 0x48, 0x8b, 0x4f, 0x08, 0x0f, 0xb6, 0x16, 0x84, 0xd2, 0x74,
		0x15, 0x48, 0xff, 0xc6, 0x48, 0x39, 0xc8, 0x73, 0x07, 0x88, 0x10, 0x48, 0xff,
		0xc0, 0xeb, 0xea, 0x48, 0xff, 0x47, 0x10, 0xeb, 0xe4, 0x48, 0x89, 0x07, 0xc3,
	};

	if (cap < sizeof(cb))
		return 0;
	memcpy(code, cb, sizeof(cb));
	return sizeof(cb);
}

/* ---- syscalls by number (x86-64) ---- */

const char *ma_arch_syscall_name(long nr)
{
	static const struct {
		long nr;
		const char *name;
	} names[] = {
		{ 0, "read" },	       { 1, "write" },	       { 7, "poll" },
		{ 23, "select" },      { 34, "pause" },	       { 35, "nanosleep" },
		{ 43, "accept" },      { 45, "recvfrom" },     { 47, "recvmsg" },
		{ 61, "wait4" },       { 128, "rt_sigtimedwait" }, { 202, "futex" },
		{ 219, "restart_syscall" }, { 230, "clock_nanosleep" }, { 232, "epoll_wait" },
		{ 247, "waitid" },     { 270, "pselect6" },    { 271, "ppoll" },
		{ 281, "epoll_pwait" }, { 288, "accept4" },    { 426, "io_uring_enter" },
		{ 441, "epoll_pwait2" }, { 19, "readv" },     { 20, "writev" },
		{ 40, "sendfile" },    { 42, "connect" },     { 44, "sendto" },
		{ 46, "sendmsg" },     { 65, "semop" },       { 69, "msgsnd" },
		{ 70, "msgrcv" },      { 208, "io_getevents" }, { 220, "semtimedop" },
		{ 243, "mq_timedreceive" }, { 275, "splice" }, { 299, "recvmmsg" },
		{ 307, "sendmmsg" },   { 333, "io_pgetevents" }, { 3, "close" },
		{ 18, "pwrite64" },    { 276, "tee" },        { 278, "vmsplice" },
		{ 296, "pwritev" },    { 326, "copy_file_range" }, { 328, "pwritev2" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].nr == nr)
			return names[i].name;
	return NULL;
}

bool ma_arch_is_epoll_wait(long nr)
{
	return nr == 232 || nr == 281; /* epoll_wait, epoll_pwait */
}

/*
 * Does syscall NR with arguments A wait with a timeout?  Borrowing such a
 * thread delays its deadline by the hold time at most (an interrupted
 * epoll_wait is issued again with the time that remained), but an untimed
 * wait is not delayed at all: those are preferred.
 */
bool ma_arch_is_timed_wait(long nr, const unsigned long long *a)
{
	switch (nr) {
	case 202: /* futex: FUTEX_WAIT (0) or FUTEX_WAIT_BITSET (9) with a timeout */
		return ((a[1] & 0x7f) == 0 || (a[1] & 0x7f) == 9) && a[3] != 0;
	case 232: /* epoll_wait */
	case 281: /* epoll_pwait */
		return (int)a[3] >= 0;
	case 7: /* poll */
		return (int)a[2] >= 0;
	case 271: /* ppoll */
	case 441: /* epoll_pwait2 */
		return a[nr == 271 ? 2 : 3] != 0;
	case 23: /* select */
	case 270: /* pselect6 */
		return a[4] != 0;
	case 35: /* nanosleep */
	case 230: /* clock_nanosleep */
		return true;
	/* A NULL timeout waits without one (sigwait() is rt_sigtimedwait so). */
	case 128: /* rt_sigtimedwait */
		return a[2] != 0;
	case 220: /* semtimedop */
		return a[3] != 0;
	case 208: /* io_getevents */
	case 243: /* mq_timedreceive */
		return a[4] != 0;
	default:
		return false;
	}
}

/*
 * Waits that a stop always ends with EINTR (memattach issues them again;
 * only a memattach killed in the microseconds between the stop and that
 * register write would leave the EINTR to the program).
 */
bool ma_arch_stop_ends_with_eintr(long nr)
{
	switch (nr) {
	case 65: /* semop (raw: glibc's semop() is semtimedop) */
	case 128: /* rt_sigtimedwait */
	case 208: /* io_getevents */
	case 220: /* semtimedop */
	case 232: /* epoll_wait */
	case 243: /* mq_timedreceive */
	case 281: /* epoll_pwait */
	case 333: /* io_pgetevents */
	case 426: /* io_uring_enter */
	case 441: /* epoll_pwait2 */
		return true;
	default:
		return false;
	}
}

/*
 * Transfers a stop cuts short: blocked with part of its work done (a
 * write to a pipe or socket, a send, a receive with MSG_WAITALL, a batch
 * of messages) such a syscall returns what it has done so far when a stop
 * wakes it, and a lingering close returns at once.  Nothing can undo
 * that, and restarting could not either: never stopped.
 */
bool ma_arch_stop_cuts_short(long nr, const unsigned long long *a)
{
	const unsigned long long waitall = 0x100; /* MSG_WAITALL */

	switch (nr) {
	case 1: /* write */
	case 3: /* close (SO_LINGER) */
	case 18: /* pwrite64 */
	case 20: /* writev */
	case 40: /* sendfile */
	case 44: /* sendto */
	case 46: /* sendmsg */
	case 275: /* splice */
	case 276: /* tee */
	case 278: /* vmsplice */
	case 296: /* pwritev */
	case 299: /* recvmmsg */
	case 307: /* sendmmsg */
	case 326: /* copy_file_range */
	case 328: /* pwritev2 */
		return true;
	case 45: /* recvfrom */
		return a[3] & waitall;
	case 47: /* recvmsg */
		return a[2] & waitall;
	default:
		return false;
	}
}

int ma_arch_socket_waits(long nr, const unsigned long long *a, int fd[2], int dir[2])
{
	switch (nr) {
	case 0: /* read */
	case 19: /* readv */
	case 43: /* accept */
	case 45: /* recvfrom */
	case 47: /* recvmsg */
	case 288: /* accept4 */
	case 299: /* recvmmsg */
		fd[0] = (int)a[0], dir[0] = 1;
		return 1;
	case 1: /* write */
	case 20: /* writev */
	case 40: /* sendfile: out_fd */
	case 42: /* connect */
	case 44: /* sendto */
	case 46: /* sendmsg */
	case 307: /* sendmmsg */
		fd[0] = (int)a[0], dir[0] = 2;
		return 1;
	case 275: /* splice: from fd_in, into fd_out */
		fd[0] = (int)a[0], dir[0] = 1;
		fd[1] = (int)a[2], dir[1] = 2;
		return 2;
	default:
		return 0;
	}
}
