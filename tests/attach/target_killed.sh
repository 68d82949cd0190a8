#!/usr/bin/env bash
# A target killed (SIGKILL) at a random moment of a run: every failure must
# say the process exited (or, killed before the run found it, that there is
# no such process), never what the dying process looked like to the step
# that failed: "not permitted to trace ... ptrace_scope" (the kernel refuses
# to trace an exiting thread), "replaced its program (exec)" or "has no
# slack" (its mappings are gone), "cannot read the mappings", "does not use
# jemalloc".  RUNS runs of each of stats, bins and threads, each on a fresh
# daemon, killed after a random delay within the command's own run time
# (measured first on a live daemon, so the kills spread over the run).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
CMDS=(stats bins threads)
plan $((3 * ${#CMDS[@]}))
need_fixtures daemon
RUNS=${RUNS:-30}
export FIX_POLL_MS=10

# run_us CMD: how long one run of CMD on a live daemon takes (µs, at least 1000).
run_us() {
	local t0 t1
	fix_start daemon -t 4 || return 1
	"$MA" "$1" "$FIX_PID" >/dev/null 2>&1
	t0=$(now_us)
	"$MA" "$1" "$FIX_PID" >/dev/null 2>&1
	t1=$(now_us)
	{ kill -KILL "$FIX_PID"; wait "$FIX_PID"; } 2>/dev/null
	exec {FIX_FD}>&-
	echo $(((t1 - t0) < 1000 ? 1000 : t1 - t0))
}

exited='^memattach [a-z]+: (process [0-9]+ exited during the run|process [0-9]+ \(.*\) exited \(a zombie|no process with pid [0-9]+$)'
for cmd in "${CMDS[@]}"; do
	span=$(run_us "$cmd") || { fail "$cmd: daemon start"; continue; }
	span=$((span * 5 / 4))
	mid=0 before=0 ok=0 wrong=0 hung=0
	: >"$TMP/wrong.$cmd"
	for _ in $(seq "$RUNS"); do
		fix_start daemon -t 4 || break
		"$MA" "$cmd" "$FIX_PID" >/dev/null 2>"$TMP/err" &
		m=$!
		bsleep "$(printf '0.%06d' $(((RANDOM * 32768 + RANDOM) % span)))"
		kill -KILL "$FIX_PID"
		# memattach must end by itself (its own deadlines are seconds): wait for it
		for _ in $(seq 300); do kill -0 "$m" 2>/dev/null || break; bsleep 0.1; done
		if kill -0 "$m" 2>/dev/null; then hung=$((hung + 1)); kill -KILL "$m"; fi
		{ wait "$m"; rc=$?; wait "$FIX_PID"; } 2>/dev/null
		exec {FIX_FD}>&-
		if [ "$rc" -eq 0 ]; then
			ok=$((ok + 1))
		elif [ "$rc" -eq 1 ] && grep -Eq "$exited" "$TMP/err" &&
		     ! grep -Evq "$exited" "$TMP/err"; then
			if grep -q "during the run" "$TMP/err"; then mid=$((mid + 1)); else before=$((before + 1)); fi
		else
			wrong=$((wrong + 1))
			echo "exit $rc: $(head -c 300 "$TMP/err")" >>"$TMP/wrong.$cmd"
		fi
	done
	echo "# $cmd: $RUNS kills within ${span} us: $ok finished first, $mid 'exited during the run'," \
		"$before killed before the run found it, $wrong other, $hung hung"
	sed 's/^/#   /' "$TMP/wrong.$cmd" | sort | uniq -c | head -5
	check "$cmd: every failure of a killed target says it exited ($wrong did not)" [ "$wrong" -eq 0 ]
	check "$cmd: kills landed during runs ($mid said 'exited during the run')" [ "$mid" -gt 0 ]
	check "$cmd: no run outlived its target by 30 s ($hung did)" [ "$hung" -eq 0 ]
done
