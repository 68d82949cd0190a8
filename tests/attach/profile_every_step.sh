#!/usr/bin/env bash
# frag_every_step.sh for `memattach profile`: the same agent keeping a heap
# profile, memattach SIGKILLed after each step in turn of profile start
# (loading the agent, then with it loaded), of heap-dump reading the
# profile, and of profile stop.  The steps before the agent's call (seizing
# and stopping a thread) are the same as frag's, swept densely there: here
# each of the first HEAD, MID between and each of the last TAIL.
HEAD=${HEAD:-8} MID=${MID:-8} TAIL=${TAIL:-48} AGENT_CMD=profile \
	exec bash "$(dirname "$0")/frag_every_step.sh" "$@"
