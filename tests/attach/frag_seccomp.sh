#!/usr/bin/env bash
# frag under seccomp filters keyed on a syscall's arguments, as real
# sandboxes are (systemd's MemoryDenyWriteExecute answers mprotect with
# PROT_EXEC with EPERM; others kill on a writable mprotect or an
# executable mmap).  fixtures/seccomp_daemon.c installs the filter on every
# thread; seccomp_daemon links libjemalloc.so (frag rewrites GOT slots),
# seccomp_daemon_static has jemalloc linked in (frag writes detours).
# Per variant, frag start either works (then report and stop too) or
# refuses before loading anything, naming the syscall and seccomp; the
# target is alive with its verdict ok either way, and its map holds no
# agent after a refusal.  Which variants must work and which must be
# refused is fixed below, from what the agent asks of the kernel.
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/safety.sh"
need_fixtures seccomp_daemon seccomp_daemon_static

# fixture action syscall mask expect (ok | refused) [one: the filter on
# worker_0 only, installed by itself: the wrappers, running in every
# thread, grow their tables there with mmap and munmap; an outside attack
# saw that filter kill the target a few seconds after start, 5 of 5]
VARIANTS=(
	"seccomp_daemon kill mprotect 2 refused"        # GOT pages are made writable
	"seccomp_daemon kill mmap 4 refused"            # dlopen maps the agent's code
	"seccomp_daemon trap mmap 4 refused"
	"seccomp_daemon errno mprotect 4 ok"            # MemoryDenyWriteExecute: GOT slots need no exec mprotect
	"seccomp_daemon kill tgkill 0 ok"               # a filter frag has no business with
	"seccomp_daemon_static kill mprotect 2 refused" # a detour's page made writable
	"seccomp_daemon_static errno mprotect 4 refused" # ... and executable: MemoryDenyWriteExecute
	"seccomp_daemon_static kill mmap 4 refused"     # the trampolines, the agent's code
	"seccomp_daemon_static trap 324 0 refused"      # membarrier
	"seccomp_daemon_static kill tgkill 0 ok"
	"seccomp_daemon kill munmap 0 refused one"
	"seccomp_daemon_static kill munmap 0 refused one"
)
plan $((${#VARIANTS[@]} * 3))

agent_mapped() { grep -q "memfd:memattach-agent" "/proc/$1/maps" 2>/dev/null; }

for v in "${VARIANTS[@]}"; do
	read -r fx act sc mask expect scope <<<"$v"
	name="$fx $act:$sc$([ "$mask" != 0 ] && echo "&$mask")${scope:+ ($scope thread)}"
	args=(-a "$act" -c "$sc")
	[ "$mask" != 0 ] && args+=(-m "$mask")
	[ "$scope" = one ] && args+=(-1)
	# the message names the syscall, or (one thread) that thread's own filter
	want_named=${sc/324/membarrier}; [ "$scope" = one ] && want_named="thread [0-9]+ of process [0-9]+ runs under 1 seccomp filter"
	if ! fix_start "$fx" "${args[@]}"; then
		fail "$name: the fixture did not start under its filter"
		fail "$name: (no run)"
		fail "$name: (no verdict)"
		continue
	fi
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	timeout -s KILL 60 "$MA" frag start "$pid" >"$TMP/start.out" 2>"$TMP/start.err"
	rc=$?
	msg=$(head -c 300 "$TMP/start.err")
	if [ "$expect" = ok ]; then
		timeout -s KILL 60 "$MA" frag status "$pid" --json >"$TMP/st.json" 2>/dev/null
		timeout -s KILL 60 "$MA" frag report "$pid" --json >"$TMP/rep.json" 2>"$TMP/rep.err"
		rrc=$?
		timeout -s KILL 60 "$MA" frag stop "$pid" >/dev/null 2>"$TMP/stop.err"
		src=$?
		check "$name: frag start, report and stop work (exit $rc, $rrc, $src; $msg)" \
			[ $rc -eq 0 -a $rrc -eq 0 -a $src -eq 0 ]
		want=got; [[ $fx == *_static ]] && want=detour
		check "$name: ... sampling through $want (a running agent said so), its report JSON" \
			jcheck 'd = load(sys.argv[1]); r = load(sys.argv[2]); assert d["state"] == "running" and d["mechanism"] == sys.argv[3] and (d["detours"] >= 10 or d["mechanism"] == "got"), d; assert "samples" in r' \
			"$TMP/st.json" "$TMP/rep.json" "$want"
	else
		check "$name: frag start refuses, naming seccomp and the syscall (exit $rc: $msg)" \
			eval '[ $rc -eq 1 ] && says "seccomp" "$TMP/start.err" && says "$want_named" "$TMP/start.err"'
		check "$name: ... and loaded nothing" eval '! agent_mapped $pid'
	fi
	bsleep 0.2
	if alive "$pid"; then
		vv=$(fix_cmd "$pid" "$fd" "$out" verdict)
		check "$name: the target is alive, verdict ok ($vv)" verdict_ok "$vv"
		fix_quit "$pid" "$fd"
	else
		fixture_died "$pid" "$(dirname "$out")"
		fail "$name: the target died (${DIED_WHY:0:160})"
	fi
done
