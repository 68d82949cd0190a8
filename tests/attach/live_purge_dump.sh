#!/usr/bin/env bash
# tests/attach/live_purge_dump.sh - memattach purge on a fixture that freed
# a known 64 MiB, and heap-dump: on a prof target in a private mount
# namespace (nothing left behind, the dump names the fixture's peak site),
# on a target without prof (exact MALLOC_CONF), and with an unwritable -o.
. "$(dirname "$0")/../lib/common.sh"
plan 33

[ -x "$FIX/frag" ] || { fail "build/fixtures/frag missing (make fixtures)"; exit 1; }
PROF_CONF=prof:true,prof_active:true,prof_final:false

# --- purge ---
fix_start frag -m bigfree || { fail "bigfree fixture start"; exit 1; }
freed=$(sed -n 's/^TRUTH {"freed":\([0-9]*\)}/\1/p' "$FIX_OUT")
"$MA" purge $FIX_PID --json >"$TMP/purge.json"; rc=$?
check "purge exit 0" test $rc -eq 0
py() { jcheck "d=json.load(open('$TMP/purge.json')); $1"; }
check "purge: resident dropped by at least the freed $freed bytes" \
	py "assert -d['delta']['resident'] >= $freed, d['delta']"
check "purge: RSS dropped by at least the freed $freed bytes" \
	py "assert -d['delta']['rss'] >= $freed, d['delta']"
check "purge: allocated unchanged" py "assert d['delta']['allocated'] == 0"
# The freed pages were dirty (decay off in the fixture's arena): dirty held
# them before and fell by them at least, and the parts still add up.
check "purge: dirty held the freed $freed bytes before, and fell by at least as much" \
	py "assert d['before']['dirty'] >= $freed and -d['delta']['dirty'] >= $freed, d"
check "purge: resident = active + dirty + metadata_resident, outside = rss - resident" \
	py "assert all(x['resident'] == x['active'] + x['dirty'] + x['metadata_resident'] and x['outside_jemalloc'] == x['rss'] - x['resident'] for x in (d['before'], d['after'])), d"
check "purge: the purge time is reported" py "assert d['purge_ns'] > 0 and d['held_ns'] >= d['purge_ns']"
"$MA" purge $FIX_PID >"$TMP/purge.txt"
check "purge table shows before/after/delta" grep -q '^resident .*before\|^ *before *after *delta' "$TMP/purge.txt"
# the second purge, just after the first: what it found to return, and that slab waste stays
check "purge says what there was to return, and that slab waste is not returned ($(tail -4 "$TMP/purge.txt" | head -2 | tr '\n' ' '))" \
	bash -c "grep -q 'nothing to return: dirty and muzzy were already 0\|of unused pages (dirty + muzzy) were there to return' '$TMP/purge.txt' && grep -q 'is not something a purge' '$TMP/purge.txt'"
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
check "bigfree fixture verdict ok" grep -q '^VERDICT ok' <<<"$v"
fix_quit $FIX_PID $FIX_FD
check "bigfree fixture exits 0" test $? -eq 0

# --- heap-dump without prof: exact restart instruction, no file ---
fix_start frag -m peak || { fail "peak fixture start"; exit 1; }
"$MA" heap-dump $FIX_PID -o "$TMP/noprof.heap" 2>"$TMP/noprof.err"; rc=$?
check "heap-dump on a non-prof target exits 1" test $rc -eq 1
check "... and names MALLOC_CONF=$PROF_CONF" says "restart it with MALLOC_CONF=$PROF_CONF\$" "$TMP/noprof.err"
check "... in one message" test "$(unwrapped "$TMP/noprof.err" | wc -l)" -eq 1
check "... and writes nothing" test -z "$(ls -A "$TMP" | grep noprof.heap)"
check "... not even a temporary file" test -z "$(ls -A "$TMP" | grep '\.tmp\.')"
fix_quit $FIX_PID $FIX_FD
check "non-prof fixture exits 0" test $? -eq 0

