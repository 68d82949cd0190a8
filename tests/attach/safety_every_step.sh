#!/usr/bin/env bash
# memattach SIGKILLed right after each of its steps in turn (a step is one
# ptrace request or one write into target memory; the core's test hooks
# MEMATTACH_TEST_STEPS=1 and MEMATTACH_TEST_KILL_AFTER_STEP=K): no instant
# of a run may be one where its death harms the target.
#
# For each command, one normal run learns its step count N, then runs
# k = 1..N are each killed after step k.  After every run: the target is
# alive and no thread is left stopped.  After each sweep: the verdict is
# ok (daemon: heap objects; regs: registers; sysc: no EINTR, right
# results), the target still makes progress, memattach works again, and
# after one normal run the target has the maps lines, anonymous executable
# mappings and descriptors it had before the sweep (a killed run's
# leftovers are removed by the next run).  A target that dies is restarted
# and the sweep goes on; every death is reported with its step.
#   pass 1: daemon: stats, bins --flush-tcache, purge; daemon with prof:
#           heap-dump
#   pass 2: regs: stats --tid regs_0; sysc: stats --tid <each sc_ thread>;
#           sigs -n -i 1000: stats --tid sig_rx, a thread in read() that a
#           signal whose handler lacks SA_RESTART reaches every 1 ms: every
#           one must end the read with EINTR (the fixture tells a handler
#           run in memattach's code after which the read slept on);
#           sigs: bins --tid sig_rx, signals every 0.5 ms while bins
#           unmaps the scratch mapping its calls ran on; sigs also checks
#           the context every handler is shown
# (Without --tid, a thread in a wait a stop ends with EINTR is never
# stopped at all: attach/eintr_waits.sh shows it directly.)
# STEP_CAP (default 250): a sweep longer than this kills at every step up
# to STEP_CAP/2, then at evenly spread steps (the check names say so).
# MAX_DEATHS (default 5): a sweep stops after that many target deaths (the
# restarts are slow; the check names say where it stopped).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 111
need_fixtures daemon regs sysc sigs
STEP_CAP=${STEP_CAP:-250}
MAX_DEATHS=${MAX_DEATHS:-5}

# --- the current target: T_NAME T_CONF T_ARGS -> T_PID T_FD T_OUT T_DIR ---
start_target() {
	MALLOC_CONF="$T_CONF" fix_start "$T_NAME" "${T_ARGS[@]}" || return 1
	T_PID=$FIX_PID T_FD=$FIX_FD T_OUT=$FIX_OUT T_DIR=$(dirname "$FIX_OUT")
}
# The first start: let the heap reach its steady size (the maps check).
first_start() { start_target && bsleep "${1:-0}"; }
stop_target() { # -> exit status of the fixture
	fix_quit "$T_PID" "$T_FD" >/dev/null 2>&1
}

declare -A TID_CACHE
# expand TEMPLATE: words of the command, @PID@ = target pid, @TID:name@ =
# tid of the thread named so (looked up again after a restart), @OUT@ =
# the dump file.  Result in ARGS.
expand() {
	local w
	ARGS=()
	for w in $1; do
		case $w in
		@PID@) ARGS+=("$T_PID") ;;
		@TID:*@) w=${w#@TID:}; w=${w%@}
			# looked up once per target process
			[ "${TID_CACHE[$T_PID/$w]:-}" ] || TID_CACHE[$T_PID/$w]=$(tid_of "$T_PID" "$w")
			ARGS+=("${TID_CACHE[$T_PID/$w]}") ;;
		@OUT@) ARGS+=("$TMP/dump.heap") ;;
		*) ARGS+=("$w") ;;
		esac
	done
}

baseline() { # after a normal run: maps lines, anon exec mappings, fds
	expand "$1"
	"$MA" "${ARGS[@]}" >/dev/null 2>&1
	B_MAPS=$(maps_lines "$T_PID") B_EXEC=$(anon_exec "$T_PID") B_FDS=$(fd_count "$T_PID")
	maps_shape "$T_PID" >"$TMP/maps.before"
	fd_list "$T_PID" >"$TMP/fds.before"
}

