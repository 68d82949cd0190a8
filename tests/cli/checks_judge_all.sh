#!/usr/bin/env bash
# A check judges all of its condition.  `check NAME [ a ] && [ b ]` runs
# `check NAME [ a ]` and then `[ b ]` on its own: the check passes on the
# first test alone, and the second is judged by no one.  Every statement
# of the test scripts that starts with `check` (continuation lines joined)
# must keep && and || inside a quoted eval or a function.  The lint's own
# sensitivity: it must find such a statement in a sample.
. "$(dirname "$0")/../lib/common.sh"
plan 2
lint() { # FILES...: each statement found, as FILE:LINE
	python3 - "$@" <<'PY'
import re, sys
def scan(text):
    """TEXT without its quoted parts and comments (shell rules, roughly),
    and the quote still open at its end (None if none)."""
    out, q, i = [], None, 0
    while i < len(text):
        c = text[i]
        if q is None:
            if c == "\\":
                i += 1
            elif c in "'\"":
                q = c
            elif c == "#" and (i == 0 or text[i - 1] in " \t\n"):
                while i < len(text) and text[i] != "\n":
                    i += 1
                continue
            else:
                out.append(c)
        elif q == "'":
            if c == "'":
                q = None
        elif c == "\\":
            i += 1
        elif c == '"':
            q = None
        i += 1
    return "".join(out), q

for path in sys.argv[1:]:
    lines = open(path, encoding="utf-8").read().split("\n")
    i, heredoc = 0, None
    while i < len(lines):
        start = i
        stmt = lines[i]
        i += 1
        if heredoc is not None:
            if stmt.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*'?\"?(\w+)", stmt)
        if m:
            heredoc = m.group(1)
        while i < len(lines) and (stmt.endswith("\\") or scan(stmt)[1]):
            stmt = (stmt[:-1] if stmt.endswith("\\") and not scan(stmt)[1] else stmt + "\n") + lines[i]
            i += 1
        if re.match(r"\s*check\s", stmt) and re.search(r"&&|\|\|", scan(stmt)[0]):
            print(f"{path}:{start + 1}")
PY
}
cat >"$TMP/sample.sh" <<'SAMPLE'
check "two tests" [ "$a" -eq 1 ] && [ "$b" -eq 2 ]
check "one eval" eval '[ "$a" -eq 1 ] && [ "$b" -eq 2 ]'
SAMPLE
found=$(lint "$TMP/sample.sh")
check "the lint finds a check whose && escapes it, and only that one ($found)" \
	[ "$found" = "$TMP/sample.sh:1" ]
bad=$(lint "$ROOT"/tests/*/*.sh | tr '\n' ' ')
check "every check in tests/ judges all of its condition (${bad:-none escape})" [ -z "$bad" ]
