#!/usr/bin/env bash
# aggregate against known truth: the fixture programs allocate known byte
# counts at known sites (fixtures/prof/*).  Large blocks are sampled with
# probability ~1 and must come out exact; the site with 1,000,000 x 64 B
# within +-20% (run at lg_prof_sample:17, 128 KiB, ~490 samples: the
# sampling noise is ~4.5%, 20% is over 4 sigma; at 15% a CI run came out at
# +15.3%).  Rust names must be what rustfilt prints.
. "$(dirname "$0")/../lib/common.sh"
plan 37
export LC_ALL=C
CONF=prof:true,prof_final:false,lg_prof_sample:17
# The C++ and Rust small-object sites (14 MB of 48 B nodes, 13 MB of 32 B
# boxes) get ~110 samples at 128 KiB: a sigma near 10%, and 25% failed 1 CI
# run in a hundred or so.  At 16 KiB, ~880 samples: 3.4%, 25% is 7 sigma.
CONF_FINE=prof:true,prof_final:false,lg_prof_sample:14
MiB=1048576

# site_bytes JSON LEAF_PREFIX FIELD: sum FIELD over sites whose leaf starts with LEAF_PREFIX
site() {
	jcheck '
d=json.load(open(sys.argv[1])); print(sum(s[sys.argv[3]] for s in d["sites"] if s["leaf"].startswith(sys.argv[2])))' "$@"
}
# within A B PCT: |A - B| <= PCT% of B
within() { jcheck 'import sys; a,b,p=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= p/100*b else 1)' "$@"; }

for fx in prof_c prof_c_nopie prof_c_static; do
	[ -x "$FIX/$fx" ] || { fail "truth $fx: fixture not built"; continue; }
	MALLOC_CONF=$CONF "$FIX/$fx" "$TMP/$fx.heap" "$TMP/$fx.stats.json" >/dev/null ||
		{ fail "truth $fx: no dump"; continue; }
	"$MA" aggregate "$TMP/$fx.heap" --json --top 1000 --stats "$TMP/$fx.stats.json" >"$TMP/$fx.json" 2>"$TMP/$fx.err" ||
		{ fail "truth $fx: aggregate failed: $(head -c 200 "$TMP/$fx.err")"; continue; }
	j=$TMP/$fx.json
	check "truth $fx: 3 x 16 MiB malloc exact" [ "$(site "$j" site_big_malloc scaled_bytes)" = $((48 * MiB)) ]
	check "truth $fx: 24 MiB calloc exact" [ "$(site "$j" site_calloc scaled_bytes)" = $((24 * MiB)) ]
	check "truth $fx: 12 MiB realloc exact" [ "$(site "$j" site_realloc scaled_bytes)" = $((12 * MiB)) ]
	check "truth $fx: large sites have scale 1" [ "$(site "$j" site_big_malloc raw_bytes)" = $((48 * MiB)) ]
	n=$(site "$j" site_small_64 objects); b=$(site "$j" site_small_64 scaled_bytes)
	check "truth $fx: 1,000,000 x 64 B objects within 20% ($n)" within "$n" 1000000 20
	check "truth $fx: 1,000,000 x 64 B bytes within 20% ($b)" within "$b" 64000000 20
	check "truth $fx: small site scale >> 1" jcheck '
s=[s for s in json.load(open(sys.argv[1]))["sites"] if s["leaf"]=="site_small_64"][0]; sys.exit(0 if s["scale"]>100 else 1)' "$j"
	check "truth $fx: jemalloc frames dropped (leaves are the sites)" jcheck '
l=[s["leaf"] for s in json.load(open(sys.argv[1]))["sites"]][:5]; sys.exit(0 if all(x.startswith("site_") for x in l) else 1)' "$j"
	check "truth $fx: --stats within 10% of stats.allocated" jcheck '
d=json.load(open(sys.argv[1]))["stats"]; sys.exit(0 if d["within_tolerance"] and abs(d["scaled_over_allocated"]-1)<=0.1 else 1)' "$j"
done

# --keep-allocator-frames shows jemalloc's frames as leaves instead
if [ -f "$TMP/prof_c.heap" ]; then
	"$MA" aggregate "$TMP/prof_c.heap" --json --keep-allocator-frames >"$TMP/keep.json"
	check "truth: --keep-allocator-frames keeps jemalloc leaves" jcheck '
d=json.load(open(sys.argv[1])); sys.exit(0 if all(s["object"].startswith("libjemalloc") for s in d["sites"]) else 1)' "$TMP/keep.json"
	# A stats file far from the dump: warning naming lg_prof_sample:17
	echo '{"jemalloc":{"version":"5.3.0","stats":{"allocated":1600000000000,"active":1}}}' >"$TMP/far.json"
	"$MA" aggregate "$TMP/prof_c.heap" --stats "$TMP/far.json" >/dev/null 2>"$TMP/far.err"
	check "truth: --stats warns beyond 10% and suggests lg_prof_sample:17" grep -q 'lg_prof_sample:17' "$TMP/far.err"
