#!/usr/bin/env bash
# An injected call that faults (SIGSEGV at an unmapped address, forced by
# the test hook MEMATTACH_TEST_FAULT) is contained: the signal is
# suppressed, the thread restored, memattach reports the error, and the
# target never notices.
. "$(dirname "$0")/../lib/common.sh"
plan 7
CYCLES=${CYCLES:-20}


fault_cycles() { # fault_cycles PID TID: how many runs failed with a contained fault
	local n=0
	for _ in $(seq "$CYCLES"); do
		MEMATTACH_TEST_FAULT=1 "$MA_T" stats "$1" --tid "$2" >/dev/null 2>"$TMP/err"
		[ $? -eq 1 ] && says "faulted .*signal 11.*restored" "$TMP/err" && n=$((n + 1))
	done
	echo "$n"
}

fix_start regs -i 2000000 || { fail "regs: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
n=$(fault_cycles "$pid" "$(tid_of "$pid" regs_0)")
check "regs: $n/$CYCLES faulting calls reported as contained faults" [ "$n" -eq "$CYCLES" ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "regs: registers intact after faults ($v)" grep -q '^VERDICT ok.* mismatches=0' <<<"$v"
fix_quit "$pid" "$fd"
check "regs: exits cleanly" [ $? -eq 0 ]

fix_start sysc || { fail "sysc: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
for name in sc_read sc_epoll; do
	n=$(fault_cycles "$pid" "$(tid_of "$pid" "$name")")
	check "sysc: $name: $n/$CYCLES faults contained" [ "$n" -eq "$CYCLES" ]
done
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "sysc: syscalls unharmed by faults ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$fd"
check "sysc: exits cleanly" [ $? -eq 0 ]
