/*
 * Unit test: the classic-BPF seccomp evaluator, and ma_seccomp_check against
 * live children that install real filters.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/audit.h>

#include "check.h"
#include "ma_error.h"
#include "seccomp.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define EVAL(prog, d) ma_seccomp_eval((prog), N(prog), &(d))
#define ACTION(r) ((r) & SECCOMP_RET_ACTION_FULL)
#define KILL SECCOMP_RET_KILL_PROCESS

/* seccomp_data offsets: a 64-bit argument is two 32-bit loads, low word first. */
#define OFF_NR 0
#define OFF_ARCH 4
#define OFF_IP_LO 8
#define OFF_IP_HI 12
#define ARG_LO(i) (16 + 8 * (i))
#define ARG_HI(i) (16 + 8 * (i) + 4)

#define LD_ABS(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define RET_A BPF_STMT(BPF_RET | BPF_A, 0)
#define JEQ(v, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (v), (t), (f))
#define ALU_K(op, v) BPF_STMT(BPF_ALU | (op) | BPF_K, (v))
#define ALU_X(op) BPF_STMT(BPF_ALU | (op) | BPF_X, 0)
#define LD_IMM(v) BPF_STMT(BPF_LD | BPF_IMM, (v))
#define LDX_IMM(v) BPF_STMT(BPF_LDX | BPF_IMM, (v))

static struct seccomp_data sd(int nr, uint64_t a0, uint64_t a1, uint64_t a2)
{
	struct seccomp_data d;

	memset(&d, 0, sizeof(d));
	d.nr = nr;
	d.arch = AUDIT_ARCH_X86_64;
	d.instruction_pointer = 0x7f0000001002ULL;
	d.args[0] = a0;
	d.args[1] = a1;
	d.args[2] = a2;
	return d;
}

/* ---- pure evaluator ---- */

static void test_layout(void)
{
	CHECK("seccomp_data is 64 bytes", sizeof(struct seccomp_data) == 64);
	CHECK("args[2] low word at 16+8*2", offsetof(struct seccomp_data, args[2]) == ARG_LO(2));
	CHECK("instruction_pointer at 8", offsetof(struct seccomp_data, instruction_pointer) == OFF_IP_LO);
}

