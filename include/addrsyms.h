/*
 * addrsyms.h - name the code addresses of a live target (for display only:
 * the safety verdict compares addresses with jemalloc's code ranges).
 * ELF files are opened through the target's mappings on first use.
 */
#ifndef MA_ADDRSYMS_H
#define MA_ADDRSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "elfsyms.h"
#include "target.h"

struct ma_addrsyms_obj {
	const struct ma_mapping *first; /* lowest mapping of the file */
	struct ma_elf elf;
	uint64_t bias;
	int ok;
};

struct ma_addrsyms {
	const struct ma_target *t;
	struct ma_addrsyms_obj *objs;
	size_t nobjs;
};

void ma_addrsyms_init(struct ma_addrsyms *a, const struct ma_target *t);
/* "sym+0xoff (file)" or "0xaddr (file)" into BUF; PC is the address to name. */
const char *ma_addrsyms_describe(struct ma_addrsyms *a, uint64_t pc, char *buf, size_t len);
/* Just the symbol name (NULL if unknown) and offset. */
const char *ma_addrsyms_name(struct ma_addrsyms *a, uint64_t pc, uint64_t *off,
			     const char **file);
void ma_addrsyms_release(struct ma_addrsyms *a);

#endif
