#!/usr/bin/env bash
# tests/run.sh [FILTER] - run every test and print "N passed, N failed".
#
# A test is a built unit test (build/tests/unit/*) or a shell script
# (tests/cli/*.sh, tests/attach/*.sh).  Each prints one line per check:
# "PASS name", "FAIL name ..." or "SKIP name ...".  A test that exits
# non-zero without printing a FAIL line counts as one failure; so does one
# that prints nothing at all.  A shell test declares how many checks it
# runs ("PLAN N", tests/lib/common.sh's plan): running another number, or
# declaring none, is one more failure.
#
# Tests run two at a time (the machines' cores) while the jemalloc builds
# of the version matrix still run beside them at nice 19 (they take what
# CPU the tests leave), three at a time once those are done (most of a
# live test's time is spent waiting on its fixtures); MA_TEST_JOBS sets
# one number for the whole run.  The tests whose
# targets keep both CPUs busy by design (HEAVY below: allocation storms,
# thread churn, 1,000 random kills) run alone, so that no other test's
# target slows them and none slows another.  The longest tests start first
# (the times of the last run, build/test-times, or the LONG list below on a
# fresh checkout), so the run ends with short ones; the version matrix,
# which waits for those builds, starts as soon as they are done.  Each
# test's report is printed when it ends.
cd "$(dirname "$0")/.." || exit 2
only=${1:-}
jobs_given=${MA_TEST_JOBS:-}
[ -z "$jobs_given" ] || [ "$jobs_given" -ge 1 ] 2>/dev/null || jobs_given=2
je_lock=build/jemalloc/.lock
# Are the background jemalloc builds over (their lock free, or never taken)?
builds_done() { [ ! -e "$je_lock" ] || flock -n "$je_lock" true; }
# builds_over: 1 once the builds were seen done (the version matrix then
# takes their lock again: it stays 1).  Looked at before each start.
builds_over=0
see_builds() { [ "$builds_over" = 1 ] || ! builds_done || builds_over=1; }
# set_jobs: JOBS, the tests to run at once now.
set_jobs() {
	if [ -n "$jobs_given" ]; then JOBS=$jobs_given
	elif [ "$builds_over" = 1 ]; then JOBS=3; else JOBS=2; fi
}
results=build/test-results
times_file=build/test-times
# The tests' python3 is Debian's, the one make deps installs with
# python3-pil: a python3 earlier in PATH may be a version manager's shim
# (pyenv's is a bash script: `python3 -c 'import json'` costs 0.33 s of CPU
# through it against 0.04 s, measured, and a run starts python3 364 times).
if [ -x /usr/bin/python3 ]; then
	mkdir -p build/tests/bin && ln -sfn /usr/bin/python3 build/tests/bin/python3 || exit 2
	PATH=$PWD/build/tests/bin:$PATH
fi
rm -rf "$results" && mkdir -p "$results" || exit 2

# The longest tests of a run on this machine, in order (a fresh checkout
# has no build/test-times yet).
LONG="attach/safety_every_step.sh attach/frag_every_step.sh attach/frag_random_kill.sh attach/frag_every_step_static.sh
attach/safety_ptrace_errors.sh attach/syscalls.sh attach/safety_fork.sh attach/frag_churn.sh
attach/safety_seccomp.sh attach/valgrind.sh attach/safety_random_kill.sh attach/frag_harness.sh
attach/seccomp_sandbox.sh attach/stress.sh attach/frag_flavours.sh attach/frag_attack.sh
attach/stop_midrun.sh attach/target_killed.sh attach/frag_storms.sh attach/frag_churn_static.sh attach/frag_storms_static.sh attach/rseq.sh
cli/aggregate_truth.sh attach/eintr_residual.sh attach/browser_svg.sh attach/safety_stopcont.sh
cli/fixtures_selftest.sh attach/live_watch_snapshot.sh attach/hostile_exporter.sh"
# Tests that use more than a CPU for most of their run (measured: CPU
# seconds over 1.3 times their wall seconds): they run alone.
HEAVY="attach/frag_random_kill.sh attach/frag_churn.sh attach/frag_churn_static.sh attach/frag_storms_static.sh attach/safety_random_kill.sh
attach/stress.sh attach/safety_fork.sh attach/stop_midrun.sh attach/frag_storms.sh
attach/registers.sh attach/width_live.sh attach/real_daemons.sh attach/concurrent.sh
attach/safety_selfdeadlock.sh attach/static_bare_threads.sh"
# Waits for the background jemalloc builds (fixtures/jemalloc.mk): last.
LAST="attach/version_matrix.sh"

# CPU seconds (user + system) of the waited-for children of shell PID so far.
children_cpu_s() {
	local f
	read -ra f <"/proc/$1/stat"
	echo $(((f[15] + f[16]) / $(getconf CLK_TCK)))
}

