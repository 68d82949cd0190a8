#!/usr/bin/env bash
# Golden outputs of the offline commands (bins --stats, aggregate, stacks,
# diff) on committed inputs (fixtures/golden/: a snapshot pair of the demo
# daemon, its paths moved under /opt/golden so that no machine names its
# frames differently; fixtures/stats/).  Each case of fixtures/golden/cases
# must print exactly its expected/NAME: stdout, stderr and exit status.  A
# change of output is then a reviewed diff: `make golden` (GOLDEN_UPDATE=1)
# rewrites the expected files.
. "$(dirname "$0")/../lib/common.sh"
G=$ROOT/fixtures/golden
mapfile -t cases < <(grep -v '^#' "$G/cases" | grep .)
plan "${#cases[@]}"
export LC_ALL=C MA_TEXT_WIDTH=100
cd "$ROOT" || exit 1

# run_case ARGS...: what the golden file of a case holds.
run_case() {
	local rc
	"$MA" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null; rc=$?
	cat "$TMP/out"
	echo "--- stderr"
	cat "$TMP/err"
	echo "--- exit $rc"
}

for c in "${cases[@]}"; do
	read -r name args <<<"$c"
	# shellcheck disable=SC2086  # the arguments are words, no quoting in cases
	run_case $args >"$TMP/$name"
	if [ "${GOLDEN_UPDATE:-0}" = 1 ]; then
		cp "$TMP/$name" "$G/expected/$name"
		pass "$name: expected/$name written"
	elif [ ! -f "$G/expected/$name" ]; then
		fail "$name: memattach $args: no expected/$name (make golden writes it)"
	elif cmp -s "$G/expected/$name" "$TMP/$name"; then
		pass "$name: memattach $args prints expected/$name"
	else
		fail "$name: memattach $args differs from expected/$name:"$'\n'"$(diff -u "$G/expected/$name" "$TMP/$name" | sed -n '3,14p')"
	fi
done
