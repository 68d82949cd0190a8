#!/usr/bin/env bash
# memattach runs at real-time priority for the hold only: it raises its
# own scheduling (SCHED_FIFO 1) before the first stop of a thread and puts
# the old policy back right after the thread is let go.  Read from strace
# of real runs: no PTRACE_SEIZE happens unraised, no ptrace call follows a
# hold's last PTRACE_DETACH before the drop, every raise is dropped, and
# the run ends unraised.  A user without the right to real-time gets the
# lowest nice RLIMIT_NICE permits instead, given back the same way.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 6
need_fixtures holdmeter daemon
command -v strace >/dev/null || { fail "strace missing (make deps)"; exit 1; }

# judge FILE RAISE_RE DROP_RE: the order of raises, drops and ptrace calls
judge() {
	awk -v up="$2" -v down="$3" '
		$0 ~ up && / = 0$/ { if (raised) bad = bad " raised twice;"; raised = 1; raises++; after_detach = 0; next }
		$0 ~ down && / = 0$/ { if (raised) drops++; raised = 0; after_detach = 0; next }
		/ptrace\(PTRACE_SEIZE/ { seizes++; if (!raised) bad = bad " seize at normal priority;" }
		/ptrace\(PTRACE_DETACH/ { after_detach = 1; next }
		/ptrace\(/ { if (after_detach && raised) late++ }
		END {
			if (raised) bad = bad " still raised at exit;"
			if (!seizes) bad = bad " no stop at all;"
			if (raises != drops) bad = bad " " raises " raises, " drops " drops;"
			printf "%d raises, %d seizes%s\n", raises, seizes, bad ? ":" bad : ""
			exit bad ? 1 : 0
		}' "$1"
}

fix_start holdmeter || { fail "holdmeter: start"; exit 1; }
strace -f -o "$TMP/root.st" -e trace=sched_setscheduler,setpriority,ptrace "$MA" stats "$FIX_PID" >/dev/null 2>"$TMP/err"; rc=$?
check "stats as root works (exit $rc: $(head -c 200 "$TMP/err"))" [ "$rc" -eq 0 ]
verdict=$(judge "$TMP/root.st" 'sched_setscheduler\(0, 0x40000001' 'sched_setscheduler\(0, SCHED_OTHER')
check "as root: SCHED_FIFO for the holds only ($verdict)" judge "$TMP/root.st" 'sched_setscheduler\(0, 0x40000001' 'sched_setscheduler\(0, SCHED_OTHER'
check "as root: the raise is SCHED_FIFO priority 1, reset on fork" grep -q 'sched_setscheduler(0, 0x40000001 /\* SCHED_??? \*/, \[1\]) = 0' "$TMP/root.st"

# bins --flush-tcache stops each thread in turn: one raise and drop per hold.
fix_start daemon -t 3 || { fail "daemon: start"; exit 1; }
strace -f -o "$TMP/flush.st" -e trace=sched_setscheduler,setpriority,ptrace "$MA" bins "$FIX_PID" --flush-tcache >/dev/null 2>"$TMP/err"
verdict=$(judge "$TMP/flush.st" 'sched_setscheduler\(0, 0x40000001' 'sched_setscheduler\(0, SCHED_OTHER')
check "bins --flush-tcache: a raise and a drop around each of its holds ($verdict)" \
	judge "$TMP/flush.st" 'sched_setscheduler\(0, 0x40000001' 'sched_setscheduler\(0, SCHED_OTHER'

# A user without the right to real-time (nor to lower its nice value:
# RLIMIT_NICE 0, and this machine lets no one raise that limit), on a
# process of its own: refused, it runs unraised and works.
id ma-eve >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ma-eve
EVE=(setpriv --reuid=ma-eve --regid=ma-eve --clear-groups)
mkfifo "$TMP/eve.in"; chmod 666 "$TMP/eve.in"; chmod 755 "$TMP"
"${EVE[@]}" "$FIX/holdmeter" <"$TMP/eve.in" >"$TMP/eve.out" 2>&1 &
eve_pid=$!; track "$eve_pid"
exec {eve_fd}>"$TMP/eve.in"
for _ in $(seq 100); do grep -q READY "$TMP/eve.out" && break; sleep 0.05; done
mkdir -m 777 "$TMP/eve"
"${EVE[@]}" strace -o "$TMP/eve/st" -e trace=sched_setscheduler,setpriority,ptrace \
	"$MA" stats "$eve_pid" 2>"$TMP/eve.err" >"$TMP/eve.txt"; rc=$?
cp "$TMP/eve/st" "$TMP/eve.st" 2>/dev/null
check "as a user: stats works (exit $rc: $(head -c 200 "$TMP/eve.err"))" grep -q "allocated" "$TMP/eve.txt"
check "as a user: real-time refused (EPERM), nothing else changed, still stops the thread" \
	bash -c "grep -q 'sched_setscheduler(0, 0x40000001.* = -1 EPERM' '$TMP/eve.st' &&
		! grep -q 'setpriority(PRIO_PROCESS, 0, -' '$TMP/eve.st' && grep -q PTRACE_SEIZE '$TMP/eve.st'"
