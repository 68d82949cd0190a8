/*
 * arch.h - the only interface to CPU-specific code: register state, call
 * and syscall set-up, the return stub, syscall restart.  The build picks
 * the architecture (Makefile: ARCH, default `uname -m`): its constants in
 * include/arch_$(ARCH).h (MA_ARCH_HEADER), its code in attach/arch_$(ARCH).c.
 * Nothing else names a register, a relocation type or a syscall that only
 * one architecture has.
 */
#ifndef MA_ARCH_H
#define MA_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#ifndef MA_ARCH_HEADER
#error "MA_ARCH_HEADER names the architecture header (the Makefile sets it from ARCH)"
#endif
#include MA_ARCH_HEADER

/* Everything a hijacked thread needs restored: general and extended state. */
struct ma_cpu_state {
	struct user_regs_struct regs;
	unsigned char *xstate; /* NT_X86_XSTATE image, MA_XSTATE_MAX bytes */
	size_t xstate_len; /* as returned by the kernel */
};

int ma_arch_state_alloc(struct ma_cpu_state *s);
void ma_arch_state_free(struct ma_cpu_state *s);
/* Read the extended (FPU/vector) state into S; S->regs stay as they are. */
int ma_arch_get_xstate(pid_t tid, struct ma_cpu_state *s);
int ma_arch_set_regs(pid_t tid, const struct user_regs_struct *r);
int ma_arch_set_xstate(pid_t tid, const struct ma_cpu_state *s);
/*
 * Give the thread, for the calls, the floating-point control state of a
 * fresh thread (every exception masked, default rounding) over its saved
 * state S: a thread that unmasked FP exceptions would otherwise trap in
 * jemalloc's floating point (heap profiling's sampling) with a lock held.
 * Its own state comes back with S (ma_arch_set_xstate, or the stub).
 */
int ma_arch_set_call_fpu(pid_t tid, const struct ma_cpu_state *s);
int ma_arch_get_regs(pid_t tid, struct user_regs_struct *r);

/*
 * The registers to resume with so the thread behaves as if never stopped:
 * a syscall interrupted with -ERESTART* is restarted the way the kernel
 * would (ip back over the syscall instruction, number back in ax), and
 * orig_ax is -1 so the kernel itself does nothing more at this stop.
 */
void ma_arch_resume_regs(const struct user_regs_struct *saved, bool reissue_eintr,
			 struct user_regs_struct *out);
/*
 * True if the thread sits at the end of a syscall that returned EINTR only
 * because it was stopped (epoll_wait & co. are never restarted by the
 * kernel).  With REISSUE_EINTR, ma_arch_resume_regs issues it again, so no
 * spurious EINTR reaches the program.
 */
bool ma_arch_interrupted_eintr(const struct user_regs_struct *r);
/*
 * R re-issues an epoll_wait/epoll_pwait (see ma_arch_resume_regs) that had
 * already waited ELAPSED_MS: give it only the time that remained, so a
 * borrowed thread's deadline moves by the hold time at most.
 */
void ma_arch_shorten_wait(struct user_regs_struct *r, uint64_t elapsed_ms);
/* True if the two bytes before the stopped ip are the 64-bit `syscall`
 * instruction (not int $0x80 or sysenter, whose numbers differ). */
bool ma_arch_is_syscall_insn(const unsigned char insn[2]);
/* The syscall the thread was stopped inside, to be restarted; -1 if none. */
long ma_arch_restartable_syscall_nr(const struct user_regs_struct *r);
/* True if the thread was stopped inside a syscall that will be restarted. */
bool ma_arch_in_restartable_syscall(const struct user_regs_struct *r);
/*
 * Stopped inside a syscall the kernel restarts through restart_syscall (a
 * timed sleep or wait: -ERESTART_RESTARTBLOCK)?  Then restart_syscall's
 * number (its arguments and ip, as a filter sees them, are R's:
 * ma_arch_syscall_info); else -1.
 */
