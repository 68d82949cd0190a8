/*
 * stubsite.c - where the return stub can live in a target: slack bytes no
 * thread ever executes.
 *
 * The page holding the end of an executable PT_LOAD segment is mapped
 * whole, so the bytes from the segment's end to the page's end are mapped
 * executable but belong to no segment: no code jumps there and no data
 * lives at those addresses.  Written through /proc/PID/mem they become a
 * private copy of the page (copy-on-write), never the file.
 */
#include <elf.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "ma_error.h"
#include "stubsite.h"
#include "target.h"

#define PAGE 4096ULL

_Static_assert(MA_STUB_REGION <= sizeof(((struct ma_stub_site *)0)->orig), "stub site buffer");

/* True if no PT_LOAD segment (at runtime) overlaps [lo, hi). */
static bool outside_segments(Elf *elf, size_t nph, uint64_t bias, uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (ph.p_vaddr + bias < hi && lo < ph.p_vaddr + bias + ph.p_memsz)
			return false;
	}
	return true;
}

static int read_original(const struct ma_target *t, struct ma_stub_site *site);

static void add_site(struct ma_target *t, uint64_t addr, size_t map_index, unsigned rank)
{
	struct ma_stub_site *site = &t->stub_sites[t->nstub_sites];

	if (t->nstub_sites >= MA_MAX_STUB_SITES)
		return;
	for (size_t i = 0; i < t->nstub_sites; i++)
		if (t->stub_sites[i].addr == addr)
			return;
	site->addr = addr;
	site->map_index = map_index;
	site->rank = rank;
	if (read_original(t, site) != 0) {
		ma_err_clear();
		return;
	}
	t->nstub_sites++;
}

/* The mapping index holding [lo, hi) whole, private and r-x; or -1. */
static long private_exec_mapping(const struct ma_target *t, uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i];

		if (m->start <= lo && hi <= m->end)
			return m->perms[2] == 'x' && m->perms[3] == 'p' && m->path &&
					       m->path[0] == '/'
				       ? (long)i
				       : -1;
	}
	return -1;
}

/*
 * How sure the object stays mapped: 0 the program itself (it has an
 * interpreter), 1 the dynamic loader, libc or an object marked NODELETE,
 * 2 any other (a library dlopen()ed at run time, which another thread may
 * dlclose() while a borrowed thread runs in the stub).
 */
static unsigned object_rank(Elf *elf, size_t nph)
{
	unsigned rank = 2;

	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		Elf_Scn *scn = NULL;

		if (!gelf_getphdr(elf, (int)i, &ph))
			continue;
		if (ph.p_type == PT_INTERP)
			return 0;
		if (ph.p_type != PT_DYNAMIC)
			continue;
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;
			Elf_Data *d;
			GElf_Dyn dyn;

			if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC || !(d = elf_getdata(scn, NULL)))
				continue;
			for (size_t k = 0; sh.sh_entsize && k < sh.sh_size / sh.sh_entsize && gelf_getdyn(d, (int)k, &dyn);
			     k++) {
				const char *name = dyn.d_tag == DT_SONAME ? elf_strptr(elf, sh.sh_link, dyn.d_un.d_val)
									   : NULL;

				if ((dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_NODELETE)) ||
				    (name && (strncmp(name, "libc.so", 7) == 0 || strncmp(name, "ld-linux", 8) == 0)))
					rank = 1;
			}
		}
	}
	return rank;
}

static void sites_in_object(struct ma_target *t, const struct ma_mapping *first, int fd)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	GElf_Ehdr eh;
	size_t nph;
	uint64_t base = ~0ULL, bias;

	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    elf_getphdrnum(elf, &nph) != 0)
		goto out;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && ph.p_vaddr < base)
			base = ph.p_vaddr & ~(PAGE - 1);
	}
	bias = eh.e_type == ET_DYN ? first->start - base : 0;
	unsigned rank = object_rank(elf, nph);
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		uint64_t end, lo, page_end;
		long mi;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		end = ph.p_vaddr + ph.p_memsz + bias;
		lo = (end + 15) & ~15ULL;
		page_end = (end + PAGE - 1) & ~(PAGE - 1);
		if (lo + MA_STUB_REGION > page_end)
			continue;
		mi = private_exec_mapping(t, lo, lo + MA_STUB_REGION);
		if (mi >= 0 && outside_segments(elf, nph, bias, lo, lo + MA_STUB_REGION))
			add_site(t, lo, (size_t)mi, rank);
	}
out:
	if (elf)
		elf_end(elf);
}

int ma_stubsite_find(struct ma_target *t)
{
	elf_version(EV_CURRENT);
	t->nstub_sites = 0;
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i], *first;
		int fd;

		if (m->perms[2] != 'x' || m->perms[3] != 'p' || !m->path || m->path[0] != '/')
			continue;
		first = ma_target_first_mapping(t, m);
		/* One look per object: its first executable mapping. */
		if (i > 0 && t->maps[i - 1].perms[2] == 'x' && ma_target_first_mapping(t, &t->maps[i - 1]) == first)
			continue;
		fd = ma_target_open_mapped_file(t, first);
		if (fd < 0) {
			ma_err_clear();
			continue;
		}
		sites_in_object(t, first, fd);
		close(fd);
	}
	/* The surest first: a session takes the first free site. */
	for (size_t i = 1; i < t->nstub_sites; i++)
		for (size_t j = i; j > 0 && t->stub_sites[j - 1].rank > t->stub_sites[j].rank; j--) {
			struct ma_stub_site tmp = t->stub_sites[j];

			t->stub_sites[j] = t->stub_sites[j - 1];
			t->stub_sites[j - 1] = tmp;
		}
	if (t->nstub_sites == 0)
		return ma_fail(MA_E_INTERNAL,
			       "process %d has no slack of %d bytes after an executable segment to "
			       "hold memattach's return stub",
			       t->pid, MA_STUB_REGION);
	return 0;
}

/* Read the file's bytes at site I (what the page held before any write of ours). */
static int read_original(const struct ma_target *t, struct ma_stub_site *site)
{
	const struct ma_mapping *m = &t->maps[site->map_index];
	uint64_t off = m->offset + (site->addr - m->start);
	int fd = ma_target_open_mapped_file(t, m);
	ssize_t n;

	if (fd < 0)
		return MA_E_IO;
	n = pread(fd, site->orig, MA_STUB_REGION, (off_t)off);
	close(fd);
	if (n < 0)
		return ma_fail(MA_E_IO, "cannot read %s", m->path);
	if ((size_t)n < MA_STUB_REGION) /* past the end of the file: the page is zero-filled */
		memset(site->orig + n, 0, MA_STUB_REGION - (size_t)n);
	return 0;
}

const unsigned char *ma_stubsite_original(const struct ma_target *t, size_t site)
{
	return t->stub_sites[site].orig;
}
