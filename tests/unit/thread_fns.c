/*
 * Unit test of the libc functions a thread of memattach's own is never
 * made from (jefind.c, target.h thread_fns): those that hold glibc's
 * thread-stack lock.  glibc's pthread_join only jumps to a hidden
 * function that takes that lock and then frees stacks with it held; that
 * function (found through the jump; it ends at the next symbol) must be
 * among them, and so must the setuid() family (its SIGSETXID broadcast
 * holds the lock).  The target is a child of this test: same libc, same
 * addresses.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch.h"
#include "check.h"
#include "ma_error.h"
#include "target.h"

static bool covered(const struct ma_target *t, uint64_t addr)
{
	for (size_t k = 0; k < t->nthread_fns; k++)
		if (addr >= t->thread_fns[k].lo && addr < t->thread_fns[k].hi)
			return true;
	return false;
}

int main(void)
{
	uint64_t join = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "pthread_join");
	uint64_t setgroups_fn = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "setgroups");
	uint64_t to[4];
	size_t n = 0;
	struct ma_target t;
	pid_t child;
	int st;

	/* pthread_join's bytes here are the child's: the first 64 hold its jump. */
	if (join)
		n = ma_arch_jumps_out((const uint8_t *)(uintptr_t)join, 15, join, to, 4);
	CHECK("pthread_join jumps out of itself (a tail call: glibc 2.34 and later)", n >= 1);
	if ((child = fork()) == 0) {
		pause();
		_exit(0);
	}
	memset(&t, 0, sizeof(t));
	if (ma_target_open(&t, child) == 0) {
		ma_target_find_jemalloc(&t); /* no jemalloc here: libc's functions are found first */
		ma_err_clear();
		CHECK("pthread_join is a thread-stack lock holder", covered(&t, join));
		CHECK("the function pthread_join jumps to (hidden) is one too, its body not only its "
		      "entry (64 bytes in: a thread waits there for the joined one)",
		      n >= 1 && covered(&t, to[0]) && covered(&t, to[0] + 64));
		CHECK("setgroups (its SIGSETXID broadcast holds the lock) is one too",
		      setgroups_fn && covered(&t, setgroups_fn));
		CHECK("pthread_self is not", !covered(&t, (uint64_t)(uintptr_t)pthread_self));
		ma_target_release(&t);
	} else {
		CHECK("the child could be opened", false);
	}
	kill(child, SIGKILL);
	waitpid(child, &st, 0);
	CHECK_DONE();
}
