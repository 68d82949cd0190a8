#!/usr/bin/env bash
# frag start --hooks (jemalloc's experimental hooks, on a static jemalloc)
# and stop, CYCLES times on daemon_static, then stats.  Installing or
# removing the hooks marks every thread "recompute" in jemalloc 5.3, and a
# thread that ends before its next allocator call leaves a dangling entry
# in jemalloc's thread list; a thread of memattach's own, made for the
# work and ended right after, was such a thread (an outside attack: the
# 5th start's call spun in arena_stats_merge for good, a later stats hung
# a program thread, and the program hung at exit, 3 of 3).  Checked: every
# command ends 0, the program has the threads it had after each stop,
# stats ends 0, the verdict is ok and the program quits cleanly.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
CYCLES=${CYCLES:-8}
plan 4
need_fixtures daemon_static

fix_start daemon_static -t 2 || { fail "daemon_static: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
n0=$(ntasks "$pid")
fails=() threads=()
for ((i = 1; i <= CYCLES; i++)); do
	timeout -s KILL 60 "$MA" frag start "$pid" --hooks >/dev/null 2>"$TMP/start.err" ||
		fails+=("start $i: $(head -c 160 "$TMP/start.err")")
	timeout -s KILL 60 "$MA" frag stop "$pid" >/dev/null 2>"$TMP/stop.err" ||
		fails+=("stop $i: $(head -c 160 "$TMP/stop.err")")
	bsleep 0.2 # a thread of our own, had one been made, ends within this
	threads+=("$(ntasks "$pid")")
done
check "$CYCLES start --hooks / stop cycles end 0 (${fails[*]:-all did})" [ "${#fails[@]}" -eq 0 ]
check "the program has its $n0 threads after each stop (${threads[*]})" \
	eval '! printf "%s\n" "${threads[@]}" | grep -qvx "$n0"'
timeout -s KILL 30 "$MA" stats "$pid" >/dev/null 2>"$TMP/stats.err"
rc=$?
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "then stats ends 0 (exit $rc: $(head -c 160 "$TMP/stats.err")), verdict ok ($v)" \
	eval '[ $rc -eq 0 ] && verdict_ok "$v"'
fix_quit "$pid" "$fd"
rc=$?
check "the program quits cleanly (status $rc)" [ "$rc" -eq 0 ]
report_time
