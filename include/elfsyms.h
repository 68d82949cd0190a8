/*
 * elfsyms.h - symbol tables of ELF files, for finding jemalloc in a target
 * and for symbolizing addresses.
 *
 * ma_elf_open() maps the file and reads its headers only.  Its symbols
 * (.symtab and .dynsym: a static Rust binary has mallctl only in .symtab,
 * Debian's stripped .so only in .dynsym; function and object symbols) are
 * read where the file holds them, in one of two ways:
 *   - a few addresses or names (ma_elf_syms_at, ma_elf_syms_named): one
 *     pass over the tables, nothing kept -- a 450 MB library with a
 *     million functions answers the frames of 34 threads in ~40 ms, where
 *     sorting its 2 million entries took 2 s of every run;
 *   - many lookups (ma_elf_sym_at, ma_elf_sym_by_name): every symbol
 *     loaded once, sorted by address, duplicates dropped, then binary
 *     searches (ma_elf_load_syms, done by the first such lookup).
 * Both give the same answers.  Names point into the file's mapped string
 * tables and stay valid until ma_elf_release().
 */
#ifndef MA_ELFSYMS_H
#define MA_ELFSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ma_elf_seg {
	uint64_t vaddr, memsz; /* PT_LOAD p_vaddr, p_memsz */
	uint64_t offset, filesz; /* p_offset, p_filesz */
	uint32_t flags; /* PF_X | PF_W | PF_R */
};

struct ma_elf_sym {
	uint64_t addr; /* st_value (link-time virtual address) */
	uint64_t size; /* st_size, or distance to the next symbol if 0 */
	const char *name;
	const char *file; /* STT_FILE this local symbol follows, or NULL */
	unsigned char type; /* STT_FUNC, STT_OBJECT, ... */
	unsigned char bind; /* STB_LOCAL, STB_GLOBAL, STB_WEAK */
};

/* A symbol table as the file holds it: read in place, never copied. */
struct ma_elf_table {
	const void *data; /* its Elf_Data */
	size_t n; /* entries */
	const char *str; /* its string table; str[strsize - 1] is NUL */
	size_t strsize;
};

struct ma_elf {
	int fd;
	void *elf; /* Elf *, opaque here */
	uint16_t type; /* ET_EXEC, ET_DYN */
	bool has_symtab, has_dynsym;
	struct ma_elf_seg *segs;
	size_t nsegs;
	struct ma_elf_table tables[2]; /* .symtab, .dynsym, as found */
	size_t ntables;
	int work; /* index of its ma_elf_work record, -1 if none */
	bool elf64; /* ELFCLASS64: tables read in place */
	bool loaded; /* the fields below are built (ma_elf_load_syms) */
	struct ma_elf_sym *syms; /* sorted by addr */
	uint64_t *addrs; /* syms[i].addr, packed: the address search stays in cache */
	uint64_t *ends; /* syms[i].addr + syms[i].size, packed likewise */
	uint64_t *maxend; /* the largest of ends[0..i]: where a search back can stop */
	/* bucket b = (vaddr - bucket_base) >> bucket_shift: the first symbol
	 * at or after the bucket's start; lookups search only their bucket */
	uint32_t *bucket;
	size_t nbuckets;
	uint64_t bucket_base;
	unsigned bucket_shift;
	size_t nsyms;
	size_t *by_name; /* indices into syms, sorted by name (on first use) */
	unsigned char build_id[64];
	size_t build_id_len;
	const char *debuglink; /* .gnu_debuglink file name, or NULL */
	uint32_t debuglink_crc; /* the debug file's CRC-32, as .gnu_debuglink gives it */
	bool has_debuglink_crc;
};

/* Open PATH and read its headers.  0 or MA_E_IO / MA_E_FORMAT. */
int ma_elf_open(struct ma_elf *e, const char *path);
/* Same from an open descriptor (taken over; closed by ma_elf_release). */
int ma_elf_open_fd(struct ma_elf *e, int fd, const char *what);
void ma_elf_release(struct ma_elf *e);

/*
 * Load every symbol, sorted (for many lookups, or to walk e->syms).
 * 0 or MA_E_NOMEM; does nothing the second time.
 */
int ma_elf_load_syms(struct ma_elf *e);
/*
 * Calls VISIT for each function or object symbol, table by table in file
 * order (a local's file is the STT_FILE before it; sizes as written, 0
 * included), until VISIT returns non-zero, which is returned.
 */
