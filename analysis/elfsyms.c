/*
 * elfsyms.c - .symtab + .dynsym read in place with libelf: one pass for a
 * few lookups, or loaded and sorted once for many (elfsyms.h).
 */
#include <errno.h>
#include <endian.h>
#include <stdio.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfsyms.h"
#include "input.h"
#include "ma_error.h"

#if __BYTE_ORDER == __LITTLE_ENDIAN
#define MA_ELF_OUR_DATA ELFDATA2LSB
#else
#define MA_ELF_OUR_DATA ELFDATA2MSB
#endif

#define MAX_WORK 64
#define MAX_WALK_BACK 65536

static struct ma_elf_work work[MAX_WORK];
static size_t nwork;

size_t ma_elf_work_list(const struct ma_elf_work **list)
{
	*list = work;
	return nwork;
}

/* The record of file WHAT (made on its first open), or -1 when the list is full. */
static int work_of(const char *what)
{
	for (size_t i = 0; i < nwork; i++)
		if (strncmp(work[i].what, what, sizeof(work[i].what) - 1) == 0)
			return (int)i;
	if (nwork == MAX_WORK)
		return -1;
	snprintf(work[nwork].what, sizeof(work[nwork].what), "%s", what);
	return (int)nwork++;
}

/* Which of two aliases (same address) a lookup gives: < 0 X, > 0 Y. */
static int cmp_alias(const struct ma_elf_sym *x, const struct ma_elf_sym *y)
{
	/* Among aliases prefer globals, then functions, then sized ones. */
	if ((x->bind == STB_LOCAL) != (y->bind == STB_LOCAL))
		return x->bind == STB_LOCAL ? 1 : -1;
	if ((x->type == STT_FUNC) != (y->type == STT_FUNC))
		return x->type == STT_FUNC ? -1 : 1;
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_sym_addr(const void *a, const void *b)
{
	const struct ma_elf_sym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return cmp_alias(x, y);
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

/* Entry I of table T (64-bit files in place; others through libelf's conversion). */
static bool table_sym(const struct ma_elf *e, const struct ma_elf_table *t, size_t i, GElf_Sym *out)
{
	const Elf_Data *d = t->data;

	if (e->elf64) {
		const Elf64_Sym *s = (const Elf64_Sym *)d->d_buf + i;

		out->st_name = s->st_name;
		out->st_info = s->st_info;
		out->st_other = s->st_other;
		out->st_shndx = s->st_shndx;
		out->st_value = s->st_value;
		out->st_size = s->st_size;
		return true;
	}
	return gelf_getsym((Elf_Data *)d, (int)i, out) != NULL;
}

int ma_elf_scan(struct ma_elf *e, int (*visit)(void *ctx, const struct ma_elf_sym *s), void *ctx)
{
	if (e->work >= 0)
		work[e->work].scans++;
	for (size_t k = 0; k < e->ntables; k++) {
		const struct ma_elf_table *t = &e->tables[k];
		const char *file = NULL;

		if (e->work >= 0)
			work[e->work].entries += t->n;
		for (size_t i = 1; i < t->n; i++) {
			GElf_Sym s;
			const char *name;
			int rc;

			if (!table_sym(e, t, i, &s))
				break;
			/*
			 * Unnamed: offset 0, the table's empty string (linkers give
			 * every empty name that one).  Judged without reading the
			 * name: a pass for a few addresses then reads only the
			 * names of the symbols it keeps, not 100 MB of strings.
			 */
			if (s.st_name == 0 || s.st_name >= t->strsize)
				continue;
			name = t->str + s.st_name;
			if (GELF_ST_TYPE(s.st_info) == STT_FILE) {
				file = name;
				continue;
			}
			if (!wanted(&s))
				continue;
			rc = visit(ctx, &(struct ma_elf_sym){
						.addr = s.st_value,
						.size = s.st_size,
						.name = name,
						.file = GELF_ST_BIND(s.st_info) == STB_LOCAL ? file : NULL,
						.type = GELF_ST_TYPE(s.st_info),
						.bind = GELF_ST_BIND(s.st_info),
					});
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int collect(void *ctx, const struct ma_elf_sym *s)
{
	struct ma_elf *e = ctx;

	e->syms[e->nsyms++] = *s;
	return 0;
}

static void build_buckets(struct ma_elf *e);

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

/* Note table SH (section SCN) of E, to be read in place when asked (ma_elf_scan). */
static void add_table(struct ma_elf *e, Elf_Scn *scn, const GElf_Shdr *sh)
{
	Elf_Data *d = elf_getdata(scn, NULL), *sd;
	Elf_Scn *strscn = elf_getscn(e->elf, sh->sh_link);
	struct ma_elf_table *t = &e->tables[e->ntables];
	const char *last;
	size_t n;

	if (e->ntables == sizeof(e->tables) / sizeof(e->tables[0]) || !d || !d->d_buf || !strscn ||
	    !(sd = elf_getdata(strscn, NULL)) || !sd->d_buf || !sd->d_size || !sh->sh_entsize)
		return;
	n = sh->sh_size / sh->sh_entsize;
	if (e->elf64) {
		/* In place: libelf hands out the mapped bytes, aligned, in our byte order. */
		if (sh->sh_entsize != sizeof(Elf64_Sym) || d->d_type != ELF_T_SYM ||
		    ((uintptr_t)d->d_buf & (_Alignof(Elf64_Sym) - 1)))
			return;
		if (n > d->d_size / sizeof(Elf64_Sym))
			n = d->d_size / sizeof(Elf64_Sym);
	}
	/* Every name must end inside the table: cut it after its last NUL. */
	if (!(last = memrchr(sd->d_buf, '\0', sd->d_size)))
		return;
	t->data = d;
	t->n = n;
	t->str = sd->d_buf;
	t->strsize = (size_t)(last - (const char *)sd->d_buf) + 1;
	e->ntables++;
}

static void read_sections(struct ma_elf *e)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;

	if (elf_getshdrstrndx(e->elf, &shstrndx) != 0)
		return;
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
			add_table(e, scn, &sh);
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
}

int ma_elf_open_fd(struct ma_elf *e, int fd, const char *what)
{
	GElf_Ehdr eh;
	int rc;

	memset(e, 0, sizeof(*e));
	e->fd = fd;
	e->work = work_of(what);
	if (e->work >= 0)
		work[e->work].opens++;
	elf_version(EV_CURRENT);
	e->elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e->elf || elf_kind(e->elf) != ELF_K_ELF || !gelf_getehdr(e->elf, &eh)) {
		ma_elf_release(e);
		return ma_fail(MA_E_FORMAT, "'%s' is not an ELF file", what);
	}
	e->type = eh.e_type;
	e->elf64 = eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_ident[EI_DATA] == MA_ELF_OUR_DATA;
	rc = read_segments(e);
	if (rc) {
		ma_elf_release(e);
		return rc;
	}
	read_sections(e);
	return 0;
}

/* Drop exact duplicates (same addr and name: .symtab repeats .dynsym). */
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

static void unload(struct ma_elf *e)
{
	free(e->syms);
	free(e->by_name);
	free(e->addrs);
	free(e->ends);
	free(e->maxend);
	free(e->bucket);
	e->syms = NULL;
	e->by_name = NULL;
	e->addrs = e->ends = e->maxend = NULL;
	e->bucket = NULL;
	e->nsyms = e->nbuckets = 0;
	e->loaded = false;
}

int ma_elf_load_syms(struct ma_elf *e)
{
	size_t cap = 0;

	if (e->loaded)
		return 0;
	for (size_t k = 0; k < e->ntables; k++)
		cap += e->tables[k].n;
	e->nsyms = 0;
	if (!(e->syms = malloc((cap ? cap : 1) * sizeof(*e->syms))))
		return ma_fail(MA_E_NOMEM, "out of memory reading symbols");
	if (e->work >= 0)
		work[e->work].loads++;
	ma_elf_scan(e, collect, e);
	qsort(e->syms, e->nsyms, sizeof(*e->syms), cmp_sym_addr);
	dedup(e);
	fill_sizes(e);
	e->addrs = malloc((e->nsyms ? e->nsyms : 1) * sizeof(uint64_t));
	e->ends = malloc((e->nsyms ? e->nsyms : 1) * sizeof(uint64_t));
	e->maxend = malloc((e->nsyms ? e->nsyms : 1) * sizeof(uint64_t));
	if (!e->addrs || !e->ends || !e->maxend) {
		unload(e);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < e->nsyms; i++) {
		e->addrs[i] = e->syms[i].addr;
		e->ends[i] = e->syms[i].addr + e->syms[i].size;
		e->maxend[i] = i && e->maxend[i - 1] > e->ends[i] ? e->maxend[i - 1] : e->ends[i];
	}
	build_buckets(e);
	e->loaded = true;
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
	if (ma_elf_load_syms(e)) {
		ma_err_clear();
		return false;
	}
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
		e->work = -1;
		return ma_fail(MA_E_IO, "cannot open '%s': %s", path,
			       errno == EINVAL ? "not a regular file" : strerror(errno));
	}
	return ma_elf_open_fd(e, fd, path);
}

void ma_elf_release(struct ma_elf *e)
{
	unload(e);
	if (e->elf)
		elf_end(e->elf);
	if (e->fd >= 0)
		close(e->fd);
	free(e->segs);
	memset(e, 0, sizeof(*e));
	e->fd = -1;
	e->work = -1;
}

const struct ma_elf_sym *ma_elf_sym_by_name(struct ma_elf *e, const char *name)
{
	size_t lo = 0, hi;

	if (!index_names(e))
		return NULL;
	hi = e->nsyms;
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

/* The index of the first of E's symbols in [LO, HI) that starts after VADDR (HI if none). */
static size_t first_after(const struct ma_elf *e, size_t lo, size_t hi, uint64_t vaddr)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (e->addrs[mid] <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t ma_elf_next_sym_addr(struct ma_elf *e, uint64_t vaddr)
{
	size_t i;

	if (ma_elf_load_syms(e)) {
		ma_err_clear();
		return 0;
	}
	i = first_after(e, 0, e->nsyms, vaddr);
	return i < e->nsyms ? e->addrs[i] : 0;
}

const struct ma_elf_sym *ma_elf_sym_at(struct ma_elf *e, uint64_t vaddr)
{
	size_t lo = 0, hi, best = SIZE_MAX;

	if (ma_elf_load_syms(e)) {
		ma_err_clear();
		return NULL;
	}
	hi = e->nsyms;
	/* Within the bucket of vaddr (and the symbols before it, below). */
	if (e->nbuckets && vaddr >= e->bucket_base) {
		size_t b = (size_t)((vaddr - e->bucket_base) >> e->bucket_shift);

		if (b < e->nbuckets) {
			lo = e->bucket[b];
			hi = e->bucket[b + 1];
		}
	}
	/* The last symbol with addr <= vaddr... */
	lo = first_after(e, lo, hi, vaddr);
	/*
	 * ...then back to the first that covers vaddr (a small symbol may be
	 * nested after a larger one that covers it), and to the most preferred
	 * alias covering it at that address (aliases sort best first).  Before
	 * an i whose maxend is at or below vaddr, nothing covers it.
	 */
	for (size_t i = lo, steps = 0; i-- > 0 && e->maxend[i] > vaddr; steps++) {
		if (best != SIZE_MAX && e->addrs[i] != e->addrs[best])
			break;
		if (vaddr < e->ends[i])
			best = i;
		/* Behind a huge symbol (a hostile file's) every lookup would walk far back. */
		if (steps == MAX_WALK_BACK && best == SIZE_MAX)
			break;
	}
	return best == SIZE_MAX ? NULL : &e->syms[best];
}

/*
 * A pass over the tables for a few addresses (ma_elf_syms_at).  The sorted
 * queries q[] cut the address space into gaps: gap k holds the addresses
 * in (q[k-1], q[k]], gap nq those above q[nq-1].  Each symbol updates its
 * gap (the highest start there, the best zero-size alias at it, the lowest
 * start) and, if sized, the queries it covers; a zero-size symbol covers
 * up to the next start, so it can only be the answer for a query whose
 * highest start at or below it is its own -- found after the pass.
 */
struct at_pass {
	const uint64_t *q;
	size_t nq;
	/* qb[b]: the first query at or above q[0] + (b << shift), b <= nb: a symbol's gap at a glance */
	uint32_t *qb;
	size_t nb;
	unsigned shift;
	uint64_t *gap_hi, *gap_lo; /* highest and lowest start in the gap */
	bool *gap_any;
	struct ma_elf_sym *gap_zero; /* the best zero-size symbol at gap_hi (name NULL: none) */
	struct ma_elf_sym *best; /* per query: the best sized symbol covering it (name NULL: none) */
};

/* Is X (covering the same query) a better answer than Y?  Later start, then the alias order. */
static bool better(const struct ma_elf_sym *x, const struct ma_elf_sym *y)
{
	if (!y->name)
		return true;
	if (x->addr != y->addr)
		return x->addr > y->addr;
	return cmp_alias(x, y) < 0;
}

/* The first query at or above ADDR (nq if none). */
static size_t first_query(const struct at_pass *p, uint64_t addr)
{
	size_t lo = 0, hi = p->nq;

	if (!p->nq || addr <= p->q[0])
		return 0;
	if (addr > p->q[p->nq - 1])
		return p->nq;
	if (p->qb) {
		size_t b = (size_t)((addr - p->q[0]) >> p->shift);

		lo = p->qb[b];
		hi = p->qb[b + 1];
	}

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->q[mid] < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int at_visit(void *ctx, const struct ma_elf_sym *s)
{
	struct at_pass *p = ctx;
	size_t k = first_query(p, s->addr);

	if (!p->gap_any[k] || s->addr > p->gap_hi[k]) {
		p->gap_hi[k] = s->addr;
		p->gap_zero[k].name = NULL;
	}
	if (!p->gap_any[k] || s->addr < p->gap_lo[k])
		p->gap_lo[k] = s->addr;
	p->gap_any[k] = true;
	if (!s->size) {
		if (s->addr == p->gap_hi[k] && better(s, &p->gap_zero[k]))
			p->gap_zero[k] = *s;
		return 0;
	}
	for (size_t j = k; j < p->nq && p->q[j] - s->addr < s->size; j++)
		if (better(s, &p->best[j]))
			p->best[j] = *s;
	return 0;
}

/*
 * Buckets over the queries' span, about four per query: most symbols of a
 * big file are far from every query, and a binary search for each of
 * millions of them was most of the pass.  None (plain binary search) if
 * they cannot be had.
 */
static void bucket_queries(struct at_pass *p)
{
	uint64_t span;

	if (p->nq < 8 || p->nq > UINT32_MAX)
		return;
	span = p->q[p->nq - 1] - p->q[0];
	while (p->shift < 63 && (span >> p->shift) > 4 * (uint64_t)p->nq)
		p->shift++;
	p->nb = (size_t)(span >> p->shift) + 1;
	if (!(p->qb = malloc((p->nb + 1) * sizeof(*p->qb))))
		return;
	for (size_t b = 0, k = 0; b <= p->nb; b++) {
		uint64_t start = b < p->nb ? p->q[0] + ((uint64_t)b << p->shift) : UINT64_MAX;

		while (k < p->nq && p->q[k] < start)
			k++;
		p->qb[b] = (uint32_t)k;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* What the pass found for query k: the highest start at or below it, the lowest above it. */
struct at_near {
	const struct ma_elf_sym *zero; /* the best zero-size symbol at the highest start, or NULL */
	uint64_t next; /* the lowest start above the query */
	bool have_next;
};

/*
 * For each VADDRS[i]: OUT[i]/FOUND[i] as ma_elf_sym_at gives, and, if NEXT
 * is not NULL, the lowest symbol start above VADDRS[i] in NEXT[i] (0: none).
 */
static int syms_at_pass(struct ma_elf *e, const uint64_t *vaddrs, size_t n,
			struct ma_elf_sym *out, bool *found, uint64_t *next)
{
	struct at_pass p = { 0 };
	uint64_t *q = malloc((n ? n : 1) * sizeof(*q));
	struct at_near *near = NULL;
	int rc = 0;

	if (q) {
		memcpy(q, vaddrs, n * sizeof(*q));
		qsort(q, n, sizeof(*q), cmp_u64);
		for (size_t i = 0; i < n; i++)
			if (!p.nq || q[p.nq - 1] != q[i])
				q[p.nq++] = q[i];
	}
	p.q = q;
	p.gap_hi = calloc(p.nq + 1, sizeof(uint64_t));
	p.gap_lo = calloc(p.nq + 1, sizeof(uint64_t));
	p.gap_any = calloc(p.nq + 1, sizeof(bool));
	p.gap_zero = calloc(p.nq + 1, sizeof(struct ma_elf_sym));
	p.best = calloc(p.nq + 1, sizeof(struct ma_elf_sym));
	near = calloc(p.nq + 1, sizeof(*near));
	if (!q || !p.gap_hi || !p.gap_lo || !p.gap_any || !p.gap_zero || !p.best || !near) {
		rc = ma_fail(MA_E_NOMEM, "out of memory");
		goto out;
	}
	bucket_queries(&p);
	ma_elf_scan(e, at_visit, &p);
	/* The highest start at or below q[k] is in the last gap up to k that has one... */
	for (size_t k = 0, g = SIZE_MAX; k < p.nq; k++) {
		if (p.gap_any[k])
			g = k;
		near[k].zero = g != SIZE_MAX && p.gap_zero[g].name ? &p.gap_zero[g] : NULL;
	}
	/* ...and the lowest start above it in the first gap after k that has one. */
	for (size_t k = p.nq; k-- > 0;) {
		near[k].next = near[k + 1].next;
		near[k].have_next = near[k + 1].have_next;
		if (p.gap_any[k + 1]) {
			near[k].next = p.gap_lo[k + 1];
			near[k].have_next = true;
		}
	}
	for (size_t i = 0; i < n; i++) {
		size_t k = first_query(&p, vaddrs[i]);
		struct ma_elf_sym r = p.best[k];

		/* A zero-size symbol covers up to the next start, if there is one. */
		if (near[k].zero && near[k].have_next && better(near[k].zero, &r))
			r = *near[k].zero;
		if (r.name && !r.size)
			r.size = near[k].next - r.addr;
		found[i] = r.name != NULL;
		out[i] = r;
		if (next)
			next[i] = near[k].have_next ? near[k].next : 0;
	}
out:
	free(q);
	free(p.qb);
	free(p.gap_hi);
	free(p.gap_lo);
	free(p.gap_any);
	free(p.gap_zero);
	free(p.best);
	free(near);
	return rc;
}

int ma_elf_syms_at(struct ma_elf *e, const uint64_t *vaddrs, size_t n, struct ma_elf_sym *out,
		   bool *found)
{
	if (!e->loaded)
		return syms_at_pass(e, vaddrs, n, out, found, NULL);
	for (size_t i = 0; i < n; i++) {
		const struct ma_elf_sym *s = ma_elf_sym_at(e, vaddrs[i]);

		found[i] = s != NULL;
		if (s)
			out[i] = *s;
	}
	return 0;
}

struct named_pass {
	const char *const *names;
	size_t n;
	struct ma_elf_sym *out;
	bool *found;
	/* the first two bytes of each name: most symbols are passed over at a glance */
	uint64_t first2[65536 / 64];
};

static unsigned first2(const char *name)
{
	return (unsigned)(unsigned char)name[0] << 8 | (name[0] ? (unsigned char)name[1] : 0);
}

static int named_visit(void *ctx, const struct ma_elf_sym *s)
{
	struct named_pass *p = ctx;
	unsigned f = first2(s->name);

	if (!(p->first2[f / 64] >> (f % 64) & 1))
		return 0;
	for (size_t i = 0; i < p->n; i++) {
		if (strcmp(s->name, p->names[i]) != 0)
			continue;
		/* A global before a local; else the first found. */
		if (!p->found[i] || (p->out[i].bind == STB_LOCAL && s->bind != STB_LOCAL))
			p->out[i] = *s;
		p->found[i] = true;
	}
	return 0;
}

int ma_elf_syms_named(struct ma_elf *e, const char *const *names, size_t n,
		      struct ma_elf_sym *out, bool *found)
{
	struct named_pass *p = calloc(1, sizeof(*p));
	uint64_t *zero_at, *next;
	struct ma_elf_sym *sym;
	bool *ok;
	size_t nz = 0;
	int rc;

	memset(found, 0, n * sizeof(*found));
	if (!p)
		return ma_fail(MA_E_NOMEM, "out of memory");
	if (e->loaded || e->by_name) {
		free(p);
		for (size_t i = 0; i < n; i++) {
			const struct ma_elf_sym *s = ma_elf_sym_by_name(e, names[i]);

			found[i] = s != NULL;
			if (s)
				out[i] = *s;
		}
		return 0;
	}
	*p = (struct named_pass){ .names = names, .n = n, .out = out, .found = found };
	for (size_t i = 0; i < n; i++)
		p->first2[first2(names[i]) / 64] |= 1ULL << (first2(names[i]) % 64);
	ma_elf_scan(e, named_visit, p);
	free(p);
	/* Sizes as a loaded table has them: a zero-size symbol up to the next start. */
	zero_at = malloc((n ? n : 1) * sizeof(*zero_at));
	next = malloc((n ? n : 1) * sizeof(*next));
	sym = malloc((n ? n : 1) * sizeof(*sym));
	ok = malloc((n ? n : 1) * sizeof(*ok));
	if (!zero_at || !next || !sym || !ok) {
		rc = ma_fail(MA_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (found[i] && !out[i].size)
			zero_at[nz++] = out[i].addr;
	rc = nz ? syms_at_pass(e, zero_at, nz, sym, ok, next) : 0;
	for (size_t i = 0, z = 0; !rc && i < n; i++)
		if (found[i] && !out[i].size && z < nz) {
			out[i].size = next[z] ? next[z] - out[i].addr : 0;
			z++;
		}
out:
	free(zero_at);
	free(next);
	free(sym);
	free(ok);
	return rc;
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

bool ma_elf_needs(const struct ma_elf *e, const char *prefix)
{
	Elf_Scn *scn = NULL;
	size_t plen = strlen(prefix);

	if (!e->elf)
		return false;
	while ((scn = elf_nextscn(e->elf, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Dyn dyn;
			const char *name;

			if (!gelf_getdyn(d, (int)i, &dyn) || dyn.d_tag == DT_NULL)
				break;
			if (dyn.d_tag == DT_NEEDED &&
			    (name = elf_strptr(e->elf, sh.sh_link, dyn.d_un.d_val)) &&
			    strncmp(name, prefix, plen) == 0)
				return true;
		}
	}
	return false;
}

bool ma_elf_tls_sym(const struct ma_elf *e, const char *const *names, size_t n, struct ma_elf_sym *out)
{
	for (size_t k = 0; k < e->ntables; k++) {
		const struct ma_elf_table *t = &e->tables[k];

		for (size_t i = 1; i < t->n; i++) {
			GElf_Sym gs;

			if (!table_sym(e, t, i, &gs) || GELF_ST_TYPE(gs.st_info) != STT_TLS ||
			    gs.st_shndx == SHN_UNDEF || gs.st_name >= t->strsize)
				continue;
			for (size_t j = 0; j < n; j++)
				if (strcmp(t->str + gs.st_name, names[j]) == 0) {
					*out = (struct ma_elf_sym){ .addr = gs.st_value, .size = gs.st_size,
								    .name = names[j], .type = STT_TLS,
								    .bind = GELF_ST_BIND(gs.st_info) };
					return true;
				}
		}
	}
	return false;
}

bool ma_elf_tls_layout(const struct ma_elf *e, uint64_t *memsz, uint64_t *align, uint64_t *vaddr)
{
	size_t phnum;

	if (!e->elf || elf_getphdrnum(e->elf, &phnum) != 0)
		return false;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(e->elf, (int)i, &ph) || ph.p_type != PT_TLS)
			continue;
		*memsz = ph.p_memsz;
		*align = ph.p_align ? ph.p_align : 1;
		*vaddr = ph.p_vaddr;
		return true;
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
