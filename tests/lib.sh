# tests/lib.sh - helpers for shell tests.  Source it; report each check with
# pass/fail/skip.  tests/run.sh counts the PASS/FAIL/SKIP lines.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MA="$ROOT/build/memattach"
FIX="$ROOT/build/fixtures"
TMP=$(mktemp -d /tmp/matest.XXXXXX)
_children=()
cleanup_tmp() {
	for p in "${_children[@]}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup_tmp EXIT

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
skip() { echo "SKIP $*"; }
# check NAME CMD...: pass if CMD succeeds.
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n"; fi; }
# Register a background pid to be killed at exit.
track() { _children+=("$1"); }
