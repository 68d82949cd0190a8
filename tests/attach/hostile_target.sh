#!/usr/bin/env bash
# A hostile target cannot turn root's memattach against the machine.
#
# An unprivileged user, ma-eve, owns the targets and the folders root
# writes into, and attacks (attach/README.md, "Threat model"):
#  1. her target dup2s an O_PATH descriptor of a root-only file over the
#     heap-dump memfd once jemalloc wrote it: the secret must not come out;
#  2. the same swap on the frag agent's memfd: root's file must not change;
#  3. watch's default folder pre-made, series.csv a link to root's file;
#  4. a stale temporary folder swapped (RENAME_EXCHANGE) with a link to a
#     root folder while root writes next to it: root's files must stay;
#  5. a FIFO swapped in for the dump's memfd: heap-dump must not hang;
#  7. her flock on the executable of root's daemon: root's runs still work;
#  8. /tmp/memattach-UID made for another user: that user's runs still work.
# (6, names with control bytes: hostile_names.sh; 9, the exporter's
# clients: hostile_exporter.sh.)
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 30
need_fixtures hostile daemon

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	for i in $(seq 29); do fail "hostile target check $i: needs root and setpriv (util-linux)"; done
	exit 0
fi
id ma-eve >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ma-eve
# Arrays, not functions: a function run with & is a subshell, and $! its pid.
EVE=(setpriv --reuid=ma-eve --regid=ma-eve --clear-groups)
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)

chmod 755 "$TMP"
PUB=$TMP/pub # a shared folder like /tmp
mkdir -m 1777 "$PUB"
cp "$FIX/hostile" "$FIX/daemon" "$PUB/"
chmod 755 "$PUB/hostile" "$PUB/daemon"
secret="ROOT-SECRET-$RANDOM$RANDOM"
echo "$secret" >"$TMP/secret"; chmod 600 "$TMP/secret"
mkfifo -m 600 "$TMP/fifo"
sum() { sha256sum <"$1" | cut -c1-64; }

# eve_target MODE [BAIT]: start build/fixtures/hostile as ma-eve with
# profiling on; sets EPID, EFD (close it to end the target), EDIR.
n_targets=0
eve_target() {
	n_targets=$((n_targets + 1))
	EDIR=$PUB/t$n_targets
	mkdir -m 777 "$EDIR"; mkfifo -m 666 "$EDIR/in"
	"${EVE[@]}" env MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:12 \
		"$PUB/hostile" "$@" <"$EDIR/in" >"$EDIR/out" 2>"$EDIR/err" &
	EPID=$!; track "$EPID"
	exec {EFD}>"$EDIR/in"
	for _ in $(seq 100); do grep -q '^READY' "$EDIR/out" && return 0; sleep 0.1; done
	return 1
}
# eve_end: close the target's stdin; it must print ALIVE and exit 0.
eve_end() {
	exec {EFD}>&-
	wait "$EPID" && grep -q '^ALIVE' "$EDIR/out"
}
swaps() { grep -c '^SWAPPED' "$EDIR/err"; }

# --- 1. the heap-dump memfd swapped for a root-only file ---
eve_target swap-heap "$TMP/secret" || fail "swap-heap target: start"
leaked=0 dumps=0
for i in $(seq 10); do
	timeout 120 "$MA" heap-dump "$EPID" -o "$TMP/d$i.heap" >/dev/null 2>"$TMP/d.err" &&
		dumps=$((dumps + 1))
	grep -qs "$secret" "$TMP/d$i.heap" "$TMP/d.err" && leaked=$((leaked + 1))
done
check "1. heap-dump never copies the file swapped in for its memfd ($leaked of 10 leaked it; $(swaps) swaps, $dumps dumps written)" \
	[ "$leaked" -eq 0 ]
check "1. the attack ran: the target swapped the memfd ($(swaps) times)" [ "$(swaps)" -gt 0 ]
check "1. the output is mode 0600 ($(stat -c %a "$TMP/d1.heap" 2>/dev/null))" \
	bash -c "[ ! -e '$TMP/d1.heap' ] || [ \"\$(stat -c %a '$TMP/d1.heap')\" = 600 ]"
