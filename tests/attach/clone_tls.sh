#!/usr/bin/env bash
# A thread made by a raw clone() on another thread's thread pointer
# (fixtures/clonetls: "sharer", blocked in read(2), on the pointer of
# "owner", which allocates and frees checked objects without pause;
# CLONE_SETTLS with it, or -i: inherited).  A call in the sharer would
# work on the owner's allocator state while the owner runs: an outside
# attack's target crashed or froze in every run of bins --flush-tcache.
# The sharer is never borrowed, named or not; the others are, and the
# owner's objects stay intact.  On Debian's library and jemalloc linked in;
# and a sharer whose pointer leads to no readable memory at all (-u).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 20
need_fixtures clonetls clonetls_static
RUNS=${RUNS:-20}

# scenario LABEL FIXTURE [ARGS]: 5 checks; WHY: the refusal's reason (a regex).
WHY="another thread's thread pointer"
scenario() {
	local label=$1 fixture=$2 pid fd out tid v0 v rc ok=0 i
	shift 2
	fix_start "$fixture" "$@" || { for i in 1 2 3 4 5; do fail "$label: $fixture $* did not start"; done; return; }
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	tid=$(tid_of "$pid" sharer)
	v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
	"$MA" threads "$pid" >"$TMP/threads.out" 2>&1
	check "$label: threads: the sharer ($tid) is UNSAFE ($WHY)" \
		says "thread $tid \"sharer\".*UNSAFE \(.*($WHY)" "$TMP/threads.out" 4
	"$MA" stats "$pid" --tid "${tid:-0}" >/dev/null 2>"$TMP/tid.err"; rc=$?
	check "$label: stats --tid of the sharer: refused (exit $rc: $(head -c 160 "$TMP/tid.err"))" \
		eval '[ "$rc" -eq 1 ] && says "$WHY" "$TMP/tid.err"'
	for _ in $(seq "$RUNS"); do
		"$MA" bins "$pid" --flush-tcache >/dev/null 2>>"$TMP/runs.err" && ok=$((ok + 1))
	done
	check "$label: $RUNS bins --flush-tcache runs end 0 ($ok did; $(tail -c 200 "$TMP/runs.err"))" [ "$ok" -eq "$RUNS" ]
	v=$(alive "$pid" && fix_cmd "$pid" "$fd" "$out" verdict)
	check "$label: alive, the owner's objects intact and checked meanwhile ($v0 -> $v)" \
		eval 'verdict_ok "$v" && [ "$(vfield "$v" rounds)" -gt "$(vfield "$v0" rounds)" ]'
	fix_quit "$pid" "$fd"; rc=$?
	check "$label: $fixture exits cleanly (status $rc)" [ "$rc" -eq 0 ]
}
scenario "CLONE_SETTLS, libjemalloc.so.2" clonetls
scenario "inherited pointer, libjemalloc.so.2" clonetls -i
scenario "CLONE_SETTLS, jemalloc linked in" clonetls_static
# No descriptor to read: refused for its stack, found first, or for the pointer.
WHY="a stack that is not its own|no readable thread descriptor"
scenario "pointer to an unreadable page, libjemalloc.so.2" clonetls -u
