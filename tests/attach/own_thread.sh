#!/usr/bin/env bash
# frag start and stop doing their work (the agent's load, its tables, the
# GOT pages) in a thread of memattach's own (include/ownthread.h; the
# default): a thread of the program is held only for the call that makes it.  Checked:
#   - every start and stop says own_thread, on daemon and on fragchurn
#     (threads made and ended without pause), and names the program's
#     longest hold (hold_max_ns, no bound: this machine may be loaded);
#   - the thread is gone once the command has returned: the process has
#     the threads it had before;
#   - daemon -u calls setgid() every millisecond, which waits (holding
#     the thread-stack lock pthread_create takes) until every thread has
#     taken libc's SIGSETXID: every run ends 0, the calls go on through
#     runs and kills, the verdict stays ok;
#   - memattach SIGKILLed at random instants of start and stop (RUNS
#     each): the target survives, its verdict stays ok, setgid goes on,
#     and within the thread's sleep (10 s) no thread of ours is left;
#   - --tid: the named thread does the work (own_thread false), and the
#     hold's wait for a CPU it reports is within the kernel's count;
#   - a daemon of a user of its own whose RLIMIT_NPROC leaves it one
#     thread more: our thread would take it (the program's next
#     pthread_create would fail), so a thread of the program does the work
#     and the command says why; with room to spare, our thread does it.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 18
need_fixtures daemon fragchurn safety_tool
RUNS=${RUNS:-20}
cd "$TMP" || exit 1
jkey() { sed -n "s/.*\"$1\":\\([^,}]*\\).*/\\1/p" "$2"; }

fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
n0=$(ntasks "$pid")

# wait_tasks N SECONDS: until PID has N threads (0) or SECONDS pass (1).
wait_tasks() {
	local i
	for ((i = 0; i < $2 * 100; i++)); do
		[ "$(ntasks "$pid")" -eq "$1" ] && return 0
		bsleep 0.01
	done
	return 1
}
# setxid_moves: the setgid() calls completed grow (within 10 s).
setxid_moves() {
	local a b i
	a=$(vfield "$(fix_cmd "$pid" "$fd" "$out" verdict)" setxid)
	for ((i = 0; i < 100; i++)); do
		bsleep 0.1
		b=$(vfield "$(fix_cmd "$pid" "$fd" "$out" verdict)" setxid)
		[ "${b:-0}" -gt "${a:-0}" ] && return 0
	done
	return 1
}

# own_or_late C [LOG]: command C's answer ran in our own thread, or says it
# could not because no thread was ready within its time (a loaded machine)
# or the maker met a loader lock (the program's thread then did the work,
# as the command said).  Other
# reasons go to LOG (fails.txt) and count as a failure.
own_or_late() {
	local why
	[ "$(jkey own_thread "$1.json")" = true ] && return 0
	why=$(tr -s '\n ' '  ' <"$1.err" | grep -o "could not make a thread of its own: .*")
	# also: the maker given up at a loader lock (a churning program's
	# thread creations hold the thread-stack lock in turn)
	grep -Eq "within [0-9]* ms|had to wait for a lock kept in glibc's dynamic loader" <<<"$why" && return 0
	echo "$1: ${why:-own_thread false, no reason given}" >>"${2:-fails.txt}"
	return 1
}

own=0 holds="" extra=0
for i in $(seq 5); do
	for c in start stop; do
		"$MA" frag "$c" "$pid" --json >"$c.json" 2>"$c.err" || echo "$c: $(head -1 "$c.err")" >>fails.txt
		own_or_late "$c" && own=$((own + 1))
		holds="$holds $(jkey hold_max_ns "$c.json")"
		wait_tasks "$n0" 5 || extra=$((extra + 1)) # ended, it exits at once; else it sleeps 10 s
	done
done
check "daemon: 10 of 10 starts and stops ran in a thread of memattach's own or said none was ready in time ($own; $(head -1 fails.txt 2>/dev/null))" [ "$own" -eq 10 ]
echo "# the program's longest hold per run (ns):$holds"
check "daemon: each names the program's longest hold (hold_max_ns)" eval '[ "$(wc -w <<<"$holds")" -eq 10 ]'
check "daemon: no thread of ours left once a command returned ($extra runs left one; $n0 threads)" [ "$extra" -eq 0 ]

# Killed at random instants (the window: one normal run's length).
killed=0 other=0
for c in start stop; do
	e=$("$TOOL" killat -v 60000000 60000000 "$MA" frag "$c" "$pid" 2>&1 >/dev/null | sed -n 's/.*elapsed_us=\([0-9]*\).*/\1/p' | tail -1)
	w=${e:-50000}
	for _ in $(seq "$RUNS"); do
		"$MA" frag "$c" "$pid" >/dev/null 2>&1 # the state the killed run expects, if it can
		{ "$TOOL" killat 0 "$w" "$MA" frag "$c" "$pid" >/dev/null 2>&1; } 2>/dev/null
		case $? in 137) killed=$((killed + 1)) ;; 0 | 1) ;; *) other=$((other + 1)) ;; esac
		alive "$pid" || break 2
	done
done
check "daemon: $((2 * RUNS)) runs killed at random instants ($killed killed, $other odd exits), the target alive" \
	eval 'alive "$pid" && [ "$killed" -gt 0 ] && [ "$other" -eq 0 ]'
check "daemon: within the thread's sleep no thread of ours is left ($(ntasks "$pid") threads, $n0 before)" wait_tasks "$n0" 15
"$MA" frag stop "$pid" >/dev/null 2>&1
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "daemon: verdict ok after all ($v)" verdict_ok "$v"

