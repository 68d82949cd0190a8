#!/usr/bin/env bash
# Threads spinning with known values in rbx, r12-r15, MXCSR, the x87
# control word, ymm0-15 (and zmm16-31 with AVX-512) are borrowed 200 times
# each at arbitrary instructions; the target compares the registers
# continuously and reports any change.
. "$(dirname "$0")/../lib/common.sh"
plan 5
CYCLES=${CYCLES:-$(sized 200 100)}


fix_start regs -i 2000000 || { fail "regs: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
for name in regs_0 regs_1; do
	tid=$(tid_of "$pid" "$name")
	[ -n "$tid" ] || { fail "$name: thread not found"; continue; }
	ok=0
	for _ in $(seq "$CYCLES"); do
		"$MA" stats "$pid" --tid "$tid" --json >"$TMP/s.json" 2>>"$TMP/s.err" &&
			[ "$(json_get "$TMP/s.json" thread)" = "$tid" ] && ok=$((ok + 1))
	done
	check "$name: $ok of $CYCLES attach cycles borrowed the spinning thread" [ "$ok" -eq "$CYCLES" ]
done
[ -s "$TMP/s.err" ] && sed 's/^/# /' "$TMP/s.err" | sort | uniq -c | head -5
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
echo "# $v"
check "regs: no register changed ($v)" grep -q '^VERDICT ok.* mismatches=0' <<<"$v"
rounds=$(grep -o 'rounds=[0-9]*' <<<"$v" | cut -d= -f2)
check "regs: checker rounds completed (${rounds:-0})" [ "${rounds:-0}" -gt 0 ]
fix_quit "$pid" "$fd"
check "regs: exits cleanly" [ $? -eq 0 ]