fi

# C++: new char[32 MiB] and a vector reserved to 16 MiB, exact
if MALLOC_CONF=$CONF_FINE "$FIX/prof_cxx" "$TMP/cxx.heap" >/dev/null; then
	"$MA" aggregate "$TMP/cxx.heap" --json >"$TMP/cxx.json"
	check "truth prof_cxx: new char[32 MiB] exact" [ "$(site "$TMP/cxx.json" 'make_buffer(' scaled_bytes)" = $((32 * MiB)) ]
	check "truth prof_cxx: vector reserve 16 MiB exact" [ "$(site "$TMP/cxx.json" 'app::Table::grow(' scaled_bytes)" = $((16 * MiB)) ]
	n=$(site "$TMP/cxx.json" 'make_nodes(' objects)
	check "truth prof_cxx: 300,000 new Node within 25% ($n)" within "$n" 300000 25
else
	fail "truth prof_cxx: no dump"
fi

# Rust: Box/Vec through a GlobalAlloc over mallocx; skip the alloc:: wrappers
if MALLOC_CONF=$CONF_FINE "$FIX/prof_rs" "$TMP/rs.heap" >/dev/null; then
	"$MA" aggregate "$TMP/rs.heap" --json --skip '^<?alloc::' --skip '__rust_' --skip 'GlobalAlloc' >"$TMP/rs.json"
	check "truth prof_rs: vec![0u8; 20 MiB] exact" [ "$(site "$TMP/rs.json" 'prof_rs::make_vec' scaled_bytes)" = $((20 * MiB)) ]
	check "truth prof_rs: Vec<u32> reserve_exact 8 MiB exact" [ $(($(site "$TMP/rs.json" 'prof_rs::Registry::fill' scaled_bytes) + $(site "$TMP/rs.json" '<prof_rs::Registry>::fill' scaled_bytes))) = $((8 * MiB)) ]
	# make_boxes: 400,000 x 32 B boxes + the 3.2 MB Vec of pointers (3.5 MiB size class)
	b=$(site "$TMP/rs.json" 'prof_rs::make_boxes' scaled_bytes)
	check "truth prof_rs: 400,000 Box<[u64; 4]> + Vec within 25% ($b)" within "$b" $((400000 * 32 + 3670016)) 25
	# Every Rust frame's name is what rustfilt prints for its symbol.
	"$MA" stacks "$TMP/rs.heap" "" -n 1000 --json >"$TMP/rs.stacks.json"
	jcheck - "$TMP/rs.stacks.json" >"$TMP/rs.pairs" <<'PY'
import json, re, sys
seen = set()
for st in json.load(open(sys.argv[1]))["stacks"]:
    for f in st["frames"]:
        s = f["symbol"]
        if (s.startswith("_ZN") or s.startswith("_R")) and s not in seen:
            seen.add(s)
            print(re.sub(r'\.llvm\.\d+$', '', s) + "\t" + f["name"])
PY
	if command -v rustfilt >/dev/null && [ -s "$TMP/rs.pairs" ]; then
		cut -f1 "$TMP/rs.pairs" | rustfilt >"$TMP/rs.rustfilt"
		cut -f2 "$TMP/rs.pairs" >"$TMP/rs.ours"
		n=$(wc -l <"$TMP/rs.pairs")
		if cmp -s "$TMP/rs.rustfilt" "$TMP/rs.ours"; then
			pass "truth prof_rs: $n Rust frame names equal rustfilt's"
		else
			fail "truth prof_rs: names differ from rustfilt: $(diff "$TMP/rs.rustfilt" "$TMP/rs.ours" | head -4 | tr '\n' ' ')"
		fi
	else
		fail "truth prof_rs: no rustfilt (make deps installs it) or no Rust frames in the dump"
	fi
	# --lines: inlined frames through DWARF; Box::new is inlined into
	# make_boxes at the line of the source that calls it.
	line=$(grep -n 'Box::new(\[' "$ROOT/fixtures/prof/prof_rs.rs" | cut -d: -f1)
	"$MA" stacks "$TMP/rs.heap" GlobalAlloc --lines --json >"$TMP/rs.lines.json"
	check "truth prof_rs: --lines shows Box::new inlined into make_boxes at line $line" jcheck '
d=json.load(open(sys.argv[1])); ok=False
for st in d["stacks"]:
    f=st["frames"]; n=[x["name"] for x in f]
    if "prof_rs::make_boxes" in n:
        i=n.index("prof_rs::make_boxes")
        ok = ok or (i>0 and "Box" in n[i-1] and f[i].get("file","").endswith("prof_rs.rs") and f[i]["line"]==int(sys.argv[2]))
sys.exit(0 if ok else 1)' "$TMP/rs.lines.json" "$line"
else
	fail "truth prof_rs: no dump"
fi
