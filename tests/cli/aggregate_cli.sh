#!/usr/bin/env bash
# aggregate / stacks / diff: exit codes, bad input, output formats.
. "$(dirname "$0")/../lib/common.sh"
plan 45
export LC_ALL=C
D=$ROOT/fixtures/dumps

quiet() { "$@" >/dev/null 2>&1; }
for c in aggregate stacks diff; do
	check "$c --help exits 0" quiet "$MA" $c --help
	"$MA" $c >/dev/null 2>&1; check "$c without arguments: usage error" [ $? = 2 ]
done
"$MA" aggregate "$D/prof_c.heap" --bogus >/dev/null 2>&1; check "unknown option: 2" [ $? = 2 ]
"$MA" aggregate "$D/prof_c.heap" --skip '(' >/dev/null 2>&1; check "bad --skip regex: 2" [ $? = 2 ]

# Bad input: one clear message on stderr, exit 1, never a crash.
: >"$TMP/empty"
head -c 4096 /dev/urandom >"$TMP/garbage"
printf 'heap profile:    1:  2 [ 3:  4] @ heapprofile\n' >"$TMP/gperf"
printf 'heap_v2/524288\n@ 0x1\n  t*: 0: 99999999999 [0: 0]\n@ 0x2\n  t*: 3: 99999999999999999999999 [0: 0]\nMAPPED_LIBRARIES:\n' >"$TMP/absurd"
for f in empty:empty garbage:'not a jemalloc heap dump' gperf:'gperftools' missing:'cannot open'; do
	name=${f%%:*} want=${f#*:}
	"$MA" aggregate "$TMP/$name" >/dev/null 2>"$TMP/err"; rc=$?
	check "bad input $name: exit 1" [ $rc = 1 ]
	check "bad input $name: message says '$want'" says "$want" "$TMP/err"
	check "bad input $name: one message" [ "$(unwrapped "$TMP/err" | wc -l)" = 1 ]
done
"$MA" aggregate "$TMP/absurd" --json >"$TMP/absurd.json" 2>"$TMP/err"
check "absurd counts: warning, no crash" grep -q 'warning' "$TMP/err"
"$MA" aggregate "$D/prof_c_truncated.heap" >/dev/null 2>"$TMP/err"
check "truncated dump: says how far it got" says 'truncated: read [0-9]* stacks' "$TMP/err"
"$MA" aggregate "$D/prof_c.heap" --binary /nonexistent/bin >/dev/null 2>"$TMP/err"; rc=$?
check "missing --binary: exit 1 naming it" exit_and_says $rc 1 '/nonexistent/bin' "$TMP/err"
"$MA" aggregate "$D/prof_c.heap" --binary /etc/hostname --json >"$TMP/j" 2>"$TMP/err"; rc=$?
check "unreadable ELF as --binary: warning, still a report" exit_and_says $rc 0 'not an ELF' "$TMP/err"
"$MA" aggregate "$TMP" >/dev/null 2>"$TMP/err"; rc=$?
check "directory: not supported yet" exit_and_says $rc 2 'not supported yet' "$TMP/err"
"$MA" diff "$D/prof_c.heap" "$TMP" >/dev/null 2>"$TMP/err"; rc=$?
check "diff of a directory: not supported yet" exit_and_says $rc 2 'not supported yet' "$TMP/err"

# CRLF and LF give the same numbers
"$MA" aggregate "$D/prof_c.heap" --json >"$TMP/lf.json" 2>/dev/null
"$MA" aggregate "$D/prof_c_crlf.heap" --json >"$TMP/crlf.json" 2>/dev/null
check "CRLF = LF" jcheck '
a,b=(json.load(open(p)) for p in sys.argv[1:3]); sys.exit(0 if a["total_scaled_bytes"]==b["total_scaled_bytes"]>0 and len(a["sites"])==len(b["sites"]) else 1)' "$TMP/lf.json" "$TMP/crlf.json"
check "JSON has the stable keys" jcheck '
d=json.load(open(sys.argv[1]))
assert all(k in d for k in ("period","total_raw_bytes","total_scaled_bytes","sites"))
assert all(all(k in s for k in ("leaf","scaled_bytes","raw_bytes","objects","scale","share")) for s in d["sites"])' "$TMP/lf.json"

# Output formats on a fresh dump of this build (symbols resolve).
if MALLOC_CONF=prof:true,prof_final:false "$FIX/prof_c" "$TMP/c.heap" >/dev/null; then
	"$MA" aggregate "$TMP/c.heap" --json >"$TMP/c.json"
	"$MA" aggregate "$TMP/c.heap" --folded >"$TMP/c.folded"
	check "folded: one 'a;b;c bytes' line per stack, innermost last" jcheck 'import json,re,sys
lines=open(sys.argv[1]).read().splitlines()
assert lines and all(re.match(r"^[^ ].* \d+$", l) for l in lines)
tot=sum(int(l.rsplit(" ",1)[1]) for l in lines); d=json.load(open(sys.argv[2]))
assert abs(tot-d["total_scaled_bytes"]) <= len(lines)
assert any(l.split(" ")[0].endswith(";site_small_64") and l.startswith("_start;") for l in lines)' "$TMP/c.folded" "$TMP/c.json"
	"$MA" aggregate "$TMP/c.heap" --cum --json >"$TMP/cum.json"
	check "--cum: main holds what the sites hold" jcheck '
d=json.load(open(sys.argv[1])); f={x["name"]:x for x in d["functions"]}
s=sum(x["scaled_bytes"] for x in d["sites"] if x["leaf"].startswith("site_"))
assert abs(f["main"]["cum_bytes"]-s) <= 0.01*s and f["site_calloc"]["flat_bytes"]==f["site_calloc"]["cum_bytes"]' "$TMP/cum.json"
	"$MA" aggregate "$TMP/c.heap" --svg "$TMP/c.svg" --pprof "$TMP/c.pb.gz" >/dev/null
	check "svg: well-formed XML with the sites" jcheck 'import sys,xml.dom.minidom as m
d=m.parse(sys.argv[1]); t=" ".join(x.firstChild.data for x in d.getElementsByTagName("title") if x.firstChild)
assert "site_small_64" in t and "site_calloc" in t' "$TMP/c.svg"
	check "pprof: gzipped profile.proto with inuse_space samples" jcheck - "$TMP/c.pb.gz" "$TMP/c.json" <<'PY'
import gzip, json, sys
buf = gzip.open(sys.argv[1]).read()
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
        if c < 0x80: return v, i
def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i); f, t = k >> 3, k & 7
        if t == 0: v, i = varint(b, i)
        elif t == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise SystemExit("wire type %d" % t)
        yield f, v
