/*
 * Unit test: elfsyms finds known symbols in Debian's libjemalloc and libc,
 * and its two ways of reading symbols -- one pass over the tables for a
 * few lookups, the sorted table for many -- give the same answers: on
 * fixtures/symedge.s (nested, aliased and unsized symbols) and on every
 * symbol of real files.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "elfsyms.h"

#define SYMEDGE "build/fixtures/libsymedge.so"

/* The work record of file WHAT (elfsyms keeps one per name opened). */
static const struct ma_elf_work *work_of(const char *what)
{
	const struct ma_elf_work *w;
	size_t n = ma_elf_work_list(&w);

	for (size_t i = 0; i < n; i++)
		if (strcmp(w[i].what, what) == 0)
			return &w[i];
	return NULL;
}

static bool same_sym(const struct ma_elf_sym *a, const struct ma_elf_sym *b)
{
	return a->addr == b->addr && a->size == b->size && strcmp(a->name, b->name) == 0 &&
	       a->type == b->type && a->bind == b->bind;
}

/* The name ma_elf_sym_at gives for ADDR, "-" for none; and the one pass's. */
static const char *loaded_name(struct ma_elf *e, uint64_t addr)
{
	const struct ma_elf_sym *s = ma_elf_sym_at(e, addr);

	return s ? s->name : "-";
}

static void symedge(void)
{
	/* link-time address (outer is at 0x1000) -> the symbol that covers it */
	static const struct { uint64_t addr; const char *name; } want[] = {
		{ 0x1000, "outer" }, { 0x100f, "outer" }, { 0x1010, "inner" }, { 0x1017, "inner" },
		{ 0x1018, "outer" }, { 0x103f, "outer" },
		{ 0x1040, "alias_g" }, { 0x104f, "alias_g" }, /* a function before an object */
		{ 0x1050, "alias_o" }, { 0x1057, "alias_o" }, /* a global before a local */
		{ 0x1058, "alias_l" }, { 0x1067, "alias_l" }, /* the local where it alone covers */
		{ 0x1068, "-" }, { 0x106f, "-" },
		{ 0x1070, "label_a" }, { 0x1083, "label_a" }, /* unsized: to the next symbol */
		{ 0x1084, "label_b" }, { 0x108f, "label_b" },
		{ 0x1090, "sized_after" }, { 0x1097, "sized_after" },
		{ 0x1098, "-" }, { 0x10b7, "-" }, /* the gap */
		{ 0x10b8, "after_gap" }, { 0x10c7, "after_gap" },
	};
	size_t n = sizeof(want) / sizeof(want[0]);
	uint64_t addr[sizeof(want) / sizeof(want[0])];
	struct ma_elf_sym out[sizeof(want) / sizeof(want[0])];
	bool found[sizeof(want) / sizeof(want[0])];
	struct ma_elf pass, loaded;
	unsigned bad_pass = 0, bad_loaded = 0;

	if (ma_elf_open(&pass, SYMEDGE) != 0 || ma_elf_open(&loaded, SYMEDGE) != 0) {
		CHECK("symedge fixture built (make fixtures)", false);
		return;
	}
	for (size_t i = 0; i < n; i++)
		addr[i] = want[i].addr;
	CHECK("symedge: one pass", ma_elf_syms_at(&pass, addr, n, out, found) == 0 && !pass.loaded);
	for (size_t i = 0; i < n; i++) {
		const char *p = found[i] ? out[i].name : "-", *l = loaded_name(&loaded, addr[i]);

		if (strcmp(p, want[i].name) != 0 && bad_pass++ == 0)
			printf("  one pass at 0x%llx: %s, want %s\n", (unsigned long long)addr[i], p,
			       want[i].name);
		if (strcmp(l, want[i].name) != 0 && bad_loaded++ == 0)
			printf("  sorted table at 0x%llx: %s, want %s\n", (unsigned long long)addr[i], l,
			       want[i].name);
	}
	CHECK("symedge: one pass names each address right", bad_pass == 0);
	CHECK("symedge: the sorted table names each address right", bad_loaded == 0);
	ma_elf_release(&pass);
	ma_elf_release(&loaded);
}

/* Every symbol's start, middle, last byte and both neighbours, and a byte every 61 of each segment. */
static uint64_t *probe_addresses(const struct ma_elf *e, size_t *n)
{
	size_t cap = e->nsyms * 5 + 1024, k = 0;
	uint64_t *a = malloc(cap * sizeof(*a));

	for (size_t i = 0; a && i < e->nsyms; i++) {
		const struct ma_elf_sym *s = &e->syms[i];
		uint64_t v[5] = { s->addr, s->addr + s->size / 2, s->addr + s->size - 1,
				  s->addr + s->size, s->addr - 1 };

		for (int j = 0; j < 5 && k < cap; j++)
			a[k++] = v[j];
	}
	for (size_t g = 0; a && g < e->nsegs; g++)
		for (uint64_t v = e->segs[g].vaddr; v < e->segs[g].vaddr + e->segs[g].memsz; v += 61) {
			if (k == cap) {
				uint64_t *b = realloc(a, (cap *= 2) * sizeof(*a));

				if (!b) {
					free(a);
					return NULL;
				}
				a = b;
			}
			a[k++] = v;
		}
	*n = k;
	return a;
}

/* How many symbols of the sorted table are named NAME. */
static size_t count_named(const struct ma_elf *e, const char *name)
{
	size_t c = 0;

	for (size_t i = 0; i < e->nsyms; i++)
		c += strcmp(e->syms[i].name, name) == 0;
	return c;
}

