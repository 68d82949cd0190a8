/*
 * unwtable.h - where a stopped thread's unwind tables are, read from the
 * target's own memory.
 *
 * libunwind-ptrace finds the table of each frame by reading
 * /proc/PID/maps and opening and mapping the object's file, once per
 * frame and per walk: ~1 ms a frame, most of the time a thread is held.
 * The loader has already mapped every object's .eh_frame_hdr (its
 * PT_GNU_EH_FRAME segment), so the binary-search table libunwind needs is
 * in the target's memory: found once per object from its ELF and program
 * headers (also in memory), it is searched there (through the walk's
 * cached page reads) with libunwind's own DWARF code.
 */
#ifndef MA_UNWTABLE_H
#define MA_UNWTABLE_H

#include <libunwind.h>
#include <stdint.h>
#include <sys/types.h>

#include "target.h"

/*
 * The remote-table description (UNW_INFO_FORMAT_REMOTE_TABLE) of the
 * object whose code holds IP, among T's mappings, read through thread TID.
 * 0, or -1 when there is none to use (not in T's maps as read, no
 * .eh_frame_hdr, an encoding other than the usual one): the caller falls
 * back to libunwind's way.
 */
int ma_unw_table_for(const struct ma_target *t, pid_t tid, uint64_t ip, unw_dyn_info_t *di);
/* Forget the tables found (the next walk may be in another process). */
void ma_unw_tables_reset(void);
/* How many objects' tables were looked for in this process's life (tests: once per object). */
unsigned long ma_unw_tables_described(void);

#endif
