#!/usr/bin/env bash
# tests/cli/width.sh - every command's text fits a terminal of 100 columns
# (TEXT_WIDTH, tests/lib/common.sh) without a live target: each command of
# 'memattach --help' (so a new one is covered as soon as it is listed) and
# each frag subcommand with --help, an unknown option, no arguments and a
# process that does not exist; the offline commands on the saved dumps and
# stats files of fixtures/ and on bad files.  Counted are display columns
# (UTF-8 characters), on stdout and stderr alike; JSON and the other machine
# formats are not text and are not run.  tests/attach/width_live.sh runs
# the commands against live targets.
. "$(dirname "$0")/../lib/common.sh"
D=$ROOT/fixtures/dumps S=$ROOT/fixtures/stats
NOPID=999999999

mapfile -t cmds < <(ma_commands)
# "CMD" or "frag SUB": every command line the generic runs below start from
forms=()
for c in "${cmds[@]}"; do
	forms+=("$c")
	for s in $(ma_subcommands "$c"); do forms+=("$c $s"); done
done

# Dumps made here: C (with file:line) and C++ names from the prof fixtures.
MALLOC_CONF=prof:true,prof_final:false "$FIX/prof_c" "$TMP/c.heap" >/dev/null 2>&1
MALLOC_CONF=prof:true,prof_final:false,lg_prof_sample:17 "$FIX/prof_cxx" "$TMP/cxx.heap" >/dev/null 2>&1
head -c 20000 "$S/one_arena.json" >"$TMP/cut.json"
echo '{"name":"other tool"}' >"$TMP/other.json"
head -c 4096 /dev/zero | tr '\0' 'x' >"$TMP/garbage"
offline=(
	"bins --stats $S/one_arena.json"
	"bins --stats $S/two_arenas.json --top 0"
	"bins --stats $TMP/cut.json"
	"bins --stats $TMP/other.json"
	"bins --stats $TMP/missing.json"
	"aggregate $D/prof_c.heap"
	"aggregate $D/prof_c.heap --cum"
	"aggregate $D/prof_c_truncated.heap"
	"aggregate $D/prof_c_crlf.heap --top 3"
	"aggregate $D/prof_c.heap --binary /etc/hostname"
	"aggregate $D/prof_c.heap --stats $S/one_arena.json"
	"aggregate $TMP/garbage"
	"aggregate $TMP/c.heap --lines"
	"aggregate $TMP/cxx.heap"
	"aggregate $TMP/cxx.heap --cum"
	"stacks $D/prof_c.heap site"
	"stacks $D/prof_c.heap main --any-frame"
	"stacks $D/prof_c.heap main"
	"stacks $TMP/c.heap site --lines"
	"stacks $TMP/cxx.heap make"
	"diff $D/prof_c.heap $TMP/c.heap"
	"diff $D/prof_c.heap $D/prof_c_truncated.heap"
	"diff $D/prof_c.heap $TMP/missing"
	"frag report --from $TMP/missing.rep"
	"frag report --from $D/prof_c.heap"
	"ps"
	"ps no-such-process-name"
)
plan $((1 + 2 + 4 * ${#forms[@]} + ${#offline[@]}))

# The list read from --help is the command table of main.c.
table=$(sed -n 's/^	{ "\([a-z-]*\)", cmd_.*/\1/p' "$ROOT/attach/cli/main.c" | sort | tr '\n' ' ')
check "memattach --help lists every command of main.c's table (${#cmds[@]})" \
	[ "$(printf '%s\n' "${cmds[@]}" | sort | tr '\n' ' ')" = "$table" ]
check "the prof fixtures wrote their dumps" test -s "$TMP/c.heap" -a -s "$TMP/cxx.heap"
fits "memattach --help" --help

for f in "${forms[@]}"; do
	# shellcheck disable=SC2086 # "frag start" is two words
	fits "$f --help" $f --help
	# shellcheck disable=SC2086
	fits "$f with an unknown option" $f --no-such-option
	# shellcheck disable=SC2086
	fits "$f without arguments" $f
	# shellcheck disable=SC2086
	fits "$f on a process that does not exist" $f $NOPID -o "$TMP/none"
done
for o in "${offline[@]}"; do
	# shellcheck disable=SC2086
	fits "${o%% *}" $o
done
