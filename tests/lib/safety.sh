# shellcheck shell=bash
# tests/lib/safety.sh - helpers shared by tests/attach/safety_*.sh.  Source
# it after tests/lib/common.sh.  (It lives outside tests/attach/ so that run.sh
# does not take it for a test.)
ulimit -c 0 2>/dev/null
PROF_CONF=prof:true,prof_active:true,prof_final:false
TOOL="$FIX/safety_tool"
SAFETY_T0=$EPOCHREALTIME


# Microseconds since the epoch, without a fork.
now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
# Seconds since the script started, one decimal.
elapsed() { local d=$(( $(now_us) - ${SAFETY_T0/./} )); printf '%d.%d' $((d / 1000000)) $((d / 100000 % 10)); }

# need_fixtures NAME...: fail the whole script if one is missing.
need_fixtures() {
	local f
	for f in "$@"; do
		[ -x "$FIX/$f" ] || { fail "$(basename "$0"): build/fixtures/$f missing (make fixtures)"; exit 1; }
	done
	[ -x "$MA" ] || { fail "$(basename "$0"): $MA missing (make all)"; exit 1; }
}

# vfield LINE KEY: the value of KEY=value in a verdict line.
vfield() { [[ $1 =~ \ $2=([^[:space:]]*) ]] && echo "${BASH_REMATCH[1]}"; return 0; }
alive() { kill -0 "$1" 2>/dev/null; }
verdict_ok() { [[ $'\n'$1 == *$'\n''VERDICT ok'* ]]; }

# The fixture's exit status (reaps it; it must be our child and dead).
reap() { wait "$1" 2>/dev/null; }

