#!/usr/bin/env bash
# tests/bench/frag_overhead.sh - what `memattach frag` costs a program that
# allocates flat out, side by side in one run:
#   1. no agent
#   2. after `memattach frag start PID --shift 8` (1 allocation in 256 sampled)
#   3. after `frag stop` + `frag start PID --shift 0` (every allocation recorded)
#   4. after `frag stop` (hooks removed: should be back to 1)
#   5. no agent again, in a fresh process (how much the machine drifted)
#   6. the same program started under heaptrack (LD_PRELOAD, every call traced)
# on build/fixtures/fragbench -t THREADS (malloc/free of 8 B..4 KiB, a ring of
# 1000 live objects per thread).  Each row: the median of RUNS runs of RUN_MS
# ms (`run MS` -> `RATE <malloc+free pairs per second>`), after a 1 s warm-up
# run.  The target checks its objects on every free and at the end (verdict);
# a bad verdict or a failed step exits 1.
#
#   THREADS (2) RUN_MS (3000) RUNS (3)
#   SKIP_AGENT=1  rows 2-4 skipped (only the no-agent and heaptrack rows)
#   SKIP_HEAPTRACK=1  row 5 skipped (also skipped, with a note, when
#                 heaptrack is not installed: apt-get install heaptrack)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MA=${MA_BIN:-$ROOT/build/memattach}
BENCH=$ROOT/build/fixtures/fragbench
THREADS=${THREADS:-2}
RUN_MS=${RUN_MS:-3000}
RUNS=${RUNS:-3}
SKIP_AGENT=${SKIP_AGENT:-0}
SKIP_HEAPTRACK=${SKIP_HEAPTRACK:-0}
TMP=$(mktemp -d)
LPID= # what we launched (fragbench, or the heaptrack script)
TPID= # the fragbench process (READY <pid>)

cleanup() {
	[ -n "$TPID" ] && kill "$TPID" 2>/dev/null
	if [ -n "$LPID" ]; then
		for _ in $(seq 50); do kill -0 "$LPID" 2>/dev/null || break; sleep 0.1; done
		kill "$LPID" 2>/dev/null
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
	echo "frag_overhead: $*" >&2
	exit 1
}

[ -x "$BENCH" ] || fail "$BENCH missing (make fixtures)"

# start NAME CMD...: run CMD with stdin from a fifo held open on fd 3 and
# stdout in $TMP/NAME.out; sets LPID, and TPID from the READY line.
OUT=
start() {
	local name=$1
	shift
	rm -f "$TMP/$name.in"
	mkfifo "$TMP/$name.in"
	OUT=$TMP/$name.out
	"$@" <"$TMP/$name.in" >"$OUT" 2>"$TMP/$name.err" &
	LPID=$!
	exec 3>"$TMP/$name.in"
	for _ in $(seq 300); do
		grep -q '^READY ' "$OUT" && break
		kill -0 "$LPID" 2>/dev/null || break
		sleep 0.1
	done
	TPID=$(awk '$1 == "READY" { print $2; exit }' "$OUT")
	[ -n "$TPID" ] || fail "$name did not start: $(tail -3 "$TMP/$name.err")"
}

# send CMD PATTERN TIMEOUT_S: send a command, wait for one more line matching
# PATTERN, print that line.
send() {
	local n
	n=$(grep -c -- "$2" "$OUT")
	echo "$1" >&3 || fail "cannot send '$1' (target gone?)"
	for _ in $(seq $(($3 * 10))); do
		if [ "$(grep -c -- "$2" "$OUT")" -gt "$n" ]; then
			grep -- "$2" "$OUT" | tail -1
			return 0
		fi
		kill -0 "$TPID" 2>/dev/null || fail "target exited during '$1': $(tail -2 "$OUT")"
		sleep 0.1
	done
	fail "no answer to '$1' within $3 s"
}

# measure: warm-up run, then RUNS runs; sets RATE to the median.
RATE=
measure() {
	local t=$((RUN_MS / 1000 * 20 + 60)) rates="" r
	send "run 1000" '^RATE ' 120 >/dev/null
	for _ in $(seq "$RUNS"); do
		r=$(send "run $RUN_MS" '^RATE ' "$t" | awk '{ print $2 }')
		[ -n "$r" ] || fail "no RATE"
		rates="$rates $r"
	done
	echo "frag_overhead: $CONF: runs$rates" >&2
	RATE=$(printf '%s\n' $rates | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
}

BASE=
row() {
	local ratio
	ratio=$(awk -v b="$BASE" -v r="$2" 'BEGIN { printf "%.2f×", b / r }')
	printf '| %s | %s | %s |\n' "$1" "$2" "$ratio"
}

skip_row() { printf '| %s | - | %s |\n' "$1" "$2"; }

ma() {
	"$MA" frag "$@" >>"$TMP/ma.log" 2>&1 || fail "memattach frag $* failed: $(tail -3 "$TMP/ma.log")"
}

# verdict, quit, exit status 0
finish() {
	local v rc
	v=$(send verdict '^VERDICT ' 60)
	case $v in "VERDICT ok"*) ;; *) fail "$1: target verdict: $v" ;; esac
	echo quit >&3
	exec 3>&-
	wait "$LPID"
	rc=$?
	[ "$rc" -eq 0 ] || fail "$1: exit status $rc: $(tail -2 "$OUT")"
	LPID= TPID=
}

printf '| configuration (fragbench -t %s) | ops/s | slowdown vs no agent |\n' "$THREADS"
printf '|---|---:|---:|\n'

start plain "$BENCH" -t "$THREADS"
CONF="no agent"
measure
BASE=$RATE
row "$CONF" "$BASE"
if [ "$SKIP_AGENT" = 1 ]; then
	skip_row "memattach frag start --shift 8" "skipped"
	skip_row "memattach frag start --shift 0" "skipped"
	skip_row "after memattach frag stop" "skipped"
else
	CONF="memattach frag start --shift 8"
	ma start "$TPID" --shift 8
	measure
	row "$CONF" "$RATE"
	CONF="memattach frag start --shift 0"
	ma stop "$TPID"
	ma start "$TPID" --shift 0
	measure
	row "$CONF" "$RATE"
	CONF="after memattach frag stop"
	ma stop "$TPID"
	measure
	row "$CONF" "$RATE"
fi
finish "fragbench"

# The machine's drift over the run: the no-agent figure again, last, in a
# fresh process (the after-stop row is judged against both).
start plain2 "$BENCH" -t "$THREADS"
CONF="no agent again (fresh process, after the rows above)"
measure
row "$CONF" "$RATE"
finish "fragbench (again)"

CONF="heaptrack"
if [ "$SKIP_HEAPTRACK" = 1 ]; then
	skip_row "$CONF" "skipped"
elif ! command -v heaptrack >/dev/null; then
	skip_row "$CONF" "not installed (apt-get install heaptrack)"
else
	# heaptrack runs fragbench as its child (LD_PRELOAD), which inherits the
	# fifo as stdin and prints READY with its own pid.
	start heaptrack heaptrack -o "$TMP/ht" "$BENCH" -t "$THREADS"
	grep -q libheaptrack "/proc/$TPID/maps" 2>/dev/null ||
		fail "heaptrack: pid $TPID has no libheaptrack mapped"
	measure
	row "$CONF" "$RATE"
	finish "fragbench under heaptrack"
	ls "$TMP"/ht.* >/dev/null 2>&1 || fail "heaptrack wrote no data file"
fi
