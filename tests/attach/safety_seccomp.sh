#!/usr/bin/env bash
# Targets under seccomp (fixtures/seccomp_daemon.c, started with heap
# profiling): a filter on every thread that kills the process
# (SECCOMP_RET_KILL_PROCESS) or sends SIGSYS (SECCOMP_RET_TRAP; the
# fixture never makes that call, so a SIGSYS is an integrity failure) on
# exactly one syscall, for each of mmap munmap mprotect memfd_create close
# getpid rt_sigprocmask rt_sigaction rt_sigpending (127) rt_sigreturn (15)
# sigaltstack (131) (the last four only the self-restore of a killed
# memattach would make, so memattach must not need them), and an allow-list of only what the fixture needs
# (anything else kills the process).  stats, heap-dump and
# bins --flush-tcache run against each, stats killed in its call (the
# borrowed thread then restores itself), purge, and stats --tid of a
# worker (stopped in its sleep, as a rule): the target must survive with its
# verdict ok; memattach either succeeds (exit 0) or refuses (exit 1 with a
# message that mentions seccomp).  The table of which succeeded and which
# were refused is printed.
# Then a filter that arrives during the hold (LATE_RUNS runs): the fixture
# starts unfiltered (-D) and its ctl thread installs the allow-list without
# restart_syscall, on every thread (TSYNC), while worker_0 is held by a
# stats or purge --tid (the test build pauses 300 ms before each call):
# the give-back's own syscalls (the stub's self-restore: rt_sigpending,
# sigaltstack...) and the sleep's restart_syscall are refused by it.  The
# target must survive, its verdict ok, the command end 0 or name seccomp.
# (An outside attack: 5 of 77 targets killed by sigaltstack, memattach
# exit 0.)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
LATE_RUNS=${LATE_RUNS:-6}
plan $((55 + LATE_RUNS))
need_fixtures seccomp_daemon
SYSCALLS=${SYSCALLS:-"mmap munmap mprotect memfd_create close getpid rt_sigprocmask rt_sigaction 127 15 131"}
VARIANTS=()
for sc in $SYSCALLS; do VARIANTS+=("kill:$sc" "trap:$sc"); done
# allowlist+: an allow-list with what memattach's calls need, so it goes
# ahead; a call set up where the thread sat at a syscall's entry skipped
# that syscall as nr -1, which such a filter kills.
# allowlist+norestart: the same without restart_syscall, as an allow-list
# of only the program's own syscalls is: a thread stopped in a sleep
# resumes through restart_syscall, which killed the process (an outside
# attack: 3 of 3 stats runs).
VARIANTS+=(allowlist allowlist+ allowlist+norestart)
# kill:85: creat, which prof.dump makes (its own syscall on x86-64; the
# binary that judged only openat: 5 of 5 heap-dumps killed the target).
# addr:madvise: kills madvise at an address 0x7fXX........ (XX not 00),
# which memattach can only guess before the call: refused (the binary
# that judged one sample address: its purge killed the target).
VARIANTS+=(kill:85 addr:madvise)
CMDS=(stats heap-dump bins killed purge tid)

start_variant() { # start_variant VARIANT -> pid fd out; 1 if it fails
	local v=$1 args
	case $v in
	allowlist) args=(-l) ;;
	allowlist+) args=(-L) ;;
	allowlist+norestart) args=(-L -R -n 16) ;; # short sweeps: the workers mostly sleep
	addr:madvise) args=(-a kill -c madvise -m 0xff -H) ;;
	*) args=(-a "${v%%:*}" -c "${v#*:}") ;;
	esac
	MALLOC_CONF=$PROF_CONF fix_start seccomp_daemon "${args[@]}" || return 1
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	# every thread is filtered before READY
	local t bad=0
	for t in /proc/"$pid"/task/*/status; do grep -q '^Seccomp:[[:space:]]*2$' "$t" || bad=1; done
	[ "$bad" -eq 0 ] || { echo "# $v: not every thread shows Seccomp: 2"; return 1; }
	bsleep 0.1
	local v0
	v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
	# the fixture lives under its own filter (no memattach yet)
	if ! verdict_ok "$v0" || [ "$(vfield "$v0" sweeps)" = 0 ]; then
		echo "# $v: fixture unhealthy on its own: $v0"
		return 1
	fi
}

cmd_args() {
	E=(MA_NONE=1)
	case $1 in
	stats) A=(stats "$pid") ;;
	# memattach killed in its call: the borrowed thread restores itself
	# with only syscalls the filter allows (or memattach refused first)
	killed) A=(stats "$pid") E=(MEMATTACH_TEST_KILL_AT=call) ;;
	heap-dump) A=(heap-dump "$pid" -o "$TMP/sc.heap") ;;
	bins) A=(bins "$pid" --flush-tcache) ;;
	purge) A=(purge "$pid") ;; # a syscall (its scratch mapping), then calls
	# a worker, stopped (mostly) in its 5 ms nanosleep, which resumes
	# through restart_syscall unless memattach issues it again itself
	tid) A=(stats --tid "$(grep -l '^worker_0$' /proc/"$pid"/task/*/comm | cut -d/ -f5)" "$pid") ;;
	esac
}

