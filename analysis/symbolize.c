/*
 * symbolize.c - pcs of a heap dump -> frames -> functions, cached.
 */
#include <fcntl.h>
#include <sys/fsuid.h>
#include <grp.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <zlib.h>

#include "demangle.h"
#include "ma_error.h"
#include "symbolize.h"

/* Keep TEXT (of kind FMT) among the other problems, unless one of its kind is there. */
static void also_warn(struct ma_symbolizer *s, const char *fmt, const char *text)
{
	if (fmt == s->warning_fmt)
		return;
	for (unsigned i = 0; i < s->nalso; i++)
		if (fmt == s->also_fmt[i])
			return;
	if (s->nalso < 2) {
		s->also_fmt[s->nalso] = fmt;
		snprintf(s->also[s->nalso++], sizeof(s->also[0]), "%s", text);
	}
}

static void vwarn(struct ma_symbolizer *s, bool about_main, const char *fmt, va_list ap)
{
	char text[512];

	vsnprintf(text, sizeof(text), fmt, ap);
	/* The first problem is kept, but one about the main executable goes first (--binary's). */
	if (s->nwarnings++ == 0) {
		snprintf(s->warning, sizeof(s->warning), "%s", text);
		s->warning_fmt = fmt;
		s->warning_main = about_main;
	} else if (about_main && !s->warning_main) {
		also_warn(s, s->warning_fmt, s->warning);
		snprintf(s->warning, sizeof(s->warning), "%s", text);
		s->warning_fmt = fmt;
		s->warning_main = true;
	} else {
		also_warn(s, fmt, text);
	}
}

static void warn(struct ma_symbolizer *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct ma_symbolizer *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(s, false, fmt, ap);
	va_end(ap);
}