# --tid: the thread named does the work.
tid=$(tid_of "$pid" worker_0)
# ... and its hold's wait for a CPU (hold_max_cpu_wait_ns): within the
# hold, and within what the kernel counted for that thread over the whole
# command (the second field of its schedstat, read before and after).
wait_of() { awk '{ print $2 }' "/proc/$pid/task/$1/schedstat" 2>/dev/null; }
w0=$(wait_of "${tid:-0}")
"$MA" frag start "$pid" --tid "${tid:-0}" --json >tid.json 2>tid.err
w1=$(wait_of "${tid:-0}")
check "--tid: the named thread does the work (own_thread $(jkey own_thread tid.json); $(head -1 tid.err))" \
	[ "$(jkey own_thread tid.json)" = false ]
cw=$(jkey hold_max_cpu_wait_ns tid.json) hold=$(jkey hold_max_ns tid.json)
check "--tid: the hold's wait for a CPU (${cw:-none} ns) is within the hold (${hold:-none} ns) and the thread's own count over the command ($((${w1:-0} - ${w0:-0})) ns)" \
	eval '[ -n "$cw" ] && [ -n "$w0" ] && [ -n "$w1" ] && [ "$cw" -le "$hold" ] && [ "$cw" -le $((w1 - w0)) ]'
"$MA" frag stop "$pid" >/dev/null 2>&1
fix_quit "$pid" "$fd"; rc=$?
check "daemon exits cleanly (status $rc)" [ "$rc" -eq 0 ]

# A user's RLIMIT_NPROC counts every thread of that user: a daemon of a
# uid no one else uses, its limit set as it starts (root here may lack
# CAP_SYS_RESOURCE, which setting another user's limit needs).  daemon -t 2
# runs 4 threads.
mkdir -p eve && printf '#!/bin/sh\nexec setpriv --reuid=54329 --regid=54329 --clear-groups prlimit --nproc=$NPROC:$NPROC %s "$@"\n' \
	"$FIX/daemon" >eve/daemon && chmod 755 eve/daemon
nproc_run() { # NPROC NAME: frag start/stop on such a daemon; NAME.json/.err, NPROC_V its verdict
	NPROC=$1 FIX=$TMP/eve fix_start daemon -t 2 || { NPROC_V="did not start"; return 1; }
	"$MA" frag start "$FIX_PID" --json >"$2.json" 2>"$2.err"
	"$MA" frag stop "$FIX_PID" >/dev/null 2>&1
	NPROC_V=$(fix_cmd "$FIX_PID" "$FIX_FD" "$FIX_OUT" verdict)
	fix_quit "$FIX_PID" "$FIX_FD"
}
export NPROC
nproc_run 5 tight
check "RLIMIT_NPROC with one thread to spare: a thread of the program does the work, and says why (own_thread $(jkey own_thread tight.json); $(head -1 tight.err))" \
	eval '[ "$(jkey own_thread tight.json)" = false ] && says "RLIMIT_NPROC" tight.err'
v1=$NPROC_V
nproc_run 200 room
check "RLIMIT_NPROC with room to spare: our thread does it (own_thread $(jkey own_thread room.json); $(head -1 room.err))" \
	[ "$(jkey own_thread room.json)" = true ]
check "daemons as uid 54329: verdicts ok ($v1; $NPROC_V)" eval 'verdict_ok "$v1" && verdict_ok "$NPROC_V"'

# daemon -u: setgid() every millisecond.  Its SIGSETXID ends our thread's
# sleep (the work then falls back to a thread of the program), and reaches
# the thread that makes ours while it waits for the thread-stack lock the
# setgid() holds: blocked there, each waited for the other until the
# call's timeout (5 s), and a run after such a call faulted in jemalloc.
fix_start daemon -t 2 -u || { fail "daemon -u: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
: >ufails.txt
for i in $(seq 10); do
	for c in start stop; do
		"$MA" frag "$c" "$pid" >/dev/null 2>"$c.err" || echo "$c: $(head -1 "$c.err")" >>ufails.txt
	done
done
check "daemon -u: 20 starts and stops end 0 ($(wc -l <ufails.txt) failed; $(head -1 ufails.txt))" [ ! -s ufails.txt ]
check "daemon -u: setgid() goes on after them" setxid_moves
for c in start stop start stop; do
	for _ in $(seq 5); do
		{ "$TOOL" killat 0 30000 "$MA" frag "$c" "$pid" >/dev/null 2>&1; } 2>/dev/null
	done
done
check "daemon -u: setgid() goes on after 20 runs killed at random instants" setxid_moves
"$MA" frag stop "$pid" >/dev/null 2>&1
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "daemon -u: verdict ok ($v)" verdict_ok "$v"
fix_quit "$pid" "$fd"

# fragchurn: three spawners making and ending threads without pause.
fix_start fragchurn -c 3 || { fail "fragchurn: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
own=0
for i in $(seq 5); do
	for c in start stop; do
		"$MA" frag "$c" "$pid" --json >"$c.json" 2>"$c.err" || echo "$c: $(head -1 "$c.err")" >>cfails.txt
		own_or_late "$c" cfails.txt && own=$((own + 1))
	done
done
check "fragchurn: 10 of 10 starts and stops ran in a thread of memattach's own or said none was ready in time ($own; $(head -1 cfails.txt 2>/dev/null))" [ "$own" -eq 10 ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "fragchurn: verdict ok ($v)" verdict_ok "$v"
