# bash completion for memattach: commands, each command's options (read
# from its --help, so they never drift), PIDs of the processes that hold a
# jemalloc (memattach ps --pids) where a PID goes, files where a file goes.
# Installed by 'make install' to share/bash-completion/completions/memattach;
# from a checkout: source attach/memattach.bash

_memattach_pids() {
	"$1" ps --pids 2>/dev/null
}

_memattach() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local ma=${COMP_WORDS[0]} cmd=${COMP_WORDS[1]} i npos=0
	COMPREPLY=()
	[[ $ma == */* ]] || ma=$(command -v "$ma") || return 0

	if ((COMP_CWORD == 1)); then
		COMPREPLY=($(compgen -W "$("$ma" --help 2>/dev/null |
			sed -n '/^commands:/,/^$/{/^  [a-z]/s/^  \([a-z-]*\).*/\1/p}') --help" -- "$cur"))
		return 0
	fi
	case $prev in
	--pid)
		COMPREPLY=($(compgen -W "$(_memattach_pids "$ma")" -- "$cur"))
		return 0 ;;
	--tid)
		for ((i = 2; i < COMP_CWORD; i++)); do
			if [[ ${COMP_WORDS[i]} =~ ^[0-9]+$ && -d /proc/${COMP_WORDS[i]}/task ]]; then
				COMPREPLY=($(compgen -W "$(ls /proc/"${COMP_WORDS[i]}"/task)" -- "$cur"))
				break
			fi
		done
		return 0 ;;
	-o | --out)
		if [[ $cmd == snapshot || $cmd == watch ]]; then
			COMPREPLY=($(compgen -d -- "$cur"))
		else
			COMPREPLY=($(compgen -f -- "$cur"))
		fi
		return 0 ;;
	--svg | --pprof | --stats | --binary | --binary-a | --binary-b)
		COMPREPLY=($(compgen -f -- "$cur"))
		return 0 ;;
	--timeout | --top | -n | --interval | --duration | --listen | --match | --skip | \
	--prefix-map | --shift | --focus | --format)
		if [[ $prev == --format ]]; then
			# export --once also writes the Prometheus text format
			[[ $cmd == export ]] && COMPREPLY=($(compgen -W "openmetrics prometheus" -- "$cur")) ||
				COMPREPLY=($(compgen -W "openmetrics" -- "$cur"))
		fi
		return 0 ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$({ "$ma" "$cmd" --help 2>/dev/null |
			grep -o -- '--[a-z][a-z-]*'; echo --help; } | sort -u)" -- "$cur"))
		return 0
	fi
	# Which positional argument is this?  (Options with a value skip it.)
	for ((i = 2; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		-o | --out | --svg | --pprof | --stats | --binary | --binary-a | --binary-b | --pid | \
		--tid | --timeout | --top | -n | --interval | --duration | --listen | --match | \
		--skip | --prefix-map | --shift | --focus | --format | --max-samples | --from) ((i++)) ;;
		-*) ;;
		*) ((npos++)) ;;
		esac
	done
	case $cmd in
	stats | threads | bins | purge | heap-dump | stats-dump | watch | snapshot)
		((npos == 0)) && COMPREPLY=($(compgen -W "$(_memattach_pids "$ma")" -- "$cur")) ;;
	frag)
		if ((npos == 0)); then
			COMPREPLY=($(compgen -W "start report status stop" -- "$cur"))
		elif ((npos == 1)); then
			COMPREPLY=($(compgen -W "$(_memattach_pids "$ma")" -- "$cur"))
		fi ;;
	aggregate | diff)
		COMPREPLY=($(compgen -f -- "$cur")) ;;
	stacks)
		((npos == 0)) && COMPREPLY=($(compgen -f -- "$cur")) ;;
	esac
	return 0
}
complete -o filenames -F _memattach memattach
