#!/usr/bin/env bash
# frag_churn.sh on fragchurn_static (jemalloc linked in, inline detours):
# start/report/stop cycles while threads are born and end without pause
# (each allocating through a detoured entry point as it starts and ends),
# then a library loaded after start whose allocations reach the program's
# exported, detoured malloc.
FRAG_SUFFIX=_static exec bash "$(dirname "$0")/frag_churn.sh" "$@"