# target_died WHERE: record the death (deaths[] of the caller), restart
target_died() {
	fixture_died "$T_PID" "$T_DIR"
	deaths+=("$1: $DIED_WHY")
	exec {T_FD}>&-
	start_target || { fail "$label: could not restart $T_NAME"; return 1; }
	baseline "$tpl"
	v0=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict); c0=$(vfield "$v0" "$PROGRESS")
}

# sweep LABEL TEMPLATE
sweep() {
	local label=$1 tpl=$2 n ks=() k rc killed=0 completed=0 other=0 stuck=0 window=0
	local deaths=() t_start=$EPOCHREALTIME v0 v1 c0 c1
	expand "$tpl"
	steps_of "${ARGS[@]}"; n=$STEPS_N
	if [ -z "$n" ]; then
		fail "$label: no 'memattach-test: steps=N' line with MEMATTACH_TEST_STEPS=1 (exit $STEPS_RC: hook missing?): $(grep -v '^memattach-test' "$TMP/steps.err" | head -1)"
		return
	fi
	if [ "$n" -le "$STEP_CAP" ]; then
		ks=($(seq 1 "$n")); cover="every one of the $n steps"
	else
		local half=$((STEP_CAP / 2)) rest=$((n - STEP_CAP / 2)) stride
		stride=$(( (rest + half - 1) / half ))
		ks=($(seq 1 "$half") $(seq $((half + stride)) "$stride" "$n"))
		cover="${#ks[@]} of the $n steps (every one up to $half, then every ${stride}th)"
	fi
	baseline "$tpl"
	v0=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict); c0=$(vfield "$v0" "$PROGRESS")
	: >"$TMP/other.err"
	local prev=0 ndone=0
	for k in "${ks[@]}"; do
		# a target that died after the previous run's check
		if ! alive "$T_PID"; then
			target_died "step $prev, noticed later" || return
			[ "${#deaths[@]}" -ge "$MAX_DEATHS" ] && break
		fi
		expand "$tpl"
		{ MEMATTACH_TEST_KILL_AFTER_STEP=$k "$MA_T" "${ARGS[@]}" >/dev/null 2>"$TMP/run.err"; } 2>/dev/null
		rc=$?
		prev=$k ndone=$((ndone + 1))
		[ "$rc" -eq 137 ] && killed=$((killed + 1))
		bsleep 0.002 # a thread released into garbage crashes at once
		# Inside the EINTR window the fixture dies of that EINTR as soon as
		# its thread runs: on a loaded machine that can take longer than
		# 2 ms; give it the time, so the death is counted at this step.
		if [ "$k" -le "${EINTR_WINDOW:-0}" ]; then
			for _ in $(seq 30); do alive "$T_PID" || break; bsleep 0.01; done
		fi
		if ! alive "$T_PID"; then
			# (its exit status does not matter: the target is gone)
			target_died "step $k" || return
			# The one window ptrace leaves (attach/README.md, Safety 4): killed between
			# the stop and the first register write, an EINTR-ending wait
			# gets its EINTR.  Allowed only there, and counted.
			if [ "$k" -le "${EINTR_WINDOW:-0}" ] && grep -q "Interrupted system call" <<<"${deaths[-1]}"; then
				unset 'deaths[-1]'
				window=$((window + 1))
			fi
			[ "${#deaths[@]}" -ge "$MAX_DEATHS" ] && break
			continue
		fi
		case $rc in
		137) ;;
		0) completed=$((completed + 1)) ;; # this run took fewer than k steps
		*) other=$((other + 1)); echo "exit $rc: $(head -1 "$TMP/run.err" | cut -c1-160)" >>"$TMP/other.err" ;;
		esac
		count_stopped "$T_PID"
		if [ "$STOPPED" -gt 0 ]; then
			bsleep 0.05; count_stopped "$T_PID"
			[ "$STOPPED" -eq 0 ] || stuck=$((stuck + 1))
		fi
	done
	[ "$ndone" -lt "${#ks[@]}" ] && cover+="; sweep stopped after $MAX_DEATHS deaths at step $prev ($ndone runs)"
	local lm le lf
	bsleep 0.3
	lm=$(maps_lines "$T_PID" 2>/dev/null) le=$(anon_exec "$T_PID" 2>/dev/null) lf=$(fd_count "$T_PID")
	echo "# $label: $n steps; $cover; exits: $killed killed, $completed finished first, $other other; $(awk "BEGIN{printf \"%.1f\", $(now_us)/1e6 - ${t_start}}") s"
	local why=""
	[ "$other" -gt 0 ] && why=" ($(top_lines "$TMP/other.err" 2))"
	check "$label: killed after each step: $killed exit 137, $completed ran out of steps first, $other other exits$why" \
		[ "$other" -eq 0 -a "$killed" -gt 0 ]
	why=""
	[ "${#deaths[@]}" -gt 0 ] && why=" (${deaths[*]:0:6}$( [ "${#deaths[@]}" -gt 6 ] && echo " ..."))"
	check "$label: target survived all ${#ks[@]} kills: ${#deaths[@]} deaths$why" [ "${#deaths[@]}" -eq 0 ]
	[ "${EINTR_WINDOW:-0}" -gt 0 ] &&
		echo "# $label: EINTR from a kill between the stop and the first register write (steps <= $EINTR_WINDOW): $window times"
	check "$label: no thread left stopped after a kill ($stuck times)" [ "$stuck" -eq 0 ]
	alive "$T_PID" || { fixture_died "$T_PID" "$T_DIR"; fail "$label: target dead at the end ($DIED_WHY)"; exec {T_FD}>&-; start_target; return; }
	check "$label: no thread traced after the sweep ($(traced_tasks "$T_PID") traced)" [ "$(traced_tasks "$T_PID")" -eq 0 ]
	v1=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict); c1=$(vfield "$v1" "$PROGRESS")
	check "$label: verdict after the kills ok ($v1)" verdict_ok "$v1"
	# sigs: a handler shown any context but the read's (or the trap's, counted apart) fails the verdict
	[ "$T_NAME" = sigs ] && echo "# $label: handlers shown memattach's trap context (README.md Limits: the one-request window): $(vfield "$v1" trap_context); any other context: $(vfield "$v1" bad_context)"
	check "$label: target still progressing ($PROGRESS ${c0:-?} -> ${c1:-?})" [ "${c1:-0}" -gt "${c0:-0}" ]
	expand "$tpl"
	"$MA" "${ARGS[@]}" >/dev/null 2>"$TMP/after.err"; rc=$?
	check "$label: memattach works again afterwards (exit $rc$( [ $rc -ne 0 ] && echo ": $(head -1 "$TMP/after.err")"))" [ "$rc" -eq 0 ]
	local m e f o
	m=$(maps_lines "$T_PID") e=$(anon_exec "$T_PID") f=$(fd_count "$T_PID") o=$(own_maps "$T_PID")
	local name="$label: no leftovers after the next normal run: mappings with memattach's header $o, maps lines $B_MAPS -> $m, anon exec mappings $B_EXEC -> $e, non-socket fds $B_FDS -> $f (right after the kills: $lm, $le, $lf)"
	# Fewer maps lines is the heap's doing (a region grown past 8 MiB no
	# longer counts, two merged): a leftover only ever adds one.
	if [ "${#deaths[@]}" -gt 0 ] || [ "$window" -gt 0 ]; then
		skip "$name: not judged, the target was restarted (a young heap still grows)"
	elif [ "$o" -eq 0 -a "$m" -le "$B_MAPS" -a "$e" -eq "$B_EXEC" -a "$f" -eq "$B_FDS" ]; then
		pass "$name"
	else
		fail "$name"
		maps_shape "$T_PID" | diff "$TMP/maps.before" - | grep '^[<>]' | head -4 | sed 's/^/#   maps /'
		fd_list "$T_PID" | diff "$TMP/fds.before" - | grep '^[<>]' | head -4 | sed 's/^/#   fds /'
	fi
	STEPS_REPORT+=("$label=$n")
}

