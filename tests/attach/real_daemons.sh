#!/usr/bin/env bash
# tests/attach/real_daemons.sh - every live command, with no flag, on Debian's
# own daemons as a user runs them: redis-server and kresd (knot-resolver),
# both linked to the system libjemalloc, each on 127.0.0.1 and under load
# (redis-benchmark; DNS queries over UDP and TCP answered from local policy
# data, no network).  A second redis runs with MALLOC_CONF=prof:true for the
# commands that need heap profiling.  Checked: each command's exit status
# and what it printed; redis's allocator figures against its own INFO memory
# and MEMORY MALLOC-STATS; the commands that need profiling refused clearly
# where it is off; and at the end both daemons answer, are the same
# processes with the same threads, and logged no EINTR.
. "$(dirname "$0")/../lib/common.sh"
plan 55

for tool in redis-server redis-cli redis-benchmark kresd kdig curl; do
	command -v "$tool" >/dev/null || missing="$missing $tool"
done
if [ -n "$missing" ]; then
	fail "missing:$missing (make deps installs redis-server, knot-resolver, knot-dnsutils, curl)"
	exit 0
fi
cd "$TMP" || exit 1

# free_port VAR: a port free for TCP and UDP on 127.0.0.1 (kresd listens on
# both), not handed out before in this test.
used_ports=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		[[ $used_ports == *" $p "* ]] && continue
		[ "$(cat /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 2>/dev/null |
			awk -v port="$(printf '%04X' "$p")" '{ split($2, a, ":"); if (a[2] == port) f = 1 }
			END { print f + 0 }')" = 0 ] || continue
		used_ports+="$p "
		printf -v "$1" %s "$p"
		return
	done
}
# start_time PID: the process's start time (field 22 of stat): same pid, same process.
start_time() { awk '{ print $22 }' "/proc/$1/stat" 2>/dev/null; }
tasks() { ls "/proc/$1/task" 2>/dev/null | sort -n | tr '\n' ' '; }
mark() { echo "# ${SECONDS}s: $*"; }
poll() { # poll TRIES CMD...: run CMD every 0.1 s until it succeeds
	local n=$1; shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
	return 1
}

# --- the daemons ---
start_redis() { # start_redis NAME PORT [ENV...]: sets the pid in ${NAME}_PID
	mkdir -p "$TMP/$1"
	(cd "$TMP/$1" && exec env "${@:3}" redis-server --port "$2" --bind 127.0.0.1 --save '' \
		--appendonly no --daemonize no) >"$TMP/$1.log" 2>&1 &
	track $!
	printf -v "${1^^}_PID" %s "$!"
}
free_port P1; start_redis r1 "$P1"
free_port P2; start_redis r2 "$P2" MALLOC_CONF=prof:true
mkdir -p "$TMP/kresd"
free_port KPORT
cat >"$TMP/kresd/config" <<EOF
-- Offline: every name under memattach. is answered from policy, all others refused,
-- and nothing reaches for the network (no root priming, trust anchors or time checks).
net.listen('127.0.0.1', $KPORT, { kind = 'dns' })
cache.open(10 * MB, 'lmdb://./cache')
trust_anchors.remove('.')
modules.unload('ta_update')
modules.unload('ta_signal_query')
modules.unload('priming')
modules.unload('detect_time_skew')
policy.add(policy.suffix(policy.ANSWER({ [kres.type.A] = { rdata = kres.str2ip('127.0.0.43'),
	ttl = 300 } }), { todname('memattach.') }))
policy.add(policy.all(policy.DENY))
EOF
kresd -n -c config "$TMP/kresd" >"$TMP/kresd.log" 2>&1 </dev/null &
K_PID=$!; track "$K_PID"

