#!/usr/bin/env bash
# A seccomp allow-list without restart_syscall (fixtures/seccomp_daemon
# -L -R: what memattach's calls need, but not restart_syscall, on every
# thread), its workers asleep in nanosleep most of the time.  A sleeper
# stopped goes on through restart_syscall after the stop, which that
# filter answers by killing the process: memattach sets such a wait to be
# issued again, but a memattach killed between the interrupt and that
# write leaves it to the kernel.  So under a filter not known to allow
# restart_syscall, memattach stops no thread asleep in a timed wait and no
# running thread (it could enter one before its stop).  Checked: memattach
# SIGKILLed right after each step in turn (MEMATTACH_TEST_KILL_AFTER_STEP)
# of stats, stats --tid worker_0, purge and stats --strict (whose thread
# goes back through ptrace, not the stub): the target alive after every
# run, no thread left stopped, its verdict ok at the end; each command
# works (or refuses naming seccomp) once more.  The binary before stopped
# the sleepers, and died at the steps inside that window (an outside
# attack: 6 of 6 targets killed by random kills of frag start/stop).
# STEP_CAP (default 120): a longer sweep kills at every step up to
# STEP_CAP/2, then at evenly spread steps.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 13
need_fixtures seccomp_daemon
STEP_CAP=${STEP_CAP:-120}

start_target() {
	fix_start seccomp_daemon -L -R -t 2 || return 1
	T_PID=$FIX_PID T_FD=$FIX_FD T_OUT=$FIX_OUT T_DIR=$(dirname "$FIX_OUT")
}
# steps_to_kill N: the steps a sweep of N kills at (all, or capped).
steps_to_kill() {
	local n=$1 half=$((STEP_CAP / 2)) k
	if [ "$n" -le "$STEP_CAP" ]; then seq 1 "$n"; return; fi
	seq 1 "$half"
	for ((k = 1; k <= half; k++)); do echo $((half + k * (n - half) / half)); done
}

# sweep NAME CMD...: kill after each step of CMD (@TID@: worker_0's tid).
expand() { # CMD... -> ARGS, @TID@ looked up in the current target
	local w
	ARGS=()
	for w in "$@"; do [ "$w" = @TID@ ] && ARGS+=("$(tid_of "$T_PID" worker_0)") || ARGS+=("$w"); done
}
sweep() {
	local name=$1 k killed=0 died="" stuck=0
	shift
	start_target || { fail "$name: fixture did not start"; return; }
	expand "$@"; args=("${ARGS[@]}")
	steps_of "${args[@]}" "$T_PID"
	# refused before any step (a named sleeper): a sweep of none
	[ -z "$STEPS_N" ] && [ "$STEPS_RC" -eq 1 ] && grep -q seccomp "$TMP/steps.err" && STEPS_N=0
	[ -n "$STEPS_N" ] || { fail "$name: no step count (exit $STEPS_RC)"; stop_all; return; }
	for k in $( [ "$STEPS_N" -gt 0 ] && steps_to_kill "$STEPS_N"); do
		{ MEMATTACH_TEST_KILL_AFTER_STEP=$k "$MA_T" "${args[@]}" "$T_PID" >/dev/null 2>&1; } 2>/dev/null
		[ $? -eq 137 ] && killed=$((killed + 1))
		bsleep 0.05 # a sleeper left to restart_syscall dies within its 5 ms
		if ! alive "$T_PID"; then
			fixture_died "$T_PID" "$T_DIR"
			died+=" step $k ($DIED_WHY)"
			start_target || break
			expand "$@"; args=("${ARGS[@]}")
			continue
		fi
		[ "$(stopped_tasks "$T_PID")" -eq 0 ] || stuck=$((stuck + 1))
	done
	check "$name: $STEPS_N steps, $killed runs killed after one, the target alive after each (died:${died:- none})" \
		[ -z "$died" ]
	check "$name: no thread left stopped after a killed run ($stuck runs left one)" [ "$stuck" -eq 0 ]
	"$MA" "${args[@]}" "$T_PID" >/dev/null 2>"$TMP/again.err"; rc=$?
	check "$name: a run after the sweep works or names seccomp (exit $rc: $(head -1 "$TMP/again.err"))" \
		eval '[ "$rc" -eq 0 ] || grep -q seccomp "$TMP/again.err"'
	stop_all
}
stop_all() {
	local v
	v=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict)
	VERDICTS+="$v;"
	fix_quit "$T_PID" "$T_FD" >/dev/null 2>&1
}

VERDICTS=""
sweep "stats" stats
sweep "stats --tid worker_0" stats --tid @TID@
sweep "purge" purge
sweep "stats --strict" stats --strict # given back through ptrace, not the stub
check "every target's verdict ok ($VERDICTS)" \
	eval '[ "$(grep -o "VERDICT ok" <<<"$VERDICTS" | wc -l)" -eq 4 ]'
