#!/usr/bin/env bash
# tests/bench/flush_threads.sh - cost of flushing every thread's tcache as
# the thread count grows, side by side in one run:
#   memattach `memattach bins PID --flush-tcache` (each thread borrowed in
#             turn; the others keep running)
#   gdb       `gdb -p PID -batch -ex 'thread apply all call mallctl(
#             "thread.tcache.flush", 0, 0, 0, 0)'` (the whole process
#             stopped for the duration)
#   lldb      the same call in every thread (`thread select` / `expr`),
#             where gdb cannot call functions (AMX CPUs: tests/bench/peers.sh)
# on build/fixtures/manythreads -t N (N idle threads that allocated).  The
# target checks its objects after each phase (verdict).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/bench/peers.sh"
MA=${MA_BIN:-$ROOT/build/memattach}
COUNTS=${COUNTS:-250 500 1000 2000}
GDB_MAX=${GDB_MAX:-500} # the peer above this thread count takes many minutes: skipped
TMP=$(mktemp -d)
TPID=
trap '[ -n "$TPID" ] && kill $TPID 2>/dev/null; rm -rf "$TMP"' EXIT

now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }

# peer_flush: the peer's call in every thread of TPID
if why=$(gdb_can_call); then
	PEER="gdb thread apply all call"
	peer_flush() {
		timeout 600 gdb -p "$TPID" -batch -nx \
			-ex 'thread apply all call (int)mallctl("thread.tcache.flush", 0, 0, 0, 0)' >/dev/null 2>&1
	}
else
	echo "# gdb cannot call functions here ($why): lldb is the peer" >&2
	PEER="lldb expr in each thread"
	peer_flush() {
		local k nt
		nt=$(ls "/proc/$TPID/task" | wc -l)
		for k in $(seq "$nt"); do
			echo "thread select $k"
			echo 'expr (int)mallctl("thread.tcache.flush", 0, 0, 0, 0)'
		done >"$TMP/lldb.cmds"
		timeout 600 lldb -p "$TPID" --batch -s "$TMP/lldb.cmds" >/dev/null 2>&1
	}
fi

printf '| threads | memattach --flush-tcache | flushed | %s | peer / memattach |\n' "$PEER"
printf '|---:|---:|---:|---:|---:|\n'
for n in $COUNTS; do
	rm -f "$TMP/in"; mkfifo "$TMP/in"
	"$ROOT/build/fixtures/manythreads" -t "$n" <"$TMP/in" >"$TMP/out" 2>&1 &
	TPID=$!
	exec 3>"$TMP/in"
	for _ in $(seq 300); do grep -q READY "$TMP/out" && break; sleep 0.1; done
	grep -q READY "$TMP/out" || { echo "manythreads -t $n did not start" >&2; exit 1; }
	t0=$(now)
	"$MA" bins "$TPID" --flush-tcache --json >"$TMP/b.json" || { echo "memattach failed" >&2; exit 1; }
	t1=$(now)
	flushed=$(python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["tcache_flush"]; print(f["flushed"], "of", f["threads"])' "$TMP/b.json")
	ma=$(secs "$t0" "$t1")
	gdb_s=- ratio=-
	if [ "$n" -le "$GDB_MAX" ]; then
		t0=$(now)
		peer_flush
		t1=$(now)
		gdb_s=$(secs "$t0" "$t1")
		ratio=$(awk -v g="$gdb_s" -v m="$ma" 'BEGIN { printf "%.1f×", g / m }')
	fi
	echo verdict >&3
	sleep 0.5
	v=$(grep VERDICT "$TMP/out" | tail -1)
	case $v in "VERDICT ok"*) ;; *) echo "target verdict after $n threads: $v" >&2; exit 1 ;; esac
	printf '| %d | %s s | %s | %s s | %s |\n' "$n" "$ma" "$flushed" "$gdb_s" "$ratio"
	echo quit >&3
	exec 3>&-
	wait "$TPID" 2>/dev/null
	TPID=
done
