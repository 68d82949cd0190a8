#!/usr/bin/env bash
# tests/cli/live_cli.sh - usage errors (exit 2), bad files (exit 1, one
# line, nothing written) and --stats file mode of the live commands.
. "$(dirname "$0")/../lib/common.sh"
plan 35

for c in bins purge heap-dump stats-dump watch snapshot; do
	"$MA" $c --help >"$TMP/h" 2>&1
	check "$c --help exits 0 with usage" grep -q "^usage: memattach $c" "$TMP/h"
	"$MA" $c >/dev/null 2>"$TMP/e"; rc=$?
	check "$c without arguments exits 2" test $rc -eq 2
	"$MA" $c 1 --no-such-option >/dev/null 2>"$TMP/e"; rc=$?
	check "$c with an unknown option exits 2" test $rc -eq 2
done
"$MA" bins 1 --stats "$ROOT/fixtures/stats/one_arena.json" >/dev/null 2>&1
check "bins with both PID and --stats exits 2" test $? -eq 2
"$MA" bins --stats "$ROOT/fixtures/stats/one_arena.json" --flush-tcache >/dev/null 2>&1
check "bins --stats --flush-tcache exits 2" test $? -eq 2
"$MA" heap-dump 1 >/dev/null 2>&1
check "heap-dump without -o exits 2" test $? -eq 2

# file mode on committed real outputs
"$MA" bins --stats "$ROOT/fixtures/stats/one_arena.json" --json >"$TMP/one.json"
check "bins --stats one arena (no merged): 48 B bin" jcheck '
b=[x for x in json.load(open(sys.argv[1]))["bins"] if x["size"]==48][0]
assert (b["curregs"],b["curslabs"],b["nonfull_slabs"],b["waste"])==(700,4,3,4*12288-700*48), b' "$TMP/one.json"
"$MA" bins --stats "$ROOT/fixtures/stats/two_arenas.json" --top 2 >"$TMP/two.txt"
check "bins --stats two arenas prints a table limited by --top" \
	test "$(sed -n '/^ *size *nregs/,/^$/p' "$TMP/two.txt" | grep -c '^ *[0-9]')" -eq 2

# bad files: clear message, exit 1
echo '{"name":"other tool","values":[1,2,3]}' >"$TMP/other.json"
"$MA" bins --stats "$TMP/other.json" >"$TMP/o" 2>"$TMP/e"; rc=$?
check "JSON from another tool: exit 1" test $rc -eq 1
check "... one message naming malloc_stats_print" says "not the JSON output of jemalloc's malloc_stats_print" "$TMP/e"
check "... and nothing on stdout" test ! -s "$TMP/o"
head -c 20000 "$ROOT/fixtures/stats/one_arena.json" >"$TMP/cut.json"
"$MA" bins --stats "$TMP/cut.json" >/dev/null 2>"$TMP/e"; rc=$?
check "truncated stats file: exit 1, says truncated" exit_and_says $rc 1 'truncated' "$TMP/e"
"$MA" bins --stats "$TMP/missing.json" >/dev/null 2>"$TMP/e"; rc=$?
check "missing stats file: exit 1, says it cannot open it" exit_and_says $rc 1 "cannot open" "$TMP/e"
# jemalloc's unescaped quote and 254-byte cut inside a string value
jcheck - "$ROOT/fixtures/stats/one_arena.json" "$TMP/quirks.json" <<'PY'
import sys
d=open(sys.argv[1]).read()
d=d.replace('"prof_prefix":"jeprof"', '"prof_prefix":"je"prof"', 1)
d=d.replace('"malloc_conf":""', '"malloc_conf":"' + 'x'*254, 1)
open(sys.argv[2],'w').write(d)
PY
"$MA" bins --stats "$TMP/quirks.json" --json >"$TMP/q.json" 2>"$TMP/e"; rc=$?
check "unescaped and cut strings are tolerated" test $rc -eq 0
check "... giving the same table as the clean file" jcheck '
assert json.load(open(sys.argv[1]))["bins"]==json.load(open(sys.argv[2]))["bins"]' "$TMP/q.json" "$TMP/one.json"

# unwritable outputs and a missing process: exit 1, nothing written
"$MA" stats-dump 999999999 -o "$TMP/x.json" >/dev/null 2>"$TMP/e"; rc=$?
check "stats-dump of a missing process: exit 1" test $rc -eq 1 -a ! -e "$TMP/x.json"
check "... no temporary left" test -z "$(ls -A "$TMP" | grep '\.tmp\.')"
"$MA" stats-dump $$ -o /proc/nonexistent/s.json >/dev/null 2>"$TMP/e"; rc=$?
check "stats-dump to an unwritable path: exit 1, one message" test $rc -eq 1 -a "$(unwrapped "$TMP/e" | wc -l)" -eq 1
"$MA" snapshot 999999999 -o "$TMP/snapx" >/dev/null 2>&1; rc=$?
check "snapshot of a missing process: exit 1, no directory" test $rc -eq 1 -a ! -e "$TMP/snapx"
check "... no temporary directory" test -z "$(ls -A "$TMP" | grep 'snapx')"
