#!/usr/bin/env bash
# aggregate --pid: the sanity check of a heap dump against stats.allocated
# read live from the process, which must equal what the target reads itself.
. "$(dirname "$0")/../lib/common.sh"
plan 7

MALLOC_CONF=prof:true,prof_active:true,prof_final:false,lg_prof_sample:17 \
	fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
fix_cmd "$pid" "$fd" "$out" quiesce >/dev/null
check "heap-dump of the quiet daemon" "$MA" heap-dump "$pid" -o "$TMP/d.heap"
# The daemon's own reading after the dump: the dump's borrow may leave a
# thread the allocator state profiling keeps per thread (seen under 8 CPU
# hogs, when the borrowed thread was one without it: 3,328 bytes more).
self=$(fix_cmd "$pid" "$fd" "$out" quiesce)
want=$(jcheck 'print(json.loads(sys.argv[1])["allocated"])' "$self")
"$MA" aggregate "$TMP/d.heap" --pid "$pid" --json >"$TMP/a.json" 2>"$TMP/a.err"; rc=$?
check "aggregate --pid exits 0 ($(head -c 200 "$TMP/a.err"))" [ "$rc" -eq 0 ]
got=$(jcheck 'print(json.load(open(sys.argv[1]))["stats"]["allocated"])' "$TMP/a.json" 2>/dev/null)
check "stats.allocated read live ($got) equals the target's own reading ($want)" [ -n "$got" -a "$got" = "$want" ]
ratio=$(jcheck 'print(json.load(open(sys.argv[1]))["stats"]["scaled_over_allocated"])' "$TMP/a.json" 2>/dev/null)
check "the report gives the unsampled/allocated ratio ($ratio)" [ -n "$ratio" ]
"$MA" aggregate "$TMP/d.heap" --pid "$pid" --stats /dev/null >/dev/null 2>&1
check "--pid with --stats is a usage error" [ $? -eq 2 ]
fix_cmd "$pid" "$fd" "$out" resume >/dev/null
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "daemon verdict ok ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$fd"
check "daemon exits cleanly" [ $? -eq 0 ]
