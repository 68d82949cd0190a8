#!/usr/bin/env bash
# tests/run.sh - run every test and print "N passed, N failed".
#
# A test is a built unit test (build/tests/unit/*) or a shell script
# (tests/cli/*.sh, tests/attach/*.sh).  Each prints one line per check:
# "PASS name", "FAIL name ..." or "SKIP name ...".  A test that exits
# non-zero without printing a FAIL line counts as one failure; so does one
# that prints nothing at all.  A shell test declares how many checks it
# runs ("PLAN N", tests/lib.sh's plan): running another number, or
# declaring none, is one more failure.
cd "$(dirname "$0")/.." || exit 2
passed=0 failed=0 skipped=0
only=${1:-}

# CPU seconds (user + system) of this shell's waited-for children so far.
children_cpu_s() {
	local f
	read -ra f </proc/$$/stat
	echo $(((f[15] + f[16]) / $(getconf CLK_TCK)))
}

run_one() {
	local name=$1; shift
	local out rc p f s planned t0=$SECONDS secs cpu0 cpu
	cpu0=$(children_cpu_s)
	out=$(timeout 900 "$@" 2>&1); rc=$?
	secs=$((SECONDS - t0)) cpu=$(($(children_cpu_s) - cpu0))
	p=$(grep -c '^PASS ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out"); s=$(grep -c '^SKIP ' <<<"$out")
	planned=$(sed -n 's/^PLAN \([0-9][0-9]*\)$/\1/p' <<<"$out" | head -1)
	if [[ $name != unit/* ]]; then
		if [ -z "$planned" ]; then
			f=$((f + 1)); out+=$'\n'"FAIL $name declares no plan (plan N in the script)"
		elif [ $((p + f + s)) -ne "$planned" ]; then
			out+=$'\n'"FAIL $name ran $((p + f + s)) checks of the $planned it plans"
			f=$((f + 1))
		fi
	fi
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; out+=$'\n'"FAIL $name exited with status $rc"; fi
	if [ $((p + f + s)) -eq 0 ]; then f=1; out+=$'\n'"FAIL $name reported no checks"; fi
	passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
	if [ "$f" -gt 0 ]; then
		echo "--- $name: $p passed, $f failed (${secs} s, cpu ${cpu} s)"; grep -v '^PASS ' <<<"$out" | sed 's/^/    /'
	else
		if [ "$s" -gt 0 ]; then echo "--- $name: $p passed, $s skipped (${secs} s, cpu ${cpu} s)"; else echo "--- $name: $p passed (${secs} s, cpu ${cpu} s)"; fi
		grep '^SKIP ' <<<"$out" | sed 's/^/    /'
	fi
}

for t in build/tests/unit/*; do
	[ -x "$t" ] || continue
	[ -n "$only" ] && [[ "$t" != *"$only"* ]] && continue
	run_one "unit/$(basename "$t")" "$t"
done
for t in tests/cli/*.sh tests/attach/*.sh; do
	[ -f "$t" ] || continue
	[ -n "$only" ] && [[ "$t" != *"$only"* ]] && continue
	run_one "${t#tests/}" bash "$t"
done
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
