/*
 * elfsyms.h - symbol tables of ELF files, for finding jemalloc in a target
 * and for symbolizing addresses.
 *
 * ma_elf_open() reads both .symtab and .dynsym (a static Rust binary has
 * mallctl only in .symtab; Debian's stripped .so only in .dynsym), keeps
 * function and object symbols, drops duplicates, and sorts them once by
 * address so lookups are binary searches.  Names point into the file's
 * mapped string tables and stay valid until ma_elf_release().
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

struct ma_elf {
	int fd;
	void *elf; /* Elf *, opaque here */
	uint16_t type; /* ET_EXEC, ET_DYN */
	bool has_symtab, has_dynsym;
	struct ma_elf_seg *segs;
	size_t nsegs;
	struct ma_elf_sym *syms; /* sorted by addr */
	uint64_t *addrs; /* syms[i].addr, packed: the address search stays in cache */
	uint64_t *ends; /* syms[i].addr + syms[i].size, packed likewise */
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

/* Open PATH and load its symbols.  0 or MA_E_IO / MA_E_FORMAT. */
int ma_elf_open(struct ma_elf *e, const char *path);
/* Same from an open descriptor (taken over; closed by ma_elf_release). */
int ma_elf_open_fd(struct ma_elf *e, int fd, const char *what);
void ma_elf_release(struct ma_elf *e);

/* Symbol named exactly NAME (globals preferred), or NULL (also on OOM). */
const struct ma_elf_sym *ma_elf_sym_by_name(struct ma_elf *e, const char *name);
/* Symbol whose [addr, addr+size) contains VADDR, or NULL. */
const struct ma_elf_sym *ma_elf_sym_at(const struct ma_elf *e, uint64_t vaddr);
/* File offset -> link-time vaddr through the PT_LOAD segments; 0 or -1. */
int ma_elf_offset_to_vaddr(const struct ma_elf *e, uint64_t off, uint64_t *vaddr);
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
/* Lowest PT_LOAD vaddr rounded down to its page (the load bias base). */
uint64_t ma_elf_base_vaddr(const struct ma_elf *e);

#endif