rping() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; }
# dns_ok [+tcp]: one query answered with the policy's address
dns_ok() { [ "$(kdig @127.0.0.1 -p "$KPORT" +short +timeout=5 +retry=0 "$@" probe.memattach 2>/dev/null)" = 127.0.0.43 ]; }
poll 100 rping "$P1"; check "redis-server answers on 127.0.0.1:$P1" rping "$P1"
poll 100 rping "$P2"; check "redis-server with MALLOC_CONF=prof:true answers on 127.0.0.1:$P2" rping "$P2"
poll 100 dns_ok; check "kresd answers over UDP and TCP on 127.0.0.1:$KPORT" eval 'dns_ok && dns_ok +tcp'
for d in r1 r2 k; do
	pid_var=${d^^}_PID; pid=${!pid_var}
	printf -v "${d}_start" %s "$(start_time "$pid")"
	printf -v "${d}_tasks" %s "$(tasks "$pid")"
done
"$MA" ps >"$TMP/ps.out" 2>&1; rc=$?
listed() { grep -qE "^ *$1 +$2 .*/libjemalloc\.so\.2\$" "$TMP/ps.out"; }
check "ps (exit $rc): both redis and kresd, with the system libjemalloc" \
	eval '[ $rc = 0 ] && listed $R1_PID redis-server && listed $R2_PID redis-server && listed $K_PID kresd'

# Every command of 'memattach --help' must be run below: a new one fails here until it is.
covered="stats threads bins purge heap-dump stats-dump watch snapshot export aggregate stacks diff frag profile ps ab"
uncovered=$("$MA" --help | sed -n '/^commands:/,/^$/p' | awk 'NF > 1 { print $1 }' |
	while read -r c; do [[ " $covered " == *" $c "* ]] || echo "$c"; done | tr '\n' ' ')
check "every command of --help is run here (not covered: '${uncovered% }')" [ -z "$uncovered" ]

# --- load: redis-benchmark on both redis, a query loop on kresd ---
bench() { # bench PORT NAME
	redis-benchmark -p "$1" -l -q -c 2 -r 100000 -d 200 -t set,get,lpush,lpop,hset \
		>"$TMP/$2.bench" 2>&1 &
	track $!
	printf -v "${2}_BENCH" %s "$!"
}
bench "$P1" r1; bench "$P2" r2
# Ten names per kdig, UDP then TCP; every answer must be the policy's address.
dns_load() {
	local i=0 n out
	while [ ! -e "$TMP/dns.stop" ]; do
		for proto in +notcp +tcp; do
			i=$((i + 1))
			out=$(kdig @127.0.0.1 -p "$KPORT" +short +timeout=5 +retry=0 "$proto" \
				$(for j in $(seq 10); do echo "q$i-$j.memattach"; done) 2>&1)
			n=$(grep -cx '127\.0\.0\.43' <<<"$out")
			echo "$n" >>"$TMP/dns.answered"
			[ "$n" = 10 ] || echo "$proto batch $i: $out" >>"$TMP/dns.failed"
		done
	done
}
dns_load & DNS_LOAD=$!; track $DNS_LOAD
answered() { awk '{ s += $1 } END { print s + 0 }' "$TMP/dns.answered" 2>/dev/null || echo 0; }
poll 200 eval '[ "$(answered)" -gt 0 ]'

# watch with no flag, from the start: it writes memattach-watch-PID/ in its cwd, stops on Ctrl-C.
for d in r1 r2 k; do
	pid_var=${d^^}_PID
	mkdir -p "$TMP/watch-$d"
	(cd "$TMP/watch-$d" && exec "$MA" watch "${!pid_var}") >"$TMP/watch-$d.out" 2>&1 &
	track $!
	printf -v "${d}_WATCH" %s "$!"
done

