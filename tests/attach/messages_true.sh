#!/usr/bin/env bash
# Messages that say what was seen and what would help.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../safety_lib.sh"
plan 7
need_fixtures epolld

# 1. A longer --timeout is advised only where waiting can help.  With
# --strict, epolld's only thread (in epoll_wait) can never be borrowed:
# the refusal says so and what helps (--tid, or no --strict) even when the
# deadline passes first (--timeout 5), never "raise --timeout".  The loop
# wakes every 20 ms, and a run that catches it running borrows it: up to
# 10 tries for a refusal.
fix_start epolld || { fail "epolld: start"; exit 1; }
pid=$FIX_PID
refused=0
for _ in $(seq 10); do
	"$MA" stats "$pid" --strict --timeout 5 >/dev/null 2>"$TMP/strict.err" && continue
	refused=1
	break
done
check "--strict on an epoll loop, deadline first: refused ($refused: $(head -c 400 "$TMP/strict.err"))" \
	[ "$refused" -eq 1 ]
check "... saying what helps (--tid $pid, or no --strict)" \
	says "--tid $pid borrows it, or leave out --strict" "$TMP/strict.err"
check "... and not a longer --timeout, which cannot" bash -c "! grep -q -- --timeout '$TMP/strict.err'"

# 5. threads says what a run with the same options would do: epolld's only
# thread, in epoll_wait, is borrowed by a plain run (its wait issued
# again), and with --strict only when named; it used to say UNSAFE.  (The
# loop wakes every 20 ms: a listing that found it running is taken again.)
threads_in_wait() { # threads_in_wait OUT ARGS...: a listing with the loop in epoll_wait
	local out=$1; shift
	for _ in $(seq 20); do
		"$MA" threads "$pid" "$@" >"$out" 2>&1
		grep -q "state S, in epoll_wait\|\"syscall\": 232" "$out" && return 0
	done
	return 1
}
threads_in_wait "$TMP/th.txt"
check "threads: the epoll loop's thread 'OK, WAIT RE-ISSUED' ($(grep "^thread $pid" "$TMP/th.txt" | head -c 200))" \
	says "^thread $pid \"epolld\" state S, in epoll_wait: OK, WAIT RE-ISSUED \(" "$TMP/th.txt" 4
"$MA" stats "$pid" --json >"$TMP/s.json" 2>"$TMP/s.err"; rc=$?
check "... and a plain stats does borrow it (exit $rc)" \
	bash -c "[ $rc -eq 0 ] && grep -q '\"thread\": *$pid' '$TMP/s.json'"
threads_in_wait "$TMP/ths.txt" --strict
check "threads --strict: 'ONLY WITH --tid' ($(grep "^thread $pid" "$TMP/ths.txt" | head -c 200))" \
	says "^thread $pid \"epolld\" state S, in epoll_wait: ONLY WITH --tid \(.*--tid $pid" "$TMP/ths.txt" 4
threads_in_wait "$TMP/th.json" --json
check "threads --json: verdict wait_reissued" \
	python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["threads"][0]; assert t.get("verdict")=="wait_reissued", t' "$TMP/th.json"
fix_quit "$pid" "$FIX_FD"
