/*
 * steps.h - every action that changes the target goes through here.
 *
 * A "step" is one ptrace request, one write into target memory, or one
 * stop reported by the kernel (what memattach does between two
 * requests depends on it).  Counting
 * them lets the tests kill memattach right after each step in turn
 * (MEMATTACH_TEST_KILL_AFTER_STEP=K) and prove that no instant of a run is
 * one where memattach's death harms the target.  MEMATTACH_TEST_STEPS=1
 * prints "memattach-test: steps=N" on stderr at exit, after a line
 * "memattach-test: mark LABEL=K" for each point named by ma_step_mark (K:
 * the steps done when it was reached), so a test can aim at one phase.
 * MEMATTACH_TEST_STEPS_CHANGES=1 counts (and kills after) only the steps
 * that can change the target: not the requests that only read it, after
 * which a kill leaves the target as a kill after the previous step does.
 * MEMATTACH_TEST_PAUSE_AT=LABEL waits 300 ms at that mark (a test's race).
 * All of it only in the test build (build/memattach-test).
 */
#ifndef MA_STEPS_H
#define MA_STEPS_H

#include <sys/ptrace.h>
#include <sys/types.h>

/* ptrace(2), counted as one step. */
long ma_ptrace(int request, pid_t tid, void *addr, void *data);
/* Count one step that was not a ptrace request (a memory write). */
void ma_step(void);
/* A stop of the thread, reported by the kernel (waitid/waitpid): a step too. */
void ma_step_wait(void);
/* Name this point of the run for MEMATTACH_TEST_STEPS=1 (LABEL: a literal). */
void ma_step_mark(const char *label);

#endif