long ma_arch_restart_block_nr(const struct user_regs_struct *r);
/* Make such a syscall be issued again as the program made it, not through restart_syscall. */
void ma_arch_restart_as_issued(struct user_regs_struct *r);
/*
 * At an interrupt stop inside a syscall: make that syscall return VALUE
 * when the thread resumes, instead of being restarted.
 */
void ma_arch_finish_syscall(struct user_regs_struct *r, uint64_t value);
/* Does the thread trace itself one instruction at a time (x86: the trap flag it set)? */
bool ma_arch_single_steps(const struct user_regs_struct *r);
/*
 * True if the last syscall of the stopped thread could have changed its
 * own seccomp mode (prctl, seccomp): a mode read before its stop may be
 * stale only then.
 */
bool ma_arch_stopped_after_seccomp_change(const struct user_regs_struct *r);

/* Set R up for a call of FN(args...) returning to RET on a private stack. */
void ma_arch_setup_call(struct user_regs_struct *r, uint64_t fn, const uint64_t *args, int nargs,
			uint64_t stack_top_after_push, uint64_t ret);
/* At a syscall-entry stop: make the kernel run NR(args) instead. */
void ma_arch_replace_syscall(struct user_regs_struct *r, long nr, const uint64_t *args, int nargs);
/* Set R up to execute the syscall instruction at INSN with NR(args...). */
void ma_arch_setup_syscall(struct user_regs_struct *r, uint64_t insn, long nr,
			   const uint64_t *args, int nargs);

uint64_t ma_arch_ip(const struct user_regs_struct *r);
uint64_t ma_arch_stack_pointer(const struct user_regs_struct *r);
void ma_arch_set_ip(struct user_regs_struct *r, uint64_t ip);
void ma_arch_set_stack_pointer(struct user_regs_struct *r, uint64_t sp);
/*
 * At a syscall-entry stop: make the kernel run syscall NR (its arguments
 * as they are); the stub's marker stop uses it to skip a syscall.
 */
void ma_arch_set_syscall_nr(struct user_regs_struct *r, long nr);
struct __ptrace_syscall_info;
/*
 * What PTRACE_GET_SYSCALL_INFO would say of a syscall stop with registers
 * R (for kernels without it): entry or exit, ip, sp, number, arguments or
 * return value.
 */
void ma_arch_syscall_info(const struct user_regs_struct *r, struct __ptrace_syscall_info *info);
/* Is syscall NR vfork (which not every architecture has)? */
bool ma_arch_is_vfork(long nr);
/*
 * Register REGNO of R in DWARF's numbering (libunwind's for this
 * architecture): false for a number that is not a general register.
 */
bool ma_arch_dwarf_reg(const struct user_regs_struct *r, int regno, uint64_t *val);
/* The thread pointer (x86-64: fs base): static TLS blocks are found from it. */
uint64_t ma_arch_thread_pointer(const struct user_regs_struct *r);
uint64_t ma_arch_syscall_ret(const struct user_regs_struct *r);

/*
 * The return stub, written into slack bytes that no thread ever executes
 * (after the end of an executable segment, see target.h), MA_STUB_REGION
 * bytes: code, then slots.  A call returns into it; it moves the return
 * value to the first argument register and makes a getpid syscall, where
 * the tracer stops the thread (syscall-entry stop at MA_STUB_MARKER_END).
 * Every syscall memattach issues runs at that same `syscall` instruction.
 * If the tracer died (or let go: the usual way out), the syscall just
 * runs and the code after it restores the thread by itself from the
 * state area on the thread's own stack (below its red zone, where a
 * signal frame would go), a signal frame: it first asks the kernel
 * (rt_sigpending, rt_sigaction) whether a signal waiting for the thread
 * would have ended the syscall it was stopped in with EINTR rather than
 * a restart, and resumes it that way; then rt_sigreturn puts registers,
 * xstate and signal mask back at once (after sigaltstack has read the
 * alternate stack into the frame).  A restart through restart_syscall,
 * or a filter forbidding rt_sigreturn, ends instead by rt_sigprocmask,
 * xrstor and popping the registers.  It writes only into the state area
 * and the word below the red zone (the stub's page is not writable).
 *
 * The way in has a trap of its own (ma_arch_trap_regs): registers and
 * signal mask are two ptrace requests, and a memattach that dies between
 * them must leave neither a handler run in our code that cost the
 * stopped syscall its EINTR, nor a thread waiting with its signals
 * blocked.
 */
