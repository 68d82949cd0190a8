#!/usr/bin/env bash
# tests/attach/snapshot_diff.sh - memattach diff of two snapshot directories:
# snapshots of the frag fixture (peak mode, prof on) before and after its
# 'peak' command; the headline deltas are the manifests' B - A exactly, the
# bin rows follow from the two bins.json files, the heap part is the dump
# diff of the two heap.heap files (its top grower the fixture's peak_site);
# a snapshot without prof says why there is no heap part; bad arguments.
. "$(dirname "$0")/../lib/common.sh"
plan 30

[ -x "$FIX/frag" ] || { fail "build/fixtures/frag missing (make fixtures)"; exit 1; }
PROF_CONF=prof:true,prof_active:true,prof_final:false
A=$TMP/snapA B=$TMP/snapB

MALLOC_CONF=$PROF_CONF fix_start frag -m peak -M 16 || { fail "peak fixture start"; exit 1; }
"$MA" snapshot $FIX_PID -o "$A" >"$TMP/sa.out" 2>&1
check "snapshot A (before the peak) exit 0" test $? -eq 0
p=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" peak)
peak_bytes=$(sed -n 's/^PEAKED bytes=\([0-9]*\).*/\1/p' <<<"$p")
check "fixture peaked ($p)" test -n "$peak_bytes"
"$MA" snapshot $FIX_PID -o "$B" >"$TMP/sb.out" 2>&1
check "snapshot B (at the peak) exit 0" test $? -eq 0
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
check "fixture verdict ok after two snapshots ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit $FIX_PID $FIX_FD
check "fixture exits 0" test $? -eq 0

# --- JSON: headline, bins, heap ---
"$MA" diff "$A" "$B" --json --top 1000 >"$TMP/d.json" 2>"$TMP/d.err"
rc=$?  # before the message's $(...) replaces $?
check "diff A B --json exit 0 ($(head -c 200 "$TMP/d.err"))" test "$rc" -eq 0
check "a/b name both snapshots" jcheck '
d=json.load(open(sys.argv[1]))
for s,dir in (("a",sys.argv[2]),("b",sys.argv[3])):
    m=json.load(open(dir+"/manifest.json"))
    assert d[s]["dir"]==dir and d[s]["pid"]==m["pid"] and d[s]["comm"]==m["comm"], d[s]
    assert d[s]["time"]==m["time"] and d[s]["heap"]==dir+"/heap.heap"' "$TMP/d.json" "$A" "$B"
check "headline deltas are manifest B - A exactly (and the gaps)" jcheck '
d=json.load(open(sys.argv[1]))
ma,mb=(json.load(open(x+"/manifest.json")) for x in sys.argv[2:4])
def val(m,k):
    h=m["headline"]
    if k in h: return h[k]
    if k in ("vm_rss","vm_hwm"): return m[k]
    if k=="page_slack": return max(h["resident"]-h["active"],0)
    if k=="slab_waste": return max(h["active"]-h["allocated"],0)
    raise KeyError(k)
keys=["allocated","active","resident","mapped","retained","metadata","tcache_bytes",
      "vm_rss","vm_hwm","page_slack","slab_waste"]
assert [r["key"] for r in d["headline"]]==keys, [r["key"] for r in d["headline"]]
for r in d["headline"]:
    a,b=val(ma,r["key"]),val(mb,r["key"])
    assert (r["a"],r["b"],r["delta"])==(a,b,b-a), (r,a,b)
    assert all(type(r[k]) is int for k in ("a","b","delta"))
    if a: assert abs(r["delta_pct"]-100*(b-a)/a)<1e-3*max(1,abs(r["delta_pct"])), r
    else: assert r["delta_pct"] is None' "$TMP/d.json" "$A" "$B"
check "allocated grew by at least the fixture's peak ($peak_bytes B)" jcheck '
d=json.load(open(sys.argv[1]))
r=[r for r in d["headline"] if r["key"]=="allocated"][0]
assert r["delta"]>=int(sys.argv[2]), r' "$TMP/d.json" "$peak_bytes"
check "bin rows follow from the two bins.json files" jcheck '
d=json.load(open(sys.argv[1]))
ba,bb=({b["size"]:b for b in json.load(open(x+"/bins.json"))["bins"]} for x in sys.argv[2:4])
z={"waste":0,"curregs":0,"curslabs":0}
want=[]
for s in sorted(set(ba)|set(bb)):
    a,b=ba.get(s,z),bb.get(s,z)
    if a["waste"]!=b["waste"] or a["curregs"]!=b["curregs"]:
        want.append(dict(size=s,waste_a=a["waste"],waste_b=b["waste"],waste_delta=b["waste"]-a["waste"],
            curregs_a=a["curregs"],curregs_b=b["curregs"],curregs_delta=b["curregs"]-a["curregs"],
            curslabs_a=a["curslabs"],curslabs_b=b["curslabs"],curslabs_delta=b["curslabs"]-a["curslabs"]))
want.sort(key=lambda r:(-abs(r["waste_delta"]),r["size"]))
got=[{k:r[k] for k in want[0]} for r in d["bins"]] if want else d["bins"]
assert d["bins_changed"]==len(want), (d["bins_changed"],len(want))
assert got==want, (got,want)' "$TMP/d.json" "$A" "$B"
"$MA" diff "$A/heap.heap" "$B/heap.heap" --json --top 1000 >"$TMP/h.json" 2>/dev/null
check "heap part is the dump diff of A/heap.heap and B/heap.heap" jcheck '
d=json.load(open(sys.argv[1])); h=json.load(open(sys.argv[2]))
assert d["heap_skipped"] is None and d["heap"]==h
assert d["heap"]["growers"][0]["leaf"].startswith("peak_site"), d["heap"]["growers"][0]' \
	"$TMP/d.json" "$TMP/h.json"
