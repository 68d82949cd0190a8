#!/usr/bin/env bash
# tests/cli/hostile_inputs.sh - offline inputs are bounded: devices, FIFOs
# without a writer, huge sparse files, absurd bin counts, binary data and
# dumps cut inside MAPPED_LIBRARIES each end (a 180 s guard against a hang),
# with exit 1 and one message saying what the input is, in bounded memory.
. "$(dirname "$0")/../lib/common.sh"
plan 19
D=$ROOT/fixtures/dumps

# run_bounded NAME WANT_RC PATTERN CMD...: exit status WANT_RC, a one-line
# message matching PATTERN, in 200 MB of memory (MAXMB=N: N MB).  The time
# limit only catches a hang: every input here ends (the endless pipe after
# 400 MB), and reading 256 MiB of it took over 20 s with 4 CPU hogs per core.
run_bounded() {
	local name=$1 want=$2 pat=$3; shift 3
	jcheck - "$TMP/err" "$@" >"$TMP/rusage" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as err:
    try:
        rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err, timeout=180).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
	local rc mb
	read -r rc mb <"$TMP/rusage"
	if [ "$rc" = "$want" ] && [ "$mb" -lt "${MAXMB:-200}" ] && says "$pat" "$TMP/err" &&
		[ "$(unwrapped "$TMP/err" | wc -l)" -le "${MAXLINES:-2}" ]; then
		pass "$name (exit $rc, ${mb} MB: $(head -1 "$TMP/err"))"
	else
		fail "$name: exit $rc (want $want), ${mb} MB, stderr: $(head -c 300 "$TMP/err")"
	fi
}

run_bounded "aggregate /dev/zero" 1 "'/dev/zero' is a character device, not a heap dump file" \
	"$MA" aggregate /dev/zero
run_bounded "bins --stats /dev/zero" 1 "'/dev/zero' is a character device" "$MA" bins --stats /dev/zero
run_bounded "diff /dev/zero" 1 "character device" "$MA" diff /dev/zero "$D/prof_c.heap"
run_bounded "stacks /dev/zero" 1 "character device" "$MA" stacks /dev/zero main

mkfifo "$TMP/fifo"
run_bounded "aggregate of a FIFO with no writer" 1 "'.*fifo' is a FIFO and nothing was written to it" \
	"$MA" aggregate "$TMP/fifo"
run_bounded "bins --stats of a FIFO with no writer" 1 "is a FIFO and nothing was written" \
	"$MA" bins --stats "$TMP/fifo"

truncate -s 2G "$TMP/sparse"
run_bounded "aggregate of a 2 GB sparse file: refused from its first bytes" 1 \
	"not a jemalloc heap dump: expected 'heap_v2/<period>' on line 1, found binary data" \
	"$MA" aggregate "$TMP/sparse"
run_bounded "bins --stats of a 2 GB sparse file: refused by its size" 1 \
	"is 2.00 GiB, more than any malloc_stats_print JSON" "$MA" bins --stats "$TMP/sparse"
run_bounded "diff of a 2 GB sparse file" 1 "found binary data" "$MA" diff "$TMP/sparse" "$TMP/sparse"
printf 'heap_v2/524288\n' >"$TMP/zeros.heap"
truncate -s 300M "$TMP/zeros.heap"
run_bounded "a heap_v2 header and then 300 MB of zeros" 1 "line 2 is longer than 1 MiB" \
	"$MA" aggregate "$TMP/zeros.heap"
printf 'heap_v2/524288\n\0\0\0\n' >"$TMP/nul.heap"
run_bounded "NUL bytes in a line: binary data" 1 "line 2 is binary data \(NUL bytes\)" \
	"$MA" aggregate "$TMP/nul.heap"
run_bounded "bins --stats of a directory names it" 1 "'$TMP' is a directory" "$MA" bins --stats "$TMP"

jcheck - "$ROOT/fixtures/stats/one_arena.json" "$TMP/bins100k.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); j = d["jemalloc"]; n = 100000
c = json.dumps(j["arenas"]["bin"][0]); b = json.dumps(dict(list(j["stats.arenas"].values())[0]["bins"][0], curslabs=1))
j["arenas"]["bin"] = ["@C@"]; j["arenas"]["nbins"] = n
list(j["stats.arenas"].values())[0]["bins"] = ["@B@"]
text = json.dumps(d)
# 100,000 copies spliced in as text: json.dump of 200,000 dicts is slow
text = text.replace('"@C@"', ",".join([c] * n)).replace('"@B@"', ",".join([b] * n))
open(sys.argv[2], "w").write(text)
PY
run_bounded "bins --stats with 100,000 bins" 1 "lists 100000 bins; jemalloc has at most 1024" \
	"$MA" bins --stats "$TMP/bins100k.json"

# A pipe whose writer stalls, and one that never ends: given up on.
mkfifo "$TMP/stall"
(printf 'heap_v2/524288\n'; sleep 30) >"$TMP/stall" & track $!
MEMATTACH_TEST_PIPE_STALL_S=2 run_bounded "a pipe whose writer stalls: given up" 1 \
	"its writer sent nothing for 2 s" "$MA_T" aggregate "$TMP/stall"
mkfifo "$TMP/endless"
{ head -c 400M /dev/zero | tr '\0' ' ' >"$TMP/endless"; } 2>/dev/null & track $!
MAXMB=300 run_bounded "an endless stats JSON through a pipe: stops at 256 MiB" 1 \
	"goes on past 256(\\.0)? MiB, more than memattach reads from a pipe" "$MA" bins --stats "$TMP/endless"

# A dump cut inside MAPPED_LIBRARIES: refused (exit 1) saying where it was
# cut; with --allow-truncated the report says which frames stay unnamed.
off=$(grep -b -o '^MAPPED_LIBRARIES:' "$D/prof_c.heap" | cut -d: -f1)
head -c $((off + 400)) "$D/prof_c.heap" >"$TMP/cutmaps.heap"
run_bounded "dump cut inside MAPPED_LIBRARIES: exit 1, the cut named, how to go on" 1 \
	"cut inside MAPPED_LIBRARIES \\([0-9]+ mappings read\\).*--allow-truncated" \
	"$MA" aggregate "$TMP/cutmaps.heap"
# Three lines: the cut, the addresses it left outside every mapping, and
# (the committed dump's program was rebuilt since) that program's file.
MAXLINES=3 run_bounded "... with --allow-truncated: a report and the cut named" 0 \
	"truncated: .*cut inside MAPPED_LIBRARIES: frames in objects listed after the cut stay unnamed" \
	"$MA" aggregate "$TMP/cutmaps.heap" --allow-truncated
check "... and the frames outside every listed mapping are warned about" \
	says "is in none of the mappings the dump lists" "$TMP/err"

# A pipe is read (bounded, like a FIFO with a writer): the same report.
"$MA" aggregate "$D/prof_c.heap" --json >"$TMP/file.json" 2>/dev/null
"$MA" aggregate <(cat "$D/prof_c.heap") --json >"$TMP/pipe.json" 2>/dev/null
check "a dump read through a pipe gives the file's report" jcheck '
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["total_scaled_bytes"] == b["total_scaled_bytes"] > 0 and a["sites"] == b["sites"]' \
	"$TMP/file.json" "$TMP/pipe.json"
