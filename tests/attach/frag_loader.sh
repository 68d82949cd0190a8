#!/usr/bin/env bash
# frag start loads its agent with dlopen: it must not do so while another
# thread holds the dynamic loader's locks (our dlopen would wait for that
# thread, for ever if its library constructor blocks).  fixtures/dlthreads
# holds a thread (1) inside a dlopen whose constructor blocks, (2) inside a
# dl_iterate_phdr callback.  Each time: frag start is refused at once with
# a message naming that thread, the target's worker keeps running (no
# thread of it was left waiting in a dlopen of ours), and once the thread
# is released frag start works.  Without the check, the start would borrow
# the worker or main thread and leave it blocked in our dlopen.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
plan 14
need_fixtures dlthreads libdlblock.so

rounds() { fix_cmd "$P" "$FIX_FD" "$FIX_OUT" rounds | awk '{ print $2 }'; }
case_for() { # case_for BLOCK RELEASE WANT-MESSAGE ANSWER-AFTER-RELEASE
	fix_start dlthreads "$FIX/libdlblock.so" || { fail "dlthreads: start"; return; }
	P=$FIX_PID
	ans=$(fix_cmd "$P" "$FIX_FD" "$FIX_OUT" "$1")
	check "$1: the thread is inside ($ans)" [ "$ans" = INSIDE ]
	"$MA" frag start "$P" >/dev/null 2>"$TMP/e"; rc=$?
	check "$1: frag start refused: exit 1, '$3' ($(cat "$TMP/e"))" exit_and_says "$rc" 1 "$3" "$TMP/e"
	n=$(grep -c memattach-agent "/proc/$P/maps"; ls -l "/proc/$P/fd" | grep -c memattach-agent)
	check "$1: nothing of the agent in the target: no dlopen was tried ($(echo $n))" [ "$(echo $n)" = "0 0" ]
	grows 30 rounds; st=$?
	check "$1: the target's worker keeps running ($GROWS_FROM -> $GROWS_TO rounds)" [ "$st" -eq 0 ]
	fix_cmd "$P" "$FIX_FD" "$FIX_OUT" "$2" >"$TMP/ans"
	check "$2: the held thread finishes ($(cat "$TMP/ans"))" grep -q "$4" "$TMP/ans"
	"$MA" frag start "$P" >/dev/null 2>"$TMP/e2" && "$MA" frag stop "$P" >/dev/null 2>>"$TMP/e2"; rc=$?
	check "$2: then frag start and stop work ($(head -1 "$TMP/e2"))" [ "$rc" -eq 0 ]
	fix_quit "$P" "$FIX_FD"; rc=$?
	check "$1: dlthreads exits with a good verdict (status $rc)" [ "$rc" -eq 0 ]
}
case_for ctor_block ctor_release "inside the dynamic loader" LOADED
case_for iter_block iter_release "holds the dynamic loader's locks" DONE