strings, samples, funcs = [], [], {}
for f, v in fields(buf):
    if f == 6: strings.append(v.decode())
    elif f == 2: samples.append(v)
    elif f == 5:
        d = dict(fields(v)); funcs[d[1]] = d[2]
assert strings[0] == "" and "inuse_space" in strings
tot = 0
for s in samples:
    for f, v in fields(s):
        if f == 2:
            vals, i = [], 0
            while i < len(v):
                x, i = varint(v, i); vals.append(x)
            tot += vals[1]
names = {strings[i] for i in funcs.values()}
d = json.load(open(sys.argv[2]))
assert abs(tot - d["total_scaled_bytes"]) <= len(samples), (tot, d["total_scaled_bytes"])
assert "site_small_64" in names
PY
	"$MA" stacks "$TMP/c.heap" site_calloc --json >"$TMP/st.json"
	check "stacks: full chain of the matching leaf" jcheck '
d=json.load(open(sys.argv[1])); f=[x["name"] for x in d["stacks"][0]["frames"]]
assert d["matched_stacks"]==1 and f[0]=="site_calloc" and "run_all" in f and "main" in f' "$TMP/st.json"
	"$MA" stacks "$TMP/c.heap" no_such_function_xyz >"$TMP/st.txt"
	check "stacks: no match is not an error" grep -q '^0 stacks' "$TMP/st.txt"
	# run_all is a caller of every site, the allocation site of none
	"$MA" stacks "$TMP/c.heap" run_all >"$TMP/st2.txt"
	check "stacks: a caller's name finds no site but says deeper frames hold it" \
		bash -c "grep -q '^0 stacks' '$TMP/st2.txt' && grep -q 'more stacks* hold .run_all. in a deeper frame.*--any-frame' '$TMP/st2.txt'"
	"$MA" stacks "$TMP/c.heap" run_all --any-frame --json >"$TMP/st3.json"
	check "stacks --any-frame: every stack under run_all, each with run_all in its chain" jcheck '
