#!/usr/bin/env bash
# tests/attach/live_watch_snapshot.sh - memattach watch catches the peak
# fixture's transient peak (the kept dump's top site is peak_site), stops
# cleanly on Ctrl-C and when the target exits; memattach snapshot writes a
# complete, self-describing directory or nothing.
. "$(dirname "$0")/../lib.sh"

[ -x "$FIX/frag" ] || { skip "live_watch_snapshot (build/fixtures/frag missing)"; exit 0; }
PROF_CONF=prof:true,prof_active:true,prof_final:false

# --- watch catches the peak; Ctrl-C keeps everything ---
MALLOC_CONF=$PROF_CONF fix_start frag -m peak || { fail "peak fixture start"; exit 1; }
W=$TMP/watch
"$MA" watch $FIX_PID --interval 50 --out "$W" >"$TMP/watch.out" 2>"$TMP/watch.err" &
WPID=$!; track $WPID
for _ in $(seq 100); do [ "$(wc -l <"$W/series.csv" 2>/dev/null || echo 0)" -ge 3 ] && break; sleep 0.1; done
check "watch is sampling" test "$(wc -l <"$W/series.csv")" -ge 3
p=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" peak)
hwm=$(sed -n 's/.*hwm=\([0-9]*\).*/\1/p' <<<"$p")
check "fixture peaked ($p)" test -n "$hwm"
# wait (no time limit assumed beyond 30 s) for a dump at the final high-water mark
seen=0
for _ in $(seq 300); do
	if awk -F, -v h="$hwm" 'NR > 1 && $7 == 1 && $3 >= h { f = 1 } END { exit !f }' "$W/series.csv"; then seen=1; break; fi
	sleep 0.1
done
check "watch took a dump at the peak's VmHWM ($hwm)" test $seen -eq 1
fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" unpeak >/dev/null
kill -INT $WPID; wait $WPID; rc=$?
check "watch stops on SIGINT with exit 0" test $rc -eq 0
check "watch says it stopped" grep -q '^stopped (interrupted)' "$TMP/watch.out"
check "series.csv has the header and rows" python3 -c '
import csv,sys
r=list(csv.DictReader(open(sys.argv[1])))
assert len(r) >= 5 and set(r[0]) == {"t_ms","rss","hwm","allocated","active","resident","dump"}
assert all(x["allocated"] for x in r)' "$W/series.csv"
check "chart.svg is well-formed and marks the dumps" python3 -c '
import sys, xml.etree.ElementTree as ET
t=ET.parse(sys.argv[1]); ns="{http://www.w3.org/2000/svg}"
assert any(e.get("class")=="dump" for e in t.iter(ns+"line"))
assert sum(1 for e in t.iter(ns+"path") if e.get("d","").strip()) == 5' "$W/chart.svg"
check "only one dump is kept, and no temporary file" test "$(ls -A "$W" | sort | tr '\n' ' ')" = "chart.svg peak.heap series.csv "
"$MA" aggregate "$W/peak.heap" --json >"$TMP/wagg.json" 2>"$TMP/wagg.err"
check "the kept dump's top site is the fixture's peak site" python3 -c '
import json,sys
s=json.load(open(sys.argv[1]))["sites"]
assert s[0]["leaf"].startswith("peak_site"), s[0]["leaf"]' "$TMP/wagg.json"
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
check "peak fixture verdict ok after watch" grep -q '^VERDICT ok' <<<"$v"

# --- snapshot of the same (prof) target ---
S=$TMP/snap
"$MA" snapshot $FIX_PID -o "$S" >"$TMP/snap.out" 2>&1; rc=$?
check "snapshot exit 0" test $rc -eq 0
check "snapshot holds manifest, stats, bins and heap" \
	test "$(ls -A "$S" | sort | tr '\n' ' ')" = "bins.json heap.heap manifest.json stats.json "
