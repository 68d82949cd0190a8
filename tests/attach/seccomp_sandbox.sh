#!/usr/bin/env bash
# tests/attach/seccomp_sandbox.sh - one thread of a process under a seccomp
# filter on a syscall jemalloc itself makes inside memattach's calls
# (fixtures/sandboxed.c): mmap, which a thread's first allocation needs,
# or madvise only from 64 KiB up, as a purge makes it.  A KILL would kill
# the process, a TRAP fault inside jemalloc holding a lock (no containment
# gives the lock back: new threads then hang), an ERRNO send jemalloc down
# its failure paths.  memattach refuses the thread, naming seccomp, when it
# is named; without --tid it borrows another.  The fixture's verdict says
# whether every round of new threads finished.  (An outside attack killed
# the target in 11 of 11 runs and deadlocked it in 7 of 7 before this.)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 16
[ -x "$FIX/sandboxed" ] || { fail "build/fixtures/sandboxed missing (make fixtures)"; exit 1; }

# case NAME FIXTURE_ARGS -- MEMATTACH_ARGS...: (@SBX@ = the sandbox thread's tid)
# memattach's exit and message, then the target's end and verdict
# The fixture lives 4 s after READY; a run that did not answer before it
# ended (a machine so loaded that its start took seconds: seen once, in a
# make test beside churn tests) judged nothing, and the case is run once
# more on a fresh fixture (said in a comment line).
case_of() {
	local name=$1 fa=() a=() w k rc try pid
	shift
	while [ "$1" != -- ]; do fa+=("$1"); shift; done
	shift
	for try in 1 2; do
		"$FIX/sandboxed" "${fa[@]}" -s 4 >"$TMP/sb.out" 2>&1 &
		pid=$!
		for k in $(seq 200); do grep -q '^READY' "$TMP/sb.out" && break; bsleep 0.02; done
		read -r _ _ sbx <"$TMP/sb.out"
		a=()
		for w in "$@"; do a+=("${w/@SBX@/$sbx}"); done
		"$MA" "${a[0]}" "$pid" "${a[@]:1}" >/dev/null 2>"$TMP/ma.err"; RC=$?
		MSG=$(unwrapped "$TMP/ma.err" | head -1)
		alive "$pid" && break
		echo "# $name: the fixture ended before memattach answered ($MSG); once more"
		wait "$pid"
	done
	wait "$pid"; rc=$?
	V=$(grep '^VERDICT' "$TMP/sb.out")
	check "$name: the target lives on, every round of new threads finished (exit $rc: ${V:-no verdict})" \
		[ "$rc" -eq 0 ]
}

case_of "mmap KILL, a thread that never allocated, named" -a kill -c mmap -- stats --tid @SBX@
check "... refused naming seccomp and mmap (exit $RC: $MSG)" \
	eval '[ "$RC" -eq 1 ] && grep -q "seccomp filter of thread .* would answer mmap" <<<"$MSG"'
case_of "mmap TRAP, named" -a trap -c mmap -- stats --tid @SBX@
check "... refused (exit $RC: $MSG)" eval '[ "$RC" -eq 1 ] && grep -q "would answer mmap .* with TRAP" <<<"$MSG"'
case_of "mmap ERRNO, named" -a errno -c mmap -- stats --tid @SBX@
check "... refused (exit $RC: $MSG)" eval '[ "$RC" -eq 1 ] && grep -q "would answer mmap" <<<"$MSG"'
case_of "madvise from 64 KiB KILL, a thread with a tcache, named" -a kill -c madvise -g 65536 -p -- purge --tid @SBX@
check "... refused (exit $RC: $MSG)" eval '[ "$RC" -eq 1 ] && grep -q "would answer madvise" <<<"$MSG"'
case_of "madvise from 64 KiB KILL, purge without --tid" -a kill -c madvise -g 65536 -p -- purge
check "... another thread borrowed: the purge done (exit $RC${MSG:+: $MSG})" [ "$RC" -eq 0 ]
case_of "mmap KILL, stats without --tid" -a kill -c mmap -p -- stats
check "... another thread borrowed (exit $RC${MSG:+: $MSG})" [ "$RC" -eq 0 ]
case_of "madvise from 64 KiB TRAP, bins --flush-tcache (every thread visited)" -a trap -c madvise -g 65536 -p -- bins --flush-tcache
check "... done, the sandbox passed over (exit $RC${MSG:+: $MSG})" [ "$RC" -eq 0 ]
# memattach threads says why the sandbox cannot be borrowed
"$FIX/sandboxed" -a kill -c mmap -p -s 3 >"$TMP/sb.out" 2>&1 &
pid=$!
for k in $(seq 200); do grep -q '^READY' "$TMP/sb.out" && break; bsleep 0.02; done
"$MA" threads "$pid" >"$TMP/threads.out" 2>&1
wait "$pid"
check "threads: the sandbox shown UNSAFE for its filter" \
	grep -q '"sandbox" state S, in read: UNSAFE (the seccomp filter' "$TMP/threads.out"
check "threads: the target lived on ($(grep VERDICT "$TMP/sb.out"))" grep -q '^VERDICT ok' "$TMP/sb.out"
