#!/usr/bin/env bash
# frag start / report / stop (every other cycle profile start / heap-dump /
# profile stop) while the target forks, execs, loads and
# unloads libraries, or takes a signal storm.  CYCLES (default 20) cycles
# per target, each start with a random --shift (0-10):
#   forkloop -m  the main thread forks without pause; each child mallocs,
#                checks and frees an object through the (rewritten) GOT
#                slots it inherited, then _exit(0)s; the parent checks
#                every child's status
#   fragchurn -d a thread dlopen()s a library, has it allocate, check and
#                free 16 objects, dlclose()s it, round and round (beside
#                the thread spawner and two allocating workers)
#   storm        one thread allocating and checking objects takes a
#                real-time signal every 100 us and SIGUSR1s: none may be
#                lost, duplicated or reordered, and its read() may never
#                see EINTR
#   execd        exec()s itself every 5-40 ms, 60 generations, from the
#                main thread or another one: commands may fail (saying
#                so), the pid must survive and the last image run on
# Every command exits 0 or 1 (1: refused, e.g. already running, an exec,
# the loader busy), every target lives, and its verdict is ok at the end
# (forkloop: forks made, every child exited 0; fragchurn: library cycles
# made; storm: 0 lost signals); nothing is left stopped or traced.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 18
# FRAG_SUFFIX=_static: the same on the builds with jemalloc linked in
# (frag writes inline detours; frag_storms_static.sh).
S=${FRAG_SUFFIX:-}
need_fixtures forkloop$S fragchurn$S libfragplug.so storm$S execd$S
CYCLES=${CYCLES:-$(sized 20 10)}

# cycles PID N: N start/report/stop cycles; sets OTHER (exit codes but 0 and 1), OK, FIRST_OTHER
cycles() {
	local pid=$1 c rc
	OK=0 OTHER=0 FIRST_OTHER="" REFUSED=""
	for i in $(seq "$2"); do
		agent_cycle "$i"
		for c in "${CYCLE_CMDS[@]}"; do
			# shellcheck disable=SC2086
			timeout -s KILL 60 "$MA" $c "$pid" >/dev/null 2>"$TMP/c.err"; rc=$?
			case $rc in
			0) OK=$((OK + 1)) ;;
			1) REFUSED+="$(unwrapped "$TMP/c.err" | head -1 | sed 's/[0-9][0-9]*/N/g' | cut -c1-160)"$'\n' ;;
			*) OTHER=$((OTHER + 1)); [ -n "$FIRST_OTHER" ] || FIRST_OTHER="$c: exit $rc: $(head -1 "$TMP/c.err")" ;;
			esac
		done
		alive "$pid" || return 1
	done
	echo "# frag commands: $OK ok; refusals: $(printf '%s' "$REFUSED" | sort | uniq -c | sort -rn | head -3 | tr '\n' ';')"
}

# ends NAME PID: the checks after the cycles (alive, nothing traced, final stop, verdict checked by the caller)
ends() {
	local n=$1 pid=$2
	check "$n: $CYCLES cycles, every command exited 0 or 1 ($OK ok, $OTHER other${FIRST_OTHER:+: $FIRST_OTHER})" \
		[ "$OTHER" -eq 0 -a "$OK" -gt 0 ]
	agent_stop "$pid" # whatever the last cycle left
	check "$n: alive, nothing stopped ($(stopped_tasks "$pid")) or traced ($(traced_tasks "$pid"))" \
		[ "$(stopped_tasks "$pid")" -eq 0 -a "$(traced_tasks "$pid")" -eq 0 ]
}

died() { fixture_died "$1" "$(dirname "$2")"; fail "$3: died during the cycles: $DIED_WHY"; }

# --- fork ---
fix_start forkloop$S -m -t 2 || { fail "forkloop: start"; exit 1; }
P=$FIX_PID
f0=$(vfield "$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)" forks)
if cycles "$P" "$CYCLES"; then
	ends forkloop "$P"
	v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
	check "forkloop: verdict ok, every child exited 0 ($v)" verdict_ok "$v"
	check "forkloop: it forked on during the cycles (forks $f0 -> $(vfield "$v" forks))" [ "$(vfield "$v" forks)" -gt "${f0:-0}" ]
	fix_quit "$P" "$FIX_FD"; rc=$?
	check "forkloop: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	died "$P" "$FIX_OUT" forkloop; for _ in 1 2 3 4; do fail "forkloop: (not reached)"; done
