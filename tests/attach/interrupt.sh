#!/usr/bin/env bash
# SIGINT / SIGTERM of memattach at random moments: memattach finishes the
# call it is in, restores the thread and detaches; the target is never left
# traced or stopped and its registers stay intact.
. "$(dirname "$0")/../lib/common.sh"
plan 4
CYCLES=${CYCLES:-40}

fix_start regs -i 2000000 || { fail "regs: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
tid=$(tid_of "$pid" regs_0)
bad=0 traced=0
for i in $(seq "$CYCLES"); do
	sig=INT; [ $((i % 2)) -eq 0 ] && sig=TERM
	"$MA" stats "$pid" --tid "$tid" >/dev/null 2>&1 & m=$!
	sleep "0.00$((RANDOM % 4))"
	kill -"$sig" "$m" 2>/dev/null
	wait "$m"; rc=$?
	# 130/143: the signal came before memattach had touched anything.
	case $rc in 0|1|130|143) ;; *) bad=$((bad + 1)) ;; esac
	grep -q "^TracerPid:[[:space:]]*0$" /proc/"$pid"/task/"$tid"/status || { traced=$((traced + 1)); echo "# cycle $i: rc $rc, $(grep -E "State|TracerPid" /proc/"$pid"/task/"$tid"/status | tr "\n\t" "  ")"; }
	grep -q '^State:[[:space:]]*[tT]' /proc/"$pid"/task/"$tid"/status && traced=$((traced + 1))
done
check "memattach exited 0, 1 or by the signal before attaching in all $CYCLES runs ($bad others)" [ "$bad" -eq 0 ]
check "the thread was never left traced or stopped ($traced times)" [ "$traced" -eq 0 ]
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "registers intact ($v)" grep -q '^VERDICT ok.* mismatches=0' <<<"$v"
fix_quit "$pid" "$fd"
check "exits cleanly" [ $? -eq 0 ]
