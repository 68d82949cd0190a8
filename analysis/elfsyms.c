/*
 * elfsyms.c - load .symtab + .dynsym with libelf, sort once, look up fast.
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfsyms.h"
#include "input.h"
#include "ma_error.h"

static int cmp_sym_addr(const void *a, const void *b)
{
	const struct ma_elf_sym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	/* Among aliases prefer globals, then functions, then sized ones. */
	if ((x->bind == STB_LOCAL) != (y->bind == STB_LOCAL))
		return x->bind == STB_LOCAL ? 1 : -1;
	if ((x->type == STT_FUNC) != (y->type == STT_FUNC))
		return x->type == STT_FUNC ? -1 : 1;
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return strcmp(x->name, y->name);
}

static const struct ma_elf_sym *sort_base;

static int cmp_idx_name(const void *a, const void *b)
{
	const struct ma_elf_sym *x = &sort_base[*(const size_t *)a];
	const struct ma_elf_sym *y = &sort_base[*(const size_t *)b];
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	if ((x->bind == STB_LOCAL) != (y->bind == STB_LOCAL))
		return x->bind == STB_LOCAL ? 1 : -1;
	return 0;
}

static bool wanted(const GElf_Sym *s)
{
	int t = GELF_ST_TYPE(s->st_info);

	if (s->st_shndx == SHN_UNDEF || s->st_value == 0)
		return false;
	return t == STT_FUNC || t == STT_OBJECT || t == STT_GNU_IFUNC ||
	       (t == STT_NOTYPE && GELF_ST_BIND(s->st_info) != STB_LOCAL);
}

static int read_symtab(struct ma_elf *e, Elf_Scn *scn, GElf_Shdr *sh, size_t *cap)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0;
	const char *file = NULL;

	if (!data)
		return 0;
	for (size_t i = 1; i < n; i++) {
		GElf_Sym s;
		const char *name;

		if (!gelf_getsym(data, (int)i, &s))
			break;
		name = elf_strptr(e->elf, sh->sh_link, s.st_name);
		if (GELF_ST_TYPE(s.st_info) == STT_FILE) {
			file = name;
			continue;
		}
		if (!name || !*name || !wanted(&s))
			continue;
		if (e->nsyms == *cap) {
			size_t ncap = *cap ? *cap * 2 : 1024;
			struct ma_elf_sym *p = realloc(e->syms, ncap * sizeof(*p));

			if (!p)
				return ma_fail(MA_E_NOMEM, "out of memory reading symbols");
			e->syms = p;
			*cap = ncap;
		}
		e->syms[e->nsyms++] = (struct ma_elf_sym){
			.addr = s.st_value,
			.size = s.st_size,
			.name = name,
			.file = GELF_ST_BIND(s.st_info) == STB_LOCAL ? file : NULL,
			.type = GELF_ST_TYPE(s.st_info),
			.bind = GELF_ST_BIND(s.st_info),
		};
	}
	return 0;
}

/* Drop exact duplicates (same addr and name: .symtab repeats .dynsym). */
static void build_buckets(struct ma_elf *e);

static void dedup(struct ma_elf *e)
{
	size_t out = 0;

	for (size_t i = 0; i < e->nsyms; i++) {
		if (out && e->syms[out - 1].addr == e->syms[i].addr &&
		    strcmp(e->syms[out - 1].name, e->syms[i].name) == 0)
			continue;
		e->syms[out++] = e->syms[i];
	}
	e->nsyms = out;
}

/* A zero-size symbol extends to the next symbol at a higher address. */
static void fill_sizes(struct ma_elf *e)
{
	for (size_t i = 0; i < e->nsyms; i++) {
		if (e->syms[i].size)
			continue;
		for (size_t j = i + 1; j < e->nsyms; j++) {
			if (e->syms[j].addr > e->syms[i].addr) {
				e->syms[i].size = e->syms[j].addr - e->syms[i].addr;
				break;
			}
		}
	}
}

static void read_notes(struct ma_elf *e, Elf_Scn *scn)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t off = 0, name_off, desc_off;
	GElf_Nhdr nh;

	while (data && (off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
		    memcmp((char *)data->d_buf + name_off, "GNU", 4) == 0 &&
		    nh.n_descsz <= sizeof(e->build_id)) {
			memcpy(e->build_id, (char *)data->d_buf + desc_off, nh.n_descsz);
			e->build_id_len = nh.n_descsz;
		}
	}
}

static int read_segments(struct ma_elf *e)
{
	size_t phnum;

	if (elf_getphdrnum(e->elf, &phnum) != 0)
		return 0;
	e->segs = calloc(phnum ? phnum : 1, sizeof(*e->segs));
	if (!e->segs)
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(e->elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		e->segs[e->nsegs++] = (struct ma_elf_seg){
			ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz, ph.p_flags,
		};
	}
	return 0;
}

