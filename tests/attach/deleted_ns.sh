#!/usr/bin/env bash
# Targets whose binary memattach cannot open by path: one whose executable
# (with static jemalloc inside) was deleted after start, and one running
# from a private tmpfs in another mount namespace.  The ELF is read through
# /proc/PID/map_files; stats must still equal the target's own readings.
. "$(dirname "$0")/../lib/common.sh"
plan 16

compare() { # compare NAME PID FD OUT
	local name=$1 pid=$2 fd=$3 out=$4 self k a b
	self=$(fix_cmd "$pid" "$fd" "$out" quiesce)
	echo "$self" >"$TMP/$name.self.json"
	if "$MA" stats "$pid" --json >"$TMP/$name.ma.json" 2>"$TMP/$name.err"; then
		pass "$name: stats exits 0"
	else
		fail "$name: stats failed: $(cat "$TMP/$name.err")"
	fi
	for k in allocated active resident metadata; do
		a=$(json_get "$TMP/$name.self.json" "$k" 2>/dev/null)
		b=$(json_get "$TMP/$name.ma.json" "$k" 2>/dev/null)
		check "$name: $k equals the target's reading ($a)" [ -n "$a" -a "$a" = "$b" ]
	done
	fix_cmd "$pid" "$fd" "$out" resume >/dev/null
	v=$(fix_cmd "$pid" "$fd" "$out" verdict)
	check "$name: target verdict ok ($v)" grep -q '^VERDICT ok' <<<"$v"
}

# 1. executable deleted after start
cp "$FIX/daemon_static" "$TMP/doomed"
mkdir -p "$TMP/d" && mkfifo "$TMP/d/in"
"$TMP/doomed" -t 2 <"$TMP/d/in" >"$TMP/d/out" 2>&1 & pid=$!; track $pid
exec {fd}>"$TMP/d/in"
for _ in $(seq 50); do grep -q READY "$TMP/d/out" && break; sleep 0.1; done
rm -f "$TMP/doomed"
check "deleted: /proc/PID/exe shows the binary as deleted" grep -q deleted <<<"$(readlink /proc/$pid/exe)"
compare deleted "$pid" "$fd" "$TMP/d/out"
echo quit >&"$fd"; wait "$pid"
check "deleted: exits cleanly" [ $? -eq 0 ]

# 2. another mount namespace, binary on a tmpfs only that namespace sees
if unshare -m true 2>/dev/null; then
	mkdir -p "$TMP/ns" "$TMP/nsmnt" && mkfifo "$TMP/ns/in"
	unshare -m bash -c 'mount -t tmpfs none "$1" && cp "$2" "$1/hidden" && exec "$1/hidden" -t 2' \
		_ "$TMP/nsmnt" "$FIX/daemon_static" <"$TMP/ns/in" >"$TMP/ns/out" 2>&1 & pid=$!; track $pid
	exec {fd}>"$TMP/ns/in"
	for _ in $(seq 50); do grep -q READY "$TMP/ns/out" && break; sleep 0.1; done
	check "namespace: the binary is not visible from here" [ ! -e "$TMP/nsmnt/hidden" ]
	compare namespace "$pid" "$fd" "$TMP/ns/out"
	echo quit >&"$fd"; wait "$pid"
	check "namespace: exits cleanly" [ $? -eq 0 ]
else
	skip "namespace: unshare -m is not permitted here"
fi
