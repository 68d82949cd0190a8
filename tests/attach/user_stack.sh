#!/usr/bin/env bash
# A thread whose stack's end cannot be known from the mappings, with about
# 1,200 bytes of it left below its stack pointer, above program data that
# fixtures/userstack.c checks every 5 ms:
# - a stack the program supplied (pthread_attr_setstack, carved out of a
#   larger mapping whose lower part is the data; no guard page);
# - (-g) a stack the thread library allocated without a guard page
#   (guard size 0), the data mapped right below it with a page of no
#   access below that: the kernel shows stack and data as one mapping,
#   whose bottom page looks like the stack's guard.
# memattach's saved state and the call go below the stack pointer: the
# thread is never borrowed, named or not.  Other threads are, and the data
# stays intact.  (Outside attacks: 1,728 bytes below a supplied stack
# overwritten by every stats; 2,880-6,408 bytes of another thread's stack
# or of a buffer below a guardless one.)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 17
need_fixtures userstack
RUNS=${RUNS:-20}

# scenario LABEL [-g]: 8 checks (9 with -g).
scenario() {
	local label=$1 pid fd out tid v0 v t0 t1 rc ok
	shift
	fix_start userstack "$@" || { fail "userstack $*: start ($(head -c 300 "$(dirname "$FIX_OUT")/err" 2>/dev/null))"; return; }
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	tid=$(tid_of "$pid" us_thread)
	v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
	[ "$1" = -g ] && check "$label: the kernel shows the data and the stack above it as one mapping ($v0)" \
		[ "$(vfield "$v0" merged)" = 1 ]
	"$MA" threads "$pid" >"$TMP/threads.out" 2>&1
	check "$label: threads: us_thread is UNSAFE, its stack's end unknown" \
		says "thread $tid \"us_thread\".*UNSAFE \(runs on a stack the program supplied" "$TMP/threads.out" 4
	t0=$(now_us)
	# Refused at once, not after looking until its --timeout: a long timeout
	# tells the two apart on any machine, however loaded.
	"$MA" stats "$pid" --tid "$tid" --timeout 60000 >/dev/null 2>"$TMP/tid.err"; rc=$?
	t1=$(now_us)
	check "$label: stats --tid us_thread: refused (exit $rc) naming the stack: $(head -1 "$TMP/tid.err" | cut -c1-160)" \
		eval '[ "$rc" -eq 1 ] && says "stack the program supplied" "$TMP/tid.err"'
	check "$label: stats --tid us_thread --timeout 60000: refused at once ($(( (t1 - t0) / 1000 )) ms), not at the timeout" [ $(( (t1 - t0) / 1000 )) -lt 30000 ]
	ok=0
	for _ in $(seq "$RUNS"); do
		"$MA" stats "$pid" >/dev/null 2>>"$TMP/runs.err" && ok=$((ok + 1))
		"$MA" bins "$pid" --flush-tcache >/dev/null 2>>"$TMP/runs.err" && ok=$((ok + 1))
	done
	check "$label: stats and bins --flush-tcache: $ok of $((2 * RUNS)) ok (another thread borrowed)" [ "$ok" -eq $((2 * RUNS)) ]
	bsleep 0.05
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	check "$label: the data below us_thread's stack is intact ($v)" verdict_ok "$v"
	check "$label: the data was checked meanwhile (sweeps $(vfield "$v0" sweeps) -> $(vfield "$v" sweeps))" \
		[ "$(vfield "$v" sweeps)" -gt "$(vfield "$v0" sweeps)" ]
	check "$label: us_thread still blocked in read, not stopped or traced ($(stopped_tasks "$pid") stopped, $(traced_tasks "$pid") traced)" \
		[ "$(stopped_tasks "$pid")" -eq 0 -a "$(traced_tasks "$pid")" -eq 0 ]
	fix_quit "$pid" "$fd"; rc=$?
	check "$label: userstack exits cleanly (status $rc)" [ "$rc" -eq 0 ]
}
scenario "supplied stack"
scenario "no guard page" -g
