#!/usr/bin/env bash
# frag start / report / stop against fixtures/fragharness, whose steady
# states have known answers (it prints them as TRUTH, checked against its
# arena's own bin counters):
#   build        sparse_site_256 keeps 1 of 16 per slab, sparse_site_96 8 of
#                128, dense_site_128 fills its slabs (waste ~0)
#   build_mixed  256 B pages: 2000 with site_a only, 1000 with site_b only,
#                1000 with both
# Checks: at rate 1 the sparse sites top the ranking and the attributed total
# equals the built waste, the dense control gets ~0, surv/slab per class is
# what was built; at shift 6 the total is within 10% of rate 1; focus mode
# is all-cohort on build and gives build_mixed's exact split; a report saved
# with -o is recomputed identically with --from; the agent's status,
# refusal of a second start, and errors; the fixture's verdict at the end.
. "$(dirname "$0")/../lib/common.sh"
plan 43
[ -x "$FIX/fragharness" ] || { fail "fixture fragharness missing (make fixtures)"; exit 1; }

py() { jcheck "$@"; }
fix_start fragharness || { fail "fragharness did not start"; exit 1; }
P=$FIX_PID

teardown() { fix_cmd "$P" "$FIX_FD" "$FIX_OUT" teardown | grep -q '^OK'; }
report() { "$MA" frag report "$P" --json --top 0 "$@" >"$TMP/r.json" 2>"$TMP/r.err"; }

# --- rate 1 ---
"$MA" frag start "$P" --shift 0 >"$TMP/start.out" 2>&1; rc=$?
check "frag start --shift 0 succeeds ($(head -1 "$TMP/start.out"))" [ "$rc" -eq 0 ]
"$MA" frag start "$P" --shift 4 >/dev/null 2>"$TMP/again.err"; rc=$?
check "a second frag start is refused: exit 1, 'already running' ($(cat "$TMP/again.err"))" \
	exit_and_says "$rc" 1 "already running" "$TMP/again.err"
"$MA" frag status "$P" --json >"$TMP/st.json"
check "frag status: running, shift mode ($(cat "$TMP/st.json"))" \
	py 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(not (s["state"]=="running" and s["mode"]=="shift" and s["shift"]==0))' "$TMP/st.json"
check "harness build" harness build
report -o "$TMP/saved.frag"; rc=$?
check "frag report --json succeeds ($(head -c 200 "$TMP/r.err"))" [ "$rc" -eq 0 ]
cp "$TMP/r.json" "$TMP/rate1.json"
judge() { py "$1" "$TMP/r.json" "$TMP/truth.json" 2>&1; }
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
top=[s["leaf"] for s in r["sites"][:2]]
print(top); sys.exit(sorted(top)!=["sparse_site_256","sparse_site_96"])')
check "rate 1: the sparse sites top the ranking ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
for c in t["classes"]:
    w=sum(s["waste"] for s in r["sites"] if s["leaf"]==c["site"])
    print(c["site"], w, "built", c["waste"], end="; ")
    if abs(w-c["waste"]) > 0.005*t["sparse_waste"]: sys.exit(1)')
check "rate 1: each site is charged the waste built for it, dense control ~0 ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
print(r["attributed_waste"], "built", t["sparse_waste"], "bins", r["bins_waste"])
sys.exit(abs(r["attributed_waste"]-t["sparse_waste"]) > 0.005*t["sparse_waste"])')
check "rate 1: attributed total = the built sparse waste ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1]))
print("attributed", r["attributed_waste"], "bins", r["bins_waste"])
sys.exit(not (0.95*r["bins_waste"] <= r["attributed_waste"] <= r["bins_waste"]))')
check "rate 1: cross-check with bins at the same moment: attributed within 5% below ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
got={str(c["size"]): c["surv_per_slab"] for c in r["classes"]}
for k,v in t["surv_per_slab"].items():
    print(k, got.get(k), "built", v, end="; ")
    if k not in got or abs(got[k]-float(v)) > 0.01: sys.exit(1)')
