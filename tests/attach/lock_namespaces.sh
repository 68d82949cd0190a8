#!/usr/bin/env bash
# Runs on one process take turns even from another mount namespace: one
# loop runs on the host, the other in a private mount namespace whose
# /run/memattach and /tmp/memattach are empty tmpfs (where lock files used
# to be: the run lock is now a flock on /proc/PID/personality, which both
# see).  Both loops run at once, RUNS each of `bins --flush-tcache` (every
# thread borrowed in turn) and `stats`.  Without a lock both see, two runs
# wrote their stubs over each other's and the target crashed (an outside
# attack: 3 of 3 times within a second).  Not one run may fail, and the
# daemon's verdict stays ok.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 7
need_fixtures daemon
RUNS=${RUNS:-60}

fix_start daemon || { fail "daemon: start"; exit 1; }
pid=$FIX_PID

# loop NAME PREFIX...: RUNS pairs of runs, each prefixed by PREFIX (the namespace)
loop() {
	local name=$1 i; shift
	for i in $(seq "$RUNS"); do
		for cmd in "bins $pid --flush-tcache --json" "stats $pid --json"; do
			if "$@" $MA $cmd --timeout 20000 >/dev/null 2>>"$TMP/err.$name"; then
				echo ok
			else
				echo "fail $cmd"
			fi
		done
	done >"$TMP/loop.$name"
}
in_private_ns() {
	unshare -m sh -c 'mkdir -p /run/memattach /tmp/memattach &&
		mount -t tmpfs none /run/memattach && mount -t tmpfs none /tmp/memattach && exec "$@"' sh "$@"
}
check "a private mount namespace with empty lock directories can be made" \
	in_private_ns sh -c '[ -z "$(ls -A /run/memattach)$(ls -A /tmp/memattach)" ]'
loop host &
hpid=$!
loop ns in_private_ns &
npid=$!
wait "$hpid" "$npid"
ok_h=$(grep -c '^ok$' "$TMP/loop.host") ok_n=$(grep -c '^ok$' "$TMP/loop.ns")
check "host loop: $ok_h of $((2 * RUNS)) runs ok" [ "$ok_h" -eq $((2 * RUNS)) ]
check "private-namespace loop: $ok_n of $((2 * RUNS)) runs ok" [ "$ok_n" -eq $((2 * RUNS)) ]
cat "$TMP"/err.* 2>/dev/null | sort | uniq -c | sort -rn | head -3 | sed 's/^/# /'
alive "$pid" || { fixture_died "$pid" "$(dirname "$FIX_OUT")"; fail "daemon died: $DIED_WHY"; exit 0; }
v=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
check "daemon verdict ok after both loops ($v)" verdict_ok "$v"
fix_quit "$pid" "$FIX_FD"
check "daemon exits cleanly" [ $? -eq 0 ]

fix_start daemon -L || { fail "daemon -L: start"; exit 1; }
"$MA" stats "$FIX_PID" --json --timeout 1000 >"$TMP/l.json" 2>"$TMP/l.err"; rc=$?
check "a daemon that flocks its own executable: stats works (exit $rc: $(head -c 200 "$TMP/l.err"))" \
	test "$rc" -eq 0 -a "$(json_get "$TMP/l.json" allocated)" -gt 0
v=$(fix_cmd "$FIX_PID" "$FIX_FD" "$FIX_OUT" verdict)
check "daemon -L verdict ok ($v)" verdict_ok "$v"
fix_quit "$FIX_PID" "$FIX_FD"
