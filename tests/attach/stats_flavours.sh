#!/usr/bin/env bash
# For every fixture flavour, memattach stats --json must report exactly the
# headline values the target reads itself at the same quiet moment, and
# the target's own integrity verdict must stay ok.
. "$(dirname "$0")/../lib.sh"

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
