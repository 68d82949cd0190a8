#!/usr/bin/env bash
# tests/attach/width_live.sh - every command's text fits a terminal of 100
# columns (TEXT_WIDTH, tests/lib/common.sh) against live targets: the demo daemon
# with heap profiling (C) and without, the C++ daemon, epolld (its only
# thread waits in epoll_wait: --strict refuses it), the sysc fixture (a
# thread in recv with a timeout, refused even with --tid), manythreads
# (a coroutine and a signal-handler thread, never safe), a process without
# jemalloc and one that does not exist; then the offline commands on the
# dumps and snapshots taken.  Every command of 'memattach --help' and every
# frag subcommand must have a scenario here (a new command fails until it
# has one).  A C++ name is never broken, and may alone be longer than a
# line (marked "names: ").  Counted are display columns (UTF-8 characters) on stdout and
# stderr; JSON, OpenMetrics and --folded are machine formats and not run
# (export --once is run for its messages: only its stderr is text).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
need_fixtures daemon daemon_cxx epolld sysc manythreads
PROF=prof:true,prof_active:true,prof_final:false,lg_prof_sample:17

MALLOC_CONF=$PROF fix_start daemon -t 4 || { fail "daemon: start"; exit 1; }
P=$FIX_PID
fix_start daemon -t 2 || { fail "daemon (no prof): start"; exit 1; }
N=$FIX_PID
MALLOC_CONF=$PROF fix_start daemon_cxx -t 2 || { fail "daemon_cxx: start"; exit 1; }
X=$FIX_PID
fix_start epolld || { fail "epolld: start"; exit 1; }
E=$FIX_PID
fix_start sysc || { fail "sysc: start"; exit 1; }
S=$FIX_PID RECV=$(tid_of "$FIX_PID" sc_idlerecv)
fix_start manythreads -t 2 -c -a -z 1 || { fail "manythreads: start"; exit 1; }
M=$FIX_PID CORO=$(tid_of "$FIX_PID" coro) ALT=$(tid_of "$FIX_PID" altstack)
sleep 1000 & J=$! # no jemalloc
track "$J"
NOPID=999999999
L=127.0.0.1:1 # export --once never listens

printf '#!/bin/sh\necho %s\n' "$P" >"$TMP/abpid" && chmod +x "$TMP/abpid" # ab's --pid: the daemon
# In order: the later ones read what the earlier ones wrote.
scenarios=(
	"stats $P" "stats $X" "stats $N --tid $N" "stats $S --tid $RECV" "stats $M --tid $CORO --timeout 200"
	"stats $J" "stats $NOPID" "stats $P --tid 1"
	"threads $P" "names: threads $X" "threads $E" "threads $S" "threads $M" "threads $J"
	"bins $P" "bins $P --flush-tcache" "bins $S --flush-tcache --strict" "bins $M --tid $ALT --timeout 200"
	"purge $P" "purge $E"
	"heap-dump $P -o $TMP/a.heap" "heap-dump $X -o $TMP/x.heap" "heap-dump $N -o $TMP/n.heap"
	"stats-dump $P -o $TMP/s.json" "stats-dump $J -o $TMP/j.json"
	"watch $P --interval 100 --duration 1 --out $TMP/w" "watch $N --interval 100 --duration 1 --out $TMP/wn"
	"snapshot $P -o $TMP/snapA" "snapshot $N -o $TMP/snapN"
	"heap-dump $P -o $TMP/b.heap" "snapshot $P -o $TMP/snapB"
	"export --pid $NOPID --once --listen $L" "export --pid $J --pid $E --strict --once --listen $L"
	"aggregate $TMP/a.heap" "aggregate $TMP/a.heap --stats $TMP/s.json" "names: aggregate $TMP/x.heap"
	"aggregate $TMP/a.heap --pid $P" "aggregate $TMP/w/peak.heap --cum"
	"stacks $TMP/a.heap op" "stacks $TMP/a.heap worker --any-frame" "names: stacks $TMP/x.heap Worker"
	"diff $TMP/a.heap $TMP/b.heap" "diff $TMP/snapA $TMP/snapB" "diff $TMP/snapA $TMP/snapN"
	"frag start $P" "frag status $P" "frag report $P -o $TMP/f.rep" "frag report --from $TMP/f.rep"
	"frag stop $P" "frag status $P" "frag report $P" "frag start $X --focus 48" "names: frag report $X"
	"frag stop $X" "frag start $J"
	"profile start $P --rate 4096" "profile status $P" "heap-dump $P -o $TMP/p.heap" "aggregate $TMP/p.heap"
	"profile start $P" "profile stop $P" "profile status $P" "profile stop $P"
	"ps" "ps daemon"
	"ab -a true -b true --pid $TMP/abpid --lifecycle reuse --runs 2" "ab -a false -b true --pid $TMP/abpid"
)
mapfile -t cmds < <(ma_commands)
missing=()
for c in "${cmds[@]}"; do
	subs=$(ma_subcommands "$c")
	for s in ${subs:-""}; do
		w="$c${s:+ $s}"
		found=0
		for sc in "${scenarios[@]}"; do [[ "${sc#names: } " == "$w "* ]] && found=1; done
		[ $found = 1 ] || missing+=("$w")
	done
done
plan $((2 + ${#scenarios[@]} + 1))
check "every command of memattach --help has a scenario here (missing: ${missing[*]:-none})" \
	[ ${#missing[@]} -eq 0 ]

for sc in "${scenarios[@]}"; do
	if [[ $sc == export* ]]; then
		# shellcheck disable=SC2086
		"$MA" $sc >/dev/null 2>"$TMP/export.err"
		wide=$(wider_lines "$TMP/export.err")
		check "$sc: its messages fit $TEXT_WIDTH columns${wide:+: $wide}" [ -z "$wide" ]
		continue
	fi
	# "names: ": C++ names, which may be longer than a line (tests/lib/common.sh, fits)
	names=0
	[[ $sc == "names: "* ]] && names=1 sc=${sc#names: }
	# shellcheck disable=SC2086
	FITS_NAMES=$names fits "${sc%% [0-9/]*}" $sc
done

# The refusal of an event loop's only thread under --strict (it wakes every
# 20 ms: a run may catch it running, and then borrows it): tried until
# refused, each message checked.
refused=0 wide=
for _ in $(seq 30); do
	"$MA" stats "$E" --strict --timeout 100 >"$TMP/e.out" 2>"$TMP/e.err" && continue
	refused=1
	wide=$(wider_lines "$TMP/e.err")
	break
done
check "stats --strict of epolld: refused, and its message fits${wide:+: $wide} ($(head -c 120 "$TMP/e.err"))" \
	[ "$refused" = 1 -a -z "$wide" ]

check "every fixture is still alive" bash -c "for p in $P $N $X $E $S $M; do kill -0 \$p || exit 1; done"
