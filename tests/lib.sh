# tests/lib.sh - helpers for shell tests.  Source it; report each check with
# pass/fail/skip.  tests/run.sh counts the PASS/FAIL/SKIP lines.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MA=${MA_BIN:-"$ROOT/build/memattach"}
FIX="$ROOT/build/fixtures"
TMP=$(mktemp -d /tmp/matest.XXXXXX)
_children=()
# Kill only processes that are still our children: a pid that exited may
# have been reused by someone else's process.  Only the test's own shell
# cleans up: a forked child (e.g. a background command killed by a signal
# before its exec) runs the EXIT trap too, and must not kill the fixtures.
cleanup_tmp() {
	local p ppid
	[ "$BASHPID" = "$$" ] || return 0
	for p in "${_children[@]}"; do
		ppid=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
		[ "$ppid" = "$$" ] && kill -KILL "$p" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup_tmp EXIT
trap "" PIPE  # a fixture that died must not kill the test silently

# plan N: this script runs exactly N checks (run.sh fails it otherwise, so
# a script that stops early cannot hide what it never reached).
plan() { echo "PLAN $1"; }
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
skip() { echo "SKIP $*"; }
# check NAME CMD...: pass if CMD succeeds.
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n"; fi; }
# exit_and_says RC WANT PATTERN FILE: RC is WANT and FILE matches PATTERN
# (one command for check, so that both halves are judged).
exit_and_says() { [ "$1" = "$2" ] && grep -qE -- "$3" "$4"; }
tid_of() { # tid_of PID COMM: the first thread of PID named COMM (builtins only)
	local t c
	for t in /proc/"$1"/task/*; do
		read -r c 2>/dev/null <"$t/comm" || continue
		[ "$c" = "$2" ] && { echo "${t##*/}"; return 0; }
	done
	return 1
}
# Register a background pid to be killed at exit.
track() { _children+=("$1"); }

# --- fixtures with the control protocol (fixtures/fixlib.h) ---
# fix_start NAME [ARGS...]: start build/fixtures/NAME with a control FIFO;
# sets FIX_PID, FIX_FD (write commands there), FIX_OUT (its stdout file).
fix_start() {
	local name=$1; shift
	local dir
	dir=$(mktemp -d "$TMP/$name.XXXX")
	mkfifo "$dir/in"
	"$FIX/$name" "$@" <"$dir/in" >"$dir/out" 2>"$dir/err" &
	FIX_PID=$!
	track "$FIX_PID"
	exec {FIX_FD}>"$dir/in"
	FIX_OUT=$dir/out
	# FIX_POLL_MS (default 100): how often to look for READY, for 10 s
	local poll=${FIX_POLL_MS:-100}
	for _ in $(seq $((10000 / poll))); do
		grep -q '^READY' "$FIX_OUT" && return 0
		sleep "$(printf '0.%03d' "$poll")"
	done
	echo "fixture $name did not become ready" >&2
	return 1
}

# fix_cmd PID FD OUT COMMAND: send COMMAND, print the line it answers with.
fix_cmd() {
	local pid=$1 fd=$2 out=$3 cmd=$4 n
	n=$(wc -l <"$out")
	echo "$cmd" >&"$fd" || return 1
	for _ in $(seq 200); do
		if [ "$(wc -l <"$out")" -gt "$n" ]; then
			sed -n "$((n + 1))p" "$out"
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	return 1
}

# fix_quit PID FD OUT: send quit, wait; returns the fixture's exit status.
fix_quit() {
	local pid=$1 fd=$2
	echo quit >&"$fd" 2>/dev/null
	exec {fd}>&-
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	wait "$pid"
}

# json_get FILE KEY: print a top-level value of a JSON document.  A
# one-line document's plain number is read without starting python (the
# attach loops call this thousands of times); anything else goes to python.
json_get() {
	local line v rest lines=()
	# One-line JSON with the key once and an integer value: read in bash
	# alone (no process per call: tests call this in loops of hundreds).
	mapfile -t -n 2 lines <"$1"
	if [ "${#lines[@]}" -eq 1 ] && line=${lines[0]} && [[ $line == '{"'* ]]; then
		rest=${line#*\"$2\":}
		v=${rest%%[,\}]*}
		if [ "$rest" != "$line" ] && [[ $v =~ ^-?[0-9]+$ ]] && [[ $rest != *\"$2\":* ]]; then
			echo "$v"
			return 0
		fi
	fi
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}
