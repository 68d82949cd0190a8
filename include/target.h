/*
 * target.h - what memattach knows about a target process before touching it:
 * its state (/proc/PID/status), its mappings, and where jemalloc lives in it.
 */
#ifndef MA_TARGET_H
#define MA_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ma_mapping {
	uint64_t start, end, offset;
	char perms[5];
	uint64_t inode;
	char *path; /* NULL for anonymous; "[stack]" etc. kept as is */
	bool deleted; /* path ended in " (deleted)" (suffix removed) */
};

struct ma_range {
	uint64_t lo, hi; /* [lo, hi) runtime addresses */
};

enum ma_je_flavour {
	MA_JE_UNPREFIXED,
	MA_JE_PREFIX_JE, /* je_mallctl */
	MA_JE_PREFIX_RJEM, /* _rjem_mallctl */
};

struct ma_jemalloc {
	char *object; /* path of the mapped object holding mallctl */
	bool is_static; /* linked into an object that is not libjemalloc*.so */
	enum ma_je_flavour flavour;
	const char *prefix; /* "", "je_" or "_rjem_" */
	uint64_t bias; /* runtime = link-time vaddr + bias */
	uint64_t mallctl, mallctlnametomib, mallctlbymib, malloc_stats_print;
	struct ma_range *text; /* jemalloc's code, sorted, merged */
	size_t ntext;
};

struct ma_proc_status {
	char name[64];
	char state; /* R, S, D, Z, T, t, X */
	pid_t tgid;
	pid_t tracer;
	uint64_t vm_rss, vm_hwm; /* bytes */
	uint64_t sig_pending, sig_shared_pending, sig_blocked; /* masks */
};

struct ma_target {
	pid_t pid;
	struct ma_mapping *maps;
	size_t nmaps;
	struct ma_jemalloc je;
	uint64_t syscall_insn; /* address of a `syscall` instruction in the target */
};

/* Read /proc/PID/status (or /proc/PID/task/TID/status if tid > 0). */
int ma_proc_read_status(pid_t pid, pid_t tid, struct ma_proc_status *st);
/* Check the process exists, is not a zombie, not traced, and read its maps. */
int ma_target_open(struct ma_target *t, pid_t pid);
/* Locate mallctl & co. in the mapped objects and jemalloc's code ranges. */
int ma_target_find_jemalloc(struct ma_target *t);
/* True if ADDR lies in jemalloc's code. */
bool ma_target_in_jemalloc(const struct ma_target *t, uint64_t addr);
/* The mapping holding ADDR, or NULL. */
const struct ma_mapping *ma_target_mapping_at(const struct ma_target *t, uint64_t addr);
/* The lowest mapping of the file that M maps (where its ELF header is). */
const struct ma_mapping *ma_target_first_mapping(const struct ma_target *t,
						 const struct ma_mapping *m);
struct ma_elf;
/* runtime address = link-time address + bias, for an ELF mapped from FIRST. */
uint64_t ma_target_load_bias(const struct ma_mapping *first, const struct ma_elf *e);
/* Open the file behind mapping M robustly (map_files, /proc/PID/root, exe). */
int ma_target_open_mapped_file(const struct ma_target *t, const struct ma_mapping *m);
void ma_target_release(struct ma_target *t);

/* Read / write target memory (process_vm_*v, falling back to /proc/PID/mem). */
int ma_mem_read(pid_t pid, uint64_t addr, void *buf, size_t len);
int ma_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len);

const char *ma_je_flavour_name(enum ma_je_flavour f);

#endif
