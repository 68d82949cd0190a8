#!/usr/bin/env bash
# tests/cli/safety_fixtures_selftest.sh - the safety fixtures (fixtures/
# safety.mk) do what tests/attach/safety_*.sh rely on, without memattach:
# each reports progress and a good verdict on its own, the seccomp filters
# really bite, the exec chain completes, and safety_tool's helpers work.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 25
for f in forkloop storm seccomp_daemon timedwait execd safety_tool; do
	[ -x "$FIX/$f" ] || { fail "build/fixtures/$f missing (make fixtures)"; exit 1; }
done

# forkloop: forks and allocates
fix_start forkloop -t 2 -m || { fail "forkloop: start"; exit 1; }
a=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict); bsleep 0.5; b=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
ok=0; [ "$(vfield "$b" forks)" -gt "$(vfield "$a" forks)" ] && verdict_ok "$b" && ok=1
check "forkloop: forks ($(vfield "$a" forks) -> $(vfield "$b" forks)) with a good verdict" [ $ok -eq 1 ]
fix_quit $FIX_PID $FIX_FD; check "forkloop: exits 0" [ $? -eq 0 ]

# storm: everything sent arrives (drained before the verdict)
fix_start storm || { fail "storm: start"; exit 1; }
# Until 3000 RT signals were sent (about 1 s on a quiet machine; a loaded
# one takes longer: no timing is judged, only that the storm gets there).
for _ in $(seq 20); do
	bsleep 1
	v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
	[ "$(vfield "$v" rt_sent)" -ge 3000 ] 2>/dev/null && break
	grep -q '^VERDICT ok' <<<"$v" || break
done
check "storm: $(vfield "$v" rt_sent) RT / $(vfield "$v" usr1_sent) SIGUSR1 sent, none lost, none out of order ($v)" \
	grep -q '^VERDICT ok.* rt_lost=0 rt_out_of_order=0 .*usr1_lost=0 usr1_out_of_order=0 bad_code=0 wrong_thread=0' <<<"$v"
check "storm: the storm is dense (>= 3000 RT signals sent: $(vfield "$v" rt_sent))" [ "$(vfield "$v" rt_sent)" -ge 3000 ]
fix_quit $FIX_PID $FIX_FD; check "storm: exits 0" [ $? -eq 0 ]

# seccomp_daemon: healthy under its filter; the filter bites
for v in kill:getpid trap:getpid kill:mmap allowlist; do
	if [ "$v" = allowlist ]; then args=(-l); else args=(-a "${v%%:*}" -c "${v#*:}"); fi
	fix_start seccomp_daemon "${args[@]}" || { fail "seccomp_daemon $v: start"; continue; }
	pid=$FIX_PID
	check "seccomp_daemon $v: every thread filtered" bash -c "! grep -L '^Seccomp:[[:space:]]*2' /proc/$pid/task/*/status | grep -q ."
	bsleep 0.3
	vv=$(fix_cmd $pid $FIX_FD "$FIX_OUT" verdict)
	ok=0; [ "$(vfield "$vv" sweeps)" -gt 0 ] && verdict_ok "$vv" && ok=1
	check "seccomp_daemon $v: lives under its own filter ($vv)" [ $ok -eq 1 ]
	fix_cmd $pid $FIX_FD "$FIX_OUT" call >/dev/null
	bsleep 0.2
	if alive $pid; then
		fail "seccomp_daemon $v: survived its own filtered call ($(tail -1 "$FIX_OUT"))"
		fix_quit $pid $FIX_FD
	else
		fixture_died $pid "$(dirname "$FIX_OUT")"
		st=$DIED_WHY
		case $v in
		trap:*) check "seccomp_daemon $v: a trapped call is reported ($st)" grep -q 'exit 3: .*SIGSYS: trapped syscall' <<<"$st" ;;
		*) check "seccomp_daemon $v: the filtered call kills it ($st)" [ "$st" = "signal 31" ] ;;
		esac
		exec {FIX_FD}>&-
	fi
done

# timedwait: ~10 timeouts a second
fix_start timedwait || { fail "timedwait: start"; exit 1; }
a=$(vfield "$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)" timeouts); t0=$(now_us)
bsleep 1
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict); b=$(vfield "$v" timeouts); t1=$(now_us)
ms=$(( (t1 - t0) / 1000 ))
# about 10 a second (fewer on a loaded machine: each wakes up late)
ok=0; [ $(( (b - a) * 1000 )) -ge $((ms * 5)) -a $(( (b - a) * 1000 )) -le $((ms * 11)) ] && verdict_ok "$v" && ok=1
check "timedwait: $((b - a)) timeouts of 100 ms in $ms ms ($v)" [ $ok -eq 1 ]
fix_quit $FIX_PID $FIX_FD; check "timedwait: exits 0" [ $? -eq 0 ]

# execd: three generations, same pid, both exec paths
fix_start execd -G 3 -e 50:100 || { fail "execd: start"; exit 1; }
for _ in $(seq 40); do [ "$(grep -c '^READY' "$FIX_OUT")" -ge 4 ] && break; bsleep 0.1; done
bsleep 0.2
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
ok=0; [ "$(grep -c '^READY' "$FIX_OUT")" -eq 4 -a "$(grep -c '^EXEC [0-9] thread' "$FIX_OUT")" -eq 1 ] && grep -q 'VERDICT ok.* generation=3 ' <<<"$v" && ok=1
check "execd: 3 execs (main, thread, main) on one pid, last verdict ok ($v)" [ $ok -eq 1 ]
fix_quit $FIX_PID $FIX_FD; check "execd: exits 0" [ $? -eq 0 ]

# safety_tool
"$TOOL" killat 1000 2000 sleep 5; rc=$?
check "safety_tool killat: kills the command (status $rc)" [ "$rc" -eq 137 ]
"$TOOL" killat 500000 600000 true; rc=$?
check "safety_tool killat: a command that ends first keeps its status ($rc)" [ "$rc" -eq 0 ]
"$TOOL" newpgrp sleep 10 & sp=$!; track $sp
bsleep 0.1
check "safety_tool newpgrp: own process group" [ "$(ps -o pgid= -p $sp | tr -d ' ')" = "$sp" ]
line=$("$TOOL" jobctl $sp 20000 true)
last=$(sed -n 's/^last=\([A-Z]*\).*/\1/p' <<<"$line")
bsleep 0.1
st=$(stopped_tasks $sp)
case $last in
CONT) check "safety_tool jobctl: last SIGCONT, running ($line)" [ "$st" -eq 0 ] ;;
*) check "safety_tool jobctl: last SIG$last, stopped ($line)" [ "$st" -eq 1 ] ;;
esac
{ kill -KILL $sp; wait $sp; } 2>/dev/null
exit 0
