/*
 * symbolize.h - return addresses of a heap dump -> functions.
 *
 * Each pc is mapped through the dump's MAPPED_LIBRARIES to a file and a
 * link-time address (pc - 1: return addresses point after the call), and
 * looked up in that ELF's .symtab + .dynsym (elfsyms.h: sorted once, binary
 * search).  A stripped file's symbols come from its separate debug file,
 * found by build id or .gnu_debuglink under /usr/lib/debug.  No external
 * processes.  Results are cached per pc; ELF files are opened on first use.
 *
 * Frames are identified by index (uint32_t) into ma_symbolizer.frames, and
 * every frame belongs to a function (ma_symbolizer.funcs), which is what
 * reports aggregate by.  A function's key is its mangled symbol name, or
 * "file+0xADDR" when no symbol covers the address; its display name is
 * demangled lazily (ma_sym_func_name), since only printed names need it.
 *
 * With opts.lines, a pc inside inlined code becomes a chain of frames
 * (innermost first, linked through inline_next) with file:line each,
 * through libdw.
 */
#ifndef MA_SYMBOLIZE_H
#define MA_SYMBOLIZE_H

#include <sys/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "elfsyms.h"
#include "heapprof.h"

#define MA_NONE UINT32_MAX

struct ma_prefix_map {
	const char *from, *to;
};

struct ma_sym_opts {
	const char *binary; /* replaces the dump's main executable, or NULL */
	const struct ma_prefix_map *prefix_maps; /* applied to dump paths in order */
	size_t nprefix_maps;
	bool lines; /* file:line and inlined frames through libdw (implies per_pc) */
	/*
	 * One frame per return address (pprof locations, threads' offsets).
	 * Without it a function's first frame stands for all its addresses:
	 * reports by function are the same, in far less memory and time.
	 */
	bool per_pc;
	/*
	 * Opens the file behind MAP (for a live process: through its
	 * /proc/PID/map_files, which works for deleted files and other mount
	 * namespaces), or returns -1 to open it by path.  NULL: by path.
	 */
	int (*open_map)(void *ctx, const struct ma_hp_map *map);
	void *open_ctx;
	/* Open the dump's files with this file-system identity (a dump not ours). */
	bool open_as;
	uid_t as_uid;
	gid_t as_gid;
};

struct ma_frame {
	uint32_t func; /* index into funcs */
	uint32_t obj; /* index into objs, or MA_NONE */
	uint32_t inline_next; /* caller frame at the same pc (--lines), or MA_NONE */
	uint64_t addr; /* link-time address in obj (pc - 1), or pc - 1 */
	uint64_t pc;   /* the run-time address in the dump's process (pc - 1) */
	uint64_t sym_off; /* addr - start of its ELF symbol, if named */
	bool named; /* an ELF symbol covers addr (else func's key is "file+0xADDR") */
	const char *file; /* source file (--lines), or NULL */
	int line;
};

struct ma_func {
	char *key; /* mangled symbol, or "file+0xADDR" */
	char *name; /* demangled display name, NULL until asked for */
	uint32_t obj; /* object of its first frame, or MA_NONE */
	uint32_t frame; /* its first frame (the only one without per_pc) */
	bool allocator; /* jemalloc's own code */
};

/* A symbol looked up ahead (ma_sym_prepare) for one link-time address. */
struct ma_sym_ahead {
	uint64_t vaddr;
	struct ma_elf_sym sym;
	bool found; /* else no symbol covers vaddr */
	bool from_debug; /* sym is the separate debug file's */
};

struct ma_symobj {
	char *dump_path; /* as written in the dump */
	char *path; /* after --binary / prefix maps */
	size_t first_map; /* index of its first mapping in hp->maps */
	bool main; /* the dump's main executable */
	bool named; /* its file named by the user (--binary, --prefix-map) */
	bool jemalloc; /* libjemalloc*.so: every frame in it is the allocator's */
	bool agent; /* memattach's agent (a memfd: no file to read) */
	bool tried, ok, has_debug;
	bool lines_found, lines_missing; /* --lines: a frame in it had / lacked file:line */
	struct ma_elf elf, debug; /* debug: separate debug file if found */
	uint32_t *elf_funcs, *debug_funcs; /* per symbol of elf / debug: its function, or MA_NONE */
	struct ma_sym_ahead *ahead; /* by vaddr, from ma_sym_prepare */
	size_t nahead;
	void *dwfl; /* Dwfl * for --lines */
	void *dwmod; /* Dwfl_Module * */
	uint64_t dwbias;
};

struct ma_symbolizer {
	const struct ma_heapprof *hp;
	struct ma_sym_opts opts;
	struct ma_symobj *objs;
	size_t nobjs;
	uint32_t *map_obj; /* per hp->maps[i]: object index or MA_NONE */
	struct ma_frame *frames;
	size_t nframes, cap_frames;
	struct ma_func *funcs;
	size_t nfuncs, cap_funcs;
	/* pc -> first frame, open addressing */
	uint64_t *pc_keys;
	uint32_t *pc_vals;
	size_t pc_cap, pc_used;
	/* function key -> index, open addressing */
	uint32_t *fn_slots;
	size_t fn_cap;
	char **strings; /* interned file names etc. to free */
	size_t nstrings, cap_strings;
	unsigned nwarnings;
	char warning[512]; /* the first problem (missing file, no symbols...) */
	bool warning_main; /* ... which is about the main executable */
	char also[2][512]; /* up to two more problems of other kinds, in order */
	unsigned nalso;
	const char *warning_fmt, *also_fmt[2]; /* their kinds (the format they were made from) */
	char note[640];
	uint64_t cur_pc; /* the pc being symbolized (for new frames) */
};

/* Prepare to symbolize pcs of HP (which must outlive S).  0 or MA_E_NOMEM. */
int ma_sym_init(struct ma_symbolizer *s, const struct ma_heapprof *hp,
		const struct ma_sym_opts *opts);
void ma_sym_release(struct ma_symbolizer *s);

/*
 * Look up ahead the symbols of return addresses PCS[0..N) (a pc as
 * ma_sym_pc takes it), one pass over the tables of each object they are in
 * when they are few for its size -- instead of sorting all of a big
 * binary's symbols for them.  ma_sym_pc then gives the same answers,
 * faster.  0 or MA_E_NOMEM.
 */
int ma_sym_prepare(struct ma_symbolizer *s, const uint64_t *pcs, size_t n);

/* The innermost frame for return address PC (cached).  MA_NONE only on OOM. */
uint32_t ma_sym_pc(struct ma_symbolizer *s, uint64_t pc);

/* Demangled display name of function F (computed once). */
const char *ma_sym_func_name(struct ma_symbolizer *s, uint32_t f);

/* Short name of an object (its file's basename), or "?" */
const char *ma_sym_obj_name(const struct ma_symbolizer *s, uint32_t obj);

/*
 * --lines: the objects with frames but no file:line for any of them, and
 * what to do (a sentence); NULL if there are none.
 */
const char *ma_sym_no_lines_note(struct ma_symbolizer *s);

/* True if the mangled or plain NAME is one of jemalloc's entry points or internals. */
bool ma_sym_is_allocator_name(const char *name);

#endif
