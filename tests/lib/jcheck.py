#!/usr/bin/env python3
"""jcheck CODE [ARG...]: the shell tests' one JSON checker (common.sh's
`jcheck`).  Runs CODE (or, for "-", the standard input: a here-document),
a Python snippet, with sys.argv[1:] = ARG... as
`python3 -c` would, json, sys, re and os imported, and load(PATH) reading
a JSON document.  A check passes when CODE runs to the end (or calls
sys.exit with 0/None); a failed assert, an exception or sys.exit(non-zero)
fails it, with one "# jcheck: ..." line on stderr saying why (the assertion's
message, or the exception) instead of a traceback.
"""
import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: jcheck CODE [ARG...]")
    code = sys.stdin.read() if sys.argv[1] == "-" else sys.argv[1]
    sys.argv = ["jcheck"] + sys.argv[2:]
    env = {"json": json, "sys": sys, "re": re, "os": os, "load": load, "__name__": "__jcheck__"}
    try:
        exec(compile(code, "<jcheck>", "exec"), env)
    except SystemExit:
        raise
    except AssertionError as e:
        print("# jcheck: assertion failed%s" % (": %s" % e if str(e) else ""), file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # a missing key or file is a failed check, said in one line
        print("# jcheck: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)


main()
