# tests/bench/peers.sh - sourced by the benchmarks: which debugger can call
# functions in a process on this machine.  gdb 13 cannot on CPUs with AMX:
# its extended-state buffer is shorter than the kernel's, writing it back
# fails ("Couldn't write extended state status: Bad address") and the
# interrupted syscall's restart is lost (a sleep then fails with errno 516).
# lldb 14 can.  Asked of a scratch process, never of a benchmark's target.

# gdb_can_call: 0 if gdb calls a function correctly here; else prints why
gdb_can_call() {
	local p out
	sleep 1000 &
	p=$!
	out=$(gdb -p "$p" -batch -nx -ex 'print (int)getpid()' 2>&1)
	kill "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	grep -q "= $p\$" <<<"$out" && return 0
	grep -m1 -i "couldn't\|cannot\|error" <<<"$out" || echo "gdb printed no result"
	return 1
}
