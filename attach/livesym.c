#include <stdlib.h>
#include <string.h>

#include "livesym.h"
#include "ma_error.h"

static int open_target_map(void *ctx, const struct ma_hp_map *map)
{
	const struct ma_target *t = ctx;
	const struct ma_mapping *m = ma_target_mapping_at(t, map->start);

	return m ? ma_target_open_mapped_file(t, m) : -1;
}

int ma_livesym_init(struct ma_livesym *ls, const struct ma_target *t)
{
	/* Per address: each frame shows its own offset. */
	struct ma_sym_opts opts = { .per_pc = true, .open_map = open_target_map, .open_ctx = (void *)t };
	int rc;

	memset(ls, 0, sizeof(*ls));
	ls->t = t;
	ls->maps.maps = calloc(t->nmaps ? t->nmaps : 1, sizeof(*ls->maps.maps));
	if (!ls->maps.maps)
		return ma_fail(MA_E_NOMEM, "out of memory");
	/* The target's mappings are sorted by start, as the symbolizer needs. */
	for (size_t i = 0; i < t->nmaps; i++) {
		const struct ma_mapping *m = &t->maps[i];
		struct ma_hp_map *h = &ls->maps.maps[ls->maps.nmaps++];

		*h = (struct ma_hp_map){ .start = m->start, .end = m->end, .offset = m->offset,
					 .exec = m->perms[2] == 'x' };
		if (m->path && !(h->path = strdup(m->path))) {
			ma_heapprof_release(&ls->maps);
			return ma_fail(MA_E_NOMEM, "out of memory");
		}
	}
	ls->maps.has_maps = true;
	rc = ma_sym_init(&ls->sym, &ls->maps, &opts);

	if (rc)
		ma_heapprof_release(&ls->maps);
	return rc;
}

const struct ma_frame *ma_livesym_frame(struct ma_livesym *ls, uint64_t ip, bool return_addr)
{
	/* The symbolizer takes return addresses and looks at the byte before. */
	uint32_t f = ma_sym_pc(&ls->sym, ma_livesym_key(ip, return_addr));

	return f == MA_NONE ? NULL : &ls->sym.frames[f];
}

int ma_livesym_prepare(struct ma_livesym *ls, const uint64_t *keys, size_t n)
{
	return ma_sym_prepare(&ls->sym, keys, n);
}

void ma_livesym_release(struct ma_livesym *ls)
{
	ma_sym_release(&ls->sym);
	ma_heapprof_release(&ls->maps);
}