/* A problem with object O's file. */
static void warn_obj(struct ma_symbolizer *s, const struct ma_symobj *o, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void warn_obj(struct ma_symbolizer *s, const struct ma_symobj *o, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn(s, o->main, fmt, ap);
	va_end(ap);
}

static const char *base_name(const char *p)
{
	const char *b = strrchr(p, '/');

	return b ? b + 1 : p;
}

/* jemalloc's own functions, for statically linked jemalloc (where there is
 * no separate library whose address range we could drop). */
bool ma_sym_is_allocator_name(const char *n)
{
	static const char *const exact[] = {
		"malloc", "calloc", "realloc", "free", "mallocx", "rallocx", "xallocx",
		"sdallocx", "dallocx", "posix_memalign", "aligned_alloc", "memalign",
		"valloc", "pvalloc", "malloc_default", "do_rallocx", "imalloc",
		"imalloc_body", "ialloc", "prof_backtrace", "prof_backtrace_impl",
		"prof_tctx_create", "prof_alloc_prep", "prof_malloc_sample_object",
		"ifree", "isfree", "malloc_usable_size", "irealloc_prof", "irallocx_prof",
		"ialloc_prof", "imalloc_prof",
		/* operator new / new[] (nothrow, aligned) from jemalloc_cpp.cpp */
		"_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
		"_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
		"_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
	};

	if (!n)
		return false;
	if (strncmp(n, "je_", 3) == 0 || strncmp(n, "_rjem_", 6) == 0 ||
	    strncmp(n, "_ZN12_GLOBAL__N_17newImpl", 25) == 0 || strncmp(n, "_Z7newImpl", 10) == 0 ||
	    strncmp(n, "_ZL7newImpl", 11) == 0 || strncmp(n, "_ZL10handleOOM", 14) == 0)
		return true;
	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
		if (strcmp(n, exact[i]) == 0)
			return true;
	return false;
}

static char *remap_path(const struct ma_sym_opts *o, const char *p)
{
	for (size_t i = 0; i < o->nprefix_maps; i++) {
		size_t n = strlen(o->prefix_maps[i].from);

		if (n && strncmp(p, o->prefix_maps[i].from, n) == 0) {
			char *r = malloc(strlen(o->prefix_maps[i].to) + strlen(p + n) + 1);

			if (r)
				sprintf(r, "%s%s", o->prefix_maps[i].to, p + n);
			return r;
		}
	}
	return strdup(p);
}

/* Does one of --prefix-map's OLD prefixes name P? */
static bool prefix_mapped(const struct ma_sym_opts *o, const char *p)
{
	for (size_t i = 0; i < o->nprefix_maps; i++) {
		size_t n = strlen(o->prefix_maps[i].from);

		if (n && strncmp(p, o->prefix_maps[i].from, n) == 0)
			return true;
	}
	return false;
}

int ma_sym_init(struct ma_symbolizer *s, const struct ma_heapprof *hp,
		const struct ma_sym_opts *opts)
{
	size_t main_map = SIZE_MAX;

	memset(s, 0, sizeof(*s));
	s->hp = hp;
	if (opts)
		s->opts = *opts;
	if (s->opts.lines)
		s->opts.per_pc = true; /* file:line is per address */
	s->map_obj = malloc((hp->nmaps ? hp->nmaps : 1) * sizeof(uint32_t));
	s->objs = calloc(hp->nmaps + 1, sizeof(*s->objs));
	s->pc_cap = 1 << 12;
	s->pc_keys = calloc(s->pc_cap, sizeof(uint64_t));
	s->pc_vals = malloc(s->pc_cap * sizeof(uint32_t));
	s->fn_cap = 1 << 12;
	s->fn_slots = malloc(s->fn_cap * sizeof(uint32_t));
	if (!s->map_obj || !s->objs || !s->pc_keys || !s->pc_vals || !s->fn_slots) {
		ma_sym_release(s);
		return ma_fail(MA_E_NOMEM, "out of memory");
	}
	memset(s->fn_slots, 0xff, s->fn_cap * sizeof(uint32_t));
	for (size_t i = 0; i < hp->nmaps; i++) {
		const char *p = hp->maps[i].path;
		size_t j;

		s->map_obj[i] = MA_NONE;
		if (!p || p[0] != '/')
			continue; /* anonymous, [vdso], [heap], memfd:... */
		if (main_map == SIZE_MAX)
			main_map = i; /* the lowest file mapping: the executable */
		for (j = 0; j < s->nobjs; j++)
			if (strcmp(s->objs[j].dump_path, p) == 0)
				break;
		if (j == s->nobjs) {
			struct ma_symobj *o = &s->objs[s->nobjs++];
			char *del;

			o->dump_path = strdup(p);
			o->main = (i == main_map);
			o->first_map = i;
			if (o->main && s->opts.binary)
				o->path = strdup(s->opts.binary);
			else
				o->path = remap_path(&s->opts, p);
			o->named = (o->main && s->opts.binary) || prefix_mapped(&s->opts, p);
			if (!o->dump_path || !o->path) {
				ma_sym_release(s);
				return ma_fail(MA_E_NOMEM, "out of memory");
			}
			/* The file was replaced or deleted after the process started. */
			del = strstr(o->path, " (deleted)");
			if (del && del[10] == '\0')
				*del = '\0';
			/*
			 * memattach's own agent (profile, frag) is an allocator
			 * frame too: its wrappers stand between a program and
			 * jemalloc, in jemalloc's own backtraces as well.
			 */
			o->agent = strncmp(base_name(p), "memfd:memattach-agent", 21) == 0;
			o->jemalloc = strncmp(base_name(p), "libjemalloc", 11) == 0 || o->agent;
			o->elf.fd = o->debug.fd = -1;
		}
		s->map_obj[i] = (uint32_t)j;
	}
	if (hp->nmaps == 0 && s->opts.binary) {
		/* No MAPPED_LIBRARIES (truncated dump): take pcs as link-time
		 * addresses of --binary, right for non-PIE executables. */
		struct ma_symobj *o = &s->objs[s->nobjs++];

		o->dump_path = strdup(s->opts.binary);
		o->path = strdup(s->opts.binary);
		o->main = true;
		o->elf.fd = o->debug.fd = -1;
		if (!o->dump_path || !o->path) {
			ma_sym_release(s);
			return ma_fail(MA_E_NOMEM, "out of memory");
		}
	}
	return 0;
}

void ma_sym_release(struct ma_symbolizer *s)
{
	for (size_t i = 0; i < s->nobjs; i++) {
		struct ma_symobj *o = &s->objs[i];

		if (o->ok)
			ma_elf_release(&o->elf);
		if (o->has_debug)
			ma_elf_release(&o->debug);
		if (o->dwfl)
			dwfl_end(o->dwfl);
		free(o->elf_funcs);
		free(o->debug_funcs);
		free(o->ahead);
		free(o->dump_path);
		free(o->path);
	}
	for (size_t i = 0; i < s->nfuncs; i++) {
		free(s->funcs[i].key);
		free(s->funcs[i].name);
	}
	for (size_t i = 0; i < s->nstrings; i++)
		free(s->strings[i]);
	free(s->strings);
	free(s->objs);
	free(s->map_obj);
	free(s->frames);
	free(s->funcs);
	free(s->pc_keys);
	free(s->pc_vals);
	free(s->fn_slots);
	memset(s, 0, sizeof(*s));
}

/* The CRC-32 of the whole file FD (zlib's, the one .gnu_debuglink records). */
static bool file_crc32(int fd, uint32_t *crc)
{
	unsigned char buf[65536];
	uLong c = crc32(0L, Z_NULL, 0);
	off_t off = 0;
	ssize_t n;

	while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
		c = crc32(c, buf, (uInt)n);
		off += n;
	}
	*crc = (uint32_t)c;
	return n == 0;
}

