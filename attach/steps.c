/*
 * steps.c - the step counter behind the every-step kill test (steps.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "steps.h"
#include "testhooks.h"

static unsigned long nsteps;
static unsigned long kill_after; /* 0: never */
static bool configured;
static bool printing;
/* MEMATTACH_TEST_STEPS_CHANGES=1: count only steps that can change the target (no reads). */
static bool changes_only;
/* Named points of a run (ma_step_mark), printed with the step count. */
struct step_mark {
	const char *label;
	unsigned long step;
};
static struct step_mark marks[8];
static unsigned nmarks;
/* MEMATTACH_TEST_STEPS=2: when each step ended (for finding where time goes). */
static bool timing;
static uint64_t step_ns[4096];
static int step_req[4096]; /* the ptrace request, -1 for a memory write, -2 for a reported stop */

static const char *step_name(int req)
{
	switch (req) {
	case -1: return "write";
	case -2: return "wait";
	case PTRACE_GETREGS: return "GETREGS";
	case PTRACE_SETREGS: return "SETREGS";
	case PTRACE_GETFPREGS: return "GETFPREGS";
	case PTRACE_SETFPREGS: return "SETFPREGS";
	case PTRACE_GETREGSET: return "GETREGSET";
	case PTRACE_SETREGSET: return "SETREGSET";
	case PTRACE_SEIZE: return "SEIZE";
	case PTRACE_INTERRUPT: return "INTERRUPT";
	case PTRACE_CONT: return "CONT";
	case PTRACE_SYSCALL: return "SYSCALL";
	case PTRACE_DETACH: return "DETACH";
	case PTRACE_PEEKDATA: return "PEEKDATA";
	case PTRACE_POKEDATA: return "POKEDATA";
	case PTRACE_GETSIGINFO: return "GETSIGINFO";
	case PTRACE_GETSIGMASK: return "GETSIGMASK";
	case PTRACE_SETSIGMASK: return "SETSIGMASK";
	case PTRACE_LISTEN: return "LISTEN";
	case PTRACE_GETEVENTMSG:
	case PTRACE_PEEKSIGINFO:
	case PTRACE_GET_SYSCALL_INFO: return "GETEVENTMSG";
	case PTRACE_SETOPTIONS: return "SETOPTIONS";
	default: return "ptrace";
	}
}

static void print_steps(void)
{
	for (unsigned i = 0; i < nmarks; i++)
		fprintf(stderr, "memattach-test: mark %s=%lu\n", marks[i].label, marks[i].step);
	for (unsigned long i = 1; timing && i < nsteps && i < 4096; i++)
		fprintf(stderr, "memattach-test: step %lu +%.1f us %s\n", i + 1,
			(double)(step_ns[i] - step_ns[i - 1]) / 1e3, step_name(step_req[i]));
	fprintf(stderr, "memattach-test: steps=%lu\n", nsteps);
}

static void configure(void)
{
	const char *k = ma_test_env("KILL_AFTER_STEP");
	const char *p = ma_test_env("STEPS");

	const char *c = ma_test_env("STEPS_CHANGES");

	configured = true;
	changes_only = c && *c == '1';
	if (k && *k)
		kill_after = strtoul(k, NULL, 10);
	timing = p && *p == '2';
	if (p && (*p == '1' || *p == '2')) {
		printing = true;
		atexit(print_steps);
	}
}

void ma_step_mark(const char *label)
{
	const char *pause_at = ma_test_env("PAUSE_AT");

	if (!configured)
		configure();
	/* A label met again (a mark in every call) keeps its latest step: one entry each. */
	unsigned i = 0;

	while (i < nmarks && strcmp(marks[i].label, label) != 0)
		i++;
	if (printing && i < nmarks)
		marks[i].step = nsteps;
	else if (printing && nmarks < sizeof(marks) / sizeof(marks[0]))
		marks[nmarks++] = (struct step_mark){ label, nsteps };
	/*
	 * MEMATTACH_TEST_PAUSE_AT=LABEL: 300 ms there, so that a test's
	 * racing target gets a CPU in that phase however loaded the machine.
	 */
	if (pause_at && strcmp(pause_at, label) == 0)
		usleep(300000);
}

/*
 * A request that only reads the tracee: killing memattach right after it
 * leaves the target as a kill right after the step before it does.
 */
static bool reads_only(int req)
{
	switch (req) {
	case PTRACE_PEEKDATA:
	case PTRACE_GETREGS:
	case PTRACE_GETFPREGS:
	case PTRACE_GETREGSET:
	case PTRACE_GETSIGINFO:
	case PTRACE_GETSIGMASK:
	case PTRACE_GETEVENTMSG:
	case PTRACE_PEEKSIGINFO:
	case PTRACE_GET_SYSCALL_INFO:
		return true;
	default:
		return false;
	}
}

static void count_step(int req)
{
	if (!configured)
		configure();
	if (changes_only && reads_only(req))
		return;
	if (timing && nsteps < 4096) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		step_ns[nsteps] = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
		step_req[nsteps] = req;
	}
	if (++nsteps == kill_after)
		kill(getpid(), SIGKILL);
}

void ma_step(void)
{
	count_step(-1);
}

void ma_step_wait(void)
{
	count_step(-2);
}

long ma_ptrace(int request, pid_t tid, void *addr, void *data)
{
	long r = ptrace((enum __ptrace_request)request, tid, addr, data);
	int e = errno;

	count_step(request);
	errno = e;
	return r;
}
