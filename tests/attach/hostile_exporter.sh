#!/usr/bin/env bash
# tests/attach/hostile_exporter.sh - memattach export (run as root) against
# hostile clients run as another, unprivileged user (ma-eve): ~1,000 idle
# connections kept open (reopened as the exporter closes them) and a few
# that drip a request one byte every 2 s.  Meanwhile a well-behaved scrape
# is answered with a valid body, the exporter's descriptors and memory stay
# bounded and it stays alive; after the clients go, scrapes still work.  The
# same under a low RLIMIT_NOFILE.  Then: --once exits 1 when a target cannot
# be read, and a target whose name holds a double quote, a backslash,
# control bytes and a byte that is not UTF-8 gives an exposition promtool
# check metrics accepts (text 0.0.4) and whose OpenMetrics lines all parse.
# No check is a time: outcomes only, with generous timeouts.
. "$(dirname "$0")/../lib/common.sh"
plan 25

for p in promtool curl setpriv useradd; do
	if ! command -v $p >/dev/null; then
		fail "$p missing (make deps installs prometheus, curl, util-linux)"
		exit 0
	fi
done
id ma-eve >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ma-eve
PY=/usr/bin/python3 # root's pyenv shims are not ma-eve's to run

fix_start daemon -q || { fail "daemon start"; exit 1; }
pid=$FIX_PID DFD=$FIX_FD DOUT=$FIX_OUT
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The hostile clients, as ma-eve: IDLE connections that never send, DRIP
# that send "GET /metrics HTTP/1.1\r\nX-Drip: aaaa..." one byte every
# PERIOD s; a connection the exporter closes is opened again at once.  One
# status line a second on stdout: up (connected now), peak, closed (by the
# exporter; closed_drip of them drippers), dripped (bytes).  Ends after LIFE s if not killed before.
EVE_PY='
import resource, selectors, socket, sys, time
host, port, nidle, ndrip, period, life = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < nidle + ndrip + 64:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, nidle + ndrip + 64), hard))
DRIP = b"GET /metrics HTTP/1.1\r\nX-Drip: "
sel = selectors.DefaultSelector()
conns = {}
st = {"up": 0, "peak": 0, "closed": 0, "closed_drip": 0, "dripped": 0}
def open_one(kind):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return
    conns[s] = {"kind": kind, "up": False, "sent": 0}
    sel.register(s, selectors.EVENT_WRITE)
def drop(s):
    c = conns.pop(s)
    if c["up"]:
        st["up"] -= 1
        st["closed"] += 1
        st["closed_drip"] += c["kind"] == "drip"
    sel.unregister(s)
    s.close()
    open_one(c["kind"])
for i in range(nidle):
    open_one("idle")
for i in range(ndrip):
    open_one("drip")
end = time.monotonic() + life
next_drip = next_status = time.monotonic()
while time.monotonic() < end:
    for key, ev in sel.select(timeout=0.2):
        s, c = key.fileobj, conns[key.fileobj]
        if not c["up"]:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                drop(s)
                continue
            c["up"] = True
            st["up"] += 1
            st["peak"] = max(st["peak"], st["up"])
            sel.modify(s, selectors.EVENT_READ)
            continue
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:
            drop(s)
    now = time.monotonic()
    if now >= next_drip:
        next_drip = now + period
        for s, c in list(conns.items()):
            if c["kind"] == "drip" and c["up"]:
                b = DRIP[c["sent"]:c["sent"] + 1] or b"a"
                try:
                    s.send(b)
                    c["sent"] += 1
                    st["dripped"] += 1
                except OSError:
                    drop(s)
    if now >= next_status:
        next_status = now + 1
        print("up=%(up)d peak=%(peak)d closed=%(closed)d closed_drip=%(closed_drip)d dripped=%(dripped)d" % st, flush=True)
