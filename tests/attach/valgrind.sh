#!/usr/bin/env bash
# tests/attach/valgrind.sh - memattach under valgrind (memcheck): every
# command, live and offline, on its success path and on typical failure
# paths (no such process, no jemalloc, a hopeless --tid, a stopped process,
# a device as input), frag start/status/report/stop: zero invalid accesses, zero uses of uninitialised
# bytes (also in what is written into the target), zero leaks.
. "$(dirname "$0")/../lib/common.sh"
plan 36
D=$ROOT/fixtures/dumps

command -v valgrind >/dev/null || { fail "valgrind missing (make deps installs it)"; exit 1; }
# vg NAME CMD...: memattach's own exit status is not judged here, only memcheck's.
vg() {
	local name=$1; shift
	valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
		-q "$MA" "$@" >"$TMP/vg.out" 2>"$TMP/vg.err"
	local rc=$?
	if [ "$rc" -ne 99 ] && ! grep -q '^==[0-9]*== ' "$TMP/vg.err"; then
		pass "valgrind: $name (exit $rc)"
	else
		fail "valgrind: $name: $(grep -m4 '^==[0-9]*== ' "$TMP/vg.err" | tr '\n' ' ')"
	fi
}

MALLOC_CONF=prof:true,prof_active:true,prof_final:false fix_start daemon -t 2 ||
	{ fail "daemon: start"; exit 1; }
pid=$FIX_PID
vg "stats" stats "$pid"
vg "stats --json" stats "$pid" --json
vg "stats --format openmetrics" stats "$pid" --format openmetrics
vg "threads" threads "$pid"
vg "threads --json" threads "$pid" --json
vg "bins --flush-tcache --json" bins "$pid" --flush-tcache --json
vg "purge" purge "$pid"
vg "stats-dump" stats-dump "$pid" -o "$TMP/s.json"
vg "heap-dump" heap-dump "$pid" -o "$TMP/h.heap"
vg "snapshot A" snapshot "$pid" -o "$TMP/snapA"
vg "snapshot B" snapshot "$pid" -o "$TMP/snapB"
vg "watch" watch "$pid" --interval 200 --duration 1 --out "$TMP/w"
vg "export --once" export --pid "$pid" --once --listen 127.0.0.1:1
vg "ps" ps
vg "aggregate --pid" aggregate "$TMP/h.heap" --pid "$pid"
vg "frag start (memfd + dlopen of the agent)" frag start "$pid" --shift 2
vg "frag status --json" frag status "$pid" --json
vg "frag report -o" frag report "$pid" -o "$TMP/f.frag"
vg "frag report --from --json" frag report --from "$TMP/f.frag" --json
vg "frag stop" frag stop "$pid"
vg "frag report without an agent" frag report "$pid"
# failure paths
vg "stats of no process" stats 999999999
sleep 30 & plain=$!; track $plain
vg "stats of a process without jemalloc" stats "$plain"
vg "stats --tid of a thread of another process" stats "$pid" --tid "$plain"
kill -STOP "$pid"
vg "stats of a stopped process" stats "$pid" --timeout 300
kill -CONT "$pid"
vg "bad option value" stats "$pid" --timeout abc
# offline
vg "aggregate (table, svg, pprof, folded)" aggregate "$D/prof_c.heap" --svg "$TMP/f.svg" --pprof "$TMP/f.pb.gz" --folded
vg "aggregate --json --lines" aggregate "$TMP/h.heap" --json --lines
vg "aggregate of a truncated dump" aggregate "$D/prof_c_truncated.heap"
vg "aggregate of /dev/zero" aggregate /dev/zero
vg "stacks" stacks "$D/prof_c.heap" site --json
vg "diff of two dumps" diff "$D/prof_c.heap" "$TMP/h.heap" --json
vg "diff of two snapshots" diff "$TMP/snapA" "$TMP/snapB"
vg "bins --stats" bins --stats "$TMP/s.json" --json
vg "bins --stats of a directory" bins --stats "$TMP"
check "daemon: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$pid" "$FIX_FD"
