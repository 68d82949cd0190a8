#!/usr/bin/env bash
# A thread that keeps receiving queued real-time signals (with sequence
# numbers) is borrowed again and again: signals that arrive while it is
# borrowed wait in the kernel's queue (memattach blocks them) and are
# delivered afterwards with their original siginfo, none lost, none
# reordered ("signals_redelivered" counts those still waiting at release).
# With an SA_RESTART handler its read() never fails with EINTR; without
# (-n), a signal that waited for the thread (held while it was borrowed)
# must make the read fail with EINTR, never find it restarted; the fixture
# tells that from the interrupted context (fixtures/sigs.c).  The loop
# runs CYCLES times and for at least MIN_SECS: the no-restart sender's 10 ms
# interval then gives over 100 signals however fast memattach is.
. "$(dirname "$0")/../lib/common.sh"
plan 10
CYCLES=${CYCLES:-200}
MIN_SECS=${MIN_SECS:-2}

for mode in restart no-restart; do
args=(); [ "$mode" = no-restart ] && args=(-n)
fix_start sigs "${args[@]}" || { fail "sigs ($mode): start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" sig_rx)
ok=0 held=0 runs=0 t0=${EPOCHREALTIME/./}
while [ "$runs" -lt "$CYCLES" ] || [ $(( ${EPOCHREALTIME/./} - t0 )) -lt $((MIN_SECS * 1000000)) ]; do
	runs=$((runs + 1))
	if "$MA" stats "$pid" --tid "$tid" --json >"$TMP/s.json" 2>>"$TMP/err"; then
		ok=$((ok + 1))
		held=$((held + $(json_get "$TMP/s.json" signals_redelivered)))
	fi
done
check "sigs ($mode): signals arrived during calls and were re-delivered ($held)" [ "$held" -gt 0 ]
check "sigs ($mode): $ok of $runs attach cycles on the signalled thread succeeded" [ "$ok" -eq "$runs" ]
[ -s "$TMP/err" ] && sort "$TMP/err" | uniq -c | head -3 | sed 's/^/# /'
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "sigs ($mode): every signal delivered once, in order, EINTR as the handler asks ($v)" grep -q '^VERDICT ok' <<<"$v"
n=$(grep -o 'received=[0-9]*' <<<"$v" | cut -d= -f2)
check "sigs ($mode): signals kept flowing (${n:-0} received)" [ "${n:-0}" -gt 100 ]
fix_quit "$pid" "$fd"
check "sigs ($mode): exits cleanly" [ $? -eq 0 ]
done
