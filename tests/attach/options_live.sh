#!/usr/bin/env bash
# tests/attach/options_live.sh - the options every command shares, on a live
# prof target: durations with units (--timeout 2s, watch --duration 1500ms
# --interval 250ms), -o - (heap-dump and stats-dump write the standard
# output, their summary goes to stderr; snapshot and watch refuse it and
# create nothing), --top 0 = all in aggregate as in bins, --json on the
# commands whose output is a file or folder.
. "$(dirname "$0")/../lib/common.sh"
plan 22

MALLOC_CONF=prof:true,prof_active:true,prof_final:false fix_start daemon -t 2 ||
	{ fail "daemon start"; exit 1; }
P=$FIX_PID
cd "$TMP" || exit 1

"$MA" stats "$P" --timeout 2s --json >stats.json 2>stats.err; rc=$?
check "stats --timeout 2s runs (exit $rc$([ $rc -ne 0 ] && echo ": $(head -1 stats.err)"))" [ "$rc" -eq 0 ]

"$MA" heap-dump "$P" -o - >dump.heap 2>dump.err; rc=$?
check "heap-dump -o - exits 0 (exit $rc)" [ "$rc" -eq 0 ]
check "heap-dump -o -: the dump is on stdout ($(head -c 20 dump.heap | head -1))" grep -q '^heap_v2/' dump.heap
check "heap-dump -o -: its summary is on stderr ($(head -1 dump.err))" grep -q '^wrote the standard output: ' dump.err
"$MA" aggregate dump.heap --json >agg.json 2>agg.err; rc=$?
check "the dump from stdout reads back in aggregate (exit $rc)" [ "$rc" -eq 0 ]

"$MA" stats-dump "$P" -o - >stats_print.json 2>sd.err; rc=$?
check "stats-dump -o - writes malloc_stats_print JSON on stdout (exit $rc)" \
	jcheck "import json; assert 'jemalloc' in json.load(open('stats_print.json'))"

"$MA" snapshot "$P" -o - >/dev/null 2>snap.err; rc=$?
check "snapshot -o - is refused (exit $rc: $(head -1 snap.err))" [ "$rc" -eq 1 ]
"$MA" watch "$P" -o - --duration 1 >/dev/null 2>watch.err; rc=$?
check "watch -o - is refused (exit $rc: $(head -1 watch.err))" [ "$rc" -eq 1 ]
check "neither created a folder named '-'" [ ! -e ./- ]

start=${EPOCHREALTIME/./}
"$MA" watch "$P" -o w --duration 1500ms --interval 250ms >watch.out 2>&1; rc=$?
took=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
# The duration is a bound, not a speed: a loaded machine takes longer to
# start and end, but a watch read as 1500 seconds (or 1500 ms as 1.5 h) never ends here.
check "watch --duration 1500ms --interval 250ms ends by itself (exit $rc, ${took} ms)" \
	[ "$rc" -eq 0 ]
check "it took several samples ($(grep -o '[0-9]* samples' watch.out))" \
	awk '/samples/ { for (i = 1; i < NF; i++) if ($(i+1) ~ /^samples/ && $i + 0 >= 2) ok = 1 } END { exit !ok }' watch.out

# sites NAME ARGS...: how many sites aggregate --json lists with ARGS.
sites() { "$MA" aggregate dump.heap "$@" --json | jcheck "print(len(json.load(sys.stdin)['sites']))"; }
n_big=$(sites --top 100000) n_top0=$(sites --top 0) n_top1=$(sites --top 1)
check "aggregate --top 0 shows every site ($n_top0 sites, as --top 100000: $n_big; --top 1: $n_top1)" \
	[ "$n_top0" -eq "$n_big" -a "$n_top0" -ge 2 -a "$n_top1" -eq 1 ]
# --json on the commands whose output is a file or a folder: what was written.
jfile() { jcheck "d=json.load(open(sys.argv[1])); $2" "$1"; }
"$MA" heap-dump "$P" -o hd.heap --json >hd.json
check "heap-dump --json: file, bytes as on disk, sample period" \
	jfile hd.json "import os; assert d['file'] == 'hd.heap' and d['bytes'] == os.path.getsize('hd.heap') and d['lg_prof_sample'] == 19 and d['pid'] == $P, d"
"$MA" stats-dump "$P" -o sd.json --json >sdj.json
check "stats-dump --json: file, bytes as on disk, version as in the file" \
	jfile sdj.json "import os; v = json.load(open('sd.json'))['jemalloc']['version']; assert d['bytes'] == os.path.getsize('sd.json') and d['version'] == v and d['narenas'] >= 1, d"
"$MA" snapshot "$P" -o snap --json >snap.json
check "snapshot --json: the files it lists are in the folder" \
	jfile snap.json "import os; assert d['heap'] and sorted(d['files']) == sorted(os.listdir('snap')), (d, os.listdir('snap'))"
"$MA" watch "$P" -o wj --duration 1s --interval 200ms --json >watch.json 2>watch.err
check "watch --json: the summary on stdout, the running lines on stderr ($(head -1 watch.err | cut -c1-60))" \
	jfile watch.json "import os; assert d['reason'] == 'duration reached' and d['samples'] >= 2 and d['peak'] > 0 and all(os.path.exists('wj/' + f) for f in d['files']), d"
"$MA" export --pid "$P" --once --json >export.json 2>export.err
check "export --once --json: the target's readings, slab_waste = active - allocated, bins with waste" \
	jfile export.json "t = d['targets'][0]; assert len(d['targets']) == 1 and t['pid'] == $P and t['ok'] and t['comm'] == 'daemon' and t['allocated'] > 0 and t['slab_waste'] == t['active'] - t['allocated'] and t['vm_rss'] > 0 and t['bins'] and all(b['size'] > 0 and b['waste'] >= 0 for b in t['bins']), d"
"$MA" export --pid "$P" --listen 127.0.0.1:1 --json >/dev/null 2>exjson.err; rc=$?
check "export --json without --once is a usage error (exit $rc: $(head -1 exjson.err))" [ "$rc" -eq 2 ]
"$MA" heap-dump "$P" -o - --json >/dev/null 2>hdboth.err; rc=$?
check "heap-dump -o - --json is a usage error (exit $rc: $(head -1 hdboth.err))" [ "$rc" -eq 2 ]
# One set of JSON key names; the names before 0.10 beside them, equal.
check "stats --json: vm_rss and vm_hwm, and rss/hwm (until 0.11) equal to them" \
	jfile stats.json "assert d['vm_rss'] > 0 and d['vm_rss'] == d['rss'] and d['vm_hwm'] == d['hwm'], d"
"$MA" purge "$P" --json >purge.json
check "purge --json: vm_rss in before, after and delta, rss beside it" \
	jfile purge.json "assert all(d[k]['vm_rss'] == d[k]['rss'] for k in ('before', 'after', 'delta')), d"
"$MA" diff dump.heap hd.heap --top 0 --json >diff.json
check "diff --json: a site's sides as scaled_bytes_a/_b, a_scaled_bytes/b_ beside them" \
	jfile diff.json "s = d['growers'] + d['shrinkers']; assert s and all(x['scaled_bytes_a'] == x['a_scaled_bytes'] and x['objects_b'] == x['b_objects'] for x in s), d"
fix_quit "$P" "$FIX_FD" >/dev/null
