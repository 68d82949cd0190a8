#!/usr/bin/env bash
# tests/attach/ab.sh - memattach ab on fixtures/abdaemon, which forks into
# the background holding BASE KiB plus a uniform random 0..NOISE KiB (and
# EXTRA KiB more on side B) in 1 KiB objects, checked at SIGTERM:
#   - B retains 2 MiB more (noise 512 KiB, 6 runs a side): allocated B - A is
#     2 MiB within a few of its standard errors and called significant;
#     every daemon's objects intact after memattach read and purged it;
#   - --heap (prof:true, lg_prof_sample:12): the top site whose B - A
#     interval excludes 0 is retain_extra() (where abdaemon keeps the extra
#     objects), 2 MiB within its interval, any other site far below it;
#     without prof: said, and the daemon stopped all the same; without
#     prof but profiled by the agent (the side command runs memattach
#     profile start before the daemon's workload, --rate 1): retain_extra,
#     B - A the 2 MiB to 1%;
#   - --json's keys and arrays; -o DIR: a snapshot per sample, samples.tsv,
#     ab.svg (a histogram per metric), and memattach diff opens two of them;
#   - 20 A/A experiments (3 runs a side): allocated called significant in at
#     most 5 of them (5% expected: 1; more than 5 has probability 0.3%);
#   - Debian's redis-server filled with 20,000 small hashes, B with
#     hash-max-listpack-entries 0 (hash tables, not listpacks): B's allocated
#     found larger (fixtures/ab_redis_side.sh); with --heap (prof:true) the
#     hash tables' sites (dict*) grow and the listpacks' (lpInsert) shrink;
#     every server gone after;
#   - --match, --warmup, --order random, --lifecycle reuse (one daemon,
#     never stopped); a process older than the sample's command (a stale
#     --pid, an older instance for --match), or one the sample's command did
#     not start (another's, of the same name), is never taken nor stopped; errors: a side command that fails, a --pid command
#     that prints no PID, a PID that is gone, no --match match, bad options:
#     each names the sample (or the option) and keeps the samples taken.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 45
need_fixtures abdaemon
D=$FIX/abdaemon
side() { echo "$D -f $TMP/pid -v $TMP/verdict.\$\$ -m 2048 -n 512 $*"; }
PIDCMD="cat $TMP/pid"

# Every verdict file written since the last call: all "ok" (and how many).
verdicts_ok() {
	local n=0 bad=0 f
	for f in "$TMP"/verdict.*; do
		[ -e "$f" ] || continue
		n=$((n + 1))
		grep -q '^VERDICT ok' "$f" || bad=$((bad + 1))
		rm -f "$f"
	done
	VERDICTS="$n daemons, $bad damaged"
	[ "$n" -gt 0 ] && [ "$bad" -eq 0 ]
}

# --- B retains 2 MiB more ---
"$MA" ab -a "$(side)" -b "$(side -x 2048)" --pid "$PIDCMD" --runs 6 --json -o "$TMP/out" \
	>"$TMP/ab.json" 2>"$TMP/ab.err"