# --- every live command on a daemon without profiling ---
bytes_of() { awk -v k="$1" '$1 == k { print $4; exit }' "$2"; } # the byte column of a stats row
battery() { # battery NAME PID
	local d=$1 pid=$2 o="$TMP/$1" rc a ac r m
	"$MA" stats "$pid" >"$o.stats" 2>&1; rc=$?
	a=$(bytes_of allocated "$o.stats") ac=$(bytes_of active "$o.stats")
	r=$(bytes_of resident "$o.stats") m=$(bytes_of mapped "$o.stats")
	local sum rss
	sum=$(awk '$1 == "=" { print $5 }' "$o.stats") rss=$(bytes_of VmRSS "$o.stats")
	check "$d: stats (exit $rc): 0 < allocated $a <= active $ac <= resident $r, active <= mapped $m, parts sum $sum = VmRSS $rss" \
		eval '[ $rc = 0 ] && grep -q "^pid $pid (.*): jemalloc 5\.3\.0" "$o.stats" &&
		[ "${a:-0}" -gt 0 ] && [ "$a" -le "$ac" ] && [ "$ac" -le "$r" ] && [ "$ac" -le "$m" ] &&
		[ -n "$sum" ] && [ "$sum" = "$rss" ]'

	"$MA" threads "$pid" >"$o.threads" 2>&1; rc=$?
	local want nthreads listed_all=1 t
	want=$(ls "/proc/$pid/task" | wc -l)
	nthreads=$(sed -n "s/^pid $pid: \([0-9]*\) threads\?[,;].*/\1/p" "$o.threads")
	for t in $(ls "/proc/$pid/task"); do grep -q "^thread $t " "$o.threads" || listed_all=0; done
	check "$d: threads (exit $rc): $nthreads threads, as /proc has ($want), each listed" \
		eval '[ $rc = 0 ] && [ "$nthreads" = "$want" ] && [ $listed_all = 1 ]'

	"$MA" bins "$pid" >"$o.bins" 2>&1; rc=$?
	check "$d: bins (exit $rc): the table of size classes" \
		eval '[ $rc = 0 ] && grep -q "^bins of process $pid " "$o.bins" &&
		grep -qE "^ +size +nregs +slab" "$o.bins" && grep -qE "^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ " "$o.bins"'

	# The purge and both readings happen while one thread is held, and no other thread of
	# these daemons allocates or frees: nothing can make dirty pages in between.
	"$MA" purge "$pid" >"$o.purge" 2>&1; rc=$?
	local dirty_after alloc_delta
	dirty_after=$(awk '$1 == "dirty" { print $4, $5 }' "$o.purge")
	alloc_delta=$(awk '$1 == "allocated" { print $6, $7 }' "$o.purge")
	check "$d: purge (exit $rc): dirty after '$dirty_after', allocated changed by '$alloc_delta'" \
		eval '[ $rc = 0 ] && [ "$dirty_after" = "0 B" ] && [ "$alloc_delta" = "0 B" ]'

	"$MA" heap-dump "$pid" -o "$o.heap" >"$o.hd" 2>&1; rc=$?
	check "$d: heap-dump refused (exit $rc): '$(head -c 160 "$o.hd")'; no file" \
		eval '[ $rc = 1 ] && says "not started with heap profiling.*MALLOC_CONF=prof:true" "$o.hd" &&
		[ ! -e "$o.heap" ]'

	"$MA" stats-dump "$pid" -o "$o.json" >"$o.sd" 2>&1; rc=$?
	check "$d: stats-dump (exit $rc): jemalloc's JSON, version 5.3.0, opt.prof false" \
		eval '[ $rc = 0 ] && grep -q "^{\"jemalloc\":{\"version\":\"5\.3\.0" "$o.json" &&
		grep -o "\"opt\":{[^}]*}" "$o.json" | grep -q "\"prof\":false,"'

	"$MA" snapshot "$pid" -o "$o.snap" >"$o.sn" 2>&1; rc=$?
	check "$d: snapshot (exit $rc): manifest, stats, bins; no heap, saying why" \
		eval '[ $rc = 0 ] && [ -f "$o.snap/stats.json" ] && [ -f "$o.snap/bins.json" ] &&
		[ ! -e "$o.snap/heap.heap" ] && [ "$(json_get "$o.snap/manifest.json" pid)" = "$pid" ] &&
		says "heap profiling is off.*MALLOC_CONF=prof:true" "$o.sn" 2'

	"$MA" export --once --pid "$pid" >"$o.om" 2>&1; rc=$?
	check "$d: export --once (exit $rc): its gauges, scrape success 1" \
		eval '[ $rc = 0 ] && grep -qE "^jemalloc_allocated_bytes\{pid=\"$pid\",comm=\"[^\"]+\"\} [1-9][0-9]*$" "$o.om" &&
		grep -qE "^memattach_scrape_success\{pid=\"$pid\",.*\} 1$" "$o.om"'

	# frag: start, let the load run (100 more DNS answers for kresd, samples for redis),
	# then status, report and stop.
	"$MA" frag start "$pid" >"$o.fs" 2>&1; rc=$?
	check "$d: frag start (exit $rc)" \
		eval '[ $rc = 0 ] && grep -q "^frag agent started in process $pid" "$o.fs"'
	local base
	base=$(answered)
	poll 600 eval '[ "$(answered)" -ge $((base + 100)) ]'
	[ "$d" = r1 ] && poll 600 eval '"$MA" frag status $pid | grep -q "samples held [1-9]"'
	"$MA" frag status "$pid" >"$o.fst" 2>&1; rc=$?
	check "$d: frag status (exit $rc): '$(tail -1 "$o.fst")'" \
		eval '[ $rc = 0 ] && grep -q "^process $pid: frag agent running" "$o.fst"'
	"$MA" frag report "$pid" >"$o.fr" 2>&1; rc=$?
	if [ "$d" = r1 ]; then # redis allocates through zmalloc: its sampled stacks name it
		check "$d: frag report (exit $rc): live samples, stacks through zmalloc" \
			eval '[ $rc = 0 ] && grep -qE "^samples: [1-9][0-9]* live" "$o.fr" && grep -qE "^ +zmalloc" "$o.fr"'
	else # kresd allocates little per query (memory pools): samples may be none
		check "$d: frag report (exit $rc): its one thread's tcache flushed" \
			eval '[ $rc = 0 ] && grep -q "^frag report of process $pid" "$o.fr" &&
			grep -q "^tcache flush: 1 of 1 threads flushed" "$o.fr"'
	fi
	"$MA" frag stop "$pid" >"$o.fp" 2>&1; rc=$?
	# Debian's daemons link the shared libjemalloc: the agent rewrote GOT slots
	check "$d: frag stop (exit $rc): slots restored" \
		eval '[ $rc = 0 ] && grep -q "^frag agent stopped in process $pid: slots restored" "$o.fp"'

	# profile: a heap profile without prof, under the same load
	"$MA" profile start "$pid" --rate 65536 >"$o.ps" 2>&1 && "$MA" profile status "$pid" >>"$o.ps" 2>&1; rc=$?
	check "$d: profile start and status (exit $rc)" \
		eval '[ $rc = 0 ] && grep -q "^heap profile started in process $pid" "$o.ps" &&
		grep -q "^process $pid: heap profile running" "$o.ps"'
	base=$(answered)
	poll 600 eval '[ "$(answered)" -ge $((base + 100)) ]'
	[ "$d" = r1 ] && poll 600 eval '"$MA" profile status $pid | grep -q "samples held [1-9]"'
	"$MA" heap-dump "$pid" -o "$o.heap" >"$o.ph" 2>&1 && "$MA" aggregate "$o.heap" >>"$o.ph" 2>&1; rc=$?
	if [ "$d" = r1 ]; then # redis allocates through zmalloc, under redis-benchmark's SETs
		check "$d: heap-dump writes the agent's profile, aggregate reads it (exit $rc): sites through zmalloc" \
			eval '[ $rc = 0 ] && grep -q "heap profile from memattach.s agent" "$o.ph" && grep -qE "zmalloc|ztrymalloc" "$o.ph"'
	else
		check "$d: heap-dump writes the agent's profile, aggregate reads it (exit $rc)" \
			eval '[ $rc = 0 ] && grep -q "heap profile from memattach.s agent" "$o.ph" && grep -q "^dump .*heap_v2" "$o.ph"'
	fi
	"$MA" profile stop "$pid" >"$o.pp" 2>&1; rc=$?
	check "$d: profile stop (exit $rc): slots restored" \
		eval '[ $rc = 0 ] && grep -q "^heap profile stopped in process $pid: slots restored" "$o.pp"'
}
mark "r1: the commands"
battery r1 "$R1_PID"
mark "kresd: the commands"
battery k "$K_PID"

