/*
 * arch_x86_64_detour.c - plans an inline detour of one function entry on
 * x86-64, made so that it can be written while the target's threads run.
 *
 * Only ONE instruction is ever replaced: the first instruction of at
 * least 5 bytes (a jmp rel32 fits in it), at point P.  No thread can be
 * inside the patched bytes except at their first: an instruction is never
 * interrupted half way, and a thread that lands on P -- arriving from the
 * entry, preempted there, or interrupted there by a signal -- runs either
 * P or the jump.  The writer (the agent, inside the target) makes it so
 * while threads run, as a JIT patches live code: P's first two bytes
 * become a jump to itself (one atomic store: they lie in one aligned
 * 16-byte block), then the jump's other three bytes are written (no
 * thread can reach them), then its first two; every thread serializes
 * between steps (membarrier SYNC_CORE).
 *
 * The instructions before P (the prefix) still run as they were: a
 * thread may be among them at any moment.  So the prefix must be undoable:
 * pushes of registers, `sub $n,%rsp`, and instructions whose only effects
 * are on the flags, on registers the calling convention lets a callee
 * clobber and that carry no argument of this entry, on registers the
 * prefix pushed before, or on the stack space it allocated.  P jumps to the hop, which undoes the prefix (pops
 * in reverse order, gives the stack back) and jumps to the wrapper: the
 * wrapper starts with exactly what the entry was called with.  The
 * wrapper calls ORIGINAL, which runs the prefix and P again, relocated,
 * and jumps back after P.
 *
 * Instructions are decoded by capstone, never guessed.  A plan is refused,
 * with the reason, rather than made unsafe:
 *   - a prefix instruction that cannot be undone (a branch, a call, a
 *     write to memory outside the space it allocated, a write to an
 *     argument or an unsaved register);
 *   - a P that cannot run elsewhere (return, syscall, interrupt,
 *     jrcxz/loop/xbegin; a call unless MA_DETOUR_MOVE_CALL);
 *   - a branch of the function's body into the prefix or into P (it would
 *     arrive at P in a state the hop does not undo);
 *   - a body that does not decode to its end (a branch could hide in it);
 *   - a displacement that does not reach from the trampoline (+-2 GiB).
 * Writing the bytes is the caller's (frag: the agent's compare-and-swap).
 */
#include <capstone/capstone.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"

enum { JMP_REL32_LEN = 5, ENDBR64_LEN = 4 };

static bool refuse(struct ma_detour_plan *p, const char *fmt, unsigned long long off)
{
	snprintf(p->reason, sizeof p->reason, fmt, off);
	return false;
}

static bool fits_rel32(int64_t v)
{
	return v >= INT32_MIN && v <= INT32_MAX;
}

static void put32(uint8_t *at, int32_t v)
{
	memcpy(at, &v, 4);
}

static bool is_endbr64(const uint8_t *c, size_t len)
{
	return len >= ENDBR64_LEN && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa;
}

static bool in_group(csh h, const cs_insn *in, uint8_t group)
{
	return cs_insn_group(h, in, group);
}

/* The opcode byte after the legacy prefixes and REX (branch hints and bnd included). */
static const uint8_t *opcode_of(const cs_insn *in)
{
	const uint8_t *b = in->bytes, *end = in->bytes + in->size;

	while (b < end && (*b == 0x66 || *b == 0x67 || *b == 0xf2 || *b == 0xf3 || *b == 0x2e ||
			   *b == 0x3e || *b == 0x26 || *b == 0x36 || *b == 0x64 || *b == 0x65 ||
			   *b == 0xf0 || (*b & 0xf0) == 0x40))
		b++;
	return b;
}

/* The absolute target of a relative branch (capstone resolves it). */
static uint64_t branch_target(const cs_insn *in)
{
	const cs_x86 *x = &in->detail->x86;

	for (int i = 0; i < x->op_count; i++)
		if (x->operands[i].type == X86_OP_IMM)
			return (uint64_t)x->operands[i].imm;
	return 0;
}

