/*
 * steps.h - every action that changes the target goes through here.
 *
 * A "step" is one ptrace request or one write into target memory.  Counting
 * them lets the tests kill memattach right after each step in turn
 * (MEMATTACH_TEST_KILL_AFTER_STEP=K) and prove that no instant of a run is
 * one where memattach's death harms the target.  MEMATTACH_TEST_STEPS=1
 * prints "memattach-test: steps=N" on stderr at exit.
 */
#ifndef MA_STEPS_H
#define MA_STEPS_H

#include <sys/ptrace.h>
#include <sys/types.h>

/* ptrace(2), counted as one step. */
long ma_ptrace(int request, pid_t tid, void *addr, void *data);
/* Count one step that was not a ptrace request (a memory write). */
void ma_step(void);

#endif
