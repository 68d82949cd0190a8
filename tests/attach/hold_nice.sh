#!/usr/bin/env bash
# The held thread's nice value (attach/session_nice.c, include/nicekeeper.h):
# raised to -20 from its seize to its release, so that on a busy machine it
# does not queue for a CPU behind its program's other threads, and put back.
# Checked:
#   - strace of stats: the raise comes after PTRACE_SEIZE, the put-back
#     before PTRACE_DETACH, to the thread's own value; --strict raises
#     nothing;
#   - fixtures/nicerace changes its threads' nice values every few hundred
#     microseconds and checks each is still what it set: stats choosing its
#     thread, --tid, and runs SIGKILLed at random instants undo none of them;
#   - a daemon of an unprivileged user at nice 10 with RLIMIT_NICE 0: every
#     thread keeps 10 (the fixtures' own verdict check);
#   - memattach frozen just after the raise (strace delays its setpriority)
#     and SIGKILLed: the thread, let go by the kernel, puts its own value
#     back through the stub (the verdict), nothing left stopped.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 9
need_fixtures daemon nicerace
command -v strace >/dev/null || { fail "strace missing (make deps)"; exit 1; }
KILLS=${KILLS:-40}
cd "$TMP" || exit 1

# --- strace order ---
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
p=$FIX_PID
strace -f -o st.txt -e trace=setpriority,ptrace "$MA" stats "$p" >/dev/null 2>err; rc=$?
raised=$(grep -o "setpriority(PRIO_PROCESS, [0-9]*, -20) = 0" st.txt | head -1 | grep -o "[0-9]*, -20" | cut -d, -f1)
order=$(awk -v t="$raised" '
	$0 ~ "PTRACE_SEIZE, " t "," { s = NR }
	$0 ~ "setpriority\\(PRIO_PROCESS, " t ", -20\\) = 0" { r = NR }
	$0 ~ "setpriority\\(PRIO_PROCESS, " t ", 0\\) = 0" { b = NR }
	$0 ~ "PTRACE_DETACH, " t "," { d = NR }
	END { print (s && r > s && b > r && d > b) ? "ok" : "bad " s " " r " " b " " d }' st.txt)
check "stats: the held thread ($raised) raised after its seize, put back to 0 before its detach ($order; exit $rc)" \
	[ "$rc" = 0 -a "$order" = ok ]
strace -f -o strict.txt -e trace=setpriority "$MA" stats "$p" --strict >/dev/null 2>&1
check "--strict: no setpriority on a thread of the target" \
	bash -c "! grep -q 'setpriority(PRIO_PROCESS, [1-9]' strict.txt"
v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
check "daemon: verdict ok, every thread at its own nice ($v)" verdict_ok "$v"

# --- a program that renices its own threads all the time ---
fix_start nicerace || { fail "nicerace: start"; exit 1; }
p=$FIX_PID
worker=$(for t in /proc/$p/task/*; do [ "$(cat "$t/comm")" = worker_0 ] && echo "${t##*/}"; done)
bad=0
for i in $(seq 20); do "$MA" stats "$p" >/dev/null 2>&1 || bad=$((bad + 1)); "$MA" stats "$p" --tid "$worker" >/dev/null 2>&1 || bad=$((bad + 1)); done
v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
check "nicerace: 20 stats and 20 stats --tid worker_0 keep every nice the program set ($v; $bad failed)" \
	bash -c "[ $bad = 0 ] && [[ '$v' == 'VERDICT ok'* ]]"
for i in $(seq "$KILLS"); do
	"$MA" stats "$p" >/dev/null 2>&1 &
	m=$!
	bsleep "0.0$((RANDOM % 30))"
	kill -KILL "$m" 2>/dev/null
	wait "$m" 2>/dev/null
done
bsleep 1
v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
check "nicerace: $KILLS stats SIGKILLed at random keep every nice the program set ($v)" verdict_ok "$v"
check "nicerace: no thread left stopped or traced" [ "$(stopped_tasks "$p")" = 0 -a "$(traced_tasks "$p")" = 0 ]
fix_quit "$p" "$FIX_FD" >/dev/null

# --- an unprivileged daemon at nice 10 ---
id ma-eve >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ma-eve
mkdir -m 777 eve && mkfifo eve/in && chmod 666 eve/in
setpriv --reuid=ma-eve --regid=ma-eve --clear-groups prlimit --nice=0 nice -n 10 "$FIX/daemon" -t 2 <eve/in >eve/out 2>&1 &
eve=$!; track "$eve"
exec {eve_fd}>eve/in
for _ in $(seq 100); do grep -q READY eve/out && break; bsleep 0.05; done
for i in $(seq 10); do "$MA" stats "$eve" >/dev/null 2>&1; done
v=$(fix_cmd "$eve" "$eve_fd" eve/out verdict)
check "a user's daemon at nice 10, RLIMIT_NICE 0: 10 stats, every thread still at 10 ($v)" verdict_ok "$v"
fix_quit "$eve" "$eve_fd" >/dev/null

# --- memattach killed just after the raise: the stub puts it back ---
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
p=$FIX_PID
strace -f -o fz.txt -e trace=setpriority -e inject=setpriority:delay_exit=1000000 "$MA" stats "$p" >/dev/null 2>&1 &
sp=$!
for _ in $(seq 500); do grep -q -- "-20) = 0 (DELAYED)" fz.txt 2>/dev/null && break; bsleep 0.01; done
held=$(grep -o "setpriority(PRIO_PROCESS, [0-9]*, -20" fz.txt | head -1 | grep -o "[0-9]*, -20" | cut -d, -f1)
at=$(awk '{ print $19 }' "/proc/$p/task/$held/stat" 2>/dev/null)
kill -KILL "$(pgrep -P "$sp" -x memattach)" 2>/dev/null
wait "$sp" 2>/dev/null
bsleep 0.3
v=$(fix_cmd "$p" "$FIX_FD" "$FIX_OUT" verdict)
check "memattach killed with thread ${held:-?} raised (nice ${at:-?} then): the stub put its own back ($v)" \
	bash -c "[ '$at' = -20 ] && [[ '$v' == 'VERDICT ok'* ]]"
check "... and no thread left stopped or traced" [ "$(stopped_tasks "$p")" = 0 -a "$(traced_tasks "$p")" = 0 ]
fix_quit "$p" "$FIX_FD" >/dev/null
