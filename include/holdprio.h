/*
 * holdprio.h - memattach's own scheduling while it holds a thread.
 *
 * From a thread's stop to its release, every moment memattach waits for a
 * CPU is a moment the target's thread is held.  On a busy machine (CPU
 * hogs of other users) that was hundreds of ms.  So for the hold only,
 * memattach's thread runs SCHED_FIFO at priority 1 (the lowest real-time
 * one: it still yields to every other real-time thread), or where that is
 * not permitted at the lowest nice value RLIMIT_NICE allows; the previous
 * policy is put back at once after.  Nothing of the target's is changed.
 * The hold is mostly waits (memattach sleeps while the target runs the
 * call), so the real-time time used is the hold's own CPU work.
 */
#ifndef MA_HOLDPRIO_H
#define MA_HOLDPRIO_H

/* Raise this thread's priority for a hold (no-op when raised already). */
/* For the whole run: nice -10 (or the lowest permitted above it), never real-time. */
void ma_run_priority_raise(void);
void ma_hold_priority_raise(void);
/* Put back the policy and nice value from before the raise (no-op if not raised). */
void ma_hold_priority_drop(void);
/* What the last raise obtained: "SCHED_FIFO 1", "nice -20", or "unchanged". */
const char *ma_hold_priority_got(void);

#endif
