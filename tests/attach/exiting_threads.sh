#!/usr/bin/env bash
# Threads in their exit (tests/lib/safety.sh, dying_threads_check), on
# Debian's libjemalloc and on jemalloc linked into the program.  glibc frees
# a thread's old TLS vector, and a program's late destructor frees, after
# jemalloc's destructor round: jemalloc gives such a thread only minimal
# state.  A call there once made it a tcache that outlived the thread, and
# the next statistics merge (any mallctl epoch) faulted in
# arena_stats_merge: an outside attack's target with 8 MiB stacks and a
# thread every 100 µs died within a minute of stats/bins runs.  The version
# matrix runs the same check on every jemalloc it builds.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
need_fixtures fragchurn fragchurn_static
plan $((2 * DYING_CHECKS))
dying_threads_check "libjemalloc.so.2" fragchurn
dying_threads_check "jemalloc linked in" fragchurn_static
