#!/usr/bin/env bash
# memattach SIGKILLed while it holds a thread in the middle of an injected
# call (or at the return stub): the kernel lets the thread go, and the stub
# in the scratch area restores every register and restarts the syscall the
# thread was in.  The targets check their registers and syscall results.
. "$(dirname "$0")/../lib/common.sh"
plan 15
CYCLES=${CYCLES:-20}


kill_cycles() { # kill_cycles PID TID WHERE: CYCLES runs that die at WHERE
	local n=0 env=(MEMATTACH_TEST_KILL_AT="$3") cmd=stats
	[ "$3" = fault ] && env+=(MEMATTACH_TEST_FAULT=1)
	# stats keeps its scratch on the thread's stack: no syscall to die after
	[ "$3" = syscall ] && cmd=bins
	for _ in $(seq "$CYCLES"); do
		env "${env[@]}" "$MA_T" $cmd "$1" --tid "$2" >/dev/null 2>&1
		[ $? -eq 137 ] && n=$((n + 1))
	done
	echo "$n"
}

fix_start regs -i 2000000 || { fail "regs: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" regs_0)
# call: just before a call; marker: at the return stub after one; syscall:
# after a syscall issued through the stub (bins: its scratch is a
# mapping); fault: after a call faulted.
for where in call marker syscall fault; do
	n=$(kill_cycles "$pid" "$tid" "$where")
	check "regs: memattach was killed at '$where' $n/$CYCLES times" [ "$n" -eq "$CYCLES" ]
done
sleep 0.5
check "regs: target alive after memattach was killed mid-call" kill -0 "$pid"
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "regs: registers intact after self-restore ($v)" grep -q '^VERDICT ok.* mismatches=0' <<<"$v"
if "$MA" stats "$pid" --tid "$tid" >/dev/null; then pass "regs: memattach still works afterwards"; else fail "regs: memattach fails afterwards"; fi
fix_quit "$pid" "$fd"
check "regs: exits cleanly" [ $? -eq 0 ]

fix_start sysc || { fail "sysc: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
for name in sc_read sc_sleep sc_epoll sc_futex sc_accept; do
	tid=$(tid_of "$pid" "$name")
	n=$(kill_cycles "$pid" "$tid" call)
	check "sysc: $name: killed mid-call $n/$CYCLES times" [ "$n" -eq "$CYCLES" ]
done
sleep 0.5
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "sysc: syscalls restarted without EINTR or wrong results ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$fd"
check "sysc: exits cleanly" [ $? -eq 0 ]
