#!/usr/bin/env bash
# A thread on a stack the program supplied (pthread_attr_setstack, carved
# out of a larger mapping whose lower part is program data; no guard
# page), with about 1,200 bytes of it left below its stack pointer
# (fixtures/userstack.c checks that data every 5 ms).  Where such a stack
# ends cannot be known from the mappings, and memattach's saved state
# goes below the stack pointer: the thread is never borrowed.  Other
# threads are, and the data stays intact.  (An outside attack: 1,728
# bytes below such a stack overwritten by every stats.)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 8
need_fixtures userstack
RUNS=${RUNS:-20}

fix_start userstack || { fail "userstack: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" us_thread)
v0=$(fix_cmd "$pid" "$fd" "$out" verdict)

"$MA" threads "$pid" >"$TMP/threads.out" 2>&1
check "threads: us_thread is UNSAFE, its stack supplied by the program" \
	says "thread $tid \"us_thread\".*UNSAFE \(runs on a stack the program supplied" "$TMP/threads.out" 4
t0=$(now_us)
# Refused at once, not after looking until its --timeout: a long timeout
# tells the two apart on any machine, however loaded.
"$MA" stats "$pid" --tid "$tid" --timeout 60000 >/dev/null 2>"$TMP/tid.err"; rc=$?
t1=$(now_us)
check "stats --tid us_thread: refused (exit $rc) naming the supplied stack: $(head -1 "$TMP/tid.err" | cut -c1-160)" \
	[ "$rc" -eq 1 ] && says "stack the program supplied" "$TMP/tid.err"
check "stats --tid us_thread --timeout 60000: refused at once ($(( (t1 - t0) / 1000 )) ms), not at the timeout" [ $(( (t1 - t0) / 1000 )) -lt 30000 ]
ok=0
for _ in $(seq "$RUNS"); do
	"$MA" stats "$pid" >/dev/null 2>>"$TMP/runs.err" && ok=$((ok + 1))
	"$MA" bins "$pid" --flush-tcache >/dev/null 2>>"$TMP/runs.err" && ok=$((ok + 1))
done
check "stats and bins --flush-tcache: $ok of $((2 * RUNS)) ok (another thread borrowed)" [ "$ok" -eq $((2 * RUNS)) ]
bsleep 0.05
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "the data below us_thread's stack is intact ($v)" verdict_ok "$v"
check "the data was checked meanwhile (sweeps $(vfield "$v0" sweeps) -> $(vfield "$v" sweeps))" \
	[ "$(vfield "$v" sweeps)" -gt "$(vfield "$v0" sweeps)" ]
check "us_thread still blocked in read, not stopped or traced ($(stopped_tasks "$pid") stopped, $(traced_tasks "$pid") traced)" \
	[ "$(stopped_tasks "$pid")" -eq 0 -a "$(traced_tasks "$pid")" -eq 0 ]
fix_quit "$pid" "$fd"; rc=$?
check "userstack: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
