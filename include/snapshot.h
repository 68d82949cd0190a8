/*
 * snapshot.h - a snapshot directory written by 'memattach snapshot' read
 * back, and what changed between two of them (headline counters, bins).
 *
 * The manifest is read by a small tolerant JSON reader that keeps only the
 * keys below (unknown keys and values are skipped, so later format
 * additions do not break it); the bins come from stats.json through
 * stats_json.h, which gives the same table as bins.json.  Only
 * computation here: printing is the command's (attach/cli/cmd_diff.c).
 */
#ifndef MA_SNAPSHOT_H
#define MA_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bins.h"
#include "jestats.h"

#define MA_SNAPSHOT_FORMAT "memattach-snapshot"
#define MA_SNAPSHOT_VERSION 1

/* What manifest.json says (strings are cut to fit, always terminated). */
struct ma_snap_manifest {
	char format[64];
	uint64_t format_version;
	int64_t pid, unix_time;
	char comm[64], exe[1024], time[40], jemalloc_version[96];
	uint64_t vm_rss, vm_hwm;
	/* headline{} */
	uint64_t allocated, active, resident, mapped, retained, metadata, tcache_bytes;
	char stats_file[256], heap_file[256];
	bool has_heap; /* files.heap is a string (null: profiling was off) */
	char heap_skipped[512];
	unsigned seen; /* MA_MF_* bits of the required keys present */
};

/*
 * Parse manifest.json text (LEN bytes, need not be NUL-terminated) into M.
 * 0, or MA_E_FORMAT with a message: not JSON, format is not
 * memattach-snapshot (naming what it is), unsupported format_version, a
 * required key missing.
 */
int ma_snap_manifest_parse(const char *buf, size_t len, struct ma_snap_manifest *m);

struct ma_snapshot {
	const char *dir;
	struct ma_snap_manifest m;
	struct ma_je_stats st; /* from stats.json (headline from the manifest) */
	struct ma_bin_table bins;
	char heap_path[4096]; /* dir/heap file, "" if none */
};

/*
 * Load the snapshot in directory DIR (kept by pointer).  0, MA_E_IO (DIR
 * or a file unreadable: the message names it; a directory without
 * manifest.json is named with what it holds) or MA_E_FORMAT.
 */
int ma_snapshot_load(const char *dir, struct ma_snapshot *s);
void ma_snapshot_release(struct ma_snapshot *s);

/* Headline rows: the manifest's counters, VmRSS/VmHWM, and the gaps. */
enum {
	MA_SNAP_NHEADLINE = 11,
};

struct ma_snap_headline_row {
	const char *key; /* snake_case, for JSON */
	const char *label; /* for the table */
	uint64_t a, b;
	int64_t delta; /* b - a */
	bool has_pct; /* false when a == 0 */
	double pct; /* 100 * delta / a */
};

/* Fill ROWS[MA_SNAP_NHEADLINE] from two manifests. */
void ma_snap_headline_diff(const struct ma_snap_manifest *a, const struct ma_snap_manifest *b,
			   struct ma_snap_headline_row rows[MA_SNAP_NHEADLINE]);

/* One size class in both snapshots (a side without it counts as zeros). */
struct ma_snap_bin_delta {
	uint64_t size;
	uint64_t curregs_a, curregs_b, curslabs_a, curslabs_b, waste_a, waste_b;
	double util_a, util_b;
	int64_t curregs_delta, curslabs_delta, waste_delta;
};

/*
 * The bins (paired by region size) whose waste or curregs changed, sorted
 * by |waste_delta| largest first (ties: size).  *OUT is allocated (free
 * it), *N rows; 0 or MA_E_NOMEM.
 */
int ma_snap_bins_diff(const struct ma_bin_table *a, const struct ma_bin_table *b,
		      struct ma_snap_bin_delta **out, size_t *n);

#endif