int ma_elf_scan(struct ma_elf *e, int (*visit)(void *ctx, const struct ma_elf_sym *s), void *ctx);

/*
 * Symbol named exactly NAME (globals preferred), or NULL (also on OOM).
 * Loads the symbols (ma_elf_load_syms) and indexes their names.
 */
const struct ma_elf_sym *ma_elf_sym_by_name(struct ma_elf *e, const char *name);
/*
 * The symbol covering VADDR, or NULL; loads the symbols.  A symbol covers
 * [addr, addr + size), or with size 0 up to the next symbol's address.
 * Of those covering VADDR, the one that starts last; among aliases there,
 * a global before a local, a function before other types, the larger.
 */
const struct ma_elf_sym *ma_elf_sym_at(struct ma_elf *e, uint64_t vaddr);
/* Where E's first symbol after file address VADDR starts (0 if none, or no symbols). */
uint64_t ma_elf_next_sym_addr(struct ma_elf *e, uint64_t vaddr);
/*
 * OUT[i] = what ma_elf_sym_at(E, VADDRS[i]) gives (FOUND[i] false for
 * NULL), sizes filled in as it does; without loading the symbols if they
 * are not (one pass over the tables).  0 or MA_E_NOMEM.
 */
int ma_elf_syms_at(struct ma_elf *e, const uint64_t *vaddrs, size_t n, struct ma_elf_sym *out,
		   bool *found);
/*
 * OUT[i] = what ma_elf_sym_by_name(E, NAMES[i]) gives, likewise in one
 * pass if the symbols are not loaded.  0 or MA_E_NOMEM.
 */
int ma_elf_syms_named(struct ma_elf *e, const char *const *names, size_t n,
		      struct ma_elf_sym *out, bool *found);

/*
 * What was read of each ELF file opened so far in this process (for tests:
 * per-binary work must not be repeated per thread).  Files are told apart
 * by the name they were opened with.
 */
struct ma_elf_work {
	char what[256];
	unsigned opens; /* ma_elf_open / ma_elf_open_fd */
	unsigned scans; /* passes over its symbol tables (a load is one) */
	unsigned loads; /* ma_elf_load_syms: all symbols sorted */
	uint64_t entries; /* symbol table entries read, all passes */
};
size_t ma_elf_work_list(const struct ma_elf_work **list);
/* File offset -> link-time vaddr through the PT_LOAD segments; 0 or -1. */
int ma_elf_offset_to_vaddr(const struct ma_elf *e, uint64_t off, uint64_t *vaddr);
/*
 * The PT_TLS segment of E: its size in memory, alignment and link-time
 * address (where the TLS symbols' values are offsets from).  False if E
 * has none.
 */
/*
 * The thread-local (STT_TLS) symbol of E named one of NAMES, into OUT: its
 * value is an offset in the PT_TLS segment.  False if none.  (The other
 * lookups leave TLS symbols out: their values are not addresses.)
 */
bool ma_elf_tls_sym(const struct ma_elf *e, const char *const *names, size_t n, struct ma_elf_sym *out);
bool ma_elf_tls_layout(const struct ma_elf *e, uint64_t *memsz, uint64_t *align, uint64_t *vaddr);
/*
 * The initial image of the object's thread-local storage (PT_TLS: .tdata,
 * then .tbss zeros), which every thread's copy starts as; *IMAGE NULL and
 * *LEN 0 if it has none.  0 or MA_E_NOMEM; free(*IMAGE).
 */
int ma_elf_tls_image(const struct ma_elf *e, unsigned char **image, size_t *len);
/*
 * Link-time address of the first dynamic relocation of TYPE against no
 * symbol with addend 0 (for a TLS offset relocation: the slot the loader
 * fills with the offset of the object's TLS block from the thread pointer).
 */
bool ma_elf_find_reloc(const struct ma_elf *e, uint32_t type, uint64_t *vaddr);
/* True if section SECTION's bytes contain NEEDLE (e.g. a string in .rodata). */
bool ma_elf_section_contains(const struct ma_elf *e, const char *section, const char *needle);
/* Does E name a library starting with PREFIX among its DT_NEEDED entries? */
bool ma_elf_needs(const struct ma_elf *e, const char *prefix);
/* Lowest PT_LOAD vaddr rounded down to its page (the load bias base). */
uint64_t ma_elf_base_vaddr(const struct ma_elf *e);

#endif
