#!/usr/bin/env bash
# The version matrix: every jemalloc release in JE_SRC_DIR (default
# ../shared/jemalloc), built by fixtures/jemalloc.mk into build/jemalloc/<v>/
# (the release Debian ships as libjemalloc2 is Debian's library itself, not
# built again), loaded into fixtures linked against Debian's libjemalloc.so.2
# (same SONAME) with LD_LIBRARY_PATH.  Per version:
#   - the build exists and is what the process maps;
#   - daemon -q, without and with MALLOC_CONF=prof:true: stats, bins, bins
#     --flush-tcache and purge equal the fixture's own reading (its quiesce
#     line) to the byte, heap-dump is refused without prof and names the
#     daemon's sites with it;
#   - frag (the fixture): bins' waste = the waste it built (its TRUTH);
#   - how many C API entry points have an inline-detour plan (tests/unit/detour
#     --plan; printed, not checked: these builds are -O1);
#   - threads in their exit (dying_threads_check in tests/lib/safety.sh):
#     never borrowed, where jemalloc's state byte sits and what its values
#     are differ between versions;
#   - fragharness at rate 1 (frag start --shift 0): the exact attribution
#     frag_harness.sh checks (the agent's GOT wrappers need no jemalloc
#     API, so every version, dev too, where experimental.hooks is gone).
# The builds: `make test` starts them in the background (fixtures/
# jemalloc.mk); this test takes their lock, so it waits for them, and
# builds what is missing when it runs alone.  A version whose build is
# missing or failed is a FAIL.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"

JE_SRC=${JE_SRC_DIR:-$ROOT/../shared/jemalloc}
JE_BUILD=$ROOT/build/jemalloc
PROF_CONF=prof:true,prof_active:true,prof_final:false
# Every mallctl name stats, bins, purge and heap-dump read or write.
NAMES="epoch version stats.allocated stats.active stats.resident stats.mapped stats.retained
stats.metadata stats.arenas.4096.pdirty stats.arenas.4096.pmuzzy arenas.page arenas.nbins
arenas.narenas arenas.bin.0.size arenas.bin.0.nregs arenas.bin.0.slab_size
stats.arenas.4096.bins.0.curregs stats.arenas.4096.bins.0.curslabs
stats.arenas.4096.bins.0.nonfull_slabs stats.arenas.4096.tcache_bytes arena.4096.purge
thread.tcache.flush thread.tcache.enabled opt.prof opt.prof_active prof.active prof.dump
opt.lg_prof_sample opt.tcache opt.background_thread background_thread opt.dirty_decay_ms
opt.muzzy_decay_ms"
DAEMON_CHECKS=7 FRAG_CHECKS=3 HARNESS_CHECKS=6

# unnice_builds: the background builds run at nice 19 so the other tests go
# first; once this test, the last, waits for them, they get the normal
# priority (at nice 19 on a machine whose CPUs other programs keep busy
# they starved past this test's time limit: 848 s of waiting with 4 CPU
# hogs per core).  Theirs are the processes at nice 19 working in the
# checkout or its build/jemalloc.
unnice_builds() {
	local p ni
	for p in /proc/[0-9]*; do
		ni=$(awk '{ print $19 }' "$p/stat" 2>/dev/null)
		[ "$ni" = 19 ] || continue
		case $(readlink "$p/cwd" 2>/dev/null) in
		"$ROOT" | "$JE_BUILD" | "$JE_BUILD"/*) renice -n 0 -p "${p#/proc/}" >/dev/null 2>&1 ;;
		esac
	done
}

mkdir -p "$JE_BUILD"
echo "# waiting for the jemalloc builds (lock $JE_BUILD/.lock; log $JE_BUILD/make.log)"
t0=$SECONDS
( while :; do unnice_builds; sleep 2; done ) &
renicer=$!
(unset MAKEFLAGS MAKELEVEL MFLAGS MAKEOVERRIDES
 flock "$JE_BUILD/.lock" make -C "$ROOT" --no-print-directory jemalloc-matrix JE_SRC_DIR="$JE_SRC") \
	>"$TMP/jm.log" 2>&1
kill "$renicer" 2>/dev/null
wait "$renicer" 2>/dev/null
echo "# builds ready after $((SECONDS - t0)) s: $(tail -4 "$TMP/jm.log" | tr '\n' ' ')"

versions=()
for t in "$JE_SRC"/jemalloc-*.tar.gz; do
	[ -f "$t" ] || continue
	v=${t##*/jemalloc-}
	v=${v%.tar.gz}
	# JE_VERSIONS="5.3.1 dev": only these (a run by hand)
	[ -z "${JE_VERSIONS:-}" ] || [[ " $JE_VERSIONS " == *" $v "* ]] || continue
	versions+=("$v")
