/*
 * seccomp.c - run a thread's seccomp filters over the syscalls memattach is
 * about to make it execute, and refuse if any would not simply be allowed.
 *
 * The filters come from PTRACE_SECCOMP_GET_FILTER, which returns each
 * program as it was installed (before the kernel's own rewriting).  We check
 * a program with the kernel loader's rules (an installed filter passes them;
 * anything else is treated as KILL_PROCESS) and then interpret it.  Runtime
 * semantics follow the kernel on x86-64: a division by a zero X returns 0
 * (KILL_THREAD) and a shift by X uses only its low five bits.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <unistd.h>

#include <linux/audit.h>

#include "arch.h"
#include "ma_error.h"
#include "seccomp.h"

#define SC_DATA_SIZE ((uint32_t)sizeof(struct seccomp_data)) /* 64 bytes */
#define SC_MAX_FILTERS 8192 /* the kernel's 32768-instruction budget allows ~6500 */
#define ALL_SLOTS 0xffffu   /* one bit per scratch word, BPF_MEMWORDS == 16 */

/* ---- loader rules: what the kernel's seccomp accepts ---- */

/* The opcodes seccomp accepts (no MOD, no byte/half/indirect loads, no RET X). */
static bool opcode_allowed(uint16_t code)
{
	switch (code) {
	case BPF_LD | BPF_W | BPF_ABS:
	case BPF_LD | BPF_W | BPF_LEN:
	case BPF_LDX | BPF_W | BPF_LEN:
	case BPF_LD | BPF_IMM:
	case BPF_LDX | BPF_IMM:
	case BPF_LD | BPF_MEM:
	case BPF_LDX | BPF_MEM:
	case BPF_ST:
	case BPF_STX:
	case BPF_ALU | BPF_ADD | BPF_K: case BPF_ALU | BPF_ADD | BPF_X:
	case BPF_ALU | BPF_SUB | BPF_K: case BPF_ALU | BPF_SUB | BPF_X:
	case BPF_ALU | BPF_MUL | BPF_K: case BPF_ALU | BPF_MUL | BPF_X:
	case BPF_ALU | BPF_DIV | BPF_K: case BPF_ALU | BPF_DIV | BPF_X:
	case BPF_ALU | BPF_AND | BPF_K: case BPF_ALU | BPF_AND | BPF_X:
	case BPF_ALU | BPF_OR | BPF_K:  case BPF_ALU | BPF_OR | BPF_X:
	case BPF_ALU | BPF_XOR | BPF_K: case BPF_ALU | BPF_XOR | BPF_X:
	case BPF_ALU | BPF_LSH | BPF_K: case BPF_ALU | BPF_LSH | BPF_X:
	case BPF_ALU | BPF_RSH | BPF_K: case BPF_ALU | BPF_RSH | BPF_X:
	case BPF_ALU | BPF_NEG:
	case BPF_JMP | BPF_JA:
	case BPF_JMP | BPF_JEQ | BPF_K:  case BPF_JMP | BPF_JEQ | BPF_X:
	case BPF_JMP | BPF_JGT | BPF_K:  case BPF_JMP | BPF_JGT | BPF_X:
	case BPF_JMP | BPF_JGE | BPF_K:  case BPF_JMP | BPF_JGE | BPF_X:
	case BPF_JMP | BPF_JSET | BPF_K: case BPF_JMP | BPF_JSET | BPF_X:
	case BPF_RET | BPF_K:
	case BPF_RET | BPF_A:
	case BPF_MISC | BPF_TAX:
	case BPF_MISC | BPF_TXA:
		return true;
	}
	return false;
}

static bool is_mem_access(uint16_t code)
{
	return code == BPF_ST || code == BPF_STX || code == (BPF_LD | BPF_MEM) ||
	       code == (BPF_LDX | BPF_MEM);
}