/*
 * Is DEBUG the debug file of ELF?  The same build id; for an object
 * without one, the CRC its .gnu_debuglink records.  Never "no id, so
 * yes": the paths tried come from a target's maps and its own debug
 * link, and any ELF file put there (a link to a file only root may read)
 * would lend its symbols to the report.
 */
static bool is_debug_file_of(const struct ma_elf *elf, const struct ma_elf *debug)
{
	uint32_t crc;

	if (elf->build_id_len)
		return debug->build_id_len == elf->build_id_len &&
		       memcmp(elf->build_id, debug->build_id, elf->build_id_len) == 0;
	return elf->has_debuglink_crc && debug->fd >= 0 && file_crc32(debug->fd, &crc) &&
	       crc == elf->debuglink_crc;
}

static bool try_debug(struct ma_symobj *o, const char *path)
{
	if (access(path, R_OK) != 0)
		return false;
	if (ma_elf_open(&o->debug, path) != 0) {
		ma_err_clear();
		return false;
	}
	if (!o->debug.has_symtab || !is_debug_file_of(&o->elf, &o->debug)) {
		ma_elf_release(&o->debug);
		return false;
	}
	o->has_debug = true;
	return true;
}

/* A stripped file: look for its separate debug file, like gdb and libdwfl. */
static void find_debug(struct ma_symobj *o)
{
	char p[4600], dir[4096];
	const char *slash;

	if (o->elf.build_id_len >= 2) {
		int n = snprintf(p, sizeof(p), "/usr/lib/debug/.build-id/%02x/", o->elf.build_id[0]);

		for (size_t i = 1; i < o->elf.build_id_len && n + 3 < (int)sizeof(p); i++)
			n += snprintf(p + n, sizeof(p) - (size_t)n, "%02x", o->elf.build_id[i]);
		snprintf(p + n, sizeof(p) - (size_t)n, ".debug");
		if (try_debug(o, p))
			return;
	}
	/* A bare file name, as the format says: never a path out of the object's folder. */
	if (!o->elf.debuglink || strchr(o->elf.debuglink, '/'))
		return;
	slash = strrchr(o->path, '/');
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - o->path) : 1, slash ? o->path : ".");
	snprintf(p, sizeof(p), "%s/%.255s", dir, o->elf.debuglink);
	if (strcmp(p, o->path) != 0 && try_debug(o, p))
		return;
	snprintf(p, sizeof(p), "%s/.debug/%.255s", dir, o->elf.debuglink);
	if (try_debug(o, p))
		return;
	snprintf(p, sizeof(p), "/usr/lib/debug%.4000s/%.255s", dir, o->elf.debuglink);
	try_debug(o, p);
}

static int open_obj_elf(struct ma_symbolizer *s, struct ma_symobj *o, bool *by_path)
{
	int fd = -1;

	if (s->opts.open_map && o->first_map < s->hp->nmaps)
		fd = s->opts.open_map(s->opts.open_ctx, &s->hp->maps[o->first_map]);
	*by_path = fd < 0;
	return fd >= 0 ? ma_elf_open_fd(&o->elf, fd, o->path) : ma_elf_open(&o->elf, o->path);
}

/*
 * Is the file opened for O another one than the dump mapped: the same
 * path, the same device, another inode (rebuilt or replaced since)?  Its
 * symbols would name the dump's addresses wrongly.  Not judged when the
 * user named the file (--binary, --prefix-map: a copy, or the file itself
 * vouched for) or the dump does not say (no inode, another device).
 */
static bool replaced_since_dump(const struct ma_symbolizer *s, const struct ma_symobj *o,
				uint64_t *then, uint64_t *now)
{
	const struct ma_hp_map *m = o->first_map < s->hp->nmaps ? &s->hp->maps[o->first_map] : NULL;
	struct stat st;

	if (!m || !m->inode || o->named || o->elf.fd < 0 ||
	    fstat(o->elf.fd, &st) != 0)
		return false;
	if (major(st.st_dev) != m->dev_major || minor(st.st_dev) != m->dev_minor)
		return false;
	*then = m->inode;
	*now = (uint64_t)st.st_ino;
	return st.st_ino != m->inode;
}

/*
 * Open the files of a dump as its owner would (opts.open_as): a dump is
 * written by the target's jemalloc, and one that names a file only root
 * may read would otherwise lend root's read right to whoever wrote it.
 * Only the file-system identity changes (fsuid, fsgid, groups), and only
 * while opening.
 */
static void open_as_owner(const struct ma_sym_opts *o, bool on)
{
	static gid_t saved[256];
	static int nsaved = -1;

	if (!o->open_as)
		return;
	if (on) {
		/* groups restored only if read (more than 256: left as they are) */
		nsaved = getgroups(256, saved);
		if (nsaved >= 0 && setgroups(1, &o->as_gid) != 0)
			nsaved = -1;
		setfsgid(o->as_gid);
		setfsuid(o->as_uid);
	} else {
		setfsuid(geteuid());
		setfsgid(getegid());
		if (nsaved >= 0)
			setgroups((size_t)nsaved, saved);
	}
}

