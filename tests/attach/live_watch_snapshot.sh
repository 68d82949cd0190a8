#!/usr/bin/env bash
# tests/attach/live_watch_snapshot.sh - memattach watch catches the peak
# fixture's transient peak (the kept dump's top site is peak_site), stops
# cleanly on Ctrl-C and when the target exits; memattach snapshot writes a
# complete, self-describing directory or nothing.
. "$(dirname "$0")/../lib/common.sh"
plan 39

[ -x "$FIX/frag" ] || { fail "build/fixtures/frag missing (make fixtures)"; exit 1; }
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
# wait for a dump at the final high-water mark, to watch's resolution: a
# rise counts as a new high only above 512 KiB (a few KiB of stack or of
# memattach's own visit after the last dump must not make one), so the
# last dump may sit up to that below it.  The 120 s are a hang guard, not
# a speed limit (a dump waits for a safe thread; the run may be loaded).
seen=0
for _ in $(seq 1200); do
	if awk -F, -v h="$hwm" 'NR > 1 && $7 == 1 && $3 + 524288 > h { f = 1 } END { exit !f }' "$W/series.csv"; then seen=1; break; fi
	bsleep 0.1
done
why=""
[ "$seen" -eq 1 ] || why="; dumps at VmHWM: $(awk -F, 'NR > 1 && $7 == 1 { printf "%s ", $3 }' "$W/series.csv")$(tail -2 "$TMP/watch.err" | tr '\n' ' ')"
check "watch took a dump at the peak's VmHWM ($hwm, to 512 KiB$why)" test $seen -eq 1
fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" unpeak >/dev/null
kill -INT $WPID; wait $WPID; rc=$?
check "watch stops on SIGINT with exit 0" test $rc -eq 0
check "watch says it stopped" grep -q '^stopped (interrupted)' "$TMP/watch.out"
check "series.csv has the header and rows" jcheck '
import csv,sys
r=list(csv.DictReader(open(sys.argv[1])))
assert len(r) >= 5 and list(r[0]) == ["t_ms","rss","hwm","allocated","active","resident","dump",
    "dirty","muzzy","metadata_resident","outside_jemalloc"]
assert all(x["allocated"] for x in r)
# resident = active + dirty + metadata_resident, outside = rss - resident, in every row
for x in r:
    v = {k: int(x[k]) for k in x}
    assert v["resident"] == v["active"] + v["dirty"] + v["metadata_resident"], x
    assert v["outside_jemalloc"] == v["rss"] - v["resident"], x' "$W/series.csv"
check "chart.svg is well-formed and marks the dumps" jcheck '
import sys, xml.etree.ElementTree as ET
t=ET.parse(sys.argv[1]); ns="{http://www.w3.org/2000/svg}"
assert any(e.get("class")=="dump" for e in t.iter(ns+"line"))
assert sum(1 for e in t.iter(ns+"path") if e.get("d","").strip()) == 5' "$W/chart.svg"
check "only one dump is kept, and no temporary file" test "$(ls -A "$W" | sort | tr '\n' ' ')" = "chart.svg peak.heap series.csv "
"$MA" aggregate "$W/peak.heap" --json >"$TMP/wagg.json" 2>"$TMP/wagg.err"
check "the kept dump's top site is the fixture's peak site" jcheck '
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
check "manifest names its files and the process" jcheck '
m=json.load(open(sys.argv[1]+"/manifest.json"))
assert m["format"]=="memattach-snapshot" and m["pid"]==int(sys.argv[2])
assert m["files"]=={"stats":"stats.json","bins":"bins.json","heap":"heap.heap"}
assert m["vm_hwm"]>=m["vm_rss"]>0 and m["headline"]["allocated"]>0' "$S" $FIX_PID
"$MA" bins --stats "$S/stats.json" >/dev/null
check "snapshot stats.json is read by bins --stats" test $? -eq 0
check "snapshot heap dump starts with heap_v2/" grep -q '^heap_v2/' "$S/heap.heap"
"$MA" snapshot $FIX_PID -o "$S" >/dev/null 2>"$TMP/snap2.err"; rc=$?
check "snapshot refuses an existing non-empty directory (exit 1)" test $rc -eq 1
check "... with one message, leaving no temporary directory" \
	test "$(unwrapped "$TMP/snap2.err" | wc -l)" -eq 1 -a -z "$(ls -A "$TMP" | grep 'snap\.tmp')"
fix_quit $FIX_PID $FIX_FD
check "peak fixture exits 0" test $? -eq 0

# --- snapshot without prof: no heap, said so ---
fix_start frag -m peak || { fail "fixture start"; exit 1; }
"$MA" snapshot $FIX_PID -o "$TMP/snap_np" >"$TMP/snapnp.out" 2>&1
check "snapshot without prof: manifest says why there is no heap" jcheck '
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
[ "$rc" -eq 0 ] || sed 's/^/# watch: /' "$TMP/watch2.err" | head -5
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

# --- a peak lower than the process's lifetime VmHWM is still a new high ---
# dirty_decay_ms:0 gives freed pages back at once: VmRSS falls after 'unpeak'
# while VmHWM stays at the old peak.
MALLOC_CONF=$PROF_CONF,dirty_decay_ms:0,muzzy_decay_ms:0 fix_start frag -m peak ||
	{ fail "low-peak fixture start"; exit 1; }