static void test_allow_list(void)
{
	struct sock_filter p[] = {
		LD_ABS(OFF_NR),
		JEQ(SYS_getpid, 3, 0),
		JEQ(SYS_read, 2, 0),
		JEQ(SYS_write, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS),
		RET(SECCOMP_RET_ALLOW),
	};
	struct seccomp_data d = sd(SYS_getpid, 0, 0, 0);

	CHECK("allow list: getpid allowed", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d.nr = SYS_write;
	CHECK("allow list: write allowed", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d.nr = SYS_mprotect;
	CHECK("allow list: mprotect killed", EVAL(p, d) == KILL);
	d.nr = -1;
	CHECK("allow list: nr -1 killed", EVAL(p, d) == KILL);
}

static void test_arch(void)
{
	struct sock_filter p[] = {
		LD_ABS(OFF_ARCH),
		JEQ(AUDIT_ARCH_X86_64, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS),
		LD_ABS(OFF_NR),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1), /* x32 ABI */
		RET(SECCOMP_RET_ERRNO | ENOSYS),
		RET(SECCOMP_RET_ALLOW),
	};
	struct seccomp_data d = sd(SYS_getpid, 0, 0, 0);

	CHECK("arch: x86-64 allowed", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d.arch = AUDIT_ARCH_I386;
	CHECK("arch: i386 killed", EVAL(p, d) == KILL);
	d.arch = AUDIT_ARCH_X86_64;
	d.nr = 0x40000000 | SYS_getpid;
	CHECK("arch: x32 syscall gets ENOSYS", EVAL(p, d) == (SECCOMP_RET_ERRNO | ENOSYS));
	d.nr = -1; /* 0xffffffff >= 0x40000000 unsigned */
	CHECK("arch: nr -1 compares as 0xffffffff", EVAL(p, d) == (SECCOMP_RET_ERRNO | ENOSYS));
}

static void test_args(void)
{
	/* Kill mmap with PROT_EXEC; munmap's address must fit 32 bits; args[1] == 2^32+2. */
	struct sock_filter p[] = {
		LD_ABS(OFF_NR),
		JEQ(SYS_mmap, 0, 3),
		LD_ABS(ARG_LO(2)),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 11),
		RET(SECCOMP_RET_KILL_PROCESS),
		JEQ(SYS_munmap, 0, 3),
		LD_ABS(ARG_HI(0)),
		JEQ(0, 7, 0),
		RET(SECCOMP_RET_ERRNO | EINVAL),
		JEQ(SYS_mremap, 0, 5),
		LD_ABS(ARG_LO(1)),
		JEQ(2, 0, 2),
		LD_ABS(ARG_HI(1)),
		JEQ(1, 1, 0),
		RET(SECCOMP_RET_TRAP),
		RET(SECCOMP_RET_ALLOW),
	};
	struct seccomp_data d = sd(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE);

	CHECK("args: mmap rw allowed", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d.args[2] = PROT_READ | PROT_EXEC;
	CHECK("args: mmap rx killed", EVAL(p, d) == KILL);
	d.args[2] = (uint64_t)PROT_EXEC << 32;
	CHECK("args: PROT_EXEC in the high word is not the low word", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d = sd(SYS_munmap, 0xffff0000u, 4096, 0);
	CHECK("args: munmap below 4 GiB allowed", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d.args[0] = 0x100000000ULL;
	CHECK("args: munmap high word checked", EVAL(p, d) == (SECCOMP_RET_ERRNO | EINVAL));
	d = sd(SYS_mremap, 0, 0x100000002ULL, 0);
	CHECK("args: 64-bit equality match", EVAL(p, d) == SECCOMP_RET_ALLOW);
	d.args[1] = 2;
	CHECK("args: 64-bit equality, high word differs", EVAL(p, d) == SECCOMP_RET_TRAP);
	d.args[1] = 0x100000003ULL;
	CHECK("args: 64-bit equality, low word differs", EVAL(p, d) == SECCOMP_RET_TRAP);
}

static void test_ip(void)
{
	struct sock_filter p[] = {
		LD_ABS(OFF_IP_HI),
		JEQ(0x7f00, 0, 3),
		LD_ABS(OFF_IP_LO),
		JEQ(0x1002, 0, 1),
		RET(SECCOMP_RET_TRAP),
		RET(SECCOMP_RET_ALLOW),
	};
	struct seccomp_data d = sd(SYS_getpid, 0, 0, 0);

	CHECK("ip: matching instruction pointer trapped", EVAL(p, d) == SECCOMP_RET_TRAP);
	d.instruction_pointer += 0x100000000ULL;
	CHECK("ip: other high word allowed", EVAL(p, d) == SECCOMP_RET_ALLOW);
}

static void test_ret_a_and_data(void)
{
	struct sock_filter ret_a[] = { LD_ABS(OFF_NR), ALU_K(BPF_OR, SECCOMP_RET_ERRNO), RET_A };
	struct sock_filter errno_k[] = { RET(SECCOMP_RET_ERRNO | EPERM) };
	struct sock_filter allow_data[] = { RET(SECCOMP_RET_ALLOW | 7) };
	struct seccomp_data d = sd(13, 0, 0, 0);
	uint32_t r = EVAL(ret_a, d);

	CHECK("RET A: action from A", ACTION(r) == SECCOMP_RET_ERRNO);
	CHECK("RET A: data from A", (r & SECCOMP_RET_DATA) == 13);
	r = EVAL(errno_k, d);
	CHECK("ERRNO data bits", ACTION(r) == SECCOMP_RET_ERRNO && (r & SECCOMP_RET_DATA) == EPERM);
	CHECK("full 32 bits returned", EVAL(allow_data, d) == (SECCOMP_RET_ALLOW | 7));
}

static void test_jumps(void)
{
	struct sock_filter jset[] = {
		LD_ABS(ARG_LO(0)),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x10, 0, 1),
		RET(SECCOMP_RET_TRAP),
		LDX_IMM(0x300),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_X, 0, 0, 1),
		RET(SECCOMP_RET_ERRNO | 1),
		RET(SECCOMP_RET_ALLOW),
	};
	struct sock_filter cmp[] = {
		LD_IMM(0xffffffff),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 1, 1, 0), /* unsigned */
		RET(SECCOMP_RET_KILL_PROCESS),
		LDX_IMM(0xffffffff),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_X, 0, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_X, 0, 0, 1),
		RET(SECCOMP_RET_KILL_PROCESS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 1, 0),
		RET(SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_JMP | BPF_JA, 1),
		RET(SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_JMP | BPF_JA, 0),
		RET(SECCOMP_RET_ALLOW),
	};
	struct seccomp_data d = sd(0, 0x10, 0, 0);

	CHECK("JSET K: bit set", EVAL(jset, d) == SECCOMP_RET_TRAP);
	d.args[0] = 0x200;
	CHECK("JSET X: bit set", EVAL(jset, d) == (SECCOMP_RET_ERRNO | 1));
	d.args[0] = 0x1000;
	CHECK("JSET: no bit set", EVAL(jset, d) == SECCOMP_RET_ALLOW);
	CHECK("JGT/JGE/JEQ with K and X, JA", EVAL(cmp, d) == SECCOMP_RET_ALLOW);
}

