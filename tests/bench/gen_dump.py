#!/usr/bin/env python3
"""Write a synthetic heap_v2 dump: NSTACKS stacks of DEPTH frames over a
real ELF (its function symbols, as mapped at a fixed base), each stack led
by 4 frames inside Debian's libjemalloc, as real dumps are.

usage: gen_dump.py LIB OUT [NSTACKS] [DEPTH] [NFUNCS] [distinct]

With "distinct", every frame is a fresh return address inside its function
(the worst case for a symbolizer that caches per address), not one fixed
address per function."""
import random, subprocess, sys

lib, out = sys.argv[1], sys.argv[2]
nstacks = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
depth = int(sys.argv[4]) if len(sys.argv) > 4 else 30
nfuncs = int(sys.argv[5]) if len(sys.argv) > 5 else 20000
distinct = len(sys.argv) > 6 and sys.argv[6] == "distinct"
JE = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
rnd = random.Random(42)

def loads(path):
    segs = []
    for l in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout.splitlines():
        f = l.split()
        if f and f[0] == "LOAD":
            off, va, memsz = int(f[1], 16), int(f[2], 16), int(f[5], 16)
            flags = "".join(f[6:-1])
            segs.append((off, va, memsz, flags))
    return segs

def funcs(path, dynamic=False):
    args = ["nm", "--defined-only", "-S"] + (["-D"] if dynamic else []) + [path]
    r = []
    for l in subprocess.run(args, capture_output=True, text=True).stdout.splitlines():
        f = l.split()
        if len(f) == 4 and f[2] in "tTW" and int(f[1], 16) > 8:
            r.append((int(f[0], 16), int(f[1], 16)))
    return r

def maps_lines(path, base, segs):
    for off, va, memsz, flags in segs:
        start = base + (va & ~0xfff)
        end = base + ((va + memsz + 0xfff) & ~0xfff)
        perms = ("r" if "R" in flags else "-") + ("w" if "W" in flags else "-") + \
                ("x" if "E" in flags else "-") + "p"
        yield "%012x-%012x %s %08x fe:00 1234 %s\n" % (start, end, perms, off & ~0xfff, path)

LIB_BASE, JE_BASE = 0x7f0000000000, 0x7f3000000000
fs = funcs(lib)
rnd.shuffle(fs)
fs = fs[:nfuncs]
# jemalloc's leading frames: exported entry points, so that jeprof (which
# drops allocator frames by name) drops them as memattach does (by address).
je_syms = {}
for l in subprocess.run(["nm", "-D", "--defined-only", "-S", JE], capture_output=True, text=True).stdout.splitlines():
    f = l.split()
    if len(f) == 4:
        je_syms[f[3]] = (int(f[0], 16), int(f[1], 16))
je = [je_syms[n] for n in ("mallocx", "calloc", "rallocx", "malloc")]
pcs = [LIB_BASE + a + rnd.randrange(1, s) for a, s in fs]
je_pcs = [JE_BASE + a + 5 for a, _ in je]
with open(out, "w") as o:
    o.write("heap_v2/524288\n  t*: 0: 0 [0: 0]\n")
    for i in range(nstacks):
        # Callers skewed towards a small set (shared frames, as in real
        # programs); leaves spread over all functions.
        picks = [min(int(rnd.paretovariate(1.2)) - 1, len(pcs) - 1) if k > 8
                 else rnd.randrange(len(pcs)) for k in range(depth - 4)]
        if distinct:
            frames = je_pcs + [LIB_BASE + fs[j][0] + rnd.randrange(1, fs[j][1]) for j in picks]
        else:
            frames = je_pcs + [pcs[j] for j in picks]
        objs = rnd.randint(1, 20)
        size = rnd.choice([16, 32, 48, 64, 128, 256, 1024, 4096, 65536, 1 << 20])
        o.write("@ " + " ".join("0x%x" % p for p in frames) + "\n")
        o.write("  t*: %d: %d [0: 0]\n  t0: %d: %d [0: 0]\n" % (objs, objs * size, objs, objs * size))
    o.write("\nMAPPED_LIBRARIES:\n")
    o.writelines(maps_lines(lib, LIB_BASE, loads(lib)))
    o.writelines(maps_lines(JE, JE_BASE, loads(JE)))
