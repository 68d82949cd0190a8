#!/usr/bin/env bash
# frag start / report / stop, memattach SIGKILLed right after each of its
# steps in turn (MEMATTACH_TEST_KILL_AFTER_STEP=K, as safety_every_step.sh):
# at no instant may its death harm the target, and the agent must stay
# manageable: after every kill the target is alive with no thread left
# stopped, and a normal `frag stop` (or start) brings the agent to a known
# state.  After each sweep: the fixture's verdict is ok (its heap objects
# are checked), no thread is traced, the target's descriptors are back to
# what they were (a killed run's memfd is closed by the next run), and the
# agent is loaded at most once.
#   start, loading: the steps up to the agent being loaded (memfd, dlopen,
#          the memfd closed; memattach marks that point), a fresh target
#          per kill once the agent got loaded
#   start, agent loaded and stopped: what a first start does after its
#          loading (the agent call, every thread visited), on one target
#   report --no-flush (agent running), stop
# Steps are counted without the requests that only read the target
# (MEMATTACH_TEST_STEPS_CHANGES=1: a kill right after a read leaves the
# target as a kill after the step before it).  A sweep of more than
# HEAD+MID+TAIL steps (default 16+24+48) kills after every one of its first
# HEAD steps (seizing and stopping the threads) and its last TAIL (the
# agent's call, the memfd and dlopen, the restore and detach), and after
# MID steps evenly spread between (the syscall stops of the remote calls,
# one like the next); the check names say which steps were covered.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 29
# FRAG_FIXTURE=daemon_static: the same on jemalloc linked in (the inline
# detours: frag_every_step_static.sh).  AGENT_CMD=profile: the same agent
# keeping a heap profile (profile_every_step.sh): profile start and stop,
# and heap-dump reading the profile, in place of frag report.
FIXTURE=${FRAG_FIXTURE:-daemon}
AGENT_CMD=${AGENT_CMD:-frag}
need_fixtures "$FIXTURE"
export MEMATTACH_TEST_STEPS_CHANGES=1
HEAD=${HEAD:-16} MID=${MID:-24} TAIL=${TAIL:-48}

# kill_points N: the steps to kill after, in KS; what they cover, in COVER.
kill_points() {
	local n=$1 lo hi stride
	if [ "$n" -le $((HEAD + MID + TAIL)) ]; then
		KS=($(seq 1 "$n")) COVER="each of the $n steps"
		return
	fi
	lo=$((HEAD + 1)) hi=$((n - TAIL))
	stride=$(( (hi - lo + MID) / MID ))
	KS=($(seq 1 "$HEAD") $(seq "$lo" "$stride" "$hi") $(seq $((hi + 1)) "$n"))
	COVER="${#KS[@]} of the $n steps: each of the first $HEAD and the last $TAIL, every ${stride}th between"
}

# fix_start polling every 10 ms: the first sweep replaces its target ~100 times.
start_target() {
	# one worker: every thread visit after a hook change is the same code
	FIX_POLL_MS=10 fix_start "$FIXTURE" -t 1 -n 512 || return 1
	T_PID=$FIX_PID T_FD=$FIX_FD T_OUT=$FIX_OUT T_DIR=$(dirname "$FIX_OUT")
}
quit_target() { # -> the fixture's exit status (fixlib: 0 = verdict ok)
	echo quit >&"$T_FD" 2>/dev/null
	exec {T_FD}>&-
	wait "$T_PID"
}
# A new target; the old one's exit status is its verdict (fixlib: 0 ok).
BAD_QUITS=0
restart_target() {
	quit_target >/dev/null 2>&1 || BAD_QUITS=$((BAD_QUITS + 1))
	start_target
}
agent_state() { # absent | stopped | running | ...
	"$MA" "$AGENT_CMD" status "$T_PID" --json 2>/dev/null | sed -n 's/.*"state":"\([^"]*\)".*/\1/p'
}
agent_inodes() { awk '/memattach-agent/ { print $5 }' "/proc/$T_PID/maps" | sort -u | wc -l; }

# settle WANT: bring the agent to WANT (stopped|running) with one normal
# run; its answer says the state: a start that succeeds or finds one
# running leaves it running, a stop that succeeds or finds none leaves it
# stopped.
settle() {
	if [ "$1" = running ]; then
		"$MA" "$AGENT_CMD" start "$T_PID" >/dev/null 2>"$TMP/settle.err" || has_text "$TMP/settle.err" "already running"
	else
		"$MA" "$AGENT_CMD" stop "$T_PID" >/dev/null 2>"$TMP/settle.err" || has_text "$TMP/settle.err" "no agent is running"
	fi
}
agent_loaded() { has_text "/proc/$T_PID/maps" memattach-agent; }

