#!/usr/bin/env bash
# Threads blocked in read, nanosleep, epoll_wait, futex and accept are
# borrowed 200 times each (memattach stats --tid); the target checks every
# syscall result and counts any EINTR or wrong result as an error.  One in
# recv with SO_RCVTIMEO is refused, named or not.
. "$(dirname "$0")/../lib/common.sh"
plan 21
CYCLES=${CYCLES:-200}


fix_start sysc || { fail "sysc: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
before=$(fix_cmd "$pid" "$fd" "$out" verdict)
for name in sc_read sc_sleep sc_epoll sc_futex sc_accept; do
	tid=$(tid_of "$pid" "$name")
	if [ -z "$tid" ]; then fail "$name: thread not found"; continue; fi
	ok=0 used=0
	for _ in $(seq "$CYCLES"); do
		if "$MA" stats "$pid" --tid "$tid" --json >"$TMP/s.json" 2>"$TMP/s.err"; then
			ok=$((ok + 1))
			[ "$(json_get "$TMP/s.json" thread)" = "$tid" ] && used=$((used + 1))
		fi
	done
	check "$name: $ok of $CYCLES attach cycles succeeded" [ "$ok" -eq "$CYCLES" ]
	check "$name: all $used cycles borrowed the $name thread itself" [ "$used" -eq "$CYCLES" ]
done
# recv on a socket with SO_RCVTIMEO: a stop ends it with EINTR, and issued
# again it would wait its whole timeout once more, so even named it is
# refused before any stop.
# (A run that finds it between two receives borrows it: that is no wait.)
tid=$(tid_of "$pid" sc_rcvto) refused=0 between=0
for _ in $(seq $((CYCLES / 4))); do
	"$MA" stats "$pid" --tid "$tid" >/dev/null 2>"$TMP/r.err"; rc=$?
	if [ $rc -eq 1 ] && says "with a timeout" "$TMP/r.err"; then refused=$((refused + 1)); cp "$TMP/r.err" "$TMP/r.why"
	elif [ $rc -eq 0 ]; then between=$((between + 1)); fi
done
check "sc_rcvto: --tid refused $refused of $((CYCLES / 4)) times naming its timeout, borrowed $between times between receives, nothing else" \
	[ $((refused + between)) -eq $((CYCLES / 4)) -a "$refused" -ge $((CYCLES / 4 * 9 / 10)) ]
[ -s "$TMP/r.why" ] && cp "$TMP/r.why" "$TMP/r.err"
check "sc_rcvto: the message says why ($(head -1 "$TMP/r.err" | cut -c1-100))" says "whole timeout once more" "$TMP/r.err"
# Inspecting without borrowing (memattach threads) must not leak EINTR either.
ok=0
for _ in $(seq $((CYCLES / 4))); do "$MA" threads "$pid" >/dev/null 2>&1 && ok=$((ok + 1)); done
check "threads: $ok of $((CYCLES / 4)) inspections succeeded" [ "$ok" -eq $((CYCLES / 4)) ]
after=$(fix_cmd "$pid" "$fd" "$out" verdict)
echo "# before: $before"
echo "# after:  $after"
check "sysc: no spurious EINTR, no wrong result ($after)" grep -q '^VERDICT ok' <<<"$after"
# Every kind kept making progress while it was being borrowed.
for k in read nanosleep epoll futex accept rcvtimeo; do
	b=$(grep -o " $k=[0-9]*" <<<"$before" | cut -d= -f2)
	a=$(grep -o " $k=[0-9]*" <<<"$after" | cut -d= -f2)
	check "sysc: $k calls kept completing ($b -> $a)" [ "${a:-0}" -gt "${b:-0}" ]
done
fix_quit "$pid" "$fd"
check "sysc: exits cleanly" [ $? -eq 0 ]