/* Do the jump targets of the instruction at PC lie inside the program? */
static bool jump_in_program(const struct sock_filter *f, size_t pc, size_t len)
{
	size_t left = len - pc - 1; /* instructions after this one */

	if (f->code == (BPF_JMP | BPF_JA))
		return f->k < left;
	return f->jt < left && f->jf < left;
}

/* The operand rules of the instruction at PC (the opcode is already known good). */
static bool operand_ok(const struct sock_filter *f, size_t pc, size_t len)
{
	if (f->code == (BPF_LD | BPF_W | BPF_ABS))
		return f->k < SC_DATA_SIZE && (f->k & 3) == 0;
	if (is_mem_access(f->code))
		return f->k < BPF_MEMWORDS;
	if (f->code == (BPF_ALU | BPF_DIV | BPF_K))
		return f->k != 0;
	if (f->code == (BPF_ALU | BPF_LSH | BPF_K) || f->code == (BPF_ALU | BPF_RSH | BPF_K))
		return f->k < 32;
	if (BPF_CLASS(f->code) == BPF_JMP)
		return jump_in_program(f, pc, len);
	return true;
}

/* Record at each jump target which scratch words are written on the way there. */
static void flow_to_targets(const struct sock_filter *f, size_t pc, uint16_t written,
			    uint16_t *at)
{
	if (f->code == (BPF_JMP | BPF_JA)) {
		at[pc + 1 + f->k] &= written;
	} else {
		at[pc + 1 + f->jt] &= written;
		at[pc + 1 + f->jf] &= written;
	}
}

/*
 * Every scratch word read must have been written on every path to the read.
 * Like the kernel, the state before a RET flows on to the next instruction
 * (conservative), and unreachable instructions are checked too.
 */
static bool scratch_reads_ok(const struct sock_filter *prog, size_t len)
{
	uint16_t at[BPF_MAXINSNS];
	uint16_t written = 0;

	for (size_t pc = 0; pc < len; pc++)
		at[pc] = ALL_SLOTS;
	for (size_t pc = 0; pc < len; pc++) {
		const struct sock_filter *f = &prog[pc];

		written &= at[pc];
		if (f->code == BPF_ST || f->code == BPF_STX) {
			written |= (uint16_t)(1u << f->k);
		} else if (f->code == (BPF_LD | BPF_MEM) || f->code == (BPF_LDX | BPF_MEM)) {
			if (!(written & (1u << f->k)))
				return false;
		} else if (BPF_CLASS(f->code) == BPF_JMP) {
			flow_to_targets(f, pc, written, at);
			written = ALL_SLOTS; /* nothing falls through a jump */
		}
	}
	return true;
}

/* Would the kernel install this program as a seccomp filter? */
static bool program_valid(const struct sock_filter *prog, size_t len)
{
	if (!prog || len == 0 || len > BPF_MAXINSNS)
		return false;
	for (size_t pc = 0; pc < len; pc++)
		if (!opcode_allowed(prog[pc].code) || !operand_ok(&prog[pc], pc, len))
			return false;
	if (BPF_CLASS(prog[len - 1].code) != BPF_RET)
		return false;
	return scratch_reads_ok(prog, len);
}

/* ---- interpreter (for valid programs only) ---- */

struct bpf_machine {
	uint32_t a, x;
	uint32_t mem[BPF_MEMWORDS];
	uint32_t reads; /* bit W: word W of seccomp_data was loaded */
};

/* A native-endian 32-bit word of seccomp_data at OFF (checked: aligned, inside). */
static uint32_t data_word(const struct seccomp_data *d, uint32_t off)
{
	uint32_t w;

	memcpy(&w, (const unsigned char *)d + off, sizeof(w));
	return w;
}

static void exec_load(struct bpf_machine *m, const struct sock_filter *f,
		      const struct seccomp_data *d)
{
	uint32_t *reg = BPF_CLASS(f->code) == BPF_LD ? &m->a : &m->x;

	switch (BPF_MODE(f->code)) {
	case BPF_ABS:
		*reg = data_word(d, f->k);
		m->reads |= 1u << (f->k / 4);
		break;
	case BPF_IMM:
		*reg = f->k;
		break;
	case BPF_MEM:
		*reg = m->mem[f->k];
		break;
	case BPF_LEN:
		*reg = SC_DATA_SIZE;
		break;
	}
}

