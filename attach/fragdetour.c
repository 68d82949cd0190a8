/*
 * fragdetour.c - frag's inline detours for jemalloc linked statically or
 * under a prefix (no GOT slot to rewrite): each entry point's plan, from
 * the file's symbols and the target's own code bytes, and its trampoline
 * written into the agent's area.  The jumps themselves are written inside
 * the target by the agent (attach/agent/agent_detour.c), never from here.
 */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_abi.h"
#include "arch.h"
#include "elfsyms.h"
#include "fragctl.h"
#include "ma_error.h"
#include "target.h"

#define BODY_MAX (1 << 20) /* a function longer than this is not read whole */

struct entry {
	const char *sym;
	bool prefixed; /* the C API, under jemalloc's prefix; the operators never are */
	unsigned nargs;
};

static const struct entry entries[MA_AGENT_NENTRIES] = {
#define ENTRY(id, s, pre, kind, nargs) { s, pre, nargs },
	ENTRY_POINTS(ENTRY)
#undef ENTRY
};

enum {
#define ENTRY(id, s, pre, kind, nargs) ENTRY_##id,
	ENTRY_POINTS(ENTRY)
#undef ENTRY
};

/* The ELF file of the mapping holding jemalloc (T's je.object), opened safely. */
static int open_jemalloc_file(const struct ma_target *t, struct ma_elf *e)
{
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i], *first;
		int fd;

		if (!m->path || !t->je.object || strcmp(m->path, t->je.object) != 0)
			continue;
		first = ma_target_first_mapping(t, m);
		if ((fd = ma_target_open_mapped_file(t, first)) < 0)
			break;
		return ma_elf_open_fd(e, fd, first->path);
	}
	return ma_fail(MA_E_JEMALLOC, "cannot open the file holding jemalloc in process %d (%s)", t->pid,
		       t->je.object ? t->je.object : "unknown");
}

/*
 * Plan entry point I of T, its trampoline at TRAMP jumping to WRAPPER, and
 * write the trampoline: 0 with *PLAN, 1 if T has no such function, or
 * MA_E_* with the reason (every entry point T has must be detoured: one
 * missed would let samples outlive their objects, or miss allocations).
 */
static int plan_entry(const struct ma_target *t, struct ma_elf *e, int i, uint64_t tramp, uint64_t wrapper,
		      struct ma_detour_plan *plan)
{
	char name[96];
	const struct ma_elf_sym *s;
	uint8_t *code;
	uint64_t addr;
	int rc;

	snprintf(name, sizeof(name), "%s%s", entries[i].prefixed ? t->je.prefix : "", entries[i].sym);
	s = ma_elf_sym_by_name(e, name);
	if (!s || s->type != STT_FUNC)
		return 1;
	if (!s->size || s->size > BODY_MAX)
		return ma_fail(MA_E_JEMALLOC, "%s in process %d has no size in its symbol table: its body "
			       "cannot be checked for a detour", name, t->pid);
	addr = s->addr + t->je.bias;
	if (!(code = malloc(s->size)))
		return ma_fail(MA_E_NOMEM, "out of memory");
	rc = ma_mem_read(t->proc_pid, addr, code, s->size);
	if (!rc && !ma_arch_detour_plan(code, s->size, addr, entries[i].nargs,
					entries[i].prefixed ? MA_DETOUR_MOVE_CALL : 0, tramp, wrapper, plan))
		rc = ma_fail(MA_E_JEMALLOC, "%s in process %d cannot be detoured safely: %s", name, t->pid,
			     plan->reason);
	free(code);
	if (!rc)
		rc = ma_mem_write(t->proc_pid, tramp, plan->tramp_code, plan->tramp_len);
	return rc;
}

int ma_detour_prepare(const struct ma_target *t, const struct ma_agent_ctl *c, uint64_t *original,
		      struct ma_agent_patch *list, uint64_t *n)
{
	struct ma_elf e;
	int rc;

	*n = 0;
	if (!c->tramp_area || c->tramp_len < MA_AGENT_NENTRIES * MA_AGENT_TRAMP_STRIDE)
		return ma_fail(MA_E_INTERNAL, "the agent has no trampoline area");
	if ((rc = open_jemalloc_file(t, &e)))
		return rc;
	for (int i = 0; i < MA_AGENT_NENTRIES && !rc; i++) {
		struct ma_detour_plan plan;
		struct ma_agent_patch *p = &list[*n];

		rc = plan_entry(t, &e, i, c->tramp_area + (uint64_t)i * MA_AGENT_TRAMP_STRIDE, c->wrapper[i], &plan);
		if (rc == 1) {
			rc = 0;
			continue;
		}
		if (rc)
			break;
		p->at = plan.entry + plan.patch_off;
		if ((rc = ma_mem_read(t->proc_pid, p->at, p->before, MA_AGENT_PATCH_LEN)))
			break;
		memcpy(p->after, plan.patch, MA_AGENT_PATCH_LEN);
		original[i] = plan.original;
		++*n;
	}
	ma_elf_release(&e);
	if (!rc && (!original[ENTRY_malloc] || !original[ENTRY_free]))
		rc = ma_fail(MA_E_JEMALLOC, "no %smalloc or %sfree found in process %d's %s", t->je.prefix,
			     t->je.prefix, t->pid, t->je.object);
	return rc;
}