static bool load_obj(struct ma_symbolizer *s, struct ma_symobj *o)
{
	uint64_t then = 0, now = 0;
	bool by_path = true;
	int rc;

	if (o->tried)
		return o->ok;
	o->tried = true;
	if (o->agent)
		return false; /* unnamed, and no warning: its frames are dropped as the allocator's */
	open_as_owner(&s->opts, true);
	rc = open_obj_elf(s, o, &by_path);
	if (!rc && !o->elf.has_symtab)
		find_debug(o);
	open_as_owner(&s->opts, false);
	if (rc != 0) {
		if (o->main && !s->opts.binary)
			warn_obj(s, o, "%s; frames in it stay unnamed (use --binary PATH%s)", ma_errmsg(),
			     s->opts.nprefix_maps ? "" : " or --prefix-map OLD=NEW");
		else
			warn_obj(s, o, "%s; frames in it stay unnamed%s", ma_errmsg(),
			     s->opts.nprefix_maps ? "" : " (use --prefix-map OLD=NEW)");
		ma_err_clear();
		o->elf.fd = -1;
		return false;
	}
	if (by_path && replaced_since_dump(s, o, &then, &now)) {
		warn_obj(s, o, "'%s' is not the file the dump mapped (inode %" PRIu64 " then, %" PRIu64
		     " now: rebuilt or replaced since); frames in it stay unnamed (%s)", o->path,
		     then, now, o->main ? "use --binary PATH with a copy of that build, or the file "
					  "itself if it is the same build"
				       : "--prefix-map DIR=DIR names it anyway, if it is the same build");
		ma_elf_release(&o->elf);
		if (o->has_debug)
			ma_elf_release(&o->debug);
		o->has_debug = false;
		o->elf.fd = o->debug.fd = -1;
		return false;
	}
	o->ok = true;
	if (!o->elf.has_symtab && !o->has_debug && !o->elf.has_dynsym)
		warn_obj(s, o, "'%s' has no symbols; frames in it stay unnamed", o->path);
	return true;
}

static uint64_t hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t hash_str(const char *p)
{
	uint64_t h = 1469598103934665603ULL;

	while (*p)
		h = (h ^ (unsigned char)*p++) * 1099511628211ULL;
	return h;
}

static int fn_rehash(struct ma_symbolizer *s)
{
	size_t ncap = s->fn_cap * 2;
	uint32_t *n = malloc(ncap * sizeof(uint32_t));

	if (!n)
		return -1;
	memset(n, 0xff, ncap * sizeof(uint32_t));
	for (size_t i = 0; i < s->nfuncs; i++) {
		size_t h = hash_str(s->funcs[i].key) & (ncap - 1);

		while (n[h] != MA_NONE)
			h = (h + 1) & (ncap - 1);
		n[h] = (uint32_t)i;
	}
	free(s->fn_slots);
	s->fn_slots = n;
	s->fn_cap = ncap;
	return 0;
}

/* Function with KEY (copied if new). */
static uint32_t intern_func(struct ma_symbolizer *s, const char *key, uint32_t obj, bool alloc)
{
	size_t h;

	if ((s->nfuncs + 1) * 2 > s->fn_cap && fn_rehash(s))
		return MA_NONE;
	h = hash_str(key) & (s->fn_cap - 1);
	while (s->fn_slots[h] != MA_NONE) {
		if (strcmp(s->funcs[s->fn_slots[h]].key, key) == 0)
			return s->fn_slots[h];
		h = (h + 1) & (s->fn_cap - 1);
	}
	if (s->nfuncs == s->cap_funcs) {
		size_t nc = s->cap_funcs ? s->cap_funcs * 2 : 1024;
		struct ma_func *n = realloc(s->funcs, nc * sizeof(*n));

		if (!n)
			return MA_NONE;
		s->funcs = n;
		s->cap_funcs = nc;
	}
	s->funcs[s->nfuncs] =
		(struct ma_func){ .key = strdup(key), .obj = obj, .frame = MA_NONE, .allocator = alloc };
	if (!s->funcs[s->nfuncs].key)
		return MA_NONE;
	s->fn_slots[h] = (uint32_t)s->nfuncs;
	return (uint32_t)s->nfuncs++;
}

static uint32_t new_frame(struct ma_symbolizer *s, uint32_t func, uint32_t obj, uint64_t addr)
{
	if (func == MA_NONE)
		return MA_NONE;
	if (s->nframes == s->cap_frames) {
		size_t nc = s->cap_frames ? s->cap_frames * 2 : 4096;
		struct ma_frame *n = realloc(s->frames, nc * sizeof(*n));

		if (!n)
			return MA_NONE;
		s->frames = n;
		s->cap_frames = nc;
	}
	s->frames[s->nframes] = (struct ma_frame){
		.func = func, .obj = obj, .inline_next = MA_NONE, .addr = addr, .pc = s->cur_pc,
	};
	return (uint32_t)s->nframes++;
}