# Threads of PID stopped (T: job control or ptrace stop, t: tracing stop).
# Builtins only: cheap enough to call after every run.  count_stopped sets
# STOPPED and NTASKS without a subshell; stopped_tasks prints STOPPED.
count_stopped() {
	local t line
	STOPPED=0 NTASKS=0
	for t in /proc/"$1"/task/*/stat; do
		read -r line 2>/dev/null <"$t" || continue
		NTASKS=$((NTASKS + 1))
		line=${line##*) }
		case ${line:0:1} in T|t) STOPPED=$((STOPPED + 1)) ;; esac
	done
}
stopped_tasks() { count_stopped "$1"; echo "$STOPPED"; }
ntasks() { local a=(/proc/"$1"/task/*); [ -e "${a[0]}" ] && echo "${#a[@]}" || echo 0; }
traced_tasks() {
	local n=0 t line
	for t in /proc/"$1"/task/*/status; do
		while read -r line; do
			case $line in TracerPid:*) [ "${line##*[[:space:]]}" = 0 ] || n=$((n + 1)); break ;; esac
		done 2>/dev/null <"$t"
	done
	echo "$n"
}
# maps_lines PID: the mappings memattach could have left: all but anonymous
# ones of 8 MiB or more (memattach maps at most about 1 MiB; a target's heap
# region that jemalloc splits or maps meanwhile is not a leftover: a purge
# once left the daemon one more 31 MiB heap mapping).
maps_lines() {
	local range perms off dev inode path n=0
	while read -r range perms off dev inode path; do
		[ -z "$path" ] && [ $(( (16#${range#*-} - 16#${range%-*}) >> 20 )) -ge 8 ] && continue
		n=$((n + 1))
	done <"/proc/$1/maps"
	echo "$n"
}
# own_maps PID: the anonymous mappings that start with memattach's header
# magic ("MMAMAP1", include/remote.h's MA_MAGIC_MAP): what a run left
# behind once its header was written, however the heap moved meanwhile.
own_maps() {
	python3 - "$1" <<-'PY'
	import os, sys
	pid, n = sys.argv[1], 0
	fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
	for line in open(f"/proc/{pid}/maps"):
	    f = line.split()
	    if len(f) == 5 and f[1][0] == "r":
	        try:
	            n += os.pread(fd, 8, int(f[0].split("-")[0], 16)) == b"MMAMAP1\0"
	        except OSError:
	            pass
	print(n)
	PY
}
# Anonymous executable mappings (memattach's code area is one; [vdso] is not).
anon_exec() { awk '$2 ~ /x/ && $6 == "" { n++ } END { print n + 0 }' "/proc/$1/maps"; }
# maps_shape PID: the maps without addresses (perms, size, name), to diff.
maps_shape() {
	local range perms off dev inode path
	while read -r range perms off dev inode path; do
		echo "$perms $(( (16#${range#*-} - 16#${range%-*}) / 1024 )) KiB ${path:-[anon]}"
	done <"/proc/$1/maps"
}
# Descriptors other than sockets (sysc's client connections come and go;
# memattach's leftovers would be a memfd or a pipe).
# fd_count PID: the non-socket descriptors.  A descriptor closed while the
# directory is listed (the sysc fixture's client sockets come and go) has
# no readable link any more: it is skipped, not counted (ls -l shows it as
# "l?????????" with no target, which was counted as a non-socket one).
fd_count() { local l; mapfile -t l < <(fd_list "$1"); echo "${#l[@]}"; }
# fd_list PID: "fd -> target" of the non-socket descriptors (for a failure's message)
fd_list() {
	local fd t
	while read -r fd t; do
		[[ $t == socket:* ]] || echo "$fd $t"
	done < <(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 -printf '%f %l\n' 2>/dev/null)
}

# steps_of CMD...: run memattach with MEMATTACH_TEST_STEPS=1; sets STEPS_N
# to its step count (empty if the hook printed nothing) and STEPS_RC to its
# exit status.  Call it directly, not in $(...).  step_mark LABEL: the step
# count at the point the run named LABEL (empty if it never got there).
steps_of() {
	local err=$TMP/steps.err
	MEMATTACH_TEST_STEPS=1 "$MA_T" "$@" >/dev/null 2>"$err"
	STEPS_RC=$?
	STEPS_N=$(sed -n 's/^memattach-test: steps=\([0-9]*\)$/\1/p' "$err" | tail -1)
}
step_mark() { sed -n "s/^memattach-test: mark $1=\\([0-9]*\\)\$/\\1/p" "$TMP/steps.err" | tail -1; }

# fixture_died PID [DIR]: how a dead fixture ended, in DIED_WHY (reaps it;
# call it in the test's own shell, not in $(...): a subshell cannot wait).
fixture_died() {
	local pid=$1 dir=$2 st
	wait "$pid" 2>/dev/null; st=$?
	if [ "$st" -gt 128 ]; then DIED_WHY="signal $((st - 128))"; else DIED_WHY="exit $st"; fi
	[ -n "$dir" ] && [ -s "$dir/err" ] && DIED_WHY+=": $(tail -1 "$dir/err" | cut -c1-200)"
	return 0
}

# summary of distinct lines in a file: "3x msg; 1x msg2"
top_lines() { [ -s "$1" ] && sort "$1" | uniq -c | sort -rn | head -"${2:-3}" | sed 's/^ *//' | tr '\n' ';' | sed 's/;$//'; }

# kill_at_random NAME CMD WINDOW_US COMMAND...: run COMMAND (a memattach
# run on target NAME doing CMD), SIGKILLed at a uniformly random instant of
# WINDOW_US (safety_tool killat).  Its end is tallied in killed (by the
# kill), finished (exit 0), failed (exit 1: its message, numbers as N, in
# $TMP/failed.txt) or other (anything else: $TMP/other.txt); RC is its
# exit status, ELAPSED_US how long it ran.  The caller zeroes the counters
# and creates the two files.
kill_at_random() {
	local n=$1 c=$2 w=$3; shift 3
	{ "$TOOL" killat -v 0 "$w" "$@" >/dev/null 2>"$TMP/run.err"; } 2>/dev/null
	RC=$?
	ELAPSED_US=$(sed -n 's/^delay_us=[0-9]* elapsed_us=\([0-9]*\)$/\1/p' "$TMP/run.err" | tail -1)
	sed -i '/^delay_us=[0-9]* elapsed_us=[0-9]*$/d' "$TMP/run.err"
	case $RC in
	137) killed=$((killed + 1)) ;;
	0) finished=$((finished + 1)) ;;
	1) failed=$((failed + 1)); echo "$c: $(head -1 "$TMP/run.err" | sed 's/[0-9][0-9]*/N/g' | cut -c1-150)" >>"$TMP/failed.txt" ;;
	*) other=$((other + 1)); echo "$n $c: exit $RC: $(head -1 "$TMP/run.err" | cut -c1-150)" >>"$TMP/other.txt" ;;
	esac
}