/* The offsets MA_STUB_SYSCALL ... MA_STUB_REGION: the architecture header. */

/* Size of the state area for an xstate image of XLEN bytes. */
size_t ma_arch_state_area_size(size_t xlen);
/* Where the state area goes: below SAVED's red zone, 64-byte aligned. */
uint64_t ma_arch_state_area_addr(const struct user_regs_struct *saved, size_t xlen);
/* The state area image restoring RESUME, XS and SIGMASK (BLOCK: what the trap blocks). */
void ma_arch_build_area(unsigned char *area, uint64_t area_addr, const struct user_regs_struct *resume,
			const struct ma_cpu_state *xs, uint64_t sigmask, uint64_t block);
/*
 * The first registers a borrowed thread gets, before its signals are
 * blocked: on its way out of the stop the kernel's own signal code acts
 * on them as on the syscall it was stopped in (XS->regs, resumed as
 * RESUME says): a handler that would have ended that syscall with EINTR
 * runs and the stub resumes the thread with EINTR; otherwise the kernel
 * "restarts" into rt_sigprocmask(SIG_BLOCK, the area's block set) in the
 * stub, which then restores the thread.  A living memattach blocks the
 * signals with ptrace next and sets the registers of its first syscall,
 * so the trap never runs.
 */
void ma_arch_trap_regs(const struct ma_cpu_state *xs, const struct user_regs_struct *resume,
		       uint64_t stub_addr, uint64_t area_addr, struct user_regs_struct *out);
/*
 * What the stub's restore path may do (a seccomp filter may forbid it):
 * MAY_ASK, ask which signals wait and their handlers (else the restart
 * stays as RESUME has it); BY_SIGRETURN, end in rt_sigreturn (else pop);
 * READ_ALTSTACK, read the alternate stack into the frame first (else
 * rt_sigreturn leaves it as it is).
 */
struct ma_stub_opts {
	bool may_ask, by_sigreturn, read_altstack;
};
/*
 * Build the stub (MA_STUB_REGION bytes, for address STUB_ADDR, restoring
 * from the area at AREA_ADDR and jumping to RESUME's ip, or with EINTR
 * when a waiting signal's handler would have had it: XS->regs are the
 * registers as stopped).  Returns the code length (<= MA_STUB_SLOT_RSP).
 */
size_t ma_arch_build_stub(unsigned char *code, uint64_t stub_addr, uint64_t area_addr,
			  const struct user_regs_struct *resume, const struct ma_cpu_state *xs,
			  const struct ma_stub_opts *o);
/*
 * Does the stub's restart of RESUME pop rather than rt_sigreturn (a
 * restart through restart_syscall, whose block rt_sigreturn discards)?
 */
bool ma_arch_stub_restore_pops(const struct ma_cpu_state *xs, const struct user_regs_struct *resume);
/*
 * Build the batch runner into CODE: batch(entries, n) calls each entry's
 * function with its six arguments and stores the result (struct
 * ma_batch_entry in remote.h).  One injected call then does many
 * mallctl calls: one stop of the thread instead of one per value.
 */
size_t ma_arch_build_batch(unsigned char *code);
/* Return value of the call, read at the stub marker. */
uint64_t ma_arch_stub_retval(const struct user_regs_struct *r);

