#!/usr/bin/env bash
# A program whose syscalls a seccomp supervisor answers (user
# notification, fixtures/seccomp_notify): three threads nearly always
# wait for that answer.  A stop withdraws the request and the syscall,
# issued again, reaches the supervisor twice (an outside attack: 10 of 10
# `stats --strict` runs, 4 of 5 `stats`; a supervisor that exits on the
# unexpected ENOENT took the program's getppid away for good).  memattach
# must not stop such a thread, named or not, and borrows the thread in
# read() instead.  Checked: RUNS (default 6) fresh targets each through
# `stats`, `stats --strict` and `bins --flush-tcache` (which visits every
# thread): the program's verdict ok (every request answered once), and
# `stats` ends 0 (--strict may refuse: the supervisor is a child whose
# SIGCHLD the program ignores); `threads` names the waiting threads
# UNSAFE and why; `stats --tid` of one is refused.  The binary before:
# bad verdicts.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
need_fixtures seccomp_notify
RUNS=${RUNS:-6}

# arm CMD...: RUNS targets of 3 s, memattach CMD... PID at 0.5 s; BAD, FAILED
arm() {
	local i p v
	BAD="" FAILED=""
	for ((i = 0; i < RUNS; i++)); do
		"$FIX/seccomp_notify" 3 >"$TMP/n.out" 2>&1 &
		p=$!
		track "$p"
		bsleep 0.5
		"$MA" "$@" "$p" >/dev/null 2>"$TMP/n.err" || FAILED+=" $(head -1 "$TMP/n.err" | cut -c1-160);"
		wait "$p"
		v=$(grep VERDICT "$TMP/n.out")
		[[ $v == "VERDICT ok"* ]] || BAD+=" ${v:-no verdict};"
	done
}

for c in "stats" "stats --strict" "bins --flush-tcache"; do
	arm $c
	check "$c: every request answered once, $RUNS targets (${BAD:-all ok})" [ -z "$BAD" ]
	# --strict may refuse (the supervisor is a child, and its SIGCHLD is ignored)
	[ "$c" != stats ] && continue
	check "$c: it reads them, from the thread in read() (${FAILED:-all ended 0})" [ -z "$FAILED" ]
done

"$FIX/seccomp_notify" 6 >"$TMP/n.out" 2>&1 & # long enough for threads and a --tid run's retries
p=$!
track "$p"
bsleep 0.5
"$MA" threads "$p" >"$TMP/t.out" 2>&1
n=$(grep -c '"asker_[0-9]".*UNSAFE (.*supervisor' <(tr -s '\n ' ' ' <"$TMP/t.out" | sed 's/thread /\nthread /g'))
check "threads: the three asking threads UNSAFE, naming the supervisor (waiting for it, or running under its filter) ($n)" [ "$n" -eq 3 ]
asker=$(tid_of "$p" asker_0)
"$MA" stats --tid "$asker" --timeout 1s "$p" >/dev/null 2>"$TMP/tid.err"; rc=$?
wait "$p"
check "stats --tid asker_0: refused naming the supervisor (exit $rc: $(head -2 "$TMP/tid.err" | tr '\n' ' ' | cut -c1-200)), verdict $(grep -o 'VERDICT [a-z]*' "$TMP/n.out")" \
	eval '[ "$rc" -ne 0 ] && grep -q "supervisor" "$TMP/tid.err" && grep -q "VERDICT ok" "$TMP/n.out"'
