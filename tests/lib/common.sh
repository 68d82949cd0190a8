# tests/lib/common.sh - helpers for shell tests.  Source it; report each check with
# pass/fail/skip.  tests/run.sh counts the PASS/FAIL/SKIP lines.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MA=${MA_BIN:-"$ROOT/build/memattach"}
# The test build (the same code, plus the MEMATTACH_TEST_* hooks): for the
# checks that need a hook; every other check runs the shipped binary.
MA_T=${MA_TEST_BIN:-"$ROOT/build/memattach-test"}
FIX=${MA_FIX_DIR:-"$ROOT/build/fixtures"}
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
# (one command for check, so that both halves are judged); FILE's messages
# are matched unwrapped (says).
exit_and_says() { [ "$1" = "$2" ] && says "$3" "$4"; }
# says PATTERN FILE [INDENT]: a message in FILE (with INDENT, a line of a
# command's text) matches the extended PATTERN, whatever line breaks fitting
# the terminal put into it (unwrapped, below).
says() { unwrapped "$2" "${3:-}" | grep -qE -- "$1"; }
tid_of() { # tid_of PID COMM: the first thread of PID named COMM (builtins only)
	local t c
	for t in /proc/"$1"/task/*; do
		read -r c 2>/dev/null <"$t/comm" || continue
		[ "$c" = "$2" ] && { echo "${t##*/}"; return 0; }
	done
	return 1
}
# has_text FILE TEXT: FILE contains TEXT (builtins only, for loops of
# hundreds; a missing file has none).
has_text() {
	local l
	{ mapfile l <"$1"; } 2>/dev/null || return 1
	l="${l[*]}"
	[[ $l == *"$2"* ]]
}
# A sleep that forks nothing: read with a timeout on a pipe nobody writes.
exec {_BSLEEP_FD}<> <(:)
bsleep() { read -r -t "$1" -u "$_BSLEEP_FD" _; return 0; }

# grows TIMEOUT_S CMD...: CMD prints a count (forks, rounds, checks);
# succeed as soon as it prints more than it did first, fail when TIMEOUT_S
# (whole) seconds pass first.  GROWS_FROM and GROWS_TO: the first and the last
# count.  A wait for the event, not a fixed sleep: it ends at once on an
# idle machine and waits longer on a loaded one.
grows() {
	local end=$((SECONDS + $1)); shift
	GROWS_FROM=$("$@") GROWS_TO=$GROWS_FROM
	while :; do
		bsleep 0.05
		GROWS_TO=$("$@")
		[ "${GROWS_TO:-0}" -gt "${GROWS_FROM:-0}" ] && return 0
		[ "$SECONDS" -lt "$end" ] || return 1
	done
}

# sized SOAK QUICK: the size of a randomized campaign (runs, kills,
# cycles): SOAK under `make soak` (MA_SOAK=1), QUICK under `make test`,
# which must end within 15 minutes on the 2-core machines.  QUICK is still
# far beyond what found each earlier bug (1 target crash in 10 random kills,
# a deadlock in the first fork loop); tests/README.md gives both sizes' figures.
sized() { if [ "${MA_SOAK:-0}" = 1 ]; then echo "$1"; else echo "$2"; fi; }

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
	# FIX_POLL_MS (default 100, below 1000): how often to look for READY,
	# for 10 s.  Builtins only, as in fix_cmd and fix_quit: a run starts
	# hundreds of fixtures, and a process costs milliseconds of CPU here.
	local poll=${FIX_POLL_MS:-100} pause i line
	printf -v pause '0.%03d' "$poll"
	for ((i = 0; i < 10000 / poll; i++)); do
		# (the out file may not exist yet: the fixture's shell opens it)
		{ while IFS= read -r line; do [[ $line == READY* ]] && return 0; done <"$FIX_OUT"; } 2>/dev/null
		bsleep "$pause"
	done
	echo "fixture $name did not become ready" >&2
	return 1
}

