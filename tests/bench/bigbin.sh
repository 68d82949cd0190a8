#!/usr/bin/env bash
# tests/bench/bigbin.sh - `memattach threads` and `stats` on a process with
# a 370-450 MB binary and 34 threads, side by side with gdb attaching to the
# same process (`gdb -p PID -batch -ex 'thread apply all bt'`).
#
# Targets (make bench-fixtures, fixtures/bigbin.mk): build/fixtures/
# bigbin-large/bigd, 34 threads waiting 12 frames deep in libbig.so (1 M
# functions, 450 MB; jemalloc is Debian's libjemalloc.so.2), and bigd_static
# (the same code and jemalloc in a 370 MB executable, symbols in .symtab
# only).  For each command:
#   first  the first run, the big file's pages dropped from the page cache
#          before it (posix_fadvise DONTNEED: what the target has mapped and
#          touched stays), as after a reboot or an upgrade
#   after  the median of RUNS more runs
# each as wall time and, in brackets, CPU time (user + system: what the
# run costs, whatever else the machine runs).
# memattach keeps nothing from one run to the next (no cache file): its
# first run differs from the others only by the file reads.
# MA_BEFORE=PATH also times another memattach binary (an older build).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MA=${MA_BIN:-$ROOT/build/memattach}
BEFORE=${MA_BEFORE:-}
RUNS=${RUNS:-10}
GDB_RUNS=${GDB_RUNS:-3}
DIR=${BIGBIN_DIR:-$ROOT/build/fixtures/bigbin-large} # build/fixtures/bigbin: a quick try
TMP=$(mktemp -d)
TPID=
trap '[ -n "$TPID" ] && kill $TPID 2>/dev/null; rm -rf "$TMP"' EXIT

for p in bigd bigd_static libbig.so; do
	[ -s "$DIR/$p" ] || { echo "$DIR/$p missing: make bench-fixtures" >&2; exit 1; }
done

now() { date +%s%N; }
secs() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e9 }'; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# Drop FILE's pages from the page cache (those no process has mapped).
evict() {
	python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}
# timed CMD...: run CMD (output in $TMP/out), print its wall time and its
# CPU time (user + system), in ns; fail if it fails.  On a loaded machine
# the wall time grows with the load, the CPU time does not.
timed() {
	local t0 t1 cpu TIMEFORMAT='%3U %3S'
	t0=$(now)
	{ time "$@" >"$TMP/out" 2>"$TMP/err"; } 2>"$TMP/cpu" ||
		{ echo "failed: $* ($(head -c 300 "$TMP/err"))" >&2; return 1; }
	t1=$(now)
	cpu=$(awk '{ printf "%.0f", ($1 + $2) * 1e9 }' "$TMP/cpu")
	echo "$((t1 - t0)) $cpu"
}
gdb_bt() { timeout 900 gdb -p "$TPID" -batch -nx -ex 'thread apply all bt'; }

# row_times BIGFILE N CMD...: "first_wall first_cpu after_wall after_cpu",
# the first run with BIGFILE evicted, then the medians of N more
row_times() {
	local big=$1 n=$2 first i
	shift 2
	evict "$big"
	first=$(timed "$@") || return 1
	for i in $(seq "$n"); do timed "$@" || return 1; done >"$TMP/times"
	echo "$first $(cut -d' ' -f1 "$TMP/times" | median) $(cut -d' ' -f2 "$TMP/times" | median)"
}
# "wall s (CPU s)"
wc_() { echo "$(secs "$1") s ($(secs "$2"))"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f×", a / (b > 0 ? b : 1) }'; }

echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
echo "| target | command | memattach first run | memattach after (median of $RUNS) | gdb thread apply all bt: first / after (median of $GDB_RUNS) | gdb / memattach after: wall, CPU |"
echo "|---|---|---:|---:|---:|---:|"
for prog in bigd bigd_static; do
	big=$DIR/libbig.so
	[ $prog = bigd_static ] && big=$DIR/bigd_static
	rm -f "$TMP/in"; mkfifo "$TMP/in"
	"$DIR/$prog" <"$TMP/in" >"$TMP/target.out" 2>&1 &
	TPID=$!
	exec 3>"$TMP/in"
	for _ in $(seq 600); do grep -q READY "$TMP/target.out" && break; sleep 0.1; done
	grep -q READY "$TMP/target.out" || { echo "$prog did not start" >&2; exit 1; }
	nthreads=$(ls "/proc/$TPID/task" | wc -l)

	read -r gfw gfc gaw gac < <(row_times "$big" "$GDB_RUNS" gdb_bt) || exit 1
	gthreads=$(grep -c '^Thread ' "$TMP/out")
	[ "$gthreads" = "$nthreads" ] || { echo "gdb listed $gthreads of $nthreads threads" >&2; exit 1; }
	for cmd in threads stats; do
		read -r fw fc aw ac < <(row_times "$big" "$RUNS" "$MA" "$cmd" "$TPID") || exit 1
		if [ $cmd = threads ]; then
			listed=$(grep -c '^thread ' "$TMP/out")
			[ "$listed" = "$nthreads" ] || { echo "threads listed $listed of $nthreads" >&2; exit 1; }
		fi
		printf '| %s (%d threads) | %s | %s | %s | %s / %s | %s, %s |\n' "$prog" "$nthreads" "$cmd" \
			"$(wc_ "$fw" "$fc")" "$(wc_ "$aw" "$ac")" "$(wc_ "$gfw" "$gfc")" "$(wc_ "$gaw" "$gac")" \
			"$(ratio "$gaw" "$aw")" "$(ratio "$gac" "$ac")"
		if [ -n "$BEFORE" ]; then
			read -r bfw bfc baw bac < <(row_times "$big" "$RUNS" "$BEFORE" "$cmd" "$TPID") || exit 1
			printf '| %s (%d threads) | %s, before | %s | %s | | before / after: %s, %s |\n' "$prog" \
				"$nthreads" "$cmd" "$(wc_ "$bfw" "$bfc")" "$(wc_ "$baw" "$bac")" \
				"$(ratio "$baw" "$aw")" "$(ratio "$bac" "$ac")"
		fi
	done
	echo verdict >&3
	for _ in $(seq 100); do grep -q VERDICT "$TMP/target.out" && break; sleep 0.1; done
	v=$(grep VERDICT "$TMP/target.out" | tail -1)
	echo "# $prog: $v (the interrupted waits are gdb's)"
	case $v in "VERDICT ok"*) ;; *) echo "$prog verdict: $v" >&2; exit 1 ;; esac
	echo quit >&3
	exec 3>&-
	wait "$TPID" 2>/dev/null
	TPID=
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