/* A = A op V; false on division by zero. */
static bool exec_alu(struct bpf_machine *m, uint16_t code, uint32_t v)
{
	switch (BPF_OP(code)) {
	case BPF_ADD: m->a += v; break;
	case BPF_SUB: m->a -= v; break;
	case BPF_MUL: m->a *= v; break;
	case BPF_DIV:
		if (v == 0)
			return false;
		m->a /= v;
		break;
	case BPF_AND: m->a &= v; break;
	case BPF_OR:  m->a |= v; break;
	case BPF_XOR: m->a ^= v; break;
	case BPF_LSH: m->a <<= (v & 31); break;
	case BPF_RSH: m->a >>= (v & 31); break;
	case BPF_NEG: m->a = 0u - m->a; break;
	}
	return true;
}

static bool jump_taken(uint16_t code, uint32_t a, uint32_t v)
{
	switch (BPF_OP(code)) {
	case BPF_JEQ: return a == v;
	case BPF_JGT: return a > v;
	case BPF_JGE: return a >= v;
	case BPF_JSET: return (a & v) != 0;
	}
	return false;
}

/* How many instructions to skip after the jump F (always forward). */
static uint32_t jump_offset(const struct bpf_machine *m, const struct sock_filter *f)
{
	uint32_t v = BPF_SRC(f->code) == BPF_X ? m->x : f->k;

	if (f->code == (BPF_JMP | BPF_JA))
		return f->k;
	return jump_taken(f->code, m->a, v) ? f->jt : f->jf;
}

/*
 * Execute the instruction at *PC and advance *PC.  Returns true when the
 * program has finished, with its return value in *RET.
 */
static bool exec_one(struct bpf_machine *m, const struct sock_filter *f, size_t *pc,
		     const struct seccomp_data *d, uint32_t *ret)
{
	*pc += 1;
	switch (BPF_CLASS(f->code)) {
	case BPF_LD:
	case BPF_LDX:
		exec_load(m, f, d);
		return false;
	case BPF_ST:
		m->mem[f->k] = m->a;
		return false;
	case BPF_STX:
		m->mem[f->k] = m->x;
		return false;
	case BPF_ALU:
		if (exec_alu(m, f->code, BPF_SRC(f->code) == BPF_X ? m->x : f->k))
			return false;
		*ret = 0; /* the kernel returns 0 (KILL_THREAD) on division by zero */
		return true;
	case BPF_JMP:
		*pc += jump_offset(m, f);
		return false;
	case BPF_RET:
		*ret = BPF_RVAL(f->code) == BPF_A ? m->a : f->k;
		return true;
	case BPF_MISC:
		if (BPF_MISCOP(f->code) == BPF_TAX)
			m->x = m->a;
		else
			m->a = m->x;
		return false;
	}
	*ret = SECCOMP_RET_KILL_PROCESS;
	return true;
}

uint32_t ma_seccomp_eval_reads(const struct sock_filter *prog, size_t len, const struct seccomp_data *d,
			       uint32_t *reads)
{
	struct bpf_machine m;
	uint32_t ret = SECCOMP_RET_KILL_PROCESS; /* unreachable: the last instruction is a RET */
	size_t pc = 0;

	if (!d || !program_valid(prog, len))
		return SECCOMP_RET_KILL_PROCESS;
	memset(&m, 0, sizeof(m));
	/* pc only grows, so this runs at most LEN instructions. */
	while (pc < len)
		if (exec_one(&m, &prog[pc], &pc, d, &ret))
			break;
	if (reads)
		*reads |= m.reads;
	return ret;
}

uint32_t ma_seccomp_eval(const struct sock_filter *prog, size_t len, const struct seccomp_data *d)
{
	return ma_seccomp_eval_reads(prog, len, d, NULL);
}

/* ---- actions ---- */

