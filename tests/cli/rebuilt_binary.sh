#!/usr/bin/env bash
# A dump names its files by path, device and inode.  A file at that path
# that is another one now (rebuilt, replaced) would name the dump's
# addresses with the wrong functions: its frames stay unnamed and a
# warning says why, unless the user names the file (--binary,
# --prefix-map).  The committed dump, pointed at a copy of prof_c.
. "$(dirname "$0")/../lib/common.sh"
plan 6
not() { ! "$@"; }
D=$ROOT/fixtures/dumps
cp "$FIX/prof_c" "$TMP/prof_c" || { fail "build/fixtures/prof_c missing (make fixtures)"; exit 1; }
ino=$(stat -c %i "$TMP/prof_c") dev=$(stat -c '%Hd:%Ld' "$TMP/prof_c")
devhex=$(printf '%02x:%02x' "${dev%%:*}" "${dev##*:}")
# point DUMP's prof_c mappings at the copy, with device DEV and inode INO
point() {
	sed -E "s#^([0-9a-f]+-[0-9a-f]+ [rwxps-]{4} [0-9a-f]+) [0-9a-f]+:[0-9a-f]+ +[0-9]+ +/.*/prof_c\$#\\1 $1 $2 $TMP/prof_c#" \
		"$D/prof_c.heap" >"$3"
}
point "$devhex" "$ino" "$TMP/same.heap"
point "$devhex" "$((ino + 1))" "$TMP/other.heap"
check "the dumps point at the copy" grep -q " $ino *$TMP/prof_c\$" "$TMP/same.heap"

"$MA" aggregate "$TMP/same.heap" --top 0 >"$TMP/same.out" 2>"$TMP/same.err"
check "the same file (device and inode as the dump says): no warning about it" \
	not says "'$TMP/prof_c' is not the file" "$TMP/same.err"
check "... and its frames are named" not grep -q "prof_c+0x" "$TMP/same.out"

"$MA" aggregate "$TMP/other.heap" --top 0 >"$TMP/other.out" 2>"$TMP/other.err"
check "another file at that path: the warning names it ($(head -1 "$TMP/other.err" | cut -c1-90))" \
	says "'$TMP/prof_c' is not the file the dump mapped" "$TMP/other.err"
check "... and its frames stay unnamed" grep -q "prof_c+0x" "$TMP/other.out"

"$MA" aggregate "$TMP/other.heap" --top 0 --binary "$TMP/prof_c" >"$TMP/named.out" 2>"$TMP/named.err"
check "named with --binary: used as told, no warning about it" \
	not says "'$TMP/prof_c' is not the file" "$TMP/named.err"
