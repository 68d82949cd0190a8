#!/usr/bin/env bash
# tests/attach/hostile_names.sh - names a target chooses cannot reach
# root's terminal.  An unprivileged user (ma-eve) runs build/fixtures/hostile_names
# from a directory whose name holds ESC sequences and $(id), beside a copy
# of libjemalloc.so.2 it maps; its process name and two thread names hold
# ESC [, an OSC ended by BEL, C1 CSI (in UTF-8 and as a lone byte), DEL,
# SOH, a tab, a newline and bytes that are not UTF-8; a function of it is renamed so in
# its symbol table, and a child of it is traced by it.  Root's stats,
# threads, ps, heap-dump, aggregate (text, --folded, --svg), stacks and a
# refusal naming the process print no control byte but newline (nor a C1
# character), show the printable form (\xHH), and --json decodes to the
# exact names (bytes that are not UTF-8 as U+FFFD).
. "$(dirname "$0")/../lib/common.sh"
plan 24

[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null ||
	{ fail "needs root and setpriv (util-linux): another user runs the target"; exit 1; }

# The names, as the target sets them (at most 15 bytes each) ...
COMM=$'h\e]0;pwn\a\e[31mX'
T1=$'t1\e[2J\xc2\x9b\x7f\x01\xc3\xa9'
T2=$'t2\x9b31m\xff\t\nS x' # a newline: /proc's stat and comm are then two lines
DIRNAME=$'\xc3\xa9\e[31m$(id)\e]0;dir\a'
SYMBOL=$'park\e[31m\xc2\x9b\e]0;sym\a$(id)' # fixtures/hostile_names.mk renames park_here so
# ... and as memattach shows them (printable UTF-8 such as the e-acute stays).
COMM_P='h\x1b]0;pwn\x07\x1b[31mX'
T1_P='t1\x1b[2J\xc2\x9b\x7f\x01'$'\xc3\xa9'
T2_P='t2\x9b31m\xff\x09\x0aS x'
DIR_P=$'\xc3\xa9''\x1b[31m$(id)\x1b]0;dir\x07'
SYM_P='park\x1b[31m\xc2\x9b\x1b]0;sym\x07$(id)'
SYM_FOLDED_P='park\x1b[31m\xc2\x9b\x1b]0:sym\x07$(id)' # ';' is the frame separator there

# --- the user, the directory, the target ---
id ma-eve >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin ma-eve
check "user ma-eve exists" eval 'id ma-eve >/dev/null'
chmod 711 "$TMP" # ma-eve reaches its directory inside
EVE=$TMP/eve
EVIL=$EVE/$DIRNAME
EVIL_P=$EVE/$DIR_P
lib=$(ldd "$FIX/hostile_names" | awk '$1 == "libjemalloc.so.2" { print $3 }')
mkdir -p "$EVIL" && cp "$FIX/hostile_names" "$lib" "$EVIL/" && chown -R ma-eve:ma-eve "$EVE" &&
	chmod -R a+rX "$EVE" || { fail "cannot lay out $EVE"; exit 1; }
export EVE EVIL COMM T1 T2 SYMBOL # for the JSON checks

mkfifo "$TMP/in" "$TMP/ready"
setpriv --reuid=ma-eve --regid=ma-eve --clear-groups \
	env MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:0 "$EVIL/hostile_names" "$COMM" "$T1" "$T2" \
	<"$TMP/in" >"$TMP/ready" 2>"$TMP/target.err" &
TPID=$!
track "$TPID"
exec {TFD}>"$TMP/in" {RFD}<"$TMP/ready"
# Blocks until the target has named everything (or has died: end of file).
read -r word rpid CHILD <&"$RFD"
check "the target runs as ma-eve from the hostile directory, mapping the library beside it" \
	test "$word $rpid" = "READY $TPID" -a "$(stat -c %U /proc/"$TPID")" = ma-eve \
	-a "$(readlink /proc/"$TPID"/exe)" = "$EVIL/hostile_names" \
	-a "$(grep -cF "$EVIL/libjemalloc.so.2" /proc/"$TPID"/maps)" -gt 0
[ "$word" = READY ] || { echo "# target: $(head -c 300 "$TMP/target.err" | cat -v)"; exit 1; }

# run TAG ARGS...: memattach ARGS into $TMP/TAG.out, .err; its exit status in $TMP/TAG.rc.
run() {
	local tag=$1
	shift
	"$MA" "$@" >"$TMP/$tag.out" 2>"$TMP/$tag.err"
	echo $? >"$TMP/$tag.rc"
}

# no_control FILE...: no control byte but newline (C0, DEL), no 0x9b, and
# valid UTF-8 holding no C1 character; says what it found otherwise.
no_control() {
	jcheck - "$@" <<'EOF'
import sys
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    bad = sorted({c for c in b if (c < 0x20 and c != 0x0A) or c in (0x7F, 0x9B)})
    if bad:
        sys.exit(f"{path}: bytes {' '.join(f'{c:#04x}' for c in bad)}")
    try:
        t = b.decode("utf-8")
    except UnicodeDecodeError as e:
        sys.exit(f"{path}: not UTF-8 ({e})")
    c1 = sorted({f"U+{ord(c):04X}" for c in t if 0x80 <= ord(c) <= 0x9F})
    if c1:
        sys.exit(f"{path}: C1 characters {' '.join(c1)}")
EOF
}

# clean NAME TAG [WANT_RC]: TAG exited WANT_RC (0) and printed no control byte.
clean() {
	local name=$1 tag=$2 want=${3:-0} why
	if ! why=$(no_control "$TMP/$tag.out" "$TMP/$tag.err" 2>&1); then
		fail "$name: ${why//$TMP\//}"
	elif [ "$(cat "$TMP/$tag.rc")" != "$want" ]; then
		fail "$name: exit $(cat "$TMP/$tag.rc") (want $want): $(head -c 300 "$TMP/$tag.err" | cat -v)"
	else
		pass "$name"
	fi
}

# shows NAME TAG STRING...: TAG's output holds every STRING as it is (a
# line break that fitting the terminal put before a name counts as a space).
shows() {
	local name=$1 tag=$2 s
	shift 2
	for s in "$@"; do
		grep -qF -- "$s" "$TMP/$tag.out" "$TMP/$tag.err" && continue
		sed 's/^ *//' "$TMP/$tag.out" "$TMP/$tag.err" | tr '\n' ' ' | grep -qF -- "$s" && continue
		fail "$name: '$s' is not in it: $(head -c 400 "$TMP/$tag.out" | cat -v)"
		return
	done
	pass "$name"
}

# json NAME TAG PYTHON: TAG's output parses as JSON (strict UTF-8, no control
# byte) and PYTHON, given d (the document) and env (the exact names), is true.
json() {
	local name=$1 tag=$2 why
	if why=$(no_control "$TMP/$tag.out" "$TMP/$tag.err" 2>&1 && jcheck '
import json, os, sys
env = {k: os.environb[k.encode()].decode("utf-8", "replace") for k in ("EVE", "EVIL", "COMM", "T1", "T2", "SYMBOL")}
d = json.loads(open(sys.argv[1], "rb").read())
ok = eval("(" + sys.argv[2] + ")")
sys.exit(0 if ok else "not as expected: " + ascii(open(sys.argv[1], "rb").read()[:600]))
' "$TMP/$tag.out" "$3" 2>&1); then
		pass "$name"
	else
		fail "$name: ${why//$TMP\//}"
	fi
}

# folded_ok: frames never make a line of their own; ';' in a name is ':'.
folded_ok() {
	[ "$(cat "$TMP/folded.rc")" = 0 ] && no_control "$TMP/folded.out" &&
		! grep -qvE '^[^ ].* [0-9]+$' "$TMP/folded.out" &&
		grep -qF -- "thread_main;$SYM_FOLDED_P " "$TMP/folded.out"
}

# svg_ok: the flame graph parses as XML and titles the frame with its printable form.
svg_ok() {
	[ "$(cat "$TMP/svg.rc")" = 0 ] && no_control "$TMP/flame.svg" &&
		jcheck - "$TMP/flame.svg" "$SYM_P" <<'EOF'
import sys, xml.etree.ElementTree as ET
titles = [t.text or "" for t in ET.parse(sys.argv[1]).iter("{http://www.w3.org/2000/svg}title")]
sys.exit(0 if any(t.startswith(sys.argv[2] + " (") for t in titles) else "no title names the frame")
EOF
}

# --- stats ---
run stats stats "$TPID"
clean "stats: exit 0, no control byte on stdout or stderr" stats
shows "stats: the process name and the library's path in their printable form" stats \
	"pid $TPID ($COMM_P): jemalloc " "in $EVIL_P/libjemalloc.so.2"
run stats_json stats "$TPID" --json
json "stats --json: the library's exact path" stats_json \
	'd["pid"] == '"$TPID"' and d["object"] == env["EVIL"] + "/libjemalloc.so.2"'

# --- threads ---
run threads threads "$TPID"
clean "threads: exit 0, no control byte on stdout or stderr" threads
shows "threads: the thread names in their printable form" threads \
	"thread $TPID \"$COMM_P\"" "\"$T1_P\"" "\"$T2_P\""
shows "threads: the thread whose name holds a newline is read whole: its state (S) and wait" threads \
	"\"$T2_P\" state S, in futex"
shows "threads: the renamed function and the executable's path in their printable form" threads \
	"$SYM_P+0x" "($EVIL_P/hostile_names)" "jemalloc in $EVIL_P/libjemalloc.so.2"
run threads_json threads "$TPID" --json
json "threads --json: exact names (U+FFFD for bytes that are not UTF-8), function and paths" threads_json '
sorted(t["name"] for t in d["threads"]) == sorted([env["COMM"], env["T1"], env["T2"]])
and "\ufffd" in env["T2"] and d["jemalloc_object"] == env["EVIL"] + "/libjemalloc.so.2"
and any(f["function"] == env["SYMBOL"] and f["object"] == env["EVIL"] + "/hostile_names"
        for t in d["threads"] for f in t["frames"])'

# --- ps ---
run ps ps
clean "ps: exit 0, no control byte on stdout or stderr" ps
check "ps: the process's row with its name and path in their printable form" \
	grep -qE "^ *$TPID  " <(grep -F -- "$COMM_P" "$TMP/ps.out" | grep -F -- "$EVIL_P/libjemalloc.so.2")
run ps_json ps --json
json "ps --json: the exact name and path" ps_json '
[(p["comm"], p["object"]) for p in d["processes"] if p["pid"] == '"$TPID"'] == [(env["COMM"], env["EVIL"] + "/libjemalloc.so.2")]'

# --- a refusal that names the process and its tracer ---
run refused stats "$CHILD"
clean "stats of the traced child: refused (exit 1), no control byte on stdout or stderr" refused 1
shows "... its message names both in their printable form" refused \
	"process $CHILD ($COMM_P) is already traced by pid $TPID ($COMM_P)"

# --- a heap profile: symbol names read back from the dump ---
run dump heap-dump "$TPID" -o "$TMP/h.heap"
clean "heap-dump: exit 0, no control byte on stdout or stderr" dump
run agg aggregate "$TMP/h.heap"
clean "aggregate: exit 0, no control byte" agg
shows "aggregate: the allocation site in its printable form" agg "%  $SYM_P"
run agg_json aggregate "$TMP/h.heap" --json
json "aggregate --json: the exact symbol as the leaf" agg_json \
	'any(s["leaf"] == env["SYMBOL"] for s in d["sites"])'
run folded aggregate "$TMP/h.heap" --folded
check "aggregate --folded: exit 0, no control byte, one 'frames bytes' line per stack, the frame printable" \
	folded_ok
run svg aggregate "$TMP/h.heap" --svg "$TMP/flame.svg"
check "aggregate --svg: exit 0, well-formed XML without control bytes, the frame printable in it" \
	svg_ok
run stacks stacks "$TMP/h.heap" park
clean "stacks: exit 0, no control byte" stacks
shows "stacks: the frame in its printable form" stacks "  $SYM_P  [hostile_names]"

# --- the target was not harmed ---
echo quit >&"$TFD"
exec {TFD}>&- {RFD}<&-
wait "$TPID"
check "the target quits cleanly (exit 0)" test $? -eq 0
