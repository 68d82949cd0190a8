#!/usr/bin/env bash
# tests/bench/frag_hold.sh - how long `frag start` and `frag stop` hold a
# thread of the program (the longest hold of one thread, their `--json`
# hold_max_ns: the thread that makes memattach's own thread, which then
# does the agent's load and its first pass, or the wrappers' removal;
# ownthread.h), and how long their own thread worked (work_ns), on
# fixtures/fragchurn:
#   workers   its two allocating workers only (-c 0): both cores busy
#   churn     plus SPAWNERS threads creating detached threads without
#             pause (-c SPAWNERS, default 3: over 5,000 threads a second)
# RUNS start/stop pairs each (default 20); each row: median, p90 and max,
# of the hold and of the hold less the time its thread spent waiting for
# a CPU (hold_max_cpu_wait_ns: runnable behind the machine's other
# threads, the scheduler's part of it; /proc's schedstat).  Beside each
# row, the same run's wake-ups of a thread of the program's own (-w:
# "waker", asleep 1 ms at a time): how late the machine let them run.
# Any failed command, or a fixture that dies or fails its verdict, exits 1.
# No peer row: the tools that load code into a live process (heaptrack -p,
# gdb) stop every thread for the whole injection (loaded_hold.sh measures
# gdb's holds against memattach's on the simplest call).
set -u
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
RUNS=${RUNS:-20}
# OWN=0: the test build with a borrowed thread of the program doing the work.
if [ "${OWN:-1}" = 0 ]; then export MEMATTACH_TEST_OWN_THREAD=0; MA=$MA_T; fi
SPAWNERS=${SPAWNERS:-3}
die() { echo "frag_hold: $*" >&2; exit 1; }
[ -x "$FIX/fragchurn" ] || die "build/fixtures/fragchurn missing (make fixtures)"

# ms_of KEY FILE: KEY (ns) of a --json answer, in ms.
ms_of() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$2" | awk '{ printf "%.3f\n", $1 / 1e6 }'; }

# row NAME SPAWNERS: RUNS start/stop pairs on a fresh fragchurn.
row() {
	local name=$1 p i
	fix_start fragchurn -c "$2" -w || die "$name: fragchurn did not start"
	p=$FIX_PID
	fix_cmd "$p" "$FIX_FD" "$FIX_OUT" "wake reset" >/dev/null || die "$name: no answer to wake reset"
	own=0 retries=0
	for c in start stop; do : >"$TMP/$c.ms"; : >"$TMP/$c.net"; : >"$TMP/$c.work"; done
	for i in $(seq "$RUNS"); do
		for c in start stop; do
			"$MA" frag "$c" "$p" --json >"$TMP/a.json" 2>"$TMP/err" || die "$name: frag $c: $(head -1 "$TMP/err")"
			ms_of hold_max_ns "$TMP/a.json" >>"$TMP/$c.ms"
			paste <(ms_of hold_max_ns "$TMP/a.json") <(ms_of hold_max_cpu_wait_ns "$TMP/a.json") |
				awk '{ printf "%.3f\n", $1 - $2 }' >>"$TMP/$c.net"
			ms_of work_ns "$TMP/a.json" >>"$TMP/$c.work"
			retries=$((retries + $(sed -n 's/.*"own_retries":\([0-9]*\).*/\1/p' "$TMP/a.json")))
			if grep -q '"own_thread":true' "$TMP/a.json"; then own=$((own + 1))
			else tr -s '\n ' '  ' <"$TMP/err" | grep -o "could not make a thread of its own: .*" >>"$TMP/whys"; fi
		done
	done
	wake=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" wake) || die "$name: no answer to wake"
	v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
	verdict_ok "$v" || die "$name: fixture verdict: $v"
	fix_quit "$p" "$FIX_FD" || die "$name: fixture did not exit cleanly"
	for c in start stop; do
		w=$(sort -n "$TMP/$c.work" | awk '{ a[NR] = $1 } END { printf "%.1f", a[int((NR + 1) / 2)] }')
		net=$(sort -n "$TMP/$c.net" | awk '{ a[NR] = $1 }
			END { printf "%.1f | %.1f | %.1f", a[int((NR + 1) / 2)], a[int(NR * 0.9 + 0.5)], a[NR] }')
		sort -n "$TMP/$c.ms" | awk -v n="$name" -v c="$c" -v w="$w" -v net="$net" '{ a[NR] = $1 }
			END { printf "| %s | frag %s | %d | %.1f | %.1f | %.1f | %s | %s |\n", n, c, NR,
			      a[int((NR + 1) / 2)], a[int(NR * 0.9 + 0.5)], a[NR], net, w }'
	done
	echo "$wake" | awk -v n="$name" '{ printf "(%s: the program'"'"'s own 1 ms sleeps in the same run, %d wake-ups, late by: median %.1f ms, p90 %.1f, p99 %.1f, max %.1f)\n", n, $2, $3 / 1000, $4 / 1000, $5 / 1000, $6 / 1000 }'
	echo "($name: $own of $((2 * RUNS)) commands worked in a thread of memattach's own;" \
		"$retries makings given up at a loader lock and tried again)"
	[ -s "$TMP/whys" ] && sort "$TMP/whys" | uniq -c | sed 's/^/(  /; s/$/)/'
	rm -f "$TMP/whys"
}

echo "| target | command | runs | median ms | p90 ms | max ms | less CPU wait: median | p90 | max | own thread's work, median ms |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
row workers 0
row "churn ($SPAWNERS spawners)" "$SPAWNERS"
