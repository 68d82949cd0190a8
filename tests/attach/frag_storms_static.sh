#!/usr/bin/env bash
# frag_storms.sh on the builds of its targets with jemalloc linked in
# (forkloop_static, fragchurn_static, storm_static, execd_static): frag
# writes and takes back inline detours while the target forks (children
# copy the code at any instant), loads and unloads a library that
# allocates through the program's exported malloc, takes a signal storm,
# or execs itself.
CYCLES=${CYCLES:-10} FRAG_SUFFIX=_static exec bash "$(dirname "$0")/frag_storms.sh" "$@"
