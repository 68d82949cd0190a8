#!/usr/bin/env bash
# tests/attach/threads_symbols.sh - 'threads' names frames with the same
# symbolizer as 'aggregate': libc frames through libc's separate debug file
# (libc6-dbg), checked against an independent reading of that file by nm.
. "$(dirname "$0")/../lib/common.sh"
plan 8

fix_start daemon -t 3 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID
"$MA" threads "$pid" --json >"$TMP/t.json" 2>"$TMP/t.err"
check "threads --json exits 0" test $? -eq 0
"$MA" threads "$pid" >"$TMP/t.txt" 2>&1
check "threads: every worker's stack names start_thread in libc" \
	test "$(grep -c '^  #[0-9]* *start_thread+0x[0-9a-f]* (.*libc.so.6)' "$TMP/t.txt")" -ge 3
check "threads: no libc frame is a bare address" \
	test "$(grep -c '^  #[0-9]* *0x[0-9a-f]* (.*libc.so.6)' "$TMP/t.txt")" -eq 0
check "threads: the fixture's own functions are named" \
	test "$(grep -c 'worker_main+0x' "$TMP/t.txt")" -eq 3

# Each libc frame: memattach's function and offset against nm's view of the
# debug file (the symbol at the greatest address <= the frame's address).
libc=$(awk '$6 ~ /libc\.so\.6$/ && $3 == "00000000" {print $6; exit}' /proc/"$pid"/maps)
bias=$(awk '$6 ~ /libc\.so\.6$/ && $3 == "00000000" {split($1, a, "-"); print a[1]; exit}' /proc/"$pid"/maps)
id=$(readelf -n "$libc" | awk '/Build ID/ {print $3}')
dbg=/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
nm -n --defined-only "$dbg" >"$TMP/nm.txt" 2>/dev/null
check "libc's debug file has symbols for nm ($dbg)" test -s "$TMP/nm.txt"
check "every libc frame's name and offset agree with nm" jcheck - "$TMP/t.json" "$TMP/nm.txt" "$bias" <<'PY'
import bisect, json, sys
th = json.load(open(sys.argv[1]))["threads"]
bias = int(sys.argv[3], 16)
syms = {}
for l in open(sys.argv[2]):
    f = l.split()
    if len(f) == 3 and f[1] in "tTwWiI":
        syms.setdefault(int(f[0], 16), set()).add(f[2].split("@")[0])
addrs = sorted(a for a in syms if a)
n = 0
for t in th:
    for k, fr in enumerate(t["frames"]):
        if not (fr["object"] or "").endswith("libc.so.6"):
            continue
        # a caller's frame is named by its call instruction, the byte before
        v = fr["ip"] - bias - (1 if k else 0)
        a = addrs[bisect.bisect_right(addrs, v) - 1]
        assert fr["function"] in syms[a], (fr, hex(v), syms[a])
        assert fr["offset"] == fr["ip"] - bias - a, (fr, hex(a))
        n += 1
assert n >= 10, n
print("checked", n, "libc frames", file=sys.stderr)
PY
# The unwind tables memattach finds in the target's memory give the same
# stacks as libunwind's own lookup (which maps each object's file): the
# threads in steady waits (main in pthread_join, ctl in read) compared.
"$MA" threads "$pid" --json >"$TMP/own.json" 2>/dev/null
MEMATTACH_TEST_LIBUNWIND_TABLES=1 "$MA_T" threads "$pid" --json >"$TMP/lib.json" 2>/dev/null
check "stacks from the in-memory tables equal libunwind's own (main and ctl threads)" jcheck - "$TMP/own.json" "$TMP/lib.json" <<'PY'
import json, sys
def stacks(p):
    return {t["name"]: [f["ip"] for f in t["frames"]] for t in json.load(open(p))["threads"] if t["name"] in ("daemon", "ctl")}
a, b = stacks(sys.argv[1]), stacks(sys.argv[2])
print("# own:", {k: len(v) for k, v in a.items()}, "libunwind:", {k: len(v) for k, v in b.items()})
sys.exit(0 if len(a) == 2 and a == b and all(len(v) >= 3 for v in a.values()) else 1)
PY
check "daemon: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$pid" "$FIX_FD"
