#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addrsyms.h"
#include "ma_error.h"

void ma_addrsyms_init(struct ma_addrsyms *a, const struct ma_target *t)
{
	memset(a, 0, sizeof(*a));
	a->t = t;
}

static struct ma_addrsyms_obj *obj_for(struct ma_addrsyms *a, const struct ma_mapping *m)
{
	const struct ma_mapping *first = ma_target_first_mapping(a->t, m);
	struct ma_addrsyms_obj *o, *p;
	int fd;

	for (size_t i = 0; i < a->nobjs; i++)
		if (a->objs[i].first == first)
			return &a->objs[i];
	p = realloc(a->objs, (a->nobjs + 1) * sizeof(*p));
	if (!p)
		return NULL;
	a->objs = p;
	o = &a->objs[a->nobjs++];
	memset(o, 0, sizeof(*o));
	o->first = first;
	o->elf.fd = -1;
	fd = ma_target_open_mapped_file(a->t, first);
	if (fd >= 0 && ma_elf_open_fd(&o->elf, fd, first->path) == 0) {
		o->ok = 1;
		o->bias = ma_target_load_bias(first, &o->elf);
	} else {
		ma_err_clear();
	}
	return o;
}

const char *ma_addrsyms_name(struct ma_addrsyms *a, uint64_t pc, uint64_t *off, const char **file)
{
	const struct ma_mapping *m = ma_target_mapping_at(a->t, pc);
	struct ma_addrsyms_obj *o;
	const struct ma_sym *s;

	*off = 0;
	*file = m && m->path ? m->path : NULL;
	if (!m || !m->path || m->path[0] != '/')
		return NULL;
	o = obj_for(a, m);
	if (!o || !o->ok)
		return NULL;
	s = ma_elf_sym_at(&o->elf, pc - o->bias);
	if (!s)
		return NULL;
	*off = pc - o->bias - s->addr;
	return s->name;
}

const char *ma_addrsyms_describe(struct ma_addrsyms *a, uint64_t pc, char *buf, size_t len)
{
	const char *file, *name;
	uint64_t off;

	name = ma_addrsyms_name(a, pc, &off, &file);
	if (name)
		snprintf(buf, len, "%s+0x%llx (%s)", name, (unsigned long long)off,
			 file ? file : "?");
	else
		snprintf(buf, len, "0x%llx (%s)", (unsigned long long)pc, file ? file : "?");
	return buf;
}

void ma_addrsyms_release(struct ma_addrsyms *a)
{
	for (size_t i = 0; i < a->nobjs; i++)
		if (a->objs[i].ok)
			ma_elf_release(&a->objs[i].elf);
	free(a->objs);
	memset(a, 0, sizeof(*a));
}