check "1. the target lives on" eve_end

# --- 5. a FIFO swapped in for the memfd ---
eve_target swap-heap "$TMP/fifo" || fail "swap-fifo target: start"
hung=0 tries=0
# until the attack has run twice (5 tries at least, 12 at most)
while [ $tries -lt 12 ] && { [ $tries -lt 5 ] || [ "$(swaps)" -lt 2 ]; }; do
	tries=$((tries + 1))
	timeout 30 "$MA" heap-dump "$EPID" -o "$TMP/f$tries.heap" >/dev/null 2>"$TMP/f.err"
	[ $? -eq 124 ] && hung=$((hung + 1))
done
check "5. heap-dump never waits on a FIFO swapped in ($hung of $tries hung for 30 s; $(swaps) swaps)" \
	[ "$hung" -eq 0 ]
check "5. the attack ran: the target swapped the memfd ($(swaps) times)" [ "$(swaps)" -gt 0 ]
check "5. the target lives on" eve_end

# --- 2. the agent's memfd swapped for a root file ---
{ yes victim | head -c 100000; } 2>/dev/null >"$TMP/victim"; chmod 644 "$TMP/victim"
before=$(sum "$TMP/victim")
# The agent's memfd exists only during a target's first frag start (the
# agent then stays loaded), a window of a few milliseconds the target's
# swapper must be on a CPU for: the test build waits 300 ms once the memfd
# is made (with 8 CPU hogs beside it, 15 targets without that wait saw no
# swap), and each try takes a fresh target until the swap has happened (3
# targets at least, 15 at most).
swapped=0 ntries=0 died=0
while [ $ntries -lt 15 ] && { [ $ntries -lt 3 ] || [ $swapped -eq 0 ]; }; do
	ntries=$((ntries + 1))
	eve_target swap-agent "$TMP/victim" || { fail "swap-agent target $ntries: start"; break; }
	MEMATTACH_TEST_PAUSE_AT=agent-memfd timeout 120 "$MA_T" frag start "$EPID" >/dev/null 2>&1 &&
		timeout 120 "$MA" frag stop "$EPID" >/dev/null 2>&1
	swapped=$((swapped + $(swaps)))
	eve_end || died=$((died + 1))
done
check "2. frag start never writes the agent into a file swapped in ($swapped swaps over $ntries targets)" \
	[ "$(sum "$TMP/victim")" = "$before" ]
check "2. the attack ran: the targets swapped the memfd ($swapped times over $ntries targets)" [ "$swapped" -gt 0 ]
check "2. the targets live on ($died of $ntries died)" [ "$died" -eq 0 ]

# --- 3. watch's default folder made by eve, series.csv a link to root's file ---
{ yes keep | head -c 5000; } 2>/dev/null >"$TMP/victim3"; chmod 600 "$TMP/victim3"
before=$(sum "$TMP/victim3")
eve_target idle || fail "idle target: start"
"${EVE[@]}" mkdir -m 777 "$PUB/memattach-watch-$EPID"
"${EVE[@]}" ln -s "$TMP/victim3" "$PUB/memattach-watch-$EPID/series.csv"
(cd "$PUB" && timeout 60 "$MA" watch "$EPID" --interval 100 --duration 1 >"$TMP/w.out" 2>"$TMP/w.err")
rc=$?
check "3. watch does not write through eve's folder (exit $rc; $(head -c 200 "$TMP/w.out" "$TMP/w.err" | tr '\n' ' '))" \
	[ "$(sum "$TMP/victim3")" = "$before" ]
check "3. watch writes into a new folder of its own instead" \
	bash -c "ls -d '$PUB'/memattach-watch-$EPID.* >/dev/null 2>&1 && [ \"\$(stat -c %U%a '$PUB'/memattach-watch-$EPID.*)\" = root700 ]"