static bool rip_relative(const cs_insn *in)
{
	const cs_x86 *x = &in->detail->x86;

	for (int i = 0; i < x->op_count; i++)
		if (x->operands[i].type == X86_OP_MEM && x->operands[i].mem.base == X86_REG_RIP)
			return true;
	return false;
}

/* Instructions that must not run from a trampoline, whatever their bytes. */
static bool unmovable(csh h, const cs_insn *in)
{
	switch (in->id) {
	case X86_INS_SYSCALL: case X86_INS_SYSENTER: case X86_INS_INT: case X86_INS_INT3:
	case X86_INS_INTO: case X86_INS_UD2: case X86_INS_HLT: case X86_INS_JRCXZ:
	case X86_INS_JECXZ: case X86_INS_LOOP: case X86_INS_LOOPE: case X86_INS_LOOPNE:
	case X86_INS_XBEGIN:
		return true;
	default:
		return in_group(h, in, X86_GRP_CALL) || in_group(h, in, X86_GRP_RET) ||
		       in_group(h, in, X86_GRP_INT) || in_group(h, in, X86_GRP_IRET);
	}
}

/*
 * Append IN (at its original address) to the trampoline at p->tramp_len,
 * whose address is p->tramp + that offset: relative branches re-encoded with
 * a 32-bit displacement to the same target, RIP-relative operands given
 * the displacement that reaches the same address from there.
 */
static bool relocate(csh h, const cs_insn *in, struct ma_detour_plan *p)
{
	uint8_t *out = p->tramp_code + p->tramp_len;
	uint64_t at = p->tramp + p->tramp_len;
	const uint8_t *op = opcode_of(in);
	unsigned long long off = in->address - p->entry;

	if (p->tramp_len + 16 > sizeof p->tramp_code)
		return refuse(p, "the trampoline would be too long (at +%llu)", off);
	if (in_group(h, in, X86_GRP_BRANCH_RELATIVE)) {
		uint64_t target = branch_target(in);
		int64_t rel;

		if (*op == 0xe8) { /* call rel32 (P only, when allowed): returns into the trampoline */
			rel = (int64_t)(target - (at + 5));
			out[0] = 0xe8;
			put32(out + 1, (int32_t)rel);
			p->tramp_len += 5;
		} else if (*op == 0xe9 || *op == 0xeb) { /* jmp rel32 / rel8 */
			rel = (int64_t)(target - (at + 5));
			out[0] = 0xe9;
			put32(out + 1, (int32_t)rel);
			p->tramp_len += 5;
		} else if ((*op & 0xf0) == 0x70 || (op[0] == 0x0f && (op[1] & 0xf0) == 0x80)) {
			uint8_t cc = (*op == 0x0f ? op[1] : op[0]) & 0x0f;

			rel = (int64_t)(target - (at + 6));
			out[0] = 0x0f;
			out[1] = 0x80 | cc;
			put32(out + 2, (int32_t)rel);
			p->tramp_len += 6;
		} else {
			return refuse(p, "a relative branch without a 32-bit form at +%llu", off);
		}
		if (!fits_rel32(rel))
			return refuse(p, "a branch target out of reach of the trampoline (at +%llu)", off);
		return true;
	}
	memcpy(out, in->bytes, in->size);
	if (rip_relative(in)) {
		const cs_x86_encoding *e = &in->detail->x86.encoding;
		int64_t disp = in->detail->x86.disp;
		uint64_t abs = in->address + in->size + (uint64_t)disp;
		int64_t moved = (int64_t)(abs - (at + in->size));

		if (e->disp_offset == 0 || e->disp_size != 4)
			return refuse(p, "a RIP-relative operand without a 32-bit displacement at +%llu", off);
		if (!fits_rel32(moved))
			return refuse(p, "a RIP-relative operand out of reach of the trampoline (at +%llu)", off);
		put32(out + e->disp_offset, (int32_t)moved);
	}
	p->tramp_len += in->size;
	return true;
}