"$MA" diff "$A" "$B" --json --top 1 >"$TMP/d1.json"
check "--top 1 limits the bin rows" jcheck '
d=json.load(open(sys.argv[1]))
assert len(d["bins"])==min(1,d["bins_changed"]) and len(d["heap"]["growers"])<=1' "$TMP/d1.json"

# --- the human report ---
"$MA" diff "$A" "$B" >"$TMP/d.txt" 2>&1
check "diff A B exit 0" test $? -eq 0
check "report: both snapshots' pid and time" jcheck '
t=open(sys.argv[1]).read().splitlines()
for tag,dir,line in (("A",sys.argv[2],t[0]),("B",sys.argv[3],t[1])):
    m=json.load(open(dir+"/manifest.json"))
    assert line.startswith(tag+" "+dir+": pid %d (%s) at %s" % (m["pid"],m["comm"],m["time"])), line' \
	"$TMP/d.txt" "$A" "$B"
check "report: every headline row" jcheck '
import sys
t=open(sys.argv[1]).read()
for k in ["allocated","active","resident","mapped","retained","metadata","tcache_bytes",
          "VmRSS","VmHWM","page_slack","slab_waste"]:
    assert "\n"+k+" " in t, k' "$TMP/d.txt"
"$MA" diff "$A/heap.heap" "$B/heap.heap" >"$TMP/h.txt" 2>&1
check "report: the heap part is the dump diff's output" \
	cmp -s <(sed -n '/^heap dumps:$/,$p' "$TMP/d.txt" | tail -n +2) "$TMP/h.txt"
nb=$(jcheck 'print(min(json.load(open(sys.argv[1]))["bins_changed"],10))' "$TMP/d.json")
rows=$(sed -n '/^bins whose/,/^$/p' "$TMP/d.txt" | grep -cE '^ +[0-9]+ ')
check "report: $nb bin rows (default --top 10)" test "$rows" -eq "$nb"

# --- a snapshot without prof ---
N=$TMP/snapN
fix_start frag -m peak -M 1 || { fail "fixture start (no prof)"; exit 1; }
"$MA" snapshot $FIX_PID -o "$N" >/dev/null 2>&1
check "snapshot without prof exit 0" test $? -eq 0
fix_quit $FIX_PID $FIX_FD
check "no-prof fixture exits 0 (verdict ok)" test $? -eq 0
"$MA" diff "$A" "$N" --json >"$TMP/n.json" 2>"$TMP/n.err"
check "diff with a no-prof snapshot: exit 0" test $? -eq 0
check "... heap null, heap_skipped says why" jcheck '
d=json.load(open(sys.argv[1]))
assert d["heap"] is None and d["b"]["heap"] is None and d["a"]["heap_skipped"] is None
assert "no heap dump in B" in d["heap_skipped"] and "MALLOC_CONF=prof:true" in d["heap_skipped"], d["heap_skipped"]
assert len(d["headline"])==11' "$TMP/n.json"
"$MA" diff "$N" "$A" >"$TMP/n.txt" 2>&1
check "... and the report says so" says '^heap dumps: not compared: no heap dump in A .*prof:true' "$TMP/n.txt" 2

# --- errors ---
err1() { # NAME WANT_RC WANT_TEXT ARGS...: exit status and one message naming WANT_TEXT
	local name=$1 want=$2 text=$3 rc; shift 3
	"$MA" diff "$@" >"$TMP/e.out" 2>"$TMP/e.err"; rc=$?
	if [ $rc -eq "$want" ] && [ "$(unwrapped "$TMP/e.err" | wc -l)" -eq 1 ] &&
		unwrapped "$TMP/e.err" | grep -qF -- "$text" &&
		[ ! -s "$TMP/e.out" ]; then
		pass "$name"
	else
		fail "$name: rc=$rc $(head -c 300 "$TMP/e.err")"
	fi
}
err1 "snapshot dir vs dump file: exit 2" 2 "is a snapshot directory but" "$A" "$B/heap.heap"
err1 "dump file vs snapshot dir: exit 2" 2 "pass two snapshot directories" "$A/heap.heap" "$B"
mkdir "$TMP/notsnap" && echo x >"$TMP/notsnap/foo.txt"
err1 "directory without manifest: exit 1 naming what it holds" 1 "no manifest.json (it holds foo.txt)" \
	"$A" "$TMP/notsnap"
mkdir "$TMP/other" && echo '{"format":"something-else","format_version":1}' >"$TMP/other/manifest.json"
err1 "manifest of another format: exit 1 naming it" 1 'format "something-else"' "$TMP/other" "$B"
mkdir "$TMP/v2" && sed 's/"format_version":1/"format_version":2/' "$A/manifest.json" >"$TMP/v2/manifest.json"
err1 "format_version 2: exit 1" 1 "format_version 2" "$A" "$TMP/v2"
err1 "missing snapshot directory: exit 1 naming it" 1 "$TMP/nonexistent" "$A" "$TMP/nonexistent"
mkdir "$TMP/nostats" && cp "$A/manifest.json" "$TMP/nostats/"
err1 "snapshot without its stats.json: exit 1" 1 "stats.json" "$TMP/nostats" "$B"
"$MA" diff --help >"$TMP/help" 2>&1
check "diff --help describes snapshot directories" grep -q 'snapshot directories' "$TMP/help"