/* Kernel precedence: the action bits read as a signed number; lower is stronger. */
static int32_t action_rank(uint32_t ret)
{
	return (int32_t)(ret & SECCOMP_RET_ACTION_FULL); /* two's complement, as GCC defines it */
}

static bool action_lets_through(uint32_t ret)
{
	uint32_t action = ret & SECCOMP_RET_ACTION_FULL;

	return action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG;
}

static const char *action_name(uint32_t ret)
{
	switch (ret & SECCOMP_RET_ACTION_FULL) {
	case SECCOMP_RET_KILL_PROCESS: return "KILL_PROCESS";
	case SECCOMP_RET_KILL_THREAD:  return "KILL_THREAD";
	case SECCOMP_RET_TRAP:         return "TRAP";
	case SECCOMP_RET_ERRNO:        return "ERRNO";
	case SECCOMP_RET_USER_NOTIF:   return "USER_NOTIF";
	case SECCOMP_RET_TRACE:        return "TRACE";
	case SECCOMP_RET_LOG:          return "LOG";
	case SECCOMP_RET_ALLOW:        return "ALLOW";
	}
	return NULL;
}

/* "KILL_PROCESS", "ERRNO (errno 1)", "an unknown action 0x00010000 (kills the process)". */
static void describe_action(uint32_t ret, char *buf, size_t len)
{
	const char *name = action_name(ret);

	if (!name)
		snprintf(buf, len, "an unknown action 0x%08x (kills the process)",
			 ret & SECCOMP_RET_ACTION_FULL);
	else if ((ret & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO)
		snprintf(buf, len, "%s (errno %u)", name, ret & SECCOMP_RET_DATA);
	else
		snprintf(buf, len, "%s", name);
}

/* ---- reading a thread's filters ---- */

struct sc_filter {
	struct sock_filter *insns;
	size_t len;
};

struct sc_filters {
	struct sc_filter *f; /* f[0] is the most recently installed */
	size_t n;
};

static void free_filters(struct sc_filters *fs)
{
	for (size_t i = 0; i < fs->n; i++)
		free(fs->f[i].insns);
	free(fs->f);
	fs->f = NULL;
	fs->n = 0;
}

static const char *get_filter_hint(int err)
{
	switch (err) {
	case EACCES:
	case EPERM:
		return "memattach needs CAP_SYS_ADMIN and must not run under a seccomp filter itself";
	case EINVAL:
		return "kernel without CONFIG_CHECKPOINT_RESTORE, or the thread is not in filter mode";
	case EMEDIUMTYPE:
		return "one of the filters is not a classic BPF program";
	case ESRCH:
		return "the thread is not stopped under our ptrace";
	case EIO:
		return "kernel without PTRACE_SECCOMP_GET_FILTER";
	}
	return "unexpected error";
}

static int unreadable(pid_t tid, int err)
{
	return ma_fail(MA_E_SECCOMP,
		       "the seccomp filter of thread %d could not be read (PTRACE_SECCOMP_GET_FILTER: %s; %s); "
		       "memattach will not run calls in it",
		       (int)tid, strerror(err), get_filter_hint(err));
}

static long get_filter(pid_t tid, size_t index, struct sock_filter *buf)
{
	return ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)(uintptr_t)index, buf);
}

/* Fetch filter INDEX into *OUT; 1 (no message) past the oldest filter. */
static int fetch_filter(pid_t tid, size_t index, struct sc_filter *out)
{
	long n = get_filter(tid, index, NULL), got;

	if (n < 0)
		return errno == ENOENT && index > 0 ? 1 : unreadable(tid, errno);
	if (n == 0 || n > BPF_MAXINSNS)
		return ma_fail(MA_E_SECCOMP, "seccomp filter %zu of thread %d has %ld instructions; "
			       "memattach will not run calls in it", index, (int)tid, n);
	out->insns = calloc((size_t)n, sizeof(*out->insns));
	if (!out->insns)
		return ma_fail(MA_E_NOMEM, "out of memory reading seccomp filters");
	got = get_filter(tid, index, out->insns);
	if (got != n) {
		int err = got < 0 ? errno : EIO;

		free(out->insns);
		out->insns = NULL;
		return unreadable(tid, err);
	}
	out->len = (size_t)n;
	return 0;
}