# next_window WINDOW_US: the kill window after a kill_at_random run.  A run
# that finished before its kill ran shorter than the window calibrated
# (on a loaded machine the calibrating runs may have been the slow ones):
# the window moves halfway to its length, never below 5 ms, so most kills
# still land inside a run.
next_window() {
	local w=$1
	if [ "$RC" -eq 0 ] && [ -n "${ELAPSED_US:-}" ] && [ "$ELAPSED_US" -lt "$w" ]; then
		w=$(((w + ELAPSED_US) / 2))
		[ "$w" -lt 5000 ] && w=5000
	fi
	echo "$w"
}

report_time() { echo "# $(basename "$0"): ran for $(elapsed) s"; }

# forkloop_start THREADS: start fixtures/forkloop.c with THREADS workers
# (its children check they inherited no anonymous executable mapping),
# its fork count kept in a shared file (a stuck control thread cannot hide
# it); sets FIX_PID, FIX_FD, FIX_OUT.  forks: the count so far.
forkloop_start() { fix_start forkloop -t "$1" -x -c "$TMP/forks.count"; }
forks() { od -An -t u8 -N8 "$TMP/forks.count" 2>/dev/null | tr -d ' '; }

# slowpurge_release PID FD OUT: tell fixtures/slowpurge to let its held
# hooks go, then wait (up to 5 s) for its main loop to run 20 more rounds;
# sets LOOPS_BEFORE and LOOPS_NOW, and returns 0 once it has.
slowpurge_loops() { fix_cmd "$1" "$2" "$3" status | awk '{ for (i = 1; i < NF; i++) if ($i == "LOOPS") print $(i + 1) }'; }
slowpurge_release() {
	local i
	LOOPS_BEFORE=$(slowpurge_loops "$@")
	fix_cmd "$1" "$2" "$3" release >/dev/null
	for ((i = 0; i < 100; i++)); do
		LOOPS_NOW=$(slowpurge_loops "$@")
		[ "${LOOPS_NOW:-0}" -gt $((LOOPS_BEFORE + 20)) ] && return 0
		bsleep 0.05
	done
	return 1
}

# agent_cycle I: the three commands (without the pid) of cycle I of an
# agent campaign, in CYCLE_CMDS: frag's start / report / stop on even
# cycles, profile's start / heap-dump / stop on odd ones (the same agent,
# its other mode), so that one campaign covers both.
agent_cycle() {
	if [ $(($1 % 2)) -eq 0 ]; then
		CYCLE_CMDS=("frag start --shift $((RANDOM % 11))" "frag report --no-flush --top 3" "frag stop")
	else
		CYCLE_CMDS=("profile start --rate $((1 << (RANDOM % 20)))" "heap-dump -o $TMP/cycle.heap" "profile stop")
	fi
}
# agent_stop PID: whatever agent a campaign left running, stopped.
agent_stop() { "$MA" frag stop "$1" >/dev/null 2>&1; "$MA" profile stop "$1" >/dev/null 2>&1; }

