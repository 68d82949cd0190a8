#!/usr/bin/env bash
# A target whose main thread forks in a loop (fixtures/forkloop.c): a
# thread borrowed between jemalloc's atfork prepare and parent handlers
# holds every allocator lock, and a mallctl injected there (or in another
# thread while it is stopped there) deadlocks the process for good.
# RUNS (default 500) `stats` runs, each under `timeout 10`, every other one
# with `--tid PID` (the forking main thread itself; memattach may refuse it
# while it is inside fork()): no run may hang, the target must keep
# forking (its count is read from a shared file, so a stuck control thread
# cannot hide it), its workers keep allocating and its verdict stays ok.
# Progress is checked every 50 runs and after any run that failed or took
# over 2 s; a target that stops forking ends the loop (a deadlock).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
need_fixtures forkloop
RUNS=${RUNS:-$(sized 500 200)}

forkloop_start 2 || { fail "forkloop: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
# progressing WAIT_S: does the fork count move within WAIT_S (whole seconds)?
progressing() { grows "$1" forks; }
f0=$(forks)
ok=0 failed=0 hangs=0 other=0 stalled=0 done_runs=0
: >"$TMP/failed.txt"
for i in $(seq 1 "$RUNS"); do
	tid_arg=(); [ $((i % 2)) -eq 0 ] && tid_arg=(--tid "$pid")
	t0=$(now_us)
	timeout -s KILL 10 "$MA" stats "$pid" "${tid_arg[@]}" >/dev/null 2>"$TMP/run.err"
	rc=$?
	dt=$(( ($(now_us) - t0) / 1000 ))
	done_runs=$i
	case $rc in
	0) ok=$((ok + 1)) ;;
	1) failed=$((failed + 1)); head -1 "$TMP/run.err" | sed 's/[0-9][0-9]*/N/g' | cut -c1-160 >>"$TMP/failed.txt" ;;
	137) hangs=$((hangs + 1)) ;;
	*) other=$((other + 1)); echo "exit $rc: $(head -1 "$TMP/run.err")" >>"$TMP/failed.txt" ;;
	esac
	alive "$pid" || break
	if [ $((i % 50)) -eq 0 ] || [ "$rc" -ne 0 ] || [ "$dt" -gt 2000 ]; then
		if ! progressing 5; then
			stalled=1
			echo "# run $i (${tid_arg[*]:-no --tid}, exit $rc after $dt ms): the target stopped forking at $(forks)"
			break
		fi
	fi
done
echo "# $done_runs runs: $ok ok, $failed exit 1, $hangs hung (killed after 10 s), $other other; forks $f0 -> $(forks); $(elapsed) s"
[ -s "$TMP/failed.txt" ] && echo "# exit 1 messages: $(top_lines "$TMP/failed.txt" 3)"
check "fork loop: $done_runs of $RUNS stats runs done, $hangs hangs, target $([ $stalled -eq 1 ] && echo deadlocked || echo progressing)" \
	[ "$hangs" -eq 0 -a "$done_runs" -eq "$RUNS" -a "$stalled" -eq 0 ]
check "fork loop: every run exited 0 or 1 ($ok ok, $failed exit 1, $other others)" [ "$other" -eq 0 ]
if ! alive "$pid"; then
	fixture_died "$pid" "$(dirname "$out")"
	fail "fork loop: target died: $DIED_WHY"
	report_time
	exit 0
fi
grows 30 forks; st=$? a=$GROWS_FROM b=$GROWS_TO
check "fork loop: target still forking at the end (forks $a -> $b; $f0 at the start)" [ "$st" -eq 0 ]
if [ "$st" -eq 0 ]; then
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	check "fork loop: verdict ok ($v)" verdict_ok "$v"
	checks() { vfield "$(fix_cmd "$pid" "$fd" "$out" verdict)" checks; }
	grows 30 checks; st=$?
	check "fork loop: workers still allocating (checks $GROWS_FROM -> $GROWS_TO)" [ "$st" -eq 0 ]
	fix_quit "$pid" "$fd"; rc=$?
	check "fork loop: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	# deadlocked: say where its threads wait (cleanup kills it)
	for t in /proc/"$pid"/task/*; do
		echo "#   $(cat "$t/comm") $(awk '{print $3}' "$t/stat") $(cat "$t/wchan" 2>/dev/null) tracer $(awk '/TracerPid/ {print $2}' "$t/status")"
	done
	fail "fork loop: target deadlocked (no verdict asked: its control thread may be part of it)"
fi
report_time
