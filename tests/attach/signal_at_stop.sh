#!/usr/bin/env bash
# memattach killed just after the kernel reported the stop of the thread
# it is about to borrow, while a queued real-time signal was being
# delivered to that thread (a signal-delivery stop: memattach lets such a
# thread go with its signal, not borrowed).  Reporting such a stop takes
# the signal out of the kernel's hands; a tracer that dies before it
# hands the signal back loses it (an outside attack: 4 lost signals in
# ~500 kill points).  memattach looks at the stop without collecting it
# (waitid WNOWAIT), so a kill there leaves the signal with the kernel.
# Target: fixtures/sigs.c with a signal every 50 us to the thread, so that
# many stops land on a delivery; RUNS runs of `stats --tid sig_rx`, each
# killed right after step 3 (seize, interrupt, the stop seen), RUNS more
# after step 4.  The fixture's sequence numbers must show every signal
# delivered once, in order.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
RUNS=${RUNS:-300}
need_fixtures sigs

fix_start sigs -i 50 || { fail "sigs: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" sig_rx)
killed=0
for k in 3 4; do
	for _ in $(seq "$RUNS"); do
		{ MEMATTACH_TEST_KILL_AFTER_STEP=$k "$MA_T" stats "$pid" --tid "$tid" >/dev/null 2>&1; } 2>/dev/null
		[ $? -eq 137 ] && killed=$((killed + 1))
	done
done
check "killed after the stop was seen: $killed of $((2 * RUNS)) runs exit 137" [ "$killed" -eq $((2 * RUNS)) ]
check "target alive" alive "$pid"
count_stopped "$pid"
check "no thread left stopped ($STOPPED)" [ "$STOPPED" -eq 0 ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "every signal delivered once, in order ($v)" verdict_ok "$v"
check "signals kept flowing ($(vfield "$v" received) received)" [ "$(vfield "$v" received)" -gt 1000 ]
fix_quit "$pid" "$fd"
check "sigs exits cleanly" [ $? -eq 0 ]