/*
 * No branch of the body (everything after P, then the prefix and P
 * themselves) lands in [entry + patch_off, P + its length).
 */
static bool no_branch_into_patch(csh h, const uint8_t *code, size_t len, struct ma_detour_plan *p)
{
	uint64_t lo = p->entry + p->prefix_off, hi = p->entry + p->patch_off + p->patch_len;
	const uint8_t *c = code;
	size_t left = len;
	uint64_t addr = p->entry;
	cs_insn *in = cs_malloc(h);
	bool ok = true;

	if (!in)
		return refuse(p, "out of memory (decoding +%llu)", 0);
	while (ok && left > 0) {
		uint64_t here = addr;

		if (!cs_disasm_iter(h, &c, &left, &addr, in)) {
			ok = refuse(p, "the function does not decode to its end (at +%llu)", here - p->entry);
			break;
		}
		if (in_group(h, in, X86_GRP_BRANCH_RELATIVE)) {
			uint64_t t = branch_target(in);

			if (t >= lo && t < hi)
				ok = refuse(p, "a branch of the function lands in the bytes before the patch "
					    "or in it (from +%llu)", here - p->entry);
		}
	}
	cs_free(in, 1);
	return ok;
}

/* The general register (0 rax ... 15 r15, in encoding order) REG is part of; -1 if none. */
static int gpr_of(x86_reg reg)
{
	static const x86_reg fam[16][5] = {
		{ X86_REG_RAX, X86_REG_EAX, X86_REG_AX, X86_REG_AL, X86_REG_AH },
		{ X86_REG_RCX, X86_REG_ECX, X86_REG_CX, X86_REG_CL, X86_REG_CH },
		{ X86_REG_RDX, X86_REG_EDX, X86_REG_DX, X86_REG_DL, X86_REG_DH },
		{ X86_REG_RBX, X86_REG_EBX, X86_REG_BX, X86_REG_BL, X86_REG_BH },
		{ X86_REG_RSP, X86_REG_ESP, X86_REG_SP, X86_REG_SPL, X86_REG_SPL },
		{ X86_REG_RBP, X86_REG_EBP, X86_REG_BP, X86_REG_BPL, X86_REG_BPL },
		{ X86_REG_RSI, X86_REG_ESI, X86_REG_SI, X86_REG_SIL, X86_REG_SIL },
		{ X86_REG_RDI, X86_REG_EDI, X86_REG_DI, X86_REG_DIL, X86_REG_DIL },
		{ X86_REG_R8, X86_REG_R8D, X86_REG_R8W, X86_REG_R8B, X86_REG_R8B },
		{ X86_REG_R9, X86_REG_R9D, X86_REG_R9W, X86_REG_R9B, X86_REG_R9B },
		{ X86_REG_R10, X86_REG_R10D, X86_REG_R10W, X86_REG_R10B, X86_REG_R10B },
		{ X86_REG_R11, X86_REG_R11D, X86_REG_R11W, X86_REG_R11B, X86_REG_R11B },
		{ X86_REG_R12, X86_REG_R12D, X86_REG_R12W, X86_REG_R12B, X86_REG_R12B },
		{ X86_REG_R13, X86_REG_R13D, X86_REG_R13W, X86_REG_R13B, X86_REG_R13B },
		{ X86_REG_R14, X86_REG_R14D, X86_REG_R14W, X86_REG_R14B, X86_REG_R14B },
		{ X86_REG_R15, X86_REG_R15D, X86_REG_R15W, X86_REG_R15B, X86_REG_R15B },
	};

	for (int i = 0; i < 16; i++)
		for (int k = 0; k < 5; k++)
			if (fam[i][k] == reg)
				return i;
	return -1;
}

