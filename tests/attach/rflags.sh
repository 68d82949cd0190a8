#!/usr/bin/env bash
# A thread that runs with RFLAGS.AC (alignment check, honoured by Linux in
# user mode) and DF (direction) set, and every SSE and x87 exception
# unmasked (fixtures/regs -f: it checks all of it, and its registers, at
# every iteration) is borrowed by every live command that takes --tid, and
# by a memattach killed inside its call.  A call that inherited AC faulted
# (SIGBUS) on jemalloc's unaligned loads, one with the exceptions unmasked
# (SIGFPE) in heap profiling's floating point; either left the lock it held
# taken, and the next run's call waited on it for ever (an outside attack;
# the binary before fails every check here but the verdict's; with AC
# cleared alone, heap-dump, stats-dump and the last run fail).  Each call
# runs with the flags clear and a fresh thread's floating-point control;
# the thread gets its own back.  Then the profile agent in a thread with
# every FP exception unmasked (fpexcept), and a thread that single-steps
# itself (selfstep).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
jfile() { jcheck "d=json.load(open(sys.argv[1])); $2" "$1"; }
plan 16
need_fixtures regs fpexcept selfstep
RUNS=${RUNS:-10}

MALLOC_CONF=$PROF_CONF fix_start regs -k 1 -f -i 2000000 || { fail "regs -f: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" regs_0)
cd "$TMP" || exit 1

# runs LABEL ARGS...: RUNS runs of memattach ARGS --tid regs_0; the count that ended 0.
runs() {
	local label=$1 ok=0
	shift
	for _ in $(seq "$RUNS"); do
		"$MA" "$@" --tid "${tid:-0}" >/dev/null 2>>"$label.err" && ok=$((ok + 1))
	done
	check "$label --tid regs_0: $ok of $RUNS runs end 0 ($(tail -c 200 "$label.err" | tr '\n' ' '))" \
		[ "$ok" -eq "$RUNS" ]
}
runs stats stats "$pid"
runs bins bins "$pid" --flush-tcache
runs purge purge "$pid"
runs heap-dump heap-dump "$pid" -o rf.heap
runs stats-dump stats-dump "$pid" -o rf.json

# memattach killed inside its call: the stub gives the thread its flags back.
killed=0
for _ in $(seq "$RUNS"); do
	MEMATTACH_TEST_KILL_AT=call timeout -s KILL 30 "$MA_T" stats "$pid" --tid "${tid:-0}" \
		>/dev/null 2>/dev/null
	[ $? -eq 137 ] && killed=$((killed + 1))
done
# No lock left taken: a run on any thread ends, as the ones before did.
timeout -s KILL 60 "$MA" stats "$pid" --json >after.json 2>after.err; rc=$?
check "after them ($killed of $RUNS killed in the call), stats on any thread ends 0 (exit $rc: $(head -c 160 after.err))" \
	[ "$rc" -eq 0 ]
v=$(alive "$pid" && fix_cmd "$pid" "$fd" "$out" verdict)
check "regs -f: AC, DF and every register kept, in every iteration ($v)" \
	eval 'verdict_ok "$v" && grep -q " mismatches=0" <<<"$v" && [ "$(vfield "$v" rounds)" -gt 0 ]'
fix_quit "$pid" "$fd"; rc=$?
check "regs -f exits cleanly (status $rc)" [ "$rc" -eq 0 ]

# The profile agent's wrappers run in the program's own threads, on their
# allocations: in fpexcept's "fpx" (every FP exception unmasked, 60-68 KiB
# objects without pause), a sampling draw's floating point trapped
# (SIGFPE: the process died at profile start, the agent before).  It now
# runs under a masked MXCSR of its own and puts the program's back.
fix_start fpexcept || { fail "fpexcept: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
"$MA" profile start "$pid" >start.out 2>start.err; rc=$?
check "profile start on fpexcept ends 0 (exit $rc: $(head -c 160 start.err))" [ "$rc" -eq 0 ]
grows() { [ "$("$MA" profile status "$pid" --json 2>/dev/null | jcheck "print(json.load(sys.stdin)['recorded'])" 2>/dev/null || echo 0)" -gt 100 ]; }
for _ in $(seq 100); do grows && break; bsleep 0.1; done
"$MA" profile status "$pid" --json >status.json 2>&1
check "its allocations are sampled meanwhile (over 100 recorded)" \
	jfile status.json "assert d['recorded'] > 100, d"
"$MA" profile stop "$pid" >/dev/null 2>stop.err; rc=$?
v=$(alive "$pid" && fix_cmd "$pid" "$fd" "$out" verdict)
check "profile stop ends 0 (exit $rc), fpexcept alive, its objects intact ($v0 -> $v)" \
	eval '[ "$rc" -eq 0 ] && verdict_ok "$v" && [ "$(vfield "$v" rounds)" -gt "$(vfield "$v0" rounds)" ]'
fix_quit "$pid" "$fd"; rc=$?
check "fpexcept exits cleanly (status $rc)" [ "$rc" -eq 0 ]

# A thread that single-steps itself (selfstep's "stepper": its trap flag
# set over 50 nops, its SIGTRAPs counted per pass).  Borrowed with the flag
# set, it lost the flag on the way back; stopped with its last trap's
# SIGTRAP waiting, the call took that signal for its own fault and it never
# reached the program (an outside attack: 7-51 traps of a pass lost).  It
# is borrowed only with neither; refused otherwise, naming why.
fix_start selfstep || { fail "selfstep: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" stepper)
v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
ok=0 refused=0 other=0
for _ in $(seq $((2 * RUNS))); do
	"$MA" stats "$pid" --tid "${tid:-0}" >/dev/null 2>step.err; rc=$?
	if [ "$rc" -eq 0 ]; then ok=$((ok + 1))
	elif [ "$rc" -eq 1 ] && ! says "faulted" step.err; then
		says "trap flag is set|a trap or fault signal waits" step.err && refused=$((refused + 1))
	else other=$((other + 1)); echo "# $(head -c 200 step.err)"; fi
done
check "stats --tid stepper: borrowed ($ok) or refused ($refused of them naming the trap), no call faulted ($other)" \
	eval '[ "$other" -eq 0 ] && [ "$refused" -gt 0 ]'
bins_ok=0
for _ in $(seq 5); do "$MA" bins "$pid" --flush-tcache >/dev/null 2>>bins.err && bins_ok=$((bins_ok + 1)); done
check "bins --flush-tcache beside it: $bins_ok of 5 end 0" [ "$bins_ok" -eq 5 ]
v=$(alive "$pid" && fix_cmd "$pid" "$fd" "$out" verdict)
check "selfstep: every pass had its traps, none lost or added ($v0 -> $v)" \
	eval 'verdict_ok "$v" && [ "$(vfield "$v" passes)" -gt "$(vfield "$v0" passes)" ]'
fix_quit "$pid" "$fd"; rc=$?
check "selfstep exits cleanly (status $rc)" [ "$rc" -eq 0 ]
report_time
