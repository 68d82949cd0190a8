#!/usr/bin/env bash
# tests/bench/frag_redis.sh - what `memattach frag` costs a real daemon:
# Debian's redis-server (libjemalloc2, shared) under redis-benchmark (SET,
# GET, LPUSH, LPOP, HSET on 100,000 random keys of 64 B to 1 KiB values,
# pipelined 16, over a unix socket), side by side in one run.  ROUNDS
# rounds, each on a fresh server, one after the other so the machine's
# drift hits every row alike:
#   1. no agent
#   2. after `memattach frag start PID` (default shift 8)
#   3. after `frag stop`
#   4. the server started under heaptrack (LD_PRELOAD, every call traced)
# Each figure: requests per second summed over the five tests of one
# redis-benchmark run (-n REQS each); each row the median over the rounds.
# The server must answer PING and DBSIZE after each phase, and exit cleanly
# on SHUTDOWN NOSAVE; any failure exits 1.
#
#   ROUNDS (5) REQS (200000)   SKIP_HEAPTRACK=1: no heaptrack row
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MA=${MA_BIN:-$ROOT/build/memattach}
ROUNDS=${ROUNDS:-5}
REQS=${REQS:-200000}
TMP=$(mktemp -d)
SOCK=$TMP/redis.sock
SPID=

cleanup() {
	[ -n "$SPID" ] && kill "$SPID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
	echo "frag_redis: $*" >&2
	exit 1
}
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
	fail "redis-server and redis-benchmark needed (apt-get install redis-server redis-tools)"

cli() { redis-cli -s "$SOCK" "$@"; }

# serve [heaptrack]: a fresh server on $SOCK, no persistence; sets SPID
# (the redis-server process itself, also under heaptrack).
serve() {
	rm -f "$SOCK"
	(cd "$TMP" && exec ${1:+heaptrack -o "$TMP/ht"} redis-server --port 0 --unixsocket "$SOCK" \
		--save '' --appendonly no --daemonize no >"$TMP/server.log" 2>&1) &
	for _ in $(seq 100); do
		[ -S "$SOCK" ] && cli ping 2>/dev/null | grep -q PONG && break
		sleep 0.1
	done
	SPID=$(pgrep -n -x redis-server)
	[ -n "$SPID" ] && cli ping | grep -q PONG || fail "redis-server did not start: $(tail -3 "$TMP/server.log")"
	if [ -n "${1:-}" ]; then grep -q libheaptrack "/proc/$SPID/maps" || fail "no libheaptrack in $SPID"; fi
}

# bench: one redis-benchmark run; prints the requests per second summed over its tests.
bench() {
	redis-benchmark -s "$SOCK" -t set,get,lpush,lpop,hset -n "$REQS" -r 100000 -d 512 -P 16 -q --csv \
		>"$TMP/b.csv" 2>"$TMP/b.err" || fail "redis-benchmark: $(tail -2 "$TMP/b.err")"
	awk -F'"' 'NR > 1 { s += $4 } END { if (s > 0) printf "%.0f\n", s; else exit 1 }' "$TMP/b.csv" ||
		fail "no rates in redis-benchmark's output: $(head -3 "$TMP/b.csv")"
}

healthy() { cli ping | grep -q PONG && cli dbsize >/dev/null || fail "server unhealthy $1"; }

shutdown_server() {
	cli shutdown nosave >/dev/null 2>&1
	for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$SPID" 2>/dev/null && fail "server $SPID did not exit"
	wait 2>/dev/null
	SPID=
}

ma() { "$MA" frag "$@" >>"$TMP/ma.log" 2>&1 || fail "memattach frag $* failed: $(tail -3 "$TMP/ma.log")"; }
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
row() { awk -v n="$1" -v b="$BASE" -v r="$2" 'BEGIN { printf "| %s | %d | %.1f%% |\n", n, r, (b - r) * 100 / b }'; }

HT=1
if [ "${SKIP_HEAPTRACK:-0}" = 1 ]; then HT=skipped
elif ! command -v heaptrack >/dev/null; then HT="not installed (apt-get install heaptrack)"; fi
plain=() agent=() after=() ht=()
for round in $(seq "$ROUNDS"); do
	serve
	bench >/dev/null # warm-up: the keys exist from here on
	plain+=("$(bench)")
	ma start "$SPID"
	agent+=("$(bench)")
	healthy "under the agent"
	ma stop "$SPID"
	after+=("$(bench)")
	healthy "after stop"
	shutdown_server
	if [ "$HT" = 1 ]; then
		serve heaptrack
		bench >/dev/null
		ht+=("$(bench)")
		shutdown_server
	fi
	echo "frag_redis: round $round: no agent ${plain[-1]}, frag start ${agent[-1]}, after stop ${after[-1]}${ht:+, heaptrack ${ht[-1]}}" >&2
done
printf '| redis-server %s, median of %s rounds | requests/s | throughput lost |\n' \
	"$(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')" "$ROUNDS"
printf '|---|---:|---:|\n'
BASE=$(median "${plain[@]}")
row "no agent" "$BASE"
row "memattach frag start (default --shift 8)" "$(median "${agent[@]}")"
row "after memattach frag stop" "$(median "${after[@]}")"
if [ "$HT" = 1 ]; then row "heaptrack" "$(median "${ht[@]}")"; else echo "| heaptrack | - | $HT |"; fi
