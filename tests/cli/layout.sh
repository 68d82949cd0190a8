#!/usr/bin/env bash
# Only the project's fixed entries are tracked at the top level:
# Makefile, README.md, attach/, analysis/, include/, tests/, fixtures/,
# .ci/ (and .gitignore).  A stray file (an strace log, say) fails here.
. "$(dirname "$0")/../lib/common.sh"
plan 1
allowed=" Makefile README.md attach analysis include tests fixtures .ci .gitignore "
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	stray=$(git -C "$ROOT" ls-files | cut -d/ -f1 | sort -u | while read -r e; do
		[[ $allowed == *" $e "* ]] || printf '%s ' "$e"
	done)
	check "only the project's entries are tracked at the top level (stray: ${stray:-none})" [ -z "$stray" ]
else
	fail "layout: $ROOT is not a git work tree"
fi
