#!/usr/bin/env bash
# frag on a target whose threads come and go (fixtures/fragchurn: a spawner
# creating detached threads without pause, each one malloc+free and exit,
# plus two allocating workers).  jemalloc 5.3's hook install/remove killed
# such targets (11 of 11 on the first start); the GOT mechanism touches no
# jemalloc state.  CYCLES start/report/stop cycles (100; 30 in make test),
# every other one profile start / heap-dump / profile stop: every command succeeds,
# the target never dies, threads keep being born during the cycles, the
# verdict is ok.
# Then objects loaded after frag start: fragchurn -c 0 dlopen()s
# libfragplug.so (lazy binding) after the start; the next report's pass
# rewrites its slots, and at --shift 0 each of the 500 objects its
# plug_site allocates afterwards is a sample.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 12
# FRAG_SUFFIX=_static: on the build with jemalloc linked in (inline
# detours; frag_churn_static.sh).
S=${FRAG_SUFFIX:-}
need_fixtures fragchurn$S libfragplug.so

CYCLES=${CYCLES:-$(sized 100 30)}
born() { fix_cmd "$P" "$FIX_FD" "$FIX_OUT" born | awk '{ print $2 }'; }

# --- churn ---
# SPAWNERS (default 2, 3 under make soak): fragchurn's threads that create
# the short-lived ones (three keep the rate above 5,000 threads/s during the
# cycles on the 2-core machines, two about there).
fix_start fragchurn$S -c "${SPAWNERS:-$(sized 3 2)}" || { fail "fragchurn: start"; exit 1; }
P=$FIX_PID
b0=$(born); bsleep 1; b1=$(born)
echo "# fragchurn: $((b1 - b0)) threads born and ended in about 1 s before the cycles"
failed=0 deaths=0 first="" t0=$EPOCHREALTIME
for i in $(seq "$CYCLES"); do
	agent_cycle "$i"
	for c in "${CYCLE_CMDS[@]}"; do
		# shellcheck disable=SC2086
		if ! "$MA" $c "$P" >/dev/null 2>"$TMP/c.err"; then
			failed=$((failed + 1)); [ -n "$first" ] || first="cycle $i, $c: $(head -1 "$TMP/c.err")"
		fi
	done
	alive "$P" || { deaths=1; fixture_died "$P" "$(dirname "$FIX_OUT")"; echo "# died in cycle $i: $DIED_WHY"; break; }
done
b2=$(born)
echo "# $CYCLES cycles in $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}") s; threads born meanwhile: $((b2 - b1))"
check "fragchurn: $CYCLES start/report/stop cycles, target alive ($deaths deaths)" [ "$deaths" -eq 0 ]
check "fragchurn: every command succeeded ($failed failures${first:+; first: $first})" [ "$failed" -eq 0 ]
check "fragchurn: threads kept being born and ending during the cycles ($b1 -> $b2)" [ "${b2:-0}" -gt "${b1:-0}" ]
check "fragchurn: no thread left traced" [ "$(traced_tasks "$P")" -eq 0 ]
v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
check "fragchurn: verdict ok ($v)" verdict_ok "$v"
fix_quit "$P" "$FIX_FD"; rc=$?
check "fragchurn: exits cleanly (status $rc)" [ "$rc" -eq 0 ]

# --- a library loaded after start ---
fix_start fragchurn$S -c 0 || { fail "fragchurn -c 0: start"; exit 1; }
P=$FIX_PID
"$MA" frag start "$P" --shift 0 >/dev/null 2>"$TMP/s.err"; rc=$?
check "frag start --shift 0 before the library is loaded ($(head -1 "$TMP/s.err"))" [ "$rc" -eq 0 ]
ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" dlopen)
check "the target loads libfragplug.so ($ans)" [ "$ans" = LOADED ]
"$MA" frag report "$P" --no-flush >/dev/null 2>&1 # its pass rewrites the new library's slots
ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" "plug 500")
"$MA" frag report "$P" --json --top 0 >"$TMP/r.json" 2>"$TMP/r.err"
out=$(jcheck '
r=json.load(open(sys.argv[1]))
n=sum(s["samples"] for s in r["sites"] if s["leaf"]=="plug_site")
print("plug_site samples", n); sys.exit(n != 500)' "$TMP/r.json" 2>&1)
check "its 500 allocations after the next report are all samples, leaf plug_site ($ans; $out)" [ $? -eq 0 ]
"$MA" frag stop "$P" >/dev/null 2>"$TMP/st.err"; rc=$?
check "frag stop ($(head -1 "$TMP/st.err"))" [ "$rc" -eq 0 ]
v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
check "fragchurn -c 0: verdict ok ($v)" verdict_ok "$v"
fix_quit "$P" "$FIX_FD"; rc=$?
check "fragchurn -c 0: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
report_time
