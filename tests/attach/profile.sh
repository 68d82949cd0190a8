#!/usr/bin/env bash
# memattach profile start/status/stop: the agent's heap profile of a process
# started without prof, against fixtures/proftruth, which allocates known
# bytes at known sites after the profile starts and prints them (TRUTH, in
# usable sizes, per size).
# Checks: at --rate 1 every site's live and since-start objects and bytes
# are exact in aggregate's reading of heap-dump's dump, and jeprof reads the
# same dump; at --rate 4096 every site within 5% of the truth; at the
# default rate (512 KiB) every site within 3 standard errors of the truth
# (the standard error of the estimator, from the truth and the rate; a
# second profile where the first had one beyond by chance), and
# the standard error aggregate reports agrees with it; snapshot and watch
# take the agent's profile; beside jemalloc's own profiler (prof:true, both
# at 4 KiB) every site's bytes agree within 4 combined standard errors;
# refusals (a second start, frag report or stop on
# a profile, heap-dump after stop); the fixture's verdict at the end.
. "$(dirname "$0")/../lib/common.sh"
plan 39
[ -x "$FIX/proftruth" ] || { fail "fixture proftruth missing (make fixtures)"; exit 1; }

# 128 rounds: at --rate 4096 the smallest site (64 B objects) then has about
# 4,000 samples, a standard error of 1.6%: 5% is 3.2 of them.
fix_start proftruth -k 128 || { fail "proftruth did not start"; exit 1; }
P=$FIX_PID

# alloc [K]: K rounds (the fixture's -k by default); the truth in truth.json.
alloc() { FIX_CMD_WAIT_S=300 fix_cmd "$P" "$FIX_FD" "$FIX_OUT" "alloc${1:+ $1}" | sed -n 's/^TRUTH //p' >"$TMP/truth.json"; [ -s "$TMP/truth.json" ]; }
release() { fix_cmd "$P" "$FIX_FD" "$FIX_OUT" free | grep -q '^OK'; }
dump() { "$MA" heap-dump "$P" -o "$TMP/$1.heap" --json >"$TMP/$1.dump.json" 2>"$TMP/$1.err" &&
	"$MA" aggregate "$TMP/$1.heap" --json --top 0 >"$TMP/$1.json" 2>>"$TMP/$1.err"; }
# judge RUN CODE: CODE sees t (the truth's sites by name), a (aggregate's
# sites by leaf), c (its churn rows by leaf), rate.
judge() {
	local run=$1; shift
	jcheck '
t = {s["site"]: s for s in load(sys.argv[1])["sites"]}
agg = load(sys.argv[2])
a = {s["leaf"]: s for s in agg["sites"]}
c = {s["leaf"]: s for s in agg["churn"]}
rate = agg["period"]
'"$1" "$TMP/truth.json" "$TMP/$run.json"
}

# --- rate 1: exact ---
"$MA" profile start "$P" --rate 1 --json >"$TMP/start.json" 2>"$TMP/start.err"; rc=$?
check "profile start --rate 1 succeeds ($(head -c 200 "$TMP/start.err"))" [ "$rc" -eq 0 ]
check "profile start --json: mode profile, rate 1 ($(cat "$TMP/start.json"))" \
	jcheck 'j = load(sys.argv[1]); assert j["mode"] == "profile" and j["rate"] == 1, j' "$TMP/start.json"
"$MA" profile start "$P" >/dev/null 2>"$TMP/again.err"; rc=$?
check "a second profile start is refused: exit 1, 'already running' ($(cat "$TMP/again.err"))" \
	exit_and_says "$rc" 1 "already running" "$TMP/again.err"
"$MA" frag report "$P" >/dev/null 2>"$TMP/fr.err"; rc=$?
check "frag report on a profile is refused: exit 1, 'keeps a heap profile' ($(cat "$TMP/fr.err"))" \
	exit_and_says "$rc" 1 "keeps a heap profile" "$TMP/fr.err"
"$MA" frag stop "$P" >/dev/null 2>"$TMP/fs.err"; rc=$?
check "frag stop on a profile is refused: exit 1, 'profile stop' ($(cat "$TMP/fs.err"))" \
	exit_and_says "$rc" 1 "profile stop" "$TMP/fs.err"
"$MA" profile status "$P" --json >"$TMP/st.json"
check "profile status: running, mode profile, rate 1 ($(head -c 300 "$TMP/st.json"))" \
	jcheck 'j = load(sys.argv[1]); assert j["state"] == "running" and j["mode"] == "profile" and j["rate"] == 1, j' "$TMP/st.json"