done
if [ "${#versions[@]}" -eq 0 ]; then
	plan 1
	fail "no jemalloc tarballs in $JE_SRC${JE_VERSIONS:+ for $JE_VERSIONS} (set JE_SRC_DIR)"
	exit 1
fi
for f in daemon frag fragharness fragchurn jeprobe; do
	[ -x "$FIX/$f" ] || { plan 1; fail "fixture $f missing (make fixtures)"; exit 1; }
done

built() { [ -f "$JE_BUILD/$1/built" ] && [ -f "$JE_BUILD/$1/lib/libjemalloc.so.2" ]; }
libdir() { echo "$JE_BUILD/$1/lib"; }
n=0
for v in "${versions[@]}"; do
	if built "$v"; then
		n=$((n + 2 + 2 * DAEMON_CHECKS + FRAG_CHECKS + HARNESS_CHECKS + DYING_CHECKS))
	else
		n=$((n + 1))
	fi
done
NOSTATS_CHECKS=4
n=$((n + NOSTATS_CHECKS))
plan "$n"

py() { jcheck "$@"; }

# maps_only V PID: PID maps V's libjemalloc.so.2 and no other libjemalloc.
maps_only() {
	local want
	want=$(realpath "$JE_BUILD/$1/lib/libjemalloc.so.2")
	awk '$6 ~ /libjemalloc/ { print $6 }' "/proc/$2/maps" | sort -u >"$TMP/maps"
	[ "$(cat "$TMP/maps")" = "$want" ]
}

# same_as_self SELF MA KEYS: MA's values of KEYS equal the fixture's own (SELF), as text.
same_as_self() {
	py 'import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
if isinstance(b.get("after"), dict): b=b["after"]
d=["%s: target %s, memattach %s" % (k, a.get(k), b.get(k)) for k in sys.argv[3].split() if a.get(k) != b.get(k)]
print("; ".join(d) or "equal"); sys.exit(bool(d))' "$1" "$2" "$3"
}

HEADLINE="allocated active resident mapped retained metadata"
# ok RC...: every status given is 0 (one command for check, several results judged)
ok() { local r; for r; do [ "$r" = 0 ] || return 1; done; }
err() { head -c 300 "$1" | tr '\n' ' '; }

