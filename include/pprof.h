/*
 * pprof.h - write a profile as gzipped pprof protobuf (profile.proto), the
 * format `go tool pprof` and pprof-compatible viewers read.
 */
#ifndef MA_PPROF_H
#define MA_PPROF_H

#include "profile.h"

/*
 * Sample types: inuse_objects (count) and inuse_space (bytes), both
 * unsampled per stack; locations are the user frames (allocator frames
 * dropped as in the profile), one function per symbol.  Written to FD
 * (PATH names it in messages).  0 or MA_E_IO / MA_E_NOMEM.
 */
int ma_pprof_write(int fd, const char *path, struct ma_profile *p);

#endif
