#!/usr/bin/env bash
# tests/attach/bigbin_once.sh - per-binary work is done once per run, not
# once per thread: `threads` and `stats` on bigd (fixtures/bigd.cc: threads
# waiting 12 frames deep in generated code, in libbig.so or, for
# bigd_static, in the executable with jemalloc) read each file's symbol
# tables the same number of times with 8 threads as with 34, at most once
# per use, and never load (sort) the big object's symbols: a few hundred
# frames are looked up in one pass over its tables.  What was read comes
# from MEMATTACH_TEST_WORK=1 (one stderr line per file).  Each frame in the
# generated code is named as nm names its address.  No timing.
. "$(dirname "$0")/../lib/common.sh"
plan 20

mkdir -p "$TMP/bigbin"

# work FILE PATH FIELD: FIELD (opens, scans, loads, entries) of PATH's
# line in memattach's stderr FILE, 0 if it has none.
work() {
	local v
	v=$(awk -v p="$2" -v f="$3" '$2 == "elf" && $3 == p {
		for (i = 4; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) print kv[2] } }' "$1")
	echo "${v:-0}"
}
# other LINE FILE: the value on memattach's "memattach-test: LINE" line in FILE
other() { awk -v l="$1" '$2 " " $3 ~ "^" l {split($3, kv, "="); print kv[2]}' "$2"; }

# Frames in OBJECT named as nm names their address (the symbol at the
# greatest address at or below it); at least 12 per listed thread.
names_agree() { # JSON OBJECT PID
	local bias
	bias=$(awk -v o="$2" '$6 == o && $3 == "00000000" {split($1, a, "-"); print a[1]; exit}' /proc/"$3"/maps)
	nm -n --defined-only "$2" >"$TMP/nm.txt" 2>/dev/null
	jcheck - "$1" "$TMP/nm.txt" "$bias" "$2" <<'PY'
import bisect, json, sys
threads = json.load(open(sys.argv[1]))["threads"]
bias, obj = int(sys.argv[3], 16), sys.argv[4]
syms = {}
for l in open(sys.argv[2]):
    f = l.split()
    if len(f) == 3 and f[1] in "tT":
        syms.setdefault(int(f[0], 16), set()).add(f[2])
addrs = sorted(syms)
n = deep = 0
for t in threads:
    mine = 0
    for k, fr in enumerate(t["frames"]):
        if fr["object"] != obj or "process_" not in (fr["function"] or "process_"):
            continue
        v = fr["ip"] - bias - (1 if k else 0)
        a = addrs[bisect.bisect_right(addrs, v) - 1]
        # nm's names are mangled, memattach's demangled: compare the number
        want = [s for s in syms[a] if "process_" in s]
        assert fr["function"] and want and fr["function"].split("process_")[1][:7] == want[0].split("process_")[1][:7], (fr, hex(v), syms[a])
        assert fr["offset"] == fr["ip"] - bias - a, (fr, hex(a))
        mine += 1
    n += mine
    deep += mine >= 12
print("#", n, "frames in", obj, "named as nm names them;", deep, "threads 12 deep", file=sys.stderr)
sys.exit(0 if n >= 12 * 6 and deep >= 6 else 1)
PY
}

