#!/usr/bin/env bash
# frag_every_step.sh on daemon_static, whose jemalloc is linked in: frag
# writes inline detours into its entry points (the agent's trampoline
# area, the trampolines, the start, the jumps written while the workers
# run; stop takes them back).  memattach is killed after each of the last
# TAIL steps of every command (the agent's calls and what follows them),
# and after HEAD + MID of the steps before (seizing and stopping a thread,
# the same as on the shared daemon, which frag_every_step.sh sweeps densely).
HEAD=${HEAD:-4} MID=${MID:-4} TAIL=${TAIL:-48} FRAG_FIXTURE=daemon_static \
	exec bash "$(dirname "$0")/frag_every_step.sh" "$@"
