#!/usr/bin/env bash
# watch says what went wrong: a process no sample could read (its only
# thread never leaves jemalloc: fixtures/stall.c) is exit 1 with the
# reason, not a success with nothing recorded; samples that take longer
# than --interval are said to have run behind.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 3
need_fixtures stall
"$FIX/stall" >"$TMP/s.out" 2>&1 &
spid=$!; track $spid
for _ in $(seq 100); do grep -q READY "$TMP/s.out" && break; sleep 0.1; done
"$MA" watch "$spid" --interval 1 --duration 2 --out "$TMP/w" >"$TMP/w.out" 2>"$TMP/w.err"; rc=$?
check "watch of a process no sample could read exits 1 (exit $rc)" [ "$rc" -eq 1 ]
check "... saying why ($(head -c 200 "$TMP/w.err"))" says "no sample could read the allocator" "$TMP/w.err"
check "... and that it ran behind its --interval ($(grep -o 'ran behind.*' "$TMP/w.out" | head -c 120))" \
	grep -q "^ran behind [0-9]* time" "$TMP/w.out"
kill -KILL "$spid"
