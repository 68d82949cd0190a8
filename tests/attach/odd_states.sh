#!/usr/bin/env bash
# tests/attach/odd_states.sh - odd states of a target are answered at once
# with what to do (a 60 s guard around runs given --timeout 600000 tells
# "at once" from "waited out the deadline"), and the cases that can work do:
# a stopped process; a main thread that called pthread_exit; one thread
# traced by strace; --tid of a jemalloc background thread; a non-dumpable
# process as its own user.  (Zombie, no permission and a process traced as a
# whole: tests/cli/errors.sh.)
. "$(dirname "$0")/../lib/common.sh"
plan 43

# at_once NAME WANT_RC PATTERN CMD...: exit WANT_RC, stderr matching
# PATTERN, well before the 600 s deadline the command was given.
at_once() {
	local name=$1 want=$2 pat=$3 rc; shift 3
	timeout 60 "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
	if [ "$rc" = "$want" ] && says "$pat" "$TMP/err"; then
		pass "$name (exit $rc: $(head -c 300 "$TMP/err"))"
	else
		fail "$name: exit $rc (want $want; 124 = waited), stderr: $(head -c 300 "$TMP/err")"
	fi
}
verdict_ok() { # verdict_ok NAME: the current fixture's own verdict
	check "$1: the target's verdict is ok" grep -q '^VERDICT ok' \
		<(fix_cmd "$FIX_PID" "$FIX_FD" "$FIX_OUT" verdict)
}

# --- a stopped process ---
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
kill -STOP "$FIX_PID"
for _ in $(seq 50); do grep -q '^State:.*T' /proc/"$FIX_PID"/status && break; sleep 0.1; done
at_once "stopped process: stats answers at once" 1 "is stopped \(SIGSTOP or Ctrl-Z\); continue it with 'kill -CONT $FIX_PID'" \
	"$MA" stats "$FIX_PID" --timeout 600000
at_once "stopped process: bins --flush-tcache too" 1 "is stopped" \
	"$MA" bins "$FIX_PID" --flush-tcache --timeout 600000
check "... and it is still stopped (memattach did not continue it)" grep -q '^State:.*T' /proc/"$FIX_PID"/status
kill -CONT "$FIX_PID"
verdict_ok "stopped process"

# --- one thread traced by strace ---
if command -v strace >/dev/null; then
	w=$(tid_of "$FIX_PID" worker_1)
	strace -o /dev/null -p "$w" 2>/dev/null & tracer=$!; track $tracer
	for _ in $(seq 50); do grep -q "TracerPid:[[:space:]]*$tracer" /proc/"$FIX_PID"/task/"$w"/status && break; sleep 0.1; done
	"$MA" threads "$FIX_PID" >"$TMP/th.txt" 2>&1
	check "traced thread: threads lists every thread (exit 0)" \
		test $? -eq 0 -a "$(grep -c '^thread ' "$TMP/th.txt")" -eq "$(ls /proc/"$FIX_PID"/task | wc -l)"
	check "... the traced one as UNSAFE, naming strace" \
		says "^thread $w \"worker_1\".*UNSAFE \(traced by pid $tracer \(strace\)" "$TMP/th.txt" 4
	"$MA" stats "$FIX_PID" --json >"$TMP/s.json" 2>"$TMP/err"
	check "traced thread: stats borrows another thread" \
		test $? -eq 0 -a "$(json_get "$TMP/s.json" thread)" != "$w"
	at_once "traced thread: stats --tid of it answers at once, naming strace" 1 \
		"thread $w \(worker_1\) cannot be borrowed: traced by pid $tracer \(strace\); detach that first" \
		"$MA" stats "$FIX_PID" --tid "$w" --timeout 600000
	kill "$tracer"; wait "$tracer" 2>/dev/null
	verdict_ok "traced thread"
else
	fail "strace is not installed (make deps installs it)"
fi
fix_quit "$FIX_PID" "$FIX_FD"

