#!/usr/bin/env bash
# tests/bench/pause.sh - how long does reading jemalloc's stats stall a
# target thread that is NOT the one borrowed?  Side by side in one run:
#   idle      nothing attached (the machine's own scheduling noise)
#   memattach `memattach stats PID`, RUNS times
#   gdb       `gdb -p PID -batch` calling mallctl("stats.allocated"), GDB_RUNS times
#             (where gdb cannot call functions, AMX CPUs: attach and read $pc)
#   lldb      `lldb -p PID --batch` calling the same, GDB_RUNS times (if installed)
# The target's "meter" thread spins (malloc+free per iteration) and records
# its longest gap; its "epoll" thread counts EINTR returns of epoll_wait.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/bench/peers.sh"
MA=${MA_BIN:-$ROOT/build/memattach}
RUNS=${RUNS:-50}
GDB_RUNS=${GDB_RUNS:-10}
TMP=$(mktemp -d)
trap 'kill $TPID 2>/dev/null; rm -rf "$TMP"' EXIT

mkfifo "$TMP/in"
"$ROOT/build/fixtures/stallmeter" <"$TMP/in" >"$TMP/out" &
TPID=$!
exec 3>"$TMP/in"
for _ in $(seq 50); do grep -q READY "$TMP/out" && break; sleep 0.1; done

ask() { # ask CMD: the line the meter answers with
	local n
	n=$(wc -l <"$TMP/out")
	echo "$1" >&3
	while [ "$(wc -l <"$TMP/out")" -le "$n" ]; do sleep 0.01; done
	sed -n "$((n + 1))p" "$TMP/out"
}
field() { awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' <<<"$2"; }
now() { date +%s%N; }

sleep 1
# idle: as long as the memattach phase will take, roughly
ask reset >/dev/null; sleep 2; idle=$(ask max)

# Only memattach runs in this loop (its JSON is parsed afterwards), so the
# harness adds no CPU load of its own.
ask reset >/dev/null
t0=$(now)
for i in $(seq "$RUNS"); do
	"$MA" stats "$TPID" --json >"$TMP/s$i.json" || { echo "memattach failed" >&2; exit 1; }
done
t1=$(now)
ma=$(ask max)
pauses=()
for i in $(seq "$RUNS"); do
	pauses+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pause_ns"])' "$TMP/s$i.json")")
done

# One peer run: gdb or lldb attaches (stopping every thread), calls
# mallctl("stats.allocated") through a malloc'd buffer, and detaches.
# gdb 13 cannot call functions on CPUs with AMX (its extended-state buffer
# is shorter than the kernel's; the failed call breaks the target's
# syscall restart), so there it only attaches and reads $pc.
gdb_call() {
	gdb -p "$TPID" -batch -nx \
		-ex 'set $e = (unsigned long *) ((void*(*)(unsigned long))malloc)(16)' \
		-ex 'set $e[1] = 8' \
		-ex 'print ((int(*)(const char*,void*,unsigned long*,void*,unsigned long))mallctl)("stats.allocated", $e, &$e[1], 0, 0)' \
		-ex 'print $e[0]' -ex 'call ((void(*)(void*))free)($e)'
}
gdb_attach_only() { gdb -p "$TPID" -batch -nx -ex 'print $pc'; }
lldb_call() {
	lldb -p "$TPID" --batch \
		-o 'expr unsigned long *$e = (unsigned long *)malloc(16)' -o 'expr $e[1] = 8' \
		-o 'expr ((int(*)(const char*,void*,unsigned long*,void*,unsigned long))mallctl)("stats.allocated", $e, &$e[1], 0, 0)' \
		-o 'expr $e[0]' -o 'expr (void)free($e)'
}
peer_rows=()
peer_stalls=() peer_pers=() peer_names=()
# peer NAME FUNCTION OK_PATTERN: GDB_RUNS runs, its row
peer() {
	local name=$1 fn=$2 pat=$3 t0 t1 r
	ask reset >/dev/null
	t0=$(now)
	for _ in $(seq "$GDB_RUNS"); do
		"$fn" >"$TMP/peer.out" 2>&1 && grep -q "$pat" "$TMP/peer.out" ||
			{ echo "$name failed" >&2; cat "$TMP/peer.out" >&2; exit 1; }
	done
	t1=$(now)
	r=$(ask max)
	peer_names+=("$name") peer_stalls+=("$(field MAX "$r")") peer_pers+=($(( (t1 - t0) / GDB_RUNS )))
	peer_rows+=("| $name | $GDB_RUNS | $(ms "$(field MAX "$r")") ms | $(field OVER1MS "$r") | $(field EINTR "$r") | $(ms $(( (t1 - t0) / GDB_RUNS ))) ms | all threads |")
}
ms() { awk -v n="$1" 'BEGIN { printf "%.3f", n / 1e6 }'; }

if why=$(gdb_can_call); then
	peer "gdb -p -batch (mallctl)" gdb_call '^\$2 = [0-9]'
else
	echo "# gdb cannot call functions here ($why): its row only attaches and reads \$pc" >&2
	peer "gdb -p -batch (attach, read \$pc only)" gdb_attach_only '^\$1 = '
fi
if command -v lldb >/dev/null; then
	peer "lldb -p --batch (mallctl)" lldb_call '^(unsigned long) \$2 = [0-9]'
fi
echo quit >&3

sorted=$(printf '%s\n' "${pauses[@]}" | sort -n)
p50=$(sed -n "$(( (RUNS + 1) / 2 ))p" <<<"$sorted")
pmax=$(tail -1 <<<"$sorted")
ma_stall=$(field MAX "$ma"); idle_stall=$(field MAX "$idle")
ma_per=$(( (t1 - t0) / RUNS ))

echo "| tool | runs | longest stall of a thread not borrowed | stalls > 1 ms | EINTR in epoll_wait | wall time per run | borrowed thread held (median / max) |"
echo "|---|---|---|---|---|---|---|"
echo "| none (idle noise) | - | $(ms "$idle_stall") ms | $(field OVER1MS "$idle") | $(field EINTR "$idle") | - | - |"
echo "| memattach stats | $RUNS | $(ms "$ma_stall") ms | $(field OVER1MS "$ma") | $(field EINTR "$ma") | $(ms "$ma_per") ms | $(ms "$p50") / $(ms "$pmax") ms |"
printf '%s\n' "${peer_rows[@]}"
echo
for i in "${!peer_names[@]}"; do
	awk -v n="${peer_names[$i]}" -v a="${peer_stalls[$i]}" -v b="$ma_stall" -v c="${peer_pers[$i]}" -v d="$ma_per" 'BEGIN {
		printf "ratio %s / memattach: longest stall %.0fx, wall time per run %.0fx\n", n, a / (b > 0 ? b : 1), c / (d > 0 ? d : 1) }'
done
