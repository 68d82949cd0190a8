/*
 * flame.h - folded stacks and a self-contained SVG flame graph of a profile.
 */
#ifndef MA_FLAME_H
#define MA_FLAME_H

#include <stdio.h>

#include "profile.h"

/*
 * One "root;...;leaf BYTES" line per stack with bytes > 0 (scaled bytes,
 * rounded), outermost frame first: the input of flamegraph.pl, inferno and
 * speedscope.  Names are in their printable form (format.h), with ':' for
 * a semicolon inside one.
 */
int ma_flame_folded(FILE *f, struct ma_profile *p);

/*
 * A flame graph as one SVG file with embedded script (hover shows the
 * frame and its bytes, click zooms, Escape resets).  0 or MA_E_IO/NOMEM.
 */
int ma_flame_svg(FILE *f, struct ma_profile *p, const char *title);

#endif