n_ok=0 n_refused=0 n_bad=0
declare -A RESULT
for v in "${VARIANTS[@]}"; do
	if ! start_variant "$v"; then
		fail "seccomp $v: fixture did not start healthy under its filter"
		continue
	fi
	row="" vbad=0
	for c in "${CMDS[@]}"; do
		if ! alive "$pid"; then
			exec {fd}>&-
			start_variant "$v" || { row+=" $c=no-target"; vbad=1; continue; }
		fi
		cmd_args "$c"
		env "${E[@]}" timeout -s KILL 30 "$MA_T" "${A[@]}" >/dev/null 2>"$TMP/run.err"; rc=$?
		msg=$(head -1 "$TMP/run.err" | cut -c1-140)
		bsleep 0.1
		if ! alive "$pid"; then
			fixture_died "$pid" "$(dirname "$out")"
			outcome="TARGET-DIED(${DIED_WHY:0:120})"
		else
			vv=$(fix_cmd "$pid" "$fd" "$out" verdict)
			if ! verdict_ok "$vv"; then
				outcome="VERDICT-BAD($vv)"
			elif [ "$rc" -eq 0 ] && [ "$c" != killed ]; then
				outcome=ok
			elif [ "$rc" -eq 137 ] && [ "$c" = killed ]; then
				outcome=ok
			elif [ "$rc" -eq 1 ] && grep -qi seccomp "$TMP/run.err"; then
				outcome=refused
			else
				outcome="exit-$rc-without-naming-seccomp($msg)"
			fi
		fi
		case $outcome in
		ok) n_ok=$((n_ok + 1)) ;;
		refused) n_refused=$((n_refused + 1)) ;;
		*) n_bad=$((n_bad + 1)) vbad=1 ;;
		esac
		RESULT[$v,$c]=$outcome
		row+=" $c=$outcome"
	done
	check "seccomp $v:$row" [ "$vbad" -eq 0 ]
	if alive "$pid"; then
		fix_quit "$pid" "$fd"; rc=$?
		check "seccomp $v: fixture exits cleanly (status $rc)" [ "$rc" -eq 0 ]
	else
		exec {fd}>&-
		reap "$pid"
	fi
done

echo "# table (ok = succeeded, refused = exit 1 naming seccomp; anything else harmed the target or failed unclearly):"
printf '#   %-22s %-10s %-10s %-10s %-10s %-10s %-10s\n' filter "${CMDS[@]}"
for v in "${VARIANTS[@]}"; do
	row=$(printf '#   %-22s' "$v")
	for c in "${CMDS[@]}"; do row+=$(printf ' %-10s' "$(cut -c1-10 <<<"${RESULT[$v,$c]:--}")"); done
	echo "$row"
done
# late_ok HELD ANSWER VERDICT SECCOMP RC: the hold saw the filter come,
# the target is whole, and the command ended 0 or named seccomp.
late_ok() {
	[ "$1" = yes ] && [ "$2" = FILTERED ] && verdict_ok "$3" && [ "$4" = 2 ] &&
		{ [ "$5" -eq 0 ] || { [ "$5" -eq 1 ] && grep -qi seccomp "$TMP/late.err"; }; }
}
# wait_traced TID: until the thread is in a tracing stop (1 after 10 s).
wait_traced() {
	local i st
	for ((i = 0; i < 1000; i++)); do
		st=$(sed 's/.*) //' /proc/"$pid"/task/"$1"/stat 2>/dev/null | cut -d' ' -f1)
		[ "$st" = t ] && return 0
		bsleep 0.01
	done
	return 1
}
for ((r = 1; r <= LATE_RUNS; r++)); do
	c=stats; [ $((r % 2)) -eq 0 ] && c=purge
	if ! MALLOC_CONF=$PROF_CONF fix_start seccomp_daemon -L -R -n 16 -D; then
		fail "filter during the hold, run $r: fixture did not start"
		continue
	fi
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	w=$(tid_of "$pid" worker_0)
	MEMATTACH_TEST_PAUSE_AT=call timeout -s KILL 60 "$MA_T" "$c" --tid "$w" "$pid" \
		>/dev/null 2>"$TMP/late.err" &
	mp=$!
	held=no; wait_traced "$w" && held=yes
	ans=$(fix_cmd "$pid" "$fd" "$out" filter)
	wait "$mp"; rc=$?
	bsleep 0.1
	how="held=$held filter=$ans rc=$rc $(head -1 "$TMP/late.err" | cut -c1-120)"
	if ! alive "$pid"; then
		fixture_died "$pid" "$(dirname "$out")"
		check "filter during the hold, run $r ($c): target alive ($how; ${DIED_WHY:0:120})" false
		exec {fd}>&-
		reap "$pid"
		continue
	fi
	vv=$(fix_cmd "$pid" "$fd" "$out" verdict)
	sc=$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/"$pid"/task/"$w"/status)
	check "filter during the hold, run $r ($c): target alive, verdict ok, worker_0 filtered ($sc), ends 0 or names seccomp ($how)" \
		late_ok "$held" "$ans" "$vv" "$sc" "$rc"
	fix_quit "$pid" "$fd" >/dev/null
done

check "seccomp: $((n_ok + n_refused + n_bad)) runs: $n_ok succeeded, $n_refused refused naming seccomp, $n_bad harmed the target or failed unclearly" [ "$n_bad" -eq 0 ]
report_time
