#!/usr/bin/env bash
# tests/attach/browser_svg.sh - the pictures people open in a browser render
# there: headless Chromium (Debian's chromium) loads the flame graph of
# 'aggregate --svg' and the chart of 'watch', takes a screenshot and dumps
# the DOM.  Checked: the title text is in the DOM, the script runs without a
# console error (and zooms on a frame), and the screenshot shows what the
# SVG draws -- each frame's colour over its area, each series' line.
. "$(dirname "$0")/../lib/common.sh"
plan 13

command -v chromium >/dev/null || { fail "chromium is not installed (make deps installs it)"; exit 1; }
# Debian's python3-pil reads the screenshots; it belongs to Debian's python.
PY_PIL=/usr/bin/python3
$PY_PIL -c 'import PIL' || { fail "python3-pil is not installed (make deps installs it)"; exit 1; }

# browse SVG W H PNG DOM LOG: screenshot and DOM dump of SVG at W x H.
browse() {
	local svg=$1 w=$2 h=$3
	local flags=(--headless=new --no-sandbox --disable-gpu --hide-scrollbars
		--user-data-dir="$TMP/chrome" --enable-logging=stderr --v=0)
	timeout 90 chromium "${flags[@]}" --window-size="$w,$h" --screenshot="$4" "file://$svg" \
		>/dev/null 2>"$6.shot" &&
	timeout 90 chromium "${flags[@]}" --dump-dom "file://$svg" >"$5" 2>"$6"
}
size_of() { # size_of SVG: "W H" of the root element
	jcheck 'import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot(); print(int(float(r.get("width"))), int(float(r.get("height"))))' "$1"
}

# --- the flame graph ---
if ! MALLOC_CONF=prof:true,prof_final:false "$FIX/prof_c" "$TMP/c.heap" >/dev/null; then
	fail "prof_c could not write a heap dump"; exit 1
fi
"$MA" aggregate "$TMP/c.heap" --svg "$TMP/flame.svg" >/dev/null
check "aggregate --svg wrote the flame graph" test -s "$TMP/flame.svg"
read -r fw fh < <(size_of "$TMP/flame.svg")
browse "$TMP/flame.svg" "$fw" "$fh" "$TMP/flame.png" "$TMP/flame.dom" "$TMP/flame.log"
check "flame: chromium took a screenshot" test -s "$TMP/flame.png"
check "flame: the DOM has the title" grep -q 'heap in use: [^ ]*/c.heap (' "$TMP/flame.dom"
check "flame: the DOM has the two biggest sites" \
	test "$(grep -c 'data-n="site_\(calloc\|small_64\)"' "$TMP/flame.dom")" -eq 2
check "flame: no script error in the console" test "$(grep -c 'CONSOLE' "$TMP/flame.log")" -eq 0
check "flame: every frame wider than 20 px is painted in its colour over its area" \
	$PY_PIL - "$TMP/flame.svg" "$TMP/flame.png" <<'PY'
import re, sys
from collections import Counter
from PIL import Image
svg = open(sys.argv[1]).read()
img = Image.open(sys.argv[2]).convert("RGB")
px = Counter(img.getdata())
want = Counter()
for w, h, r, g, b in re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)" height="(\d+)" rx="2" '
                                r'fill="rgb\((\d+),(\d+),(\d+)\)"', svg):
    if float(w) >= 20:
        want[(int(r), int(g), int(b))] += float(w) * int(h)
assert len(want) >= 5, want
for c, area in want.items():
    # text and rounded corners cover part of a frame; the colour must cover half
    assert px[c] >= 0.5 * area, (c, px[c], area)
