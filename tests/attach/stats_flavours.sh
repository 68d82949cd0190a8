#!/usr/bin/env bash
# For every fixture flavour, memattach stats --json must report exactly the
# headline values the target reads itself at the same quiet moment (and
# the parts of resident computed from the target's own dirty/muzzy page
# counts), and the target's own integrity verdict must stay ok.
. "$(dirname "$0")/../lib/common.sh"
plan 75

KEYS="allocated active resident mapped retained metadata"

for f in daemon daemon_static daemon_prefixed daemon_cxx daemon_rust; do
	if ! fix_start "$f"; then fail "$f: start"; continue; fi
	pid=$FIX_PID fd=$FIX_FD out=$FIX_OUT
	self=$(fix_cmd "$pid" "$fd" "$out" quiesce)
	echo "$self" >"$TMP/$f.self.json"
	if "$MA" stats "$pid" --json >"$TMP/$f.ma.json" 2>"$TMP/$f.err"; then
		pass "$f: memattach stats exits 0"
	else
		fail "$f: memattach stats failed: $(cat "$TMP/$f.err")"
	fi
	for k in $KEYS; do
		a=$(json_get "$TMP/$f.self.json" "$k" 2>/dev/null)
		b=$(json_get "$TMP/$f.ma.json" "$k" 2>/dev/null)
		if [ -n "$a" ] && [ "$a" = "$b" ]; then
			pass "$f: $k equals the target's own reading ($a)"
		else
			fail "$f: $k: target says '$a', memattach says '$b'"
		fi
	done
	# The decomposition, from the target's own page counts.
	pg=$(json_get "$TMP/$f.self.json" page 2>/dev/null)
	pd=$(json_get "$TMP/$f.self.json" pdirty 2>/dev/null)
	pm=$(json_get "$TMP/$f.self.json" pmuzzy 2>/dev/null)
	res=$(json_get "$TMP/$f.self.json" resident 2>/dev/null)
	act=$(json_get "$TMP/$f.self.json" active 2>/dev/null)
	if [ -n "$pg" ] && [ -n "$pd" ] && [ -n "$pm" ]; then
		for kv in "dirty $((pd * pg))" "muzzy $((pm * pg))" \
			"metadata_resident $((res - act - pd * pg))"; do
			set -- $kv
			b=$(json_get "$TMP/$f.ma.json" "$1" 2>/dev/null)
			check "$f: $1 equals the target's own reading ($2, memattach '$b')" [ "$b" = "$2" ]
		done
	else
		fail "$f: the target could not read its page counts ($(cat "$TMP/$f.self.json"))"
	fi
	rss=$(json_get "$TMP/$f.ma.json" rss 2>/dev/null)
	oj=$(json_get "$TMP/$f.ma.json" outside_jemalloc 2>/dev/null)
	check "$f: outside_jemalloc = rss - resident ($oj)" [ "${oj:-none}" = "$((rss - res))" ]
	sum=0
	for k in allocated slab_waste dirty metadata_resident outside_jemalloc; do
		sum=$((sum + $(json_get "$TMP/$f.ma.json" "$k" 2>/dev/null || echo 0)))
	done
	check "$f: allocated + slab_waste + dirty + metadata_resident + outside_jemalloc = rss ($sum)" \
		[ "$sum" = "$rss" ]
	sym=$(json_get "$TMP/$f.ma.json" symbols 2>/dev/null)
	link=$(json_get "$TMP/$f.ma.json" linkage 2>/dev/null)
	case $f in
	daemon|daemon_cxx) want="unprefixed shared" ;;
	daemon_static) want="unprefixed static" ;;
	daemon_prefixed|daemon_rust) want="_rjem_ static" ;;
	esac
	check "$f: flavour reported as '$want'" [ "$sym $link" = "$want" ]
	fix_cmd "$pid" "$fd" "$out" resume >/dev/null
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	check "$f: target integrity verdict ok ($v)" grep -q '^VERDICT ok' <<<"$v"
	fix_quit "$pid" "$fd"
	check "$f: target exits cleanly" [ $? -eq 0 ]
done
