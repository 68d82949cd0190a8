#!/usr/bin/env bash
# Job control while memattach works: during each of RUNS (default 200)
# `stats` runs on the daemon, safety_tool jobctl sends the process 1-6
# SIGSTOP / SIGTSTP / SIGCONT at random moments over SPAN_US (default: the
# median time of 3 normal runs, at least 10 ms, so that the signals land
# all over the run), the last one SIGCONT 3 times in 4 (stats --timeout
# 1000).  When memattach is done,
# the process must be in the state the last signal asks for: running (no
# thread in T/t) after SIGCONT, stopped (every thread) after SIGSTOP, and
# after SIGTSTP whatever it is after SIGTSTP without memattach (the same
# loop runs first without memattach, REF_RUNS times (default 100), as the
# reference).  No memattach run
# may hang; the target's verdict stays ok and it keeps working.
# The daemon runs in a process group of its own in our session, so SIGTSTP
# stops it (an orphaned group would ignore SIGTSTP).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 10
need_fixtures daemon safety_tool
RUNS=${RUNS:-$(sized 200 100)}
REF_RUNS=${REF_RUNS:-$(sized 100 50)}
SPAN_US=${SPAN_US:-}

mkdir -p "$TMP/pgrp"
printf '#!/bin/sh\nexec "%s" newpgrp "%s" "$@"\n' "$TOOL" "$FIX/daemon" >"$TMP/pgrp/daemon"
chmod +x "$TMP/pgrp/daemon"
FIX="$TMP/pgrp" fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT

if [ -z "$SPAN_US" ]; then
	es=()
	for _ in 1 2 3; do
		es+=("$("$TOOL" killat -v 60000000 60000000 "$MA" stats "$pid" 2>&1 >/dev/null | sed -n 's/.*elapsed_us=\([0-9]*\).*/\1/p')")
	done
	SPAN_US=$(printf '%s\n' "${es[@]}" | sort -n | sed -n 2p)
	[ "${SPAN_US:-0}" -lt 10000 ] && SPAN_US=10000
fi
echo "# signals spread over $SPAN_US us"

# wait_state PID running|stopped: poll up to 1 s; 0 if reached
wait_state() {
	local want=$1 i
	for ((i = 0; i < 100; i++)); do
		count_stopped "$pid"
		case $want in
		running) [ "$STOPPED" -eq 0 ] && return 0 ;;
		stopped) [ "$NTASKS" -gt 0 ] && [ "$STOPPED" -eq "$NTASKS" ] && return 0 ;;
		esac
		bsleep 0.01
	done
	return 1
}

# loop NRUNS [with-memattach]: sets R_* counters
loop() {
	local i line last rc hang nruns=$1
	shift
	R_CONT=0 R_CONT_BAD=0 R_STOP=0 R_STOP_BAD=0 R_TSTP=0 R_TSTP_STOPPED=0 R_HANG=0 R_RC_BAD=0 R_OK=0 R_FAIL=0
	: >"$TMP/bad.txt"
	for ((i = 1; i <= nruns; i++)); do
		if [ -n "$1" ]; then
			line=$("$TOOL" jobctl "$pid" "$SPAN_US" "$MA" stats "$pid" --timeout 1000 2>>"$TMP/ma.err")
		else
			line=$("$TOOL" jobctl "$pid" "$SPAN_US")
		fi
		last=$(sed -n 's/^last=\([A-Z]*\).*/\1/p' <<<"$line")
		rc=$(sed -n 's/.* rc=\(-*[0-9]*\).*/\1/p' <<<"$line")
		hang=$(sed -n 's/.* hang=\([01]\).*/\1/p' <<<"$line")
		[ "$hang" = 1 ] && R_HANG=$((R_HANG + 1))
		case $rc in -1) ;; 0) R_OK=$((R_OK + 1)) ;; 1) R_FAIL=$((R_FAIL + 1)) ;; *) R_RC_BAD=$((R_RC_BAD + 1)); echo "run $i: memattach exit $rc ($line)" >>"$TMP/bad.txt" ;; esac
		alive "$pid" || { echo "run $i: target died ($line)" >>"$TMP/bad.txt"; return; }
		case $last in
		CONT) R_CONT=$((R_CONT + 1))
		      wait_state running || { R_CONT_BAD=$((R_CONT_BAD + 1)); echo "run $i: stopped after SIGCONT: $(stopped_tasks "$pid")/$(ntasks "$pid") threads in T/t, traced $(traced_tasks "$pid") ($line)" >>"$TMP/bad.txt"; } ;;
		STOP) R_STOP=$((R_STOP + 1))
		      wait_state stopped || { R_STOP_BAD=$((R_STOP_BAD + 1)); echo "run $i: running after SIGSTOP ($line)" >>"$TMP/bad.txt"; } ;;
		TSTP) R_TSTP=$((R_TSTP + 1))
		      wait_state stopped && R_TSTP_STOPPED=$((R_TSTP_STOPPED + 1)) ;;
		*) echo "run $i: no jobctl line ($line)" >>"$TMP/bad.txt" ;;
		esac
		kill -CONT "$pid" 2>/dev/null
		wait_state running || { echo "run $i: still stopped 1 s after our own SIGCONT" >>"$TMP/bad.txt"; R_CONT_BAD=$((R_CONT_BAD + 1)); }
	done
}