static int read_sections(struct ma_elf *e)
{
	size_t shstrndx, cap = 0;
	Elf_Scn *scn = NULL;
	int rc;

	if (elf_getshdrstrndx(e->elf, &shstrndx) != 0)
		return 0;
	while ((scn = elf_nextscn(e->elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh))
			continue;
		name = elf_strptr(e->elf, shstrndx, sh.sh_name);
		if (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) {
			if (sh.sh_type == SHT_SYMTAB)
				e->has_symtab = true;
			else
				e->has_dynsym = true;
			rc = read_symtab(e, scn, &sh, &cap);
			if (rc)
				return rc;
		} else if (sh.sh_type == SHT_NOTE) {
			read_notes(e, scn);
		} else if (name && strcmp(name, ".gnu_debuglink") == 0) {
			Elf_Data *d = elf_getdata(scn, NULL);

			if (d && d->d_size > 0 && memchr(d->d_buf, '\0', d->d_size)) {
				size_t crc_at = (strlen(d->d_buf) + 1 + 3) & ~(size_t)3;

				e->debuglink = d->d_buf;
				/* The debug file's CRC-32 follows the name, 4-byte aligned. */
				if (crc_at + 4 <= d->d_size) {
					memcpy(&e->debuglink_crc, (const char *)d->d_buf + crc_at, 4);
					e->has_debuglink_crc = true;
				}
			}
		}
	}
	return 0;
}

int ma_elf_open_fd(struct ma_elf *e, int fd, const char *what)
{
	GElf_Ehdr eh;
	int rc;

	memset(e, 0, sizeof(*e));
	e->fd = fd;
	elf_version(EV_CURRENT);
	e->elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e->elf || elf_kind(e->elf) != ELF_K_ELF || !gelf_getehdr(e->elf, &eh)) {
		ma_elf_release(e);
		return ma_fail(MA_E_FORMAT, "'%s' is not an ELF file", what);
	}
	e->type = eh.e_type;
	rc = read_segments(e);
	if (!rc)
		rc = read_sections(e);
	if (rc) {
		ma_elf_release(e);
		return rc;
	}
	qsort(e->syms, e->nsyms, sizeof(*e->syms), cmp_sym_addr);
	dedup(e);
	fill_sizes(e);
	e->addrs = malloc((e->nsyms ? e->nsyms : 1) * sizeof(uint64_t));
	e->ends = malloc((e->nsyms ? e->nsyms : 1) * sizeof(uint64_t));
	if (!e->addrs || !e->ends) {
		ma_elf_release(e);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < e->nsyms; i++) {
		e->addrs[i] = e->syms[i].addr;
		e->ends[i] = e->syms[i].addr + e->syms[i].size;
	}
	build_buckets(e);
	return 0;
}

/*
 * Buckets over the symbols' address span, about two symbols each, so that
 * an address lookup binary-searches a handful of addresses instead of all
 * of a big binary's (without them, ma_elf_sym_at is most of symbolizing).
 * Left out (plain binary search) if they cannot be had.
 */
static void build_buckets(struct ma_elf *e)
{
	uint64_t span;
	unsigned shift = 4;

	if (e->nsyms < 64)
		return;
	span = e->addrs[e->nsyms - 1] - e->addrs[0] + 1;
	while (shift < 40 && (span >> shift) > 2 * (uint64_t)e->nsyms)
		shift++;
	e->bucket_base = e->addrs[0];
	e->bucket_shift = shift;
	e->nbuckets = (size_t)(span >> shift) + 1;
	if (!(e->bucket = malloc((e->nbuckets + 1) * sizeof(uint32_t)))) {
		e->nbuckets = 0;
		return;
	}
	for (size_t b = 0, i = 0; b <= e->nbuckets; b++) {
		uint64_t start = e->bucket_base + ((uint64_t)b << shift);

		while (i < e->nsyms && e->addrs[i] < start)
			i++;
		e->bucket[b] = (uint32_t)i;
	}
}

/* The by-name index, built on the first lookup by name: symbolizing a
 * big binary never needs it, and sorting 100,000s of long names costs. */
static bool index_names(struct ma_elf *e)
{
	if (e->by_name)
		return true;
	if (!(e->by_name = malloc((e->nsyms ? e->nsyms : 1) * sizeof(size_t))))
		return false;
	for (size_t i = 0; i < e->nsyms; i++)
		e->by_name[i] = i;
	sort_base = e->syms;
	qsort(e->by_name, e->nsyms, sizeof(size_t), cmp_idx_name);
	return true;
}

int ma_elf_open(struct ma_elf *e, const char *path)
{
	/* Paths come from targets' maps and debug links: only a regular file is opened. */
	int fd = ma_open_regular(AT_FDCWD, path, false);

	if (fd < 0) {
		memset(e, 0, sizeof(*e));
		e->fd = -1;
		return ma_fail(MA_E_IO, "cannot open '%s': %s", path,
			       errno == EINVAL ? "not a regular file" : strerror(errno));
	}
	return ma_elf_open_fd(e, fd, path);
}