static int fetch_filters(pid_t tid, struct sc_filters *fs)
{
	fs->f = NULL;
	fs->n = 0;
	for (size_t i = 0; i < SC_MAX_FILTERS; i++) {
		struct sc_filter one = { NULL, 0 };
		struct sc_filter *grown;
		int rc = fetch_filter(tid, i, &one);

		if (rc)
			return rc > 0 ? 0 : rc;
		grown = realloc(fs->f, (fs->n + 1) * sizeof(*fs->f));
		if (!grown) {
			free(one.insns);
			return ma_fail(MA_E_NOMEM, "out of memory reading seccomp filters");
		}
		fs->f = grown;
		fs->f[fs->n++] = one;
	}
	return ma_fail(MA_E_SECCOMP, "thread %d has more than %d seccomp filters; "
		       "memattach will not run calls in it", (int)tid, SC_MAX_FILTERS);
}

/* ---- verdicts ---- */

static void query_data(const struct ma_sc_query *q, struct seccomp_data *d)
{
	memset(d, 0, sizeof(*d));
	d->nr = q->nr;
	d->arch = MA_ARCH_AUDIT;
	d->instruction_pointer = q->ip;
	memcpy(d->args, q->args, sizeof(d->args));
}

/* Every filter runs; the strongest action wins, the newest filter on a tie.  *READS: as eval's. */
static uint32_t run_filters(const struct sc_filters *fs, const struct seccomp_data *d, uint32_t *reads)
{
	uint32_t ret = SECCOMP_RET_ALLOW;

	for (size_t i = 0; i < fs->n; i++) {
		uint32_t cur = ma_seccomp_eval_reads(fs->f[i].insns, fs->f[i].len, d, reads);

		if (action_rank(cur) < action_rank(ret))
			ret = cur;
	}
	return ret;
}

/*
 * The first argument of Q that is only a sample (MA_SC_UNCHOSEN_ADDR or
 * _FD) whose words the filters loaded (READS), or -1: the filter's answer
 * for the real value may differ.
 */
static int unchosen_arg_read(const struct ma_sc_query *q, uint32_t reads)
{
	for (int i = 0; i < 6; i++) {
		unsigned lo = (unsigned)(offsetof(struct seccomp_data, args) / 4) + 2u * (unsigned)i;

		if ((q->args[i] == MA_SC_UNCHOSEN_ADDR || q->args[i] == MA_SC_UNCHOSEN_FD) &&
		    (reads >> lo & 3u) != 0)
			return i;
	}
	return -1;
}

static int check_queries(pid_t tid, const struct sc_filters *fs, const struct ma_sc_query *q,
			 size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct seccomp_data d;
		uint32_t ret;
		char action[80], what[48];

		uint32_t reads = 0;
		int arg;

		query_data(&q[i], &d);
		ret = run_filters(fs, &d, &reads);
		if (action_lets_through(ret) && (arg = unchosen_arg_read(&q[i], reads)) >= 0) {
			if (!q[i].what)
				snprintf(what, sizeof(what), "syscall %d", q[i].nr);
			return ma_fail(MA_E_SECCOMP, "the seccomp filter of thread %d decides %s by its "
				       "argument %d, which memattach can only guess before the call (an "
				       "address or a descriptor chosen then): it will not run calls in it",
				       (int)tid, q[i].what ? q[i].what : what, arg + 1);
		}
		if (action_lets_through(ret))
			continue;
		describe_action(ret, action, sizeof(action));
		if (!q[i].what)
			snprintf(what, sizeof(what), "syscall %d", q[i].nr);
		return ma_fail(MA_E_SECCOMP, "the seccomp filter of thread %d would answer %s with %s; "
			       "memattach will not run calls in it",
			       (int)tid, q[i].what ? q[i].what : what, action);
	}
	return 0;
}

