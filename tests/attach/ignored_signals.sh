#!/usr/bin/env bash
# Signals the program ignores must stay ignored.  The kernel drops such a
# signal when it is sent unless the thread it is sent to is traced: then it
# queues it and wakes another thread, and a wait like sigtimedwait there
# returns EINTR.  fixtures/ignsig.c: ig_wait in sigtimedwait (counts its
# EINTRs: eintr=N), ig_send queueing it a signal every ms, ig_fork forking
# 2 ms children (their SIGCHLD goes to it), ig_urg kill()ing SIGURG to the
# process every ms (it goes to the main thread).  Checked:
#   - without memattach, no EINTR (the fixture's own control);
#   - the oracle: a tracer's stops (safety_tool hold, no memattach) of the
#     main thread and of ig_fork do cause EINTRs: the fixture sees the harm;
#   - with --strict, threads, stats and purge (a flush visits every thread)
#     never stop those two: not one EINTR, verdict ok, and threads says why
#     each was not stopped;
#   - by default, a borrow prefers a thread whose stop frees no ignored
#     signal: stats borrows neither, and causes no EINTR;
#   - profile start/stop, with and without --strict: their look at every
#     thread (for one inside the dynamic loader) is a precaution and never
#     stops those two: no EINTR.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 13
need_fixtures ignsig safety_tool
RUNS=${RUNS:-20}
cd "$TMP" || exit 1

fix_start ignsig || { fail "ignsig: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
fork_tid=$(tid_of "$pid" ig_fork)
eintrs() { vfield "$(fix_cmd "$pid" "$fd" "$out" verdict)" eintr; }

# The fixture's own control: its threads run a while with nobody tracing.
e0=$(eintrs); bsleep 1; e1=$(eintrs)
sigs=$(vfield "$(fix_cmd "$pid" "$fd" "$out" verdict)" sigs)
check "without memattach: no EINTR in 1 s ($e0 -> $e1), signals flow (sigs=$sigs)" \
	eval '[ -n "$e1" ] && [ "$e1" -eq 0 ] && [ "${sigs:-0}" -gt 0 ]'

# The oracle: stops by a plain tracer.  Each SIGURG or SIGCHLD that comes
# while its thread is stopped may end ig_wait's wait with EINTR.
"$FIX/safety_tool" hold "$pid" 20 20; e2=$(eintrs)
check "oracle: 20 stops of 20 ms of the main thread (SIGURG every ms) end ig_wait's wait with EINTR ($e1 -> $e2)" \
	[ "${e2:-0}" -gt "$e1" ]
"$FIX/safety_tool" hold "$fork_tid" 20 40; e3=$(eintrs)
check "oracle: 40 stops of 20 ms of ig_fork (a 2 ms child at a time) end it with EINTR ($e2 -> $e3)" \
	[ "${e3:-0}" -gt "$e2" ]

# --strict: neither thread is stopped.
strict_runs() { # CMD...: RUNS runs; prints how many ended 0
	local ok=0 i
	for ((i = 0; i < RUNS; i++)); do
		timeout -s KILL 30 "$MA" "$@" >/dev/null 2>>"$TMP/strict.err" && ok=$((ok + 1))
	done
	echo "$ok"
}
for cmd in threads stats purge; do
	before=$(eintrs)
	ok=$(strict_runs "$cmd" "$pid" --strict)
	after=$(eintrs)
	check "$cmd --strict x$RUNS: $ok ended 0, EINTRs $before -> $after" \
		eval '[ "$ok" -eq "$RUNS" ] && [ "$after" -eq "$before" ]'
done
[ -s "$TMP/strict.err" ] && echo "# stderr: $(top_lines "$TMP/strict.err" 2)"

# ig_fork has a child two thirds of the time: look until it is seen with
# one (on a loaded machine it may be seen running instead, which --strict
# does not stop either).
for ((i = 0; i < 40; i++)); do
	"$MA" threads "$pid" --strict >"$TMP/threads.txt" 2>&1
	says "thread $fork_tid \"ig_fork\".*UNSAFE \\((has child processes|forked a child)" "$TMP/threads.txt" 4 && break
done
check "threads --strict: the main thread is not stopped, and says why" \
	says "thread $pid \"ignsig\".*UNSAFE \\(is the main thread.*SIG[A-Z]+ the program ignores.*not stopped with --strict" "$TMP/threads.txt" 4
check "threads --strict: ig_fork with a child is not stopped, and says why (its SIGCHLD; $((i + 1)) looks)" \
	says "thread $fork_tid \"ig_fork\".*UNSAFE \\((has child processes|forked a child).*SIGCHLD.*not stopped" "$TMP/threads.txt" 4

# By default: the borrow ranks these two after their equals.
before=$(eintrs) borrowed=""
for ((i = 0; i < RUNS; i++)); do
	timeout -s KILL 30 "$MA" stats "$pid" --json >"$TMP/stats.json" 2>/dev/null
	t=$(json_get "$TMP/stats.json" thread 2>/dev/null)
	borrowed+=" $t"
done
after=$(eintrs)
check "stats x$RUNS by default borrows neither the main thread nor ig_fork (borrowed:$(tr ' ' '\n' <<<"$borrowed" | sort | uniq -c | tr -s ' \n' ' '))" \
	bash -c '[[ " $1 " != *" $2 "* && " $1 " != *" $3 "* && $1 =~ [0-9] ]]' _ "$borrowed" "$pid" "$fork_tid"
check "stats x$RUNS by default: EINTRs $before -> $after" [ "$after" -eq "$before" ]

# Before loading the agent, frag and profile look at every thread for one
# inside the dynamic loader: a precaution, so never where the stop frees
# an ignored signal, with or without --strict.
for mode in "" --strict; do
	before=$(eintrs) ok=0
	for ((i = 0; i < RUNS / 2; i++)); do
		timeout -s KILL 30 "$MA" profile start "$pid" $mode >/dev/null 2>>"$TMP/prof.err" &&
			timeout -s KILL 30 "$MA" profile stop "$pid" $mode >/dev/null 2>>"$TMP/prof.err" &&
			ok=$((ok + 1))
	done
	after=$(eintrs)
	check "profile start/stop ${mode:-by default} x$((RUNS / 2)): $ok ended 0, EINTRs $before -> $after" \
		eval '[ "$ok" -eq $((RUNS / 2)) ] && [ "$after" -eq "$before" ]'
done
[ -s "$TMP/prof.err" ] && echo "# stderr: $(top_lines "$TMP/prof.err" 2)"

v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "ignsig alive, verdict ok ($v)" verdict_ok "$v"
fix_quit "$pid" "$fd"