# One round at rate 1 is enough (every allocation recorded).
fix_cmd "$P" "$FIX_FD" "$FIX_OUT" free >/dev/null
check "proftruth allocates one round (truth: $(head -c 120 "$TMP/truth.json" 2>/dev/null))" alloc 1
dump r1; rc=$?
check "heap-dump and aggregate of the agent's profile succeed ($(head -c 300 "$TMP/r1.err"))" [ "$rc" -eq 0 ]
check "heap-dump --json says it comes from the agent, since when ($(cat "$TMP/r1.dump.json"))" \
	jcheck 'j = load(sys.argv[1]); assert j["source"] == "agent" and j["rate"] == 1 and j["since_unix_ns"] > 0, j' "$TMP/r1.dump.json"
check "the dump itself says so: line 2 names the agent and its start (jeprof skips it), aggregate --json reads source agent, the same start" \
	jcheck 'd = load(sys.argv[1]); a = load(sys.argv[2]); l = open(sys.argv[3]).read().split("\n")[1]
assert l.startswith("# memattach agent profile: allocations since unix_ns %d " % d["since_unix_ns"]), l
assert a["source"] == "agent" and a["since_unix_ns"] == d["since_unix_ns"], (a.get("source"), a.get("since_unix_ns"))' \
	"$TMP/r1.dump.json" "$TMP/r1.json" "$TMP/r1.heap"
"$MA" aggregate "$TMP/r1.heap" --pid "$P" >"$TMP/pid.txt" 2>"$TMP/pid.err" &&
	"$MA" aggregate "$TMP/r1.heap" --pid "$P" --json >"$TMP/pid.json" 2>>"$TMP/pid.err"; rc=$?
check "aggregate --pid of the agent's dump: stats.allocated read, no tolerance verdict nor warning, the text says what the profile leaves out ($(head -c 200 "$TMP/pid.err"))" \
	jcheck 'j = load(sys.argv[1])["stats"]; txt = open(sys.argv[2]).read().replace("\n", " ")