LP=$FIX_PID LFD=$FIX_FD LOUT=$FIX_OUT
fix_cmd $LP $LFD "$LOUT" "peak 96" >/dev/null
fix_cmd $LP $LFD "$LOUT" unpeak >/dev/null
old_hwm=$(awk '/^VmHWM/ { print $2 * 1024 }' /proc/$LP/status)
W4=$TMP/watch_low
"$MA" watch $LP --interval 50 --out "$W4" >"$TMP/w4.out" 2>"$TMP/w4.err" &
WPID=$!; track $WPID
for _ in $(seq 100); do [ "$(wc -l <"$W4/series.csv" 2>/dev/null || echo 0)" -ge 3 ] && break; sleep 0.1; done
base=$(awk -F, 'NR == 2 { print $2 }' "$W4/series.csv")
p=$(fix_cmd $LP $LFD "$LOUT" "peak 24")
seen=0
for _ in $(seq 300); do
	if awk -F, -v b="$base" 'NR > 1 && $7 == 1 && $2 >= b + 16 * 1048576 { f = 1 } END { exit !f }' "$W4/series.csv"; then seen=1; break; fi
	sleep 0.1
done
check "watch dumps at a 24 MiB peak below the old 96 MiB VmHWM (base RSS $base, old VmHWM $old_hwm)" \
	[ "$seen" -eq 1 -a "$old_hwm" -gt $((base + 64 * 1048576)) ]
fix_cmd $LP $LFD "$LOUT" unpeak >/dev/null
kill -INT $WPID; wait $WPID
top=$(unwrapped "$TMP/w4.out" 2 | sed -n 's/.*highest during the watch \([^ ]* [^ ]*\) at .*(lifetime VmHWM \([^ ]* [^ ;)]*\)).*/\1|\2/p')
check "the summary gives the watch's high apart from the lifetime VmHWM ($top)" \
	jcheck '
import sys
u = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
def b(s):
    n, unit = s.split()
    return float(n) * u[unit]
top, life = sys.argv[1].split("|")
assert b(top) < b(life) - 32 * (1 << 20), (top, life)' "$top"
"$MA" aggregate "$W4/peak.heap" --json >"$TMP/w4agg.json" 2>/dev/null
check "... and the kept dump's top site is the peak site" jcheck '
s=json.load(open(sys.argv[1]))["sites"]
assert s[0]["leaf"].startswith("peak_site"), [(x["leaf"], x.get("bytes", x.get("inuse_bytes"))) for x in s[:3]]' "$TMP/w4agg.json"
# --reset-hwm: VmHWM starts again from VmRSS
"$MA" watch $LP --interval 50 --duration 1 --reset-hwm --out "$TMP/w5" >"$TMP/w5.out" 2>&1
rss=$(awk '/^VmRSS/ { print $2 * 1024 }' /proc/$LP/status)
hwm=$(awk '/^VmHWM/ { print $2 * 1024 }' /proc/$LP/status)
check "--reset-hwm brings VmHWM back near VmRSS (VmHWM $hwm, VmRSS $rss, old $old_hwm)" \
	[ "$hwm" -lt $((rss + 16 * 1048576)) -a "$hwm" -lt $((old_hwm - 32 * 1048576)) ]
check "... and says so in the summary" says 'reset at the start' "$TMP/w5.out" 2
v=$(fix_cmd $LP $LFD "$LOUT" verdict)
check "low-peak fixture verdict ok" grep -q '^VERDICT ok' <<<"$v"
fix_quit $LP $LFD

# --- snapshot of an inactive profiler: said, in the output and the manifest ---
MALLOC_CONF=prof:true,prof_active:false fix_start frag -m peak || { fail "inactive fixture start"; exit 1; }
"$MA" snapshot $FIX_PID -o "$TMP/snap_ina" >"$TMP/ina.out" 2>&1
check "snapshot of prof_active:false says the heap profile is (nearly) empty" \
	says '^heap.heap: profiling is inactive \(prof.active=false\).*--activate' "$TMP/ina.out" 2
check "... and manifest.json carries it as heap_note" jcheck '
m=json.load(open(sys.argv[1]))
assert m["files"]["heap"] == "heap.heap" and "prof.active=false" in m["heap_note"], m' "$TMP/snap_ina/manifest.json"
"$MA" snapshot $FIX_PID -o "$TMP/snap_act" --activate >"$TMP/act.out" 2>&1
check "snapshot --activate turns profiling on and says from when the profile counts" jcheck '
m=json.load(open(sys.argv[1]))
assert "set to true now" in m["heap_note"], m' "$TMP/snap_act/manifest.json"
"$MA" snapshot $FIX_PID -o "$TMP/snap_act2" >"$TMP/act2.out" 2>&1
check "... after which a snapshot has no note" jcheck '
m=json.load(open(sys.argv[1]))
assert "heap_note" not in m and m["files"]["heap"] == "heap.heap", m' "$TMP/snap_act2/manifest.json"
fix_quit $FIX_PID $FIX_FD
check "inactive fixture exits 0" test $? -eq 0
