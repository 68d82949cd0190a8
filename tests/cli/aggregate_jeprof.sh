#!/usr/bin/env bash
# aggregate vs jeprof: on real dumps of the fixture programs, every function
# in jeprof's top 10 (by flat in-use bytes) must agree with memattach
# aggregate --json within 1%.
#
# jeprof misnames some frames, and then the numbers are compared another way:
#  - a frame in a stripped library that no symbol covers: jeprof takes the
#    nearest export (std::__throw_ios_failure@@GLIBCXX...), memattach prints
#    file+0xOFF; the bytes of that site must match.
#  - jemalloc frames that its skip list misses (operator new in Debian's
#    stripped libjemalloc is named malloc_usable_size; static jemalloc's
#    prof_backtrace_impl/je_*): jeprof's leaf is then an allocator frame.
#    For these, each memattach site jeprof does not list must match
#    jeprof's cumulative bytes for that function instead.
. "$(dirname "$0")/../lib/common.sh"
plan 23

if ! command -v jeprof >/dev/null; then fail "jeprof missing (make deps installs libjemalloc-dev)"; exit 1; fi
export LC_ALL=C

for fx in prof_c prof_c_nopie prof_c_static prof_cxx; do
	if [ ! -x "$FIX/$fx" ]; then fail "jeprof $fx: fixture not built (make fixtures)"; continue; fi
	if ! MALLOC_CONF=prof:true,prof_final:false "$FIX/$fx" "$TMP/$fx.heap" >/dev/null; then
		fail "jeprof $fx: fixture did not write a dump"; continue
	fi
	"$MA" aggregate "$TMP/$fx.heap" --json --top 100000 >"$TMP/$fx.json" 2>"$TMP/$fx.err" ||
		{ fail "jeprof $fx: aggregate failed: $(head -c 300 "$TMP/$fx.err")"; continue; }
	jeprof --text --inuse_space --show_bytes --nodecount=100000 "$FIX/$fx" "$TMP/$fx.heap" \
		>"$TMP/$fx.jeprof" 2>/dev/null ||
		{ fail "jeprof $fx: jeprof failed"; continue; }
	jcheck - "$fx" "$TMP/$fx.json" "$TMP/$fx.jeprof" <<'PY'
import json, re, subprocess, sys
fx, ours_path, jp_path = sys.argv[1:4]

def short(name):
    """jeprof's ShortFunctionName, plus symbol versions dropped."""
    name = re.sub(r'@@?[\w.]+$', '', name)
    while True:
        n = re.sub(r'\([^()]*\)(\s*const)?', '', name)
        if n == name: break
        name = n
    while True:
        n = re.sub(r'<[^<>]*>', '', name)
        if n == name: break
        name = n
    return re.sub(r'^.*\s+(\w+::)', r'\1', name)

ours = json.load(open(ours_path))
flat = {}
for s in ours["sites"]:
    k = short(s["leaf"])
    flat[k] = flat.get(k, 0) + s["scaled_bytes"]
unnamed = {k: v for k, v in flat.items() if re.search(r'\+0x[0-9a-f]+$', k)}

jp_flat, jp_cum, total = [], {}, None
for line in open(jp_path):
    m = re.match(r'Total: (\d+) B', line)
    if m: total = int(m.group(1)); continue
    f = line.split(None, 5)
    if len(f) == 6 and f[0].isdigit():
        name = re.sub(r'@@?[\w.]+$', '', f[5].strip())
        jp_flat.append((int(f[0]), name))
        jp_cum[name] = int(f[3])
jp_flat.sort(key=lambda x: -x[0])
top = [x for x in jp_flat if x[0] > 0][:10]
if not top:
    print(f"FAIL jeprof {fx}: jeprof listed nothing"); sys.exit(0)

def close(a, b): return abs(a - b) <= 0.01 * max(a, b, 1)

# jemalloc's own exports: when jeprof keeps one as a leaf it is misattributing.
je = set(subprocess.run(["nm", "-D", "--defined-only", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"],
        capture_output=True, text=True).stdout.split())
def is_allocator(n):
    return n in je or n.startswith(("je_", "prof_", "_rjem_", "do_rallocx", "imalloc", "ifree"))

ok = True
if total is not None and not close(total, ours["total_scaled_bytes"]):
    ok = False
    print(f"FAIL jeprof {fx}: total jeprof {total} vs memattach {ours['total_scaled_bytes']}")
misattributed = False
for b, name in top:
    s = short(name)
    if s in flat:
        if close(b, flat[s]):
            print(f"PASS jeprof {fx}: {s} {b} vs {flat[s]}")
        else:
            ok = False
            print(f"FAIL jeprof {fx}: {s}: jeprof {b} vs memattach {flat[s]}")
    elif is_allocator(name):
        misattributed = True
        print(f"PASS jeprof {fx}: jeprof keeps allocator frame {name} as a leaf ({b}); checked through cum below")
    else:
        hit = [k for k, v in unnamed.items() if close(b, v)]
        if hit:
            print(f"PASS jeprof {fx}: {name} (jeprof's nearest export) = {hit[0]} {b} vs {unnamed[hit[0]]}")
        else:
            ok = False
            print(f"FAIL jeprof {fx}: jeprof lists {name} {b}, memattach has no such site")
if misattributed:
    listed = {short(n) for _, n in top}
    for s in ours["sites"]:
        k = short(s["leaf"])
        if k in listed or k in unnamed or s["scaled_bytes"] < 0.01 * ours["total_scaled_bytes"]:
            continue
        jc = jp_cum.get(k)
        if jc is not None and close(jc, flat[k]):
            print(f"PASS jeprof {fx}: {k} memattach flat {flat[k]} = jeprof cum {jc}")
        else:
            ok = False
            print(f"FAIL jeprof {fx}: {k} memattach flat {flat[k]} vs jeprof cum {jc}")
PY
done
