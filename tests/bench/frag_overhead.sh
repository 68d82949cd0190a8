#!/usr/bin/env bash
# tests/bench/frag_overhead.sh - what `memattach frag` costs a program that
# allocates flat out, side by side in one run, on build/fixtures/fragbench
# -t THREADS (malloc/free of 8 B..4 KiB, a ring of 1000 live objects per
# thread).  ROUNDS rounds, each in fresh processes, one after the other so
# the machine's drift hits every row alike:
#   1. no agent
#   2. after `memattach frag start PID` (the default shift, 8: 1 allocation
#      in 256 sampled)
#   3. after `frag stop` (slots restored: should be back to 1)
#   4. after `memattach profile start PID` (the same agent keeping a heap
#      profile at the default rate, 512 KiB: jemalloc's lg_prof_sample:19),
#      then `profile stop`
#   5. the same program started with jemalloc's own profiler
#      (MALLOC_CONF=prof:true,prof_active:true, the same rate)
#   6. the same program started under heaptrack (LD_PRELOAD, every call
#      traced)
# and once, last: `frag start --shift 0` (every allocation recorded).
# Then the same rows (but heaptrack's) for build/fixtures/fragbench_static,
# jemalloc linked in, where frag writes inline detours instead of GOT
# slots (heaptrack's LD_PRELOAD cannot see an allocator linked in).
# Each row: the median over the rounds of one RUN_MS ms run (`run MS` ->
# `RATE <malloc+free pairs per second>`), each process after a 1 s warm-up
# run.  The target checks its objects on every free and at the end
# (verdict); a bad verdict or a failed step exits 1.
#
#   THREADS (2) RUN_MS (2000) ROUNDS (5)
#   SKIP_HEAPTRACK=1  row 4 skipped (also skipped, with a note, when
#                 heaptrack is not installed: apt-get install heaptrack)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MA=${MA_BIN:-$ROOT/build/memattach}
BENCH=$ROOT/build/fixtures/fragbench
BENCH_STATIC=$ROOT/build/fixtures/fragbench_static
THREADS=${THREADS:-2}
RUN_MS=${RUN_MS:-2000}
ROUNDS=${ROUNDS:-5}
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

[ -x "$BENCH" ] && [ -x "$BENCH_STATIC" ] || fail "$BENCH or $BENCH_STATIC missing (make fixtures)"

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

# warm: the 1 s warm-up run of a new process.  one_run: one RUN_MS run; prints its rate.
warm() { send "run 1000" '^RATE ' 120 >/dev/null; }
one_run() {
	local r
	r=$(send "run $RUN_MS" '^RATE ' $((RUN_MS / 1000 * 20 + 60)) | awk '{ print $2 }')
	[ -n "$r" ] || fail "no RATE"
	echo "$r"
}
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

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

# table BIN NAME HEAPTRACK: the rows for one build of fragbench.
table() {
	local bin=$1 name=$2 ht_state=$3 mech
	local plain=() agent=() after=() prof_agent=() prof=() ht=()

	printf '\n| configuration (%s -t %s, median of %s rounds) | ops/s | slowdown vs no agent |\n' \
		"$name" "$THREADS" "$ROUNDS"
	printf '|---|---:|---:|\n'
	for round in $(seq "$ROUNDS"); do
		start "plain$round" "$bin" -t "$THREADS"
		warm
		plain+=("$(one_run)")
		ma start "$TPID"
		mech=$("$MA" frag status "$TPID" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("mechanism", "?"))')
		agent+=("$(one_run)")
		ma stop "$TPID"
		after+=("$(one_run)")
		"$MA" profile start "$TPID" >>"$TMP/ma.log" 2>&1 || fail "memattach profile start failed: $(tail -3 "$TMP/ma.log")"
		prof_agent+=("$(one_run)")
		"$MA" profile stop "$TPID" >>"$TMP/ma.log" 2>&1 || fail "memattach profile stop failed: $(tail -3 "$TMP/ma.log")"
		finish "$name, round $round"
		start "prof$round" env MALLOC_CONF=prof:true,prof_active:true "$bin" -t "$THREADS"
		warm
		prof+=("$(one_run)")
		finish "$name with prof:true, round $round"
		if [ "$ht_state" = 1 ]; then
			# heaptrack runs fragbench as its child (LD_PRELOAD), which inherits
			# the fifo as stdin and prints READY with its own pid.
			start "heaptrack$round" heaptrack -o "$TMP/ht$round" "$bin" -t "$THREADS"
			grep -q libheaptrack "/proc/$TPID/maps" 2>/dev/null ||
				fail "heaptrack: pid $TPID has no libheaptrack mapped"
			warm
			ht+=("$(one_run)")
			finish "$name under heaptrack, round $round"
			ls "$TMP"/ht"$round".* >/dev/null 2>&1 || fail "heaptrack wrote no data file"
		fi
		echo "frag_overhead: $name round $round: no agent ${plain[-1]}, frag start ($mech) ${agent[-1]}," \
			"after stop ${after[-1]}, profile start ${prof_agent[-1]}, prof:true ${prof[-1]}" \
			"${ht:+, heaptrack ${ht[-1]}}" >&2
	done
	BASE=$(median "${plain[@]}")
	row "no agent" "$BASE"
	row "memattach frag start (default --shift 8; $mech)" "$(median "${agent[@]}")"
	row "after memattach frag stop" "$(median "${after[@]}")"
	row "memattach profile start (default --rate 512 KiB; $mech)" "$(median "${prof_agent[@]}")"
	row "jemalloc's own profiler, started with prof:true (lg_prof_sample:19)" "$(median "${prof[@]}")"
	if [ "$ht_state" = 1 ]; then row "heaptrack" "$(median "${ht[@]}")"; else skip_row "heaptrack" "$ht_state"; fi

	start shift0 "$bin" -t "$THREADS"
	warm
	ma start "$TPID" --shift 0
	row "memattach frag start --shift 0 (every allocation unwound; one run)" "$(one_run)"
	ma stop "$TPID"
	finish "$name --shift 0"
}

HT=1
if [ "${SKIP_HEAPTRACK:-0}" = 1 ]; then HT=skipped
elif ! command -v heaptrack >/dev/null; then HT="not installed (apt-get install heaptrack)"; fi
table "$BENCH" fragbench "$HT"
table "$BENCH_STATIC" "fragbench_static (jemalloc linked in)" \
	"cannot see an allocator linked into the program (its LD_PRELOAD interposes shared symbols)"