static void agree_names(struct ma_elf *pass, struct ma_elf *loaded, const char *what)
{
	size_t n = 0, bad = 0;
	const char **names = malloc((loaded->nsyms / 13 + 2) * sizeof(*names));
	struct ma_elf_sym *out = malloc((loaded->nsyms / 13 + 2) * sizeof(*out));
	bool *found = malloc((loaded->nsyms / 13 + 2) * sizeof(*found));
	char label[300];

	for (size_t i = 0; names && i < loaded->nsyms; i += 13)
		names[n++] = loaded->syms[i].name;
	if (names)
		names[n++] = "no_such_symbol_xyz";
	if (!names || !out || !found || ma_elf_syms_named(pass, names, n, out, found) != 0) {
		CHECK("names looked up in one pass", false);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const struct ma_elf_sym *s = ma_elf_sym_by_name(loaded, names[i]);

		if (!s != !found[i] || (s && count_named(loaded, names[i]) == 1 && !same_sym(s, &out[i])))
			if (bad++ == 0)
				printf("  %s: %s: one pass %s, sorted table %s\n", what, names[i],
				       found[i] ? "found" : "none", s ? "found" : "none");
	}
	snprintf(label, sizeof(label), "%s: %zu names, the same symbols both ways", what, n);
	CHECK(label, bad == 0);
out:
	free(names);
	free(out);
	free(found);
}

/* One pass over PATH's tables and its sorted table agree on every probe address. */
static void agree(const char *path, bool required)
{
	struct ma_elf pass, loaded;
	const struct ma_elf_work *w;
	struct ma_elf_sym *out = NULL;
	bool *found = NULL;
	uint64_t *addr = NULL;
	size_t n = 0, bad = 0;
	unsigned scans;
	char label[300];

	if (ma_elf_open(&pass, path) != 0) {
		if (required)
			CHECK(path, false);
		else
			printf("SKIP %s: not here\n", path);
		return;
	}
	if (ma_elf_open(&loaded, path) != 0 || ma_elf_load_syms(&loaded) != 0 ||
	    !(addr = probe_addresses(&loaded, &n)) || !(out = malloc(n * sizeof(*out))) ||
	    !(found = malloc(n * sizeof(*found)))) {
		CHECK(path, false);
		goto out;
	}
	w = work_of(path);
	scans = w ? w->scans : 0;
	CHECK("addresses looked up", ma_elf_syms_at(&pass, addr, n, out, found) == 0);
	snprintf(label, sizeof(label), "%s: %zu addresses in one pass over the tables, nothing loaded",
		 path, n);
	CHECK(label, w && w->scans == scans + 1 && !pass.loaded);
	for (size_t i = 0; i < n; i++) {
		const struct ma_elf_sym *s = ma_elf_sym_at(&loaded, addr[i]);

		if (!s != !found[i] || (s && !same_sym(s, &out[i])))
			if (bad++ == 0)
				printf("  %s at 0x%llx: one pass %s+%llu, sorted table %s+%llu\n", path,
				       (unsigned long long)addr[i], found[i] ? out[i].name : "-",
				       found[i] ? (unsigned long long)out[i].size : 0ULL, s ? s->name : "-",
				       s ? (unsigned long long)s->size : 0ULL);
	}
	snprintf(label, sizeof(label), "%s: %zu symbols, the same answer both ways", path,
		 loaded.nsyms);
	CHECK(label, bad == 0 && loaded.nsyms > 0);
	agree_names(&pass, &loaded, path);
out:
	free(addr);
	free(out);
	free(found);
	ma_elf_release(&pass);
	ma_elf_release(&loaded);
}

/* libc6-dbg's file for this libc (a .symtab with locals and FILE symbols). */
static const char *libc_debug_file(void)
{
	static char path[256];
	struct ma_elf e;
	int n;

	if (ma_elf_open(&e, "/usr/lib/x86_64-linux-gnu/libc.so.6") != 0 || e.build_id_len < 2)
		return "(libc has no build id)";
	n = snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%02x/", e.build_id[0]);
	for (size_t i = 1; i < e.build_id_len; i++)
		n += snprintf(path + n, sizeof(path) - (size_t)n, "%02x", e.build_id[i]);
	snprintf(path + n, sizeof(path) - (size_t)n, ".debug");
	ma_elf_release(&e);
	return path;
}

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
	CHECK("libjemalloc needs libc (DT_NEEDED)", ma_elf_needs(&e, "libc.so"));
	CHECK("libjemalloc does not need libjemalloc", !ma_elf_needs(&e, "libjemalloc"));
	ma_elf_release(&e);
	CHECK("open the daemon fixture", ma_elf_open(&e, "build/fixtures/daemon") == 0);
	CHECK("the daemon fixture needs libjemalloc (DT_NEEDED)", ma_elf_needs(&e, "libjemalloc"));
	ma_elf_release(&e);
	CHECK("non-ELF rejected", ma_elf_open(&e, "/etc/hostname") != 0);
	CHECK("missing file rejected", ma_elf_open(&e, "/nonexistent/x") != 0);

	symedge();
	agree(SYMEDGE, true);
	agree("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", true);
	agree("/usr/lib/x86_64-linux-gnu/libc.so.6", true);
	agree("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", true);
	agree("build/memattach", true);
	agree("build/fixtures/bigbin/bigd_static", true);
	agree(libc_debug_file(), false);
	CHECK_DONE();
}
