#!/usr/bin/env bash
# tests/bench/frag_hold.sh - how long `frag start` and `frag stop` hold the
# thread they borrow (the agent's load and its first pass; the wrappers'
# removal), from their `--json` pause_ns, on fixtures/fragchurn:
#   workers   its two allocating workers only (-c 0): both cores busy
#   churn     plus SPAWNERS threads creating detached threads without
#             pause (-c SPAWNERS, default 3: over 5,000 threads a second)
# RUNS start/stop pairs each (default 20); each row: median, p90 and max.
# Any failed command, or a fixture that dies or fails its verdict, exits 1.
# No peer row: the tools that load code into a live process (heaptrack -p,
# gdb) stop every thread for the whole injection (loaded_hold.sh measures
# gdb's holds against memattach's on the simplest call).
set -u
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
RUNS=${RUNS:-20}
SPAWNERS=${SPAWNERS:-3}
die() { echo "frag_hold: $*" >&2; exit 1; }
[ -x "$FIX/fragchurn" ] || die "build/fixtures/fragchurn missing (make fixtures)"

# pause_of FILE: the pause_ns of a --json answer, in ms.
pause_of() { sed -n 's/.*"pause_ns":\([0-9]*\).*/\1/p' "$1" | awk '{ printf "%.3f\n", $1 / 1e6 }'; }

# row NAME SPAWNERS: RUNS start/stop pairs on a fresh fragchurn.
row() {
	local name=$1 p i
	fix_start fragchurn -c "$2" || die "$name: fragchurn did not start"
	p=$FIX_PID
	: >"$TMP/start.ms"; : >"$TMP/stop.ms"
	for i in $(seq "$RUNS"); do
		"$MA" frag start "$p" --json >"$TMP/a.json" 2>"$TMP/err" || die "$name: frag start: $(head -1 "$TMP/err")"
		pause_of "$TMP/a.json" >>"$TMP/start.ms"
		"$MA" frag stop "$p" --json >"$TMP/a.json" 2>"$TMP/err" || die "$name: frag stop: $(head -1 "$TMP/err")"
		pause_of "$TMP/a.json" >>"$TMP/stop.ms"
	done
	v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
	verdict_ok "$v" || die "$name: fixture verdict: $v"
	fix_quit "$p" "$FIX_FD" || die "$name: fixture did not exit cleanly"
	for c in start stop; do
		sort -n "$TMP/$c.ms" | awk -v n="$name" -v c="$c" '{ a[NR] = $1 }
			END { printf "| %s | frag %s | %d | %.1f | %.1f | %.1f |\n", n, c, NR,
			      a[int((NR + 1) / 2)], a[int(NR * 0.9 + 0.5)], a[NR] }'
	done
}

echo "| target | command | runs | median ms | p90 ms | max ms |"
echo "|---|---|---:|---:|---:|---:|"
row workers 0
row "churn ($SPAWNERS spawners)" "$SPAWNERS"
