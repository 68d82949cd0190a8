#!/usr/bin/env bash
# jemalloc linked into the program, whose threads come and go without ever
# calling jemalloc (fixtures/fragchurn_static -b: short-lived threads that
# only touch their stack, one more that waits for ever, and a thread
# merging jemalloc's statistics every
# 2 ms, which walks every thread cache of every arena).  A call made in
# such a thread would create its thread cache; a thread past its key
# destructors would then exit without removing it, and the next merge would
# read its freed TLS (exiting_threads.sh holds a thread at that point).
# memattach must tell such threads
# from their copy of jemalloc's tsd_tls and never borrow them unnamed.
# RUNS stats / bins runs (half SIGKILLed at a random instant): the target
# alive after each, its verdict ok, its statistics merged all along.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
need_fixtures fragchurn_static safety_tool
RUNS=${RUNS:-$(sized 400 120)}

fix_start fragchurn_static -b -c 2 || { fail "fragchurn_static -b: start"; exit 1; }
P=$FIX_PID
born() { fix_cmd "$P" "$FIX_FD" "$FIX_OUT" born | awk '{ print $2 }'; }
b0=$(born)
"$MA" threads "$P" >"$TMP/threads.out" 2>&1
check "threads names the thread 'bare' as never having called into jemalloc (tsd_tls found): $(grep -m1 '"bare"' "$TMP/threads.out" | cut -c1-120)" \
	grep -q '"bare".*never called into jemalloc' "$TMP/threads.out"
killed=0 finished=0 failed=0 other=0 deaths=0
: >"$TMP/failed.txt"; : >"$TMP/other.txt"
for i in $(seq "$RUNS"); do
	c=stats; [ $((i % 3)) -eq 0 ] && c=bins
	if [ $((i % 2)) -eq 0 ]; then
		kill_at_random fragchurn_static "$c" 30000 "$MA" "$c" "$P"
	else
		"$MA" "$c" "$P" >/dev/null 2>"$TMP/run.err"; RC=$?
		case $RC in 0) finished=$((finished + 1)) ;; 1) failed=$((failed + 1)) ;; *) other=$((other + 1)) ;; esac
	fi
	alive "$P" || { deaths=1; fixture_died "$P" "$(dirname "$FIX_OUT")"; echo "# died after run $i: $DIED_WHY"; break; }
done
echo "# $RUNS runs: $finished finished, $killed killed, $failed refused ($(top_lines "$TMP/failed.txt" 2))"
check "$RUNS stats/bins runs, half killed at random: target alive ($deaths deaths)" [ "$deaths" -eq 0 ]
[ "$deaths" -eq 0 ] || exit 0
check "every run ended 0, 1 or by the kill ($other other: $(top_lines "$TMP/other.txt" 2))" [ "$other" -eq 0 ]
b1=$(born)
check "threads kept being born and ending meanwhile ($b0 -> $b1)" [ "${b1:-0}" -gt "${b0:-0}" ]
v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
check "verdict ok, jemalloc's statistics merged all along ($v)" \
	eval 'verdict_ok "$v" && [ "$(vfield "$v" epochs)" -gt 100 ]'
fix_quit "$P" "$FIX_FD"; rc=$?
check "fragchurn_static -b exits cleanly (status $rc)" [ "$rc" -eq 0 ]
