#!/usr/bin/env bash
# tests/attach/eintr_waits.sh - a thread blocked in a wait that a ptrace
# stop ends with EINTR (epoll_wait; recv on a socket with SO_RCVTIMEO) is
# borrowed only when no better thread exists (memattach issues the wait
# again at once), and with --strict never stopped unless named with --tid.
# The sysc fixture's sc_idle (epoll_wait, no timeout, nothing ever ready),
# sc_idlerecv (recv, SO_RCVTIMEO one hour, nobody writes) and sc_idlesplice
# (splice from such a socket) never wake on their own: their
# voluntary_ctxt_switches in /proc move only if a tracer stops them.
# Every command with --strict must leave them unmoved; every command
# without a flag must work and leave no EINTR (the fixture fails on one);
# `stats --tid` of sc_idle must move it (the check can see a stop), while
# the two with a socket timeout are refused even named (issued again, their
# wait would start its whole timeout once more).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 33
need_fixtures sysc

fix_start sysc || { fail "sysc: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
idle=$(tid_of "$pid" sc_idle) idlerecv=$(tid_of "$pid" sc_idlerecv) idlesplice=$(tid_of "$pid" sc_idlesplice)
switches() { awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$pid/task/$1/status"; }
wakes() { echo "$(switches "$idle") $(switches "$idlerecv") $(switches "$idlesplice")"; }

declare -a cmds=(
	"stats $pid"
	"threads $pid"
	"bins $pid --flush-tcache"
	"purge $pid"
	"stats-dump $pid -o $TMP/s.json"
	"snapshot $pid -o $TMP/snap"
	"watch $pid --interval 100 --duration 1 --out $TMP/w"
	"export --pid $pid --once --listen 127.0.0.1:1"
	"frag start $pid"
	"frag report $pid"
	"frag stop $pid"
)
for c in "${cmds[@]}"; do
	w0=$(wakes)
	# shellcheck disable=SC2086
	strict=--strict; [ "$c" = "threads $pid" ] && strict= # threads never stops such a thread
	"$MA" $c $strict >"$TMP/out" 2>"$TMP/err"; rc=$?
	[ "$c" = "export --pid $pid --once --listen 127.0.0.1:1" ] && rc=0 # its port may be refused: the scrape is what counts
	w1=$(wakes)
	check "$c $strict: exit $rc, sc_idle, sc_idlerecv and sc_idlesplice not stopped (voluntary switches $w0 -> $w1)" \
		eval '[ "$rc" -eq 0 ] && [ "$w0" = "$w1" ]'
done
rm -rf "$TMP/snap" "$TMP/w"
for c in "${cmds[@]}"; do
	# shellcheck disable=SC2086
	"$MA" $c >"$TMP/out" 2>"$TMP/err"; rc=$?
	[ "$c" = "export --pid $pid --once --listen 127.0.0.1:1" ] && rc=0
	check "$c (no flag): exit $rc ($(head -c 150 "$TMP/err"))" [ "$rc" -eq 0 ]
done
# threads says what a run would do: sc_idle borrowed when no thread is safe,
# its wait issued again; the two with a socket timeout never.
"$MA" threads "$pid" >"$TMP/th.raw" 2>&1
unwrapped "$TMP/th.raw" 4 >"$TMP/th.txt"
check "threads: sc_idle 'OK, WAIT RE-ISSUED', borrowed when no thread is safe" \
	grep -q "^thread $idle \"sc_idle\" .*: OK, WAIT RE-ISSUED (blocked in epoll_wait, .*borrowed when no better" "$TMP/th.txt"
check "threads: sc_idlerecv and sc_idlesplice UNSAFE, naming their timeout" \
	bash -c "grep -q '^thread $idlerecv .*: UNSAFE (.*with a timeout' '$TMP/th.txt' && grep -q '^thread $idlesplice .*: UNSAFE (.*with a timeout' '$TMP/th.txt'"
# Named, the untimed epoll_wait is stopped (the wake-up is seen) and its
# wait issued again (no EINTR).  The two on a socket with SO_RCVTIMEO are
# refused even named, before any stop: issued again, their wait would
# start its whole timeout once more.
a=$(switches "$idle")
"$MA" stats "$pid" --tid "$idle" >"$TMP/out" 2>"$TMP/err"; rc=$?
b=$(switches "$idle")
check "stats --tid $idle (sc_idle): exit $rc, borrowed it (switches $a -> $b)" \
	eval '[ "$rc" -eq 0 ] && [ "$b" -gt "$a" ] && grep -q "borrowed thread $idle " "$TMP/out"'
for t in "$idlerecv" "$idlesplice"; do
	a=$(switches "$t")
	"$MA" stats "$pid" --tid "$t" >"$TMP/out" 2>"$TMP/err"; rc=$?
	b=$(switches "$t")
	check "stats --tid $t: exit $rc, refused naming its timeout, not stopped (switches $a -> $b)" \
		eval '[ "$rc" -eq 1 ] && [ "$b" = "$a" ] && says "with a timeout" "$TMP/err"'
done
flush=$("$MA" bins "$pid" --flush-tcache --strict --json | grep -o '"skipped_eintr_waits":[0-9]*' | cut -d: -f2)
check "bins --flush-tcache --strict counts the EINTR waits it left alone (${flush:-none}; 4 such threads)" [ "${flush:-0}" -ge 2 ]
a=$(switches "$idle")
"$MA" bins "$pid" --flush-tcache --json >"$TMP/b.json" 2>"$TMP/err"; rc=$?
b=$(switches "$idle")
check "bins --flush-tcache (no flag) flushes sc_idle too, its wait issued again (exit $rc, switches $a -> $b)" \
	eval '[ "$rc" -eq 0 ] && [ "$b" -gt "$a" ]'

"$MA" bins "$pid" --flush-tcache --strict >"$TMP/b.txt" 2>&1
line=$(grep '^tcache flush:' "$TMP/b.txt")
read -r F T N S < <(sed -n 's/^tcache flush: \([0-9]*\) of \([0-9]*\) threads flushed, \([0-9]*\) without tcache, \([0-9]*\) skipped.*/\1 \2 \3 \4/p' <<<"$line")
check "bins --flush-tcache's counts add up to the threads ($line)" \
	bash -c "[ -n '$T' ] && [ \$(( ${F:-0} + ${N:-0} + ${S:-0} )) -eq ${T:-0} ]"
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
echo "# $v"
check "sysc: no EINTR, no wrong result ($v)" verdict_ok "$v"
check "sysc: the SO_RCVTIMEO reader kept reading ($(vfield "$v" rcvtimeo))" [ "$(vfield "$v" rcvtimeo)" -gt 0 ]
fix_quit "$pid" "$fd"; rc=$?
check "sysc: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