# --- heap-dump of a target in its own mount namespace with a private /tmp ---
d=$(mktemp -d "$TMP/ns.XXXX"); mkfifo "$d/in"
# The fixture is opened before /tmp is covered (the checkout itself may
# live under /tmp) and executed through that descriptor.
MALLOC_CONF=$PROF_CONF unshare -m sh -c 'exec 9<"$0" && mount -t tmpfs memattach-test /tmp && exec /proc/self/fd/9 "$@"' \
	"$FIX/frag" -m peak <"$d/in" >"$d/out" 2>"$d/err" &
NPID=$!; track $NPID
exec {NFD}>"$d/in"
for _ in $(seq 100); do grep -q '^READY' "$d/out" && break; sleep 0.1; done
PID=$(awk '/^READY/{print $2}' "$d/out")
if [ -z "$PID" ]; then
	fail "namespaced fixture start ($(cat "$d/err"))"
else
	check "target sees a private, empty /tmp" test -z "$(ls -A /proc/$PID/root/tmp)"
	p=$(fix_cmd $PID $NFD "$d/out" peak)
	check "fixture peaked ($p)" grep -q '^PEAKED' <<<"$p"
	"$MA" heap-dump $PID -o "$TMP/ns.heap" >"$TMP/ns.out" 2>&1; rc=$?
	check "heap-dump of the namespaced target exits 0 ($(head -c 200 "$TMP/ns.out"))" test $rc -eq 0
	check "dump starts with heap_v2/" grep -q '^heap_v2/' "$TMP/ns.heap"
	check "target's /tmp is still empty" test -z "$(ls -A /proc/$PID/root/tmp)"
	check "no descriptor left open in the target" \
		test -z "$(ls -l /proc/$PID/fd | grep -i memfd)"
	"$MA" aggregate "$TMP/ns.heap" --json >"$TMP/agg.json" 2>"$TMP/agg.err"; rc=$?
	if [ $rc -eq 0 ]; then
		check "the dump parses with aggregate and its top site is peak_site" jcheck '
s=json.load(open(sys.argv[1]))["sites"]
assert s[0]["leaf"].startswith("peak_site"), s[0]["leaf"]' "$TMP/agg.json"
	else
		fail "aggregate could not read the dump: $(cat "$TMP/agg.err")"
	fi
	# --activate on a prof target whose profiling is off
	"$MA" heap-dump $PID -o "$TMP/ns2.heap" --activate >/dev/null 2>&1
	check "heap-dump --activate on an active profile still works" test -s "$TMP/ns2.heap"
	fix_cmd $PID $NFD "$d/out" unpeak >/dev/null
	v=$(fix_cmd $PID $NFD "$d/out" verdict)
	check "namespaced fixture verdict ok" grep -q '^VERDICT ok' <<<"$v"
	echo quit >&$NFD; exec {NFD}>&-
	wait $NPID
	check "namespaced fixture exits 0" test $? -eq 0
fi

# --- prof:true but prof_active:false: --activate turns it on ---
MALLOC_CONF=prof:true,prof_active:false,prof_final:false fix_start frag -m peak ||
	{ fail "inactive fixture start"; exit 1; }
"$MA" heap-dump $FIX_PID -o "$TMP/inactive.heap" 2>"$TMP/inactive.err"
check "inactive profile: a warning says so" grep -q 'inactive' "$TMP/inactive.err"
"$MA" heap-dump $FIX_PID -o "$TMP/act.heap" --activate 2>/dev/null
"$MA" stats $FIX_PID --json >"$TMP/act.json"
check "--activate set prof.active" jcheck '
import json,sys; assert json.load(open(sys.argv[1]))["options"]["prof_active"] is True' "$TMP/act.json"
# --- unwritable output: fails before touching the target ---
"$MA" heap-dump $FIX_PID -o /proc/nonexistent/x.heap 2>"$TMP/unw.err"; rc=$?
check "unwritable -o exits 1 with one message" test $rc -eq 1 -a "$(unwrapped "$TMP/unw.err" | wc -l)" -eq 1
check "... saying it cannot create the file" says "cannot create '/proc/nonexistent/x.heap'" "$TMP/unw.err"
v=$(fix_cmd $FIX_PID $FIX_FD "$FIX_OUT" verdict)
check "inactive fixture verdict ok" grep -q '^VERDICT ok' <<<"$v"
fix_quit $FIX_PID $FIX_FD
check "inactive fixture exits 0" test $? -eq 0
