#!/usr/bin/env bash
# memattach frag start / report / stop (half the runs: profile start,
# heap-dump of its profile, profile stop) SIGKILLed at a random instant, RUNS
# times (1,000 under make soak, 300 in make test), in turn on three self-checking targets that allocate
# all the time:
#   daemon        (-t 4: workers allocating and checking their objects)
#   fragchurn     (detached threads created and ended without pause, each one
#                 malloc+free, plus two allocating workers)
#   daemon_static (-t 4, jemalloc linked in: the inline detours, written
#                 into its entry points while the workers call them)
# The targets take their turns (a third of the runs each, start, report and
# stop in turn), each started after the one before quit.
# Each run is killed at a uniformly random instant of its normal length
# (safety_tool killat; the window per target and command is the median of
# 3 normal runs, at least 5 ms).  start picks a random --shift (0-10), so
# a kill lands in every kind of agent state: loading, patching the GOT
# slots, recording, reading samples, restoring, waiting for wrappers.  A
# command after a killed one may be refused (exit 1: already running, no
# agent, a killed call still running in the agent); exit 0, 1 or the kill
# are the only outcomes allowed.  After every run the target must be alive.
# At the end, per target: frag stop then start then stop work, nothing
# is stopped or traced, the verdict is ok, the target still progresses.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 21
need_fixtures daemon fragchurn daemon_static safety_tool
RUNS=${RUNS:-$(sized 1000 300)}
CMDS=(start report stop)
NAMES=(daemon fragchurn daemon_static)
declare -A ARGS_OF=([daemon]="-t 4 -p 1000" [fragchurn]="" [daemon_static]="-t 4 -p 1000")
declare -A PID FD OUT DIR C0 DEATHS

start() { # start NAME
	# shellcheck disable=SC2086
	fix_start "$1" ${ARGS_OF[$1]} || return 1
	PID[$1]=$FIX_PID FD[$1]=$FIX_FD OUT[$1]=$FIX_OUT DIR[$1]=$(dirname "$FIX_OUT")
}

# Half the runs are profile's (the same agent keeping a heap profile): its
# start, a heap-dump of the profile, its stop.
cmd_args() { # cmd_args NAME CMD -> A
	if [ $((RANDOM % 2)) -eq 0 ]; then
		case $2 in
		start) A=(frag start "${PID[$1]}" --shift $((RANDOM % 11))) ;;
		report) A=(frag report "${PID[$1]}" --no-flush --top 5) ;;
		stop) A=(frag stop "${PID[$1]}") ;;
		esac
	else
		case $2 in
		start) A=(profile start "${PID[$1]}" --rate $((1 << (RANDOM % 20)))) ;;
		report) A=(heap-dump "${PID[$1]}" -o "$TMP/rk.heap") ;;
		stop) A=(profile stop "${PID[$1]}") ;;
		esac
	fi
}

# kill_window NAME: the kill window of each command on NAME, the median
# of 3 normal runs (at least 5 ms).
declare -A WIN
kill_window() {
	local n=$1 c e w
	for c in "${CMDS[@]}" "${CMDS[@]}" "${CMDS[@]}"; do
		cmd_args "$n" "$c"
		e=$("$TOOL" killat -v 60000000 60000000 "$MA" "${A[@]}" 2>&1 >/dev/null | sed -n 's/.*elapsed_us=\([0-9]*\).*/\1/p' | tail -1)
		WIN[$n,$c]="${WIN[$n,$c]:-} ${e:-0}"
	done
	for c in "${CMDS[@]}"; do
		w=$(printf '%s\n' ${WIN[$n,$c]} | sort -n | sed -n 2p)
		[ "$w" -lt 5000 ] && w=5000
		WIN[$n,$c]=$w
	done
	echo "# kill windows of $n (us): $(for c in "${CMDS[@]}"; do echo -n "$c=${WIN[$n,$c]} "; done)"
}