fi

# --- dlopen / dlclose ---
fix_start fragchurn$S -d || { fail "fragchurn -d: start"; exit 1; }
P=$FIX_PID
d0=$(vfield "$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)" dlcycles)
if cycles "$P" "$CYCLES"; then
	ends "fragchurn -d" "$P"
	v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
	check "fragchurn -d: verdict ok, the library's objects intact ($v)" verdict_ok "$v"
	check "fragchurn -d: it loaded and unloaded the library on during the cycles ($d0 -> $(vfield "$v" dlcycles))" \
		[ "$(vfield "$v" dlcycles)" -gt "${d0:-0}" ]
	fix_quit "$P" "$FIX_FD"; rc=$?
	check "fragchurn -d: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	died "$P" "$FIX_OUT" "fragchurn -d"; for _ in 1 2 3 4; do fail "fragchurn -d: (not reached)"; done
fi

# --- signal storm ---
fix_start storm$S || { fail "storm: start"; exit 1; }
P=$FIX_PID
if cycles "$P" "$CYCLES"; then
	ends storm "$P"
	v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
	check "storm: verdict ok: no signal lost, duplicated or reordered, no EINTR ($v)" verdict_ok "$v"
	fix_quit "$P" "$FIX_FD"; rc=$?
	check "storm: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	died "$P" "$FIX_OUT" storm; for _ in 1 2 3; do fail "storm: (not reached)"; done
fi

# --- exec ---
GENS=60
fix_start execd$S -G "$GENS" -e 5:40 || { fail "execd: start"; exit 1; }
P=$FIX_PID
gens() { grep -c '^READY' "$FIX_OUT"; }
n=0 OTHER=0 FIRST_OTHER="" okc=0
while [ "$(gens)" -le "$GENS" ] && [ $n -lt 400 ]; do
	agent_cycle "$n"
	for c in "${CYCLE_CMDS[@]}"; do
		# shellcheck disable=SC2086
		timeout -s KILL 60 "$MA" $c "$P" >/dev/null 2>"$TMP/c.err"; rc=$?
		n=$((n + 1))
		case $rc in 0) okc=$((okc + 1)) ;; 1) unwrapped "$TMP/c.err" | head -1 | sed 's/[0-9][0-9]*/N/g' | cut -c1-160 >>"$TMP/exec_refusals" ;; *) OTHER=$((OTHER + 1)); [ -n "$FIRST_OTHER" ] || FIRST_OTHER="$c: exit $rc: $(head -1 "$TMP/c.err")" ;; esac
	done
	alive "$P" || break
done
g=$(( $(gens) - 1 ))
echo "# execd: $n frag commands over $g execs, $okc ok; refusals: $(sort "$TMP/exec_refusals" 2>/dev/null | uniq -c | sort -rn | head -4 | tr '\n' ';')"
if alive "$P"; then
	check "execd: the pid survived $g execs under $n frag commands, each exiting 0 or 1 ($OTHER other${FIRST_OTHER:+: $FIRST_OTHER})" \
		[ "$OTHER" -eq 0 ]
	bsleep 0.2
	v=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" verdict)
	check "execd: the last image ($g of $GENS) runs on, verdict ok ($v)" grep -q "^VERDICT ok.* generation=$GENS " <<<"$v"
	"$MA" frag start "$P" >/dev/null 2>"$TMP/e.err" && "$MA" frag stop "$P" >/dev/null 2>>"$TMP/e.err"; rc=$?
	check "execd: frag start and stop work on the last image ($(head -1 "$TMP/e.err"))" [ "$rc" -eq 0 ]
	fix_quit "$P" "$FIX_FD"; rc=$?
	check "execd: exits cleanly (status $rc)" [ "$rc" -eq 0 ]
else
	died "$P" "$FIX_OUT" execd; for _ in 1 2 3; do fail "execd: (not reached)"; done
fi
report_time