timeout 60 "$MA" watch "$EPID" --out "$PUB/memattach-watch-$EPID" --duration 1 >/dev/null 2>"$TMP/w2.err"
rc=$?
check "3. watch --out eve's folder is refused, saying why (exit $rc: $(head -c 200 "$TMP/w2.err"))" \
	exit_and_says "$rc" 1 "not a private folder" "$TMP/w2.err"

# --- 4. a stale temporary folder swapped with a link to a root folder ---
mkdir -m 700 "$TMP/rootdir"
for f in a b c; do echo "$f" >"$TMP/rootdir/$f"; done
dead=$((1 << 22)); while kill -0 "$dead" 2>/dev/null; do dead=$((dead - 1)); done
"${EVE[@]}" mkdir -m 777 "$PUB/eve"
"${EVE[@]}" /usr/bin/python3 - "$PUB/eve" "$TMP/rootdir" "$dead" <<'EOF' &
import ctypes, os, sys, time
d, root, dead = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
stale = os.path.join(d, "out.json.tmp.%s.aaaaaa" % dead)
link = os.path.join(d, "lnk")
os.mkdir(stale); os.symlink(root, link)
open(os.path.join(d, "go"), "w").close()
end = time.time() + 120
while time.time() < end and not os.path.exists(os.path.join(d, "stop")):
    # RENAME_EXCHANGE (2): the folder and the link trade names, over and over
    if libc.renameat2(-100, stale.encode(), -100, link.encode(), 2) != 0:
        # a cleanup removed the folder: put back whichever name is missing
        for name in (stale, link):
            if not os.path.lexists(name):
                try:
                    other = stale if name == link else link
                    if os.path.islink(other):
                        os.mkdir(name)
                    else:
                        os.symlink(root, name)
                except OSError:
                    pass
EOF
racer=$!
for _ in $(seq 50); do [ -e "$PUB/eve/go" ] && break; sleep 0.1; done
for i in $(seq 40); do
	"$MA" stats-dump "$EPID" -o "$PUB/eve/out.json" >/dev/null 2>&1
done
touch "$PUB/eve/stop"; wait "$racer"
left=$(ls "$TMP/rootdir" | tr -d '\n')
check "4. the stale-temporary cleanup never removes through a swapped link (root's files: '$left', want 'abc')" \
	[ "$left" = abc ]
check "4. stats-dump wrote its output there all the same" test -s "$PUB/eve/out.json"
# (found by an outside review) a folder of root's renamed by eve into a
# temporary's name must not be emptied by the cleanup
mkdir -m 755 "$PUB/eve/rootkeys"; echo key >"$PUB/eve/rootkeys/id_key"
"${EVE[@]}" mv "$PUB/eve/rootkeys" "$PUB/eve/.out.json.tmp.1.zzzzzz"
"$MA" stats-dump "$EPID" -o "$PUB/eve/out.json" >/dev/null 2>&1
check "4. a root folder eve renamed into a temporary's name is left whole" \
	test -s "$PUB/eve/.out.json.tmp.1.zzzzzz/id_key"
# (found by an outside review) eve's link in a shared folder, named as
# the output's folder, must not be followed
mkdir -m 700 "$TMP/rootonly"
"${EVE[@]}" ln -s "$TMP/rootonly" "$PUB/reports"
"$MA" stats-dump "$EPID" -o "$PUB/reports/s.json" >/dev/null 2>"$TMP/l.err"; rc=$?
check "4. an output path through eve's link is refused, saying why (exit $rc: $(head -c 200 "$TMP/l.err"))" \
	exit_and_says "$rc" 1 "does not follow" "$TMP/l.err"
"$MA" snapshot "$EPID" -o "$PUB/reports/snap" >/dev/null 2>&1
"$MA" watch "$EPID" --out "$PUB/reports/w" --duration 1 >/dev/null 2>&1
check "4. nothing was written into root's folder through it ($(ls -A "$TMP/rootonly" | tr '\n' ' '))" \
	test -z "$(ls -A "$TMP/rootonly")"