# --- the main thread called pthread_exit ---
fix_start daemon -t 2 -x || { fail "daemon -x: start"; exit 1; }
for _ in $(seq 50); do grep -q '^State:.*Z' /proc/"$FIX_PID"/status && break; sleep 0.1; done
check "main thread exited: /proc says the leader is a zombie" grep -q '^State:.*Z' /proc/"$FIX_PID"/status
"$MA" stats "$FIX_PID" --json >"$TMP/x.json" 2>"$TMP/err"
rc=$?  # before the message's $(...) replaces $?
check "main thread exited: stats works ($(head -c 200 "$TMP/err"))" test "$rc" -eq 0
check "... with the process's VmRSS (read through a live thread)" jcheck '
d = json.load(open(sys.argv[1])); assert d["rss"] > 1 << 20 and d["allocated"] > 0, d' "$TMP/x.json"
"$MA" threads "$FIX_PID" >"$TMP/xt.txt" 2>&1
check "main thread exited: threads works, the main thread 'has exited'" \
	says "^thread $FIX_PID .*UNSAFE \(has exited \(the process lives on in its other threads\)\)" "$TMP/xt.txt" 4
"$MA" bins "$FIX_PID" --flush-tcache --json >"$TMP/xb.json" 2>"$TMP/err"
check "main thread exited: bins --flush-tcache works" test $? -eq 0 -a -s "$TMP/xb.json"
"$MA" snapshot "$FIX_PID" -o "$TMP/xsnap" >/dev/null 2>"$TMP/err"
check "main thread exited: snapshot names the executable" jcheck '
m = json.load(open(sys.argv[1] + "/manifest.json")); assert m["exe"].endswith("/daemon"), m["exe"]' "$TMP/xsnap"
at_once "main thread exited: stats --tid of it answers at once" 1 \
	"thread $FIX_PID \([^)]*\) cannot be borrowed: has exited" "$MA" stats "$FIX_PID" --tid "$FIX_PID" --timeout 600000
# frag and profile load their agent through a memfd taken from a live thread
for c in "frag start" "frag report" "frag stop" "profile start" "profile stop"; do
	$MA $c "$FIX_PID" >/dev/null 2>"$TMP/err"
	rc=$?  # before the message's $(...) replaces $?
	check "main thread exited: $c works ($(head -c 200 "$TMP/err"))" test "$rc" -eq 0
done
verdict_ok "main thread exited"
fix_quit "$FIX_PID" "$FIX_FD"

# --- --tid of a jemalloc background thread ---
MALLOC_CONF=background_thread:true fix_start daemon -t 2 || { fail "daemon bg: start"; exit 1; }
for _ in $(seq 50); do bg=$(tid_of "$FIX_PID" jemalloc_bg_thd); [ -n "$bg" ] && break; sleep 0.1; done
check "background_thread:true started a jemalloc_bg_thd ($bg)" test -n "$bg"
at_once "stats --tid of a background thread answers at once" 1 \
	"thread $bg is one of jemalloc's background threads: .* never borrowed" \
	"$MA" stats "$FIX_PID" --tid "$bg" --timeout 600000
"$MA" stats "$FIX_PID" --json >"$TMP/bg.json" 2>"$TMP/err"
check "... without --tid another thread is borrowed" \
	test $? -eq 0 -a "$(cat /proc/"$FIX_PID"/task/"$(json_get "$TMP/bg.json" thread)"/comm)" != jemalloc_bg_thd
verdict_ok "background threads"
fix_quit "$FIX_PID" "$FIX_FD"

# --- --tid of a thread whose whole stack is smaller than a call needs, and
# of a thread whose vfork() child has not exec'd or exited ---
fix_start manythreads -t 1 -k -v || { fail "manythreads -k -v: start"; exit 1; }
small=$(tid_of "$FIX_PID" small) vfk=$(tid_of "$FIX_PID" vforker)
at_once "stats --tid of a thread with a 16 KiB stack answers at once" 1 \
	"thread $small \(small\) cannot be borrowed: less than 16 KiB of its stack" \
	"$MA" stats "$FIX_PID" --tid "$small" --timeout 600000
