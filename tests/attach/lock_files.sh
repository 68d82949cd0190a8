#!/usr/bin/env bash
# The run lock (one run at a time per target) is a file per process,
# /run/memattach/PID.STARTTIME.lock.  A run removes the files of processes
# that are gone (no such pid, or one started at another time), so they do
# not pile up (an outside attacker counted 7,745 of them); the file of a
# live process stays.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../safety_lib.sh"
plan 4
need_fixtures daemon
D=/run/memattach
[ -d "$D" ] && [ -w "$D" ] || D=/tmp/memattach

fix_start daemon || { fail "daemon: start"; exit 1; }
a=$FIX_PID a_fd=$FIX_FD
"$MA" stats "$a" >/dev/null 2>&1
check "a live target has its lock file" ls "$D/$a".*.lock
fix_start daemon || { fail "daemon: start"; exit 1; }
b=$FIX_PID b_fd=$FIX_FD
fix_quit "$a" "$a_fd"
# a pid that is free now, and pid 1 with a start time it never had
free=$((1 << 22)); while kill -0 "$free" 2>/dev/null; do free=$((free - 1)); done
touch "$D/$free.12345.lock" "$D/1.1.lock"
"$MA" stats "$b" >/dev/null 2>&1
check "the exited target's lock file is gone after the next run" bash -c "! ls $D/$a.*.lock 2>/dev/null"
check "files of a free pid and of a reused pid are gone" bash -c "[ ! -e $D/$free.12345.lock ] && [ ! -e $D/1.1.lock ]"
check "the live target's lock file stays" ls "$D/$b".*.lock
fix_quit "$b" "$b_fd"
