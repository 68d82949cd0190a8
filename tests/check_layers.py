#!/usr/bin/env python3
"""check_layers.py BUILD_DIR - the layering rules, read from the objects' symbols.

Three layers (attach/README.md): the analysis core (analysis/) never calls
the ptrace core (attach/*.c) or the commands (attach/cli/); the ptrace core
never calls the commands; and no two modules call each other, directly or
round a longer cycle.  A module is one object, except the session's parts
(remote_call.c and attach/session_*.c, which share attach/session_int.h):
together they are the module "session".  And the sizes: no source file of
attach/, analysis/ or include/ over MAX_FILE_LINES lines, no function over
MAX_FUNC_LINES (from its opening brace to its closing one, both at the
start of a line, as this tree writes every function).  Exit 1 on any
violation, each printed with the symbols or the sizes that make it.
"""
import os
import subprocess
import sys


MAX_FILE_LINES = 1200
MAX_FUNC_LINES = 120


def function_sizes(path):
    """(name, lines) of each function defined in the C file PATH."""
    lines = open(path, errors="replace").read().split("\n")
    out, start, name = [], None, "?"
    for i, line in enumerate(lines):
        if line.startswith("{"):
            start, j = i, i - 1
            while j >= 0 and "(" not in lines[j]:
                j -= 1
            name = lines[j].split("(")[0].split()[-1].lstrip("*") if j >= 0 and lines[j].split("(")[0].split() else "?"
        elif line.startswith("}") and start is not None:
            out.append((name, i - start + 1))
            start = None
    return out


def check_sizes(root):
    """Print each file or function over its bound; return how many."""
    bad = 0
    for top in ("attach", "analysis", "include"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                n = open(path, errors="replace").read().count("\n")
                if n > MAX_FILE_LINES:
                    print(f"check-layers: {rel} has {n} lines (at most {MAX_FILE_LINES}): split it by concern")
                    bad += 1
                for name, size in function_sizes(path):
                    if size > MAX_FUNC_LINES:
                        print(f"check-layers: {name} in {rel} has {size} lines (at most {MAX_FUNC_LINES})")
                        bad += 1
    return bad


def layer(path):
    if path.startswith("analysis/"):
        return "analysis"
    if path.startswith("attach/cli/"):
        return "cli"
    return "core"


def module(path):
    name = os.path.basename(path)[:-2]
    if path.startswith("attach/") and (name == "remote_call" or name.startswith("session_")):
        return "attach/session"
    return path[:-2]


def symbols(obj):
    out = subprocess.run(["nm", "-g", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U":
            used.add(f[1])
        elif len(f) == 3 and f[1] in "TDBRVWC":
            defined.add(f[2])
    return defined, used


def sccs(graph):
    """Tarjan's strongly connected components of GRAPH (node -> set of nodes)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    objs = {}
    for top in ("analysis", "attach"):
        for root, _, files in os.walk(os.path.join(build, top)):
            for f in files:
                if f.endswith(".o"):
                    objs[os.path.relpath(os.path.join(root, f), build)] = os.path.join(root, f)
    if not objs:
        print(f"check-layers: no objects under {build}/analysis or {build}/attach: build first")
        return 1
    owner, uses = {}, {}
    for rel, obj in objs.items():
        defined, used = symbols(obj)
        for s in defined:
            owner[s] = rel
        uses[rel] = used
    graph, why = {}, {}
    bad = 0
    for rel, used in sorted(uses.items()):
        m = module(rel)
        graph.setdefault(m, set())
        for s in sorted(used):
            dep = owner.get(s)
            if not dep:
                continue  # a library's
            d = module(dep)
            if d == m:
                continue
            graph[m].add(d)
            why.setdefault((m, d), []).append(s)
            lf, lt = layer(rel), layer(dep)
            if (lf == "analysis" and lt != "analysis") or (lf == "core" and lt == "cli"):
                print(f"check-layers: {lf} calls {lt}: {rel} uses {s} from {dep}")
                bad += 1
    for comp in sccs(graph):
        if len(comp) > 1:
            edges = [f"{a} -> {b} ({', '.join(why[(a, b)][:3])})"
                     for a in comp for b in comp if (a, b) in why]
            print(f"check-layers: a cycle of {len(comp)} modules: " + "; ".join(edges))
            bad += 1
    bad += check_sizes(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    nmod = len(graph)
    nedge = sum(len(v) for v in graph.values())
    print(f"check-layers: {len(objs)} objects, {nmod} modules, {nedge} calls between them: "
          f"{bad} violation{'s' if bad != 1 else ''} (sizes included)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
