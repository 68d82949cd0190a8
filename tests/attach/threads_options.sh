#!/usr/bin/env bash
# threads takes the options the manual gives every command that stops
# threads: --tid (only that thread), --timeout, --strict (both used to be
# rejected as unknown).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 4
need_fixtures daemon
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID
w=$(tid_of "$pid" worker_0)
"$MA" threads "$pid" --tid "$w" --timeout 3000 --strict >"$TMP/t.out" 2>&1; rc=$?
check "threads --tid --timeout --strict: exit $rc ($(head -c 150 "$TMP/t.out"))" [ "$rc" -eq 0 ]
check "... lists only that thread" bash -c "[ \"\$(grep -c '^thread ' '$TMP/t.out')\" -eq 1 ] && grep -q '^thread $w ' '$TMP/t.out'"
"$MA" threads "$pid" --tid 1 >/dev/null 2>"$TMP/e.err"; rc=$?
check "threads --tid of no thread of the process exits 1 saying so (exit $rc)" \
	exit_and_says "$rc" 1 "has no thread 1" "$TMP/e.err"
v=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
check "daemon verdict ok ($v)" verdict_ok "$v"
fix_quit "$pid" "$FIX_FD"
