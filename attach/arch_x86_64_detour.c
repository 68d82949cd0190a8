/*
 * arch_x86_64_detour.c - plans an inline detour of one function entry on
 * x86-64: which whole instructions a jump written over the entry displaces,
 * and the trampoline that runs them elsewhere and jumps back.  It is the
 * planning half of frag's detours for jemalloc linked statically or under
 * a prefix (attach/agent/README.md, "What is not covered"); writing the
 * bytes, and doing so only while no thread is inside them, is not here.
 *
 * Instructions are decoded by capstone, never guessed: each displaced
 * instruction's length, whether it is a relative branch (and its target),
 * and where its RIP-relative displacement sits.  A plan is refused, with
 * the reason, rather than made unsafe:
 *   - a displaced call, return, syscall, interrupt or trap (moving a call
 *     would put a trampoline address on the stack as a return address);
 *   - a relative branch without a 32-bit form (jrcxz, loop, xbegin);
 *   - a function that leaves (unconditional jump) before 5 bytes;
 *   - a branch of the function's own body that lands inside the displaced
 *     bytes after their first (it would run the middle of the new jump);
 *   - a body that does not decode to its end (a branch could hide in it);
 *   - a displacement that does not reach from the trampoline (±2 GiB).
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

		if (*op == 0xe9 || *op == 0xeb) { /* jmp rel32 / rel8 */
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
 * No branch of the body (everything after the displaced bytes, then the
 * displaced instructions themselves) lands strictly inside the patch: only
 * its first byte is a place a jump may still arrive at.
 */
static bool no_branch_into_patch(csh h, const uint8_t *code, size_t len, struct ma_detour_plan *p)
{
	uint64_t lo = p->entry + p->patch_off, hi = lo + p->patch_len;
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

			if (t > lo && t < hi)
				ok = refuse(p, "a branch of the function lands inside the patched bytes (from +%llu)",
					    here - p->entry);
		}
	}
	cs_free(in, 1);
	return ok;
}

/* Displace whole instructions from the patch start until a jump fits. */
static bool displace(csh h, const uint8_t *code, size_t len, struct ma_detour_plan *p)
{
	const uint8_t *c = code + p->patch_off;
	size_t left = len - p->patch_off;
	uint64_t addr = p->entry + p->patch_off;
	cs_insn *in = cs_malloc(h);
	bool ok = true;

	if (!in)
		return refuse(p, "out of memory (decoding +%llu)", 0);
	while (ok && p->patch_len < JMP_REL32_LEN) {
		uint64_t here = addr;
		const uint8_t *op;
		bool leaves;

		if (!cs_disasm_iter(h, &c, &left, &addr, in)) {
			ok = refuse(p, "the entry does not decode (at +%llu)", here - p->entry);
			break;
		}
		if (unmovable(h, in)) {
			ok = refuse(p, "the first bytes hold an instruction that cannot move (+%llu)",
				    here - p->entry);
			break;
		}
		ok = relocate(h, in, p);
		p->patch_len += in->size;
		op = opcode_of(in);
		leaves = *op == 0xe9 || *op == 0xeb || (*op == 0xff && ((op[1] >> 3) & 7) == 4);
		if (ok && leaves && p->patch_len < JMP_REL32_LEN)
			ok = refuse(p, "the function leaves before its first 5 bytes end (+%llu)", here - p->entry);
	}
	cs_free(in, 1);
	return ok;
}

/* The trampoline's last instruction: back to the first byte not displaced. */
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

/* The bytes written over the entry: a jump to the hop, int3 over the rest. */
static bool make_patch(struct ma_detour_plan *p)
{
	uint64_t from = p->entry + p->patch_off + JMP_REL32_LEN;
	int64_t rel = (int64_t)(p->tramp - from);

	if (!fits_rel32(rel))
		return refuse(p, "the trampoline is out of reach of the function (%llu bytes away)",
			      (unsigned long long)(rel < 0 ? -rel : rel));
	memset(p->patch, 0xcc, sizeof p->patch);
	p->patch[0] = 0xe9;
	put32(p->patch + 1, (int32_t)rel);
	return true;
}

bool ma_arch_detour_plan(const uint8_t *code, size_t len, uint64_t entry, uint64_t tramp,
			 uint64_t wrapper, struct ma_detour_plan *p)
{
	csh h;
	bool ok;

	memset(p, 0, sizeof *p);
	p->entry = entry;
	p->tramp = tramp;
	/* An endbr64 stays where it is: the entry remains a valid indirect-branch target. */
	p->patch_off = is_endbr64(code, len) ? ENDBR64_LEN : 0;
	if (len < p->patch_off + JMP_REL32_LEN)
		return refuse(p, "the function is shorter than a jump (%llu bytes)", len);
	if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return refuse(p, "the x86 decoder did not start (%llu)", 0);
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	/* The hop: jmp *0(%rip), then the wrapper's address (it may be anywhere). */
	p->tramp_code[0] = 0xff;
	p->tramp_code[1] = 0x25;
	put32(p->tramp_code + 2, 0);
	memcpy(p->tramp_code + 6, &wrapper, 8);
	p->tramp_len = MA_DETOUR_HOP_LEN;
	p->original = tramp + MA_DETOUR_HOP_LEN;
	ok = displace(h, code, len, p) && jump_back(p) && make_patch(p) &&
	     no_branch_into_patch(h, code, len, p);
	cs_close(&h);
	return ok;
}
