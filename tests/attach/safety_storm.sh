#!/usr/bin/env bash
# A thread under a signal storm (fixtures/storm.c: storm_rx gets a queued
# real-time signal with a sequence number every ~100 us, and SIGUSR1s with
# their own sequence) is borrowed RUNS times (default 200) with
# `stats --tid`.  Signals that arrive while it is borrowed must be held and
# delivered afterwards, each exactly once, in order, with their original
# siginfo, to that thread; its read() never fails with EINTR.  The fixture
# drains the storm before each verdict and counts sent / received / lost /
# out of order.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 9
need_fixtures storm
shopt -s extglob
RUNS=${RUNS:-200}

fix_start storm || { fail "storm: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" storm_rx)
v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
echo "# before: $v0"
ok=0 failed=0 other=0 deaths=0 held=0
: >"$TMP/failed.txt"
for i in $(seq 1 "$RUNS"); do
	timeout -s KILL 20 "$MA" stats "$pid" --tid "$tid" --json >"$TMP/s.json" 2>"$TMP/run.err"
	rc=$?
	case $rc in
	0) ok=$((ok + 1))
	   h=$(sed -n 's/.*"signals_redelivered": *\([0-9]*\).*/\1/p' "$TMP/s.json" | head -1)
	   held=$((held + ${h:-0})) ;;
	1) failed=$((failed + 1)); head -1 "$TMP/run.err" | sed 's/[0-9][0-9]*/N/g' >>"$TMP/failed.txt" ;;
	*) other=$((other + 1)); echo "exit $rc: $(head -1 "$TMP/run.err")" >>"$TMP/failed.txt" ;;
	esac
	alive "$pid" || { deaths=1; break; }
done
echo "# $RUNS runs: $ok ok, $failed exit 1, $other other; $held signals held and re-delivered by memattach (its own count); $(elapsed) s"
[ -s "$TMP/failed.txt" ] && echo "# failures: $(top_lines "$TMP/failed.txt" 3)"
check "storm: target survived $RUNS borrows of the stormed thread ($deaths deaths)" [ "$deaths" -eq 0 ]
check "storm: every run exited 0 or 1 ($ok ok, $failed exit 1, $other others)" [ "$other" -eq 0 ]
check "storm: the stormed thread could be borrowed ($ok of $RUNS runs)" [ "$ok" -gt 0 ]
if ! alive "$pid"; then
	fixture_died "$pid" "$(dirname "$out")"
	fail "storm: target died: $DIED_WHY"
	report_time
	exit 0
fi
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
echo "# after: $v"
rs=$(vfield "$v" rt_sent) rr=$(vfield "$v" rt_received) rl=$(vfield "$v" rt_lost) ro=$(vfield "$v" rt_out_of_order)
us=$(vfield "$v" usr1_sent) ur=$(vfield "$v" usr1_received) ul=$(vfield "$v" usr1_lost) uo=$(vfield "$v" usr1_out_of_order)
bc=$(vfield "$v" bad_code) wt=$(vfield "$v" wrong_thread)
check "storm: RT signals: ${rs:-?} sent, ${rr:-?} received, ${rl:-?} lost, ${ro:-?} out of order" [ "${rl:-1}" = 0 -a "${ro:-1}" = 0 -a "${rs:-0}" -gt 0 ]
check "storm: SIGUSR1: ${us:-?} sent, ${ur:-?} received, ${ul:-?} lost, ${uo:-?} out of order" [ "${ul:-1}" = 0 -a "${uo:-1}" = 0 -a "${us:-0}" -gt 0 ]
check "storm: siginfo intact (${bc:-?} with a wrong si_code/si_pid), right thread (${wt:-?} elsewhere)" [ "${bc:-1}" = 0 -a "${wt:-1}" = 0 ]
check "storm: verdict ok ($(cut -d' ' -f1-4 <<<"$v")$(grep -q '^VERDICT bad' <<<"$v" && echo ": ${v##*queue_full=+([0-9]) }"))" verdict_ok "$v"
c0=$(vfield "$v0" checks) c1=$(vfield "$v" checks)
check "storm: the stormed thread kept working (checks $c0 -> $c1)" [ "${c1:-0}" -gt "${c0:-0}" ]
fix_quit "$pid" "$fd"; rc=$?
check "storm: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
report_time