# daemon_run V CONF: the daemon on V with MALLOC_CONF=CONF; DAEMON_CHECKS checks.
daemon_run() {
	local v=$1 conf=$2 tag out rc st ver i
	tag="$v, ${conf:-no prof}"
	if ! LD_LIBRARY_PATH=$(libdir "$v") MALLOC_CONF=$conf fix_start daemon -q -t 3; then
		for i in $(seq "$DAEMON_CHECKS"); do fail "$tag: daemon did not start (check $i)"; done
		return
	fi
	local pid=$FIX_PID fd=$FIX_FD fo=$FIX_OUT
	maps_only "$v" "$pid"; st=$?
	check "$tag: the daemon maps build/jemalloc/$v's libjemalloc.so.2, no other ($(tr '\n' ' ' <"$TMP/maps"))" ok $st
	fix_cmd "$pid" "$fd" "$fo" quiesce >"$TMP/self.json"
	ver=$(sed -n 's/^version //p' "$JE_BUILD/$v/built")
	"$MA" stats "$pid" --json >"$TMP/stats.json" 2>"$TMP/stats.err"; rc=$?
	out=$(same_as_self "$TMP/self.json" "$TMP/stats.json" "$HEADLINE" 2>&1); st=$?
	check "$tag: stats says version $ver, headline = the target's own reading to the byte ($out $(err "$TMP/stats.err"))" \
		ok $rc $st "$([ "$(json_get "$TMP/stats.json" version 2>/dev/null)" = "$ver" ]; echo $?)"
	"$MA" bins "$pid" --json >"$TMP/bins.json" 2>"$TMP/bins.err"; rc=$?
	out=$(same_as_self "$TMP/self.json" "$TMP/bins.json" "allocated active resident" 2>&1 &&
		py 'import json,sys
d=json.load(open(sys.argv[1])); b=d["bins"]
regs=sum(x["curregs"]*x["size"] for x in b); slabs=sum(x["curslabs"]*x["slab_size"] for x in b)
print("%d bins, regions %d <= allocated %d, slabs %d <= active %d" % (len(b), regs, d["allocated"], slabs, d["active"]))
sys.exit(not (b and regs and regs <= d["allocated"] and slabs <= d["active"] and [x["size"] for x in b] == sorted(x["size"] for x in b)))' "$TMP/bins.json" 2>&1); st=$?
	check "$tag: bins: its stats = the target's reading, the bin totals fit in them ($out $(err "$TMP/bins.err"))" ok $rc $st
	"$MA" bins "$pid" --flush-tcache --json >"$TMP/flush.json" 2>"$TMP/flush.err"; rc=$?
	out=$(py 'import json,sys
d=json.load(open(sys.argv[1])); f=d["tcache_flush"]
print("flushed", f["flushed"], "skipped", f["skipped"], "tcache_bytes", d["tcache_bytes"])
sys.exit(not (f["flushed"] >= 3 and f["skipped"] == 0 and d["tcache_bytes"] == 0))' "$TMP/flush.json" 2>&1); st=$?
	check "$tag: bins --flush-tcache flushes every worker and leaves 0 cached ($out $(err "$TMP/flush.err"))" ok $rc $st
	"$MA" purge "$pid" --json >"$TMP/purge.json" 2>"$TMP/purge.err"; rc=$?
	fix_cmd "$pid" "$fd" "$fo" quiesce >"$TMP/self2.json"
	out=$(same_as_self "$TMP/self2.json" "$TMP/purge.json" "allocated active resident mapped retained" 2>&1 &&
		py 'import json,sys
d=json.load(open(sys.argv[1])); a=d["after"]
print("dirty", a["dirty"], "muzzy", a["muzzy"], "allocated delta", d["delta"]["allocated"])
sys.exit(not (a["dirty"] == 0 and a["muzzy"] == 0 and d["delta"]["allocated"] == 0))' "$TMP/purge.json" 2>&1); st=$?
	check "$tag: purge leaves nothing dirty, its after = the target's own reading ($out $(err "$TMP/purge.err"))" ok $rc $st
	heap_dump_check "$tag" "$pid" "$conf"
	fix_cmd "$pid" "$fd" "$fo" resume >/dev/null
	out=$(fix_cmd "$pid" "$fd" "$fo" verdict)
	fix_quit "$pid" "$fd"; rc=$?
	check "$tag: daemon verdict ok, clean exit ($out, status $rc)" \
		ok $rc "$([[ $out == "VERDICT ok"* ]]; echo $?)"
}

# heap_dump_check TAG PID CONF: with prof, a dump whose sites are the
# daemon's (jemalloc's own frames never blamed); without, a refusal.
heap_dump_check() {
	local rc st out
	rm -f "$TMP/d.heap"
	"$MA" heap-dump "$2" -o "$TMP/d.heap" >"$TMP/hd.out" 2>"$TMP/hd.err"; rc=$?
	if [ -z "$3" ]; then
		# the message is wrapped to the terminal's width: read it as one line
		tr '\n' ' ' <"$TMP/hd.err" | tr -s ' ' | grep -q "restart it with MALLOC_CONF=prof:true"; st=$?
		check "$1: heap-dump refused: exit 1, the restart instruction, no file ($(err "$TMP/hd.err"))" \
			ok "$([ $rc = 1 ]; echo $?)" $st "$([ ! -e "$TMP/d.heap" ]; echo $?)"
		return
	fi
	"$MA" aggregate "$TMP/d.heap" --json --top 1000 >"$TMP/agg.json" 2>"$TMP/agg.err"
	out=$(py 'import json,sys
s=json.load(open(sys.argv[1]))["sites"]
print(len(s), "sites, top", s[0]["leaf"], s[0]["frames"][:4])
sys.exit(not (any("worker_main" in " ".join(x["frames"]) for x in s) and
	not any("libjemalloc" in x["object"] for x in s)))' "$TMP/agg.json" 2>&1); st=$?
	grep -q "^heap_v2/" "$TMP/d.heap" 2>/dev/null || st=1
	check "$1: heap-dump: heap_v2, its sites are the daemon's workers, none in jemalloc ($out $(err "$TMP/hd.err") $(err "$TMP/agg.err"))" ok $rc $st
}

# frag_bins V: the frag fixture's known waste per class (FRAG_CHECKS checks).
frag_bins() {
	local v=$1 rc st out i
	if ! LD_LIBRARY_PATH=$(libdir "$v") fix_start frag; then
		for i in $(seq "$FRAG_CHECKS"); do fail "$v: frag fixture did not start (check $i)"; done
		return
	fi
	local pid=$FIX_PID fd=$FIX_FD fo=$FIX_OUT
	grep '^TRUTH ' "$fo" | sed 's/^TRUTH //' >"$TMP/ftruth.json"
	fix_cmd "$pid" "$fd" "$fo" quiesce >/dev/null
	"$MA" bins "$pid" --json >"$TMP/fb.json" 2>"$TMP/fb.err"; rc=$?
	out=$(waste_is_built "$TMP/fb.json" "192 384"); st=$?
	check "$v: bins: the sparse and half-full classes waste what the frag fixture built ($out $(err "$TMP/fb.err"))" ok $rc $st
	"$MA" bins "$pid" --flush-tcache --json >"$TMP/fbf.json" 2>"$TMP/fbf.err"; rc=$?
	out=$(waste_is_built "$TMP/fbf.json" "192 384 448"); st=$?
	check "$v: bins --flush-tcache: the cached 448 B regions come back, every waste as built ($out $(err "$TMP/fbf.err"))" ok $rc $st
	out=$(fix_cmd "$pid" "$fd" "$fo" verdict)
	fix_quit "$pid" "$fd"; rc=$?
	check "$v: frag fixture verdict ok, clean exit ($out, status $rc)" \
		ok $rc "$([[ $out == "VERDICT ok"* ]]; echo $?)"
}

# waste_is_built BINS_JSON SIZES: the waste of each class = the frag fixture's TRUTH.
waste_is_built() {
	py 'import json,sys
b={x["size"]: x["waste"] for x in json.load(open(sys.argv[1]))["bins"]}
t={c["size"]: c["waste"] for c in json.load(open(sys.argv[2]))["classes"]}
r=[(s, b.get(s), t[s]) for s in map(int, sys.argv[3].split())]
print(", ".join("%d B: %s, built %s" % x for x in r)); sys.exit(any(x[1] != x[2] for x in r))' \
		"$1" "$TMP/ftruth.json" "$2" 2>&1
}


# frag_harness V: frag at rate 1 (HARNESS_CHECKS checks).
frag_harness() {
	local v=$1 rc st out i
	if ! LD_LIBRARY_PATH=$(libdir "$v") fix_start fragharness; then
		for i in $(seq "$HARNESS_CHECKS"); do fail "$v: fragharness did not start (check $i)"; done
		return
	fi
	local pid=$FIX_PID
	"$MA" frag start "$pid" --shift 0 >"$TMP/fs.out" 2>"$TMP/fs.err"; rc=$?
	check "$v: frag start --shift 0 ($(err "$TMP/fs.out") $(err "$TMP/fs.err"))" ok $rc
	check "$v: fragharness build" harness build
	"$MA" frag report "$pid" --json --top 0 >"$TMP/r.json" 2>"$TMP/r.err"; rc=$?
	out=$(py 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
top=sorted(s["leaf"] for s in r["sites"][:2]); print("top", top, end="; ")
bad=top != ["sparse_site_256", "sparse_site_96"]
for c in t["classes"]:
    w=sum(s["waste"] for s in r["sites"] if s["leaf"]==c["site"])
    print(c["site"], w, "built", c["waste"], end="; ")
    bad |= abs(w-c["waste"]) > 0.005*t["sparse_waste"]
sys.exit(bad)' "$TMP/r.json" "$TMP/truth.json" 2>&1); st=$?
	check "$v: rate 1: the sparse sites top the ranking, each site is charged the waste built for it ($out $(err "$TMP/r.err"))" ok $rc $st
	out=$(py 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
got={str(c["size"]): c["surv_per_slab"] for c in r["classes"]}
print("attributed", r["attributed_waste"], "built", t["sparse_waste"], "surv/slab", got, "built", t["surv_per_slab"])
sys.exit(abs(r["attributed_waste"]-t["sparse_waste"]) > 0.005*t["sparse_waste"] or
	any(k not in got or abs(got[k]-float(x)) > 0.01 for k, x in t["surv_per_slab"].items()))' "$TMP/r.json" "$TMP/truth.json" 2>&1); st=$?
	check "$v: rate 1: attributed total = the built sparse waste, surv/slab per class as built ($out)" ok $st
	"$MA" frag stop "$pid" >"$TMP/stop.out" 2>&1; rc=$?
	check "$v: frag stop ($(err "$TMP/stop.out"))" ok $rc
	out=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
	fix_quit "$pid" "$FIX_FD"; rc=$?
	check "$v: fragharness verdict ok, clean exit ($out, status $rc)" \
		ok $rc "$([[ $out == "VERDICT ok"* ]]; echo $?)"
}

# build_ok V: V's stamp and library exist, with the SONAME the fixtures need.
build_ok() {
	local so=$JE_BUILD/$1/lib/libjemalloc.so.2
	built "$1" && readelf -d "$so" | grep -q 'SONAME.*\[libjemalloc\.so\.2\]'
}

for v in "${versions[@]}"; do
	if ! built "$v"; then
		fail "$v: no build in build/jemalloc/$v (make fixtures; its build.log: $(tail -3 "$JE_BUILD/$v/build.log" 2>/dev/null | tr '\n' ' '))"
		continue
	fi
	check "$v: built ($(head -1 "$JE_BUILD/$v/built")), SONAME libjemalloc.so.2" build_ok "$v"
	LD_LIBRARY_PATH=$(libdir "$v") "$FIX/jeprobe" $NAMES >"$TMP/probe" 2>&1
	check "$v: every mallctl name stats/bins/purge/heap-dump use answers ($(grep -v ' yes$' "$TMP/probe" | tr '\n' ' '))" \
		eval '[ "$(grep -c " yes$" "$TMP/probe")" = "$(wc -w <<<"$NAMES")" ]'
	# frag's inline detours (issue 21: planned, not yet written into
	# targets).  A measurement, not a check: these builds are -O1
	# (fixtures/jemalloc.mk), whose code starts differently from a
	# distribution's -O2; tests/unit/detour checks Debian's and the
	# static fixtures' jemalloc entry points strictly.
	out=$("$ROOT/build/tests/unit/detour" --plan "" "$(libdir "$v")/libjemalloc.so.2" 2>&1)
	echo "# $v (-O1): inline-detour plans: ${out#* has a plan }"
	daemon_run "$v" ""
	daemon_run "$v" "$PROF_CONF"
	frag_bins "$v"
	LD_LIBRARY_PATH=$(libdir "$v") dying_threads_check "$v" fragchurn
	frag_harness "$v"
done

# A jemalloc without names memattach needs (--disable-stats): stats and bins
# refuse, naming the name this jemalloc does not know; the target is unharmed.
nostats() {
	local rc1 rc2 out pid
	if ! [ -f "$JE_BUILD/nostats/built" ] ||
		! LD_LIBRARY_PATH=$JE_BUILD/nostats/lib fix_start daemon -q -t 3; then
		for i in $(seq "$NOSTATS_CHECKS"); do fail "--disable-stats build: missing or the daemon did not start (check $i)"; done
		return
	fi
	pid=$FIX_PID
	maps_only nostats "$pid"
	check "--disable-stats: the daemon maps that build ($(tr '\n' ' ' <"$TMP/maps"))" maps_only nostats "$pid"
	"$MA" stats "$pid" >/dev/null 2>"$TMP/ns1.err"; rc1=$?
	"$MA" bins "$pid" >/dev/null 2>"$TMP/ns2.err"; rc2=$?
	check "--disable-stats: stats refused, exit 1, naming the stats mallctl this jemalloc does not know ($(err "$TMP/ns1.err"))" \
		ok "$([ $rc1 = 1 ]; echo $?)" "$(tr '\n' ' ' <"$TMP/ns1.err" | tr -s ' ' | grep -Eq 'stats\.[a-z.]+.*(stats disabled|does not know)|does not know mallctl "stats\.'; echo $?)"
	check "--disable-stats: bins refused the same way ($(err "$TMP/ns2.err"))" \
		ok "$([ $rc2 = 1 ]; echo $?)" "$(tr '\n' ' ' <"$TMP/ns2.err" | tr -s ' ' | grep -Eq 'stats\.[a-z.]+.*(stats disabled|does not know)|does not know mallctl "stats\.'; echo $?)"
	out=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
	fix_quit "$pid" "$FIX_FD"; rc1=$?
	check "--disable-stats: daemon verdict ok, clean exit ($out, status $rc1)" \
		ok $rc1 "$([[ $out == "VERDICT ok"* ]]; echo $?)"
}
nostats