loop "$REF_RUNS" ""
ref_tstp=$R_TSTP ref_tstp_stopped=$R_TSTP_STOPPED
echo "# without memattach: last SIGCONT $R_CONT ($R_CONT_BAD stuck), SIGSTOP $R_STOP ($R_STOP_BAD not stopped), SIGTSTP $R_TSTP (stopped $R_TSTP_STOPPED); $(elapsed) s"
check "reference loop without memattach: $REF_RUNS runs, state always as the last signal asks ($R_CONT_BAD + $R_STOP_BAD wrong)" [ "$R_CONT_BAD" -eq 0 -a "$R_STOP_BAD" -eq 0 -a ! -s "$TMP/bad.txt" ]
tstp_stops=0; [ "$ref_tstp" -gt 0 ] && [ "$ref_tstp_stopped" -eq "$ref_tstp" ] && tstp_stops=1

v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
loop "$RUNS" with-memattach
echo "# with memattach: last SIGCONT $R_CONT ($R_CONT_BAD stuck), SIGSTOP $R_STOP ($R_STOP_BAD not stopped), SIGTSTP $R_TSTP (stopped $R_TSTP_STOPPED); memattach $R_OK ok, $R_FAIL exit 1, $R_RC_BAD other, $R_HANG hangs; $(elapsed) s"
[ -s "$TMP/bad.txt" ] && head -3 "$TMP/bad.txt" | sed 's/^/# /'
sed 's/[0-9][0-9]*/N/g' "$TMP/ma.err" | cut -c1-160 >"$TMP/ma.err.n"
[ -s "$TMP/ma.err.n" ] && echo "# memattach errors: $(top_lines "$TMP/ma.err.n" 3)"
check "stop/cont with memattach: target alive after $RUNS runs" alive "$pid"
check "stop/cont with memattach: running after a last SIGCONT in $((R_CONT - R_CONT_BAD)) of $R_CONT runs" [ "$R_CONT_BAD" -eq 0 -a "$R_CONT" -gt 0 ]
check "stop/cont with memattach: stopped after a last SIGSTOP in $((R_STOP - R_STOP_BAD)) of $R_STOP runs (a SIGSTOP is never lost)" [ "$R_STOP_BAD" -eq 0 ]
if [ "$tstp_stops" -eq 1 ]; then
	check "stop/cont with memattach: stopped after a last SIGTSTP in $R_TSTP_STOPPED of $R_TSTP runs (as without memattach: $ref_tstp_stopped of $ref_tstp)" [ "$R_TSTP_STOPPED" -eq "$R_TSTP" ]
else
	check "stop/cont with memattach: after a last SIGTSTP stopped in $R_TSTP_STOPPED of $R_TSTP runs (without memattach: $ref_tstp_stopped of $ref_tstp)" [ "$R_TSTP_STOPPED" -eq 0 ]
fi
check "stop/cont with memattach: no run hung ($R_HANG), every run exited 0 or 1 ($R_OK ok, $R_FAIL exit 1, $R_RC_BAD other)" [ "$R_HANG" -eq 0 -a "$R_RC_BAD" -eq 0 ]
if alive "$pid"; then
	kill -CONT "$pid"
	check "stop/cont: no thread traced at the end ($(traced_tasks "$pid"))" [ "$(traced_tasks "$pid")" -eq 0 ]
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	check "stop/cont: verdict ok ($v)" verdict_ok "$v"
	c0=$(vfield "$v0" checks) c1=$(vfield "$v" checks)
	check "stop/cont: target kept working (checks $c0 -> $c1)" [ "${c1:-0}" -gt "${c0:-0}" ]
	fix_quit "$pid" "$fd"; rc=$?
	check "stop/cont: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	fixture_died "$pid" "$(dirname "$out")"
	fail "stop/cont: target died: $DIED_WHY"
fi
report_time