check "rate 1: surv/slab per class = what was built ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); s=[x for x in r["sites"] if x["leaf"]=="sparse_site_96"][0]
print(s["stack"][:3]); sys.exit(s["stack"][0]!="sparse_site_96" or "build_sparse" not in " ".join(s["stack"]))')
check "rate 1: stacks are symbolized from the leaf outward ($out)" [ $? -eq 0 ]
"$MA" frag report --from "$TMP/saved.frag" --json --top 0 >"$TMP/from.json" 2>"$TMP/from.err"
out=$(py 'import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
keys=["attributed_waste","samples","sites","classes","bins_waste"]
d=[k for k in keys if a[k]!=b[k]]; print(d or "same"); sys.exit(bool(d))' "$TMP/r.json" "$TMP/from.json" 2>&1)
check "report --from the -o file recomputes the same report ($out)" [ $? -eq 0 ]
"$MA" frag report "$P" >"$TMP/text.out" 2>&1
check "text report names the sites and says what it covers" \
	grep -q "covers: allocations made since frag start" "$TMP/text.out"
check "text report: leaves table with sparse_site_96 first" \
	eval "grep -A2 '^leaves by pinned waste' '$TMP/text.out' | tail -1 | grep -q sparse_site_96"
# The window ends when the samples were read; a long report says where its
# own time went (it said "N s before this report" of the whole span).
check "text report: when frag started, and the report's own time by phase" \
	bash -c "grep -q '^since: frag start at [0-9-]* [0-9:]*, [0-9.]* s before the samples were read' '$TMP/text.out' &&
		grep -q '^report: began [0-9.]* s after frag start; read the samples [0-9.]* s later (tcache flush' '$TMP/text.out'"
# --skip as aggregate's: the leading frames matching are dropped, the waste stays.
"$MA" frag report --from "$TMP/saved.frag" --json --top 0 --skip 'sparse_site_(96|256)' >"$TMP/skip.json" 2>"$TMP/skip.err"
out=$(py 'import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
la=[l["leaf"] for l in a["leaves_by_waste"]]; lb=[l["leaf"] for l in b["leaves_by_waste"]]
print(lb[:3], b["attributed_waste"], a["attributed_waste"])
sys.exit(b["attributed_waste"]!=a["attributed_waste"] or lb[0]!="build_sparse" or any(l.startswith("sparse_site") for l in lb))' \
	"$TMP/from.json" "$TMP/skip.json" 2>/dev/null); rc=$?
check "report --skip REGEX: the matching leaf frames give way to their caller, same waste (${out:-$(head -c 200 "$TMP/skip.err")})" \
	[ "$rc" -eq 0 ]
# The bound start prints is the documented default of --max-samples.
def=$("$MA" frag --help | tr -s ' \n' ' ' | sed -n 's/.*--max-samples N[^(]*(default \([0-9]*\).*/\1/p')
check "frag start: 'up to ${def:-?} samples', the documented default ($(grep -o 'up to [0-9]* samples' "$TMP/start.out"))" \
	grep -q "up to ${def:-none} samples" "$TMP/start.out"
check "frag start: the tables' reserved and resident sizes ($(grep '^tables' "$TMP/start.out"))" \
	grep -q '^tables: [0-9.]* [KMG]*i*B reserved, [0-9.]* [KMG]*i*B resident now' "$TMP/start.out"

# --- shift 6 ---
"$MA" frag stop "$P" >"$TMP/stop.out" 2>&1; rc=$?
check "frag stop succeeds ($(head -1 "$TMP/stop.out"))" [ "$rc" -eq 0 ]
# What stays mapped is said exactly: the agent library's mappings, as /proc
# shows them, and its zeroed data (an anonymous read-write mapping right
# after the library's last one).
n=0 bytes=0 prev_agent=0 prev_end=
while read -r range perms _ _ _ path; do
	lo=${range%-*} hi=${range#*-}
	if [[ $path == *memfd:memattach-agent* ]] ||
		{ [ "$prev_agent" = 1 ] && [ "$lo" = "$prev_end" ] && [ -z "$path" ] && [[ $perms == rw* ]]; }; then
		n=$((n + 1)) bytes=$((bytes + 16#$hi - 16#$lo))
		[[ $path == *memfd:memattach-agent* ]] && prev_agent=1 || prev_agent=0
	else
		prev_agent=0
	fi
	prev_end=$hi
done <"/proc/$P/maps"
check "frag stop: says what stays mapped: $n mappings, $((bytes / 1024)) KiB ($(grep -o 'stays mapped: [^;]*' "$TMP/stop.out"))" \
	grep -qE "its library stays mapped: $n mappings, $((bytes / 1024))(\.0)? KiB" "$TMP/stop.out"
"$MA" frag status "$P" --json >"$TMP/st.json"
check "after stop: status says stopped, code still mapped ($(cat "$TMP/st.json"))" grep -q '"state":"stopped"' "$TMP/st.json"
check "teardown" teardown
"$MA" frag start "$P" --shift 6 >/dev/null 2>&1
check "frag start --shift 6 after a stop (agent reused)" [ $? -eq 0 ]
check "harness build (2)" harness build
report
out=$(py 'import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
print("shift 6:", b["attributed_waste"], "rate 1:", a["attributed_waste"], "samples", b["samples"])
sys.exit(abs(b["attributed_waste"]-a["attributed_waste"]) > 0.10*a["attributed_waste"])' "$TMP/rate1.json" "$TMP/r.json" 2>&1)
check "shift 6: attributed total within 10% of rate 1 ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); top=[s["leaf"] for s in r["sites"][:2]]; print(top)
sys.exit(sorted(top)!=["sparse_site_256","sparse_site_96"])')
check "shift 6: the sparse sites still top the ranking ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); got={c["size"]: round(c["surv_per_slab"],3) for c in r["classes"]}; print(got)
sys.exit(not (abs(got[256]-1)<0.01 and abs(got[96]-8)<0.01 and abs(got[128]-32)<0.01))')
check "shift 6: surv/slab still exact ($out)" [ $? -eq 0 ]

# --- focus mode ---
"$MA" frag stop "$P" >/dev/null 2>&1; teardown
"$MA" frag start "$P" --focus 256 --json >"$TMP/fs.json" 2>&1
check "frag start --focus 256 ($(cat "$TMP/fs.json"))" grep -q '"mode":"focus"' "$TMP/fs.json"
check "harness build (focus)" harness build
report
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
s256=[c for c in t["classes"] if c["size"]==256][0]
print({k:r[k] for k in ("pages","cohort_pages","mixed_pages")}, "slabs", s256["slabs"])
sys.exit(not (r["pages"]==s256["slabs"] and r["cohort_pages"]==r["pages"] and r["mixed_pages"]==0))')
check "focus 256 on build: every page a cohort ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); print([l["leaf"] for l in r["leaves"]]); sys.exit([l["leaf"] for l in r["leaves"]]!=["sparse_site_256"])')
check "focus 256 on build: only the 256 B site recorded ($out)" [ $? -eq 0 ]
"$MA" frag stop "$P" >/dev/null 2>&1; teardown
"$MA" frag start "$P" --focus 256 >/dev/null 2>&1
check "harness build_mixed" harness build_mixed
report
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
keys=("pages","cohort_pages","mixed_pages")
print({k:r[k] for k in keys}, "built", {k:t[k] for k in keys})
sys.exit(any(r[k]!=t[k] for k in keys))')
check "focus 256 on build_mixed: pages, cohort and mixed = built ($out)" [ $? -eq 0 ]
out=$(judge 'import json,sys
r=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]))
got={l["leaf"]:(l["pages"],l["sole_pages"]) for l in r["leaves"]}; want={l["leaf"]:(l["pages"],l["sole_pages"]) for l in t["leaves"]}
print(got, "built", want); sys.exit(got!=want)')
check "focus 256 on build_mixed: per leaf pages and sole pages = built ($out)" [ $? -eq 0 ]
"$MA" frag report "$P" >"$TMP/ftext.out" 2>&1
check "focus text report lists the leaf sets" grep -q "pages = {site_a, site_b}" "$TMP/ftext.out"
"$MA" frag stop "$P" >/dev/null 2>&1

# --- --max-samples: the bound start prints is the one the agent keeps ---
"$MA" frag start "$P" --shift 0 --max-samples 640 >"$TMP/ms.out" 2>&1
check "frag start --max-samples 640: 'up to 640 samples' ($(grep -o 'up to [0-9]* samples' "$TMP/ms.out"))" \
	grep -q "up to 640 samples" "$TMP/ms.out"
harness build >/dev/null
"$MA" frag status "$P" --json >"$TMP/ms.json"
out=$(py 'import json,sys; s=json.load(open(sys.argv[1])); print(s["samples"], s["dropped_full"]); sys.exit(not (s["samples"]<=640 and s["dropped_full"]>0))' "$TMP/ms.json" 2>&1)
check "... and holds at most 640, the rest counted as dropped ($out)" [ $? -eq 0 ]
"$MA" frag stop "$P" >/dev/null 2>&1; teardown

# --- errors ---
"$MA" frag report "$P" >/dev/null 2>"$TMP/e1"; rc=$?
check "report with no agent running: exit 1, says how to start one" exit_and_says "$rc" 1 "frag start" "$TMP/e1"
"$MA" frag start "$P" --focus 100 >/dev/null 2>"$TMP/e2"; rc=$?
check "--focus 100 (not a class): exit 1 listing the classes ($(cat "$TMP/e2"))" exit_and_says "$rc" 1 "classes are: 8 16" "$TMP/e2"
"$MA" frag start "$P" --focus 256 --shift 3 >/dev/null 2>"$TMP/e3"; rc=$?
check "--focus with --shift: usage error, exit 2" exit_and_says "$rc" 2 "exclude" "$TMP/e3"
printf 'memattach-frag 1\nmode shift\nshift 99\n' >"$TMP/bad.frag"
"$MA" frag report --from "$TMP/bad.frag" >/dev/null 2>"$TMP/e4"; rc=$?
check "--from a damaged file: exit 1 with the line ($(cat "$TMP/e4"))" exit_and_says "$rc" 1 "bad.frag:3" "$TMP/e4"

v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
check "fragharness verdict ok after everything ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$P" "$FIX_FD"; rc=$?
check "fragharness exits cleanly (status $rc)" [ "$rc" -eq 0 ]
