/* Unit test: elfsyms finds known symbols in Debian's libjemalloc and libc. */
#include <string.h>

#include "check.h"
#include "elfsyms.h"

int main(void)
{
	struct ma_elf e;
	const struct ma_elf_sym *s, *t;

	CHECK("open libjemalloc", ma_elf_open(&e, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") == 0);
	s = ma_elf_sym_by_name(&e, "mallctl");
	CHECK("mallctl in .dynsym", s != NULL && e.has_dynsym);
	CHECK("mallctlbymib present", ma_elf_sym_by_name(&e, "mallctlbymib") != NULL);
	t = s ? ma_elf_sym_at(&e, s->addr + 1) : NULL;
	CHECK("address maps back to mallctl", t && strcmp(t->name, "mallctl") == 0);
	CHECK("no such symbol", ma_elf_sym_by_name(&e, "no_such_symbol_xyz") == NULL);
	CHECK("has build id", e.build_id_len == 20);
	ma_elf_release(&e);
	CHECK("non-ELF rejected", ma_elf_open(&e, "/etc/hostname") != 0);
	CHECK("missing file rejected", ma_elf_open(&e, "/nonexistent/x") != 0);
	CHECK_DONE();
}
