#!/usr/bin/env bash
# tests/attach/redis_numbers.sh - a real daemon as the oracle: Debian's
# redis-server (system jemalloc) reports its allocator's figures in INFO
# memory, read with its own mallctl calls.  After filling it and deleting
# half the keys (slab waste), memattach stats must give the same numbers:
#   allocator_allocated  = allocated
#   allocator_frag_bytes = slab_waste         (active - allocated)
#   allocator_rss_bytes  = dirty + metadata_resident  (resident - active)
# and the decomposition must add up to VmRSS.  Redis's background threads
# may purge between the two readings: up to 5 attempts until one pair agrees.
. "$(dirname "$0")/../lib/common.sh"
plan 11

if ! command -v redis-server >/dev/null; then
	fail "redis-server missing (make deps installs it)"
	exit 0
fi
port=$((20000 + $$ % 20000))
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
	>"$TMP/redis.log" 2>&1 &
RPID=$!; track $RPID
rc() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do [ "$(rc ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
check "redis-server answers on port $port" [ "$(rc ping 2>/dev/null)" = PONG ]
redis-benchmark -p "$port" -t set -n 200000 -r 100000000 -d 200 -q >/dev/null 2>&1
rc --scan | awk 'NR % 2 == 0 { k = k " " $0; if (++m == 500) { print "DEL" k; k = ""; m = 0 } }
	END { if (m) print "DEL" k }' | rc >/dev/null
n=$(rc dbsize)
check "redis holds about half of the keys written ($n)" [ "${n:-0}" -gt 50000 ]

info() { rc info memory | tr -d '\r' | sed -n "s/^$1://p"; }
# Redis's event loop waits in epoll_wait, which a stop ends with EINTR, and
# its bio threads never allocate: with --strict nothing may be borrowed, and
# memattach says so at once, naming the thread to give; by default (no
# flag) it borrows that thread.  --allow-eintr-wait, the old spelling, too.
"$MA" stats "$RPID" --strict >/dev/null 2>"$TMP/refused.err"; rc_no_tid=$?
check "--strict: refused (exit $rc_no_tid), naming the event loop and --tid $RPID" \
	eval '[ "$rc_no_tid" -eq 1 ] && says "epoll_wait.*--tid $RPID borrows it" "$TMP/refused.err"'
"$MA" stats "$RPID" --json >"$TMP/allowed.json" 2>"$TMP/allowed.err"; rc_allow=$?
check "no flag: the event loop is borrowed (exit $rc_allow, thread $(json_get "$TMP/allowed.json" thread))" \
	eval '[ "$rc_allow" -eq 0 ] && [ "$(json_get "$TMP/allowed.json" thread)" = "$RPID" ]'
"$MA" stats "$RPID" --allow-eintr-wait --json >"$TMP/allowed2.json" 2>"$TMP/allowed2.err"; rc_allow=$?
check "--allow-eintr-wait still accepted (exit $rc_allow)" [ "$rc_allow" -eq 0 ]
agree=0
for attempt in 1 2 3 4 5; do
	"$MA" stats "$RPID" --tid "$RPID" --json >"$TMP/s.json" 2>"$TMP/s.err" || { fail "stats failed: $(cat "$TMP/s.err")"; break; }
	ia=$(info allocator_allocated) fb=$(info allocator_frag_bytes) rb=$(info allocator_rss_bytes)
	a=$(json_get "$TMP/s.json" allocated) sw=$(json_get "$TMP/s.json" slab_waste)
	d=$(json_get "$TMP/s.json" dirty) mr=$(json_get "$TMP/s.json" metadata_resident)
	if [ "$ia" = "$a" ] && [ "$fb" = "$sw" ] && [ "$rb" = "$((d + mr))" ]; then agree=1; break; fi
	echo "# attempt $attempt: redis $ia/$fb/$rb, memattach $a/$sw/$((d + mr))"
	sleep 0.5
done
check "allocated = redis's allocator_allocated ($a)" [ "$agree" = 1 -a "$ia" = "$a" ]
check "slab_waste = redis's allocator_frag_bytes ($sw, $((100 * sw / (a + 1)))% of allocated)" \
	[ "$agree" = 1 -a "$fb" = "$sw" -a "${sw:-0}" -gt 1000000 ]
check "dirty + metadata_resident = redis's allocator_rss_bytes ($rb)" [ "$agree" = 1 -a "$rb" = "$((d + mr))" ]
sum=0
for k in allocated slab_waste dirty metadata_resident outside_jemalloc; do
	sum=$((sum + $(json_get "$TMP/s.json" "$k")))
done
check "the five parts add up to VmRSS ($sum)" [ "$sum" = "$(json_get "$TMP/s.json" rss)" ]
check "redis still answers, with its keys" [ "$(rc dbsize)" = "$n" ]
rc shutdown nosave >/dev/null 2>&1
wait $RPID
check "redis exits cleanly" [ $? -eq 0 ]
