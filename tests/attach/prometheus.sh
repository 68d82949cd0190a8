#!/usr/bin/env bash
# tests/attach/prometheus.sh - memattach export against a real Prometheus
# server (Debian's prometheus): it scrapes the exporter, and the values read
# back through Prometheus's HTTP API equal what 'memattach stats --json' and
# 'bins --json' say about the same quiet target.  A target that cannot be
# read (not jemalloc) is a metric and a log line, and the exporter lives on.
# 'stats --format openmetrics' passes promtool's linter.
. "$(dirname "$0")/../lib/common.sh"
plan 22

for p in prometheus promtool; do
	if ! command -v $p >/dev/null; then
		fail "$p missing (make deps installs prometheus)"
		exit 0
	fi
done
fix_start daemon || { fail "daemon start"; exit 1; }
pid=$FIX_PID
q=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" quiesce) # nothing allocates until resume
check "daemon quiesced" test -n "$q"
sleep 1000 & SPID=$!; track $SPID # a process without jemalloc

free_port() { jcheck 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(free_port) PP=$(free_port)
"$MA" export --listen 127.0.0.1:$EP --pid "$pid" --pid $SPID >"$TMP/exp.out" 2>"$TMP/exp.err" &
XPID=$!; track $XPID
get() { jcheck 'import sys,urllib.request
r=urllib.request.urlopen(sys.argv[1], timeout=20)
sys.stdout.write(r.headers.get("Content-Type","")+"\n"+r.read().decode())' "$1"; }
for _ in $(seq 50); do get "http://127.0.0.1:$EP/metrics" >"$TMP/m.txt" 2>/dev/null && break; sleep 0.1; done
check "exporter answers /metrics as OpenMetrics" grep -q '^application/openmetrics-text' "$TMP/m.txt"
check "... ending with # EOF" [ "$(tail -1 "$TMP/m.txt")" = "# EOF" ]
check "... the unreadable target is a metric (success 0, failures counted)" \
	grep -q "^memattach_scrape_success{pid=\"$SPID\",comm=\"sleep\"} 0" "$TMP/m.txt"
check "... and a log line naming it" says "scrape of process $SPID \(sleep\)" "$TMP/exp.err"

cat >"$TMP/prom.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: memattach
    static_configs:
      - targets: ['127.0.0.1:$EP']
EOF
prometheus --config.file="$TMP/prom.yml" --storage.tsdb.path="$TMP/tsdb" \
	--web.listen-address=127.0.0.1:$PP >"$TMP/prom.log" 2>&1 &
PPID_=$!; track $PPID_
query() { jcheck 'import json,sys,urllib.request,urllib.parse
u="http://127.0.0.1:%s/api/v1/query?query=%s" % (sys.argv[1], urllib.parse.quote(sys.argv[2]))
d=json.load(urllib.request.urlopen(u, timeout=5))
r=d["data"]["result"]
print(r[0]["value"][1] if r else "")' "$PP" "$1" 2>/dev/null; }
v=""
for _ in $(seq 150); do v=$(query "jemalloc_allocated_bytes{pid=\"$pid\"}"); [ -n "$v" ] && break; sleep 0.2; done
check "Prometheus scraped the exporter (up, and jemalloc_allocated_bytes = $v)" \
	[ -n "$v" -a "$(query 'up{job="memattach"}')" = 1 ]

"$MA" stats "$pid" --json >"$TMP/s.json"
"$MA" bins "$pid" --json >"$TMP/b.json"
for kv in allocated:jemalloc_allocated_bytes active:jemalloc_active_bytes \
	resident:jemalloc_resident_bytes metadata:jemalloc_metadata_bytes \
	slab_waste:jemalloc_slab_waste_bytes dirty:jemalloc_dirty_bytes \
	metadata_resident:jemalloc_metadata_resident_bytes; do
	k=${kv%%:*} m=${kv#*:}
	a=$(json_get "$TMP/s.json" "$k") b=$(query "$m{pid=\"$pid\"}")
	check "Prometheus $m = stats --json $k ($b, $a)" [ "${b:-none}" = "$a" ]
done
w=$(json_get "$TMP/b.json" small_waste) sw=$(query "sum(jemalloc_bin_waste_bytes{pid=\"$pid\"})")
check "Prometheus sum of jemalloc_bin_waste_bytes = bins --json small_waste ($sw, $w)" [ "${sw:-none}" = "$w" ]
check "memattach_scrape_success is 1 for the daemon" [ "$(query "memattach_scrape_success{pid=\"$pid\"}")" = 1 ]
# Each scrape counts one failure more: wait for the second (a query may time out under load).
for _ in $(seq 150); do
	f=$(query "memattach_scrape_failures_total{pid=\"$SPID\"}")
	[ "${f:-0}" -ge 2 ] && break
	sleep 0.2
done
check "memattach_scrape_failures_total counts the unreadable target's scrapes ($f)" [ "${f:-0}" -ge 2 ]
check "the exporter is still alive" kill -0 $XPID

"$MA" stats "$pid" --format openmetrics >"$TMP/om.txt"
check "stats --format openmetrics passes promtool check metrics" \
	promtool check metrics <"$TMP/om.txt"
check "... and carries process_resident_memory_bytes and a bin waste per size" \
	grep -q '^jemalloc_bin_waste_bytes{pid=.*,size="[0-9]*"} [0-9]' "$TMP/om.txt"
kill -TERM $XPID; wait $XPID
check "export stops on SIGTERM with exit 0" [ $? -eq 0 ]
kill $PPID_ 2>/dev/null; wait $PPID_ 2>/dev/null
fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" resume >/dev/null
v=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
check "daemon verdict ok after the scrapes ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$FIX_FD"
check "daemon exits cleanly" [ $? -eq 0 ]