rc=$?
check "ab, B holding 2 MiB more: exit 0 ($(tail -1 "$TMP/ab.err" | cut -c1-160))" [ "$rc" -eq 0 ]
check "one progress line per sample on stderr (12)" [ "$(grep -c '^ab: sample [0-9]*/12 ([ab]): pid ' "$TMP/ab.err")" -eq 12 ]
out=$(jcheck '
r = load(sys.argv[1])
m = {x["name"]: x for x in r["metrics"]}
a = m["allocated"]
se = ((a["a_sd"] ** 2 + a["b_sd"] ** 2) / 6) ** 0.5
d = a["b_mean"] - a["a_mean"]
print("B-A %.0f KiB (expected 2048), se %.0f KiB, B/A %.3f [%.3f, %.3f]" % (d / 1024, se / 1024, a["ratio"], a["ci_low"], a["ci_high"]))
assert a["significant"] and a["ci_low"] > 1, "not significant"
assert abs(d - 2097152) <= 4 * se + 65536, "B-A away from 2 MiB"
assert len(a["a"]) == 6 and len(a["b"]) == 6, "6 samples a side"
' "$TMP/ab.json" 2>&1)
check "allocated: B - A is the 2 MiB retained, within its noise, significant ($out)" [ $? -eq 0 ]
out=$(jcheck '
r = load(sys.argv[1])
assert r["runs"] == 6
names = [x["name"] for x in r["metrics"]]
assert names == ["vm_hwm", "allocated", "active", "resident", "slab_waste", "dirty", "metadata"], names
keys = {"name", "a", "b", "a_mean", "b_mean", "ratio", "ci_low", "ci_high", "significant"}
for x in r["metrics"]:
    assert keys <= set(x), (x["name"], keys - set(x))
assert r["metrics"][0]["significant"], "vm_hwm: B peaks higher"
assert isinstance(r["sites"], list)
print("keys ok, vm_hwm B/A %.3f" % r["metrics"][0]["ratio"])
' "$TMP/ab.json" 2>&1)
check "--json: runs, metrics[{name, a[], b[], a_mean, b_mean, ratio, ci_low, ci_high, significant}], sites ($out)" [ $? -eq 0 ]
verdicts_ok
check "every daemon's objects intact after the reading and purge, each stopped by SIGTERM: $VERDICTS" \
	[ "$VERDICTS" = "12 daemons, 0 damaged" ]
check "-o: a snapshot per sample (12) and samples.tsv (13 lines)" \
	eval '[ "$(ls -d "$TMP"/out/0*-[ab] | wc -l)" -eq 12 ] && [ "$(wc -l <"$TMP/out/samples.tsv")" -eq 13 ]'
out=$(python3 - "$TMP/out/ab.svg" <<'PY' 2>&1
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
panels = [g for g in d.getElementsByTagName("g") if g.getAttribute("transform").startswith("translate")]
titles = [t.firstChild.data for t in d.getElementsByTagName("text") if t.firstChild and t.firstChild.nodeType == t.TEXT_NODE and ": " in t.firstChild.data]
bars = len(d.getElementsByTagName("rect")) - 1
print("%d panels, %d bars; %s" % (len(panels), bars, [t for t in titles if t.startswith("allocated")]))
assert len(panels) == 7 and any(t.startswith("allocated: B/A") and t.endswith("significant") for t in titles)
assert bars >= 14, "bars"
PY
)
check "-o: DIR/ab.svg, one histogram per metric, allocated's title with B/A and 'significant' ($out)" [ $? -eq 0 ]
"$MA" diff "$TMP/out/001-a" "$TMP/out/002-b" >"$TMP/diff.out" 2>&1
rc=$?  # before the message's $(...) replaces $?
check "memattach diff opens two of its snapshots ($(head -1 "$TMP/diff.out" | cut -c1-100))" [ "$rc" -eq 0 ]

# --- --heap ---
MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:12 "$MA" ab -a "$(side)" -b "$(side -x 2048)" \
	--pid "$PIDCMD" --runs 4 --heap --json >"$TMP/heap.json" 2>"$TMP/heap.err"
rc=$?  # before the message's $(...) replaces $?
check "--heap: exit 0 ($(tail -1 "$TMP/heap.err" | cut -c1-120))" [ "$rc" -eq 0 ]
out=$(jcheck '
s = load(sys.argv[1])["sites"]
assert s, "no site differs"
t = s[0]
print("top site %s: B-A %.0f KiB [%.0f, %.0f]; %d sites differ" % (t["name"], t["diff"] / 1024, t["ci_low"] / 1024, t["ci_high"] / 1024, len(s)))
assert t["name"] == "retain_extra", "top site"
assert t["ci_low"] <= 2097152 * 1.15 and t["ci_high"] >= 2097152 * 0.85 and t["ci_low"] > 0, "interval"
# The shared site may differ by chance (5% of runs: its noise is real); never as much.
assert all(abs(x["diff"]) < 0.5 * t["diff"] for x in s[1:]), "another site differs as much"
' "$TMP/heap.json" 2>&1)
check "--heap: the top site differing is retain_extra, about 2 MiB, any other far less ($out)" [ $? -eq 0 ]
verdicts_ok; check "--heap: $VERDICTS" [ "$VERDICTS" = "8 daemons, 0 damaged" ]
"$MA" ab -a "$(side)" -b "$(side)" --pid "$PIDCMD" --runs 2 --heap >/dev/null 2>"$TMP/noprof.err"; rc=$?
check "--heap on a daemon without prof: exit 1, says so ($(grep -o 'runs without prof[^;]*' "$TMP/noprof.err" | head -1))" \
	eval '[ "$rc" -eq 1 ] && grep -q "MALLOC_CONF=prof:true" "$TMP/noprof.err"'
verdicts_ok
check "--heap without prof: the daemon of the failed sample was stopped all the same ($VERDICTS)" \
	[ "$VERDICTS" = "1 daemons, 0 damaged" ]
# Without prof, the agent's profile: each side's command starts the daemon
# (-w: its workload waits for SIGUSR1), starts memattach profile, then lets
# the workload run.  Every allocation is sampled (--rate 1).
wside() {
	echo "rm -f $TMP/held; $D -f $TMP/pid -v $TMP/verdict.\$\$ -m 2048 -n 512 -w $TMP/held $* &&" \
		"$MA profile start \$(cat $TMP/pid) --rate 1 >/dev/null && kill -USR1 \$(cat $TMP/pid) &&" \
		"while [ ! -e $TMP/held ]; do sleep 0.01; done"
}
"$MA" ab -a "$(wside)" -b "$(wside -x 2048)" --pid "$PIDCMD" --runs 3 --heap --json >"$TMP/aheap.json" 2>"$TMP/aheap.err"
rc=$?  # before the message's $(...) replaces $?
check "--heap on a daemon without prof, profiled by the agent from its side command: exit 0 ($(tail -1 "$TMP/aheap.err" | cut -c1-160))" [ "$rc" -eq 0 ]
out=$(jcheck '
s = load(sys.argv[1])["sites"]
assert s, "no site differs"
t = s[0]
print("top site %s: B-A %.0f KiB [%.0f, %.0f]" % (t["name"], t["diff"] / 1024, t["ci_low"] / 1024, t["ci_high"] / 1024))
assert t["name"] == "retain_extra", "top site"
assert abs(t["diff"] - 2097152) <= 0.01 * 2097152, "B-A is not the 2 MiB retained (every allocation recorded)"
' "$TMP/aheap.json" 2>&1)
check "--heap with the agent's profiles: retain_extra, B - A the 2 MiB to 1% ($out)" [ $? -eq 0 ]
verdicts_ok; check "--heap with the agent: $VERDICTS" [ "$VERDICTS" = "6 daemons, 0 damaged" ]

# --- A/A ---
sig=0 runs=0 failed=0
for i in $(seq 20); do
	if "$MA" ab -a "$(side)" -b "$(side)" --pid "$PIDCMD" --runs 3 --json >"$TMP/aa.json" 2>/dev/null; then
		runs=$((runs + 1))
		jcheck 'sys.exit(0 if [m for m in load(sys.argv[1])["metrics"] if m["name"] == "allocated"][0]["significant"] else 1)' \
			"$TMP/aa.json" 2>/dev/null && sig=$((sig + 1))
	else
		failed=$((failed + 1))
	fi
done
check "A/A: 20 experiments ran ($failed failed)" [ "$runs" -eq 20 ]
check "A/A: allocated called significant in $sig of 20 (5% expected; at most 5)" [ "$sig" -le 5 ]
verdicts_ok; check "A/A: $VERDICTS" [ "$VERDICTS" = "120 daemons, 0 damaged" ]

# --- --match, --warmup, --order random ---
"$MA" ab -a "$(side)" -b "$(side -x 1024)" --match '^abdaemon$' --runs 2 --warmup --order random --json \
	--stop 'echo "$MEMATTACH_AB_SIDE $MEMATTACH_AB_PID" >>'"$TMP/stops"'; kill -TERM "$MEMATTACH_AB_PID"' \
	>"$TMP/m.json" 2>"$TMP/m.err"
rc=$?  # before the message's $(...) replaces $?
check "--match '^abdaemon\$' --warmup --order random --stop CMD: exit 0 ($(tail -1 "$TMP/m.err" | cut -c1-120))" [ "$rc" -eq 0 ]
check "--stop CMD ran once per sample with MEMATTACH_AB_SIDE and MEMATTACH_AB_PID ($(tr '\n' ' ' <"$TMP/stops"))" \
	eval '[ "$(grep -cE "^[ab] [0-9]+$" "$TMP/stops")" -eq 6 ]'
check "--warmup: 6 samples taken, 2 kept a side" \
	eval '[ "$(grep -c "^ab: sample [0-9]*/6 " "$TMP/m.err")" -eq 6 ] && jcheck "assert len(load(sys.argv[1])[\"metrics\"][1][\"a\"]) == 2" "$TMP/m.json"'
verdicts_ok; check "--match: $VERDICTS" [ "$VERDICTS" = "6 daemons, 0 damaged" ]

# --- --lifecycle reuse: one daemon, never stopped ---
$D -f "$TMP/rpid" -v "$TMP/rverdict" -m 1024 || fail "reuse daemon start"
rp=$(cat "$TMP/rpid")
"$MA" ab -a true -b true --pid "cat $TMP/rpid" --lifecycle reuse --runs 3 --json >"$TMP/r.json" 2>"$TMP/r.err"
rc=$?  # before the message's $(...) replaces $?
check "--lifecycle reuse: exit 0 ($(tail -1 "$TMP/r.err" | cut -c1-120))" [ "$rc" -eq 0 ]
check "--lifecycle reuse: the daemon still runs" kill -0 "$rp"
out=$(jcheck 'm = load(sys.argv[1])["metrics"][1]; print(m["a"], m["b"]); assert not m["significant"]' "$TMP/r.json" 2>&1)
check "--lifecycle reuse, same daemon both sides: allocated not significant ($out)" [ $? -eq 0 ]
# Fresh lifecycle: a daemon that did not start during the sample's command is never taken
# (nor stopped): a stale pid file, or another instance of the same program.
"$MA" ab -a true -b true --pid "echo $rp" --runs 2 >/dev/null 2>"$TMP/stale.err"; rc=$?
check "a --pid naming a process older than the sample: refused, left alone ($(head -1 "$TMP/stale.err" | cut -c1-110))" \
	eval '[ "$rc" -eq 1 ] && says "started before this sample.s command" "$TMP/stale.err" && kill -0 "$rp"'
"$MA" ab -a true -b true --match '^abdaemon$' --runs 2 >/dev/null 2>"$TMP/older.err"; rc=$?
check "--match with only an older instance running: none taken, left alone ($(head -1 "$TMP/older.err" | cut -c1-110))" \
	eval '[ "$rc" -eq 1 ] && says "among those the sample.s command started" "$TMP/older.err" && kill -0 "$rp"'
kill -TERM "$rp"
for _ in $(seq 100); do [ -s "$TMP/rverdict" ] && break; bsleep 0.05; done

# Someone else keeps starting processes of the same name during the samples (an outside
# attack made --match measure and SIGTERM them while ab's own daemons ran on): only the
# daemons the sample's commands started are taken.
( while [ ! -e "$TMP/evil.stop" ]; do
	$D -f "$TMP/evil.pid" -v "$TMP/evil.v" -m 512 && kill -TERM "$(cat "$TMP/evil.pid")" 2>/dev/null
done ) &
evil=$!
"$MA" ab -a "$(side); cat $TMP/pid >>$TMP/mine" -b "$(side -x 512); cat $TMP/pid >>$TMP/mine" \
	--match '^abdaemon$' --runs 3 >/dev/null 2>"$TMP/evil.err"; rc=$?
touch "$TMP/evil.stop"; wait "$evil" 2>/dev/null
taken=$(sed -n 's/^ab: sample [0-9]*\/6 (.): pid \([0-9]*\),.*/\1/p' "$TMP/evil.err" | sort | tr '\n' ' ')
mine=$(sort "$TMP/mine" 2>/dev/null | tr '\n' ' ')
check "--match while others start processes of that name: exit $rc, the 6 daemons taken are the samples' own ($taken = $mine)" \
	eval '[ "$rc" -eq 0 ] && [ -n "$taken" ] && [ "$taken" = "$mine" ]'
verdicts_ok
check "... and those 6 were the ones stopped: $VERDICTS" [ "$VERDICTS" = "6 daemons, 0 damaged" ]
check "--lifecycle reuse: the daemon's objects intact ($(cat "$TMP/rverdict" 2>/dev/null))" grep -q '^VERDICT ok' "$TMP/rverdict"

# --- a real daemon: redis-server, two configurations ---
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
	RS=$ROOT/fixtures/ab_redis_side.sh
	mkdir -p "$TMP/redis"
	"$MA" ab -a "$RS $TMP/redis" -b "$RS $TMP/redis --hash-max-listpack-entries 0" \
		--pid "cat $TMP/redis/redis.pid" --runs 3 --json >"$TMP/redis.json" 2>"$TMP/redis.err"
	rc=$?  # before the message's $(...) replaces $?
	check "redis-server A/B: exit 0 ($(tail -1 "$TMP/redis.err" | cut -c1-120))" [ "$rc" -eq 0 ]
	out=$(jcheck 'm = load(sys.argv[1])["metrics"][1]
print("allocated B/A %.3f [%.3f, %.3f]" % (m["ratio"], m["ci_low"], m["ci_high"]))
assert m["significant"] and m["ci_low"] > 1.2' "$TMP/redis.json" 2>&1)
	check "redis-server, hash-max-listpack-entries 0 in B: B's allocated larger, significant ($out)" [ $? -eq 0 ]
	MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:14 "$MA" ab -a "$RS $TMP/redis" \
		-b "$RS $TMP/redis --hash-max-listpack-entries 0" --pid "cat $TMP/redis/redis.pid" --runs 3 \
		--heap --skip 'zmalloc|zcalloc|zrealloc|ztry' --json >"$TMP/rheap.json" 2>"$TMP/rheap.err"
	rc=$?  # before the message's $(...) replaces $?
	check "redis-server --heap (prof:true): exit 0 ($(tail -1 "$TMP/rheap.err" | cut -c1-120))" [ "$rc" -eq 0 ]
	out=$(jcheck 's = load(sys.argv[1])["sites"]
print(", ".join("%s %+.0f KiB" % (x["name"], x["diff"] / 1024) for x in s[:5]))
grew = [x for x in s[:3] if x["name"].startswith("dict") and x["diff"] > 0]
assert grew, "no dict* site among the 3 largest differences"
assert [x for x in s if x["name"] == "lpInsert" and x["diff"] < 0], "the listpack site did not shrink"' \
		"$TMP/rheap.json" 2>&1)
	check "redis-server --heap: B's hash tables (dict*) among the 3 largest growths, the listpacks' lpInsert shrinks ($out)" [ $? -eq 0 ]
	check "redis-server: every server stopped (no redis-server on the test's socket)" \
		eval '! pgrep -f "unixsocket $TMP/redis/redis.sock" >/dev/null'
else
	fail "redis-server A/B: redis-server and redis-cli needed (make deps installs redis-server)"
	fail "redis-server: B's allocated larger (not run)"
	fail "redis-server --heap (not run)"
	fail "redis-server --heap: sites (not run)"
	fail "redis-server: every server stopped (not run)"
fi

# --- errors ---
"$MA" ab -a "$(side)" -b false --pid "$PIDCMD" --runs 2 -o "$TMP/err1" >/dev/null 2>"$TMP/e1"
rc=$?
check "a failing -b command: exit 1 naming the sample, samples kept ($(tr '\n' ' ' <"$TMP/e1" | cut -c1-200))" \
	eval '[ "$rc" -eq 1 ] && grep -q "sample 2 (b): -b command exited with status 1" "$TMP/e1" && [ -d "$TMP/err1/001-a" ] && grep -q "samples taken so far" "$TMP/e1"'
"$MA" ab -a "$(side)" -b "$(side)" --pid "$PIDCMD" --runs 2 --stop false >/dev/null 2>"$TMP/e8"; rc=$?
check "a --stop command that fails: exit 1 naming the sample ($(head -1 "$TMP/e8" | cut -c1-120))" \
	eval '[ "$rc" -eq 1 ] && grep -q "sample 1 (a): the daemon (pid [0-9]*) --stop command exited with status 1" "$TMP/e8"'
kill -TERM "$(cat "$TMP/pid")" 2>/dev/null
for _ in $(seq 100); do [ "$(ls "$TMP"/verdict.* 2>/dev/null | wc -l)" -ge 2 ] && break; bsleep 0.05; done
"$MA" ab -a true -b true --pid "echo nope" --runs 2 >/dev/null 2>"$TMP/e2"; rc=$?
check "a --pid command printing no PID: exit 1, said ($(head -1 "$TMP/e2" | cut -c1-120))" \
	eval '[ "$rc" -eq 1 ] && grep -q "sample 1 (a): --pid command printed no PID" "$TMP/e2"'
"$MA" ab -a true -b true --pid "echo 999999999" --runs 2 >/dev/null 2>"$TMP/e3"; rc=$?
check "a PID that does not exist: exit 1 naming the sample ($(head -1 "$TMP/e3" | cut -c1-120))" \
	eval '[ "$rc" -eq 1 ] && grep -q "sample 1 (a)" "$TMP/e3"'
"$MA" ab -a true -b true --match '^no-such-daemon$' --runs 2 >/dev/null 2>"$TMP/e4"
check "no --match match: said ($(head -1 "$TMP/e4" | cut -c1-120))" grep -q "no jemalloc process whose name matches" "$TMP/e4"
"$MA" ab -a true -b true --pid x --runs 2 -o "$TMP/out" >/dev/null 2>"$TMP/e9"; rc=$?
check "-o of a folder holding another run's samples: refused, nothing run ($(head -1 "$TMP/e9" | cut -c1-100))" \
	eval '[ "$rc" -eq 1 ] && grep -q "not an empty folder" "$TMP/e9" && [ "$(ls "$TMP/out" | wc -l)" -eq 14 ]'
# Another writer of the -o folder swaps samples.tsv for a symlink between samples: the
# link's target (a file root could write) is never written.
: >"$TMP/victim"
"$MA" ab -a "$(side)" -b "$(side); rm -f $TMP/swap/samples.tsv; ln -s $TMP/victim $TMP/swap/samples.tsv" \
	--pid "$PIDCMD" --runs 2 -o "$TMP/swap" >/dev/null 2>"$TMP/swap.err"; rc=$?
check "samples.tsv swapped for a symlink during the run: exit $rc, the symlink's target untouched ($(wc -c <"$TMP/victim") bytes)" \
	eval '[ "$rc" -eq 0 ] && [ ! -s "$TMP/victim" ]'
"$MA" ab -a true -b true --runs 2 >/dev/null 2>"$TMP/e5"; rc5=$?
"$MA" ab -a true -b true --pid x --runs 1 >/dev/null 2>"$TMP/e6"; rc6=$?
"$MA" ab -a true -b true --pid x --lifecycle sometimes >/dev/null 2>"$TMP/e7"; rc7=$?
check "usage errors exit 2: neither --pid nor --match ($rc5), --runs 1 ($rc6), --lifecycle sometimes ($rc7)" \
	eval '[ "$rc5$rc6$rc7" = 222 ] && grep -q "exactly one of --pid" "$TMP/e5" && grep -q "fresh or reuse" "$TMP/e7"'
verdicts_ok; check "after the errors: $VERDICTS (the failed runs' 2 daemons and the swap run's 4 stopped)" [ "$VERDICTS" = "6 daemons, 0 damaged" ]
