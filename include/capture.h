/*
 * capture.h - things the live commands take out of a target: a heap dump
 * (prof.dump into a memfd that only memattach reads), and output files
 * written under a temporary name and renamed only when complete.
 */
#ifndef MA_CAPTURE_H
#define MA_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "jestats.h"
#include "outfile.h"
#include "remote.h"

/*
 * Run prof.dump in the target into a memfd created there and named to
 * jemalloc as /proc/thread-self/fd/N (no file on disk, no path the target or
 * anyone else could predict or replace), copy it to OUT_FD, close the memfd.
 * ST must come from ma_collect_stats: without opt.prof this fails with
 * MA_E_JEMALLOC and a message naming the MALLOC_CONF to restart with.
 * *NBYTES gets the dump size.  Without opt.prof, if AGENT is set and an
 * agent keeps a heap profile of the target (memattach profile start), that
 * profile is written instead (read from its memory; nothing is called) and
 * *AGENT says so (its rate non-zero) and since when.
 */
struct ma_agent_profile;
/*
 * The heap profile T's agent keeps (memattach profile start), as a heap_v2
 * dump into OUT_FD, whatever jemalloc's own profiling: read from the
 * agent's memory (nothing is called), then T's maps.
 */
int ma_capture_agent_heap_dump(const struct ma_target *t, int out_fd, size_t *nbytes,
			       struct ma_agent_profile *info);
int ma_capture_heap_dump(struct ma_session *s, const struct ma_je_stats *st, int out_fd,
			 size_t *nbytes, struct ma_agent_profile *agent);
/* The environment variable and value to restart the target with prof on. */
const char *ma_prof_restart_hint(const struct ma_target *t);

struct ma_om_target;
/*
 * One scrape of PID for the exporter: open it, borrow a thread once, read
 * the headline and the bin table, let go; VmRSS/VmHWM from /proc.  Fills
 * OUT (out->ok says whether the allocator was read; failures are left to
 * the caller to count).  0, or the error (message in ma_errmsg()).
 */
int ma_scrape_target(pid_t pid, const struct ma_session_opts *o, struct ma_om_target *out);

#endif