at_once "stats --tid of a thread in vfork() answers at once" 1 \
	"thread $vfk \(vforker\) cannot be borrowed: waits for its vfork\(\) child" \
	"$MA" stats "$FIX_PID" --tid "$vfk" --timeout 600000
"$MA" threads "$FIX_PID" >"$TMP/v.txt" 2>&1
check "threads: the vfork parent is reported, not stopped" \
	says "^thread $vfk \"vforker\".*UNSAFE \(waits for its vfork\(\) child" "$TMP/v.txt" 4
verdict_ok "small stack, vfork"
fix_quit "$FIX_PID" "$FIX_FD"

# --- an exiting process: exit_group with one thread held at its exit ---
# (PTRACE_O_TRACEEXIT: a tracer keeps the worker stopped at its exit
# event while the rest of the process is gone, the leader a zombie)
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
w=$(tid_of "$FIX_PID" worker_1)
# (python3 itself, not the jcheck helper: $! must be the holder, whose kill lets the exit finish)
python3 - "$w" >"$TMP/hold.out" 2>&1 <<'PY' & holder=$!
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
libc.ptrace.argtypes = [L, L, L, L]
tid = int(sys.argv[1])
if libc.ptrace(0x4206, tid, 0, 0x40) != 0:  # PTRACE_SEIZE, PTRACE_O_TRACEEXIT
    print("seize failed", ctypes.get_errno(), flush=True); sys.exit(1)
print("SEIZED", flush=True)
while True:
    _, st = os.waitpid(tid, 0x40000000)  # __WALL
    if (st >> 16) == 6:  # PTRACE_EVENT_EXIT
        print("AT_EXIT", flush=True)
        time.sleep(60)
    libc.ptrace(7, tid, 0, 0)  # PTRACE_CONT
PY
for _ in $(seq 50); do grep -q SEIZED "$TMP/hold.out" && break; sleep 0.1; done
echo quit >&"$FIX_FD"
for _ in $(seq 100); do grep -q AT_EXIT "$TMP/hold.out" && break; sleep 0.1; done
check "exiting: the process is mid-exit (leader a zombie, worker held at its exit event)" \
	eval 'grep -q AT_EXIT "$TMP/hold.out" && grep -q "^State:.*Z" /proc/$FIX_PID/status'
at_once "exiting: stats answers at once, naming the tracer that holds it" 1 \
	"traced by pid [0-9]+ \(python3\); detach that first" \
	"$MA" stats "$FIX_PID" --timeout 600000
at_once "exiting: frag start too" 1 "traced by pid [0-9]+ \(python3\)" \
	"$MA" frag start "$FIX_PID" --timeout 600000
kill "$holder"; wait "$holder" 2>/dev/null
exec {FIX_FD}>&-
for _ in $(seq 50); do kill -0 "$FIX_PID" 2>/dev/null || break; sleep 0.1; done
wait "$FIX_PID"; rc=$?
check "exiting: once released the process finishes its exit with a good verdict (status $rc)" [ "$rc" -eq 0 ]

# --- a non-dumpable process, as its own (non-root) user ---
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	nd=$TMP/nd; mkdir -m 777 "$nd"; mkfifo -m 666 "$nd/in"
	chmod 755 "$TMP"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$FIX/daemon" -t 1 -D <"$nd/in" >"$nd/out" 2>&1 & ndpid=$!; track $ndpid
	exec {ndfd}>"$nd/in"
	for _ in $(seq 50); do grep -q '^READY' "$nd/out" && break; sleep 0.1; done
	at_once "non-dumpable, as its user: refused at once, saying why and what to do" 1 \
		"is not dumpable \(it called prctl\(PR_SET_DUMPABLE, 0\).*only root \(CAP_SYS_PTRACE\) may attach" \
		setpriv --reuid=65534 --regid=65534 --clear-groups "$MA" stats "$ndpid" --timeout 600000
	"$MA" stats "$ndpid" --json >"$TMP/nd.json" 2>"$TMP/err"
	check "non-dumpable, as root: works" test $? -eq 0 -a -s "$TMP/nd.json"
	check "non-dumpable: the target's verdict is ok" grep -q '^VERDICT ok' \
		<(fix_cmd "$ndpid" "$ndfd" "$nd/out" verdict)
	fix_quit "$ndpid" "$ndfd"
