#!/usr/bin/env bash
# The run lock: runs on one process take turns on a flock of its
# /proc/PID/personality.  It names the process, not the program: a run on
# another process of the same executable never waits; a run that times out
# names who holds the lock (not advising a longer --timeout when that is not a
# memattach run: it may never let go); an export scrape of both reads B
# though A (listed first) cannot be read; and runs leave no lock file anywhere.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 7
need_fixtures daemon

rm -f /run/memattach/*.lock /tmp/memattach/*.lock 2>/dev/null
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
a=$FIX_PID a_fd=$FIX_FD a_out=$FIX_OUT
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
b=$FIX_PID b_fd=$FIX_FD b_out=$FIX_OUT

# Hold A's lock the way a run does, from outside.
flock -o -x "/proc/$a/personality" sleep 30 >/dev/null 2>&1 & holder=$!
for _ in $(seq 100); do flock -n -x "/proc/$a/personality" true || break; sleep 0.05; done
"$MA" stats "$b" --timeout 1000 >/dev/null 2>"$TMP/b.err"; rc=$?
check "a run on another process of the same executable does not wait (exit $rc: $(head -c 200 "$TMP/b.err"))" \
	[ "$rc" -eq 0 ]
"$MA" stats "$a" --timeout 300 >/dev/null 2>"$TMP/a.err"; rc=$?
check "a run on the locked process times out naming the holder (exit $rc: $(head -c 300 "$TMP/a.err"))" \
	exit_and_says "$rc" 1 "run lock of process $a .*held by pid $holder \(flock\) or a process it forked \(/proc/locks names the one that took it\), which is no memattach run" "$TMP/a.err"
# A program that holds the lock may never let go: a longer wait is no advice.
check "... and does not offer a longer --timeout" bash -c "! grep -q -- --timeout '$TMP/a.err'"
# One scrape of A then B, within a budget shorter than A's wait: the wait
# for A's lock must not spend B's share (an outside attack saw B "not read:
# this scrape's budget ... was spent on the targets before it", named "?").
"$MA" export --pid "$a" --pid "$b" --timeout 3000 --scrape-timeout 1500 --once >"$TMP/om.txt" 2>"$TMP/om.err"
check "export: a scrape reads B though A's lock is held, B named (A first in the list; $(grep -c . "$TMP/om.err") notes: $(head -c 300 "$TMP/om.err"))" \
	bash -c "grep -q 'memattach_scrape_success{pid=\"$b\",comm=\"daemon\"} 1' '$TMP/om.txt' && grep -q 'memattach_scrape_success{pid=\"$a\",comm=\"daemon\"} 0' '$TMP/om.txt'"
kill "$holder"; wait "$holder" 2>/dev/null
"$MA" stats "$a" --timeout 2000 >/dev/null 2>"$TMP/a.err"; rc=$?
check "once free, the run goes ahead (exit $rc: $(head -c 200 "$TMP/a.err"))" [ "$rc" -eq 0 ]
check "no lock file is made for either target" \
	bash -c "! ls /run/memattach/{$a,$b}.*.lock /tmp/memattach/{$a,$b}.*.lock 2>/dev/null | grep -q ."
va=$(fix_cmd "$a" "$a_fd" "$a_out" verdict) vb=$(fix_cmd "$b" "$b_fd" "$b_out" verdict)
check "both targets' verdicts are ok ($va; $vb)" bash -c "verdict_ok() { grep -q '^VERDICT ok' <<<\"\$1\"; }; verdict_ok '$va' && verdict_ok '$vb'"
fix_quit "$a" "$a_fd"
fix_quit "$b" "$b_fd"