mark "r2: the commands that need prof"
# --- the profiled redis: the commands that need prof ---
o=$TMP/r2
"$MA" stats-dump "$R2_PID" -o "$o.json" >/dev/null 2>&1
check "r2: prof is on (its stats JSON: opt.prof true)" \
	eval 'grep -o "\"opt\":{[^}]*}" "$o.json" | grep -q "\"prof\":true,"'
"$MA" snapshot "$R2_PID" -o "$o.snapA" >"$o.snA" 2>&1; rc=$?
check "r2: snapshot (exit $rc) with its heap dump" \
	eval '[ $rc = 0 ] && head -1 "$o.snapA/heap.heap" | grep -q "^heap_v2/" &&
	[ "$(json_get "$o.snapA/manifest.json" pid)" = "$R2_PID" ]'
# Grow it by some 15 MiB of new keys, so that watch sees a new high and B differs from A.
redis-benchmark -p "$P2" -q -t set -n 30000 -r 100000000 -d 500 >/dev/null 2>&1
"$MA" heap-dump "$R2_PID" -o "$o.heap" >"$o.hd" 2>&1; rc=$?
check "r2: heap-dump (exit $rc): a heap_v2 dump with its mappings" \
	eval '[ $rc = 0 ] && head -1 "$o.heap" | grep -q "^heap_v2/" && grep -q "^MAPPED_LIBRARIES:" "$o.heap"'