else
	fail "non-dumpable: needs root and setpriv (util-linux)"
fi

# --- a process of a non-root user, attached by that user after root did ---
# (the user's lock file cannot go into root's directory; the re-read of the
# maps without map_files once read /proc/0/maps: both found by an outside attack)
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	ud=$TMP/ud; mkdir -m 777 "$ud"; mkfifo -m 666 "$ud/in"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$FIX/daemon" -t 2 <"$ud/in" >"$ud/out" 2>&1 & udpid=$!; track $udpid
	exec {udfd}>"$ud/in"
	for _ in $(seq 50); do grep -q '^READY' "$ud/out" && break; sleep 0.1; done
	"$MA" stats "$udpid" >/dev/null 2>&1
	as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	as_user "$MA" stats "$udpid" --json >"$ud/s.json" 2>"$ud/err"; rc=$?
	check "non-root user, after a root run: stats works (exit $rc: $(head -c 200 "$ud/err"))" \
		test "$rc" -eq 0 -a "$(json_get "$ud/s.json" allocated)" -gt 0
	as_user "$MA" bins "$udpid" --flush-tcache --json >"$ud/b.json" 2>"$ud/err"; rc=$?
	check "non-root user: bins --flush-tcache works (exit $rc: $(head -c 200 "$ud/err"))" test "$rc" -eq 0
	check "non-root user: the target's verdict is ok" grep -q '^VERDICT ok' \
		<(fix_cmd "$udpid" "$udfd" "$ud/out" verdict)
	fix_quit "$udpid" "$udfd"
else
	fail "non-root user: needs root and setpriv (util-linux)"
	fail "non-root user: bins"
	fail "non-root user: verdict"
fi

# --- a process started from an executable its user cannot read (mode 711) ---
# Runs on one process take turns on its /proc/PID/personality, which the
# process's own user can open whether or not it can read the executable:
# that user's runs and root's, at once, all work (before the run lock was
# per process, the user's runs overlapped root's and the target died with
# SIGSEGV in 5 of 7 trials; then they were refused).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	xd=$TMP/xd; mkdir -m 755 "$xd"; mkfifo -m 666 "$xd/in"; cp "$FIX/daemon" "$xd/daemon711"; chmod 711 "$xd/daemon711"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$xd/daemon711" -t 2 -P <"$xd/in" >"$xd/out" 2>&1 & xpid=$!; track $xpid
	exec {xfd}>"$xd/in"
	for _ in $(seq 50); do grep -q '^READY' "$xd/out" && break; sleep 0.1; done
	( for _ in $(seq 40); do "$MA" stats "$xpid" --json >/dev/null 2>&1 || echo fail; done ) >"$xd/root.log" &
	rl=$!
	worked=0
	for _ in $(seq 40); do
		setpriv --reuid=65534 --regid=65534 --clear-groups "$MA" stats "$xpid" >/dev/null 2>"$xd/err" &&
			worked=$((worked + 1))
	done
	wait "$rl"
	check "unreadable executable: the user's runs work, 40 of 40 ($worked; $(head -c 160 "$xd/err"))" \
		[ "$worked" -eq 40 ]
	check "unreadable executable: root's runs at the same time all work ($(grep -c fail "$xd/root.log") failed)" \
		[ ! -s "$xd/root.log" ]
	check "unreadable executable: the target's verdict is ok" grep -q '^VERDICT ok' \
		<(fix_cmd "$xpid" "$xfd" "$xd/out" verdict)
	fix_quit "$xpid" "$xfd"
else
	fail "unreadable executable: needs root and setpriv (util-linux)"
	fail "unreadable executable: root runs"
	fail "unreadable executable: verdict"
fi
