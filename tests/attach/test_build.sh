#!/usr/bin/env bash
# The test hooks (MEMATTACH_TEST_*: kill after step K, count steps, let a
# thread inside fork() through...) exist only in build/memattach-test; the
# shipped build/memattach neither contains their names nor obeys them.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 5
need_fixtures daemon

n_ship=$(strings "$MA" | grep -c MEMATTACH_TEST_)
n_test=$(strings "$MA_T" | grep -c MEMATTACH_TEST_)
check "the shipped binary names no test hook ($n_ship), the test build does ($n_test)" \
	[ "$n_ship" -eq 0 -a "$n_test" -gt 0 ]
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
P=$FIX_PID
MEMATTACH_TEST_STEPS=1 "$MA" stats "$P" >/dev/null 2>"$TMP/s.err"; rc=$?
check "shipped: MEMATTACH_TEST_STEPS=1 is ignored (exit $rc, $(grep -c '^memattach-test:' "$TMP/s.err") step lines)" \
	[ "$rc" -eq 0 -a "$(grep -c '^memattach-test:' "$TMP/s.err")" -eq 0 ]
MEMATTACH_TEST_STEPS=1 "$MA_T" stats "$P" >/dev/null 2>"$TMP/t.err"; rc=$?
check "test build: MEMATTACH_TEST_STEPS=1 counts the steps (exit $rc: $(grep steps= "$TMP/t.err"))" \
	grep -q '^memattach-test: steps=[1-9]' "$TMP/t.err"
MEMATTACH_TEST_KILL_AFTER_STEP=3 "$MA" stats "$P" >/dev/null 2>&1; rc=$?
check "shipped: MEMATTACH_TEST_KILL_AFTER_STEP=3 is ignored (exit $rc)" [ "$rc" -eq 0 ]
{ MEMATTACH_TEST_KILL_AFTER_STEP=3 "$MA_T" stats "$P" >/dev/null 2>&1; } 2>/dev/null; rc=$?
check "test build: it kills itself after step 3 (exit $rc)" [ "$rc" -eq 137 ]
fix_quit "$P" "$FIX_FD" >/dev/null