void ma_elf_release(struct ma_elf *e)
{
	if (e->elf)
		elf_end(e->elf);
	if (e->fd >= 0)
		close(e->fd);
	free(e->syms);
	free(e->by_name);
	free(e->addrs);
	free(e->ends);
	free(e->bucket);
	free(e->segs);
	memset(e, 0, sizeof(*e));
	e->fd = -1;
}

const struct ma_elf_sym *ma_elf_sym_by_name(struct ma_elf *e, const char *name)
{
	size_t lo = 0, hi = e->nsyms;

	if (!index_names(e))
		return NULL;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(e->syms[e->by_name[mid]].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < e->nsyms && strcmp(e->syms[e->by_name[lo]].name, name) == 0)
		return &e->syms[e->by_name[lo]];
	return NULL;
}

const struct ma_elf_sym *ma_elf_sym_at(const struct ma_elf *e, uint64_t vaddr)
{
	size_t lo = 0, hi = e->nsyms;

	/* Within the bucket of vaddr (and the symbol before it, lo - 1 below). */
	if (e->nbuckets && vaddr >= e->bucket_base) {
		size_t b = (size_t)((vaddr - e->bucket_base) >> e->bucket_shift);

		if (b < e->nbuckets) {
			lo = e->bucket[b];
			hi = e->bucket[b + 1];
		}
	}
	/* Last symbol with addr <= vaddr, then step back over aliases. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (e->addrs[mid] <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	lo--;
	while (lo > 0 && e->addrs[lo - 1] == e->addrs[lo])
		lo--;
	/* A small symbol may be nested after a larger one that covers vaddr. */
	for (size_t i = lo + 1; i-- > 0;) {
		if (vaddr >= e->addrs[i] && vaddr < e->ends[i])
			return &e->syms[i];
		if (i + 64 < lo)
			break;
	}
	return NULL;
}

int ma_elf_offset_to_vaddr(const struct ma_elf *e, uint64_t off, uint64_t *vaddr)
{
	for (size_t i = 0; i < e->nsegs; i++) {
		const struct ma_elf_seg *s = &e->segs[i];

		if (off >= s->offset && off < s->offset + (s->filesz ? s->filesz : 1)) {
			*vaddr = s->vaddr + (off - s->offset);
			return 0;
		}
	}
	return -1;
}

uint64_t ma_elf_base_vaddr(const struct ma_elf *e)
{
	uint64_t lo = UINT64_MAX;

	for (size_t i = 0; i < e->nsegs; i++)
		if (e->segs[i].vaddr < lo)
			lo = e->segs[i].vaddr;
	return lo == UINT64_MAX ? 0 : lo & ~(uint64_t)0xfff;
}

bool ma_elf_section_contains(const struct ma_elf *e, const char *section, const char *needle)
{
	size_t shstrndx, nlen = strlen(needle);
	Elf_Scn *scn = NULL;

	if (!e->elf || elf_getshdrstrndx(e->elf, &shstrndx) != 0)
		return false;
	while ((scn = elf_nextscn(e->elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *name;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(e->elf, shstrndx, sh.sh_name);
		if (!name || strcmp(name, section) != 0)
			continue;
		d = elf_getdata(scn, NULL);
		return d && d->d_buf && memmem(d->d_buf, d->d_size, needle, nlen) != NULL;
	}
	return false;
}

int ma_elf_tls_image(const struct ma_elf *e, unsigned char **image, size_t *len)
{
	size_t phnum, rawlen;
	const char *raw;

	*image = NULL;
	*len = 0;
	if (!e->elf || elf_getphdrnum(e->elf, &phnum) != 0 || !(raw = elf_rawfile(e->elf, &rawlen)))
		return 0;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(e->elf, (int)i, &ph) || ph.p_type != PT_TLS)
			continue;
		if (ph.p_filesz > ph.p_memsz || ph.p_offset > rawlen ||
		    ph.p_filesz > rawlen - ph.p_offset || ph.p_memsz > (1u << 24))
			return 0; /* malformed or absurd: treat as unknown */
		*image = calloc(1, ph.p_memsz ? ph.p_memsz : 1);
		if (!*image)
			return ma_fail(MA_E_NOMEM, "out of memory");
		memcpy(*image, raw + ph.p_offset, ph.p_filesz); /* .tdata; .tbss stays zero */
		*len = ph.p_memsz;
		return 0;
	}
	return 0;
}

bool ma_elf_find_reloc(const struct ma_elf *e, uint32_t type, uint64_t *vaddr)
{
	Elf_Scn *scn = NULL;

	if (!e->elf)
		return false;
	while ((scn = elf_nextscn(e->elf, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t k = 0; sh.sh_entsize && k < sh.sh_size / sh.sh_entsize; k++) {
			GElf_Rela r;

			if (gelf_getrela(d, (int)k, &r) && GELF_R_TYPE(r.r_info) == type &&
			    GELF_R_SYM(r.r_info) == 0 && r.r_addend == 0) {
				*vaddr = r.r_offset;
				return true;
			}
		}
	}
	return false;
}
