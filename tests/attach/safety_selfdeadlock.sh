#!/usr/bin/env bash
# The second line of defence behind the fork() check: with that check
# switched off (test hook MEMATTACH_TEST_IGNORE_FORK=1), memattach borrows
# the forking thread of fixtures/forkloop.c even between jemalloc's atfork
# handlers, where it holds every allocator lock.  The injected call then
# reaches a futex wait on a mutex that thread itself owns: memattach must
# see that at once, give the call up and restore the thread, never leave
# it waiting for itself, and say what it saw (the mutex and its holder).  RUNS runs with --tid of the forking thread: no
# hang, every run ok or "given up", the target keeps forking, verdict ok.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 7
need_fixtures forkloop
RUNS=${RUNS:-100}

forkloop_start 1 || { fail "selfdeadlock: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
ok=0 given_up=0 hangs=0 other=0
for i in $(seq "$RUNS"); do
	MEMATTACH_TEST_IGNORE_FORK=1 timeout -s KILL 10 "$MA_T" stats "$pid" --tid "$pid" >/dev/null 2>"$TMP/run.err"
	rc=$?
	if [ $rc -eq 0 ]; then ok=$((ok + 1))
	elif [ $rc -eq 137 ]; then hangs=$((hangs + 1)); break
	elif [ $rc -eq 1 ] && says "mutex at 0x[0-9a-f]* \(in .*\), which thread $pid itself holds" "$TMP/run.err"; then
		given_up=$((given_up + 1)); cp "$TMP/run.err" "$TMP/given_up.err"
	else other=$((other + 1)); echo "# exit $rc: $(head -1 "$TMP/run.err")"
	fi
	alive "$pid" || break
done
echo "# $RUNS runs: $ok ok, $given_up given up (self-deadlock seen), $hangs hangs, $other other"
check "selfdeadlock: $RUNS runs, $hangs hangs, $other unexpected results" [ "$hangs" -eq 0 -a "$other" -eq 0 ]
check "selfdeadlock: the self-deadlock was met and given up ($given_up times)" [ "$given_up" -gt 0 ]
# The message says what was seen (the futex, the mutex, its holder), not a
# guess at how the thread came to hold it ("inside fork() or similar" was
# said of programs that never fork).
check "selfdeadlock: the message says what was seen, no guess ($(head -c 400 "$TMP/given_up.err" 2>/dev/null))" \
	bash -c "[ -s '$TMP/given_up.err' ] && ! grep -q fork '$TMP/given_up.err'"
check "selfdeadlock: target alive" alive "$pid"
grows 30 forks; st=$?
check "selfdeadlock: target still forking (forks $GROWS_FROM -> $GROWS_TO)" [ "$st" -eq 0 ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "selfdeadlock: verdict ok ($v)" verdict_ok "$v"
fix_quit "$pid" "$fd"
check "selfdeadlock: exits cleanly" [ $? -eq 0 ]
