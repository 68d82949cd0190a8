#!/usr/bin/env bash
# Messages that say what was seen and what would help.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 27
need_fixtures epolld

# One epoll loop for all: its only thread waits in epoll_wait with no
# timeout (-w -1), so it never runs unless a command comes or memattach
# stops it.  Heap profiling on, so that heap-dump gets as far as a borrow.
MALLOC_CONF=prof:true,prof_active:true fix_start epolld -w -1 || { fail "epolld: start"; exit 1; }
pid=$FIX_PID

# 1. A longer --timeout is advised only where waiting can help.  With
# --strict, epolld's only thread can never be borrowed: the refusal says
# so and what helps (--tid, or no --strict) even when the deadline passes
# first (--timeout 5), never "raise --timeout".
"$MA" stats "$pid" --strict --timeout 5 >/dev/null 2>"$TMP/strict.err"; rc=$?
check "--strict on an epoll loop, deadline first: refused (exit $rc: $(head -c 400 "$TMP/strict.err"))" \
	[ "$rc" -eq 1 ]
check "... saying what helps (--tid $pid, or no --strict)" \
	says "--tid $pid borrows it, or leave out --strict" "$TMP/strict.err"
check "... and not a longer --timeout, which cannot" bash -c "! grep -q -- --timeout '$TMP/strict.err'"
check "... and no word of other threads, of which it has none (an outside attack saw 'the others are')" \
	eval '! says "the others" "$TMP/strict.err" && [ "$(ls /proc/$pid/task | wc -l)" -eq 1 ]'

# 5. threads says what a run with the same options would do: the loop's
# thread, in epoll_wait, is borrowed by a plain run (its wait issued
# again), and with --strict only when named; it used to say UNSAFE.
"$MA" threads "$pid" >"$TMP/th.txt" 2>&1
check "threads: the epoll loop's thread 'OK, WAIT RE-ISSUED' ($(grep "^thread $pid" "$TMP/th.txt" | head -c 200))" \
	says "^thread $pid \"epolld\" state S, in epoll_wait: OK, WAIT RE-ISSUED \(" "$TMP/th.txt" 4
"$MA" stats "$pid" --json >"$TMP/s.json" 2>"$TMP/s.err"; rc=$?
check "... and a plain stats does borrow it (exit $rc)" \
	bash -c "[ $rc -eq 0 ] && grep -q '\"thread\": *$pid' '$TMP/s.json'"
"$MA" threads "$pid" --strict >"$TMP/ths.txt" 2>&1
check "threads --strict: 'ONLY WITH --tid' ($(grep "^thread $pid" "$TMP/ths.txt" | head -c 200))" \
	says "^thread $pid \"epolld\" state S, in epoll_wait: ONLY WITH --tid \(.*--tid $pid" "$TMP/ths.txt" 4
"$MA" threads "$pid" --json >"$TMP/th.json" 2>&1
check "threads --json: verdict wait_reissued" \
	jcheck 't=json.load(open(sys.argv[1]))["threads"][0]; assert t.get("verdict")=="wait_reissued", t' "$TMP/th.json"

# 6. Every option a command mentions is one it takes (its --help lists it):
# export offered --tid and rejected it, aggregate --pid offered
# --allow-eintr-wait.  Each command that borrows a thread runs with
# --strict on the loop: its only thread can never be borrowed, and each
# refusal names its options.
dump=$ROOT/fixtures/dumps/prof_c.heap
live_cmds=(
	"stats $pid" "bins $pid" "purge $pid" "heap-dump $pid -o $TMP/h.heap"
	"stats-dump $pid -o $TMP/sd.json" "snapshot $pid -o $TMP/snap"
	"watch $pid --duration 1 --interval 300 --out $TMP/w" "frag start $pid" "frag report $pid"
	"frag stop $pid" "export --once --pid $pid --listen 127.0.0.1:0" "aggregate $dump --pid $pid"
	"threads $pid"
)
said=0
for c in "${live_cmds[@]}"; do
	name=${c%% *}
	# shellcheck disable=SC2086
	"$MA" $c --strict >"$TMP/o.txt" 2>&1
	"$MA" "$name" --help >"$TMP/help.txt" 2>&1
	opts=$(grep -o -- '--[a-z][a-z-]*' "$TMP/o.txt" | sort -u | grep -vx -- --help | tr '\n' ' ')
	missing=
	for o in $opts; do grep -qE -- "$o([^a-z-]|\$)" "$TMP/help.txt" || missing+=" $o"; done
	[ -n "$opts" ] && said=$((said + 1))
	check "$name --strict: every option it mentions is in its --help (${opts:-none}${missing:+; not there:$missing})" \
		[ -z "$missing" ]
