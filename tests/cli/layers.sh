#!/usr/bin/env bash
# The layering rules (tests/check_layers.py, `make check-layers`): the real
# build keeps them, and the checker fails a build that breaks each rule
# (objects made here: analysis calling the core, the core calling the
# commands, two core modules calling each other).
. "$(dirname "$0")/../lib/common.sh"
plan 5
CHECK="$ROOT/tests/check_layers.py"

out=$(python3 "$CHECK" "$ROOT/build" 2>&1); rc=$?
check "the build keeps the layers: $(tail -1 <<<"$out")" [ "$rc" -eq 0 ]

# obj DIR/PATH.o 'C source': one object of the synthetic build.
obj() {
	mkdir -p "$(dirname "$TMP/b/$1")"
	printf '%s\n' "$2" >"$TMP/src.c"
	cc -c -o "$TMP/b/$1" "$TMP/src.c"
}
obj analysis/sum.o 'int ma_core_read(void); int ma_sum(void) { return ma_core_read(); }'
obj attach/reader.o 'int ma_cli_print(void); int ma_core_read(void) { return ma_cli_print(); }'
obj attach/cli/out.o 'int ma_cli_print(void) { return 1; }'
obj attach/ping.o 'int ma_pong(void); int ma_ping(void) { return ma_pong(); }'
obj attach/pong.o 'int ma_ping(void); int ma_pong(void) { return ma_ping(); }'
out=$(python3 "$CHECK" "$TMP/b" 2>&1); rc=$?
check "a broken build fails the check (exit $rc)" [ "$rc" -eq 1 ]
check "analysis calling the core is named" grep -q 'analysis calls core: analysis/sum.o uses ma_core_read' <<<"$out"
check "the core calling the commands is named" grep -q 'core calls cli: attach/reader.o uses ma_cli_print' <<<"$out"
check "a cycle is named with its calls" grep -q 'a cycle of 2 modules: attach/ping -> attach/pong (ma_pong)' <<<"$out"
