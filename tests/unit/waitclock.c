/*
 * Unit test: when did a thread's epoll_wait begin (ma_read_thread_info's
 * wait_began_ns)?  memattach gives an interrupted wait what remained of
 * its timeout from that figure, so it must never be earlier than the real
 * beginning: a wait would then end early.  The scheduler's clock is one
 * per CPU and they drift apart (60 ms on a 2-CPU VM here), so the waiter
 * and the reader are put on every pair of CPUs, the same and different.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "safepoint.h"

struct waiter {
	int cpu;
	int epfd, wake; /* the set holds only WAKE, written when the test is done */
	pid_t tid;
	volatile uint64_t began_ns; /* CLOCK_MONOTONIC right before its epoll_wait */
	volatile int ready;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int pin(int cpu)
{
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return sched_setaffinity(0, sizeof(one), &one);
}

static void *wait_once(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev;

	pin(w->cpu);
	w->tid = (pid_t)syscall(SYS_gettid);
	w->began_ns = mono_ns();
	w->ready = 1;
	while (epoll_wait(w->epfd, &ev, 1, 3000) < 0 && errno == EINTR)
		;
	return NULL;
}

/* The waiter on WCPU, read from RCPU once it has waited 200 ms. */
static void one_pair(int wcpu, int rcpu)
{
	struct waiter w = { .cpu = wcpu, .epfd = epoll_create1(EPOLL_CLOEXEC),
			    .wake = eventfd(0, EFD_CLOEXEC) };
	struct epoll_event ev = { .events = EPOLLIN };
	uint64_t one = 1;
	struct ma_thread_info ti;
	struct timespec pause = { 0, 200000000 };
	pthread_t th;
	char name[160];
	uint64_t read_at;

	pin(rcpu);
	if (w.epfd < 0 || w.wake < 0 || epoll_ctl(w.epfd, EPOLL_CTL_ADD, w.wake, &ev) != 0 ||
	    pthread_create(&th, NULL, wait_once, &w) != 0) {
		CHECK("waiter started", 0);
		return;
	}
	while (!w.ready)
		sched_yield();
	nanosleep(&pause, NULL);
	ma_read_thread_info(getpid(), w.tid, &ti);
	read_at = mono_ns();
	snprintf(name, sizeof(name),
		 "waiter on CPU %d read from CPU %d: seen in a timed epoll_wait (syscall %ld, "
		 "timed %d)", wcpu, rcpu, ti.syscall, ti.timed_wait);
	CHECK(name, ti.timed_wait && ti.state == 'S');
	snprintf(name, sizeof(name),
		 "waiter on CPU %d read from CPU %d: wait began %.3f ms after the waiter's own "
		 "reading, never before it, and before now", wcpu, rcpu,
		 ((double)ti.wait_began_ns - (double)w.began_ns) / 1e6);
	CHECK(name, ti.wait_began_ns >= w.began_ns && ti.wait_began_ns <= read_at);
	snprintf(name, sizeof(name), "waiter on CPU %d read from CPU %d: idle %.3f ms, switches %llu",
		 wcpu, rcpu, ti.idle_ns / 1e6, (unsigned long long)ti.nvcsw);
	CHECK(name, ti.idle_ns > 0 && ti.nvcsw > 0);
	snprintf(name, sizeof(name), "reader back on CPU %d after reading", rcpu);
	CHECK(name, sched_getcpu() == rcpu);
	if (write(w.wake, &one, sizeof(one)) != sizeof(one))
		CHECK("wake the waiter", 0);
	pthread_join(th, NULL);
	close(w.wake);
	close(w.epfd);
}

int main(void)
{
	cpu_set_t all;
	int cpus[2], n = 0;

	sched_getaffinity(0, sizeof(all), &all);
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &all))
			cpus[n++] = c;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			one_pair(cpus[i], cpus[j]);
	sched_setaffinity(0, sizeof(all), &all);
	CHECK_DONE();
}
