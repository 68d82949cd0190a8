/*
 * demangle.h - C++ (Itanium) and Rust (legacy and v0) symbol demangling
 * through libiberty, the way rustfilt and c++filt print names.
 */
#ifndef MA_DEMANGLE_H
#define MA_DEMANGLE_H

#include <stddef.h>

/*
 * Demangle NAME into a new malloc'd string.  LLVM's ".llvm.<N>" suffixes and
 * ".cold"/".warm" split-function suffixes are removed first (rustfilt and
 * libiberty otherwise leave such names mangled).  A name that is not
 * mangled comes back as a copy, without those suffixes.  NULL only when out
 * of memory.  Symbol versions (@@GLIBC_2.34) are removed too.
 */
char *ma_demangle(const char *name);

/* Length of NAME without a symbol version (@VER, @@VER) and trailing
 * .llvm.N / .cold / .warm suffixes. */
size_t ma_demangle_base_len(const char *name);

#endif
