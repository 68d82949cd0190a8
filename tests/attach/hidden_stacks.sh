#!/usr/bin/env bash
# tests/attach/hidden_stacks.sh - a thread whose current stack does not show
# what it interrupted is never borrowed: a coroutine on a stack of its own,
# a signal handler on its alternate stack, and -- the case an outside
# attacker found crashing the target -- a signal handler that switched
# stacks (swapcontext) while the thread was inside jemalloc.
. "$(dirname "$0")/../lib/common.sh"
plan 9
RUNS=${RUNS:-60}


# --- a coroutine and an alternate signal stack, both idle (first in line otherwise) ---
fix_start manythreads -t 2 -c -a || { fail "manythreads -c -a: start"; exit 1; }
pid=$FIX_PID
coro=$(tid_of "$pid" coro) alt=$(tid_of "$pid" altstack)
"$MA" threads "$pid" >"$TMP/t.txt" 2>&1
# (its walk now also ends at makecontext's trampoline, which has no CFI:
# either reason makes it UNSAFE)
check "coroutine thread: UNSAFE, not on its own stack or its walk not provably complete" \
	says "^thread $coro \"coro\".*UNSAFE \((runs on a stack that is not its own|stack unwinding stopped)" "$TMP/t.txt" 4
check "alternate-stack handler: UNSAFE, in a signal handler" \
	says "^thread $alt \"altstack\".*UNSAFE \(it is running a signal handler\)" "$TMP/t.txt" 4
used=0
for _ in $(seq 20); do
	"$MA" stats "$pid" --json >"$TMP/s.json" 2>/dev/null || continue
	t=$(json_get "$TMP/s.json" thread)
	[ "$t" = "$coro" ] || [ "$t" = "$alt" ] && used=$((used + 1))
done
check "20 stats runs borrowed neither ($used did)" test "$used" -eq 0
check "manythreads -c -a: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$pid" "$FIX_FD"

# --- a handler that switches stacks inside jemalloc, signalled every 2 ms ---
fix_start manythreads -t 2 -j || { fail "manythreads -j: start"; exit 1; }
pid=$FIX_PID
before=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" hidden | awk '{print $2}')
ok=0
for i in $(seq "$RUNS"); do
	if [ $((i % 2)) = 0 ]; then
		"$MA" bins "$pid" --flush-tcache --json >/dev/null 2>"$TMP/err" && ok=$((ok + 1))
	else
		"$MA" stats "$pid" --json >/dev/null 2>"$TMP/err" && ok=$((ok + 1))
	fi
	kill -0 "$pid" 2>/dev/null || break
done
after=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" hidden | awk '{print $2}')
check "the target is alive after $RUNS runs (bins --flush-tcache, stats)" kill -0 "$pid"
check "... and the handler did switch away inside jemalloc meanwhile ($before -> $after times)" \
	test "${after:-0}" -gt "$((${before:-0} + 10))"
check "$ok of $RUNS runs succeeded" test "$ok" -eq "$RUNS"
check "manythreads -j: integrity verdict ok (every object intact)" \
	grep -q "VERDICT ok" <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$pid" "$FIX_FD"
check "manythreads -j: exit 0" test $? -eq 0
