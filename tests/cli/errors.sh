#!/usr/bin/env bash
# Bad input gets one clear message on stderr (one line, or its continuation
# lines when longer than the terminal) and the documented exit status: 1
# when the operation fails on the target, 2 for usage errors.
. "$(dirname "$0")/../lib/common.sh"
plan 56

# expect NAME STATUS PATTERN CMD...: exit status and one stderr message matching PATTERN.
expect() {
	local name=$1 want=$2 pat=$3 rc lines; shift 3
	"$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
	unwrapped "$TMP/err" >"$TMP/msg"
	lines=$(wc -l <"$TMP/msg")
	if [ "$rc" -eq "$want" ] && grep -qE -- "$pat" "$TMP/msg" && [ "$lines" -le 1 ]; then
		pass "$name (exit $rc: $(cat "$TMP/msg"))"
	else
		fail "$name: exit $rc (want $want), stderr: $(head -c 300 "$TMP/err")"
	fi
}

expect "no arguments is a usage error" 2 "a command is required" "$MA"
expect "unknown command" 2 "unknown command 'frobnicate'" "$MA" frobnicate
expect "stats without pid" 2 "a PID is required" "$MA" stats
expect "stats with a non-numeric pid" 2 "'abc' is not a process id .a number from 1 to" "$MA" stats abc
expect "stats with pid 0" 2 "'0' is not a process id" "$MA" stats 0
expect "stats with a negative pid" 2 "'-5' is not a process id" "$MA" stats -5
expect "stats with a pid beyond int" 2 "'99999999999999999999' is not a process id" "$MA" stats 99999999999999999999
expect "export --once with a bad --listen" 2 "--listen 'garbage': expected HOST:PORT" \
	"$MA" export --pid 1 --listen garbage --once
expect "watch with a non-numeric pid" 2 "'x1' is not a process id" "$MA" watch x1
# frag options: another subcommand's option, or a value out of range, is named as such
expect "frag report with start's --shift" 2 "frag report does not take --shift \(an option of frag start\)" \
	"$MA" frag report 1 --shift 0
expect "frag status with report's --top" 2 "frag status does not take --top \(an option of frag report\)" \
	"$MA" frag status 1 --top 3
expect "frag start --shift out of range" 2 "--shift '99': expected N, 0 to 20" "$MA" frag start 1 --shift 99
expect "frag start --max-samples 0" 2 "--max-samples '0': expected N, 1 or more" "$MA" frag start 1 --max-samples 0
expect "frag start --focus without a value" 2 "--focus needs a value" "$MA" frag start 1 --focus
expect "stats with an unknown option" 2 "unknown option '--bogus'" "$MA" stats 1 --bogus
# A bad value names the option, the value and what it wants.
expect "stats --timeout abc" 2 "--timeout 'abc': expected a duration up to 10 minutes: milliseconds, or with a unit" \
	"$MA" stats 1 --timeout abc
expect "stats --timeout out of range" 2 "--timeout '700000': expected a duration up to 10 minutes" \
	"$MA" stats 1 --timeout 700000
expect "stats --timeout without a value" 2 "--timeout needs a value: a duration" "$MA" stats 1 --timeout
expect "stats --timeout 11m (past 10 minutes)" 2 "--timeout '11m': expected a duration up to 10 minutes" "$MA" stats 1 --timeout 11m
expect "stats --timeout with an unknown unit" 2 "--timeout '2d': expected a duration" "$MA" stats 1 --timeout 2d
expect "stats --json with --format openmetrics" 2 "--json and --format openmetrics: choose one output" \
	"$MA" stats 1 --json --format openmetrics
expect "aggregate --top -1" 2 "--top '-1': expected a count, 0 or more \(0 = all\)" "$MA" aggregate x.heap --top -1
expect "export --scrape-timeout 0" 2 "--scrape-timeout '0': expected a duration from 1ms to 10 minutes" \
	"$MA" export --pid 1 --once --scrape-timeout 0
expect "bins --top -3" 2 "--top '-3': expected a count, 0 or more" "$MA" bins 1 --top -3
expect "bins --tid x" 2 "--tid 'x': expected a thread id" "$MA" bins 1 --tid x
expect "watch --interval 0" 2 "--interval '0': expected a duration from 1ms to 60 minutes: milliseconds, or with a unit" \
	"$MA" watch 1 --interval 0