enum { RAX = 0, RCX = 1, RDX = 2, RSP = 4, RSI = 6, RDI = 7, R8 = 8, R9 = 9, R10 = 10, R11 = 11 };

/* The registers a callee may clobber that do not carry one of the first NARGS integer arguments. */
static unsigned scratch_regs(unsigned nargs)
{
	static const int args[6] = { RDI, RSI, RDX, RCX, R8, R9 };
	unsigned m = 1u << RAX | 1u << RCX | 1u << RDX | 1u << RSI | 1u << RDI | 1u << R8 | 1u << R9 |
		     1u << R10 | 1u << R11;

	for (unsigned i = 0; i < nargs && i < 6; i++)
		m &= ~(1u << args[i]);
	return m;
}

/* What the prefix did, to be undone in reverse order. */
struct prefix {
	unsigned writable; /* registers the prefix may write: scratch, then each pushed one */
	int64_t frame; /* bytes at the stack's top the prefix allocated since its last push */
	unsigned nops;
	struct { bool pop; int reg; int32_t n; } ops[24];
};

static bool push_of(const cs_insn *in, int *reg)
{
	const cs_x86 *x = &in->detail->x86;

	if (in->id != X86_INS_PUSH || x->op_count != 1 || x->operands[0].type != X86_OP_REG)
		return false;
	*reg = gpr_of(x->operands[0].reg);
	return *reg >= 0 && *reg != RSP && in->detail->x86.operands[0].size == 8;
}

static bool stack_alloc_of(const cs_insn *in, int32_t *n)
{
	const cs_x86 *x = &in->detail->x86;

	if (in->id != X86_INS_SUB || x->op_count != 2 || x->operands[0].type != X86_OP_REG ||
	    x->operands[0].reg != X86_REG_RSP || x->operands[1].type != X86_OP_IMM ||
	    x->operands[1].imm < 0 || x->operands[1].imm > (1 << 20))
		return false;
	*n = (int32_t)x->operands[1].imm;
	return true;
}

/*
 * Is memory operand OP inside the stack space the prefix allocated (with
 * `sub $n,%rsp` after its last push)?  A write there dies with the frame
 * the hop gives back; saved registers and the caller's stack lie above.
 */
static bool in_frame(const cs_x86_op *op, const struct prefix *pf)
{
	return op->mem.base == X86_REG_RSP && op->mem.index == X86_REG_INVALID &&
	       op->mem.segment == X86_REG_INVALID && op->mem.disp >= 0 &&
	       op->mem.disp + op->size <= pf->frame;
}

/*
 * Can IN run in the prefix (before P), and be undone by the hop?  Records
 * its undo in PF.  Anything else -- branches, memory writes, writes to
 * argument or unsaved registers, the stack moved otherwise -- stops the
 * walk.
 */
static bool undoable(csh h, const cs_insn *in, struct prefix *pf)
{
	const cs_x86 *x = &in->detail->x86;
	cs_regs rd, wr;
	uint8_t nrd = 0, nwr = 0;
	int reg;
	int32_t n;

	if (pf->nops == sizeof pf->ops / sizeof pf->ops[0])
		return false;
	if (push_of(in, &reg)) {
		pf->writable |= 1u << reg;
		pf->frame = 0;
		pf->ops[pf->nops].pop = true;
		pf->ops[pf->nops++].reg = reg;
		return true;
	}
	if (stack_alloc_of(in, &n)) {
		pf->frame += n;
		pf->ops[pf->nops].pop = false;
		pf->ops[pf->nops++].n = n;
		return true;
	}
	if (unmovable(h, in) || in_group(h, in, X86_GRP_JUMP) || in_group(h, in, X86_GRP_BRANCH_RELATIVE) ||
	    x->prefix[0] == X86_PREFIX_LOCK || x->prefix[0] == X86_PREFIX_REP || x->prefix[0] == X86_PREFIX_REPNE)
		return false;
	for (int i = 0; i < x->op_count; i++)
		if (x->operands[i].type == X86_OP_MEM && (x->operands[i].access & CS_AC_WRITE) &&
		    !in_frame(&x->operands[i], pf))
			return false;
	if (cs_regs_access(h, in, rd, &nrd, wr, &nwr) != CS_ERR_OK)
		return false;
	for (int i = 0; i < nwr; i++) {
		if (wr[i] == X86_REG_EFLAGS)
			continue;
		reg = gpr_of((x86_reg)wr[i]);
		if (reg < 0 || reg == RSP || !(pf->writable & (1u << reg)))
			return false;
	}
	return true;
}

