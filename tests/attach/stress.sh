#!/usr/bin/env bash
# RUNS (1,000 under make soak, 200 in make test) consecutive memattach stats runs against the C daemon while its
# workers allocate and free as fast as they can (-p 0): every run must
# succeed, the target must stay alive and responsive, and its checksums
# must stay intact.
. "$(dirname "$0")/../lib/common.sh"
plan 5
RUNS=${RUNS:-$(sized 1000 200)}

fix_start daemon -t 4 -p 0 || { fail "daemon: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
ok=0 failed=0
for _ in $(seq "$RUNS"); do
	if "$MA" stats "$pid" --json >"$TMP/s.json" 2>"$TMP/s.err"; then
		ok=$((ok + 1))
	else
		failed=$((failed + 1))
		[ "$failed" -le 3 ] && echo "# run failed: $(cat "$TMP/s.err")"
	fi
done
check "stress: $ok of $RUNS stats runs succeeded under full allocation load" [ "$ok" -eq "$RUNS" ]
check "stress: target still alive" kill -0 "$pid"
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
echo "# $v"
check "stress: target responsive and checksums intact ($v)" grep -q '^VERDICT ok' <<<"$v"
checks=$(grep -o 'checks=[0-9]*' <<<"$v" | cut -d= -f2)
check "stress: workers kept allocating (${checks:-0} checked objects)" [ "${checks:-0}" -gt 100000 ]
fix_quit "$pid" "$fd"
check "stress: exits cleanly" [ $? -eq 0 ]