STEPS_REPORT=()
PROGRESS=checks # the verdict's field that must grow

# pass 1: the daemon's heap
T_NAME=daemon T_CONF= T_ARGS=(-t 4 -p 1000)
first_start 1 || { fail "daemon: start"; exit 1; }
sweep "daemon: stats" "stats @PID@"
sweep "daemon: bins --flush-tcache" "bins @PID@ --flush-tcache"
sweep "daemon: purge" "purge @PID@"
stop_target; rc=$?
check "daemon: exits cleanly (status $rc)" [ "$rc" -eq 0 ]

T_NAME=daemon T_CONF=$PROF_CONF T_ARGS=(-t 2 -p 1000)
first_start 1 || { fail "daemon (prof): start"; exit 1; }
sweep "daemon (prof): heap-dump" "heap-dump @PID@ -o @OUT@"
stop_target; rc=$?
check "daemon (prof): exits cleanly (status $rc)" [ "$rc" -eq 0 ]

# pass 2: registers and syscalls of the borrowed thread itself
T_NAME=regs T_CONF= T_ARGS=(-k 1 -i 2000000) # one checker: it spins a whole CPU
start_target || { fail "regs: start"; exit 1; }
sweep "regs: stats --tid regs_0" "stats @PID@ --tid @TID:regs_0@"
v=$(fix_cmd "$T_PID" "$T_FD" "$T_OUT" verdict)
check "regs: no register changed ($(vfield "$v" mismatches) mismatches in $(vfield "$v" rounds) rounds)" grep -q '^VERDICT ok.* mismatches=0' <<<"$v"
stop_target; rc=$?
check "regs: exits cleanly (status $rc)" [ "$rc" -eq 0 ]

