#!/usr/bin/env bash
# tests/cli/fuzz_smoke.sh - the libFuzzer target of the heap-dump parser is
# built by 'make test' (so it cannot rot) and runs a fixed number of inputs
# mutated from the committed dumps under ASan and UBSan: no crash, no leak,
# no undefined behaviour.  Longer runs: see the Makefile's fuzz target.
. "$(dirname "$0")/../lib/common.sh"
plan 2

F=$ROOT/build/fuzz/heapprof
[ -x "$F" ] || { fail "build/fuzz/heapprof missing (make test builds it)"; exit 0; }
mkdir -p "$TMP/corpus"
"$F" -runs=5000 -seed=1 -max_len=8192 "$TMP/corpus" "$ROOT/fixtures/dumps" >"$TMP/fuzz.log" 2>&1
rc=$?
check "5,000 mutated dumps through the parser and symbolizer: exit 0 (log: $(grep -m1 -E 'ERROR|Done' "$TMP/fuzz.log"))" \
	test $rc -eq 0
check "... and it ran them all" grep -q "^Done 5000 runs" "$TMP/fuzz.log"