static void test_scratch(void)
{
	struct sock_filter p[] = {
		LD_ABS(OFF_NR),
		BPF_STMT(BPF_ST, 3),  /* mem[3] = nr */
		LD_IMM(7),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_STX, 15), /* mem[15] = 7 */
		LD_IMM(0),
		LDX_IMM(0),
		BPF_STMT(BPF_LD | BPF_MEM, 3),
		BPF_STMT(BPF_LDX | BPF_MEM, 15),
		ALU_X(BPF_ADD),
		ALU_K(BPF_OR, SECCOMP_RET_ERRNO),
		RET_A,
	};
	struct sock_filter txa[] = {
		LDX_IMM(SECCOMP_RET_LOG),
		BPF_STMT(BPF_MISC | BPF_TXA, 0),
		RET_A,
	};
	struct seccomp_data d = sd(20, 0, 0, 0);

	CHECK("scratch memory: ST/STX/LD MEM/LDX MEM", EVAL(p, d) == (SECCOMP_RET_ERRNO | 27));
	CHECK("TXA", EVAL(txa, d) == SECCOMP_RET_LOG);
}

static void test_alu(void)
{
	struct sock_filter k_ops[] = {
		LD_IMM(100), ALU_K(BPF_SUB, 1), ALU_K(BPF_MUL, 3), ALU_K(BPF_DIV, 2),
		ALU_K(BPF_AND, 0xff), ALU_K(BPF_XOR, 0x0f), ALU_K(BPF_LSH, 4),
		ALU_K(BPF_RSH, 2), ALU_K(BPF_OR, 1), ALU_K(BPF_ADD, 0x10000), RET_A,
	};
	uint32_t want = ((((((100u - 1) * 3 / 2) & 0xff) ^ 0x0f) << 4) >> 2 | 1) + 0x10000;
	struct sock_filter x_ops[] = {
		LD_IMM(1000), LDX_IMM(7), ALU_X(BPF_ADD), ALU_X(BPF_SUB), ALU_X(BPF_MUL),
		ALU_X(BPF_DIV), LDX_IMM(0x3f0), ALU_X(BPF_AND), LDX_IMM(0x5000), ALU_X(BPF_OR),
		LDX_IMM(0x1001), ALU_X(BPF_XOR), LDX_IMM(3), ALU_X(BPF_LSH), LDX_IMM(1), ALU_X(BPF_RSH),
		RET_A,
	};
	uint32_t want_x = (((((((1000u + 7 - 7) * 7 / 7) & 0x3f0) | 0x5000) ^ 0x1001) << 3) >> 1);
	struct sock_filter neg[] = { LD_IMM(5), BPF_STMT(BPF_ALU | BPF_NEG, 0), RET_A };
	struct sock_filter shift33[] = { LD_IMM(1), LDX_IMM(33), ALU_X(BPF_LSH), RET_A };
	struct sock_filter wrap[] = { LD_IMM(0xffffffff), ALU_K(BPF_ADD, 2), ALU_K(BPF_MUL, 0x80000001), RET_A };
	struct sock_filter div0[] = { LD_IMM(SECCOMP_RET_ALLOW), LDX_IMM(0), ALU_X(BPF_DIV), RET_A };
	struct sock_filter len[] = {
		BPF_STMT(BPF_LDX | BPF_W | BPF_LEN, 0), BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
		ALU_X(BPF_ADD), RET_A,
	};
	struct seccomp_data d = sd(0, 0, 0, 0);

	CHECK("ALU with K", EVAL(k_ops, d) == want);
	CHECK("ALU with X", EVAL(x_ops, d) == want_x);
	CHECK("NEG", EVAL(neg, d) == (uint32_t)-5);
	CHECK("shift by X uses its low 5 bits (as the kernel)", EVAL(shift33, d) == 2);
	CHECK("32-bit wrap-around", EVAL(wrap, d) == 0x80000001u);
	CHECK("division by X == 0 returns 0 = KILL_THREAD (as the kernel)", EVAL(div0, d) == SECCOMP_RET_KILL_THREAD);
	CHECK("LD/LDX LEN is sizeof(seccomp_data)", EVAL(len, d) == 128);
}