T_NAME=sysc T_CONF= T_ARGS=()
start_target || { fail "sysc: start"; exit 1; }
for th in sc_read sc_sleep sc_epoll sc_futex sc_accept; do
	# Named with --tid, the epoll thread is stopped, and epoll_wait ends
	# with EINTR when stopped: steps 1-5 are seize, interrupt, the stop
	# (seen, then collected) and the first GETREGS; from the 6th (the
	# re-issue registers) on, no kill may leave an EINTR.  Only a thread named so is ever stopped in such a wait.
	EINTR_WINDOW=0
	[ "$th" = sc_epoll ] && EINTR_WINDOW=5
	sweep "sysc: stats --tid $th" "stats @PID@ --tid @TID:$th@"
done
EINTR_WINDOW=0
stop_target; rc=$?
check "sysc: exits cleanly (status $rc)" [ "$rc" -eq 0 ]

T_NAME=sigs T_CONF= T_ARGS=(-n -i 1000) PROGRESS=received
start_target || { fail "sigs: start"; exit 1; }
sweep "sigs -n: stats --tid sig_rx" "stats @PID@ --tid @TID:sig_rx@"
# --strict gives the thread back through ptrace, never the stub's own restore
sweep "sigs -n: stats --strict --tid sig_rx" "stats @PID@ --strict --tid @TID:sig_rx@"
stop_target; rc=$?
check "sigs -n: exits cleanly (status $rc)" [ "$rc" -eq 0 ]

# bins works in a scratch mapping it unmaps at the end: a signal every
# 0.5 ms (SA_RESTART) must never find the thread on that stack.
T_NAME=sigs T_CONF= T_ARGS=() PROGRESS=received
start_target || { fail "sigs: start"; exit 1; }
sweep "sigs: bins --tid sig_rx" "bins @PID@ --tid @TID:sig_rx@"
stop_target; rc=$?
check "sigs: exits cleanly (status $rc)" [ "$rc" -eq 0 ]

echo "# steps per command: ${STEPS_REPORT[*]}"
report_time
