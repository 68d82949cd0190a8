#!/usr/bin/env bash
# The frag agent walks a sampled allocation's stack with libgcc's unwinder,
# on the allocating thread.  libgcc itself allocates while it holds its
# frame-table lock (sorting the FDEs of an object registered with
# __register_frame_info, as LuaJIT does for its traces, on the first
# lookup after): walking from there would take that lock again on the
# same thread and freeze it for good, and every other thread whose sample
# needs the unwinder after it (kresd froze at --shift 0 under DNS-over-TCP
# queries).  fixtures/unwalloc does exactly that on command ('unwind').
# With every allocation sampled: each unwind answers, the worker keeps
# running, the agent says it recorded libgcc's allocations by their
# caller alone (unwinder_samples), stop works and the fixture's checks hold.
# Then a wrapper kept in flight: a signal handler sleeps 1.5 s on the
# worker inside the agent's walk ('stall').  The agent waits for such a
# wrapper only a few milliseconds per call, so stop lets its borrowed
# thread go and calls again (stop_runs > 1), and succeeds only after the
# sleep ended (the tables are unmapped when nothing is in flight).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 11
need_fixtures unwalloc

rounds() { fix_cmd "$P" "$FIX_FD" "$FIX_OUT" rounds | awk '{ print $2 }'; }
fix_start unwalloc || { fail "unwalloc: start"; exit 1; }
P=$FIX_PID
ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" unwind)
check "before frag: unwind answers ($ans)" grep -q '^UNWOUND frames=[1-9]' <<<"$ans"
"$MA" frag start "$P" --shift 0 >/dev/null 2>"$TMP/e"; rc=$?
check "frag start --shift 0 (exit $rc: $(head -1 "$TMP/e"))" [ "$rc" -eq 0 ]
answered=0
for i in 1 2 3; do
	ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" unwind) || break
	grep -q '^UNWOUND frames=[1-9]' <<<"$ans" && answered=$((answered + 1))
done
check "under the agent: 3 of 3 unwinds answer (no thread frozen in libgcc: $answered)" \
	[ "$answered" -eq 3 ]
grows 30 rounds; st=$?
check "the worker keeps running ($GROWS_FROM -> $GROWS_TO rounds)" [ "$st" -eq 0 ]
"$MA" frag status "$P" --json >"$TMP/st" 2>&1
n=$(json_get "$TMP/st" unwinder_samples)
check "libgcc's own allocations recorded with their caller as the only frame ($n)" \
	[ "${n:-0}" -gt 0 ]
"$MA" frag report "$P" >"$TMP/rep" 2>&1; rc=$?
check "frag report works (exit $rc)" [ "$rc" -eq 0 ]
ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" "stall 1500")
check "a signal handler sleeps on the worker inside the agent's walk ($ans)" grep -q '^STALLING' <<<"$ans"
"$MA" frag stop "$P" --json >"$TMP/stop.json" 2>"$TMP/e"; rc=$?
check "frag stop works (exit $rc: $(head -1 "$TMP/e"))" [ "$rc" -eq 0 ]
runs=$(json_get "$TMP/stop.json" stop_runs)
check "stop let its thread go while the wrapper was in flight, and called again ($runs runs)" \
	[ "${runs:-0}" -gt 1 ]
ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" stalled)
check "the stop succeeded only after the wrapper's sleep ended ($ans)" [ "$ans" = "STALL hit=1 done=1" ]
fix_quit "$P" "$FIX_FD"; rc=$?
check "unwalloc exits with a good verdict (status $rc)" [ "$rc" -eq 0 ]