/*
 * A write callback for malloc_stats_print(write_cb, cbopaque, opts):
 * void cb(void *opaque, const char *s) appends the NUL-terminated S to
 * the buffer described by opaque = { u64 cur, u64 end, u64 dropped }:
 * bytes go to *cur while cur < end, the rest are only counted in dropped
 * (so the caller can retry with a larger buffer).  Touches no stack and
 * calls nothing.  Writes the code into CODE (CAP bytes); returns its
 * length, or 0 if CAP is too small.
 */
#define MA_APPEND_CB_MAX (MA_STUB_REGION - MA_STUB_APPEND)
size_t ma_arch_build_append_cb(unsigned char *code, size_t cap);

/* Syscalls by number, as /proc/TID/syscall shows them. */
/* The name of syscall NR if it is one a thread waits in (NULL otherwise). */
const char *ma_arch_syscall_name(long nr);
/* epoll_wait or epoll_pwait (whose timeout memattach may shorten). */
bool ma_arch_is_epoll_wait(long nr);
/* Does syscall NR with arguments A (six) wait with a timeout? */
bool ma_arch_is_timed_wait(long nr, const unsigned long long *a);
/*
 * The descriptors syscall NR (arguments A) may block on as a socket, and
 * for each whether it waits to receive (1) or to send (2): how many (0-2).
 */
int ma_arch_socket_waits(long nr, const unsigned long long *a, int fd[2], int dir[2]);
/* Does a ptrace stop of a thread blocked in syscall NR end the syscall with EINTR (whatever its descriptor)? */
bool ma_arch_stop_ends_with_eintr(long nr);
/*
 * Would a ptrace stop of a thread blocked (interruptibly) in syscall NR,
 * arguments A, end it early with part of its work done (a short write)?
 */
bool ma_arch_stop_cuts_short(long nr, const unsigned long long *a);

/*
 * Inline detours (frag on jemalloc linked statically or under a prefix):
 * the plan for one function entry, made from its bytes and never written
 * here (attach/arch_x86_64_detour.c says how it stays safe while threads
 * run).  CODE holds the function's LEN bytes from ENTRY (its whole body:
 * a branch anywhere in it into the patch refuses the plan); NARGS how many
 * integer arguments the function takes (the prefix may not touch them);
 * FLAGS MA_DETOUR_MOVE_CALL if a direct call may run from the trampoline
 * (a C function, which no exception unwinds through);
 * TRAMP is where the trampoline will live, within 2 GiB of ENTRY, and
 * WRAPPER what the entry is to jump to.  The plan: write WRITE_LEN bytes
 * of PATCH at ENTRY + PATCH_OFF (over one instruction of PATCH_LEN bytes,
 * its first two inside one aligned 16-byte block: written as the .c says);
 * TRAMP_LEN bytes of TRAMP_CODE at TRAMP: the hop (HOP_LEN bytes: undo the
 * prefix from PREFIX_OFF, jump to WRAPPER), then ORIGINAL, which runs the
 * prefix and the replaced instruction and jumps back.  The wrapper calls
 * ORIGINAL for what the entry did.  False, with REASON, when no safe plan
 * exists.
 */
#define MA_DETOUR_TRAMP_MAX 256
#define MA_DETOUR_MOVE_CALL 1u
struct ma_detour_plan {
	uint64_t entry, tramp, original;
	unsigned prefix_off, patch_off, patch_len, write_len, hop_len, tramp_len;
	uint8_t patch[8];
	uint8_t tramp_code[MA_DETOUR_TRAMP_MAX];
	char reason[112];
};
bool ma_arch_detour_plan(const uint8_t *code, size_t len, uint64_t entry, unsigned nargs, unsigned flags,
			 uint64_t tramp, uint64_t wrapper, struct ma_detour_plan *p);

/*
 * The targets (up to MAX, into TO) of the jumps in the function CODE of
 * LEN bytes at ADDR that leave it: a tail call, whose callee runs as part
 * of it (glibc's pthread_join jumps to a hidden function that takes the
 * thread-stack lock).  Their count.
 */
size_t ma_arch_jumps_out(const uint8_t *code, size_t len, uint64_t addr, uint64_t *to, size_t max);

#endif