static const char *keep_string(struct ma_symbolizer *s, const char *str)
{
	char *c;

	if (!str)
		return NULL;
	/* The same file names repeat: reuse the last few. */
	for (size_t i = s->nstrings; i-- > 0 && i + 8 >= s->nstrings;)
		if (strcmp(s->strings[i], str) == 0)
			return s->strings[i];
	if (s->nstrings == s->cap_strings) {
		size_t nc = s->cap_strings ? s->cap_strings * 2 : 64;
		char **n = realloc(s->strings, nc * sizeof(*n));

		if (!n)
			return NULL;
		s->strings = n;
		s->cap_strings = nc;
	}
	c = strdup(str);
	if (c)
		s->strings[s->nstrings++] = c;
	return c;
}

/*
 * libdw's debug file: the one find_debug already opened (a regular file,
 * by our rules), never one libdw would look up by path itself -- paths
 * next to a target's object are in folders its owner may control.
 */
static int our_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
			 Dwarf_Addr base, const char *file_name, const char *debuglink_file,
			 GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	struct ma_symobj *o = *userdata;

	(void)mod, (void)modname, (void)base, (void)file_name, (void)debuglink_file;
	(void)debuglink_crc, (void)debuginfo_file_name;
	return o && o->has_debug && o->debug.fd >= 0 ? fcntl(o->debug.fd, F_DUPFD_CLOEXEC, 0) : -1;
}

static void *dwfl_open(struct ma_symobj *o)
{
	static char *debuginfo_path = NULL;
	static const Dwfl_Callbacks cb = {
		.find_elf = dwfl_build_id_find_elf,
		.find_debuginfo = our_debuginfo,
		.section_address = dwfl_offline_section_address,
		.debuginfo_path = &debuginfo_path,
	};
	Dwfl *d;
	Dwfl_Module *m;
	Dwarf_Addr bias = 0;
	void **userdata = NULL;
	int fd = o->elf.fd >= 0 ? fcntl(o->elf.fd, F_DUPFD_CLOEXEC, 0) : -1;

	if (fd < 0 || !(d = dwfl_begin(&cb))) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	/* The object's own descriptor (libdw takes it), not its path again. */
	m = dwfl_report_offline(d, base_name(o->path), o->path, fd);
	dwfl_report_end(d, NULL, NULL);
	if (m && dwfl_module_info(m, &userdata, NULL, NULL, NULL, NULL, NULL, NULL) && userdata)
		*userdata = o;
	if (!m || !dwfl_module_getelf(m, &bias)) {
		dwfl_end(d);
		return NULL;
	}
	o->dwmod = m;
	o->dwbias = bias;
	return d;
}

static const char *die_name(Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *n;

	n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
	if (!n)
		n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
	if (!n)
		n = dwarf_diename(die);
	return n;
}

/*
 * The inlined_subroutine DIEs containing PC under PARENT, outermost first,
 * into OUT[N..MAX).  Walked by hand: dwarf_getscopes misses functions
 * nested in namespace DIEs (all of Rust's).
 */
static int inlined_at(Dwarf_Die *parent, Dwarf_Addr pc, Dwarf_Die *out, int n, int max, int depth)
{
	Dwarf_Die c;

	if (depth > 64 || dwarf_child(parent, &c) != 0)
		return n;
	do {
		int t = dwarf_tag(&c), m;

		if (t == DW_TAG_subprogram || t == DW_TAG_inlined_subroutine || t == DW_TAG_lexical_block) {
			if (dwarf_haspc(&c, pc) > 0) {
				if (t == DW_TAG_inlined_subroutine && n < max)
					out[n++] = c;
				return inlined_at(&c, pc, out, n, max, depth + 1);
			}
		} else if (t == DW_TAG_namespace || t == DW_TAG_structure_type || t == DW_TAG_class_type ||
			   t == DW_TAG_union_type || t == DW_TAG_enumeration_type) {
			m = inlined_at(&c, pc, out, n, max, depth + 1);
			if (m != n)
				return m;
		}
	} while (dwarf_siblingof(&c, &c) == 0);
	return n;
}

/*
 * --lines: turn frame F (the whole function at ADDR) into the chain of
 * inlined frames at ADDR, innermost first, each with its file:line.
 * Returns the innermost frame (F itself when nothing is inlined).
 */
