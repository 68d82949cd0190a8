/*
 * runclock.h - the monotonic clock, and the bound of a whole run.
 *
 * A live command's --timeout bounds the whole run: waiting for another
 * run's turn, finding a safe thread, each stop and each call.  The attach
 * core asks how much of it is left before every wait, so no wait can
 * outlast it (a call cut short is abandoned the safe way: the thread
 * finishes it and restores itself through the stub).
 */
#ifndef MA_RUNCLOCK_H
#define MA_RUNCLOCK_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

uint64_t ma_now_ns(void);
/* The wall clock (CLOCK_REALTIME) in ns since the epoch: when something began, for reports. */
uint64_t ma_unix_ns(void);

/*
 * Set by the SIGINT/SIGTERM handlers (ma_install_signal_guards, remote.h):
 * every wait ends early when set, so the run gives its thread back and ends.
 */
extern volatile sig_atomic_t ma_interrupted;

/* The run ends within MS from now; 0: no bound but each wait's own. */
void ma_run_deadline_set(int ms);
/* WANT_MS, or less when the run's bound comes sooner (0 once it has passed). */
int ma_run_ms_left(int want_ms);
/* The run's bound has passed. */
bool ma_run_deadline_passed(void);

#endif