"$MA" aggregate "$o.heap" --pid "$R2_PID" >"$o.agg" 2>"$o.agg.err"; rc=$?
check "r2: aggregate --pid (exit $rc): sites named (zmalloc), against the live stats.allocated" \
	eval '[ $rc = 0 ] && grep -qE "^ .* zmalloc" "$o.agg" && grep -q "^stats.allocated " "$o.agg"'
"$MA" stacks "$o.heap" zmalloc >"$o.stacks" 2>&1; rc=$?
check "r2: stacks DUMP zmalloc (exit $rc): call chains from zmalloc up to main" \
	eval '[ $rc = 0 ] && grep -qE "^ +zmalloc" "$o.stacks" && grep -qE "^ +main " "$o.stacks"'
"$MA" snapshot "$R2_PID" -o "$o.snapB" >/dev/null 2>&1
"$MA" diff "$o.snapA" "$o.snapB" >"$o.diff" 2>&1; rc=$?
grew=$(awk '$1 == "allocated" && $6 ~ /^\+[0-9]/ { print $6, $7 }' "$o.diff")
check "r2: diff A B (exit $rc): allocated grew by '$grew', zmalloc among the heap's growers" \
	eval '[ $rc = 0 ] && [ -n "$grew" ] && sed -n "/^growers:/,/^\$/p" "$o.diff" | grep -q zmalloc'

mark "export"
# --- export as a server: one scrape covers the three daemons ---
free_port EPORT
"$MA" export --listen "127.0.0.1:$EPORT" --pid "$R1_PID" --pid "$R2_PID" --pid "$K_PID" \
	>"$TMP/export.out" 2>&1 &
EXP=$!; track $EXP
poll 100 curl -sf -o "$TMP/metrics" "http://127.0.0.1:$EPORT/metrics"
ok_all=1
for p in "$R1_PID" "$R2_PID" "$K_PID"; do
	grep -qE "^memattach_scrape_success\{pid=\"$p\",.*\} 1$" "$TMP/metrics" || ok_all=0
	grep -qE "^jemalloc_allocated_bytes\{pid=\"$p\"," "$TMP/metrics" || ok_all=0
done
kill -TERM "$EXP"; wait "$EXP"; rc=$?
check "export --listen: one GET /metrics read all three daemons; SIGTERM ends it (exit $rc)" \
	eval '[ $ok_all = 1 ] && [ $rc = 0 ]'

