/*
 * Unit test: ma_demangle prints Rust names exactly as rustfilt does and C++
 * names as c++filt does, for every such symbol of the fixture binaries
 * (build/fixtures/prof_rs: legacy mangling, prof_rs_v0: v0, prof_cxx: C++).
 * The reference tools are run here, in the test; memattach never runs them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "demangle.h"
#include "elfsyms.h"

/* Compare ma_demangle with TOOL on the symbols of PATH starting with PREFIX. */
static void compare(const char *path, const char *prefix, const char *tool, const char *name)
{
	struct ma_elf e;
	char tmpl[] = "/tmp/madem.XXXXXX", cmd[256], line[8192], label[256];
	FILE *in, *out;
	size_t n = 0, same = 0;
	int fd;

	if (access(path, R_OK) != 0) {
		printf("SKIP %s: %s not built (make fixtures)\n", name, path);
		return;
	}
	if (ma_elf_open(&e, path) != 0) {
		printf("FAIL %s: cannot open %s\n", name, path);
		check_failures++;
		return;
	}
	if (ma_elf_load_syms(&e) != 0) {
		printf("FAIL %s: cannot load the symbols of %s\n", name, path);
		check_failures++;
		ma_elf_release(&e);
		return;
	}
	fd = mkstemp(tmpl);
	in = fdopen(fd, "w");
	for (size_t i = 0; i < e.nsyms; i++) {
		const char *s = e.syms[i].name;

		if (strncmp(s, prefix, strlen(prefix)) != 0 || strchr(s, '@'))
			continue;
		fprintf(in, "%.*s\n", (int)ma_demangle_base_len(s), s);
	}
	fclose(in);
	snprintf(cmd, sizeof(cmd), "%s < %s", tool, tmpl);
	out = popen(cmd, "r");
	in = fopen(tmpl, "r");
	while (out && in && fgets(line, sizeof(line), in)) {
		char ref[8192], *ours;

		if (!fgets(ref, sizeof(ref), out))
			break;
		line[strcspn(line, "\n")] = '\0';
		ref[strcspn(ref, "\n")] = '\0';
		ours = ma_demangle(line);
		n++;
		if (ours && strcmp(ours, ref) == 0)
			same++;
		else if (n - same <= 3)
			printf("  %s: %s -> ours '%s', %s '%s'\n", name, line, ours, tool, ref);
		free(ours);
	}
	if (in)
		fclose(in);
	if (out)
		pclose(out);
	unlink(tmpl);
	ma_elf_release(&e);
	snprintf(label, sizeof(label), "%s: %zu of %zu names equal %s's", name, same, n, tool);
	CHECK(label, n > 0 && same == n);
}

int main(void)
{
	char *a, *b;

	if (system("command -v rustfilt >/dev/null 2>&1") == 0) {
		compare("build/fixtures/prof_rs", "_ZN", "rustfilt", "rust legacy");
		compare("build/fixtures/prof_rs_v0", "_R", "rustfilt", "rust v0");
	} else {
		printf("SKIP rust: no rustfilt\n");
	}
	if (system("command -v c++filt >/dev/null 2>&1") == 0)
		compare("build/fixtures/prof_cxx", "_Z", "c++filt", "c++");

	a = ma_demangle("_ZN4core3fmt5write17h01234567890abcdeE.llvm.1234567890");
	b = ma_demangle("_ZN4core3fmt5write17h01234567890abcdeE");
	CHECK(".llvm.N suffix stripped", a && b && strcmp(a, b) == 0 && strcmp(a, "core::fmt::write") == 0);
	free(a);
	free(b);
	a = ma_demangle("_ZN3foo3bar17h0123456789abcdefE.cold");
	CHECK(".cold suffix stripped", a && strcmp(a, "foo::bar") == 0);
	free(a);
	a = ma_demangle("__libc_start_main@@GLIBC_2.34");
	CHECK("symbol version dropped", a && strcmp(a, "__libc_start_main") == 0);
	free(a);
	a = ma_demangle("plain_c_function");
	CHECK("C name unchanged", a && strcmp(a, "plain_c_function") == 0);
	free(a);
	a = ma_demangle("_Zgarbage");
	CHECK("bad mangling left as is", a && strcmp(a, "_Zgarbage") == 0);
	free(a);
	CHECK_DONE();
}
