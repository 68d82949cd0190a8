#!/usr/bin/env bash
# tests/cli/pprof_go.sh - aggregate --pprof read by the real 'go tool pprof'
# (Debian's golang-go): -top gives the totals and sites of aggregate --json,
# -traces one trace per stack, -raw one mapping per object with its path
# and build ID (no "Main binary filename not available"), -list shows the
# source lines of a site on a binary with debug info, -disasm its
# instructions (on a non-PIE binary: see the end).
. "$(dirname "$0")/../lib/common.sh"
plan 11

if ! command -v go >/dev/null; then
	fail "go missing (make deps installs golang-go)"
	exit 0
fi
export GOCACHE=$TMP/gocache GOPATH=$TMP/gopath HOME=$TMP # pprof keeps nothing outside $TMP
[ -x "$FIX/prof_c" ] || { fail "build/fixtures/prof_c missing (make fixtures)"; exit 0; }
if ! MALLOC_CONF=prof:true,prof_final:false "$FIX/prof_c" "$TMP/c.heap" >/dev/null; then
	fail "prof_c wrote no dump"; exit 0
fi
"$MA" aggregate "$TMP/c.heap" --lines --json --pprof "$TMP/c.pb.gz" >"$TMP/c.json" 2>/dev/null
check "aggregate --pprof wrote a profile" test -s "$TMP/c.pb.gz"
go tool pprof -top -sample_index=inuse_space -unit=B -nodecount=100 "$TMP/c.pb.gz" >"$TMP/top.txt" 2>&1
check "go tool pprof -top reads it, naming the main binary" grep -q '^File: prof_c$' "$TMP/top.txt"
check "... with its build ID" grep -q "^Build ID: $(readelf -n "$FIX/prof_c" | sed -n 's/.*Build ID: //p')\$" "$TMP/top.txt"
check "-top: the total equals aggregate's total_scaled_bytes, and each site its bytes" jcheck - "$TMP/top.txt" "$TMP/c.json" <<'PY'
import json, re, sys
top = open(sys.argv[1]).read()
d = json.load(open(sys.argv[2]))
m = re.search(r"of (\d+)B total", top)
assert m, top[:400]
assert abs(int(m.group(1)) - d["total_scaled_bytes"]) <= len(d["sites"]), (m.group(1), d["total_scaled_bytes"])
flat = {}
for line in top.splitlines():
    f = line.split()
    if len(f) >= 6 and f[0].endswith("B") and f[0][:-1].isdigit():
        flat[" ".join(f[5:])] = int(f[0][:-1])
for s in d["sites"]:
    if s["leaf"].startswith("site_"):
        assert abs(flat[s["leaf"]] - s["scaled_bytes"]) <= 1, (s["leaf"], flat.get(s["leaf"]), s["scaled_bytes"])
PY
go tool pprof -traces "$TMP/c.pb.gz" >"$TMP/traces.txt" 2>&1
n=$(grep -c '^-----------+' "$TMP/traces.txt")
stacks=$(jcheck 'print(sum(s["stacks"] for s in json.load(open(sys.argv[1]))["sites"]))' "$TMP/c.json")
check "-traces: one trace per stack ($((n - 1)) traces, $stacks stacks)" [ $((n - 1)) -eq "$stacks" ]
go tool pprof -raw "$TMP/c.pb.gz" >"$TMP/raw.txt" 2>&1
check "-raw: a mapping for the binary with its path and build ID" \
	grep -q "/build/fixtures/prof_c [0-9a-f]\{40\} \[FN\]\[FL\]\[LN\]\[IN\]" "$TMP/raw.txt"
check "-raw: libc's mapping named too" grep -q ' /.*libc\.so\.6 ' "$TMP/raw.txt"
check "-raw: every location belongs to a mapping" \
	test "$(sed -n '/^Locations/,/^Mappings/p' "$TMP/raw.txt" | grep -c ': 0x[0-9a-f]* M=[1-9]')" -eq \
	"$(sed -n '/^Locations/,/^Mappings/p' "$TMP/raw.txt" | grep -c ': 0x')"
(cd "$ROOT" && go tool pprof -list '^site_calloc$' "$TMP/c.pb.gz") >"$TMP/list.txt" 2>&1
check "-list: site_calloc's source, with its bytes on the calloc line" \
	grep -q '24MB .*hold(calloc(24, 1u << 20)' "$TMP/list.txt"
# -disasm: Go's pprof reads a binary's symbols at their link-time addresses
# and translates no run-time address (its objTool has no support for
# relocated objects), so it disassembles non-PIE executables: prof_c_nopie.
if MALLOC_CONF=prof:true,prof_final:false "$FIX/prof_c_nopie" "$TMP/np.heap" >/dev/null; then
	"$MA" aggregate "$TMP/np.heap" --pprof "$TMP/np.pb.gz" >/dev/null 2>&1
	go tool pprof -disasm '\bsite_calloc\b' "$TMP/np.pb.gz" >"$TMP/dis.txt" 2>&1
	check "-disasm: site_calloc's instructions, its bytes on the call to calloc" \
		grep -q "^ *24MB  *24MB  *[0-9a-f]*: CALL " "$TMP/dis.txt"
	check "-disasm: only there (the other instructions hold nothing)" \
		test "$(grep -c '^ *[0-9.]*[KMG]\?B  *[0-9.]*[KMG]\?B  *[0-9a-f]*: ' "$TMP/dis.txt")" -eq 1
else
	fail "prof_c_nopie wrote no dump"
fi