'
# eve_start PORT IDLE DRIP OUT: start the clients as ma-eve; sets EVE_PID.
eve_start() {
	setpriv --reuid=ma-eve --regid=ma-eve --clear-groups $PY -I -c "$EVE_PY" \
		127.0.0.1 "$1" "$2" "$3" 2 90 >"$4" 2>&1 &
	EVE_PID=$!
	track $EVE_PID
}
# eve_field OUT NAME: NAME's value in the last status line.
eve_field() { tail -1 "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# eve_wait_peak OUT N: until the clients held N connections at once (20 s at most).
eve_wait_peak() {
	for _ in $(seq 200); do
		[ "$(eve_field "$1" peak)" -ge "$2" ] 2>/dev/null && return 0
		kill -0 "$EVE_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
# eve_wait_closed OUT FIELD N: until FIELD (closed, closed_drip) is N (20 s at most).
eve_wait_closed() {
	for _ in $(seq 200); do
		[ "$(eve_field "$1" "$2")" -ge "$3" ] 2>/dev/null && return 0
		kill -0 "$EVE_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
eve_stop() { kill -TERM "$EVE_PID" 2>/dev/null; wait "$EVE_PID" 2>/dev/null; }
# export_start OUTPREFIX PID [NOFILE]: start the exporter of PID on a free
# port (under ulimit -n NOFILE if given); sets XPID, EP.
export_start() {
	EP=$(free_port)
	(
		[ -n "$3" ] && ulimit -n "$3"
		exec "$MA" export --listen 127.0.0.1:$EP --pid "$2"
	) >"$1.out" 2>"$1.err" &
	XPID=$!
	track $XPID
	for _ in $(seq 100); do
		curl -s --max-time 5 "http://127.0.0.1:$EP/metrics" >/dev/null && return 0
		sleep 0.1
	done
	return 1
}
# scrape_ok FILE: a whole OpenMetrics body with the daemon read.
scrape_ok() {
	[ "$(tail -1 "$1")" = "# EOF" ] &&
		grep -q "^memattach_scrape_success{pid=\"$pid\",comm=\"daemon\"} 1$" "$1"
}
# scrape FILE: GET /metrics as Prometheus asks for it (OpenMetrics).
OM_ACCEPT='application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'
scrape() { curl -s --max-time 30 -H "Accept: $OM_ACCEPT" -o "$1" "http://127.0.0.1:$EP/metrics"; }
no_line() { ! says "$1" "$2"; }
fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }

export_start "$TMP/x1" "$pid" || { fail "exporter did not answer before the attack"; exit 1; }
# --- 4 drippers alone: a request must arrive whole in time, however it is cut ---
eve_start $EP 0 4 "$TMP/eve0.out"
eve_wait_peak "$TMP/eve0.out" 4
scrape "$TMP/m0.txt"
rc=$?
alive=no; kill -0 $EVE_PID 2>/dev/null && alive=yes
check "a scrape while 4 clients drip their requests is answered with a valid body (curl $rc)" \
	eval 'scrape_ok "$TMP/m0.txt" && [ $alive = yes ]'
eve_wait_closed "$TMP/eve0.out" closed_drip 4
check "the exporter closed the dripping connections, their requests unfinished ($(tail -1 "$TMP/eve0.out"))" \
	[ "$(eve_field "$TMP/eve0.out" closed_drip)" -ge 4 ] 2>/dev/null
eve_stop

# --- 1,000 idle connections and 8 drippers ---
eve_start $EP 1000 8 "$TMP/eve1.out"
eve_wait_peak "$TMP/eve1.out" 900
check "ma-eve held 900 or more connections to the exporter at once ($(tail -1 "$TMP/eve1.out"))" \
	[ "$(eve_field "$TMP/eve1.out" peak)" -ge 900 ] 2>/dev/null
scrape "$TMP/m1.txt"
rc=$?
alive=no; kill -0 $EVE_PID 2>/dev/null && alive=yes
check "a scrape during the attack is answered with a valid body (curl $rc)" scrape_ok "$TMP/m1.txt"
check "... while the hostile clients were still at it" [ $alive = yes ]
fds=$(fd_count $XPID) rss=$(rss_kib $XPID)
check "the exporter's descriptors stay bounded ($fds open; at most 256 connections + 64)" \
	[ "${fds:-9999}" -le 320 ]
check "its memory stays bounded (VmRSS ${rss:-?} KiB, under 64 MiB)" [ "${rss:-999999}" -lt 65536 ]
# Once the exporter has closed many of them (past their request deadline,
# or pushed out for newer ones) and ma-eve opens them again as fast as it
# can: the scrape still gets through.  (The wait is a sync point, not a check.)
eve_wait_closed "$TMP/eve1.out" closed 1000
scrape "$TMP/m1b.txt"
rc=$?
alive=no; kill -0 $EVE_PID 2>/dev/null && alive=yes
check "a scrape while ma-eve reopens what the exporter closes is answered too (curl $rc; $(tail -1 "$TMP/eve1.out"))" \
	eval 'scrape_ok "$TMP/m1b.txt" && [ $alive = yes ] && [ "$(eve_field "$TMP/eve1.out" dripped)" -gt 0 ]'
eve_stop
check "the exporter is alive after the attack" kill -0 $XPID
scrape "$TMP/m2.txt"
check "a scrape after the clients went is answered with a valid body" scrape_ok "$TMP/m2.txt"
kill -TERM $XPID; wait $XPID
check "export still stops on SIGTERM with exit 0" [ $? -eq 0 ]

# --- the same under RLIMIT_NOFILE 128: fewer connections, scrapes still have descriptors ---
export_start "$TMP/x2" "$pid" 128 || echo "exporter under ulimit -n 128 did not answer" >&2
eve_start $EP 1000 4 "$TMP/eve2.out"
eve_wait_peak "$TMP/eve2.out" 300
scrape "$TMP/m3.txt"
rc=$?
check "RLIMIT_NOFILE 128: a scrape during the attack is answered, the daemon read (curl $rc)" \
	scrape_ok "$TMP/m3.txt"
# A scraper whose request follows its connect by 0.2 s (a loaded machine)
# while ma-eve reopens what the exporter closes: it is not pushed out unread.
late=$($PY -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
time.sleep(0.2)
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
body = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    body += b
print(body.split(b"\r\n", 1)[0].decode(errors="replace"), len(body))
' $EP 2>&1)
check "... a scraper that sends its request 0.2 s after connecting is answered ($late; $(tail -1 "$TMP/eve2.out"))" \
	grep -q "^HTTP/1.1 200 OK [0-9]" <<<"$late"
fds=$(fd_count $XPID)
check "... the exporter stays alive with $fds descriptors open (limit 128)" \
	[ -n "$fds" -a "${fds:-9999}" -le 128 ]
eve_stop
kill -TERM $XPID; wait $XPID 2>/dev/null
check "... and nothing on its stderr says it ran out of descriptors" \
	no_line "Too many open files" "$TMP/x2.err"

# --- --once and targets that cannot be read ---
"$MA" export --once --pid 999999 >"$TMP/o1.txt" 2>"$TMP/o1.err"
check "export --once --pid 999999 exits 1 and says why" \
	exit_and_says $? 1 "scrape of process 999999.*no process" "$TMP/o1.err"
"$MA" export --once --pid "$pid" --pid 999999 >"$TMP/o2.txt" 2>"$TMP/o2.err"
check "--once with one live target and one gone exits 1, naming what failed" \
	exit_and_says $? 1 "1 of 2 targets could not be read" "$TMP/o2.err"
check "... and still prints the live target's readings" \
	grep -q "^memattach_scrape_success{pid=\"$pid\",comm=\"daemon\"} 1$" "$TMP/o2.txt"

# --- a target named with a quote, a backslash, control bytes and a non-UTF-8 byte ---
ODD=$'m"q\\\x01\x1b\xffz'
mkdir -p "$TMP/odd"
cp "$FIX/daemon" "$TMP/odd/$ODD"
savefix=$FIX FIX=$TMP/odd
fix_start "$ODD" -q || echo "odd-named daemon did not start" >&2
FIX=$savefix opid=$FIX_PID OFD=$FIX_FD OOUT=$FIX_OUT
"$MA" export --once --format prometheus --pid "$opid" >"$TMP/odd.prom" 2>"$TMP/odd.err"
check "--once --format prometheus of the odd name exits 0" [ $? -eq 0 ]
check "... and promtool check metrics accepts it (the target read)" \
	eval 'grep -q "^memattach_scrape_success{pid=\"$opid\",.*} 1$" "$TMP/odd.prom" &&
		promtool check metrics <"$TMP/odd.prom"'
export_start "$TMP/x3" "$opid" || echo "exporter for the odd name did not answer" >&2
curl -s --max-time 30 "http://127.0.0.1:$EP/metrics" -o "$TMP/odd.http" -D "$TMP/odd.head"
check "over HTTP, curl (Accept: */*) gets text 0.0.4 that promtool accepts" \
	eval 'grep -qi "^Content-Type: text/plain; version=0.0.4" "$TMP/odd.head" &&
		grep -q "^memattach_scrape_success{pid=\"$opid\",.*} 1$" "$TMP/odd.http" &&
		promtool check metrics <"$TMP/odd.http"'
scrape "$TMP/odd.om"
# Every OpenMetrics line a comment or name{label="escaped",...} value; the
# name's label holds its quote, backslash, control bytes as the text \xNN
# (a terminal shows them, never obeys them) and U+FFFD.
check "the OpenMetrics exposition of the odd name parses line by line, its label intact, no raw control byte" \
	$PY -c '
import re, sys
text = open(sys.argv[1], "rb").read().decode("utf-8")
lv = r"\"((?:[^\"\\\n]|\\[\\\"n])*)\""
sample = re.compile(r"[a-z_]+\{pid=\"%s\",comm=%s(,size=\"[0-9]+\")?\} [0-9.e+-]+" % (sys.argv[2], lv))
lines = text.split("\n")
assert lines[-1] == "" and lines[-2] == "# EOF", "no # EOF at the end"
comms = set()
for line in lines[:-1]:
    if line.startswith("# "):
        assert re.fullmatch(r"# (TYPE|UNIT|HELP) [a-z_]+ .*|# EOF", line), line
        continue
    m = sample.fullmatch(line)
    assert m, repr(line)
    comms.add(m.group(1))
assert len(comms) == 1, comms
v = re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), comms.pop())
assert all(c in v for c in ["\"", "\\x01", "\\x1b", "\ufffd"]), repr(v)
assert not re.search(r"[\x00-\x1f\x7f-\x9f]", text.replace("\n", "")), "a control byte reaches the output"
' "$TMP/odd.om" "$opid"
kill -TERM $XPID; wait $XPID 2>/dev/null
fix_quit "$opid" "$OFD"

# --- (found by an outside review) ma-eve starts processes that --match
# selects and that never let a thread be borrowed (each one costs a whole
# --timeout): once they have failed, the targets that answer go first and
# the scrape stops at its budget.
mkdir -p -m 755 "$TMP/st/root" "$TMP/st/eve"
cp "$FIX/daemon" "$TMP/st/root/victimd"; cp "$FIX/stall" "$TMP/st/eve/victimd"
chmod 755 "$TMP/st/eve/victimd"
savefix=$FIX FIX=$TMP/st/root
fix_start victimd -q || echo "victimd did not start" >&2
FIX=$savefix vpid=$FIX_PID VFD=$FIX_FD
stallers=()
for i in $(seq 12); do
	setpriv --reuid=ma-eve --regid=ma-eve --clear-groups "$TMP/st/eve/victimd" >"$TMP/st/s$i.out" 2>&1 &
	stallers+=($!); track $!
done
for i in $(seq 12); do for _ in $(seq 100); do grep -q READY "$TMP/st/s$i.out" && break; sleep 0.1; done; done
EP=$(free_port)
"$MA" export --listen 127.0.0.1:$EP --match '^victimd$' --timeout 1000 --scrape-timeout 3000 \
	>"$TMP/st/x.out" 2>"$TMP/st/x.err" &
SXPID=$!; track $SXPID
for _ in $(seq 100); do curl -s --max-time 60 -o "$TMP/st/m1" "http://127.0.0.1:$EP/metrics" && break; sleep 0.1; done
curl -s --max-time 60 -H "Accept: $OM_ACCEPT" -o "$TMP/st/m2" "http://127.0.0.1:$EP/metrics"
check "12 processes of ma-eve named as the target, never borrowable: the second scrape reads the target ($(grep -c "^memattach_scrape_success{pid=\"$vpid\"" "$TMP/st/m2" 2>/dev/null) lines; $(head -c 160 "$TMP/st/x.err"))" \
	grep -q "^memattach_scrape_success{pid=\"$vpid\",comm=\"victimd\"} 1$" "$TMP/st/m2"
check "... and the scrapes stop at their budget, the rest reported not read" \
	says "budget of 3000 ms" "$TMP/st/x.err"
kill -TERM $SXPID; wait $SXPID 2>/dev/null
kill -KILL "${stallers[@]}" 2>/dev/null; wait "${stallers[@]}" 2>/dev/null
fix_quit "$vpid" "$VFD"

fix_cmd "$pid" "$DFD" "$DOUT" resume >/dev/null
v=$(fix_cmd "$pid" "$DFD" "$DOUT" verdict)
check "daemon verdict ok after all this ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$DFD"
