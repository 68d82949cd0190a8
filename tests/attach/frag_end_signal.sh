#!/usr/bin/env bash
# frag start/stop make memattach's thread in a call that runs free of
# syscall stops to an end signal it sends itself: one the program ignores
# (attach/README.md).  A program that sets that signal's disposition
# (SIG_IGN, or SIG_DFL for one ignored by default) discards it if it
# waits: fixtures/sigs -f flips SIGWINCH, SIGURG and SIGCHLD every 20 us
# while sig_tx queues SIGRTMIN with sequence numbers to sig_rx.  Checked
# over CYCLES (80) start/stop pairs: no call ever waits out its timeout for a
# lost end (the binary before: "did not return within 5000 ms", the
# thread's signals held by memattach all that time and re-sent without
# their payload; attack 43: 1-3 of 80 commands), every command succeeds,
# every signal arrives once and in order with its value, and the process
# ends cleanly.  How often the end was lost and found by the look after
# 25 ms ("was not seen") is counted.
. "$(dirname "$0")/../lib/common.sh"
plan 4
need_fixtures sigs
CYCLES=${CYCLES:-80}

fix_start sigs -f || { fail "sigs -f: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
ok=0
: >"$TMP/all"
for ((i = 0; i < CYCLES; i++)); do
	for c in start stop; do
		"$MA" frag "$c" "$pid" >>"$TMP/all" 2>&1 && ok=$((ok + 1))
	done
done
waited=$(grep -c "did not return within" "$TMP/all")
lost=$(grep -c "was not seen" "$TMP/all")
echo "# end signal lost and found by the look: $lost of $((2 * CYCLES)) commands"
check "no call waited out its timeout for its end ($waited of $((2 * CYCLES)) commands: $(grep -m1 'did not return' "$TMP/all"))" \
	[ "$waited" -eq 0 ]
check "every command succeeded ($ok of $((2 * CYCLES)))" [ "$ok" -eq $((2 * CYCLES)) ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "every signal once, in order, with its value ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$fd"
check "sigs -f exits cleanly" [ $? -eq 0 ]