done
check "the refusals named options ($said of ${#live_cmds[@]} commands did)" [ "$said" -eq "${#live_cmds[@]}" ]
v=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
check "epolld: no EINTR, no corrupt object ($v)" grep -q "^VERDICT ok .*eintr=0" <<<"$v"
fix_quit "$pid" "$FIX_FD"

# 8. Borrowing (--tid) a thread that never called into jemalloc creates its
# allocator state, and with background threads on, a new arena's
# background thread and mappings (max_background_threads above the threads
# already running, so that one can start): the run says so, with what the
# process gained -- here the same as counted around the run from outside.
MALLOC_CONF=background_thread:true,max_background_threads:64 fix_start manythreads -t 2 -z 1 ||
	{ fail "manythreads: start"; exit 1; }
pid=$FIX_PID
bare=$("$MA" threads "$pid" | sed -n 's/^thread \([0-9]*\) .*never called into jemalloc.*/\1/p' | head -1)
t0=(/proc/"$pid"/task/*) m0=$(wc -l <"/proc/$pid/maps")
"$MA" stats "$pid" --tid "$bare" >/dev/null 2>"$TMP/fresh.err"; rc=$?
t1=(/proc/"$pid"/task/*) m1=$(wc -l <"/proc/$pid/maps")
dt=$((${#t1[@]} - ${#t0[@]})) dm=$((m1 - m0))
check "stats --tid of a thread with no allocator state says the run created it (exit $rc: $(head -c 300 "$TMP/fresh.err"))" \
	says "thread $bare had never called into jemalloc: this run created its allocator state" "$TMP/fresh.err"
# What the run says it left, at its end: never more than counted from
# outside just after it (a background thread the run caused may start
# after its last count, seen under 8 CPU hogs), and something.
gain=$(unwrapped "$TMP/fresh.err" | sed -n 's/.*has \([+-][0-9]*\) threads\{0,1\} ([+-][0-9]* jemalloc background) and \([+-][0-9]*\) mappings\{0,1\}.*/\1 \2/p' | head -1)
st=${gain% *} sm=${gain#* }
check "... and what the process gained (it says ${st:-?} threads, ${sm:-?} mappings; counted from outside after it: $(printf '%+d' $dt), $(printf '%+d' $dm))" \
	eval '[ -n "$gain" ] && [ "$st" -ge 0 ] && [ "$st" -le "$dt" ] && [ "$sm" -gt 0 ] && [ "$sm" -le "$dm" ]'

fix_quit "$pid" "$FIX_FD"

# 4. Only state D is uninterruptible: threads of manythreads -v (a vfork
# parent, in D while its child sleeps; the others in S) -- no S thread is
# called uninterruptible, the D one is ranked so.
fix_start manythreads -t 1 -v || { fail "manythreads -v: start"; exit 1; }
"$MA" threads "$FIX_PID" >"$TMP/d.txt" 2>&1
bad=$(unwrapped "$TMP/d.txt" 4 | awk '/^thread / { s = $0 ~ / state S,/ } s && /uninterruptible/' | head -c 200)
check "threads: no thread in state S is called uninterruptible (${bad:-none})" [ -z "$bad" ]
check "... the vfork parent, in state D, is ranked 'uninterruptible'" \
	bash -c "$(declare -f unwrapped); unwrapped '$TMP/d.txt' 4 | grep -A1 '\"vforker\" state D' | grep -q 'borrow order [0-9]*: uninterruptible'"
fix_quit "$FIX_PID" "$FIX_FD"