d=json.load(open(sys.argv[1]))
assert d["matched_stacks"] > 1, d["matched_stacks"]
assert all(any(f["name"] == "run_all" for f in s["frames"]) for s in d["stacks"])' "$TMP/st3.json"
	# diff: two different builds (PIE and static jemalloc) of the same program
	if MALLOC_CONF=prof:true,prof_final:false "$FIX/prof_c_static" "$TMP/s.heap" >/dev/null; then
		"$MA" diff "$TMP/c.heap" "$TMP/s.heap" --json >"$TMP/diff.json"
		check "diff: sites align across binaries, large ones unchanged" jcheck '
d=json.load(open(sys.argv[1])); names={x["leaf"] for x in d["growers"]+d["shrinkers"]}
assert "site_big_malloc" not in names and "site_calloc" not in names
assert d["a"]["total_scaled_bytes"]>0 and d["b"]["total_scaled_bytes"]>0
assert d["delta_bytes"]==d["b"]["total_scaled_bytes"]-d["a"]["total_scaled_bytes"] or abs(d["delta_bytes"]-(d["b"]["total_scaled_bytes"]-d["a"]["total_scaled_bytes"]))<=1' "$TMP/diff.json"
		# A dump with no samples (the profiler just turned on) against a real one.
		awk '/^heap_v2/ { print; print "  t*: 0: 0 [0: 0]"; next } /^MAPPED_LIBRARIES:/ { m = 1 } m' \
			"$TMP/c.heap" >"$TMP/empty.heap"
		"$MA" diff "$TMP/empty.heap" "$TMP/c.heap" >"$TMP/fromzero.txt" 2>&1
		check "diff from an empty dump: the total is 'new', not +0.0%" \
			grep -q '^B - A: .* (new)$' "$TMP/fromzero.txt"
		"$MA" diff "$TMP/c.heap" "$TMP/c.heap" --json >"$TMP/same.json"
		check "diff of a dump with itself: no growers or shrinkers" jcheck '
d=json.load(open(sys.argv[1])); sys.exit(0 if not d["growers"] and not d["shrinkers"] and d["delta_bytes"]==0 else 1)' "$TMP/same.json"
	fi
	# --binary: the dump's path is gone; point at the binary elsewhere
	cp "$FIX/prof_c" "$TMP/moved_prof_c"
	sed "s#$FIX/prof_c\$#/gone/prof_c#" "$TMP/c.heap" >"$TMP/gone.heap"
	"$MA" aggregate "$TMP/gone.heap" --json 2>"$TMP/err" >"$TMP/gone.json"
	check "binary gone: warning suggests --binary" grep -q -- '--binary' "$TMP/err"
	"$MA" aggregate "$TMP/gone.heap" --binary "$TMP/moved_prof_c" --json >"$TMP/moved.json"
	check "--binary restores the names" jcheck '
d=json.load(open(sys.argv[1])); sys.exit(0 if d["sites"][0]["leaf"].startswith("site_") else 1)' "$TMP/moved.json"
	mkdir -p "$TMP/root/gone"; cp "$FIX/prof_c" "$TMP/root/gone/prof_c"
	"$MA" aggregate "$TMP/gone.heap" --prefix-map "/gone=$TMP/root/gone" --json >"$TMP/pm.json"
	check "--prefix-map restores the names" jcheck '
d=json.load(open(sys.argv[1])); sys.exit(0 if d["sites"][0]["leaf"].startswith("site_") else 1)' "$TMP/pm.json"
	"$MA" aggregate "$TMP/c.heap" --lines --json >"$TMP/lines.json" 2>"$TMP/lines.err"
	check "--lines: file:line on the sites" jcheck '
d=json.load(open(sys.argv[1])); s=[x for x in d["sites"] if x["leaf"]=="site_calloc"][0]
assert "prof_c.c:" in s["frames"][0]' "$TMP/lines.json"
	# --lines on a binary without DWARF: said, naming it (not silently bare)
	cp "$FIX/prof_c" "$TMP/nodebug_prof_c" && strip --strip-debug "$TMP/nodebug_prof_c"
	"$MA" aggregate "$TMP/c.heap" --lines --binary "$TMP/nodebug_prof_c" >/dev/null 2>"$TMP/nolines.err"
	check "--lines without DWARF: a note names the object" \
		says 'note: no file:line for any frame in .*nodebug_prof_c.*build with -g' "$TMP/nolines.err"
	check "--lines with DWARF: the binary is not named" \
		test "$(grep -c 'for any frame in.*prof_c' <<<"$("$MA" aggregate "$TMP/c.heap" --lines 2>&1 >/dev/null)")" = 0
else
	fail "prof_c fixture wrote no dump"
fi
