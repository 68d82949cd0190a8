#!/usr/bin/env bash
# tests/attach/cheapest_thread.sh - a redis-like target: the main thread
# serves a job every millisecond (waiting in an untimed futex between jobs,
# like an event loop), the helpers idle.  Every run borrows a helper, never
# the serving thread, and 'threads' shows the order and why.
. "$(dirname "$0")/../lib/common.sh"
plan 5

fix_start manythreads -t 3 -s || { fail "manythreads -s: start"; exit 1; }
pid=$FIX_PID
sleep 0.3
runs=30 server=0 ok=0
for _ in $(seq $runs); do
	if "$MA" stats "$pid" --json >"$TMP/s.json" 2>"$TMP/err"; then
		ok=$((ok + 1))
		[ "$(json_get "$TMP/s.json" thread)" = "$pid" ] && server=$((server + 1))
	fi
done
check "$ok of $runs stats runs succeeded" test "$ok" -eq "$runs"
check "the serving main thread was borrowed in $server of $runs runs (want 0)" test "$server" -eq 0
"$MA" threads "$pid" --json >"$TMP/t.json"
check "threads --json: the order, its class and the idle time of each thread" jcheck - "$TMP/t.json" "$pid" <<'PY'
import json, sys
th = json.load(open(sys.argv[1]))["threads"]
main = int(sys.argv[2])
assert [t["order"] for t in th] == list(range(1, len(th) + 1))
m = [t for t in th if t["tid"] == main][0]
idle_helpers = [t for t in th if t["tid"] != main and t["order_class"] == "untimed wait"]
assert m["order_class"] in ("untimed wait", "running"), m
# the helpers have idled for longer and come first
assert idle_helpers and all(h["order"] < m["order"] for h in idle_helpers), (m, idle_helpers)
assert all(h["idle_ns"] > m["idle_ns"] for h in idle_helpers), (m, idle_helpers)
PY
"$MA" threads "$pid" >"$TMP/t.txt"
check "threads (text): 'borrow order N: untimed wait, idle S s' under each thread" \
	grep -q '^  borrow order 1: untimed wait, idle [0-9.]* s$' "$TMP/t.txt"
check "manythreads: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$pid" "$FIX_FD"
