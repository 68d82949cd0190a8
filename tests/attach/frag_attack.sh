#!/usr/bin/env bash
# Regressions from the outside attack on frag (attach/cli/README.md, frag):
# 1. A thread running the agent's hook is not safe to borrow.  fragbench's
#    worker allocates flat out under --shift 0 (every allocation enters the
#    agent); 20 reports borrow that very thread (--tid): each must succeed
#    (the borrow waits until the thread is outside jemalloc and the agent).
#    Before the fix about 1 report in 10 borrowed it inside the agent, where
#    the report's own call spun on the lock the thread held, for ever.
# 2. A report killed while its query runs in the target, then another
#    report or a stop: the first call still runs there (its thread restores
#    itself when it returns), and the next must not unmap the memory it
#    reads.  fragharness holds 300,000 samples (the query takes a while);
#    reports are SIGKILLed after 0-400 ms, then a report or a stop follows.
#    Before the fix the target died of SIGSEGV each time the kill landed in
#    the query.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 7
need_fixtures fragbench fragharness

# --- 1 ---
fix_start fragbench -t 1 || { fail "fragbench: start"; exit 1; }
B=$FIX_PID BFD=$FIX_FD BOUT=$FIX_OUT
w=$(tid_of "$B" bench_0)
"$MA" frag start "$B" --shift 0 >/dev/null
echo "run 15000" >&"$BFD" # the worker allocates while the reports run
bsleep 0.3
ok=0 first=""
for i in $(seq 20); do
	if timeout 60 "$MA" frag report "$B" --no-flush --tid "$w" --timeout 10000 >/dev/null 2>"$TMP/r.err"; then
		ok=$((ok + 1))
	else
		[ -n "$first" ] || first="report $i: $(head -1 "$TMP/r.err")"
	fi
done
check "20 reports borrowing the allocating worker itself: all succeed ($ok${first:+; first failure: $first})" [ "$ok" -eq 20 ]
"$MA" frag stop "$B" >/dev/null 2>"$TMP/s.err"; rc=$?
check "stop borrowing whichever thread: succeeds ($(head -1 "$TMP/s.err"))" [ "$rc" -eq 0 ]
ans=$(fix_cmd "$B" "$BFD" "$BOUT" verdict) # answered once the run is over
for _ in $(seq 120); do grep -q '^VERDICT' "$BOUT" && break; sleep 0.5; done
check "fragbench verdict ok after the run ($(grep '^VERDICT' "$BOUT" | tail -1))" grep -q '^VERDICT ok' "$BOUT"
fix_quit "$B" "$BFD" >/dev/null 2>&1

# --- 2 ---
fix_start fragharness || { fail "fragharness: start"; exit 1; }
H=$FIX_PID
"$MA" frag start "$H" --shift 0 >/dev/null
n=$(grep -c '^BUILT' "$FIX_OUT"); echo build >&"$FIX_FD"
for _ in $(seq 600); do [ "$(grep -c '^BUILT' "$FIX_OUT")" -gt "$n" ] && break; sleep 0.1; done
deaths=0 nexts=0 bad=""
for i in $(seq 16); do
	"$MA" frag report "$H" --no-flush >/dev/null 2>&1 & rp=$!
	bsleep "0.$(printf '%03d' $((RANDOM % 400)))"
	kill -9 "$rp" 2>/dev/null; wait "$rp" 2>/dev/null
	if [ $((i % 2)) = 0 ]; then
		"$MA" frag report "$H" --no-flush >/dev/null 2>"$TMP/n.err" || bad+=" report $i: $(head -1 "$TMP/n.err");"
	else
		"$MA" frag stop "$H" >/dev/null 2>"$TMP/n.err" || bad+=" stop $i: $(head -1 "$TMP/n.err");"
		"$MA" frag start "$H" --shift 0 >/dev/null 2>>"$TMP/n.err" || bad+=" start $i;"
	fi
	nexts=$((nexts + 1))
	alive "$H" || { deaths=$((deaths + 1)); break; }
done
check "16 reports killed at random, each followed by a report or a stop: target alive ($deaths deaths)" [ "$deaths" -eq 0 ]
check "... and every following command succeeded (${bad:- all $nexts})" [ -z "$bad" ]
v=$(fix_cmd "$H" "$FIX_FD" "$FIX_OUT" verdict)
check "fragharness verdict ok ($v)" grep -q '^VERDICT ok' <<<"$v"
"$MA" frag stop "$H" >/dev/null 2>&1
fix_quit "$H" "$FIX_FD"; rc=$?
check "fragharness exits cleanly (status $rc)" [ "$rc" -eq 0 ]