assert j["allocated"] > 0 and "within_tolerance" not in j, j
assert "leaves out the objects allocated before it started" in " ".join(txt.split()), txt[-300:]
assert not open(sys.argv[3]).read(), "a warning"' "$TMP/pid.json" "$TMP/pid.txt" "$TMP/pid.err"
out=$(judge r1 '
for n, s in t.items():
    if s["objs"]:
        assert n in a, (n, "missing")
        assert (a[n]["objects"], a[n]["scaled_bytes"]) == (s["objs"], s["bytes"]), (n, a[n]["objects"], a[n]["scaled_bytes"], s)
    else:
        assert n not in a, (n, "has live bytes")
print(sum(s["bytes"] for s in t.values()), "live bytes exact")' 2>&1)
check "rate 1: every site's live objects and bytes are exact ($out)" [ $? -eq 0 ]
out=$(judge r1 '
for n, s in t.items():
    assert (c[n]["accum_objects"], c[n]["accum_bytes"]) == (s["accum_objs"], s["accum_bytes"]), (n, c[n], s)
print(sum(s["accum_bytes"] for s in t.values()), "bytes allocated since start, exact")' 2>&1)
check "rate 1: every site's allocations since start are exact, freed ones too ($out)" [ $? -eq 0 ]
jeprof --text --show_bytes "$FIX/proftruth" "$TMP/r1.heap" >"$TMP/jeprof.txt" 2>"$TMP/jeprof.err"
# Each site's bytes: its cumulative column (the fixture allocates through an inlined helper).
out=$(jcheck '
txt = open(sys.argv[1]).read()
t = {s["site"]: s for s in load(sys.argv[2])["sites"]}
for n, s in t.items():
    if not s["objs"]: continue
    m = re.search(r"^\s*[0-9]+\s+[0-9.]+%\s+[0-9.]+%\s+([0-9]+)\s+[0-9.]+% " + n + r"\b", txt, re.M)
    assert m, (n, "not in jeprof --text")
    assert int(m.group(1)) == s["bytes"], (n, m.group(1), s["bytes"])
print("jeprof: every site, in bytes as allocated")' "$TMP/jeprof.txt" "$TMP/truth.json" 2>&1)
rc=$?  # before the message's $(...) replaces $?
check "jeprof --text reads the dump: every site's bytes ($out; $(head -c 200 "$TMP/jeprof.err"))" [ "$rc" -eq 0 ]
"$MA" snapshot "$P" -o "$TMP/snap" >/dev/null 2>"$TMP/snap.err"; rc=$?
check "snapshot takes the agent's profile: heap.heap, manifest's heap_note names the agent ($(head -c 200 "$TMP/snap.err"))" \
	jcheck 'import os; m = load(sys.argv[1] + "/manifest.json"); assert os.path.getsize(sys.argv[1] + "/heap.heap") > 0 and "agent" in m["heap_note"], m.get("heap_note")' "$TMP/snap"
"$MA" profile stop "$P" --json >"$TMP/stop.json" 2>"$TMP/stop.err"; rc=$?
check "profile stop succeeds ($(head -c 200 "$TMP/stop.err"))" [ "$rc" -eq 0 ]
"$MA" heap-dump "$P" -o "$TMP/after.heap" 2>"$TMP/after.err"; rc=$?
check "after stop, heap-dump refuses, naming profile start ($(cat "$TMP/after.err"))" \
	exit_and_says "$rc" 1 "profile start" "$TMP/after.err"
check "proftruth frees its objects" release

# --- rate 4096: within 5% ---
"$MA" profile start "$P" --rate 4096 >/dev/null 2>"$TMP/s2.err"; rc=$?
check "profile start --rate 4096 succeeds ($(head -c 200 "$TMP/s2.err"))" [ "$rc" -eq 0 ]
check "proftruth allocates 128 rounds" alloc
dump r4096; rc=$?
check "heap-dump and aggregate at --rate 4096 ($(head -c 300 "$TMP/r4096.err"))" [ "$rc" -eq 0 ]
out=$(judge r4096 '
worst = 0
for n, s in t.items():
    if s["objs"]:
        e = abs(a[n]["scaled_bytes"] - s["bytes"]) / s["bytes"]; worst = max(worst, e)
        assert e <= 0.05, (n, "live", a[n]["scaled_bytes"], s["bytes"])
    e = abs(c[n]["accum_bytes"] - s["accum_bytes"]) / s["accum_bytes"]; worst = max(worst, e)
    assert e <= 0.05, (n, "since start", c[n]["accum_bytes"], s["accum_bytes"])
print("worst %.2f%%" % (100 * worst))' 2>&1)
check "rate 4096: every site within 5% of the truth, live and since start ($out)" [ $? -eq 0 ]
"$MA" profile stop "$P" >/dev/null 2>&1
check "proftruth frees its objects" release

# --- the default rate: within 3 standard errors ---
"$MA" profile start "$P" >/dev/null 2>"$TMP/s3.err"; rc=$?
check "profile start at the default rate succeeds ($(head -c 200 "$TMP/s3.err"))" [ "$rc" -eq 0 ]
"$MA" profile status "$P" --json >"$TMP/st3.json"
check "the default rate is 524288, jemalloc's lg_prof_sample:19 ($(head -c 200 "$TMP/st3.json"))" \
	jcheck 'assert load(sys.argv[1])["rate"] == 524288' "$TMP/st3.json"
check "proftruth allocates 128 rounds" alloc
dump rdef; rc=$?
check "heap-dump and aggregate at the default rate ($(head -c 300 "$TMP/rdef.err"))" [ "$rc" -eq 0 ]
# The estimator's standard error from the truth: per size, N objects each
# sampled with p = 1 - exp(-size/rate), N/p*(1-p) * size^2 summed.
SE='
import math
def se(sizes):
    v = 0.0
    for size, n in sizes:
        p = -math.expm1(-size / rate)
        v += n * (1 - p) / p * size * size
    return math.sqrt(v)
'
# zs_within RUN LIMIT: every site's estimate (live and since start) within
# LIMIT standard errors of the truth; prints the z values.
zs_within() {
	judge "$1" "$SE"'
zs = []
for n, s in t.items():
    if s["objs"]:
        z = (a.get(n, {}).get("scaled_bytes", 0) - s["bytes"]) / max(se(s["live_sizes"]), 1.0); zs.append((n, "live", round(z, 2)))
    z = (c.get(n, {}).get("accum_bytes", 0) - s["accum_bytes"]) / max(se(s["accum_sizes"]), 1.0); zs.append((n, "since", round(z, 2)))
print("z:", " ".join("%s/%s %+.1f" % x for x in zs))
assert all(abs(z) <= '"$2"' for _, _, z in zs), "beyond '"$2"'"' 2>&1
}
# Each of the 13 estimates is beyond 3 standard errors by chance alone in
# 0.27% of profiles, so one of them in about 3.5%: a profile where one is
# gets a second one of the same workload, which must have none (an unbiased
# estimator fails both in about 0.1% of runs, a biased one in most).
out=$(zs_within rdef 3); st=$?
if [ "$st" -ne 0 ]; then
	first=$out
	"$MA" profile stop "$P" >/dev/null 2>&1
	release && "$MA" profile start "$P" >/dev/null 2>"$TMP/s3b.err" && alloc && dump rdef; rc=$?
	out=$(zs_within rdef 3); st=$?
	out="first profile: $first; second profile (start/alloc/dump $rc): $out"
fi
check "default rate: every site within 3 standard errors of the truth ($out)" [ "$st" -eq 0 ]
out=$(judge rdef "$SE"'
rs = []
for n, s in t.items():
    want = se(s["accum_sizes"])
    expected_samples = sum(k * -math.expm1(-z / rate) for z, k in s["accum_sizes"])
    if expected_samples < 40: continue
    r = c[n]["accum_se_bytes"] / want; rs.append((n, round(r, 2)))
    assert 0.6 <= r <= 1.5, (n, c[n]["accum_se_bytes"], want)
assert rs
print("reported/true se:", rs)' 2>&1)
check "default rate: the standard error aggregate reports is the estimator's (0.6-1.5x, sites of 40+ samples) ($out)" [ $? -eq 0 ]
"$MA" aggregate "$TMP/rdef.heap" >"$TMP/rdef.txt" 2>&1
check "aggregate's text shows the se column and the since-start table ($(grep -m1 'allocated since' "$TMP/rdef.txt"))" \
	bash -c 'grep -q "^ *scaled  *se " "$1" && grep -q "^allocated since the profile began" "$1" && grep -q "site_churn" "$1"' _ "$TMP/rdef.txt"
"$MA" profile stop "$P" >/dev/null 2>&1
"$MA" profile status "$P" --json >"$TMP/st4.json"
check "profile status after stop: stopped ($(head -c 200 "$TMP/st4.json"))" \
	jcheck 'assert load(sys.argv[1])["state"] == "stopped"' "$TMP/st4.json"

v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
check "proftruth verdict ok after everything ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$P" "$FIX_FD"; rc=$?
check "proftruth exits 0" [ "$rc" -eq 0 ]

# --- beside jemalloc's own profiler, both at 4 KiB ---
MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:12 fix_start proftruth -k 32 ||
	{ fail "proftruth with prof:true did not start"; exit 1; }
P=$FIX_PID
"$MA" profile start "$P" --rate 4096 >/dev/null 2>"$TMP/s5.err"; rc=$?
check "profile start beside prof:true succeeds ($(head -c 200 "$TMP/s5.err"))" [ "$rc" -eq 0 ]
check "proftruth allocates 32 rounds" alloc
dump jem; rc=$?
check "heap-dump with prof on writes jemalloc's own dump ($(cat "$TMP/jem.dump.json"))" \
	jcheck 'assert load(sys.argv[1])["source"] == "jemalloc" and load(sys.argv[2])["source"] == "jemalloc"' "$TMP/jem.dump.json" "$TMP/jem.json"
"$MA" heap-dump "$P" --agent -o "$TMP/agent.heap" --json >"$TMP/agent.dump.json" 2>"$TMP/agent.err" &&
	"$MA" aggregate "$TMP/agent.heap" --json --top 0 >"$TMP/agent.json" 2>>"$TMP/agent.err"; rc=$?
check "heap-dump --agent writes the agent's profile all the same ($(head -c 200 "$TMP/agent.err"))" \
	jcheck 'assert load(sys.argv[1])["source"] == "agent"' "$TMP/agent.dump.json"
# Each estimate has the standard error of its sampling (the same law for
# both at one rate): the difference of two, sqrt(2) of it.
out=$(jcheck "$SE"'
t = {s["site"]: s for s in load(sys.argv[1])["sites"]}
j = {s["leaf"]: s for s in load(sys.argv[2])["sites"]}
a = {s["leaf"]: s for s in load(sys.argv[3])["sites"]}
rate = 4096
zs = []
for n, s in t.items():
    if not s["objs"]: continue
    assert n in j and n in a, (n, n in j, n in a)
    z = (a[n]["scaled_bytes"] - j[n]["scaled_bytes"]) / max(math.sqrt(2) * se(s["live_sizes"]), 1.0)
    zs.append((n, round(z, 2)))
assert all(abs(z) <= 4 for _, z in zs), zs
print("agent - jemalloc, in combined se:", zs)' "$TMP/truth.json" "$TMP/jem.json" "$TMP/agent.json" 2>&1)
check "beside prof:true: every site's bytes agree with jemalloc's within 4 combined standard errors ($out)" [ $? -eq 0 ]
"$MA" profile stop "$P" >/dev/null 2>&1
v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
check "proftruth (prof:true) verdict ok ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$P" "$FIX_FD"