# fix_cmd PID FD OUT COMMAND: send COMMAND, print the line it answers with
# (waiting up to FIX_CMD_WAIT_S seconds, 10 by default).
fix_cmd() {
	local pid=$1 fd=$2 out=$3 cmd=$4 n i
	full_lines "$out"; n=${#FULL_LINES[@]}
	echo "$cmd" >&"$fd" || return 1
	for ((i = 0; i < ${FIX_CMD_WAIT_S:-10} * 20; i++)); do
		full_lines "$out"
		if [ "${#FULL_LINES[@]}" -gt "$n" ]; then
			printf '%s\n' "${FULL_LINES[n]}"
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || break
		bsleep 0.05
	done
	return 1
}
# full_lines FILE: FULL_LINES, the lines of FILE that end in a newline (a
# line still being written is not one yet), without their newlines.
full_lines() {
	mapfile FULL_LINES <"$1"
	local last=$((${#FULL_LINES[@]} - 1))
	[ "$last" -ge 0 ] && [[ ${FULL_LINES[last]} != *$'\n' ]] && unset 'FULL_LINES[last]'
	FULL_LINES=("${FULL_LINES[@]%$'\n'}")
}

# fix_quit PID FD OUT: send quit, wait; returns the fixture's exit status
# (137 and a line on stderr if it had not quit within 10 s: killed, so that
# a hung target fails its test instead of hanging it).
fix_quit() {
	local pid=$1 fd=$2
	echo quit >&"$fd" 2>/dev/null
	exec {fd}>&-
	local i
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; bsleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		echo "fixture $pid did not quit within 10 s: killed" >&2
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid"
}

# jcheck CODE [ARG...]: the one JSON checker (tests/lib/jcheck.py): CODE is
# Python run as by python3 -c with json, sys, re, os and load(PATH) at hand;
# a failed assert or a non-zero exit fails it, saying why in one line.
jcheck() { python3 "$ROOT/tests/lib/jcheck.py" "$@"; }

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
	jcheck 'print(load(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# --- text output fits a terminal (MA_TEXT_WIDTH, include/format.h) ---
TEXT_WIDTH=100
# wider_lines FILE: each line of FILE wider than TEXT_WIDTH display columns
# (UTF-8 characters, not bytes) as "line N, W columns: TEXT"; none if all fit.
wider_lines() {
	local line n=0
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		LC_ALL=C.UTF-8 eval '[ ${#line} -le $TEXT_WIDTH ]' ||
			LC_ALL=C.UTF-8 eval 'echo "line $n, ${#line} columns: $line"'
	done <"$1"
}
# unwrapped FILE [INDENT]: FILE with each message memattach broke to fit
# the width joined back into one line (a line starting "memattach " goes on
# in lines indented by two spaces), so that a phrase is found wherever the
# break fell.  With INDENT, for the text of a command instead: every line
# indented by exactly INDENT spaces is joined to the line before it (threads
# continues a thread's line by 4, bins a description by 34, prose by 2).
unwrapped() {
	awk -v indent="${2:-}" '
	indent != "" {
		if (match($0, /^ */) && RLENGTH == indent + 0 && NR > 1 && length($0) > RLENGTH) {
			sub(/^ */, ""); line = line " " $0; next
		}
		if (NR > 1) print line
		line = $0; next
	}
	/^memattach / { if (msg != "") print msg; msg = $0; next }
	msg != "" && /^  [^ ]/ { sub(/^  /, ""); msg = msg " " $0; next }
	{ if (msg != "") print msg; msg = ""; print }
	END { if (indent != "" && NR > 0) print line; else if (msg != "") print msg }' "$1"
}
# fits NAME CMD...: run memattach with the arguments CMD; pass if every line
# it writes (stdout and stderr, whatever its exit status) is within
# TEXT_WIDTH columns, else fail naming the command and its widest lines.
# With FITS_NAMES=1, a line may be wider where a single name makes it so: a
# name is never broken (a C++ signature has spaces), so a line is excused
# when it ends with a string of the command's --json output (a function,
# an object; "+0xOFF" after it) that starts within the width, or is a stack
# frame ("#N  NAME+0xOFF") whose C++ name starts within it (the --json run
# may find that thread elsewhere).
fits() {
	local name=$1 wide; shift
	"$MA" "$@" >"$TMP/fits.out" 2>"$TMP/fits.err" </dev/null
	FITS_RC=$?
	wide=$( { wider_lines "$TMP/fits.out" | sed 's/^/stdout /'; wider_lines "$TMP/fits.err" | sed 's/^/stderr /'; } )
	if [ -n "$wide" ] && [ "${FITS_NAMES:-0}" = 1 ]; then
		"$MA" "$@" --json >"$TMP/fits.json" 2>/dev/null </dev/null
		wide=$(jcheck '
import json, re, sys
width = int(sys.argv[2])
names = set()
def walk(v):
    if isinstance(v, str): names.add(v)
    elif isinstance(v, dict): [walk(x) for x in v.values()]
    elif isinstance(v, list): [walk(x) for x in v]
try: walk(json.load(open(sys.argv[1])))
except ValueError: pass
for w in sys.stdin.read().splitlines():
    line = w.split(" columns: ", 1)[1]
    bare = re.sub(r"\+0x[0-9a-f]+$", "", line)
    # A frame line of a live thread: the --json run may have met it elsewhere.
    frame = re.match(r"^ *#[0-9]+ +(?=.*::)", bare)
    if frame and len(frame.group(0)) < width:
        continue
    if not any(len(n) > 1 and bare.endswith(n) and len(bare) - len(n) < width for n in names):
        print(w)' "$TMP/fits.json" "$TEXT_WIDTH" <<<"$wide")
	fi
	if [ -z "$wide" ]; then
		pass "$name: memattach $* (exit $FITS_RC) fits $TEXT_WIDTH columns"
	else
		fail "$name: memattach $* (exit $FITS_RC) writes lines wider than $TEXT_WIDTH columns:"$'\n'"$(head -3 <<<"$wide" | cut -c1-300)"
	fi
}
# ma_commands: the commands of 'memattach --help', one a line; with
# ma_subcommands CMD, the words its --help's usage lines put after it
# ("memattach frag start PID ..." gives start).
ma_commands() { "$MA" --help | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 }'; }
ma_subcommands() {
	"$MA" "$1" --help | sed -n "s/^\(usage:\)\{0,1\} *memattach $1 \([a-z][a-z-]*\)\( .*\)\{0,1\}$/\2/p" | sort -u
}

# harness CMD: send a build command to the running fragharness (FIX_PID,
# FIX_FD, FIX_OUT), wait for its BUILT line (or its end: no time bound but
# the test's own, a build at rate 1 on a loaded machine takes minutes);
# its TRUTH goes to $TMP/truth.json
harness() {
	local n
	n=$(grep -c '^BUILT' "$FIX_OUT")
	echo "$1" >&"$FIX_FD"
	for _ in $(seq 6000); do
		[ "$(grep -c '^BUILT' "$FIX_OUT")" -gt "$n" ] && break
		kill -0 "$FIX_PID" 2>/dev/null || break
		sleep 0.1
	done
	grep '^TRUTH ' "$FIX_OUT" | tail -1 | cut -d' ' -f2- >"$TMP/truth.json"
	[ "$(grep -c '^BUILT' "$FIX_OUT")" -gt "$n" ]
}