/* The hop: undo the prefix, then jmp *0(%rip) to the wrapper. */
static void make_hop(const struct prefix *pf, uint64_t wrapper, struct ma_detour_plan *p)
{
	uint8_t *o = p->tramp_code;

	for (unsigned i = pf->nops; i-- > 0;) {
		if (pf->ops[i].pop) {
			if (pf->ops[i].reg >= 8)
				*o++ = 0x41;
			*o++ = (uint8_t)(0x58 + (pf->ops[i].reg & 7));
		} else { /* lea n(%rsp),%rsp: the flags are left alone */
			*o++ = 0x48; *o++ = 0x8d; *o++ = 0xa4; *o++ = 0x24;
			put32(o, pf->ops[i].n);
			o += 4;
		}
	}
	*o++ = 0xff; *o++ = 0x25;
	put32(o, 0);
	o += 4;
	memcpy(o, &wrapper, 8);
	o += 8;
	p->hop_len = (unsigned)(o - p->tramp_code);
	p->tramp_len = p->hop_len;
	p->original = p->tramp + p->hop_len;
}

/*
 * Is IN, at ADDR, a P: 5 bytes or more, its first two in one aligned
 * 16-byte block (the writer stores those two atomically: a jump to
 * itself first, then the jump's opcode), able to run elsewhere?  A
 * direct call may move when FLAGS allow it (a C function: no exception
 * unwinds through the trampoline).
 */
static bool patch_point(csh h, const cs_insn *in, uint64_t addr, unsigned flags)
{
	bool call = in->id == X86_INS_CALL && *opcode_of(in) == 0xe8;

	return in->size >= JMP_REL32_LEN && (addr & 15) != 15 &&
	       (call ? (flags & MA_DETOUR_MOVE_CALL) != 0 : !unmovable(h, in));
}

/*
 * Walk from the entry (after endbr64) to P, every instruction before it
 * undoable; then lay out the trampoline: the hop, and ORIGINAL -- the
 * prefix and P relocated, and a jump back after P.
 */
static bool find_patch_point(csh h, const uint8_t *code, size_t len, unsigned nargs, unsigned flags,
			     uint64_t wrapper, struct ma_detour_plan *p)
{
	struct prefix pf = { .writable = scratch_regs(nargs) };
	const uint8_t *c = code + p->prefix_off;
	size_t left = len - p->prefix_off;
	uint64_t addr = p->entry + p->prefix_off;
	cs_insn *in = cs_malloc(h);
	size_t n_before = 0;
	bool found = false, ok = true;

	if (!in)
		return refuse(p, "out of memory (decoding +%llu)", 0);
	while (!found) {
		uint64_t here = addr;

		if (!cs_disasm_iter(h, &c, &left, &addr, in)) {
			ok = refuse(p, "the entry does not decode (at +%llu)", here - p->entry);
			break;
		}
		if (patch_point(h, in, here, flags)) {
			found = true;
			p->patch_off = (unsigned)(here - p->entry);
			p->patch_len = in->size;
		} else if (!undoable(h, in, &pf)) {
			ok = refuse(p, "no instruction of 5 bytes or more before one the detour could not "
				    "undo (at +%llu)", here - p->entry);
			break;
		}
		n_before++;
	}
	cs_free(in, 1);
	if (!ok)
		return false;
	make_hop(&pf, wrapper, p);
	/* ORIGINAL: the prefix and P again, relocated. */
	c = code + p->prefix_off;
	left = p->patch_off + p->patch_len - p->prefix_off;
	addr = p->entry + p->prefix_off;
	in = cs_malloc(h);
	if (!in)
		return refuse(p, "out of memory (decoding +%llu)", 0);
	for (size_t i = 0; ok && i < n_before && cs_disasm_iter(h, &c, &left, &addr, in); i++)
		ok = relocate(h, in, p);
	cs_free(in, 1);
	return ok;
}

