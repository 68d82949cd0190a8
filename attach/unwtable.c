/*
 * unwtable.c - unwind tables found in the target's memory (unwtable.h).
 */
#include <elf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "target.h"
#include "unwtable.h"

#define MAX_OBJECTS 128

struct uobject {
	uint64_t start, end; /* the executable range the table covers */
	bool usable;
	unw_dyn_info_t di;
};

static struct uobject objects[MAX_OBJECTS];
static size_t nobjects;
static unsigned long ndescribed;

unsigned long ma_unw_tables_described(void)
{
	return ndescribed;
}

void ma_unw_tables_reset(void)
{
	nobjects = 0;
}

static int peek(pid_t tid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_readv(tid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* The mapping of the object's first page (offset 0) for the exec mapping X: the nearest one below it. */
static const struct ma_mapping *object_head(const struct ma_target *t, const struct ma_mapping *x)
{
	const struct ma_mapping *best = NULL;

	if (!x->inode)
		return x->offset == 0 ? x : NULL; /* [vdso], a memfd: one mapping */
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i];

		if (m->inode == x->inode && m->offset == 0 && m->start <= x->start &&
		    (!m->path) == (!x->path) && (!m->path || strcmp(m->path, x->path) == 0) &&
		    (!best || m->start > best->start))
			best = m;
	}
	return best;
}

/* Read the object starting at HEAD's ELF and program headers; fill O from its .eh_frame_hdr. */
static void describe(pid_t tid, const struct ma_mapping *head, struct uobject *o)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph[64];
	uint64_t bias = 0, hdr = 0, lo = UINT64_MAX, hi = 0;
	bool have_bias = false;
	unsigned char h[12];
	uint32_t fde_count;

	ndescribed++;
	if (peek(tid, head->start, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_phnum == 0 || eh.e_phnum > 64 ||
	    peek(tid, head->start + eh.e_phoff, ph, eh.e_phnum * sizeof(Elf64_Phdr)))
		return;
	for (unsigned i = 0; i < eh.e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && !have_bias) {
			/* The first PT_LOAD maps the file's first page at HEAD. */
			bias = head->start - (ph[i].p_vaddr & ~(uint64_t)0xfff);
			have_bias = true;
		}
	if (!have_bias)
		return;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type == PT_GNU_EH_FRAME)
			hdr = bias + ph[i].p_vaddr;
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
			lo = bias + ph[i].p_vaddr < lo ? bias + ph[i].p_vaddr : lo;
			hi = bias + ph[i].p_vaddr + ph[i].p_memsz > hi ? bias + ph[i].p_vaddr + ph[i].p_memsz : hi;
		}
	}
	/*
	 * version 1; eh_frame_ptr any 4-byte encoding; fde_count udata4;
	 * table datarel|sdata4 (pairs of 4-byte offsets from the header):
	 * what every GNU linker writes.  Anything else: libunwind's way.
	 */
	if (!hdr || lo >= hi || peek(tid, hdr, h, sizeof(h)) || h[0] != 1 || (h[1] & 0x0f) != 0x0b ||
	    h[2] != 0x03 || h[3] != 0x3b)
		return;
	memcpy(&fde_count, h + 8, sizeof(fde_count));
	o->start = lo;
	o->end = hi;
	o->di.start_ip = lo;
	o->di.end_ip = hi;
	o->di.gp = 0;
	o->di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	o->di.u.rti.name_ptr = 0;
	o->di.u.rti.segbase = hdr;
	o->di.u.rti.table_len = fde_count * 8 / sizeof(unw_word_t);
	o->di.u.rti.table_data = hdr + 12;
	o->usable = fde_count > 0;
}

int ma_unw_table_for(const struct ma_target *t, pid_t tid, uint64_t ip, unw_dyn_info_t *di)
{
	const struct ma_mapping *x = NULL, *head;
	struct uobject *o;

	for (size_t i = 0; i < nobjects; i++)
		if (ip >= objects[i].start && ip < objects[i].end) {
			if (!objects[i].usable)
				return -1;
			*di = objects[i].di;
			return 0;
		}
	for (size_t i = 0; i < t->nmaps && !x; i++)
		if (t->maps[i].perms[2] == 'x' && ip >= t->maps[i].start && ip < t->maps[i].end)
			x = &t->maps[i];
	if (!x || !(head = object_head(t, x)) || nobjects == MAX_OBJECTS)
		return -1;
	o = &objects[nobjects];
	memset(o, 0, sizeof(*o));
	describe(tid, head, o);
	if (!o->usable || ip < o->start || ip >= o->end) {
		/* Remember the miss for this mapping, so it is not read again. */
		o->start = x->start;
		o->end = x->end;
		o->usable = false;
		nobjects++;
		return -1;
	}
	nobjects++;
	*di = o->di;
	return 0;
}