killed=0 finished=0 failed=0 other=0 deaths=0
: >"$TMP/failed.txt"; : >"$TMP/other.txt"; : >"$TMP/deaths.txt"
declare -A LAST
# kill_runs NAME FROM TO: runs FROM..TO-1 on NAME, each killed at a random instant.
kill_runs() {
	local n=$1 i rc v f
	for ((i = $2; i < $3; i++)); do
		c=${CMDS[$((i % 3))]}
		cmd_args "$n" "$c"
		kill_at_random "$n" "$c" "${WIN[$n,$c]}" "$MA" "${A[@]}"
	WIN[$n,$c]=$(next_window "${WIN[$n,$c]}")
		rc=$RC
		if ! alive "${PID[$n]}"; then
			fixture_died "${PID[$n]}" "${DIR[$n]}"
			deaths=$((deaths + 1)) DEATHS[$n]=$((DEATHS[$n] + 1))
			echo "run $i: $n died ($DIED_WHY) after '${A[*]}' exit $rc, previous run on it '${LAST[$n]:-none}'" >>"$TMP/deaths.txt"
			f=${FD[$n]}; exec {f}>&-
			start "$n" || { fail "$n: restart"; exit 1; }
			v=$(fix_cmd "${PID[$n]}" "${FD[$n]}" "${OUT[$n]}" verdict); C0[$n]=$(vfield "$v" checks)
		fi
		LAST[$n]="${A[*]}' exit '$rc"
	done
}

# end_checks NAME: after its runs, NAME works with frag, runs on, is whole, and quits.
end_checks() {
	local n=$1 pid=${PID[$1]} r1 r2 r3 s t v c1 rc
	bsleep 0.5
	if ! alive "$pid"; then
		fixture_died "$pid" "${DIR[$n]}"
		fail "$n: dead at the end: $DIED_WHY"
		return
	fi
	# a killed stop or start may have left an agent running: stop it first
	agent_stop "$pid"
	"$MA" frag start "$pid" >/dev/null 2>"$TMP/s1.err"; r1=$?
	"$MA" frag report "$pid" --no-flush >/dev/null 2>"$TMP/s2.err"; r2=$?
	"$MA" frag stop "$pid" >/dev/null 2>"$TMP/s3.err"; r3=$?
	check "$n: frag start / report / stop work afterwards ($r1 $r2 $r3: $(cat "$TMP/s1.err" "$TMP/s2.err" "$TMP/s3.err" | head -2 | tr '\n' ' '))" \
		[ "$r1$r2$r3" = 000 ]
	s=$(stopped_tasks "$pid") t=$(traced_tasks "$pid")
	check "$n: alive at the end, $s threads stopped, $t traced" [ "$s" -eq 0 -a "$t" -eq 0 ]
	v=$(fix_cmd "$pid" "${FD[$n]}" "${OUT[$n]}" verdict)
	check "$n: verdict ok ($v)" verdict_ok "$v"
	c1=$(vfield "$v" checks)
	check "$n: still progressing (checks ${C0[$n]} -> $c1)" [ "${c1:-0}" -gt "${C0[$n]:-0}" ]
	"$MA" stats "$pid" >/dev/null 2>"$TMP/after.err"; rc=$?
	check "$n: memattach stats works afterwards (exit $rc$([ $rc -ne 0 ] && echo ": $(head -1 "$TMP/after.err")"))" [ "$rc" -eq 0 ]
	fix_quit "$pid" "${FD[$n]}"; rc=$?
	check "$n: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
	echo "# $n: frag stop left: $(head -1 "$TMP/s3.err")"
}

# One target at a time (a third of the runs each): fragchurn's thread
# churn takes a CPU and more, and would only slow the others' runs.
k=0
for n in "${NAMES[@]}"; do
	start "$n" || { fail "$n: start"; exit 1; }
	v=$(fix_cmd "${PID[$n]}" "${FD[$n]}" "${OUT[$n]}" verdict); C0[$n]=$(vfield "$v" checks)
	DEATHS[$n]=0
	kill_window "$n"
	kill_runs "$n" $((RUNS * k / 3)) $((RUNS * (k + 1) / 3))
	end_checks "$n"
	k=$((k + 1))
done

echo "# $RUNS runs, each killed at a random instant of its run: $killed killed, $finished finished first, $failed exit 1, $other other; $(elapsed) s"
[ -s "$TMP/failed.txt" ] && echo "# exit 1 messages: $(top_lines "$TMP/failed.txt" 4)"
check "$RUNS randomly killed frag runs: memattach exited 0, 1 or by the kill every time ($other other: $(top_lines "$TMP/other.txt" 2))" [ "$other" -eq 0 ]
check "$RUNS randomly killed frag runs: $killed killed mid-run, $finished finished first (the kill landed before the end in most runs)" [ "$killed" -gt $((RUNS / 2)) ]
check "$RUNS randomly killed frag runs: $deaths target deaths (daemon ${DEATHS[daemon]}, fragchurn ${DEATHS[fragchurn]}, daemon_static ${DEATHS[daemon_static]})$([ "$deaths" -gt 0 ] && echo ": $(head -3 "$TMP/deaths.txt" | tr '\n' ';')")" [ "$deaths" -eq 0 ]
report_time
