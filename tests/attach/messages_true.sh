#!/usr/bin/env bash
# Messages that say what was seen and what would help.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../safety_lib.sh"
plan 3
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
	grep -q -- "--tid $pid borrows it, or leave out --strict" "$TMP/strict.err"
check "... and not a longer --timeout, which cannot" bash -c "! grep -q -- --timeout '$TMP/strict.err'"
fix_quit "$pid" "$FIX_FD"
