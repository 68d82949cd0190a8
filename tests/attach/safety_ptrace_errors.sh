#!/usr/bin/env bash
# Each ptrace request of a run refused in turn (strace's fault injection:
# the K-th ptrace call returns EIO without being made), the way a request
# can fail for real.  A failure while the borrowed thread is inside the
# injected call (a purge makes hundreds of madvise calls there, each a
# syscall stop, with an arena's decay lock held) must leave the thread to
# finish the call and restore itself: put back where it was stopped, it
# would leave jemalloc holding that lock, and the next allocation or purge
# that needs it waits for ever (an outside attack saw that with injected
# faults: a thread back in its own read loop holding a jemalloc mutex, a
# fork thread blocked on it in its prefork handlers).
#
# Target: daemon (4 workers allocating and checking every object).
# Command: purge, every request up to the 15th (the stop and set-up), then
# 25 evenly spread over the rest (nearly all syscall stops inside the
# purge).  After each run: a normal purge succeeds (a lock left held makes
# it fail or hang); at the end: verdict ok, still progressing, no thread
# left stopped or traced.  (bins --flush-tcache and the sigs target take
# minutes under strace: run them by hand with CMDS/NAMES edited.)
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../safety_lib.sh"
command -v strace >/dev/null || { plan 1; fail "strace missing (make deps)"; exit 1; }
need_fixtures daemon sigs
NAMES=(daemon)
declare -A ARGS_OF=([daemon]="-t 4" [sigs]="-n -i 1000") PROGRESS_OF=([daemon]=checks [sigs]=received)
CMDS=("purge")
EVERY=15 SPREAD=25
plan $(( ${#NAMES[@]} * (${#CMDS[@]} * 2 + 4) ))

# ptrace_calls CMD PID: how many ptrace requests a normal run of CMD makes.
ptrace_calls() {
	# shellcheck disable=SC2086
	strace -o "$TMP/count.txt" -e trace=ptrace "$MA" $1 "$2" >/dev/null 2>&1
	grep -c '^ptrace(' "$TMP/count.txt"
}

# steps N: 1..EVERY, then SPREAD more evenly spread up to N.
steps() {
	local n=$1 k
	for ((k = 1; k <= n && k <= EVERY; k++)); do echo "$k"; done
	[ "$n" -le "$EVERY" ] && return
	for ((k = 1; k <= SPREAD; k++)); do echo $((EVERY + (n - EVERY) * k / SPREAD)); done | uniq
}

for n in "${NAMES[@]}"; do
	# shellcheck disable=SC2086
	fix_start "$n" ${ARGS_OF[$n]} || { fail "$n: start"; continue; }
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	v=$(fix_cmd "$pid" "$fd" "$out" verdict); c0=$(vfield "$v" "${PROGRESS_OF[$n]}")
	for c in "${CMDS[@]}"; do
		total=$(ptrace_calls "$c" "$pid")
		runs=0 failed=0 after_bad=0 dead=0 first=""
		for k in $(steps "${total:-0}"); do
			# shellcheck disable=SC2086
			timeout 30 strace -o /dev/null -e trace=ptrace -e inject=ptrace:error=EIO:when=$k \
				"$MA" $c "$pid" >/dev/null 2>"$TMP/run.err"
			[ $? -ne 0 ] && failed=$((failed + 1))
			runs=$((runs + 1))
			if ! alive "$pid"; then dead=1; first="step $k: the target died"; break; fi
			timeout 30 "$MA" purge "$pid" >/dev/null 2>"$TMP/after.err"; rc=$?
			if [ $rc -ne 0 ]; then
				after_bad=$((after_bad + 1))
				[ -z "$first" ] && first="step $k: the next purge exit $rc: $(head -c 240 "$TMP/after.err"); the failed run said: $(head -c 240 "$TMP/run.err")"
			fi
		done
		echo "# $n, $c: $total ptrace requests, $runs runs each with one refused ($failed of them failed)"
		check "$n, $c: each refused request in turn ($runs runs): the target lives on" [ $dead -eq 0 ]
		check "$n, $c: after each, a normal purge succeeds (no jemalloc lock left held; $after_bad failed${first:+: $first})" \
			[ $after_bad -eq 0 ]
		[ $dead -eq 1 ] && break
	done
	if alive "$pid"; then
		bsleep 0.5
		check "$n: no thread left stopped or traced" [ "$(stopped_tasks "$pid")" -eq 0 -a "$(traced_tasks "$pid")" -eq 0 ]
		v=$(fix_cmd "$pid" "$fd" "$out" verdict)
		check "$n: verdict ok ($v)" verdict_ok "$v"
		c1=$(vfield "$v" "${PROGRESS_OF[$n]}")
		check "$n: still progressing (${PROGRESS_OF[$n]} $c0 -> $c1)" [ "${c1:-0}" -gt "${c0:-0}" ]
		fix_quit "$pid" "$fd"; rc=$?
		check "$n: exits cleanly (status $rc)" [ $rc -eq 0 ]
	else
		fixture_died "$pid" "$(dirname "$out")"
		fail "$n: died: $DIED_WHY"
	fi
done
report_time