# sweep LABEL BEFORE AFTER FRESH CMD...: (CMD: memattach's arguments
# before the pid) for k = 1..steps, bring the agent
# to BEFORE, run CMD killed after step k, then check the target and that
# the agent can be brought to AFTER.  FRESH=1: only the steps up to the
# mark "agent-loaded", each on a target without the agent (a new target for
# each k once the agent is loaded).
sweep() {
	local label=$1 before=$2 after=$3 fresh=$4; shift 4
	local n k rc killed=0 deaths=0 stuck=0 unsettled=0 t0=$EPOCHREALTIME v0 c0 v1 c1 fd0 fd1
	settle "$before" || { fail "$label: cannot bring the agent to $before ($(tail -1 "$TMP/settle.err"))"; return; }
	steps_of "$@" "$T_PID"; n=$STEPS_N
	[ "$fresh" = 1 ] && n=$(step_mark agent-loaded)
	if [ -z "$n" ]; then
		fail "$label: no step count (exit $STEPS_RC: $(grep -v '^memattach-test' "$TMP/steps.err" | head -1))"
		return
	fi
	[ "$fresh" = 1 ] && restart_target
	settle "$before"
	v0=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict); c0=$(vfield "$v0" checks)
	fd0=$(fd_count "$T_PID")
	kill_points "$n"
	for k in "${KS[@]}"; do
		# (the previous kill's settle already left it so when AFTER = BEFORE)
		[ "$after" = "$before" ] || settle "$before" || unsettled=$((unsettled + 1))
		{ MEMATTACH_TEST_KILL_AFTER_STEP=$k "$MA_T" "$@" "$T_PID" >/dev/null 2>"$TMP/run.err"; } 2>/dev/null
		rc=$?
		[ "$rc" -eq 137 ] && killed=$((killed + 1))
		bsleep 0.002
		if ! alive "$T_PID"; then
			fixture_died "$T_PID" "$T_DIR"
			echo "# $label: target died after step $k: $DIED_WHY"
			deaths=$((deaths + 1))
			exec {T_FD}>&-
			start_target || { fail "$label: could not restart"; return; }
			continue
		fi
		count_stopped "$T_PID"
		if [ "$STOPPED" -gt 0 ]; then
			bsleep 0.05; count_stopped "$T_PID"
			[ "$STOPPED" -eq 0 ] || stuck=$((stuck + 1))
		fi
		if [ "$fresh" = 1 ] && agent_loaded; then
			# the agent got loaded: a normal stop must work, then a new target
			settle "$after" || { unsettled=$((unsettled + 1)); echo "# $label: step $k: agent not $after: $(tail -1 "$TMP/settle.err")"; }
			restart_target || { fail "$label: restart failed"; return; }
			fd0=$(fd_count "$T_PID") c0=0
			continue
		fi
		settle "$after" || { unsettled=$((unsettled + 1)); echo "# $label: step $k: agent not $after: $(agent_state) $(tail -1 "$TMP/settle.err")"; }
	done
	echo "# $label: killed after $COVER; $killed exit 137; $(awk "BEGIN{printf \"%.1f\", $(now_us)/1e6 - $t0}") s"
	check "$label: killed after $COVER ($killed exit 137)" [ "$killed" -gt 0 ]
	check "$label: target survived every kill ($deaths deaths; $BAD_QUITS replaced targets quit with a bad verdict)" [ "$deaths" -eq 0 -a "$BAD_QUITS" -eq 0 ]
	check "$label: no thread left stopped ($stuck times)" [ "$stuck" -eq 0 ]
	check "$label: the agent could always be brought to $before / $after by normal runs ($unsettled failures)" [ "$unsettled" -eq 0 ]
	check "$label: no thread traced after the sweep" [ "$(traced_tasks "$T_PID")" -eq 0 ]
	v1=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict); c1=$(vfield "$v1" checks)
	check "$label: verdict ok and progressing (${c0:-?} -> ${c1:-?} checks: $v1)" \
		eval 'verdict_ok "$v1" && [ "${c1:-0}" -gt "${c0:-0}" ]'
	# One normal run closes what a killed one left open (its memfd).
	"$MA" "$AGENT_CMD" status "$T_PID" >/dev/null; "$MA" stats "$T_PID" >/dev/null
	fd1=$(fd_count "$T_PID")
	check "$label: descriptors back to $fd0 after a normal run (now $fd1), agent loaded $(agent_inodes) time(s)" \
		[ "$fd1" -eq "$fd0" -a "$(agent_inodes)" -le 1 ]
}

start_target || { fail "$FIXTURE: start"; exit 1; }
C=$AGENT_CMD
sweep "$C start (loading the agent)" stopped stopped 1 "$C" start
settle running && settle stopped # the agent loaded (the last sweep left a new target)
sweep "$C start (agent loaded)" stopped stopped 0 "$C" start
if [ "$C" = profile ]; then
	sweep "heap-dump (the agent's profile)" running running 0 heap-dump -o "$TMP/k.heap"
else
	sweep "frag report --no-flush" running running 0 frag report --no-flush
fi
sweep "$C stop" running stopped 0 "$C" stop
quit_target; rc=$?
check "$FIXTURE: exits cleanly after all sweeps (status $rc)" [ "$rc" -eq 0 ]
report_time
