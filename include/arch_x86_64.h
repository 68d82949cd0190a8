/*
 * arch_x86_64.h - the x86-64 constants behind arch.h (included by it, never
 * directly): sizes, the return stub's layout, the state area's offsets,
 * relocation types.
 */
#ifndef MA_ARCH_X86_64_H
#define MA_ARCH_X86_64_H

#include <elf.h>
#include <linux/audit.h>
#include <stdint.h>

/* The largest NT_X86_XSTATE image (AVX-512 and AMX tiles fit). */
#define MA_XSTATE_MAX 16384
/* The `syscall` instruction's length: ip minus this is the instruction. */
#define MA_SYSCALL_INSN_LEN 2
/* seccomp_data.arch of this architecture's native syscalls. */
#define MA_ARCH_AUDIT AUDIT_ARCH_X86_64
/* The relocation the loader fills with a TLS block's offset from the thread pointer. */
#define MA_ARCH_R_TLS_TPOFF R_X86_64_TPOFF64
/* The relocations that bind a symbol to a GOT slot (the frag agent rewrites these). */
#define MA_ARCH_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define MA_ARCH_R_GLOB_DAT R_X86_64_GLOB_DAT
/* A spin-wait's pause (the frag agent's stripe locks). */
#define MA_ARCH_CPU_RELAX() __builtin_ia32_pause()
/*
 * The agent's floating point (in the program's threads) runs with every
 * SSE exception masked and the default rounding, whatever the program
 * set: MA_ARCH_FP_HOLD returns the program's MXCSR, MA_ARCH_FP_RELEASE
 * puts it back (its exception flags included).  Doubles use SSE only here.
 */
#define MA_ARCH_FP_HOLD() ma_x86_fp_hold()
#define MA_ARCH_FP_RELEASE(old) ma_x86_fp_release(old)
static inline uint32_t ma_x86_fp_hold(void)
{
	uint32_t old, fresh = 0x1f80;

	__asm__ __volatile__("stmxcsr %0\n\tldmxcsr %1" : "=m"(old) : "m"(fresh) : "memory");
	return old;
}
static inline void ma_x86_fp_release(uint32_t old)
{
	__asm__ __volatile__("ldmxcsr %0" : : "m"(old) : "memory");
}
/*
 * The frag agent's one atomic store of an aligned 16-byte BLOCK: from
 * (OLO, OHI) to (NLO, NHI), true if it held the old value.
 */
#define MA_ARCH_CAS16(block, olo, ohi, nlo, nhi) ma_x86_cas16(block, olo, ohi, nlo, nhi)
static inline _Bool ma_x86_cas16(uint64_t *block, uint64_t olo, uint64_t ohi, uint64_t nlo, uint64_t nhi)
{
	_Bool ok;

	__asm__ __volatile__("lock cmpxchg16b %1"
			     : "=@ccz"(ok), "+m"(*(volatile unsigned __int128 *)block), "+a"(olo), "+d"(ohi)
			     : "b"(nlo), "c"(nhi)
			     : "memory");
	return ok;
}

/* The return stub's layout (arch.h, ma_arch_build_stub). */
#define MA_STUB_SYSCALL 8 /* offset of the stub's `syscall` instruction */
#define MA_STUB_MARKER_END 10 /* offset of the instruction after `syscall` */
#define MA_STUB_MARKER_NR 39 /* __NR_getpid */
#define MA_STUB_TRAP_END 14 /* after the trap's `syscall` (ma_arch_trap_regs) */
#define MA_STUB_PENDING_SYSCALL_END 79 /* after the restore path's rt_sigpending */
#define MA_STUB_ACTION_SYSCALL_END 146 /* after the restore path's rt_sigaction */
/* The two endings of the restore path (ma_arch_build_stub's BY_SIGRETURN): */
#define MA_STUB_ALTSTACK_SYSCALL_END 244 /* after sigaltstack (read the alternate stack) */
#define MA_STUB_SIGRETURN_SYSCALL_END 251 /* after rt_sigreturn */
#define MA_STUB_RESTORE_SYSCALL_END 284 /* after the pop ending's rt_sigprocmask */
#define MA_STUB_SLOT_RSP 352 /* the stack pointer the pop ending's `ret` starts from */
#define MA_STUB_SLOT_RIP 360 /* the resume ip */
#define MA_STUB_SLOT_RIP_EINTR 368 /* the ip when the syscall ends with EINTR */
#define MA_STUB_SLOT_WATCH 376 /* 0: no pending signal can change the resume */
#define MA_STUB_SLOT_RESTART 384 /* sa_flags that still mean restart */
#define MA_STUB_HEADER 392 /* the session's header (remote.h) */
#define MA_STUB_BATCH 560 /* the batch runner (ma_arch_build_batch) */
#define MA_STUB_APPEND 624 /* the append callback (ma_arch_build_append_cb) */
#define MA_STUB_REGION 672

/* Offsets in the state area: the signal mask, the alternate stack (stack_t). */
#define MA_AREA_SIGMASK 296
#define MA_AREA_UC_STACK 16
/* Room for the batch runner's code (ma_arch_build_batch). */
#define MA_BATCH_MAX_CODE 64

#endif
