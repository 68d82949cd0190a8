#!/usr/bin/env bash
# tests/cli/fixtures_selftest.sh - the fixture programs keep their protocol:
# READY, quiesce -> stats JSON (frozen until resume), resume -> OK,
# verdict -> VERDICT ok, quit -> exit 0; plus the symbol-table properties
# the attach tests rely on.  No memattach involved.
source "$(dirname "$0")/../lib/common.sh"
plan 75
trap '' PIPE # a fixture that died must not kill the script via its FIFO

# wait_line FILE REGEX FROM_LINE TIMEOUT_S: print the first line after line
# FROM_LINE of FILE matching REGEX; fail (status 1) after the timeout.
wait_line() {
	local file=$1 re=$2 from=$3 tmo=$4 i line
	for ((i = 0; i < tmo * 20; i++)); do
		line=$(tail -n +"$((from + 1))" "$file" 2>/dev/null | grep -m1 -E "$re")
		if [ -n "$line" ]; then
			echo "$line"
			return 0
		fi
		sleep 0.05
	done
	return 1
}
nlines() { wc -l <"$1"; }
has_line() { wait_line "$@" >/dev/null; }
same() { [ -n "$1" ] && [ "$1" = "$2" ]; }
nrun=0

# json_ok LINE: six integer keys, allocated > 0
json_ok() {
	jcheck '
d = json.loads(sys.argv[1])
keys = ["allocated", "active", "resident", "mapped", "retained", "metadata"]
assert all(isinstance(d[k], int) for k in keys), d
assert d["allocated"] > 0 and d["active"] >= d["allocated"], d
' "$1" 2>/dev/null
}

# run_fixture NAME [ARGS...]: the whole protocol on one fixture.
# Sets VERDICT to the verdict line.
run_fixture() {
	local bin=$FIX/$1 name="$*"
	shift
	VERDICT=
	nrun=$((nrun + 1))
	if [ ! -x "$bin" ]; then
		fail "$name: $bin not built"
		return
	fi
	local in=$TMP/fx$nrun.in out=$TMP/fx$nrun.out err=$TMP/fx$nrun.err fd pid n line s1 s2 rc
	mkfifo "$in"
	"$bin" "$@" <"$in" >"$out" 2>"$err" &
	pid=$!
	track "$pid"
	exec {fd}>"$in"
	if ! line=$(wait_line "$out" '^READY ' 0 10); then
		fail "$name: no READY within 10 s: $(head -c 300 "$err")"
		exec {fd}>&-
		kill -KILL "$pid" 2>/dev/null
		return
	fi
	check "$name: READY carries the pid" [ "$line" = "READY $pid" ]

	n=$(nlines "$out")
	echo quiesce >&"$fd"
	s1=$(wait_line "$out" '^\{' "$n" 10)
	check "$name: quiesce prints stats JSON with allocated > 0" json_ok "$s1"
	# Still parked: a second reading must be identical (nothing allocated).
	sleep 0.2
	n=$(nlines "$out")
	echo quiesce >&"$fd"
	s2=$(wait_line "$out" '^\{' "$n" 10)
	check "$name: stats frozen while quiesced" same "$s1" "$s2"

	n=$(nlines "$out")
	echo resume >&"$fd"
	check "$name: resume answers OK" has_line "$out" '^OK$' "$n" 10
	sleep 1

	n=$(nlines "$out")
	echo verdict >&"$fd"
	VERDICT=$(wait_line "$out" '^VERDICT ' "$n" 10)
	if [[ "$VERDICT" == "VERDICT ok "* ]]; then pass "$name: verdict ok"; else fail "$name: verdict: '$VERDICT' $(head -c 300 "$err")"; fi

	n=$(nlines "$out")
	echo quit >&"$fd"
	exec {fd}>&-
	rc=
	for ((i = 0; i < 100; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			rc=$?
			break
		fi
		sleep 0.05
	done
	if [ -z "$rc" ]; then
		fail "$name: still running 5 s after quit"
		kill -KILL "$pid" 2>/dev/null
		return
	fi
	check "$name: quit exits 0" [ "$rc" = 0 ]
	check "$name: quit prints the verdict" has_line "$out" '^VERDICT ok ' "$n" 1
}

# Symbol-table properties.
dynsym_has() { readelf --dyn-syms -W "$1" 2>/dev/null | awk -v s="$2" '$8 == s { f = 1 } END { exit !f }'; }
symtab_defines() { nm "$1" 2>/dev/null | awk -v s="$2" '$2 ~ /^[TtWw]$/ && $3 == s { f = 1 } END { exit !f }'; }

if [ -x "$FIX/daemon" ]; then
	check "daemon: NEEDED libjemalloc.so.2" bash -c "readelf -d '$FIX/daemon' | grep -q 'NEEDED.*libjemalloc.so.2'"
fi
if [ -x "$FIX/daemon_static" ]; then
	check "daemon_static: mallctl defined in .symtab" symtab_defines "$FIX/daemon_static" mallctl
	check "daemon_static: mallctl not in .dynsym" bash -c "! readelf --dyn-syms -W '$FIX/daemon_static' | awk '\$8 == \"mallctl\"' | grep -q ."
	check "daemon_static: no libjemalloc.so dependency" bash -c "! readelf -d '$FIX/daemon_static' | grep -q libjemalloc"
fi
for b in daemon_prefixed daemon_rust; do
	[ -x "$FIX/$b" ] || continue
	check "$b: _rjem_mallctl defined in .symtab" symtab_defines "$FIX/$b" _rjem_mallctl
	check "$b: no mallctl / _rjem_mallctl in .dynsym" \
		bash -c "! readelf --dyn-syms -W '$FIX/$b' | awk '\$8 == \"mallctl\" || \$8 == \"_rjem_mallctl\"' | grep -q ."
	check "$b: malloc stays glibc's (no jemalloc malloc defined)" bash -c "! nm '$FIX/$b' | awk '\$3 == \"malloc\" && \$2 ~ /[Tt]/' | grep -q ."
	check "$b: no libjemalloc.so dependency" bash -c "! readelf -d '$FIX/$b' | grep -q libjemalloc"
done

run_fixture daemon
run_fixture daemon -q -t 2
run_fixture daemon_static
run_fixture daemon_prefixed
run_fixture daemon_cxx
run_fixture daemon_rust
run_fixture sysc
if [ -n "$VERDICT" ]; then
	for k in read nanosleep epoll futex accept; do
		check "sysc: verdict counts $k > 0" bash -c "[[ '$VERDICT' =~ \ $k=[1-9] ]]"
	done
fi
run_fixture regs -i 2000000
if [ -n "$VERDICT" ]; then
	check "regs: verdict counts rounds > 0" bash -c "[[ '$VERDICT' =~ \ rounds=[1-9] ]]"
	check "regs: verdict reports mismatches=0" bash -c "[[ '$VERDICT' =~ \ mismatches=0\  ]]"
fi
