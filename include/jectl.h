/*
 * jectl.h - mallctl and friends, called inside the target through a session.
 */
#ifndef MA_JECTL_H
#define MA_JECTL_H

#include <stddef.h>
#include <stdint.h>

#include "jestats.h"
#include "remote.h"

/* mallctl(name, out, &len, NULL, 0); LEN must match the value's size. */
int ma_mallctl_read(struct ma_session *s, const char *name, void *out, size_t len);
/* mallctl(name, NULL, NULL, in, len); IN may be NULL with len 0 (a command). */
int ma_mallctl_write(struct ma_session *s, const char *name, const void *in, size_t len);
/* mallctlnametomib; *miblen in: capacity, out: length. */
int ma_mallctl_nametomib(struct ma_session *s, const char *name, size_t *mib, size_t *miblen);

/*
 * A batch of mallctl calls run by one injected call (one stop of the
 * borrowed thread instead of one per value).  Queue reads and writes, run,
 * then fetch each result by the index the queueing call returned.
 */
struct ma_ctl_item {
	size_t entry_off, len_off, out_off, outlen;
	const char *name;
};

struct ma_ctl_batch {
	struct ma_session *s;
	uint64_t base; /* target address of the image */
	unsigned char *img; /* local image: entries, then payload */
	bool img_is_session_local; /* ma_session_local's, given back on release */
	size_t max_entries, payload_off, cap, used;
	struct ma_ctl_item *items;
	size_t n;
};

int ma_ctl_batch_init(struct ma_ctl_batch *b, struct ma_session *s, size_t max_entries,
		      size_t payload_bytes);
/* Queue mallctl(name, out, &outlen, NULL, 0); returns the item index or < 0. */
int ma_ctl_batch_read(struct ma_ctl_batch *b, const char *name, size_t outlen);
/* Queue mallctlbymib(mib, miblen, out, &outlen, NULL, 0). */
int ma_ctl_batch_read_mib(struct ma_ctl_batch *b, const size_t *mib, size_t miblen,
			  size_t outlen);
/* Queue mallctl(name, NULL, NULL, in, inlen). */
int ma_ctl_batch_write(struct ma_ctl_batch *b, const char *name, const void *in, size_t inlen);
/* Run every queued call in one injected call and read the results back. */
int ma_ctl_batch_run(struct ma_ctl_batch *b);
/* Result of item I: 0 and OUT filled, or MA_E_JEMALLOC with a message. */
int ma_ctl_batch_result(struct ma_ctl_batch *b, int i, void *out, size_t outlen);
void ma_ctl_batch_release(struct ma_ctl_batch *b);

/* Refresh `epoch`, then read version, options and the headline counters. */
int ma_collect_stats(struct ma_session *s, struct ma_je_stats *st);

/*
 * mallctl(name, NULL, NULL, &p, sizeof p) where p points to a copy of the
 * string VALUE in the target (e.g. "prof.dump" with a path), with a
 * timeout for long commands.
 */
int ma_mallctl_write_cstr(struct ma_session *s, const char *name, const char *value,
			  int timeout_ms);

struct ma_bin_table;
/*
 * Read the bin constants and the merged per-bin counters
 * (stats.arenas.4096.bins.<j>.*) with mallctlbymib, and tcache_bytes.
 * Call after ma_collect_stats (which refreshes the epoch).  T->bins is
 * allocated; release with ma_bin_table_release.
 */
int ma_je_read_bins(struct ma_session *s, struct ma_bin_table *t);

/*
 * malloc_stats_print(cb, buf, OPTS) in the target, through a tiny append
 * callback placed in a private read+execute page, into a buffer mapped in
 * the target; retried with a larger buffer if the output did not fit.
 * *OUT (malloc'd, NUL-terminated) and *LEN get the text.
 */
int ma_je_stats_print(struct ma_session *s, const char *opts, int timeout_ms, char **out,
		      size_t *len);

#endif
