#!/usr/bin/env bash
# tests/cli/install.sh - make install (PREFIX, DESTDIR) puts the binary, the
# man page and the bash completion in place; the man page renders without
# warnings and covers every command and option of --help; the completion
# offers commands, options and the PIDs of jemalloc processes only.
. "$(dirname "$0")/../lib/common.sh"
plan 30

R=$TMP/root
make -s -C "$ROOT" install DESTDIR="$R" PREFIX=/opt/ma >"$TMP/inst.out" 2>&1
check "make install DESTDIR PREFIX exits 0" test $? -eq 0
check "binary installed executable" test -x "$R/opt/ma/bin/memattach"
check "man page installed" test -f "$R/opt/ma/share/man/man1/memattach.1"
check "completion installed" test -f "$R/opt/ma/share/bash-completion/completions/memattach"
"$R/opt/ma/bin/memattach" --help >"$TMP/help" 2>&1
check "installed binary runs" grep -q '^usage: memattach COMMAND' "$TMP/help"

# --- the man page ---
LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$R/opt/ma/share/man/man1/memattach.1" \
	>"$TMP/man.txt" 2>"$TMP/man.err"
check "man -l renders it" grep -q '^NAME' "$TMP/man.txt"
check "... without a warning" test ! -s "$TMP/man.err"
MANPATH=$R/opt/ma/share/man LC_ALL=C.UTF-8 man -P cat memattach >"$TMP/man2.txt" 2>/dev/null
check "man finds it under PREFIX/share/man" cmp -s "$TMP/man.txt" "$TMP/man2.txt"
for s in SYNOPSIS DESCRIPTION COMMANDS 'EXIT STATUS' EXAMPLES; do
	check "man page has the $s section" grep -q "^$s" "$TMP/man.txt"
done
cmds=$(sed -n '/^commands:/,/^$/{/^  [a-z]/s/^  \([a-z-]*\).*/\1/p}' "$TMP/help")
check "--help lists the commands" test "$(wc -w <<<"$cmds")" -ge 14
missing=""
for c in $cmds; do
	grep -q "^   $c\b" "$TMP/man.txt" || missing="$missing $c"
	# the options a command defines: its usage line and its option lines
	for o in $("$MA" "$c" --help 2>&1 | grep -E '^(usage|  +(-[a-z], )?--)' |
		grep -o -- '--[a-z][a-z-]*' | grep -vx -- --help | sort -u); do
		sed -n "/^   $c\b/,/^   [a-z]/p" "$TMP/man.txt" | grep -q -- "$o" || missing="$missing $c:$o"
	done
done
check "man page: every command and each of its --help options is described (missing:${missing:- none})" \
	test -z "$missing"

# --- bash completion ---
fix_start daemon -t 1 || { fail "daemon: start"; exit 1; }
sleep 300 & other=$!; track $other; disown $other
complete_line() { # complete_line WORD... : the completions of the last word
	bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _memattach
		printf "%s\n" "${COMPREPLY[@]}"' _ "$R/opt/ma/share/bash-completion/completions/memattach" \
		"$R/opt/ma/bin/memattach" "$@"
}
check "completion: commands" test "$(complete_line st | sort | tr '\n' ' ')" = "stacks stats stats-dump "
check "completion: every command of --help" \
	test "$(complete_line '' | grep -v -- --help | sort)" = "$(sort <<<"$cmds")"
check "completion: bins options from its --help" \
	test "$(complete_line bins -- | sort | tr '\n' ' ')" = "--flush-tcache --help --json --stats --strict --tid --timeout --top "
complete_line stats '' >"$TMP/pids"
check "completion: a live command's PID offers the jemalloc process" grep -qx "$FIX_PID" "$TMP/pids"
check "... and not a process without jemalloc" test "$(grep -cx "$other" "$TMP/pids")" -eq 0
check "completion: export --pid offers it" grep -qx "$FIX_PID" <(complete_line export --listen x --pid '')
check "completion: --tid offers the threads of the PID given" \
	test "$(complete_line stats "$FIX_PID" --tid '' | sort | tr '\n' ' ')" = \
	"$(ls /proc/"$FIX_PID"/task | sort | tr '\n' ' ')"
touch "$TMP/some.heap"
check "completion: aggregate takes files" grep -qx "$TMP/some.heap" <(complete_line aggregate "$TMP/some.h")
check "completion: --format values" test "$(complete_line stats 1 --format o)" = openmetrics
check "completion: no PID after the PID" test -z "$(complete_line stats "$FIX_PID" '')"

# --- memattach ps, which the completion uses ---
dpid=$FIX_PID dfd=$FIX_FD dout=$FIX_OUT
fix_start daemon_static -t 1 || { fail "daemon_static: start"; exit 1; }
"$MA" ps --json >"$TMP/ps.json"
check "ps --json: the daemon with its libjemalloc, the static one built in, not the sleep" \
	jcheck - "$TMP/ps.json" "$dpid" "$FIX_PID" "$other" <<'PY'
import json, sys
p = {x["pid"]: x for x in json.load(open(sys.argv[1]))["processes"]}
d = p[int(sys.argv[2])]
assert d["comm"] == "daemon" and "libjemalloc" in d["object"] and not d["static"], d
s = p[int(sys.argv[3])]
assert s["object"].endswith("/daemon_static") and s["static"] and s["vm_rss"] > 0, s
assert int(sys.argv[4]) not in p
PY
fix_quit "$FIX_PID" "$FIX_FD"
FIX_PID=$dpid FIX_FD=$dfd FIX_OUT=$dout
check "ps REGEX filters by name" test "$("$MA" ps '^daemo' --pids | grep -cx "$FIX_PID")" -eq 1 -a \
	"$("$MA" ps '^nomatch$' --pids | wc -l)" -eq 0
"$MA" ps '(' >/dev/null 2>"$TMP/e"; rc=$?
check "ps with a bad regex: exit 2 naming it" test $rc -eq 2 -a -n "$(grep -F "'('" "$TMP/e")"
check "daemon: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$FIX_PID" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$FIX_PID" "$FIX_FD"

make -s -C "$ROOT" uninstall DESTDIR="$R" PREFIX=/opt/ma >/dev/null 2>&1
check "make uninstall removes the three files" test -z "$(find "$R" -type f)"