static uint32_t add_lines(struct ma_symbolizer *s, uint32_t f, uint32_t oi)
{
	struct ma_symobj *o = &s->objs[oi];
	Dwarf_Addr a, cubias = 0;
	Dwarf_Die *cu, scopes[64];
	Dwfl_Line *line;
	const char *file = NULL;
	int lineno = 0, n;
	uint32_t first = f, prev = MA_NONE;

	if (!o->dwfl)
		o->dwfl = dwfl_open(o);
	if (!o->dwfl) {
		o->lines_missing = true;
		return f;
	}
	a = s->frames[f].addr + o->dwbias;
	line = dwfl_module_getsrc(o->dwmod, a);
	if (line)
		file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
	cu = dwfl_module_addrdie(o->dwmod, a, &cubias);
	n = cu ? inlined_at(cu, a - cubias, scopes, 0, 64, 0) : 0;
	/* Innermost first; each inlined_subroutine is a frame whose caller's
	 * line is its DW_AT_call_line. */
	for (int i = n - 1; i >= 0; i--) {
		Dwarf_Attribute at;
		Dwarf_Word cl = 0, cf = 0;
		const char *name;
		uint32_t nf;

		name = die_name(&scopes[i]);
		nf = new_frame(s, intern_func(s, name ? name : "??", oi, false), oi, s->frames[f].addr);
		if (nf == MA_NONE)
			break;
		s->frames[nf].file = keep_string(s, file);
		s->frames[nf].line = lineno;
		if (prev == MA_NONE)
			first = nf;
		else
			s->frames[prev].inline_next = nf;
		prev = nf;
		/* The caller continues at this inlined call's call site. */
		if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &at), &cl) == 0)
			lineno = (int)cl;
		if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &at), &cf) == 0) {
			Dwarf_Files *files;
			size_t nfiles;
			Dwarf_Die cudie;

			if (dwarf_diecu(&scopes[i], &cudie, NULL, NULL) &&
			    dwarf_getsrcfiles(&cudie, &files, &nfiles) == 0 && cf < nfiles)
				file = dwarf_filesrc(files, cf, NULL, NULL);
		}
	}
	s->frames[f].file = keep_string(s, file);
	s->frames[f].line = lineno;
	if (prev != MA_NONE)
		s->frames[prev].inline_next = f;
	if (file)
		o->lines_found = true;
	else
		o->lines_missing = true;
	return first;
}

/*
 * The function of symbol SYM of ELF E (object O, index OI), cached per
 * symbol: a long mangled name is hashed and compared once, not once per
 * return address in it.
 */
static uint32_t func_of_sym(struct ma_symbolizer *s, struct ma_symobj *o, uint32_t oi,
			    const struct ma_elf *e, const struct ma_elf_sym *sym)
{
	uint32_t **cache = e == &o->debug ? &o->debug_funcs : &o->elf_funcs;
	size_t i = (size_t)(sym - e->syms);
	uint32_t f;

	/* A symbol looked up ahead is no entry of a loaded table. */
	if (!e->loaded || sym < e->syms || sym >= e->syms + e->nsyms)
		return intern_func(s, sym->name, oi, o->jemalloc || ma_sym_is_allocator_name(sym->name));
	if (!*cache && e->nsyms && (*cache = malloc(e->nsyms * sizeof(uint32_t))))
		memset(*cache, 0xff, e->nsyms * sizeof(uint32_t));
	if (*cache && (*cache)[i] != MA_NONE)
		return (*cache)[i];
	f = intern_func(s, sym->name, oi, o->jemalloc || ma_sym_is_allocator_name(sym->name));
	if (*cache)
		(*cache)[i] = f;
	return f;
}