expect "watch --duration 1.5" 2 "--duration '1.5': expected a duration: seconds, or with a unit" "$MA" watch 1 --duration 1.5
expect "heap-dump -o without a value" 2 "-o needs a value" "$MA" heap-dump 1 -o
expect "an option of another command" 2 "unknown option '--top'" "$MA" threads 1 --top 5
expect "a second PID" 2 "unexpected argument '2'" "$MA" stats 1 2
expect "threads without pid" 2 "a PID is required" "$MA" threads

# A pid that does not exist (pid_max + 1 can never be in use).
nopid=$(( $(cat /proc/sys/kernel/pid_max) + 1 ))
expect "nonexistent pid" 1 "no process with pid $nopid" "$MA" stats "$nopid"

# A process without jemalloc.
sleep 30 & plain=$!; track $plain
expect "process without jemalloc" 1 "does not use jemalloc: no mallctl in its mapped objects" \
	"$MA" stats "$plain"
expect "threads on a process without jemalloc" 1 "does not use jemalloc" "$MA" threads "$plain"

# A thread id instead of a process id.
fix_start daemon -t 2 || fail "daemon: start"
dpid=$FIX_PID dfd=$FIX_FD
tid=$(ls /proc/"$dpid"/task | grep -v "^$dpid\$" | head -1)
expect "a thread id is refused" 1 "is a thread of process $dpid" "$MA" stats "$tid"

# A zombie: its parent never reaps it.
bash -c 'sleep 0.2 & echo $! > '"$TMP"'/zpid; exec sleep 30' & zparent=$!; track $zparent
sleep 0.6
zpid=$(cat "$TMP/zpid")
expect "zombie" 1 "exited \(a zombie: its parent has not reaped it yet\)" "$MA" stats "$zpid"

# A stripped static binary: jemalloc is in it but nothing names mallctl.
strip -o "$TMP/stripped_static" "$FIX/daemon_static"
mkfifo "$TMP/sin"
"$TMP/stripped_static" <"$TMP/sin" >"$TMP/sout" 2>&1 & spid=$!; track $spid
exec {sfd}>"$TMP/sin"
sleep 0.5
expect "stripped static binary" 1 "statically into a stripped binary: no mallctl .* no .symtab" "$MA" stats "$spid"

# Already traced by another tracer.
if command -v strace >/dev/null; then
	strace -o /dev/null -p "$dpid" 2>/dev/null & tracer=$!; track $tracer
	for _ in $(seq 50); do grep -q "TracerPid:[[:space:]]*$tracer" /proc/"$dpid"/status && break; sleep 0.1; done
	expect "target already traced" 1 "already traced by pid $tracer" "$MA" stats "$dpid"
	kill "$tracer"; wait "$tracer" 2>/dev/null
else
	fail "target already traced: strace is not installed (make deps installs it)"
fi

# No permission: an unprivileged user may not attach to a root process.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	expect "no permission" 1 "permission" setpriv --reuid=65534 --regid=65534 --clear-groups "$MA" stats "$dpid"
else
	fail "no permission: needs root and setpriv (util-linux) to drop privileges"
fi

v=$(fix_cmd "$dpid" "$dfd" "$FIX_OUT" verdict)
check "daemon survived all of the above ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$dpid" "$dfd"

# Every command answers --help with exit 0.
for c in stats threads bins purge heap-dump stats-dump watch snapshot aggregate stacks diff frag; do
	if "$MA" "$c" --help >"$TMP/h" 2>&1 && grep -q "usage: memattach $c" "$TMP/h"; then
		pass "$c --help"
	else
		fail "$c --help: $(head -c 200 "$TMP/h")"
	fi
done
# A full disk on stdout is a failure, not a silent success.
"$MA" ps --json >/dev/full 2>"$TMP/full.err"; rc=$?
check "ps --json >/dev/full exits 1 saying so (exit $rc: $(head -c 120 "$TMP/full.err"))" \
	exit_and_says "$rc" 1 "cannot write the output" "$TMP/full.err"
"$MA" help stats >"$TMP/hs" 2>&1; rc=$?
check "help stats prints stats's own help (exit $rc)" \
	bash -c "[ $rc -eq 0 ] && head -1 '$TMP/hs' | grep -q '^usage: memattach stats'"
"$MA" --version >"$TMP/v" 2>&1; rc=$?
check "--version prints the release and the agent ABI (exit $rc: $(head -1 "$TMP/v"))" \
	grep -Eq '^memattach [0-9]+\.[0-9]+\.[0-9]+ \(frag agent ABI [0-9]+\)$' "$TMP/v"
"$MA" help nosuch >/dev/null 2>"$TMP/hn"; rc=$?
check "help of an unknown command is a usage error (exit $rc)" \
	exit_and_says "$rc" 2 "unknown command" "$TMP/hn"
