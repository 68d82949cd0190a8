#!/usr/bin/env bash
# --timeout bounds the whole run, calls included.  The target's purge blocks
# in an extent hook until the test releases it (fixtures/slowpurge.c): a
# run given --timeout ends when it runs out (the purge's own limit is 60 s),
# says so, and leaves the thread to finish the call and restore itself,
# which it does once released; a run waiting for that one's turn ends
# within its own --timeout, naming the holder.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 12
need_fixtures slowpurge manythreads

fix_start slowpurge || { fail "slowpurge: start"; exit 1; }
sp=$FIX_PID
status() { fix_cmd "$sp" "$FIX_FD" "$FIX_OUT" status; }
field() { awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' <<<"$2"; }

# 20 s is a third of the purge's own limit: a run not bounded by
# --timeout is killed by it (status 124) and fails the first check.
timeout 20 "$MA" purge "$sp" --timeout 1500 >"$TMP/p.out" 2>"$TMP/p.err"; rc=$?
check "purge --timeout 1500 ends when its --timeout runs out, mid-call (exit $rc: $(head -c 300 "$TMP/p.err"))" \
	exit_and_says "$rc" 1 "--timeout ran out during the call in thread $sp; the thread was left to finish it and restore itself" "$TMP/p.err"
s=$(status)
check "the call really was held in the hook ($s)" [ "$(field BLOCKED "$s")" -ge 1 ]

# A second run finds no thread it may borrow (the only one with allocator
# state is inside jemalloc, in the first run's call) and holds the turn
# while it looks; a third waits for the turn only as long as its own --timeout.
timeout 20 "$MA" purge "$sp" --timeout 8000 >/dev/null 2>"$TMP/p2.err" & p2=$!
for _ in $(seq 200); do flock -n -x "/proc/$sp/personality" true || break; sleep 0.05; done
timeout 20 "$MA" stats "$sp" --timeout 700 >/dev/null 2>"$TMP/s.err"; rc=$?
check "a run waiting for the turn ends within its --timeout, naming the holder (exit $rc: $(head -c 300 "$TMP/s.err"))" \
	exit_and_says "$rc" 1 "another memattach run on process $sp \(pid [0-9]+, running for [^)]*\) holds its run lock: not free within [0-9]+ ms" "$TMP/s.err"
# Not yet released: wait for that run's end before letting go.
wait "$p2"; rc=$?
check "the second purge gives up looking at its --timeout (exit $rc: $(head -c 300 "$TMP/p2.err"))" \
	exit_and_says "$rc" 1 "no thread of process $sp was safe to borrow within 8000 ms .*is in jemalloc" "$TMP/p2.err"

slowpurge_release "$sp" "$FIX_FD" "$FIX_OUT"
check "released, the borrowed thread finished the calls and runs its own loop again ($LOOPS_BEFORE -> $LOOPS_NOW rounds)" \
	[ "$LOOPS_NOW" -gt $((LOOPS_BEFORE + 20)) ]
"$MA" stats "$sp" >"$TMP/s2.out" 2>"$TMP/s2.err"; rc=$?
check "a later run reads the stats (exit $rc: $(head -c 200 "$TMP/s2.err"))" [ "$rc" -eq 0 ]
check "the process lives on, with nothing of memattach's left in its maps" \
	bash -c "kill -0 $sp && ! grep -q memattach /proc/$sp/maps"

# Thousands of threads: reading them is part of the run, so a short
# --timeout ends it there, saying so (before: every thread was read, each
# round, and every one tried after the deadline; 2,000 threads took 41 s
# for --timeout 50 on a loaded machine, and the message named a refusal
# from an earlier thread).
fix_start manythreads -t 2 -z 1500 || { fail "manythreads -z 1500: start"; exit 1; }
mt=$FIX_PID
for c in stats threads "bins --flush-tcache" purge; do
	timeout 120 "$MA" $c "$mt" --timeout 1 >/dev/null 2>"$TMP/m.err"; rc=$?
	check "$c --timeout 1 on 1,502 threads ends at its --timeout, saying so (exit $rc: $(head -c 200 "$TMP/m.err"))" \
		exit_and_says "$rc" 1 "the run's --timeout (\(1 ms\) )?ran out (while reading the threads|before a thread|after [0-9]+ of the)" "$TMP/m.err"
done
v=$(fix_cmd "$mt" "$FIX_FD" "$FIX_OUT" verdict)
check "manythreads: verdict ok, no thread left stopped or traced ($v)" \
	eval '[[ $v == "VERDICT ok"* ]] && [ "$(stopped_tasks "$mt")" -eq 0 ] && [ "$(traced_tasks "$mt")" -eq 0 ]'
