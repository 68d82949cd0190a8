#!/usr/bin/env bash
# Bench: memattach aggregate vs jeprof --text, side by side, on synthetic
# dumps of 100,000 stacks x 30 frames over a large real ELF (the Rust
# toolchain's librustc_driver-*.so, ~165,000 symbols):
#   shared    one return address per function, over 20,000 functions
#   distinct  every frame a fresh return address, over all the functions
#             (the worst case for a symbolizer that works per address)
# Prints wall time, peak RSS and the ratio.  Timing lives only here.
#
#   bash tests/bench/aggregate.sh [NSTACKS]     (JEPROF_TIMEOUT=seconds, default 1800)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MA=$ROOT/build/memattach
N=${1:-100000}
OUT=$ROOT/build/bench
mkdir -p "$OUT"
LIB=$(ls /root/.rustup/toolchains/*/lib/librustc_driver-*.so ~/.rustup/toolchains/*/lib/librustc_driver-*.so 2>/dev/null | head -1)
if [ -z "$LIB" ]; then echo "bench aggregate: no librustc_driver-*.so under ~/.rustup: not run"; exit 1; fi
nsyms=$(nm --defined-only "$LIB" 2>/dev/null | wc -l)

# run_case NAME NFUNCS [distinct]
run_case() {
	local name=$1 nfuncs=$2 mode=${3:-} dump best= peak t rss jt= jrss rc
	dump=$OUT/synthetic_${name}_${N}.heap
	[ -s "$dump" ] || python3 "$ROOT/tests/bench/gen_dump.py" "$LIB" "$dump" "$N" 30 "$nfuncs" $mode || exit 1
	echo
	echo "== $name: $N stacks x 30 frames over $nfuncs functions, $(du -h "$dump" | cut -f1), of" \
	     "$(basename "$LIB") ($(du -h "$LIB" | cut -f1), $nsyms symbols)"
	# memattach: best of 3, and peak RSS
	for _ in 1 2 3; do
		/usr/bin/time -f "%e %M" -o "$OUT/ma.time" "$MA" aggregate "$dump" >"$OUT/ma.txt" 2>/dev/null || {
			echo "memattach failed"; exit 1; }
		read -r t rss <"$OUT/ma.time"
		if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $t < $best else 1)"; then best=$t; peak=$rss; fi
	done
	/usr/bin/time -f "%e %M" -o "$OUT/ma_json.time" "$MA" aggregate "$dump" --json --top 100000 >/dev/null 2>&1
	/usr/bin/time -f "%e %M" -o "$OUT/ma_folded.time" "$MA" aggregate "$dump" --folded >/dev/null 2>&1
	/usr/bin/time -f "%e %M" -o "$OUT/ma_pprof.time" "$MA" aggregate "$dump" --pprof "$OUT/p.pb.gz" >/dev/null 2>&1
	# jeprof: once (it is slow)
	if command -v jeprof >/dev/null; then
		/usr/bin/time -f "%e %M" -o "$OUT/jeprof.time" timeout "${JEPROF_TIMEOUT:-1800}" \
			jeprof --text --inuse_space "$LIB" "$dump" >"$OUT/jeprof.txt" 2>/dev/null
		rc=$?
		# the last line: time prints "Command exited with ..." first when killed
		read -r jt jrss < <(tail -1 "$OUT/jeprof.time" 2>/dev/null)
		[ "$rc" = 124 ] && jt=">${JEPROF_TIMEOUT:-1800}"
	fi
	printf '%-34s %10s %12s\n' "" "wall (s)" "peak RSS"
	printf '%-34s %10s %9s MB\n' "memattach aggregate (table)" "$best" $((peak / 1024))
	read -r t rss <"$OUT/ma_json.time"; printf '%-34s %10s %9s MB\n' "memattach aggregate --json (all)" "$t" $((rss / 1024))
	read -r t rss <"$OUT/ma_folded.time"; printf '%-34s %10s %9s MB\n' "memattach aggregate --folded" "$t" $((rss / 1024))
	read -r t rss <"$OUT/ma_pprof.time"; printf '%-34s %10s %9s MB\n' "memattach aggregate --pprof" "$t" $((rss / 1024))
	if [ -n "$jt" ]; then
		printf '%-34s %10s %9s MB\n' "jeprof --text --inuse_space" "$jt" $((${jrss:-0} / 1024))
		case $jt in
		\>*) echo "ratio: jeprof did not finish; memattach > $(python3 -c "print(round(${jt#>} / $best))")x faster" ;;
		*) echo "ratio: memattach is $(python3 -c "print(round($jt / $best, 1))")x faster than jeprof" ;;
		esac
		echo "totals: memattach '$(grep -o '^in use: [^ ]* [A-Za-z]*' "$OUT/ma.txt")'," \
		     "jeprof '$(grep -m1 '^Total' "$OUT/jeprof.txt")'"
	else
		echo "jeprof: not installed"
	fi
}

run_case shared 20000
run_case distinct 165000 distinct
