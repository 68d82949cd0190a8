#!/usr/bin/env bash
# tests/attach/concurrent.sh - runs on one process take turns: 4 loops of
# 50 mixed commands (stats, bins, bins --flush-tcache, purge, heap-dump,
# stats-dump) run at once against one prof-enabled daemon while a watch
# samples it every 50 ms.  Not one run may fail (a collision shows as
# "already traced" or "not permitted"), the watch must take allocator
# stats throughout, and the daemon's own integrity verdict must stay ok.
. "$(dirname "$0")/../lib/common.sh"
plan 6
LOOPS=${LOOPS:-4} RUNS=${RUNS:-50}

MALLOC_CONF=prof:true,prof_active:true,prof_final:false fix_start daemon ||
	{ fail "daemon start"; exit 1; }
pid=$FIX_PID
"$MA" watch "$pid" --interval 50 --out "$TMP/w" >"$TMP/w.out" 2>"$TMP/w.err" &
WPID=$!; track $WPID

loop() {
	local k=$1 i cmd
	for i in $(seq "$RUNS"); do
		case $(((i + k) % 6)) in
		0) cmd=(stats "$pid" --json) ;;
		1) cmd=(bins "$pid" --json) ;;
		2) cmd=(bins "$pid" --flush-tcache --json) ;;
		3) cmd=(purge "$pid" --json) ;;
		4) cmd=(heap-dump "$pid" -o "$TMP/h.$k.heap") ;;
		5) cmd=(stats-dump "$pid" -o "$TMP/s.$k.json") ;;
		esac
		if "$MA" "${cmd[@]}" --timeout 20000 >/dev/null 2>"$TMP/err.$k.$i"; then
			echo ok
		else
			echo "fail ${cmd[0]}: $(head -c 300 "$TMP/err.$k.$i")"
		fi
	done >"$TMP/loop.$k"
}
lpids=()
for k in $(seq "$LOOPS"); do loop "$k" & lpids+=($!); done
wait "${lpids[@]}"
total=$(cat "$TMP"/loop.* | wc -l)
ok=$(cat "$TMP"/loop.* | grep -c '^ok$')
check "$ok of $((LOOPS * RUNS)) concurrent runs succeeded ($total ran)" [ "$ok" -eq $((LOOPS * RUNS)) ]
grep -h '^fail' "$TMP"/loop.* | sort | uniq -c | head -5 | sed 's/^/# /'
for f in "$TMP"/err.*; do [ -s "$f" ] && grep -q . "$f" && ! grep -q '^wrote' "$f" && sed 's/^/# err: /' "$f" | head -12; done
kill -INT $WPID; wait $WPID; rc=$?
check "the watch ran throughout and stopped cleanly (exit $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || sed 's/^/# watch: /' "$TMP/w.err" | head -12
rows=$(($(wc -l <"$TMP/w/series.csv") - 1))
nostats=$(awk -F, 'NR > 1 && $4 == ""' "$TMP/w/series.csv" | wc -l)
check "the watch sampled with allocator stats ($rows samples, $nostats without)" \
	[ "$rows" -ge 5 -a "$nostats" -lt "$rows" ]
check "the watch reported no failed sample" test "$(grep -c 'sample at' "$TMP/w.err")" = 0
v=$(fix_cmd "$pid" "$FIX_FD" "$FIX_OUT" verdict)
check "daemon verdict ok after $((LOOPS * RUNS)) concurrent runs ($v)" grep -q '^VERDICT ok' <<<"$v"
fix_quit "$pid" "$FIX_FD"
check "daemon exits cleanly" [ $? -eq 0 ]