static int cmp_ahead(const void *a, const void *b)
{
	const struct ma_sym_ahead *x = a, *y = b;

	return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

static const struct ma_sym_ahead *ahead_of(const struct ma_symobj *o, uint64_t vaddr)
{
	struct ma_sym_ahead key = { .vaddr = vaddr };

	return o->nahead ? bsearch(&key, o->ahead, o->nahead, sizeof(key), cmp_ahead) : NULL;
}

/* The symbol covering link-time VADDR of O (its debug file's first), *SE the ELF it is from. */
static const struct ma_elf_sym *sym_of(struct ma_symobj *o, uint64_t vaddr,
				       const struct ma_elf **se)
{
	const struct ma_sym_ahead *h = ahead_of(o, vaddr);
	const struct ma_elf_sym *sym = NULL;

	if (h) {
		*se = h->from_debug ? &o->debug : &o->elf;
		return h->found ? &h->sym : NULL;
	}
	if (o->has_debug && (sym = ma_elf_sym_at(&o->debug, vaddr)))
		*se = &o->debug;
	if (!sym && (sym = ma_elf_sym_at(&o->elf, vaddr)))
		*se = &o->elf;
	return sym;
}

static uint32_t symbolize(struct ma_symbolizer *s, uint64_t pc)
{
	const struct ma_hp_map *m = ma_heapprof_map_at(s->hp, pc);
	uint64_t a = pc ? pc - 1 : 0, vaddr = a;
	uint32_t oi = MA_NONE;
	struct ma_symobj *o = NULL;
	const struct ma_elf_sym *sym = NULL;
	const struct ma_elf *se = NULL; /* the ELF SYM is from */
	char key[4200];
	uint32_t f, fn;

	s->cur_pc = a;
	if (m && s->map_obj[m - s->hp->maps] != MA_NONE) {
		oi = s->map_obj[m - s->hp->maps];
		o = &s->objs[oi];
		vaddr = a - m->start + m->offset; /* file offset for now */
		if (load_obj(s, o) && ma_elf_offset_to_vaddr(&o->elf, vaddr, &vaddr) == 0)
			sym = sym_of(o, vaddr, &se);
	} else if (!m && s->hp->nmaps > 0) {
		warn(s, "address 0x%" PRIx64 " is in none of the mappings the dump lists (was its "
			"MAPPED_LIBRARIES cut short?); frames there stay unnamed", pc);
	} else if (!m && s->hp->nmaps == 0 && s->nobjs == 1) {
		oi = 0;
		o = &s->objs[0];
		if (load_obj(s, o))
			sym = sym_of(o, a, &se);
	}
	if (sym) {
		fn = func_of_sym(s, o, oi, se, sym);
	} else {
		if (o)
			snprintf(key, sizeof(key), "%s+0x%" PRIx64, base_name(o->dump_path), vaddr);
		else
			snprintf(key, sizeof(key), "0x%" PRIx64, pc);
		fn = intern_func(s, key, oi, o && o->jemalloc);
	}
	if (fn == MA_NONE)
		return MA_NONE;
	if (!s->opts.per_pc && s->funcs[fn].frame != MA_NONE)
		return s->funcs[fn].frame;
	f = new_frame(s, fn, oi, vaddr);
	if (f != MA_NONE && s->funcs[fn].frame == MA_NONE)
		s->funcs[fn].frame = f;
	if (f != MA_NONE && sym) {
		s->frames[f].sym_off = vaddr - sym->addr;
		s->frames[f].named = true;
	}
	if (f != MA_NONE && s->opts.lines && o && o->ok && !o->jemalloc)
		f = add_lines(s, f, oi);
	return f;
}

/* The link-time address of return address PC in its object (*OI), or false. */
static bool obj_vaddr(struct ma_symbolizer *s, uint64_t pc, uint32_t *oi, uint64_t *vaddr)
{
	const struct ma_hp_map *m = ma_heapprof_map_at(s->hp, pc);
	uint64_t a = pc ? pc - 1 : 0;

	if (m && s->map_obj[m - s->hp->maps] != MA_NONE) {
		*oi = s->map_obj[m - s->hp->maps];
		return load_obj(s, &s->objs[*oi]) &&
		       ma_elf_offset_to_vaddr(&s->objs[*oi].elf, a - m->start + m->offset, vaddr) == 0;
	}
	if (!m && s->hp->nmaps == 0 && s->nobjs == 1) {
		*oi = 0;
		*vaddr = a;
		return load_obj(s, &s->objs[0]);
	}
	return false;
}

static size_t table_entries(const struct ma_elf *e)
{
	size_t n = 0;

	for (size_t k = 0; k < e->ntables; k++)
		n += e->tables[k].n;
	return n;
}

/*
 * Look up O's addresses AHEAD[0..N) (sorted, unique): in the debug file
 * first, then in the object for what it does not have.  Where they are
 * many for the tables, loading these (sorted) is as cheap and serves all.
 */
static int look_ahead(struct ma_symobj *o, struct ma_sym_ahead *ahead, size_t n)
{
	uint64_t *v = malloc((n ? n : 1) * sizeof(*v));
	struct ma_elf_sym *sym = malloc((n ? n : 1) * sizeof(*sym));
	bool *found = malloc((n ? n : 1) * sizeof(*found));
	int rc = v && sym && found ? 0 : ma_fail(MA_E_NOMEM, "out of memory");

	for (int pass = 0; !rc && pass < 2; pass++) {
		struct ma_elf *e = pass == 0 ? &o->debug : &o->elf;
		size_t nv = 0;

		if (pass == 0 && !o->has_debug)
			continue;
		for (size_t i = 0; i < n; i++)
			if (!ahead[i].found)
				v[nv++] = ahead[i].vaddr;
		if (!nv)
			break;
		if (nv > table_entries(e) / 32 && ma_elf_load_syms(e))
			ma_err_clear(); /* then one pass */
		if ((rc = ma_elf_syms_at(e, v, nv, sym, found)))
			break;
		for (size_t i = 0, k = 0; i < n; i++) {
			if (ahead[i].found)
				continue;
			ahead[i].found = found[k];
			ahead[i].from_debug = pass == 0;
			if (found[k])
				ahead[i].sym = sym[k];
			k++;
		}
	}
	free(v);
	free(sym);
	free(found);
	return rc;
}

static int cmp_obj_vaddr(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

int ma_sym_prepare(struct ma_symbolizer *s, const uint64_t *pcs, size_t n)
{
	uint64_t (*ov)[2] = malloc((n ? n : 1) * sizeof(*ov)); /* object, vaddr */
	size_t nov = 0;
	int rc = 0;

	if (!ov)
		return ma_fail(MA_E_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		uint32_t oi;
		uint64_t vaddr;

		if (obj_vaddr(s, pcs[i], &oi, &vaddr) && !ahead_of(&s->objs[oi], vaddr)) {
			ov[nov][0] = oi;
			ov[nov++][1] = vaddr;
		}
	}
	qsort(ov, nov, sizeof(*ov), cmp_obj_vaddr);
	for (size_t i = 0, j; !rc && i < nov; i = j) {
		struct ma_symobj *o = &s->objs[ov[i][0]];
		struct ma_sym_ahead *a;
		size_t na = o->nahead;

		for (j = i; j < nov && ov[j][0] == ov[i][0]; j++)
			;
		if (!(a = realloc(o->ahead, (na + (j - i)) * sizeof(*a)))) {
			rc = ma_fail(MA_E_NOMEM, "out of memory");
			break;
		}
		o->ahead = a;
		for (size_t k = i; k < j; k++)
			if (k == i || ov[k][1] != ov[k - 1][1])
				a[na++] = (struct ma_sym_ahead){ .vaddr = ov[k][1] };
		rc = look_ahead(o, a + o->nahead, na - o->nahead);
		if (rc)
			break;
		o->nahead = na;
		qsort(o->ahead, o->nahead, sizeof(*o->ahead), cmp_ahead);
	}
	free(ov);
	return rc;
}

static int pc_rehash(struct ma_symbolizer *s)
{
	size_t ncap = s->pc_cap * 2;
	uint64_t *k = calloc(ncap, sizeof(uint64_t));
	uint32_t *v = malloc(ncap * sizeof(uint32_t));

	if (!k || !v) {
		free(k);
		free(v);
		return -1;
	}
	for (size_t i = 0; i < s->pc_cap; i++) {
		size_t h;

		if (!s->pc_keys[i])
			continue;
		h = hash64(s->pc_keys[i]) & (ncap - 1);
		while (k[h])
			h = (h + 1) & (ncap - 1);
		k[h] = s->pc_keys[i];
		v[h] = s->pc_vals[i];
	}
	free(s->pc_keys);
	free(s->pc_vals);
	s->pc_keys = k;
	s->pc_vals = v;
	s->pc_cap = ncap;
	return 0;
}

uint32_t ma_sym_pc(struct ma_symbolizer *s, uint64_t pc)
{
	uint64_t key = pc + 1; /* 0 marks an empty slot; pc ~0 is not a pc */
	size_t h;
	uint32_t f;

	/* One frame per function: two binary searches and the per-symbol cache
	 * are cheaper than a table of every address. */
	if (!s->opts.per_pc)
		return symbolize(s, pc);
	h = hash64(key) & (s->pc_cap - 1);
	while (s->pc_keys[h]) {
		if (s->pc_keys[h] == key)
			return s->pc_vals[h];
		h = (h + 1) & (s->pc_cap - 1);
	}
	f = symbolize(s, pc);
	if (f == MA_NONE)
		return MA_NONE;
	if ((s->pc_used + 1) * 2 > s->pc_cap) {
		if (pc_rehash(s))
			return f;
		h = hash64(key) & (s->pc_cap - 1);
		while (s->pc_keys[h])
			h = (h + 1) & (s->pc_cap - 1);
	}
	s->pc_keys[h] = key;
	s->pc_vals[h] = f;
	s->pc_used++;
	return f;
}

const char *ma_sym_func_name(struct ma_symbolizer *s, uint32_t f)
{
	struct ma_func *fn = &s->funcs[f];

	if (!fn->name)
		fn->name = ma_demangle(fn->key);
	return fn->name ? fn->name : fn->key;
}

const char *ma_sym_no_lines_note(struct ma_symbolizer *s)
{
	char names[400] = "";
	size_t len = 0;

	for (size_t i = 0; i < s->nobjs && len < sizeof(names); i++)
		if (s->objs[i].lines_missing && !s->objs[i].lines_found)
			len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
						len ? ", " : "", base_name(s->objs[i].path));
	if (!len)
		return NULL;
	snprintf(s->note, sizeof(s->note),
		 "no file:line for any frame in %s (no DWARF line information: build with -g, "
		 "or install the debug package)", names);
	return s->note;
}

const char *ma_sym_obj_name(const struct ma_symbolizer *s, uint32_t obj)
{
	if (obj == MA_NONE || obj >= s->nobjs)
		return "?";
	return base_name(s->objs[obj].dump_path);
}