blank = px.most_common(1)[0][1] / (img.width * img.height)
assert blank < 0.9, blank
PY
# The zoom the script offers: clicking site_calloc widens it to the full width.
jcheck - "$TMP/flame.svg" "$TMP/zoom.svg" <<'PY'
import sys
s = open(sys.argv[1]).read()
click = """<script type="text/ecmascript"><![CDATA[
window.addEventListener('load', function () {
 var g = document.querySelector('g[data-n="site_calloc"]'); zoom(g);
 document.documentElement.setAttribute('data-zoomed',
   g.getElementsByTagName('rect')[0].getAttribute('width'));
});]]></script></svg>"""
open(sys.argv[2], "w").write(s.replace("</svg>", click))
PY
browse "$TMP/zoom.svg" "$fw" "$fh" "$TMP/zoom.png" "$TMP/zoom.dom" "$TMP/zoom.log"
zw=$(grep -o 'data-zoomed="[0-9.]*"' "$TMP/zoom.dom" | grep -o '[0-9.]*')
check "flame: a click zooms the frame to the full width ($zw px of $((fw - 20)))" \
	jcheck 'import sys; assert abs(float(sys.argv[1]) - float(sys.argv[2])) < 1' "${zw:-0}" "$((fw - 20))"
check "flame: zooming raised no script error" test "$(grep -c 'CONSOLE' "$TMP/zoom.log")" -eq 0

# --- the watch chart ---
fix_start daemon -t 2 || { fail "daemon: start"; exit 1; }
"$MA" watch "$FIX_PID" --interval 50 --duration 2 --out "$TMP/w" >"$TMP/w.out" 2>"$TMP/w.err"
check "watch wrote chart.svg" test -s "$TMP/w/chart.svg"
read -r cw ch < <(size_of "$TMP/w/chart.svg")
browse "$TMP/w/chart.svg" "$cw" "$ch" "$TMP/chart.png" "$TMP/chart.dom" "$TMP/chart.log"
check "chart: chromium took a screenshot" test -s "$TMP/chart.png"
check "chart: the DOM has the title, the legend and round ticks" \
	grep -q "memattach watch $FIX_PID: [0-9]* samples.*10 MiB.*0.5 s.*RSS.*allocated" \
	<(tr '\n' ' ' <"$TMP/chart.dom")
check "chart: every series' line is drawn where its points are" $PY_PIL - "$TMP/w/chart.svg" "$TMP/chart.png" <<'PY'
import re, sys
from PIL import Image
svg = open(sys.argv[1]).read()
img = Image.open(sys.argv[2]).convert("RGB")
series = re.findall(r'<path class="[^"]*" fill="none" stroke="#([0-9a-f]{6})" [^>]* d="([^"]*)"', svg)
assert len(series) >= 5, series
colours = [
           tuple(int(h[i:i + 2], 16) for i in (0, 2, 4)) for h, _ in series]
def tinted(p, c):
    # anti-aliased lines blend their colour with the white background:
    # p = white + a * (c - white), a >= 0.3
    d = [c[i] - 255 for i in range(3)]
    a = sum((p[i] - 255) * d[i] for i in range(3)) / sum(x * x for x in d)
    off = sum((255 + a * d[i] - p[i]) ** 2 for i in range(3)) ** 0.5
    return a >= 0.3 and off < 25
def near(x, y, cols, mixed=False):
    for dx in range(-2, 3):
        for dy in range(-2, 3):
            p = img.getpixel((min(max(x + dx, 0), img.width - 1), min(max(y + dy, 0), img.height - 1)))
            if any(tinted(p, c) for c in cols) or (mixed and 765 - sum(p) > 150):
                return True
    return False
for k, (h, d) in enumerate(series):
    pts = [(round(float(x)), round(float(y))) for x, y in re.findall(r"[ML]([\d.]+) ([\d.]+)", d)]
    assert len(pts) >= 10, (h, len(pts))
    # lines drawn later may cover this one (blending their colours): drawn
    # ink at each point, far darker than the white background and the grid
    miss = [p for p in pts if not near(*p, colours, mixed=True)]
    assert not miss, (h, miss[:5])
    if k == len(series) - 1:  # drawn last: its own colour at its points
        own = sum(near(*p, [colours[k]]) for p in pts)
        assert own >= 0.9 * len(pts), (h, own, len(pts))
PY
check "daemon: integrity verdict ok" grep -q "VERDICT ok" <(fix_cmd "$FIX_PID" "$FIX_FD" "$FIX_OUT" verdict)
fix_quit "$FIX_PID" "$FIX_FD"
