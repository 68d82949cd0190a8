/*
 * nicekeeper.h - puts a held thread's nice value back should memattach
 * die before the stub can (attach/nicekeeper.c).
 *
 * A thread memattach interrupts must first get a CPU to reach its stop;
 * on a busy machine that wait, at the thread's own priority, was most of
 * the longest holds.  Raising its nice before the stop has no stub yet to
 * put it back should memattach be killed there.  So a small process of
 * memattach's (forked once per run, in a session of its own, named
 * ma-nice-keeper) keeps the one record "thread T of process P, started at
 * S, had nice N, is raised": when memattach's end of their socket closes
 * (memattach exited or was killed) with a record still armed, it puts
 * the nice back if that same thread still has the raised value, then
 * exits.  A record is written (one atomic message) before the raise and
 * cleared after memattach put the nice back itself.
 */
#ifndef MA_NICEKEEPER_H
#define MA_NICEKEEPER_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * Start the keeper if it is not running (root only), at the start of a
 * live run: forked before memattach's buffers exist, it shares (copy on
 * write) only the few pages of that moment, so the hold's writes fault
 * on none.  False if there is none.
 */
bool ma_nice_keeper_start(void);
/* Is it running (started by this run)? */
bool ma_nice_keeper_ready(void);
/*
 * Arm the record for TID of PID (started at START_TICKS, its stat's field
 * 22), whose nice was SAVED and is to be RAISED; false: not armed.
 */
bool ma_nice_keeper_arm(pid_t pid, pid_t tid, long long start_ticks, int saved, int raised);
/* memattach put the nice back itself. */
void ma_nice_keeper_disarm(void);
/*
 * Put thread TID of PID back to nice SAVED after a raise to RAISED, unless
 * its nice was changed meanwhile in a way its program could have made
 * itself: a value at or above SAVED (lowering a thread's priority is
 * always allowed), or below it within the program's RLIMIT_NICE or with
 * its CAP_SYS_NICE.  A lower value the program may not set (its own
 * setpriority succeeded only because the thread stood at RAISED) goes
 * back to SAVED.  Returns false if TID is gone.
 */
bool ma_nice_put_back(pid_t pid, pid_t tid, int saved, int raised);

#endif
