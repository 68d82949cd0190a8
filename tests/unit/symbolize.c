/*
 * tests/unit/symbolize.c - naming a dump's addresses (analysis/symbolize.c)
 * with this test program as the dump's process: its own /proc/self/maps as
 * MAPPED_LIBRARIES, stacks of return addresses inside functions it knows
 * (one of its own, one of libc's).  Each is named, the same address gives
 * the same frame, an address in no mapping stays unnamed with a warning,
 * and a dump whose inode for this program is another one (rebuilt since)
 * leaves its frames unnamed with a warning naming it, while --binary
 * vouches for the file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "heapprof.h"
#include "symbolize.h"

__attribute__((noinline)) int ma_unit_target_fn(int x)
{
	volatile int v = x;

	for (int i = 0; i < 8; i++)
		v = v * 31 + i;
	return v;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t cap = 0;

	*len = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (*len + 4096 > cap && !(buf = realloc(buf, cap = cap * 2 + 8192)))
			break;
		size_t n = fread(buf + *len, 1, cap - *len - 1, f);
		*len += n;
		if (n == 0)
			break;
	}
	fclose(f);
	if (buf)
		buf[*len] = '\0';
	return buf;
}

/* A dump of this process: one stack (own function, then libc's getpid), its maps; OLD_INO -> NEW_INO. */
static char *make_dump(uint64_t pc_own, uint64_t pc_libc, const char *old_ino, const char *new_ino)
{
	size_t len;
	char *maps = read_file("/proc/self/maps", &len), *out, *p;
	size_t cap = len + 512;

	out = malloc(cap);
	if (!maps || !out) {
		free(maps);
		free(out);
		return NULL;
	}
	p = out + snprintf(out, cap, "heap_v2/524288\n  t*: 2: 2000 [0: 0]\n"
				     "@ 0x%llx 0x%llx\n  t*: 1: 1000 [0: 0]\n"
				     "@ 0x10\n  t*: 1: 1000 [0: 0]\n\nMAPPED_LIBRARIES:\n",
			   (unsigned long long)pc_own, (unsigned long long)pc_libc);
	for (char *line = strtok(maps, "\n"); line; line = strtok(NULL, "\n")) {
		char *at = old_ino ? strstr(line, old_ino) : NULL;

		if (at && strlen(old_ino) == strlen(new_ino))
			memcpy(at, new_ino, strlen(new_ino)); /* the same width: the line keeps its shape */
		p += sprintf(p, "%s\n", line);
	}
	free(maps);
	return out;
}

static const char *name_at(struct ma_symbolizer *s, uint64_t pc, bool *named)
{
	uint32_t f = ma_sym_pc(s, pc);

	*named = f != UINT32_MAX && s->frames[f].named;
	return f == UINT32_MAX ? "" : ma_sym_func_name(s, s->frames[f].func);
}

int main(void)
{
	uint64_t own = (uint64_t)(uintptr_t)ma_unit_target_fn + 9;
	uint64_t libc = (uint64_t)(uintptr_t)getpid + 3;
	char self[4096], ino[32], other[32];
	struct ma_heapprof hp;
	struct ma_symbolizer s;
	struct ma_sym_opts o = { 0 };
	bool named;
	const char *n;
	char *dump;
	ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
	unsigned long long i = 0;
	struct stat sb;

	self[k > 0 ? k : 0] = '\0';
	if (stat("/proc/self/exe", &sb) == 0)
		i = (unsigned long long)sb.st_ino;
	/* another inode of as many digits, so the maps line keeps its width */
	snprintf(ino, sizeof(ino), " %llu ", i);
	snprintf(other, sizeof(other), " %llu ", i % 10 != 9 ? i + 1 : i - 1);

	dump = make_dump(own, libc, NULL, NULL);
	CHECK("a dump of this process", dump && ma_heapprof_parse(&hp, dump, strlen(dump), "self") == 0);
	CHECK("its maps list this program", hp.nmaps > 0);
	CHECK("symbolizer", ma_sym_init(&s, &hp, &o) == 0);
	n = name_at(&s, own, &named);
	CHECK("an address in one of its functions is that function", named && strcmp(n, "ma_unit_target_fn") == 0);
	if (strcmp(n, "ma_unit_target_fn") != 0)
		printf("# got '%s'\n", n);
	CHECK("the same address twice: the same frame", ma_sym_pc(&s, own) == ma_sym_pc(&s, own));
	n = name_at(&s, libc, &named);
	CHECK("an address in libc's getpid is named so", named && strstr(n, "getpid"));
	n = name_at(&s, 0x10, &named);
	CHECK("an address in no mapping stays unnamed", !named);
	CHECK("... with a warning", s.nwarnings > 0 && strstr(s.warning, "none of the mappings"));
	ma_sym_release(&s);
	ma_heapprof_release(&hp);
	free(dump);

	/* The same dump, but this program's inode another: a rebuilt program. */
	dump = make_dump(own, libc, ino, other);
	CHECK("a dump naming another inode for this program",
	      dump && ma_heapprof_parse(&hp, dump, strlen(dump), "rebuilt") == 0 && ma_sym_init(&s, &hp, &o) == 0);
	n = name_at(&s, own, &named);
	CHECK("rebuilt since: its frames stay unnamed", !named);
	CHECK("... and the warning names it", strstr(s.warning, self) && strstr(s.warning, "is not the file the dump mapped"));
	n = name_at(&s, libc, &named);
	CHECK("rebuilt since: libc's frames are still named", named && strstr(n, "getpid"));
	ma_sym_release(&s);
	o.binary = self;
	CHECK("--binary vouches for the file", ma_sym_init(&s, &hp, &o) == 0);
	n = name_at(&s, own, &named);
	CHECK("... and names its frames", named && strcmp(n, "ma_unit_target_fn") == 0);
	ma_sym_release(&s);
	ma_heapprof_release(&hp);
	free(dump);
	(void)ma_unit_target_fn(1); /* called once, so it is not dropped */
	CHECK_DONE();
}