mark "watch"
# --- watch: Ctrl-C once each has 3 samples with allocator stats (and r2 a heap dump) ---
stat_rows() { awk -F, 'NR > 1 && $4 != ""' "$1" 2>/dev/null | wc -l; }
for d in r1 k r2; do
	pid_var=${d^^}_PID pid=${!pid_var} w=${d}_WATCH
	dir=$TMP/watch-$d/memattach-watch-$pid
	poll 600 eval '[ "$(stat_rows "$dir/series.csv")" -ge 3 ]'
	[ "$d" = r2 ] && poll 600 eval 'awk -F, "NR > 1 && \$7 == 1" "$dir/series.csv" | grep -q .'
	kill -INT "${!w}"; wait "${!w}"; rc=$?
	rows=$(($(wc -l <"$dir/series.csv") - 1)) dumps=$(awk -F, 'NR > 1 && $7 == 1' "$dir/series.csv" | wc -l)
	sum=$(grep '^stopped (interrupted): ' "$TMP/watch-$d.out")
	if [ "$d" = r2 ]; then
		check "$d: watch (exit $rc): '${sum:0:90}': $dumps dump(s), peak.heap a heap_v2 dump" \
			eval '[ $rc = 0 ] && [[ $sum == *": $rows samples ("*", $dumps heap dumps"* ]] &&
			[ "$dumps" -ge 1 ] && head -1 "$dir/peak.heap" | grep -q "^heap_v2/"'
	else
		# no prof: a dump only at a high reached while profile ran (the battery), the agent's
		check "$d: watch (exit $rc): '${sum:0:90}': the series; $dumps dump(s), the agent's" \
			eval '[ $rc = 0 ] && [[ $sum == *": $rows samples ("*", $dumps heap dumps"* ]] &&
			[ "$(stat_rows "$dir/series.csv")" -ge 3 ] && [ -s "$dir/chart.svg" ] &&
			{ [ "$dumps" -eq 0 ] && [ ! -e "$dir/peak.heap" ] || head -1 "$dir/peak.heap" | grep -q "^heap_v2/"; }'
	fi
done

mark "redis's own figures"
# --- redis's own figures, with its load paused ---
kill "$r1_BENCH"; wait "$r1_BENCH" 2>/dev/null
# ab on the running redis (reuse: each side only pings it; fixtures/ab_redis_side.sh and
# attach/ab.sh start fresh servers): its samples read while redis-benchmark runs, redis stays.
"$MA" ab -a "redis-cli -p $P1 ping" -b "redis-cli -p $P1 ping" --pid "echo $R1_PID" --lifecycle reuse \
	--runs 2 >"$TMP/ab.out" 2>&1; rc=$?
check "r1: ab --lifecycle reuse (exit $rc): 4 samples of the running redis under load, which stays" \
	eval '[ $rc = 0 ] && [ "$(grep -c "^ab: sample [0-9]/4 (.): pid $R1_PID," "$TMP/ab.out")" = 4 ] &&
	grep -q "^allocated " "$TMP/ab.out" && kill -0 "$R1_PID"'

rinfo() { sed -n "s/^$1://p" "$TMP/r1.info"; }
# INFO memory gives the figures redis read at its last serverCron (every 100 ms), with the
# same mallctl calls; MEMORY MALLOC-STATS prints at once.  Any allocation between the two
# readings (the cron's own work, the connection that asks) makes them differ: both are
# taken again, at most 10 times, until one pair was read at a quiet moment.
agree=0
for attempt in $(seq 10); do
	"$MA" stats "$R1_PID" --json >"$TMP/r1.sj" 2>&1 || break
	sleep 0.15 # one serverCron has read the allocator since memattach did
	redis-cli -p "$P1" info memory | tr -d '\r' >"$TMP/r1.info"
	ia=$(rinfo allocator_allocated) iac=$(rinfo allocator_active) ir=$(rinfo allocator_resident)
	ifb=$(rinfo allocator_frag_bytes) irb=$(rinfo allocator_rss_bytes)
	a=$(json_get "$TMP/r1.sj" allocated) ac=$(json_get "$TMP/r1.sj" active) r=$(json_get "$TMP/r1.sj" resident)
	sw=$(json_get "$TMP/r1.sj" slab_waste)
	ps_=$(($(json_get "$TMP/r1.sj" dirty) + $(json_get "$TMP/r1.sj" metadata_resident)))
	if [ "$ia/$iac/$ir" = "$a/$ac/$r" ]; then agree=1; break; fi
	echo "# attempt $attempt: INFO $ia/$iac/$ir, memattach $a/$ac/$r"
