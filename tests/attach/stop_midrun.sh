#!/usr/bin/env bash
# A process stopped (SIGSTOP) in the middle of a run.
# First, the call known to be held: slowpurge's purge blocks in an extent
# hook until its ctl thread is told to let go; memattach purge --timeout
# 20000 is stopped there.  A stopped ctl cannot let go before a SIGCONT, so
# the run must end soon after the stop (it used to wait the whole --timeout
# and blame it), say the process was stopped, and leave the thread to
# finish the call: after SIGCONT and release the thread runs its own loop
# again, nothing of memattach's left in its maps.
# Then, at random: RUNS (default 150)
# times, one of purge, bins --flush-tcache, stats on the busy daemon
# (4 workers allocating without pause: jemalloc's locks are contended), with
# --timeout 20000; a single SIGSTOP at a random instant of the run.  When
# memattach is done:
#   - no run waited out its --timeout: a call that waits for a lock which
#     a stopped thread holds can never return before a SIGCONT, so such a
#     run must end when it sees that (it used to wait the whole --timeout
#     and blame it: "the run's --timeout ran out during the call");
#   - every run that failed says the process was stopped;
#   - after the SIGCONT no thread stays stopped or traced, and the target's
#     own checks (checksummed objects) still pass.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 11
need_fixtures daemon slowpurge
RUNS=${RUNS:-$(sized 150 60)}
LIMIT_MS=20000

fix_start slowpurge || { fail "slowpurge: start"; exit 1; }
sp=$FIX_PID
status() { fix_cmd "$sp" "$FIX_FD" "$FIX_OUT" status; }
field() { awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' <<<"$2"; }
t0=$(now_us)
timeout 40 "$MA" purge "$sp" --timeout "$LIMIT_MS" >"$TMP/p.out" 2>"$TMP/p.err" &
mp=$!
for _ in $(seq 400); do [ "$(field BLOCKED "$(status)")" -ge 1 ] && break; bsleep 0.05; done
held=$(field BLOCKED "$(status)")
kill -STOP "$sp"
wait "$mp"; rc=$?
ms=$(( ($(now_us) - t0) / 1000 ))
check "slowpurge: the purge's call was held in the hook when the process was stopped (BLOCKED $held)" [ "${held:-0}" -ge 1 ]
check "slowpurge: the run ends before its --timeout ($ms ms of $LIMIT_MS), saying the process was stopped under the call (exit $rc: $(unwrapped "$TMP/p.err" | head -c 300))" \
	eval '[ "$ms" -lt "$LIMIT_MS" ] && exit_and_says "$rc" 1 "process $sp was stopped \(SIGSTOP or Ctrl-Z\) during the run, and memattach.s call in thread $sp had not returned" "$TMP/p.err"'
kill -CONT "$sp"
slowpurge_release "$sp" "$FIX_FD" "$FIX_OUT"
check "slowpurge: continued and released, the thread finished the call and runs its own loop again ($LOOPS_BEFORE -> $LOOPS_NOW rounds)" \
	[ "$LOOPS_NOW" -gt $((LOOPS_BEFORE + 20)) ]
"$MA" stats "$sp" >/dev/null 2>"$TMP/s2.err"; rc=$?
check "slowpurge: a later run reads the stats; nothing of memattach's left in its maps, no thread traced (exit $rc: $(head -c 200 "$TMP/s2.err"))" \
	eval '[ "$rc" -eq 0 ] && ! grep -q memattach "/proc/$sp/maps" && [ "$(traced_tasks "$sp")" -eq 0 ]'

fix_start daemon -t 4 -p 0 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
v0=$(fix_cmd "$pid" "$fd" "$out" verdict)

# The signal lands anywhere in a run: spread over a normal run's time.
t0=$(now_us)
"$MA" purge "$pid" >/dev/null 2>&1
span_us=$(( ($(now_us) - t0) * 3 / 2 ))
[ "$span_us" -lt 20000 ] && span_us=20000
echo "# SIGSTOP within the first $span_us us of each run"

cmds=("purge" "bins --flush-tcache" "stats")
longest=0 waited_out=0 wrong=0 failed=0 in_call=0 stuck=0
: >"$TMP/bad.txt"
for ((i = 1; i <= RUNS; i++)); do
	c=${cmds[$((RANDOM % 3))]}
	d=$((RANDOM * 32768 + RANDOM))
	d=$((d % span_us))
	t0=$(now_us)
	# shellcheck disable=SC2086 # the command's words
	"$MA" $c "$pid" --timeout "$LIMIT_MS" >"$TMP/out" 2>"$TMP/err" &
	mp=$!
	bsleep "$(printf '0.%06d' "$d")"
	kill -STOP "$pid"
	wait "$mp"
	rc=$?
	ms=$(( ($(now_us) - t0) / 1000 ))
	[ "$ms" -gt "$longest" ] && longest=$ms
	if [ "$ms" -ge "$LIMIT_MS" ]; then
		waited_out=$((waited_out + 1))
		echo "run $i ($c, stop after $d us): $ms ms: $(unwrapped "$TMP/err" | head -1)" >>"$TMP/bad.txt"
	fi
	if [ "$rc" -ne 0 ]; then
		failed=$((failed + 1))
		if ! says "stopped \(SIGSTOP or Ctrl-Z\)" "$TMP/err"; then
			wrong=$((wrong + 1))
			echo "run $i ($c, stop after $d us): rc $rc: $(unwrapped "$TMP/err" | head -1)" >>"$TMP/bad.txt"
		fi
		says "during the run while memattach's call" "$TMP/err" && in_call=$((in_call + 1))
	fi
	kill -CONT "$pid"
	for ((k = 0; k < 100; k++)); do
		count_stopped "$pid"
		[ "$STOPPED" -eq 0 ] && break
		bsleep 0.01
	done
	if [ "$STOPPED" -ne 0 ] || [ "$(traced_tasks "$pid")" -ne 0 ]; then
		stuck=$((stuck + 1))
		echo "run $i ($c): after SIGCONT $STOPPED threads stopped, $(traced_tasks "$pid") traced" >>"$TMP/bad.txt"
	fi
	alive "$pid" || break
done
echo "# $RUNS runs: $failed failed (process stopped), $in_call of them in a call that waited for a stopped thread's lock; longest run $longest ms"
[ -s "$TMP/bad.txt" ] && head -5 "$TMP/bad.txt" | sed 's/^/# /'

check "stop mid-run: no run waited out its --timeout ($waited_out of $RUNS did; longest $longest ms)" [ "$waited_out" -eq 0 ]
check "stop mid-run: every failed run says the process was stopped ($wrong of $failed did not)" [ "$wrong" -eq 0 ]
check "stop mid-run: some runs did meet the stop ($failed of $RUNS failed)" [ "$failed" -gt 0 ]
check "stop mid-run: after each SIGCONT every thread runs, none traced ($stuck runs left some)" [ "$stuck" -eq 0 ]
check "stop mid-run: target alive" alive "$pid"
if alive "$pid"; then
	kill -CONT "$pid"
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	c0=$(vfield "$v0" checks) c1=$(vfield "$v" checks)
	check "stop mid-run: verdict ok, kept working (checks $c0 -> $c1; $v)" \
		eval 'verdict_ok "$v" && [ "${c1:-0}" -gt "${c0:-0}" ]'
	fix_quit "$pid" "$fd"; rc=$?
	check "stop mid-run: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	fixture_died "$pid" "$(dirname "$out")"
	fail "stop mid-run: target died: $DIED_WHY"
fi
report_time