# (found by an outside attack) eve's empty folder named as snapshot's output
# was removed and replaced by root's own
"${EVE[@]}" mkdir "$PUB/evesnap"
"$MA" snapshot "$EPID" -o "$PUB/evesnap" >/dev/null 2>"$TMP/l.err"; rc=$?
check "4. snapshot into eve's empty folder is refused, the folder left hers (exit $rc: $(stat -c %U "$PUB/evesnap"), $(head -c 200 "$TMP/l.err"))" \
	eval '[ "$(stat -c %U "$PUB/evesnap")" = ma-eve ] && exit_and_says "$rc" 1 "another user.s folder" "$TMP/l.err"'
# (outside attack) eve's link to an empty folder was called "not an empty directory"
"${EVE[@]}" ln -s "$TMP/rootonly" "$PUB/evesnaplink"
"$MA" snapshot "$EPID" -o "$PUB/evesnaplink" >/dev/null 2>"$TMP/l.err"; rc=$?
check "4. snapshot onto eve's link to an empty folder: refused as a link not followed, nothing written (exit $rc: $(head -c 200 "$TMP/l.err"))" \
	eval 'exit_and_says "$rc" 1 "is a symbolic link \(of uid [0-9]+\), which memattach does not follow" "$TMP/l.err" && [ -z "$(ls -A "$TMP/rootonly")" ]'
"$MA" stats-dump "$EPID" -o "$TMP/rootonly/../s.json" >/dev/null 2>"$TMP/l.err"; rc=$?
check "4. a path through folders and links of root's own works (exit $rc: $(head -c 200 "$TMP/l.err"))" \
	[ "$rc" -eq 0 ]
eve_end >/dev/null

# --- (found by an outside review) dumps and inputs naming root-only files ---
mkdir -m 700 "$TMP/sec"
printf 'void TOPSECRET_root_only_fn(void) {}\nint main(void) { TOPSECRET_root_only_fn(); return 0; }\n' >"$TMP/sec/s.c"
cc -O0 -o "$TMP/sec/secret" "$TMP/sec/s.c" && chmod 700 "$TMP/sec/secret"
fn=$(nm "$TMP/sec/secret" | awk '$3 == "TOPSECRET_root_only_fn" { print $1 }')
mkdir -m 777 "$PUB/d"
crafted() { # crafted PATH-IN-MAPS: a dump whose one stack is in that file's function
	local maj=0 min=0 ino=0
	# the file's device and inode as a real dump lists them (else it counts as replaced since)
	read -r maj min ino < <(stat -L -c '%Hd %Ld %i' "$1" 2>/dev/null) || true
	printf 'heap_v2/524288\n  t*: 1: 1048576 [0: 0]\n  t0: 1: 1048576 [0: 0]\n'
	printf '@ 0x%x\n  t*: 1: 1048576 [0: 0]\n  t0: 1: 1048576 [0: 0]\n\n' $((0x555555554000 + 0x$fn + 1))
	printf 'MAPPED_LIBRARIES:\n555555554000-555555556000 r-xp 00000000 %02x:%02x %s %s\n' \
		"${maj:-0}" "${min:-0}" "${ino:-0}" "$1"
}
crafted "$TMP/sec/secret" | "${EVE[@]}" tee "$PUB/d/eve.heap" >/dev/null
"$MA" aggregate "$PUB/d/eve.heap" >"$TMP/agg.out" 2>&1
check "a dump eve wrote naming a root-only ELF: aggregate does not print its symbols ($(grep -c TOPSECRET "$TMP/agg.out") lines)" \
	bash -c "! grep -q TOPSECRET '$TMP/agg.out'"
"${EVE[@]}" ln -s "$TMP/sec/secret" "$PUB/d/lib.so"
crafted "$PUB/d/lib.so" >"$TMP/root.heap" # a dump of root's, naming eve's path she swapped for a link
"$MA" aggregate "$TMP/root.heap" >"$TMP/agg2.out" 2>&1
check "a dump naming eve's link to a root-only ELF: aggregate does not follow it ($(grep -c TOPSECRET "$TMP/agg2.out") lines)" \
	bash -c "! grep -q TOPSECRET '$TMP/agg2.out'"
