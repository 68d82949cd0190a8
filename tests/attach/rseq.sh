#!/usr/bin/env bash
# tests/attach/rseq.sh - threads that spend their time inside restartable
# sequences (rseq critical sections on per-CPU counters, the way tcmalloc's
# caches or librseq code work) keep every update while memattach borrows
# them: a thread stopped inside a section must resume at its abort handler,
# as the kernel would send it, not in the middle of the section (an outside
# attack lost millions of updates before memattach did so).  The fixture
# counts its commits against its counters and says "lost=0" or not.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
[ -x "$FIX/rseqd" ] || { fail "build/fixtures/rseqd missing (make fixtures)"; exit 1; }

# run SECONDS SPIN [kill]: rseqd for SECONDS while memattach stats borrows its
# threads (with "kill": memattach-test killed after step 1, 2, 3... in turn,
# round and round); sets V, OK, N
run() {
	"$FIX/rseqd" "$1" "$2" >"$TMP/rseqd.out" 2>&1 &
	local pid=$! k
	for k in $(seq 100); do grep -q '^READY' "$TMP/rseqd.out" && break; bsleep 0.05; done
	OK=0 N=0
	while kill -0 "$pid" 2>/dev/null && [ "$N" -lt 200 ]; do
		if [ "${3:-}" = kill ]; then
			{ MEMATTACH_TEST_KILL_AFTER_STEP=$((N % 30 + 1)) "$MA_T" stats "$pid" --timeout 2s \
				>/dev/null 2>&1; } 2>/dev/null
			[ $? -eq 137 ] && OK=$((OK + 1))
		else
			"$MA" stats "$pid" --timeout 2s >/dev/null 2>&1 && OK=$((OK + 1))
		fi
		N=$((N + 1))
	done
	wait "$pid"
	V=$(grep '^VERDICT' "$TMP/rseqd.out")
}

# A long section (a spin of 3000 between read and commit): most stops land in one.
run 6 3000
check "long sections: no update lost across $OK borrows of $N runs ($V)" grep -q '^VERDICT ok .* lost=0 ' <<<"$V"
check "long sections: memattach borrowed its threads ($OK of $N runs)" [ "$OK" -gt 0 ]
# A short one (6 instructions): stops land in and out of it.
run 6 1
check "short sections: no update lost across $OK borrows of $N runs ($V)" grep -q '^VERDICT ok .* lost=0 ' <<<"$V"
check "short sections: memattach borrowed its threads ($OK of $N runs)" [ "$OK" -gt 0 ]
# memattach killed after each step of its run in turn, the thread perhaps left
# in its stub's restore (which must also take it to the abort handler).
run 8 3000 kill
check "killed after each step in turn: no update lost ($OK of $N runs killed; $V)" grep -q '^VERDICT ok .* lost=0 ' <<<"$V"
check "killed after each step in turn: kills landed ($OK of $N runs)" [ "$OK" -gt 0 ]
