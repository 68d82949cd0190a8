/*
 * heapprof_fuzz.c - libFuzzer target: parse, symbolize and aggregate
 * arbitrary bytes as a heap dump.  Paths in MAPPED_LIBRARIES are remapped
 * under a directory that does not exist, so no file is ever opened.
 *
 *   make fuzz && build/fuzz/heapprof -max_total_time=600 build/fuzz/corpus fixtures/dumps
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flame.h"
#include "heapprof.h"
#include "ma_error.h"
#include "profile.h"
#include "symbolize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct ma_prefix_map nowhere = { "/", "/nonexistent-memattach-fuzz/" };
	struct ma_sym_opts so = { .prefix_maps = &nowhere, .nprefix_maps = 1 };
	struct ma_heapprof hp;
	struct ma_symbolizer sym;
	struct ma_profile prof;
	FILE *null;

	ma_err_clear();
	if (ma_heapprof_parse(&hp, (const char *)data, size, "fuzz") != 0)
		return 0;
	if (ma_sym_init(&sym, &hp, &so) == 0) {
		if (ma_profile_build(&prof, &hp, &sym, NULL) == 0) {
			null = fopen("/dev/null", "w");
			if (null) {
				ma_flame_folded(null, &prof);
				ma_flame_svg(null, &prof, "fuzz");
				fclose(null);
			}
			for (size_t i = 0; i < prof.nsites && i < 5; i++)
				(void)ma_sym_func_name(&sym, prof.sites[i]);
			ma_profile_release(&prof);
		}
		ma_sym_release(&sym);
	}
	ma_heapprof_release(&hp);
	return 0;
}
