#!/usr/bin/env bash
# The one residual of borrowing an event loop by default: plain `stats` on
# a single-threaded epoll loop (fixtures/epolld.c, its only thread in
# epoll_wait with a 20 ms timeout) is SIGKILLed at a random instant of its
# run, RUNS times (default 1,000).  A kill between the stop and the first
# register write leaves the loop one EINTR (counted by the fixture, which
# retries it as event loops do); nothing else may show: no corrupt object,
# no other error, no death, the process neither stopped nor traced after.
# The EINTR count per 1,000 kills is reported (README, Limits), never
# judged: it depends on where the kills land.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
need_fixtures epolld safety_tool
RUNS=${RUNS:-1000}
TOOL=$FIX/safety_tool

fix_start epolld || { fail "epolld: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
"$MA" stats "$pid" >"$TMP/first.out" 2>&1; rc=$?
check "plain stats borrows the event loop's only thread, no flag (exit $rc: $(tail -1 "$TMP/first.out"))" \
	eval '[ "$rc" -eq 0 ] && grep -q "borrowed thread $pid " "$TMP/first.out"'
# the kill window: the median of 3 normal runs, at least 5 ms
es=()
for _ in 1 2 3; do
	e=$("$TOOL" killat -v 60000000 60000000 "$MA" stats "$pid" 2>&1 >/dev/null |
		sed -n 's/.*elapsed_us=\([0-9]*\).*/\1/p' | tail -1)
	es+=("${e:-0}")
done
win=$(printf '%s\n' "${es[@]}" | sort -n | sed -n 2p)
[ "$win" -lt 5000 ] && win=5000
killed=0 finished=0 other=0 died=0
for _ in $(seq "$RUNS"); do
	{ "$TOOL" killat 0 "$win" "$MA" stats "$pid" >/dev/null 2>&1; } 2>/dev/null
	case $? in
	137) killed=$((killed + 1)) ;;
	0) finished=$((finished + 1)) ;;
	*) other=$((other + 1)) ;;
	esac
	alive "$pid" || { died=1; break; }
done
check "$RUNS runs of stats killed at random ($killed killed, $finished finished first, window $win us): the loop lives ($other other exits)" \
	[ "$died" -eq 0 ]
bsleep 0.2
check "not left stopped or traced" bash -c "[ \"\$(awk '/^State:/ {print \$2}' /proc/$pid/status)\" != T ] && [ \"\$(awk '/^TracerPid:/ {print \$2}' /proc/$pid/status)\" = 0 ]"
"$MA" stats "$pid" >/dev/null 2>"$TMP/after.err"; rc=$?
check "stats works after the kills (exit $rc: $(head -c 150 "$TMP/after.err"))" [ "$rc" -eq 0 ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
eintr=$(vfield "$v" eintr)
echo "# EINTR left to the loop: ${eintr:-?} in $killed kills ($(( ${eintr:-0} * 1000 / (killed > 0 ? killed : 1) )) per 1,000 kills)"
check "no corrupt object, no other error ($v)" verdict_ok "$v"
fix_quit "$pid" "$fd"; rc=$?
check "the loop exits cleanly (status $rc)" [ "$rc" -eq 0 ]
