#!/usr/bin/env bash
# tests/attach/live_bins.sh - memattach bins and stats-dump on the frag
# fixture, against what the fixture built (its TRUTH line): exact waste of
# the sparse and half-full classes, live == --stats on the same state, and
# --flush-tcache turning the 448 B lower bound into the exact waste.
. "$(dirname "$0")/../lib/common.sh"
plan 24

[ -x "$FIX/frag" ] || { fail "build/fixtures/frag missing (make fixtures)"; exit 1; }

fix_start frag || { fail "frag fixture start"; exit 1; }
PID=$FIX_PID FD=$FIX_FD OUT=$FIX_OUT
grep '^TRUTH ' "$OUT" | sed 's/^TRUTH //' >"$TMP/truth.json"
q=$(fix_cmd $PID $FD "$OUT" quiesce)
check "fixture quiesced" test -n "$q"

# waste of class SIZE in a bins --json document / in the truth
waste_of() { jcheck '
d=json.load(open(sys.argv[1])); s=int(sys.argv[2])
print([b["waste"] for b in d["bins"] if b["size"]==s][0])' "$1" "$2"; }
truth_of() { jcheck '
d=json.load(open(sys.argv[1])); s=int(sys.argv[2])
print([c["waste"] for c in d["classes"] if c["size"]==s][0])' "$TMP/truth.json" "$1"; }
field_of() { jcheck '
d=json.load(open(sys.argv[1])); s=int(sys.argv[2])
print([b[sys.argv[3]] for b in d["bins"] if b["size"]==s][0])' "$1" "$2" "$3"; }

"$MA" bins $PID --json >"$TMP/live.json"; rc=$?
check "bins live exit 0" test $rc -eq 0
for s in 192 384; do
	check "bins live: waste of $s B equals what the fixture built ($(truth_of $s))" \
		test "$(waste_of "$TMP/live.json" $s)" = "$(truth_of $s)"
done
check "regime of 192 B (2 of 64 kept) is sparse" test "$(field_of "$TMP/live.json" 192 regime)" = sparse
check "regime of 384 B (16 of 32 kept) is half-full" test "$(field_of "$TMP/live.json" 384 regime)" = half-full
w448=$(waste_of "$TMP/live.json" 448); t448=$(truth_of 448)
check "without flush, 448 B waste ($w448) is below the truth ($t448): cached regions count as live" \
	test "$w448" -lt "$t448"
check "bins --json lists all bins in order" jcheck '
b=json.load(open(sys.argv[1]))["bins"]
assert len(b)==36 and [x["size"] for x in b]==sorted(x["size"] for x in b)
assert all(set(x)>={"size","nregs","slab_size","curregs","curslabs","nonfull_slabs","util","waste","live_per_nonfull"} for x in b)' "$TMP/live.json"

# The same state through malloc_stats_print JSON.
"$MA" stats-dump $PID -o "$TMP/stats.json" >"$TMP/sd.out"; rc=$?
check "stats-dump exit 0" test $rc -eq 0
check "stats-dump output is valid JSON with jemalloc's layout" jcheck '
d=json.load(open(sys.argv[1]))["jemalloc"]
assert "stats.arenas" in d and len(d["arenas"]["bin"])==36' "$TMP/stats.json"
"$MA" bins --stats "$TMP/stats.json" --json >"$TMP/file.json"
check "bins live and bins --stats give the same bin table" jcheck '
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
assert a["bins"]==b["bins"] and a["tcache_bytes"]==b["tcache_bytes"], "differ"' "$TMP/live.json" "$TMP/file.json"
"$MA" bins $PID --top 0 | sed -n '/^  *size  *nregs/,$p' >"$TMP/live.txt"
"$MA" bins --stats "$TMP/stats.json" --top 0 | sed -n '/^  *size  *nregs/,$p' >"$TMP/file.txt"
check "printed tables are identical" cmp -s "$TMP/live.txt" "$TMP/file.txt"
check "printed table is not empty" grep -q '^ *192 ' "$TMP/live.txt"

# Flush every thread's tcache: the 448 B waste becomes exact.
"$MA" bins $PID --flush-tcache --json >"$TMP/flushed.json"; rc=$?
check "bins --flush-tcache exit 0" test $rc -eq 0
check "--flush-tcache: 448 B waste equals the truth ($t448)" \
	test "$(waste_of "$TMP/flushed.json" 448)" = "$t448"
check "--flush-tcache flushed the cachers and skipped none" jcheck '
f=json.load(open(sys.argv[1]))["tcache_flush"]
assert f["flushed"]>=3 and f["skipped"]==0, f' "$TMP/flushed.json"
check "--flush-tcache: tcache_bytes is 0 afterwards" test "$(json_get "$TMP/flushed.json" tcache_bytes)" = 0
"$MA" bins $PID --json >"$TMP/after.json"
check "after the flush, plain bins sees the exact waste too" \
	test "$(waste_of "$TMP/after.json" 448)" = "$t448"

v=$(fix_cmd $PID $FD "$OUT" verdict)
check "fixture integrity verdict ok ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit $PID $FD; rc=$?
check "fixture exits 0" test $rc -eq 0

# --- a busy daemon: what the flush could not empty is said, not called exact ---
fix_start daemon || { fail "daemon start"; exit 1; }
"$MA" bins $FIX_PID --flush-tcache >"$TMP/busy.txt" 2>&1
tb=$(sed -n 's/^tcache_bytes *\([^ ]* [^ ]*\) .*/\1/p' "$TMP/busy.txt")
if [ "$tb" = "0 B" ]; then
	check "busy daemon, nothing left cached: the waste is called exact" says 'waste below is exact' "$TMP/busy.txt" 34
else
	check "busy daemon, $tb still cached after the flush: said where it lives, never 'exact'" \
		says 'still cached after the flush: .*lower bound by at most this' "$TMP/busy.txt" 34
fi
check "... and the text never claims the flush makes it exact" test "$(unwrapped "$TMP/busy.txt" 34 | grep -c 'makes it exact')" = 0
"$MA" bins $FIX_PID >"$TMP/busy0.txt" 2>&1
check "without a flush, the note points at --flush-tcache" says 'lower bound \(--flush-tcache empties' "$TMP/busy0.txt" 34
fix_quit $FIX_PID $FIX_FD
check "daemon exits 0" test $? -eq 0
