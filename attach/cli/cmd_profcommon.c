/*
 * cmd_profcommon.c - options and loading shared by aggregate, stacks, diff.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "ma_error.h"
#include "profcmd.h"


void ma_profcmd_init(struct ma_profcmd *c, const char *cmd, long default_top)
{
	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	c->top = default_top;
	c->sym.prefix_maps = c->maps;
	c->prof.skip = c->skip;
}


void ma_profcmd_release(struct ma_profcmd *c)
{
	for (size_t i = 0; i < c->prof.nskip; i++)
		regfree(&c->skip[i]);
	c->prof.nskip = 0;
	for (size_t i = 0; i < c->sym.nprefix_maps; i++)
		free(c->map_from[i]);
	c->sym.nprefix_maps = 0;
}

int ma_profcmd_prefix_map(const struct ma_opt *o, const char *value)
{
	struct ma_profcmd *c = o->ctx;
	const char *eq = strchr(value, '=');
	size_t n = c->sym.nprefix_maps;

	if (!eq || eq == value)
		return ma_cmd_error(c->cmd, MA_EXIT_USAGE, "bad --prefix-map '%s': expected OLD=NEW", value);
	if (n == MA_PROFCMD_MAX_LIST)
		return ma_cmd_error(c->cmd, MA_EXIT_USAGE, "at most %d --prefix-map options",
				    MA_PROFCMD_MAX_LIST);
	if (!(c->map_from[n] = strndup(value, (size_t)(eq - value))))
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "out of memory");
	c->maps[n].from = c->map_from[n];
	c->maps[n].to = eq + 1;
	c->sym.nprefix_maps++;
	return 0;
}

int ma_profcmd_skip(const struct ma_opt *o, const char *value)
{
	struct ma_profcmd *c = o->ctx;
	int e;

	if (c->prof.nskip == MA_PROFCMD_MAX_LIST)
		return ma_cmd_error(c->cmd, MA_EXIT_USAGE, "at most %d --skip options", MA_PROFCMD_MAX_LIST);
	e = regcomp(&c->skip[c->prof.nskip], value, REG_EXTENDED | REG_NOSUB);
	if (e) {
		char msg[128];

		regerror(e, &c->skip[c->prof.nskip], msg, sizeof(msg));
		return ma_cmd_error(c->cmd, MA_EXIT_USAGE, "bad --skip regex '%s': %s", value, msg);
	}
	c->prof.nskip++;
	return 0;
}



int ma_profcmd_load(struct ma_profcmd *c, struct ma_profbundle *b, const char *path)
{
	struct stat st;

	memset(b, 0, sizeof(*b));
	b->path = path;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return ma_cmd_error(c->cmd, MA_EXIT_USAGE,
				    "'%s' is a directory; snapshot directories are not supported yet, "
				    "pass the heap dump file inside it", path);
	/* Root reading another user's dump opens the files it names as that user. */
	if (geteuid() == 0 && stat(path, &st) == 0 && st.st_uid != 0) {
		c->sym.open_as = true;
		c->sym.as_uid = st.st_uid;
		c->sym.as_gid = st.st_gid;
	}
	if (c->sym.binary && access(c->sym.binary, R_OK) != 0)
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "cannot read --binary '%s': %s",
				    c->sym.binary, strerror(errno));
	if (ma_heapprof_load(&b->hp, path))
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	if (b->hp.maps_cut && !c->allow_truncated) {
		size_t nmaps = b->hp.nmaps;

		ma_heapprof_release(&b->hp);
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL,
				    "'%s' is cut inside MAPPED_LIBRARIES (%zu mappings read): frames in "
				    "the objects cut off would stay unnamed; take the dump again, or pass "
				    "--allow-truncated to report from what is there", path, nmaps);
	}
	if (b->hp.nwarnings)
		ma_cmd_note(c->cmd, "warning: %s%s", b->hp.warning,
			    b->hp.nwarnings > 1 ? " (and more problems in the file)" : "");
	if (ma_sym_init(&b->sym, &b->hp, &c->sym)) {
		ma_heapprof_release(&b->hp);
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	}
	if (ma_profile_build(&b->prof, &b->hp, &b->sym, &c->prof)) {
		ma_sym_release(&b->sym);
		ma_heapprof_release(&b->hp);
		return ma_cmd_error(c->cmd, MA_EXIT_FAIL, "%s", ma_errmsg());
	}
	if (b->sym.nwarnings)
		ma_cmd_note(c->cmd, "warning: %s", b->sym.warning);
	for (unsigned i = 0; i < b->sym.nalso; i++)
		ma_cmd_note(c->cmd, "warning: %s", b->sym.also[i]);
	if (c->sym.lines && ma_sym_no_lines_note(&b->sym))
		ma_cmd_note(c->cmd, "note: %s", b->sym.note);
	b->loaded = true;
	return 0;
}

void ma_profbundle_release(struct ma_profbundle *b)
{
	if (!b->loaded)
		return;
	ma_profile_release(&b->prof);
	ma_sym_release(&b->sym);
	ma_heapprof_release(&b->hp);
	b->loaded = false;
}
