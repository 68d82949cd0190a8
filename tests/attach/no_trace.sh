#!/usr/bin/env bash
# tests/attach/no_trace.sh - after every command the target has the same
# threads, mappings and descriptors as before, and a thread that never
# called into jemalloc still has no allocator state.  The target runs
# with background_thread:true (a tcache created in a new thread can bring a
# background thread with it) and has two threads that never allocate.
. "$(dirname "$0")/../lib/common.sh"
plan 28

MALLOC_CONF=background_thread:true,prof:true,prof_active:true,prof_final:false \
	fix_start manythreads -t 4 -z 2 || { fail "manythreads: start"; exit 1; }
pid=$FIX_PID
sleep 0.5 # background threads start

state() { # the target's threads, mappings and descriptors
	ls /proc/"$pid"/task | sort
	echo --
	cat /proc/"$pid"/maps
	echo --
	ls -l /proc/"$pid"/fd | awk 'NR > 1 {print $9, $10, $11}' | sort
}
fresh_threads() { # threads 'threads' reports as never having called into jemalloc
	"$MA" threads "$pid" >"$TMP/fresh.txt"
	unwrapped "$TMP/fresh.txt" 4 | grep -c 'never called into jemalloc'
}

check "threads finds the two threads that never allocated" test "$(fresh_threads)" -eq 2
declare -a cmds=(
	"stats $pid"
	"stats $pid --json"
	"threads $pid"
	"bins $pid"
	"bins $pid --flush-tcache"
	"purge $pid"
	"stats-dump $pid -o $TMP/s.json"
	"heap-dump $pid -o $TMP/h.heap"
	"snapshot $pid -o $TMP/snap"
	"watch $pid --interval 100 --duration 1 --out $TMP/w"
	"export --pid $pid --once --listen 127.0.0.1:1"
)
for c in "${cmds[@]}"; do
	state >"$TMP/before"
	# shellcheck disable=SC2086
	"$MA" $c >"$TMP/out" 2>"$TMP/err"; rc=$?
	state >"$TMP/after"
	check "$c: exit 0 ($(head -c 200 "$TMP/err"))" test $rc -eq 0
	check "$c: same threads, mappings and descriptors after" cmp -s "$TMP/before" "$TMP/after"
	cmp -s "$TMP/before" "$TMP/after" || diff "$TMP/before" "$TMP/after" | head -5 | sed 's/^/# /'
	rm -rf "$TMP/snap"
done
nbg=$(grep -lx jemalloc_bg_thd /proc/"$pid"/task/*/comm | wc -l)
check "flush: the two never-allocating threads counted as no_tcache, only the $nbg background threads skipped" jcheck '
f = json.load(open(sys.argv[1]))["tcache_flush"]
nbg = int(sys.argv[2])
assert f["no_tcache"] == 2 and f["skipped"] == nbg and f["flushed"] == f["threads"] - 2 - nbg, f' \
	<("$MA" bins "$pid" --flush-tcache --json) "$nbg"
check "after every command the two threads still have no allocator state" test "$(fresh_threads)" -eq 2

# --tid of such a thread borrows it anyway (asked for by name): then, and
# only then, its state exists -- the check is an honest reading of it.
"$MA" threads "$pid" >"$TMP/bare.txt"
bare=$(unwrapped "$TMP/bare.txt" 4 | sed -n 's/^thread \([0-9]*\) .*never called into jemalloc.*/\1/p' | head -1)
"$MA" stats "$pid" --tid "$bare" --json >"$TMP/t.json" 2>"$TMP/err"
check "stats --tid of a never-allocating thread borrows it ($(head -c 200 "$TMP/err"))" \
	test "$(json_get "$TMP/t.json" thread)" = "$bare"
check "... after which it has allocator state (one fresh thread left)" test "$(fresh_threads)" -eq 1
check "manythreads: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$pid" "$FIX_FD"
