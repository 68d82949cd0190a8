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

const char ma_profcmd_help[] =
	"symbols:\n"
	"  --binary PATH          use PATH for the dump's main executable (when the\n"
	"                         file in the dump is gone or was rebuilt)\n"
	"  --prefix-map OLD=NEW   read files under OLD from NEW instead (dumps taken\n"
	"                         in a container); repeatable\n"
	"  --lines                file:line and inlined functions (DWARF, slower)\n"
	"frames:\n"
	"  --keep-allocator-frames  keep jemalloc's own leading frames\n"
	"  --skip REGEX           also drop leading frames matching REGEX (extended\n"
	"                         regex on demangled or mangled names, e.g.\n"
	"                         'alloc::raw_vec|operator new'); repeatable\n"
	"input:\n"
	"  --allow-truncated      report from a dump cut inside MAPPED_LIBRARIES\n"
	"                         (refused otherwise: frames in the objects cut off\n"
	"                         would stay unnamed)\n";

void ma_profcmd_init(struct ma_profcmd *c, const char *cmd, long default_top)
{
	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	c->top = default_top;
	c->sym.prefix_maps = c->maps;
	c->prof.skip = c->skip;
}

bool ma_profcmd_wants_help(int argc, char **argv, void (*usage)(FILE *f))
{
	for (int i = 1; i < argc; i++)
		if (ma_is_help(argv[i])) {
			usage(stdout);
			return true;
		}
	return false;
}

void ma_profcmd_release(struct ma_profcmd *c)
{
	for (size_t i = 0; i < c->prof.nskip; i++)
		regfree(&c->skip[i]);
	c->prof.nskip = 0;
}

int ma_profcmd_value(const char *cmd, const char *name, int argc, char **argv, int *i,
		     const char **val)
{
	const char *a = argv[*i];
	size_t n = strlen(name);

	if (strncmp(a, name, n) != 0)
		return 0;
	if (a[n] == '=') {
		*val = a + n + 1;
		return 1;
	}
	if (a[n] != '\0')
		return 0;
	if (*i + 1 >= argc) {
		ma_cmd_error(cmd, MA_EXIT_USAGE, "%s needs a value; see --help", name);
		return -1;
	}
	*val = argv[++*i];
	return 1;
}

int ma_profcmd_opt(struct ma_profcmd *c, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	int r;

	if (strcmp(a, "--json") == 0) {
		c->json = true;
		return 1;
	}
	if (strcmp(a, "--lines") == 0) {
		c->sym.lines = true;
		return 1;
	}
	if (strcmp(a, "--allow-truncated") == 0) {
		c->allow_truncated = true;
		return 1;
	}
	if (strcmp(a, "--keep-allocator-frames") == 0) {
		c->prof.keep_allocator = true;
		return 1;
	}
	if ((r = ma_profcmd_value(c->cmd, "--binary", argc, argv, i, &v)) != 0) {
		if (r > 0)
			c->sym.binary = v;
		return r;
	}
	if ((r = ma_profcmd_value(c->cmd, "--top", argc, argv, i, &v)) != 0 ||
	    (r = ma_profcmd_value(c->cmd, "-n", argc, argv, i, &v)) != 0) {
		char *end;

		if (r < 0)
			return r;
		errno = 0;
		c->top = strtol(v, &end, 10);
		if (errno || *end || c->top < 0 || !*v) {
			ma_cmd_error(c->cmd, MA_EXIT_USAGE, "--top '%s': expected a count, 0 or more (0 = all)",
				     v);
			return -1;
		}
		if (c->top == 0) /* all, as in bins and frag */
			c->top = LONG_MAX;
		return 1;
	}
	if ((r = ma_profcmd_value(c->cmd, "--prefix-map", argc, argv, i, &v)) != 0) {
		const char *eq;

		if (r < 0)
			return r;
		eq = strchr(v, '=');
		if (!eq || eq == v) {
			ma_cmd_error(c->cmd, MA_EXIT_USAGE, "bad --prefix-map '%s': expected OLD=NEW", v);
			return -1;
		}
		if (c->sym.nprefix_maps == MA_PROFCMD_MAX_LIST) {
			ma_cmd_error(c->cmd, MA_EXIT_USAGE, "at most %d --prefix-map options", MA_PROFCMD_MAX_LIST);
			return -1;
		}
		/* Split in place: argv strings are ours to modify. */
		argv[*i][eq - argv[*i]] = '\0';
		c->maps[c->sym.nprefix_maps].from = argv[*i] + (v - argv[*i]);
		c->maps[c->sym.nprefix_maps].to = eq + 1;
		c->sym.nprefix_maps++;
		return 1;
	}
	if ((r = ma_profcmd_value(c->cmd, "--skip", argc, argv, i, &v)) != 0) {
		int e;

		if (r < 0)
			return r;
		if (c->prof.nskip == MA_PROFCMD_MAX_LIST) {
			ma_cmd_error(c->cmd, MA_EXIT_USAGE, "at most %d --skip options", MA_PROFCMD_MAX_LIST);
			return -1;
		}
		e = regcomp(&c->skip[c->prof.nskip], v, REG_EXTENDED | REG_NOSUB);
		if (e) {
			char msg[128];

			regerror(e, &c->skip[c->prof.nskip], msg, sizeof(msg));
			ma_cmd_error(c->cmd, MA_EXIT_USAGE, "bad --skip regex '%s': %s", v, msg);
			return -1;
		}
		c->prof.nskip++;
		return 1;
	}
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