# frame_objects JSON: the objects the frames of `threads --json` lie in, sorted.
frame_objects() {
	jcheck 'print("\n".join(sorted({f["object"] for t in load(sys.argv[1])["threads"] for f in t["frames"] if f.get("object")})))' "$1"
}
# same_reads SMALL_ERR FULL_ERR "EXTRA...": the two runs' ELF reads equal,
# but a file of EXTRA (a frame in it in one run only) may have been opened
# once more in either run (with its tables scanned once more).
same_reads() {
	jcheck - "$1" "$2" "$3" <<'PY'
def reads(path):
    r = {}
    for l in open(path):
        f = l.split()
        if l.startswith("memattach-test: elf "):
            r[f[2]] = {k: int(v) for k, v in (x.split("=") for x in f[3:])}
    return r
small, full, extra = reads(sys.argv[1]), reads(sys.argv[2]), set(sys.argv[3].split())
bad = []
for p in sorted(set(small) | set(full)):
    a, b = small.get(p, {}), full.get(p, {})
    if a == b:
        continue
    per_scan = {x["entries"] // x["scans"] for x in (a, b) if x.get("scans")}
    if p in extra and len(per_scan) <= 1 and all(abs(a.get(k, 0) - b.get(k, 0)) <= 1 for k in ("opens", "scans", "loads")):
        continue
    bad.append(f"{p}: {a} / {b}")
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# One fixture, two sizes: the work is the same.
one_variant() { # PROG BIG_OBJECT_BASENAME
	local prog=$1 big=$2 size pid obj rc1 rc2 n
	for size in small full; do
		if [ $size = small ]; then
			fix_start "bigbin/$prog" -n 1 -r 0 || { fail "$prog: start"; return; }
		else
			fix_start "bigbin/$prog" || { fail "$prog: start"; return; }
		fi
		pid=$FIX_PID
		obj=$(awk -v b="/$big" '$6 ~ b"$" {print $6; exit}' /proc/"$pid"/maps)
		MEMATTACH_TEST_WORK=1 "$MA_T" threads "$pid" --json >"$TMP/t_$size.json" 2>"$TMP/t_$size.err"
		rc1=$?
		MEMATTACH_TEST_WORK=1 "$MA_T" stats "$pid" --json >"$TMP/s_$size.json" 2>"$TMP/s_$size.err"
		rc2=$?
		n=$(jcheck 'print(len(json.load(open(sys.argv[1]))["threads"]))' "$TMP/t_$size.json" 2>/dev/null)
		echo "# $prog -$size: $n threads, $(grep -c . "$TMP/t_$size.err") work lines; $big: threads $(grep " $obj " "$TMP/t_$size.err" | cut -d' ' -f4-)"
		if [ $size = full ]; then
			check "$prog: threads and stats exit 0 on 34 threads, every one listed" \
				test "$rc1" -eq 0 -a "$rc2" -eq 0 -a "$n" = 34 -a "$(ls /proc/"$pid"/task | wc -l)" = 34
			check "$prog: every frame in $big named as nm names it" names_agree "$TMP/t_full.json" "$obj" "$pid"
			check "$prog: integrity verdict ok, no interrupted wait" \
				grep -q "VERDICT ok.* eintr=0 " <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
		else
			check "$prog -n 1 -r 0: threads and stats exit 0 on 8 threads" \
				test "$rc1" -eq 0 -a "$rc2" -eq 0 -a "$n" = 8
		fi
		fix_quit "$pid" "$FIX_FD" >/dev/null
	done
	# Each ELF file, each counter: the same with 8 threads as with 34, but
	# for a file only one of the two runs caught a thread in (a thread
	# stopped inside its malloc: the allocating threads are more in the
	# full run): naming that frame and unwinding through it are one more use
	# of the file, one open and one unwind table more, never more.
	frame_objects "$TMP/t_small.json" >"$TMP/o_small" && frame_objects "$TMP/t_full.json" >"$TMP/o_full"
	local extra n_extra d_small d_full
	extra=$(comm -3 "$TMP/o_small" "$TMP/o_full" | tr -d '\t' | paste -sd' ')
	n_extra=$(wc -w <<<"$extra")
	[ -z "$extra" ] || echo "# $prog: a thread caught in $extra in one run only (one more use of it)"
	check "$prog threads: what was read of each file is the same for 8 and 34 threads (files with a frame in one run only: opened at most once more)" \
		same_reads "$TMP/t_small.err" "$TMP/t_full.err" "$extra"
	d_small=$(other "unwind-tables described" "$TMP/t_small.err") d_full=$(other "unwind-tables described" "$TMP/t_full.err")
	check "$prog threads: each object's unwind table looked for once ($d_small and $d_full, $n_extra objects in one run only), maps read once" \
		test "$d_full" -le $((d_small + n_extra)) -a "$d_small" -le $((d_full + n_extra)) \
		-a "$d_full" -le $((5 + n_extra)) -a "$(other "maps read" "$TMP/t_full.err")" = 1
	check "$prog threads: $big opened, its symbols never sorted" \
		test "$(work "$TMP/t_full.err" "$obj" opens)" -ge 1 -a "$(work "$TMP/t_full.err" "$obj" loads)" = 0
	echo "$obj" >"$TMP/$prog.obj"
}

# Entries of a file's .symtab and .dynsym, as readelf counts them.
entries() { readelf -sW "$1" | awk '/^Symbol table/ {n += $5} END {print n}'; }

one_variant bigd libbig.so
obj=$(cat "$TMP/bigd.obj")
e=$(entries "$obj")
check "bigd threads: libbig.so's tables read in one pass ($e entries)" \
	test "$(work "$TMP/t_full.err" "$obj" scans)" = 1 -a "$(work "$TMP/t_full.err" "$obj" entries)" = "$e"
check "bigd stats: libbig.so's symbols not read at all (jemalloc is libjemalloc.so.2)" \
	test "$(work "$TMP/s_full.err" "$obj" scans)" = 0
check "bigd stats: maps read once" test "$(other "maps read" "$TMP/s_full.err")" = 1

one_variant bigd_static bigd_static
obj=$(cat "$TMP/bigd_static.obj")
e=$(entries "$obj")
# threads: jemalloc's names and code ranges (2 passes), then the frames' names (1)
check "bigd_static threads: the executable's tables read in 3 passes ($e entries each)" \
	test "$(work "$TMP/t_full.err" "$obj" scans)" = 3 -a "$(work "$TMP/t_full.err" "$obj" entries)" = $((3 * e))
check "bigd_static stats: the executable's tables read in 2 passes, never sorted" \
	test "$(work "$TMP/s_full.err" "$obj" scans)" = 2 -a "$(work "$TMP/s_full.err" "$obj" loads)" = 0
check "bigd_static stats: the same reads for 8 and 34 threads" \
	diff <(grep "^memattach-test: elf" "$TMP/s_small.err" | sort) \
	     <(grep "^memattach-test: elf" "$TMP/s_full.err" | sort)