/* The trampoline's last instruction: back to the first byte after P. */
static bool jump_back(struct ma_detour_plan *p)
{
	uint64_t at = p->tramp + p->tramp_len, to = p->entry + p->patch_off + p->patch_len;
	int64_t rel = (int64_t)(to - (at + JMP_REL32_LEN));

	if (!fits_rel32(rel))
		return refuse(p, "the trampoline is out of reach of the function (%llu bytes away)",
			      (unsigned long long)(rel < 0 ? -rel : rel));
	p->tramp_code[p->tramp_len] = 0xe9;
	put32(p->tramp_code + p->tramp_len + 1, (int32_t)rel);
	p->tramp_len += JMP_REL32_LEN;
	return true;
}

/* The bytes written at P: a jump to the hop; P's other bytes stay. */
static bool make_patch(struct ma_detour_plan *p)
{
	uint64_t from = p->entry + p->patch_off + JMP_REL32_LEN;
	int64_t rel = (int64_t)(p->tramp - from);

	if (!fits_rel32(rel))
		return refuse(p, "the trampoline is out of reach of the function (%llu bytes away)",
			      (unsigned long long)(rel < 0 ? -rel : rel));
	p->patch[0] = 0xe9;
	put32(p->patch + 1, (int32_t)rel);
	p->write_len = JMP_REL32_LEN;
	return true;
}

bool ma_arch_detour_plan(const uint8_t *code, size_t len, uint64_t entry, unsigned nargs, unsigned flags,
			 uint64_t tramp, uint64_t wrapper, struct ma_detour_plan *p)
{
	csh h;
	bool ok;

	memset(p, 0, sizeof *p);
	p->entry = entry;
	p->tramp = tramp;
	/* An endbr64 stays where it is: the entry remains a valid indirect-branch target. */
	p->prefix_off = is_endbr64(code, len) ? ENDBR64_LEN : 0;
	if (len < p->prefix_off + JMP_REL32_LEN)
		return refuse(p, "the function is shorter than a jump (%llu bytes)", len);
	if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return refuse(p, "the x86 decoder did not start (%llu)", 0);
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	ok = find_patch_point(h, code, len, nargs, flags, wrapper, p) && jump_back(p) && make_patch(p) &&
	     no_branch_into_patch(h, code, len, p);
	cs_close(&h);
	return ok;
}

size_t ma_arch_jumps_out(const uint8_t *code, size_t len, uint64_t addr, uint64_t *to, size_t max)
{
	const uint8_t *c = code;
	uint64_t at = addr;
	size_t left = len, n = 0;
	cs_insn *in;
	csh h;

	if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return 0;
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	if ((in = cs_malloc(h))) {
		while (n < max && cs_disasm_iter(h, &c, &left, &at, in)) {
			uint64_t target;

			/* A jump, not a call: the code jumped to runs in this function's frame. */
			if (!in_group(h, in, CS_GRP_JUMP) || in_group(h, in, CS_GRP_CALL))
				continue;
			target = branch_target(in);
			if (target && (target < addr || target >= addr + len))
				to[n++] = target;
		}
		cs_free(in, 1);
	}
	cs_close(&h);
	return n;
}