# run_one NAME CMD...: run one test; its report goes to $results/ID.report,
# its counts ("passed failed skipped seconds NAME") to $results/ID.counts.
run_one() {
	local name=$1; shift
	local id=${name//\//_}
	local out rc p f s planned t0=$SECONDS secs cpu0 cpu me=$BASHPID
	cpu0=$(children_cpu_s "$me")
	out=$(timeout 900 "$@" 2>&1); rc=$?
	secs=$((SECONDS - t0)) cpu=$(($(children_cpu_s "$me") - cpu0))
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
	{
		if [ "$f" -gt 0 ]; then
			echo "--- $name: $p passed, $f failed (${secs} s, cpu ${cpu} s)"; grep -v '^PASS ' <<<"$out" | sed 's/^/    /'
		else
			if [ "$s" -gt 0 ]; then echo "--- $name: $p passed, $s skipped (${secs} s, cpu ${cpu} s)"; else echo "--- $name: $p passed (${secs} s, cpu ${cpu} s)"; fi
			grep '^SKIP ' <<<"$out" | sed 's/^/    /'
		fi
	} >"$results/$id.report"
	echo "$p $f $s $secs $name" >"$results/$id.counts.tmp" && mv "$results/$id.counts.tmp" "$results/$id.counts"
}

# The tests as "NAME<TAB>COMMAND", in the order they should start.
list_tests() {
	local t
	for t in build/tests/unit/*; do [ -x "$t" ] && printf 'unit/%s\t%s\n' "${t##*/}" "$t"; done
	for t in tests/cli/*.sh tests/attach/*.sh; do [ -f "$t" ] && printf '%s\tbash %s\n' "${t#tests/}" "$t"; done
}
# Longest first: seconds from the last run, else the LONG list's rank.
order_tests() {
	awk -F'\t' -v long="$LONG" -v times="$times_file" '
		BEGIN {
			n = split(long, l, /[ \n]+/); for (i = 1; i <= n; i++) if (l[i] != "") rank[l[i]] = 100000 - i
			while ((getline line < times) > 0) { split(line, a, " "); secs[a[1]] = a[2] + 0; have = 1 }
		}
		{
			w = have ? ($1 in secs ? secs[$1] : 1) : ($1 in rank ? rank[$1] : 0)
			printf "%d\t%d\t%s\n", w, NR, $0
		}' | sort -t$'\t' -k1,1nr -k2,2n | cut -f3-
}

printed=" "
print_finished() {
	local c id
	for c in "$results"/*.counts; do
		[ -e "$c" ] || continue
		id=${c##*/}; id=${id%.counts}
		[[ $printed == *" $id "* ]] && continue
		cat "$results/$id.report"; printed+="$id "
	done
}

# start_test "NAME<TAB>CMD": start it when a slot is free (a heavy test
# waits for every running test to end, and runs alone).
start_test() {
	local name=${1%%$'\t'*} cmd=${1#*$'\t'} limit
	[ -n "$only" ] && [[ "$name" != *"$only"* ]] && return
	set_jobs; limit=$JOBS
	[[ " "${HEAVY//$'\n'/ }" " == *" $name "* ]] && limit=1
	while [ "$running" -ge "$limit" ]; do wait -n; running=$((running - 1)); print_finished; done
	# shellcheck disable=SC2086  # CMD is "bash FILE" or a path
	run_one "$name" $cmd &
	running=$((running + 1))
	[ "$limit" -eq 1 ] && { wait -n; running=$((running - 1)); print_finished; }
}

# The list is read whole before any test starts: `wait -n` below then
# waits only for tests (a process substitution feeding the loop would be
# one more child to wait for).
mapfile -t tests < <(list_tests | order_tests)
# The LAST test is taken out of the order; it starts at the first start
# after the builds are done (or after every other test).
order=() last_test=""
for t in "${tests[@]}"; do
	if [ "${t%%$'\t'*}" = "$LAST" ]; then last_test=$t; else order+=("$t"); fi
done
running=0
for t in "${order[@]}"; do
	see_builds
	if [ -n "$last_test" ] && [ "$builds_over" = 1 ]; then
		start_test "$last_test"; last_test=""
	fi
	start_test "$t"
done
[ -n "$last_test" ] && start_test "$last_test"
wait
print_finished

passed=0 failed=0 skipped=0
: >"$times_file.tmp"
for c in "$results"/*.counts; do
	[ -e "$c" ] || continue
	read -r p f s secs name <"$c"
	passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
	echo "$name $secs" >>"$times_file.tmp"
done
[ -z "$only" ] && mv "$times_file.tmp" "$times_file" || rm -f "$times_file.tmp"
# The failures again, last, where a log cut in the middle still shows them.
if [ "$failed" -gt 0 ]; then
	echo "failures:"
	for c in "$results"/*.counts; do
		read -r p f s secs name <"$c"
		[ "$f" -gt 0 ] || continue
		id=${c##*/}; id=${id%.counts}
		grep -E '^ *FAIL' "$results/$id.report" | head -5 | sed "s|^ *|  $name: |" | cut -c1-400
	done
fi
if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