# dying_threads_check TAG FIXTURE: threads in their exit (fragchurn's
# "dying" commands; FIXTURE is fragchurn or fragchurn_static, with the
# caller's LD_LIBRARY_PATH).  A thread whose only jemalloc call is a free in
# its last destructor round has jemalloc's minimal state: a call there would
# give it a tcache that no destructor removes, and the fixture's own merge,
# after the thread is joined and its stack unmapped (a stack cache of 0),
# would follow it and fault.  A thread past jemalloc's destructor is exiting.
# Neither is borrowed, named or not.  DYING_CHECKS checks.
DYING_CHECKS=5
dying_threads_check() {
	local tag=$1 fixture=$2 pid fd fo tid rc st out i runs=0 bad=0
	if ! GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0 fix_start "$fixture" -b -c 1; then
		for i in $(seq "$DYING_CHECKS"); do fail "$tag: $fixture -b did not start (check $i)"; done
		return
	fi
	pid=$FIX_PID fd=$FIX_FD fo=$FIX_OUT
	tid=$(fix_cmd "$pid" "$fd" "$fo" dying | awk '$1 == "DYING" { print $2 }')
	"$MA" stats "$pid" --tid "${tid:-0}" >/dev/null 2>"$TMP/dying.err"; rc=$?
	out=$(tr '\n' ' ' <"$TMP/dying.err" | tr -s ' ')
	check "$tag: thread ${tid:-?}, whose only jemalloc call was a free in its last destructor round: stats --tid refused, saying why (exit $rc: ${out:0:200})" \
		eval '[ "$rc" = 1 ] && [[ $out == *"only ever freed memory"* ]]'
	"$MA" bins "$pid" --flush-tcache >/dev/null 2>"$TMP/dying.err" || bad=$((bad + 1))
	for i in $(seq 10); do
		runs=$((runs + 1))
		"$MA" stats "$pid" >/dev/null 2>>"$TMP/dying.err" || bad=$((bad + 1))
	done
	check "$tag: bins --flush-tcache and $runs stats runs meanwhile, each ends 0 ($bad did not: $(head -c 200 "$TMP/dying.err"))" [ "$bad" -eq 0 ]
	out=$(fix_cmd "$pid" "$fd" "$fo" release)
	tid=$(fix_cmd "$pid" "$fd" "$fo" "dying full" | awk '$1 == "DYING" { print $2 }')
	"$MA" stats "$pid" --tid "${tid:-0}" >/dev/null 2>"$TMP/dying.err"; rc=$?
	st=$(tr '\n' ' ' <"$TMP/dying.err" | tr -s ' ')
	check "$tag: thread ${tid:-?}, past jemalloc's destructor: stats --tid refused as exiting (exit $rc: ${st:0:160})" \
		eval '[ "$rc" = 1 ] && [[ $st == *"is exiting"* ]]'
	out="$out, $(fix_cmd "$pid" "$fd" "$fo" release)"
	alive "$pid" && out="$out, $(fix_cmd "$pid" "$fd" "$fo" verdict)"
	check "$tag: both threads ended and joined, the fixture's own merges after each ran: alive, verdict ok ($out)" \
		eval 'alive "$pid" && [[ $out == "RELEASED, RELEASED, VERDICT ok"* ]]'
	fix_quit "$pid" "$fd"; rc=$?
	check "$tag: $fixture -b exits cleanly (status $rc)" [ "$rc" -eq 0 ]
}

# --- the kernel's own record of interrupted waits (ftrace) ---
# wait_trace_start SYSCALL TID: record each return of SYSCALL in thread
# TID that is not a normal one (ret < 0: EINTR, or the ERESTART* the
# kernel gives a wait a signal or a stop cut short), in a trace instance of
# this test's own; 1 (and a line on stderr) if the kernel has no tracefs.
wait_trace_start() {
	local t=/sys/kernel/tracing
	[ -d "$t/events" ] || mount -t tracefs nodev "$t" 2>/dev/null
	WAIT_TRACE=$t/instances/memattach_test_$$
	mkdir "$WAIT_TRACE" 2>/dev/null || { echo "no tracefs instance at $t" >&2; return 1; }
	WAIT_TRACE_EVENT=$WAIT_TRACE/events/syscalls/sys_exit_$1
	[ -d "$WAIT_TRACE_EVENT" ] || { echo "no syscall tracepoint sys_exit_$1" >&2; rmdir "$WAIT_TRACE"; return 1; }
	echo "common_pid == $2 && ret < 0" >"$WAIT_TRACE_EVENT/filter" && echo 1 >"$WAIT_TRACE_EVENT/enable" &&
		echo 1 >"$WAIT_TRACE/tracing_on"
}
# wait_trace_stop: how many such returns were recorded; the instance is removed.
wait_trace_stop() {
	local n
	echo 0 >"$WAIT_TRACE/tracing_on"
	n=$(grep -c ' -> 0x' "$WAIT_TRACE/trace")
	echo 0 >"$WAIT_TRACE_EVENT/enable"
	rmdir "$WAIT_TRACE" 2>/dev/null
	echo "$n"
}
