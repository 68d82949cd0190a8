#!/usr/bin/env bash
# The example outputs of README.md and attach/cli/README.md are made by
# `make docs` (tests/make_docs.py) from real runs: every block that shows a
# memattach command carries an example marker naming the recipe that makes
# it, every marker names a recipe, every recipe is used.  (A block written
# by hand would go stale with the next change of output.)
. "$(dirname "$0")/../lib/common.sh"
cd "$ROOT" || exit 1
plan "$(cat README.md attach/cli/README.md | grep -c '^<!-- example [a-z0-9_]* -->$')"
python3 tests/make_docs.py --check