echo 'root:$6$SECRETHASH:19000:0:99999:7:::' >"$TMP/sec/shadowlike"; chmod 600 "$TMP/sec/shadowlike"
"${EVE[@]}" ln -s "$TMP/sec/shadowlike" "$PUB/d/link.heap"
"$MA" aggregate "$PUB/d/link.heap" >"$TMP/agg3.out" 2>&1; rc=$?
check "an input path through eve's link is refused without reading it (exit $rc: $(head -c 200 "$TMP/agg3.out"))" \
	eval "[ $rc -eq 1 ] && ! grep -q SECRETHASH '$TMP/agg3.out' && says 'does not follow' '$TMP/agg3.out'"
crafted "$TMP/sec/secret" >"$TMP/own.heap"
"$MA" aggregate "$TMP/own.heap" >"$TMP/agg4.out" 2>&1
check "root's own dump of root's own binary is still named (the check above can see names)" \
	grep -q TOPSECRET_root_only_fn "$TMP/agg4.out"

# --- 7. eve holds the flock of the executable of root's daemon ---
mkdir -m 755 "$TMP/rd"; mkfifo -m 600 "$TMP/rd/in"
"$PUB/daemon" -t 2 <"$TMP/rd/in" >"$TMP/rd/out" 2>&1 & rpid=$!; track $rpid
exec {rfd}>"$TMP/rd/in"
for _ in $(seq 100); do grep -q '^READY' "$TMP/rd/out" && break; sleep 0.1; done
"${EVE[@]}" flock -o -x "$PUB/daemon" sleep 60 >/dev/null 2>&1 & flocker=$!
for _ in $(seq 50); do flock -n -x "$PUB/daemon" true || break; sleep 0.1; done
"$MA" stats "$rpid" --timeout 1500 >/dev/null 2>"$TMP/r.err"; rc=$?
check "7. root's run works while eve holds the executable's flock (exit $rc: $(head -c 200 "$TMP/r.err"))" \
	[ "$rc" -eq 0 ]
"${EVE[@]}" flock -n -x "/proc/$rpid/personality" true 2>/dev/null; rc=$?
check "7. eve cannot take the run lock of root's process itself (flock exit $rc)" [ "$rc" -ne 0 ]
kill "$flocker" 2>/dev/null; wait "$flocker" 2>/dev/null
check "7. root's daemon's verdict is ok" grep -q '^VERDICT ok' \
	<(fix_cmd "$rpid" "$rfd" "$TMP/rd/out" verdict)
fix_quit "$rpid" "$rfd"

# --- 8. eve makes /tmp/memattach-65534 before that user's first run ---
# (made by root and given to eve: another run may have made it meanwhile)
rm -rf /tmp/memattach-65534; mkdir -p -m 755 /tmp/memattach-65534; chown ma-eve: /tmp/memattach-65534
mkdir -m 777 "$TMP/nb"; mkfifo -m 666 "$TMP/nb/in"
"${NOBODY[@]}" "$PUB/daemon" -t 2 <"$TMP/nb/in" >"$TMP/nb/out" 2>&1 & npid=$!; track $npid
exec {nfd}>"$TMP/nb/in"
for _ in $(seq 100); do grep -q '^READY' "$TMP/nb/out" && break; sleep 0.1; done
"${NOBODY[@]}" "$MA" stats "$npid" >/dev/null 2>"$TMP/n.err"; rc=$?
check "8. a user's runs work though eve made /tmp/memattach-65534 (exit $rc: $(head -c 200 "$TMP/n.err"))" \
	[ "$rc" -eq 0 ]
check "8. that user's daemon's verdict is ok" grep -q '^VERDICT ok' \
	<(fix_cmd "$npid" "$nfd" "$TMP/nb/out" verdict)
fix_quit "$npid" "$nfd"
rm -rf /tmp/memattach-65534