/* ---- public ---- */

long ma_seccomp_state_of(int status_fd)
{
	char buf[4096];
	const char *line;
	ssize_t n = pread(status_fd, buf, sizeof(buf) - 1, 0);
	int mode;
	long filters = 0;

	if (n <= 0)
		return -1;
	buf[n] = 0;
	if (!(line = strstr(buf, "\nSeccomp:")) || sscanf(line + 9, "%d", &mode) != 1 || mode < 0 ||
	    mode > 2)
		return -1;
	if ((line = strstr(buf, "\nSeccomp_filters:")) && sscanf(line + 17, "%ld", &filters) != 1)
		filters = 0;
	return (long)mode * 65536 + (filters & 0xffff);
}

long ma_seccomp_state(pid_t pid, pid_t tid)
{
	char path[64];
	long state;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	state = ma_seccomp_state_of(fd);
	close(fd);
	return state;
}

int ma_seccomp_mode_of(int status_fd)
{
	long state = ma_seccomp_state_of(status_fd);

	return state < 0 ? -1 : (int)(state / 65536);
}

pid_t ma_seccomp_thread_unlike(pid_t pid, long state, long *theirs)
{
	char path[64];
	struct dirent *d;
	pid_t found = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (!(dir = opendir(path)))
		return 0;
	while (!found && (d = readdir(dir))) {
		pid_t tid = (pid_t)atoi(d->d_name);
		long st = tid > 0 ? ma_seccomp_state(pid, tid) : -1;

		if (st >= 0 && st != state) {
			found = tid;
			*theirs = st;
		}
	}
	closedir(dir);
	return found;
}

int ma_seccomp_mode(pid_t pid, pid_t tid)
{
	long state = ma_seccomp_state(pid, tid);

	return state < 0 ? -1 : (int)(state / 65536);
}

int ma_seccomp_check(pid_t pid, pid_t tid, const struct ma_sc_query *q, size_t n)
{
	struct sc_filters fs;
	int mode = ma_seccomp_mode(pid, tid), rc;

	if (n && !q)
		return ma_fail(MA_E_INTERNAL, "ma_seccomp_check: no queries");
	if (mode == 0)
		return 0;
	if (mode < 0)
		return ma_fail(MA_E_SECCOMP, "could not read the seccomp mode of thread %d from "
			       "/proc/%d/task/%d/status; memattach will not run calls in it",
			       (int)tid, (int)pid, (int)tid);
	if (mode == 1)
		return ma_fail(MA_E_SECCOMP, "thread %d is in seccomp strict mode (only read, write, "
			       "exit and rt_sigreturn are allowed); memattach will not run calls in it",
			       (int)tid);
	rc = fetch_filters(tid, &fs);
	if (rc == 0)
		rc = check_queries(tid, &fs, q, n);
	free_filters(&fs);
	return rc;
}

/* Can a return of F answer USER_NOTIF (a constant that says so, or RET A: anything)? */
static bool filter_may_notify(const struct sc_filter *f)
{
	for (size_t i = 0; i < f->len; i++) {
		const struct sock_filter *in = &f->insns[i];

		if (BPF_CLASS(in->code) != BPF_RET)
			continue;
		if (BPF_RVAL(in->code) == BPF_A ||
		    (in->k & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_USER_NOTIF)
			return true;
	}
	return false;
}

int ma_seccomp_may_notify(pid_t pid, pid_t tid)
{
	struct sc_filters fs;
	int mode = ma_seccomp_mode(pid, tid), rc;

	if (mode == 0)
		return 0;
	if (mode != 2)
		return 1;
	if (fetch_filters(tid, &fs) != 0) {
		ma_err_clear();
		return 1;
	}
	rc = 0;
	for (size_t i = 0; i < fs.n && !rc; i++)
		rc = filter_may_notify(&fs.f[i]);
	free_filters(&fs);
	return rc;
}
