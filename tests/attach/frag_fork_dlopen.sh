#!/usr/bin/env bash
# A program that forks while the frag agent samples its allocations, and
# whose children dlopen() (fixtures/forkloop -d: each child loads
# libz.so.1 and exits; the parent gives it 3 s, then kills and counts it
# as hung).  A loader lock another thread holds at the fork stays taken in
# the child for ever: the agent judged every frame of every sample through
# dl_iterate_phdr, which holds the loader's write lock for its walk
# (attack 44: 4 of 94 children hung with the agent idle, `--shift 0`).
# Checked: frag start --shift 0, then SECS seconds (default 8) of forks
# with the agent sampling every allocation: no child hung in them, and
# it forked on; frag stop.  The binary before: a child hung within the
# first second.  The instants of the start and stop themselves (the
# agent's dlopen and its GOT passes hold the loader's locks too) are
# counted, not judged: README's limits.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 4
need_fixtures forkloop
SECS=${SECS:-8}

hung() { fix_cmd "$pid" "$fd" "$out" verdict | grep -o 'hung=[0-9]*' | cut -d= -f2; }
forks() { fix_cmd "$pid" "$fd" "$out" verdict | grep -o 'forks=[0-9]*' | cut -d= -f2; }

fix_start forkloop -d -t 2 || { fail "forkloop -d: start"; exit 1; }
pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
"$MA" frag start "$pid" --shift 0 >"$TMP/start.out" 2>&1
rc_start=$?
bsleep 3.5 # a child forked during the start is judged by now
h0=$(hung) f0=$(forks)
bsleep "$SECS"
h1=$(hung) f1=$(forks)
"$MA" frag stop "$pid" >"$TMP/stop.out" 2>&1
rc_stop=$?
bsleep 3.5
h2=$(hung)
echo "# children hung: ${h0:-?} around the start, ${h2:-?} in all"
check "frag start --shift 0 and frag stop succeed ($rc_start, $rc_stop: $(head -c 200 "$TMP/start.out" | tr '\n' ' '))" \
	eval '[ "$rc_start" -eq 0 ] && [ "$rc_stop" -eq 0 ]'
check "no child hung in dlopen while the agent sampled (${h0:-?} then ${h1:-?})" \
	eval '[ -n "$h0" ] && [ "$h1" = "$h0" ]'
check "it forked on meanwhile (${f0:-0} then ${f1:-0} forks)" [ "${f1:-0}" -gt $(( ${f0:-0} + 50 )) ]
fix_quit "$pid" "$fd"
check "forkloop -d exits cleanly" [ $? -eq 0 ]
