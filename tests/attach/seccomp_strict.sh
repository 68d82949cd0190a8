#!/usr/bin/env bash
# --strict against a program that sandboxes itself the moment it sees a
# tracer: fixtures/seccomp_daemon -L -R -W -w 3000 starts unfiltered; its
# "watcher" reads every thread's TracerPid without pause and, a random
# 0-3 ms after one shows, installs (TSYNC) an allow-list of what
# memattach's calls need but neither restart_syscall nor the syscalls of
# the stub's own restore path (rt_sigpending, sigaltstack, rt_sigreturn).
# So the filter lands anywhere in a run, also after memattach's last look
# at it, and with two CPU hogs beside the target a released thread waits
# for a CPU before its next syscall.  --strict must survive it: it stops no
# thread asleep in a timed wait (whose restart_syscall the filter kills),
# issues one that entered such a wait just before its stop again as made,
# and gives the thread back through ptrace, not the stub.  Checked: RUNS
# fresh targets (default 60) through `stats --strict`, 20 through
# `stats --strict --tid worker_0` (a sleeper: refused, naming
# restart_syscall, or stopped at a moment it was not asleep in one): no
# target dies, every verdict ok.  The binary before this (its stub's
# restore path under --strict): 7 of 100 targets killed (rt_sigpending),
# so 60 runs miss that about once in 80 suites.  Without --strict the
# same runs still kill about 5 in 100 (README's limits), and `frag
# start` about 3 in 100: only counted.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 9
need_fixtures seccomp_daemon
RUNS=${RUNS:-60}

hogs=()
for i in 1 2; do
	(exec yes >/dev/null) &
	hogs+=($!)
	track $!
done

# killed_at_syscall PID: the syscall a seccomp filter killed PID at (the
# kernel's audit line; "?" if none).
killed_at_syscall() {
	local n
	n=$(dmesg 2>/dev/null | grep "type=1326" | grep " pid=$1 " | tail -1 | sed -n 's/.* syscall=\([0-9]*\).*/\1/p')
	echo "${n:-?}"
}

# Syscalls of the stub's own restore path, run after the give-back
# (rt_sigreturn, rt_sigpending, sigaltstack): where the residual without
# --strict kills.
RESTORE_PATH=" 15 127 131 "

# run_arm N CMD...: N fresh targets through memattach CMD... PID (@TID@:
# worker_0's tid); sets OK REFUSED DEAD BAD WHYS, and DEAD_AT (the
# syscall each died at).
run_arm() {
	local n=$1 i p v args w
	shift
	OK=0 REFUSED=0 DEAD=0 BAD="" WHYS="" DEAD_AT=""
	for ((i = 0; i < n; i++)); do
		MALLOC_CONF=${ARM_CONF:-} fix_start seccomp_daemon -L -R -W -w 3000 || { BAD+=" no start;"; continue; }
		p=$FIX_PID
		args=()
		for w in "$@"; do [ "$w" = @TID@ ] && args+=("$(tid_of "$p" worker_0)") || args+=("$w"); done
		if "$MA" "${args[@]}" "$p" >/dev/null 2>"$TMP/arm.err"; then
			OK=$((OK + 1))
		else
			REFUSED=$((REFUSED + 1))
			WHYS+="$(tr '\n' ' ' <"$TMP/arm.err" | tr -s ' ' | head -c 400)"$'\n'
		fi
		bsleep 0.1 # a thread left to a refused syscall dies within this
		if ! alive "$p"; then
			fixture_died "$p" "$(dirname "$FIX_OUT")"
			DEAD=$((DEAD + 1))
			DEAD_AT+=" $(killed_at_syscall "$p")"
			continue
		fi
		v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
		[[ $v == *"VERDICT ok"* ]] || BAD+=" $v;"
		fix_quit "$p" "$FIX_FD" >/dev/null 2>&1
	done
}

run_arm "$RUNS" stats --strict
check "stats --strict: no target killed by a filter arriving during the run ($DEAD of $RUNS died; $OK read, $REFUSED refused)" \
	[ "$DEAD" -eq 0 ]
check "stats --strict: every verdict ok (${BAD:-all ok})" [ -z "$BAD" ]
check "stats --strict: it reads them (the filter allows its calls: $OK of $RUNS; $(head -1 <<<"$WHYS"))" \
	[ "$OK" -ge $((RUNS * 9 / 10)) ]

run_arm 20 stats --strict --tid @TID@
check "stats --strict --tid worker_0: no target killed ($DEAD of 20 died; $OK read, $REFUSED refused)" \
	[ "$DEAD" -eq 0 ]
check "stats --strict --tid worker_0: every verdict ok (${BAD:-all ok})" [ -z "$BAD" ]
# every refusal is --strict's: the timed wait's restart, or seen running
others=$(grep -v "restart_syscall.*not stopped with --strict\|with --strict only a thread asleep" <<<"$WHYS" | grep -c .)
named=$(grep -c "restart_syscall.*not stopped with --strict" <<<"$WHYS")
check "stats --strict --tid worker_0: refusals name its timed wait's restart ($named) or its running ($((REFUSED - named - others))), none other ($others: $(grep -v 'with --strict' <<<"$WHYS" | head -1))" \
	eval '[ "$named" -gt 0 ] && [ "$others" -eq 0 ]'

# heap-dump: jemalloc's own syscalls in the call (creat, openat, write),
# memattach's memfd_create: none is in that allow-list, so a filter that
# arrives during the run refuses them.  Seen at each syscall's entry (the
# thread stopped, before the kernel's check), one it refuses is made to
# fail instead, and the dump ends with an error: with or without --strict.
ARM_CONF=prof:true run_arm 20 heap-dump --strict -o "$TMP/d.heap"
check "heap-dump --strict: no target killed ($DEAD of 20 died; $OK dumped, $REFUSED refused or failed)" \
	[ "$DEAD" -eq 0 ]
check "heap-dump --strict: every verdict ok (${BAD:-all ok})" [ -z "$BAD" ]
# Without --strict the give-back is the stub's own restore path, where a
# filter landing after memattach's last look still kills (README's
# limits, about 5 in 100): only a death at a syscall of the dump itself
# (creat: 12 of 20 before it was judged) is a failure here.
ARM_CONF=prof:true run_arm 20 heap-dump -o "$TMP/d.heap"
others=""
for n in $DEAD_AT; do [[ $RESTORE_PATH == *" $n "* ]] || others+=" $n"; done
check "heap-dump: no target killed at a syscall of the dump ($DEAD of 20 died, at syscall${DEAD_AT:- none}; the restore path's are README's residual; $OK dumped, $REFUSED refused or failed)" \
	[ -z "$others" ]
mid=$(grep -c "installed during the call" <<<"$WHYS")
echo "# heap-dump: $mid of $REFUSED failures were a syscall of the call refused by the arriving filter"

# Without --strict: counted, not judged (the residual README states).
run_arm 20 stats
echo "# without --strict: $DEAD of 20 targets killed, at syscall${DEAD_AT:- none} ($OK read, $REFUSED refused)"
# frag start's making runs free of syscall stops after its first
# (session_run.c): a filter landing there is not seen before clone3 or
# the end signal's tgkill.  Counted too (--strict makes no thread).
run_arm 20 frag start
echo "# frag start without --strict: $DEAD of 20 targets killed, at syscall${DEAD_AT:- none} ($OK started, $REFUSED refused)"
kill "${hogs[@]}" 2>/dev/null
