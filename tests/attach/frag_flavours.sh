#!/usr/bin/env bash
# frag on every jemalloc flavour: shared (daemon), static (daemon_static),
# static _rjem_-prefixed (daemon_prefixed), C++ (daemon_cxx) and Rust
# (daemon_rust).  Each daemon churns and checks its heap; per flavour:
# where jemalloc is linked statically (no GOT slot), start writes inline
# detours into every entry point it has (status: mechanism detour, at
# least 10), and after stop the executable's code in memory is byte for
# byte the file's again; start works, the report has samples whose stacks name the daemon's own
# worker function (not jemalloc's frames: the allocator's frames are cut),
# its attributed waste (an estimate, from ~1000 samples of a heap that
# churns between the query and the bins read) is not above 1.5x the process's
# small-bin waste, stop
# works, and the daemon's verdict is ok.
# Then 100 start/report/stop cycles on the shared daemon with 4 busy
# workers: every command succeeds, the daemon's verdict stays ok, its
# descriptors and mapping count do not grow, and the agent is loaded once.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 47
need_fixtures daemon daemon_static daemon_prefixed daemon_cxx daemon_rust

# code_as_file PID: every executable mapping of PID's program holds the
# bytes of its file at that offset (no detour left behind).
code_as_file() {
	python3 - "$1" <<'PY'
import sys
pid = sys.argv[1]
exe = __import__("os").readlink(f"/proc/{pid}/exe")
n = diff = 0
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem, open(exe, "rb") as f:
    for line in maps:
        p = line.split()
        if len(p) < 6 or p[5] != exe or p[1][2] != "x":
            continue
        lo, hi = (int(x, 16) for x in p[0].split("-"))
        mem.seek(lo); f.seek(int(p[2], 16))
        a, b = mem.read(hi - lo), f.read(hi - lo)
        n += len(b)
        diff += sum(1 for x, y in zip(a, b) if x != y)
print(f"{n} bytes of code compared, {diff} differ")
sys.exit(not (n > 0 and diff == 0))
PY
}

for f in daemon daemon_static daemon_prefixed daemon_cxx daemon_rust; do
	fix_start "$f" -t 2 || { fail "$f: start"; continue; }
	P=$FIX_PID
	static=0
	ldd "$FIX/$f" | grep -q libjemalloc || static=1
	if [ $static -eq 1 ]; then
		"$MA" frag start "$P" --strict >"$TMP/s.out" 2>&1; rc=$?
		check "$f: frag start --strict refused, naming why ($(tr -s ' \n' '  ' <"$TMP/s.out" | cut -c1-200))" \
			eval '[ "$rc" -eq 1 ] && tr -s " \n" "  " <"$TMP/s.out" | grep -q -- "--strict never writes the target.s code"'
		out=$(code_as_file "$P" 2>&1)
		check "$f: after the refusal, no agent mapped and the code as in the file ($out)" \
			eval '! grep -q "memfd:memattach-agent" "/proc/$P/maps" && [ -n "$out" ] && code_as_file "$P" >/dev/null'
	fi
	"$MA" frag start "$P" --shift 2 >"$TMP/s.out" 2>&1; rc=$?
	check "$f: frag start --shift 2 ($(tail -1 "$TMP/s.out" | cut -c1-120))" [ "$rc" -eq 0 ]
	if [ $static -eq 1 ]; then
		"$MA" frag status "$P" --json >"$TMP/status.json"
		out=$(jcheck 'import json,sys
s=json.load(open(sys.argv[1]))
print("mechanism", s.get("mechanism"), "detours", s.get("detours"))
sys.exit(not (s.get("mechanism") == "detour" and s.get("detours", 0) >= 10))' "$TMP/status.json" 2>&1)
		check "$f (static jemalloc): started with inline detours, no --hooks ($out)" [ $? -eq 0 ]
	fi
	bsleep 0.5
	"$MA" frag report "$P" --json >"$TMP/r.json" 2>"$TMP/r.err"
	out=$(jcheck 'import json,sys,re
r=json.load(open(sys.argv[1]))
leaves=[s["leaf"] for s in r["sites"]]
import re
own=[l for l in leaves if re.search(r"(^|::)op(\(|$)", l)]
bad=[s["stack"][0] for s in r["sites"] if s["stack"] and (s["stack"][0].startswith(("je_","_rjem_","malloc","free","calloc","realloc")))]
print("samples", r["samples"], "attributed", r["attributed_waste"], "bins", r["bins_waste"], "leaves", leaves[:3], "allocator leaves", bad[:2])
sys.exit(not (r["samples"] > 0 and own and not bad and r["attributed_waste"] <= 1.5 * r["bins_waste"]))' "$TMP/r.json" 2>&1)
	check "$f: report names the worker's own function, no allocator leaf, attributed not above 1.5x bins (an estimate from ~1000 samples of a churning heap) ($out)" [ $? -eq 0 ]
	"$MA" frag stop "$P" >/dev/null 2>"$TMP/st.err"; rc=$?
	check "$f: frag stop ($(head -1 "$TMP/st.err"))" [ "$rc" -eq 0 ]
	"$MA" frag status "$P" --json >"$TMP/status.json"
	check "$f: status after stop: stopped" grep -q '"state":"stopped"' "$TMP/status.json"
	if [ $static -eq 1 ]; then
		out=$(code_as_file "$P" 2>&1)
		check "$f (static jemalloc): after stop, its code in memory is the file's ($out)" [ $? -eq 0 ]
	fi
	v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
	check "$f: verdict ok ($v)" verdict_ok "$v"
	fix_quit "$P" "$FIX_FD"; rc=$?
	check "$f: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
done

# --- 100 cycles ---
fix_start daemon -t 4 || { fail "daemon: start"; exit 1; }
P=$FIX_PID
v0=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict); c0=$(vfield "$v0" checks)
"$MA" frag start "$P" >/dev/null && "$MA" frag report "$P" >/dev/null && "$MA" frag stop "$P" >/dev/null
m0=$(maps_lines "$P") f0=$(fd_count "$P")
failed=0 first=""
for i in $(seq 100); do
	for c in "start --shift $((i % 10))" "report" "stop"; do
		# shellcheck disable=SC2086
		if ! "$MA" frag $c "$P" >/dev/null 2>"$TMP/c.err"; then
			failed=$((failed + 1)); [ -n "$first" ] || first="cycle $i, $c: $(head -1 "$TMP/c.err")"
		fi
	done
done
check "100 start/report/stop cycles: every command succeeded ($failed failures${first:+; first: $first})" [ "$failed" -eq 0 ]
v1=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict); c1=$(vfield "$v1" checks)
check "after 100 cycles: verdict ok and progressing ($c0 -> $c1: $v1)" eval 'verdict_ok "$v1" && [ "${c1:-0}" -gt "${c0:-0}" ]'
m1=$(maps_lines "$P") f1=$(fd_count "$P")
check "after 100 cycles: maps lines $m0 -> $m1 (within 8: the heap itself moves), descriptors $f0 -> $f1" \
	[ "$m1" -le $((m0 + 8)) -a "$f1" -eq "$f0" ]
n=$(awk '/memattach-agent/ { print $5 }' "/proc/$P/maps" | sort -u | wc -l)
check "after 100 cycles: the agent library is loaded once ($n)" [ "$n" -eq 1 ]
fix_quit "$P" "$FIX_FD"; rc=$?
check "daemon exits cleanly after the cycles (status $rc)" [ "$rc" -eq 0 ]
report_time