static void test_invalid(void)
{
	struct sock_filter jt_past_end[] = { LD_ABS(OFF_NR), JEQ(1, 2, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter jf_past_end[] = { LD_ABS(OFF_NR), JEQ(1, 0, 1), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter ja_past_end[] = { BPF_STMT(BPF_JMP | BPF_JA, 1), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter ja_huge[] = { BPF_STMT(BPF_JMP | BPF_JA, 0xffffffff), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter bad_opcode[] = { BPF_STMT(0xffff, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter byte_load[] = { BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter ind_load[] = { BPF_STMT(BPF_LD | BPF_W | BPF_IND, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter ldx_abs[] = { BPF_STMT(BPF_LDX | BPF_W | BPF_ABS, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter mod[] = { LD_IMM(7), ALU_K(BPF_MOD, 3), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter ret_x[] = { BPF_STMT(BPF_RET | BPF_X, 0) };
	struct sock_filter misaligned[] = { LD_ABS(2), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter out_of_data[] = { LD_ABS(64), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter last_word[] = { LD_ABS(60), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter slot16[] = { BPF_STMT(BPF_ST, 16), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter uninit[] = { BPF_STMT(BPF_LD | BPF_MEM, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter one_path[] = {
		LD_ABS(OFF_NR), JEQ(1, 0, 1), BPF_STMT(BPF_ST, 2),
		BPF_STMT(BPF_LDX | BPF_MEM, 2), RET(SECCOMP_RET_ALLOW),
	};
	struct sock_filter both_paths[] = {
		LD_ABS(OFF_NR), JEQ(1, 0, 2), BPF_STMT(BPF_ST, 2), BPF_STMT(BPF_JMP | BPF_JA, 1),
		BPF_STMT(BPF_STX, 2), BPF_STMT(BPF_LDX | BPF_MEM, 2), RET(SECCOMP_RET_ALLOW),
	};
	struct sock_filter div_k0[] = { LD_IMM(1), ALU_K(BPF_DIV, 0), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter shift32[] = { LD_IMM(1), ALU_K(BPF_LSH, 32), RET(SECCOMP_RET_ALLOW) };
	struct sock_filter off_end[] = { LD_ABS(OFF_NR), JEQ(1, 0, 1), RET(SECCOMP_RET_ALLOW), LD_IMM(0) };
	struct sock_filter *big = calloc(BPF_MAXINSNS + 1, sizeof(*big));
	struct seccomp_data d = sd(1, 0, 0, 0);

	CHECK("invalid: conditional jump past the end", EVAL(jt_past_end, d) == KILL);
	CHECK("invalid: false branch past the end", EVAL(jf_past_end, d) == KILL);
	CHECK("invalid: JA past the end", EVAL(ja_past_end, d) == KILL);
	CHECK("invalid: JA 0xffffffff", EVAL(ja_huge, d) == KILL);
	CHECK("invalid: bad opcode", EVAL(bad_opcode, d) == KILL);
	CHECK("invalid: byte load", EVAL(byte_load, d) == KILL);
	CHECK("invalid: indirect load", EVAL(ind_load, d) == KILL);
	CHECK("invalid: LDX ABS (seccomp refuses it)", EVAL(ldx_abs, d) == KILL);
	CHECK("invalid: MOD (seccomp refuses it)", EVAL(mod, d) == KILL);
	CHECK("invalid: RET X", EVAL(ret_x, d) == KILL);
	CHECK("invalid: misaligned load", EVAL(misaligned, d) == KILL);
	CHECK("invalid: load past seccomp_data", EVAL(out_of_data, d) == KILL);
	CHECK("valid: load of the last word", EVAL(last_word, d) == SECCOMP_RET_ALLOW);
	CHECK("invalid: scratch slot 16", EVAL(slot16, d) == KILL);
	CHECK("invalid: read of unwritten scratch", EVAL(uninit, d) == KILL);
	CHECK("invalid: scratch written on one path only", EVAL(one_path, d) == KILL);
	CHECK("valid: scratch written on both paths", EVAL(both_paths, d) == SECCOMP_RET_ALLOW);
	CHECK("invalid: DIV by constant 0", EVAL(div_k0, d) == KILL);
	CHECK("invalid: shift by constant 32", EVAL(shift32, d) == KILL);
	CHECK("invalid: runs off the end (last insn not RET)", EVAL(off_end, d) == KILL);
	CHECK("invalid: empty program", ma_seccomp_eval(jt_past_end, 0, &d) == KILL);
	CHECK("invalid: NULL program", ma_seccomp_eval(NULL, 1, &d) == KILL);
	if (big) {
		big[BPF_MAXINSNS - 1] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
		CHECK("valid: 4096 instructions", ma_seccomp_eval(big, BPF_MAXINSNS, &d) == SECCOMP_RET_ALLOW);
		big[BPF_MAXINSNS] = (struct sock_filter)RET(SECCOMP_RET_ALLOW);
		CHECK("invalid: 4097 instructions", ma_seccomp_eval(big, BPF_MAXINSNS + 1, &d) == KILL);
		free(big);
	}
}

/* ---- live children ---- */

/* Filters are listed oldest first; the child installs them in this order. */
static struct sock_filter oldest[] = {
	LD_ABS(OFF_NR),
	JEQ(SYS_mprotect, 0, 1),
	RET(SECCOMP_RET_KILL_PROCESS),
	JEQ(SYS_madvise, 0, 1),
	RET(SECCOMP_RET_TRAP),
	RET(SECCOMP_RET_ALLOW),
};
static struct sock_filter middle[] = {
	LD_ABS(OFF_NR),
	JEQ(SYS_madvise, 0, 1),
	RET(SECCOMP_RET_ERRNO | EPERM),
	JEQ(SYS_mprotect, 1, 0),
	JEQ(SYS_getppid, 0, 1),
	RET(SECCOMP_RET_LOG),
	JEQ(SYS_sched_yield, 0, 1),
	RET(SECCOMP_RET_ERRNO | EAGAIN),
	RET(SECCOMP_RET_ALLOW),
};
static struct sock_filter newest[] = {
	LD_ABS(OFF_NR),
	JEQ(SYS_sched_yield, 0, 1),
	RET(SECCOMP_RET_TRACE),
	JEQ((uint32_t)-1, 0, 1),
	RET(SECCOMP_RET_ERRNO | EDOM),
	JEQ(SYS_mmap, 0, 3),
	LD_ABS(ARG_LO(2)),
	BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
	RET(SECCOMP_RET_KILL_THREAD),
	RET(SECCOMP_RET_ALLOW),
};

static int install(struct sock_filter *f, size_t n)
{
	struct sock_fprog fp = { (unsigned short)n, f };

	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp);
}

static int install_stack(void)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	if (install(oldest, N(oldest)) || install(middle, N(middle)) || install(newest, N(newest)))
		return -1;
	return 0;
}

enum child_kind { CHILD_PLAIN, CHILD_FILTERED, CHILD_STRICT, CHILD_THREADED };

static void *idle_thread(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

/* Child body: set up, report one byte ('k' ready, 'e' failed), then block. */
static void child_main(enum child_kind kind, int ready, int block)
{
	pthread_t th;
	char c = 'k';

	if (kind == CHILD_THREADED && pthread_create(&th, NULL, idle_thread, NULL))
		c = 'e';
	if ((kind == CHILD_FILTERED || kind == CHILD_THREADED) && install_stack())
		c = 'e';
	if (kind == CHILD_STRICT && prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT))
		c = 'e';
	if (write(ready, &c, 1) != 1)
		_exit(1);
	if (kind == CHILD_STRICT)
		for (;;)
			if (read(block, &c, 1) <= 0)
				syscall(SYS_exit, 0);
	for (;;)
		pause();
}

/* Fork a child of KIND and wait until it is set up; -1 on failure. */
static pid_t spawn(enum child_kind kind)
{
	int ready[2], block[2];
	char c = 0;
	pid_t pid;

	if (pipe(ready) || pipe(block))
		return -1;
	pid = fork();
	if (pid == 0)
		child_main(kind, ready[1], block[0]);
	if (pid > 0 && read(ready[0], &c, 1) != 1)
		c = 'e';
	close(ready[0]);
	close(ready[1]);
	close(block[0]);
	close(block[1]);
	if (pid > 0 && c != 'k') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

static bool seize_stop(pid_t tid)
{
	int st;

	if (ptrace(PTRACE_SEIZE, tid, 0, 0) || ptrace(PTRACE_INTERRUPT, tid, 0, 0))
		return false;
	return waitpid(tid, &st, __WALL) == tid && WIFSTOPPED(st);
}

static void finish(pid_t pid, pid_t traced)
{
	if (traced > 0)
		ptrace(PTRACE_DETACH, traced, 0, 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, __WALL);
}

static struct ma_sc_query query(int nr, uint64_t a2, const char *what)
{
	struct ma_sc_query q;

	memset(&q, 0, sizeof(q));
	q.nr = nr;
	q.args[2] = a2;
	q.ip = 0x7f0000001002ULL;
	q.what = what;
	return q;
}

/* ma_seccomp_check on one query: its return code, and its message in MSG. */
static int check_one(pid_t pid, pid_t tid, struct ma_sc_query q, const char **msg)
{
	int rc;

	ma_err_clear();
	rc = ma_seccomp_check(pid, tid, &q, 1);
	*msg = ma_errmsg();
	return rc;
}

static bool refused_with(pid_t pid, struct ma_sc_query q, const char *action)
{
	char want[160];
	const char *msg;

	snprintf(want, sizeof(want), "would answer %s with %s;", q.what, action);
	return check_one(pid, pid, q, &msg) == MA_E_SECCOMP && strstr(msg, want) != NULL;
}

static void test_live_verdicts(pid_t pid)
{
	struct ma_sc_query ok[] = {
		query(SYS_getpid, 0, "getpid"),
		query(SYS_getppid, 0, "getppid (LOG)"),
		query(SYS_mmap, PROT_READ | PROT_WRITE, "mmap rw"),
	};
	struct ma_sc_query mixed[] = { ok[0], query(SYS_mprotect, 0, "mprotect (batch)") };
	char thread[64];

	ma_err_clear();
	CHECK("live: getpid, getppid (LOG), mmap rw allowed", ma_seccomp_check(pid, pid, ok, N(ok)) == 0);
	CHECK("live: mprotect refused with KILL_PROCESS (beats LOG)",
	      refused_with(pid, query(SYS_mprotect, 0, "mprotect"), "KILL_PROCESS"));
	CHECK("live: madvise refused with TRAP (beats ERRNO)",
	      refused_with(pid, query(SYS_madvise, 0, "madvise"), "TRAP"));
	CHECK("live: sched_yield refused with ERRNO (beats TRACE)",
	      refused_with(pid, query(SYS_sched_yield, 0, "sched_yield"), "ERRNO (errno 11)"));
	CHECK("live: nr -1 refused with ERRNO",
	      refused_with(pid, query(-1, 0, "skipped syscall"), "ERRNO (errno 33)"));
	CHECK("live: mmap PROT_EXEC refused with KILL_THREAD",
	      refused_with(pid, query(SYS_mmap, PROT_READ | PROT_EXEC, "mmap rx"), "KILL_THREAD"));
	ma_err_clear();
	CHECK("live: a batch names the refused query",
	      ma_seccomp_check(pid, pid, mixed, N(mixed)) == MA_E_SECCOMP &&
		      strstr(ma_errmsg(), "mprotect (batch) with KILL_PROCESS") != NULL);
	snprintf(thread, sizeof(thread), "seccomp filter of thread %d would answer", (int)pid);
	CHECK("live: message names the thread", strstr(ma_errmsg(), thread) != NULL);
	CHECK("live: message says memattach refuses", strstr(ma_errmsg(), "memattach will not run calls in it") != NULL);
}

static void test_live_filtered(void)
{
	pid_t pid = spawn(CHILD_FILTERED);
	const char *msg = "";
	int rc;

	CHECK("live: filtered child started", pid > 0);
	if (pid <= 0)
		return;
	CHECK("live: ma_seccomp_mode is 2", ma_seccomp_mode(pid, pid) == 2);
	rc = check_one(pid, pid, query(SYS_getpid, 0, "getpid"), &msg);
	CHECK("live: not stopped under our ptrace: refused, not guessed",
	      rc == MA_E_SECCOMP && strstr(msg, "could not be read") && strstr(msg, "not stopped"));
	if (!seize_stop(pid)) {
		CHECK("live: seize and interrupt the filtered child", false);
		finish(pid, 0);
		return;
	}
	rc = check_one(pid, pid, query(SYS_getpid, 0, "getpid"), &msg);
	if (rc == MA_E_SECCOMP && strstr(msg, "could not be read")) {
		CHECK("live: unreadable filter refused", true);
		printf("SKIP live filter verdicts (%s)\n", msg);
	} else {
		test_live_verdicts(pid);
	}
	finish(pid, pid);
}

static void test_live_unfiltered(void)
{
	pid_t pid = spawn(CHILD_PLAIN);
	struct ma_sc_query q = query(SYS_mprotect, 0, "mprotect");

	CHECK("live: plain child started", pid > 0);
	if (pid <= 0)
		return;
	CHECK("live: no filter: mode 0", ma_seccomp_mode(pid, pid) == 0);
	CHECK("live: no filter: seize", seize_stop(pid));
	ma_err_clear();
	CHECK("live: no filter: everything allowed", ma_seccomp_check(pid, pid, &q, 1) == 0);
	finish(pid, pid);
}

static void test_live_strict(void)
{
	pid_t pid = spawn(CHILD_STRICT);
	struct ma_sc_query q = query(SYS_getpid, 0, "getpid");

	CHECK("live: strict child started", pid > 0);
	if (pid <= 0)
		return;
	CHECK("live: strict: mode 1", ma_seccomp_mode(pid, pid) == 1);
	CHECK("live: strict: seize", seize_stop(pid));
	ma_err_clear();
	CHECK("live: strict: refused",
	      ma_seccomp_check(pid, pid, &q, 1) == MA_E_SECCOMP && strstr(ma_errmsg(), "strict mode"));
	finish(pid, pid);
}

/* A thread of PID other than PID itself, or -1. */
static pid_t other_thread(pid_t pid)
{
	char path[64];
	struct dirent *e;
	pid_t tid = -1;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (atoi(e->d_name) > 0 && atoi(e->d_name) != pid)
			tid = atoi(e->d_name);
	closedir(dir);
	return tid;
}

/* Filters are per thread: the main thread installed them after creating the other. */
static void test_live_threads(void)
{
	pid_t pid = spawn(CHILD_THREADED), tid;
	struct ma_sc_query q = query(SYS_mprotect, 0, "mprotect");

	CHECK("live: threaded child started", pid > 0);
	if (pid <= 0)
		return;
	tid = other_thread(pid);
	CHECK("live: threads: main thread in filter mode", ma_seccomp_mode(pid, pid) == 2);
	CHECK("live: threads: other thread has no filter", tid > 0 && ma_seccomp_mode(pid, tid) == 0);
	if (tid > 0 && seize_stop(tid)) {
		ma_err_clear();
		CHECK("live: threads: other thread may run mprotect", ma_seccomp_check(pid, tid, &q, 1) == 0);
		finish(pid, tid);
		return;
	}
	CHECK("live: threads: seize the other thread", false);
	finish(pid, 0);
}

/* The kernel itself answers like our evaluator (syscalls that do not kill). */
static void test_kernel_agrees(void)
{
	pid_t pid = fork();
	int st = 0;

	if (pid == 0) {
		if (install_stack())
			_exit(10);
		if (syscall(SYS_sched_yield) != -1 || errno != EAGAIN)
			_exit(11); /* ERRNO beats TRACE */
		if (syscall(-1) != -1 || errno != EDOM)
			_exit(12); /* the filter runs with nr -1 */
		if (syscall(SYS_getppid) <= 0)
			_exit(13); /* LOG lets it through */
		_exit(0);
	}
	CHECK("kernel agrees: fork", pid > 0);
	if (pid > 0 && waitpid(pid, &st, 0) == pid)
		CHECK("kernel agrees: ERRNO over TRACE, nr -1 filtered, LOG allowed",
		      WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	alarm(60);
	test_layout();
	test_allow_list();
	test_arch();
	test_args();
	test_ip();
	test_ret_a_and_data();
	test_jumps();
	test_scratch();
	test_alu();
	test_invalid();
	CHECK("mode of a missing thread is -1", ma_seccomp_mode(getpid(), 0x7ffffff0) == -1);
	CHECK("own mode is 0", ma_seccomp_mode(getpid(), getpid()) == 0);
	test_live_filtered();
	test_live_unfiltered();
	test_live_strict();
	test_live_threads();
	test_kernel_agrees();
	CHECK_DONE();
}
