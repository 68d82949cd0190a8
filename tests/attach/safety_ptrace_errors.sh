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
# Target: daemon (4 workers allocating and checking every object), churning
# for 0.2 s and then quiesced before each run, so it holds dirty pages and
# nothing allocates or frees.  Command: purge, every request up to the
# 15th (the stop and set-up), then 25 evenly spread over the rest (nearly
# all syscall stops inside the purge, where jemalloc has marked the
# arena's decay "purging" and dropped its lock).  After each run, normal
# purges must bring dirty to 0 B (within 10 tries, the left thread may
# still be finishing): a thread put back mid-purge leaves that arena
# marked purging for good, and its dirty pages are never returned again;
# the binary before this test's fix kept them in every such step.  At the
# end: verdict ok, still progressing, no thread left stopped or traced.
# Then sysc (any EINTR or odd result is its death): `bins --tid sc_epoll`
# (a timed epoll_wait, issued again by memattach) with each of its ptrace
# requests refused in turn from the one after the wait is issued again (a
# refusal before leaves the EINTR the stop made: the window README Limits
# states); a refused PTRACE_GET_SYSCALL_INFO at one of
# the stub's syscalls was once taken for "some other syscall" and the
# thread ran on into the stub's restore path, its epoll_wait given EINTR
# (an outside attack, 3 of 8 runs of bins --flush-tcache).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
command -v strace >/dev/null || { plan 1; fail "strace missing (make deps)"; exit 1; }
need_fixtures daemon sigs
NAMES=(daemon)
declare -A ARGS_OF=([daemon]="-t 4" [sigs]="-n -i 1000") PROGRESS_OF=([daemon]=checks [sigs]=received)
CMDS=("purge")
EVERY=15 SPREAD=25
plan $(( ${#NAMES[@]} * (${#CMDS[@]} * 2 + 4) + 3 ))

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

# dirty_after PID: "dirty" after a normal purge, as purge prints it ("0 B").
dirty_after() { timeout 30 "$MA" purge "$1" 2>/dev/null | awk '$1 == "dirty" { print $4 " " $5 }'; }

for n in "${NAMES[@]}"; do
	# shellcheck disable=SC2086
	fix_start "$n" ${ARGS_OF[$n]} || { fail "$n: start"; continue; }
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	v=$(fix_cmd "$pid" "$fd" "$out" verdict); c0=$(vfield "$v" "${PROGRESS_OF[$n]}")
	for c in "${CMDS[@]}"; do
		total=$(ptrace_calls "$c" "$pid")
		runs=0 failed=0 stuck=0 dead=0 first=""
		for k in $(steps "${total:-0}"); do
			fix_cmd "$pid" "$fd" "$out" resume >/dev/null; bsleep 0.2
			fix_cmd "$pid" "$fd" "$out" quiesce >/dev/null
			# shellcheck disable=SC2086
			timeout 30 strace -o /dev/null -e trace=ptrace -e inject=ptrace:error=EIO:when=$k \
				"$MA" $c "$pid" >/dev/null 2>"$TMP/run.err"
			[ $? -ne 0 ] && failed=$((failed + 1))
			runs=$((runs + 1))
			if ! alive "$pid"; then dead=1; first="step $k: the target died"; break; fi
			d=""
			for _ in $(seq 10); do
				d=$(dirty_after "$pid")
				[ "$d" = "0 B" ] && break
				bsleep 0.3
			done
			if [ "$d" != "0 B" ]; then
				stuck=$((stuck + 1))
				[ -z "$first" ] && first="step $k: dirty after 10 purges '$d'; the failed run said: $(head -c 200 "$TMP/run.err")"
			fi
		done
		fix_cmd "$pid" "$fd" "$out" resume >/dev/null
		echo "# $n, $c: $total ptrace requests, $runs runs each with one refused ($failed of them failed)"
		check "$n, $c: each refused request in turn ($runs runs): the target lives on" [ $dead -eq 0 ]
		check "$n, $c: after each, purges return every dirty page (no arena left purging; $stuck steps kept some${first:+: $first})" \
			[ $stuck -eq 0 ]
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

fix_start sysc || { fail "sysc: start"; exit 1; }
pid=$FIX_PID
tid=$(tid_of "$pid" sc_epoll)
total=$(ptrace_calls "bins --tid $tid" "$pid")
# The first register write after the stop is the wait issued again.
from=$(grep '^ptrace(' "$TMP/count.txt" | grep -n PTRACE_SETREGS | head -1 | cut -d: -f1)
runs=0 failed=0 first=""
for ((k = ${from:-1} + 1; k <= ${total:-0}; k++)); do
	timeout 30 strace -o /dev/null -e trace=ptrace -e inject=ptrace:error=EIO:when=$k \
		"$MA" bins "$pid" --tid "$tid" >/dev/null 2>"$TMP/run.err"
	[ $? -ne 0 ] && failed=$((failed + 1))
	runs=$((runs + 1))
	bsleep 0.05
	alive "$pid" || { first="step $k: the target died"; break; }
done
echo "# sysc, bins --tid sc_epoll: $total ptrace requests, $runs runs each with one refused from step $((from + 1)) ($failed of them failed)"
if alive "$pid"; then
	check "sysc, bins --tid sc_epoll: each refused request in turn ($runs runs): no EINTR, no odd result (sysc lives on)" [ "$runs" -gt 10 ]
	bsleep 0.5
	check "sysc: no thread left stopped or traced" [ "$(stopped_tasks "$pid")" -eq 0 -a "$(traced_tasks "$pid")" -eq 0 ]
	v=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
	check "sysc: verdict ok ($v)" verdict_ok "$v"
else
	fixture_died "$pid" "$(dirname "$FIX_OUT")"
	fail "sysc, bins --tid sc_epoll: $first: $DIED_WHY"
	fail "sysc: no thread left stopped or traced (died)"
	fail "sysc: verdict ok (died)"
fi
report_time
