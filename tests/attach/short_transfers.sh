#!/usr/bin/env bash
# Transfers a stop would cut short, and a wait it ends with EINTR that is
# easy to miss.  fixtures/shortio.c: sio_write writes 1 MiB blocks to a
# pipe a slow reader drains, sio_recv receives 256 KiB blocks with
# MSG_WAITALL from a slow sender, each counting the calls that return
# short (a stop wakes them with part of the work done: nothing can undo
# it); sio_semop waits in the raw semop syscall, counting its EINTRs.
# Checked:
#   - without memattach, none of them (the fixture's own control);
#   - the oracle: a plain tracer's stops (safety_tool hold) of each thread
#     cause them: the fixture sees the harm;
#   - with --strict, stats, threads, bins --flush-tcache and purge never
#     stop these threads (nor a running one, which may be inside such a
#     transfer), nor does stats --tid of the writer, nor profile start and
#     stop (which look at every thread before loading their agent): not
#     one short transfer or EINTR, and threads says why;
#   - by default a borrow takes another thread: stats causes none; the
#     default flush, which visits every thread, is reported (a thread
#     running inside a transfer cannot be told from /proc).
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 12
need_fixtures shortio safety_tool
RUNS=${RUNS:-10}
cd "$TMP" || exit 1

fix_start shortio || { fail "shortio: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
v0=$(fix_cmd "$pid" "$fd" "$out" verdict)
semid=$(vfield "$v0" sem_id)
harms() { # the three counts, as one line
	local v
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	echo "$(vfield "$v" short_writes) $(vfield "$v" short_recvs) $(vfield "$v" semop_eintr)"
}

h0=$(harms); bsleep 1; h1=$(harms)
v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "without memattach: no short write, short receive or EINTR in 1 s ($h1; $(vfield "$v" writes) writes, $(vfield "$v" recvs) receives)" \
	eval '[ "$h1" = "0 0 0" ] && [ "$(vfield "$v" writes)" -gt 0 ] && [ "$(vfield "$v" recvs)" -gt 0 ]'

# The oracle: 10 stops of 5 ms of each thread by a plain tracer.
for name in sio_write sio_recv sio_semop; do
	"$FIX/safety_tool" hold "$(tid_of "$pid" "$name")" 5 10
done
h2=$(harms)
read -r w1 r1 e1 <<<"$h1"; read -r w2 r2 e2 <<<"$h2"
check "oracle: a plain tracer's stops cut transfers short and end the raw semop with EINTR (short writes $w1 -> $w2, receives $r1 -> $r2, EINTR $e1 -> $e2)" \
	eval '[ "$w2" -gt "$w1" ] && [ "$r2" -gt "$r1" ] && [ "$e2" -gt "$e1" ]'

for cmd in stats threads "bins --flush-tcache" purge; do
	before=$(harms) ok=0
	for ((i = 0; i < RUNS; i++)); do
		# shellcheck disable=SC2086 # the command's words
		timeout -s KILL 60 "$MA" $cmd "$pid" --strict >/dev/null 2>>"$TMP/strict.err" && ok=$((ok + 1))
	done
	after=$(harms)
	check "$cmd --strict x$RUNS: $ok ended 0; short writes, receives, EINTR: $before -> $after" \
		eval '[ "$ok" -eq "$RUNS" ] && [ "$after" = "$before" ]'
done
before=$(harms) ok=0
for ((i = 0; i < RUNS; i++)); do
	timeout -s KILL 60 "$MA" profile start "$pid" --strict >/dev/null 2>>"$TMP/strict.err" &&
		timeout -s KILL 60 "$MA" profile stop "$pid" --strict >/dev/null 2>>"$TMP/strict.err" &&
		ok=$((ok + 1))
done
after=$(harms)
check "profile start/stop --strict x$RUNS: $ok ended 0; short writes, receives, EINTR: $before -> $after" \
	eval '[ "$ok" -eq "$RUNS" ] && [ "$after" = "$before" ]'
[ -s "$TMP/strict.err" ] && echo "# stderr: $(top_lines "$TMP/strict.err" 2)"

# Named: --strict stops it neither in its transfer nor running (where it
# may be inside one).
before=$(harms) refused=0
for ((i = 0; i < RUNS; i++)); do
	timeout -s KILL 60 "$MA" stats "$pid" --tid "$(tid_of "$pid" sio_write)" --strict --timeout 200 \
		>/dev/null 2>&1 || refused=$((refused + 1))
done
after=$(harms)
check "stats --tid sio_write --strict x$RUNS: $refused refused; short writes, receives, EINTR: $before -> $after" \
	[ "$after" = "$before" ]

"$MA" threads "$pid" --strict >threads.txt 2>&1
check "threads --strict: sio_write, sio_recv and sio_semop not stopped, each saying why" eval '
	says "\"sio_write\".*UNSAFE \\((blocked in write, which a stop would end early|running)" threads.txt 4 &&
	says "\"sio_recv\".*UNSAFE \\((blocked in recvfrom, which a stop would end early|running)" threads.txt 4 &&
	says "\"sio_semop\".*ONLY WITH --tid \\(blocked in semop, which a stop ends with EINTR" threads.txt 4'

before=$(harms) ok=0
for ((i = 0; i < RUNS; i++)); do
	timeout -s KILL 60 "$MA" stats "$pid" >/dev/null 2>&1 && ok=$((ok + 1))
done
after=$(harms)
check "stats x$RUNS by default borrows another thread: $ok ended 0; $before -> $after" \
	eval '[ "$ok" -eq "$RUNS" ] && [ "$after" = "$before" ]'

before=$(harms)
for ((i = 0; i < RUNS; i++)); do
	timeout -s KILL 60 "$MA" bins "$pid" --flush-tcache >/dev/null 2>&1
done
echo "# bins --flush-tcache x$RUNS by default (visits every thread; one running inside a transfer is stopped): short writes, receives, EINTR $before -> $(harms)"

v=$(fix_cmd "$pid" "$fd" "$out" verdict)
check "shortio alive, verdict ok ($v)" verdict_ok "$v"
fix_quit "$pid" "$fd"
[ -n "$semid" ] && ipcrm -s "$semid" 2>/dev/null
check "the fixture's semaphore set is gone" eval '! ipcs -s | awk "{print \$2}" | grep -qx "${semid:-none}"'