done
check "r1: allocated, active, resident = INFO memory's allocator_* ($a, $ac, $r; attempt $attempt)" \
	[ "$agree" = 1 ]
check "r1: slab_waste = allocator_frag_bytes ($sw), dirty + metadata_resident = allocator_rss_bytes ($ps_)" \
	eval '[ "$agree" = 1 ] && [ "$sw" = "$ifb" ] && [ "$ps_" = "$irb" ]'
# MEMORY MALLOC-STATS: the merged arenas' bin table (or the one arena's, when only one).
malloc_bins() {
	redis-cli -p "$P1" memory malloc-stats | awk '
		/^Merged arenas stats:/ { m = 1 } /^arenas\[0\]:/ && !m { a = 1 }
		(m || a) && /^bins:/ { b = 1; next }
		b && /^large:/ { exit }
		b && $1 ~ /^[0-9]+$/ { print $1, $11, $12, $13 }'
}
agree=0
for attempt in $(seq 10); do
	"$MA" bins "$R1_PID" --json >"$TMP/r1.bj" 2>&1 || break
	grep -o '{"size":[0-9]*,[^}]*}' "$TMP/r1.bj" | sed -E \
		's/.*"size":([0-9]+).*"curregs":([0-9]+),"curslabs":([0-9]+),"nonfull_slabs":([0-9]+).*/\1 \2 \3 \4/' |
		awk '$3 != 0' >"$TMP/r1.bins.ma"
	malloc_bins | awk '$3 != 0' >"$TMP/r1.bins.redis"
	if [ -s "$TMP/r1.bins.ma" ] && cmp -s "$TMP/r1.bins.ma" "$TMP/r1.bins.redis"; then agree=1; break; fi
	echo "# attempt $attempt: bins differ: $(diff "$TMP/r1.bins.ma" "$TMP/r1.bins.redis" | head -3 | tr '\n' ' ')"
done
check "r1: bins' curregs/curslabs/nonfull per class = MEMORY MALLOC-STATS ($(wc -l <"$TMP/r1.bins.ma") classes; attempt $attempt)" \
	[ "$agree" = 1 ]

mark "end"
# --- both kept answering ---
touch "$TMP/dns.stop"; wait "$DNS_LOAD"
kill "$r2_BENCH"; wait "$r2_BENCH" 2>/dev/null
check "redis-benchmark ran on both redis and saw no error" \
	eval 'grep -q "overall: [1-9]" "$TMP/r1.bench" && grep -q "overall: [1-9]" "$TMP/r2.bench" &&
	! grep -qiE "error|could not" "$TMP/r1.bench" "$TMP/r2.bench"'
check "kresd answered every one of $(answered) queries of the load (UDP and TCP)" \
	eval '[ ! -s "$TMP/dns.failed" ] && [ "$(answered)" -gt 0 ]'
[ -s "$TMP/dns.failed" ] && head -5 "$TMP/dns.failed" | sed 's/^/# /'
same() { # same NAME PID: the same process, threads as at the start
	local s=${1}_start t=${1}_tasks
	[ "$(start_time "$2")" = "${!s}" ] && [ "$(tasks "$2")" = "${!t}" ] &&
		[ "$(awk '{ print $3 }' "/proc/$2/stat")" != Z ]
}
check "redis (prof off) answers PING, same process and threads as at the start" \
	eval 'rping "$P1" && same r1 "$R1_PID"'
check "redis (prof on) answers PING, same process and threads as at the start" \
	eval 'rping "$P2" && same r2 "$R2_PID"'
check "kresd answers over UDP and TCP, same process and threads as at the start" \
	eval 'dns_ok && dns_ok +tcp && same k "$K_PID"'
if ! kill -0 "$K_PID" 2>/dev/null; then wait "$K_PID"; echo "# kresd is gone: exit status $?"; fi
check "no EINTR, interrupted call, crash or assertion in the daemons' logs" \
	eval '! grep -iE "eintr|interrupted|crash|assert|panic|abort" "$TMP/r1.log" "$TMP/r2.log" "$TMP/kresd.log"'