check "manifest names its files and the process" python3 -c '
import json,sys
m=json.load(open(sys.argv[1]+"/manifest.json"))
assert m["format"]=="memattach-snapshot" and m["pid"]==int(sys.argv[2])
assert m["files"]=={"stats":"stats.json","bins":"bins.json","heap":"heap.heap"}
assert m["vm_hwm"]>=m["vm_rss"]>0 and m["headline"]["allocated"]>0' "$S" $FIX_PID
"$MA" bins --stats "$S/stats.json" >/dev/null
check "snapshot stats.json is read by bins --stats" test $? -eq 0
check "snapshot heap dump starts with heap_v2/" grep -q '^heap_v2/' "$S/heap.heap"
"$MA" snapshot $FIX_PID -o "$S" >/dev/null 2>"$TMP/snap2.err"; rc=$?
check "snapshot refuses an existing non-empty directory (exit 1)" test $rc -eq 1
check "... with one line, leaving no temporary directory" \
	test "$(wc -l <"$TMP/snap2.err")" -eq 1 -a -z "$(ls -A "$TMP" | grep 'snap\.tmp')"
fix_quit $FIX_PID $FIX_FD
check "peak fixture exits 0" test $? -eq 0

# --- snapshot without prof: no heap, said so ---
fix_start frag -m peak || { fail "fixture start"; exit 1; }
"$MA" snapshot $FIX_PID -o "$TMP/snap_np" >"$TMP/snapnp.out" 2>&1
check "snapshot without prof: manifest says why there is no heap" python3 -c '
import json,sys
m=json.load(open(sys.argv[1]))
assert m["files"]["heap"] is None and "MALLOC_CONF=prof:true" in m["heap_skipped"]' "$TMP/snap_np/manifest.json"

# --- watch ends by itself when the target exits mid-watch ---
W2=$TMP/watch2
"$MA" watch $FIX_PID --interval 50 --out "$W2" >"$TMP/watch2.out" 2>"$TMP/watch2.err" &
WPID=$!; track $WPID
for _ in $(seq 100); do [ "$(wc -l <"$W2/series.csv" 2>/dev/null || echo 0)" -ge 3 ] && break; sleep 0.1; done
fix_quit $FIX_PID $FIX_FD
check "fixture exits 0 while watched" test $? -eq 0
for _ in $(seq 100); do kill -0 $WPID 2>/dev/null || break; sleep 0.1; done
wait $WPID; rc=$?
check "watch ends with exit 0 when the target exits" test $rc -eq 0
check "... saying so" grep -q '^stopped (the process exited)' "$TMP/watch2.out"
check "... keeping the series and the chart" test -s "$W2/series.csv" -a -s "$W2/chart.svg"
check "... without heap dumps (no prof), warning once at most" \
	test ! -e "$W2/peak.heap" -a "$(grep -c 'profiling off' "$TMP/watch2.err")" -le 1

# --- --duration ends it too ---
fix_start frag -m peak || { fail "fixture start"; exit 1; }
"$MA" watch $FIX_PID --interval 100 --duration 1 --out "$TMP/w3" >"$TMP/w3.out" 2>&1; rc=$?
check "watch --duration 1 ends by itself with exit 0" test $rc -eq 0 -a -s "$TMP/w3/chart.svg"
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
check "fixture verdict ok after watch --duration" grep -q '^VERDICT ok' <<<"$v"
fix_quit $FIX_PID $FIX_FD

# --- a steady target: memattach's own visits must not look like peaks ---
MALLOC_CONF=$PROF_CONF fix_start frag -m peak || { fail "steady fixture start"; exit 1; }
"$MA" watch $FIX_PID --interval 50 --out "$TMP/steady" --duration 2 >/dev/null 2>&1
n=$(awk -F, 'NR > 1 && $7 == 1' "$TMP/steady/series.csv" | wc -l)
rows=$(($(wc -l <"$TMP/steady/series.csv") - 1))
check "no heap dump while nothing grows ($n dumps in $rows samples)" [ "$rows" -ge 10 -a "$n" -eq 0 ]
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
check "steady fixture verdict ok" grep -q '^VERDICT ok' <<<"$v"
fix_quit $FIX_PID $FIX_FD
