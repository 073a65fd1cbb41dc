/* POSIX glue for the tools: CLOCK_MONOTONIC and a waiter over one fd (busy, adaptive, block).
 * Tools only: this file reads clocks and blocks so that the runtime never has to. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "assert_int.h"
#include "keel/env.h"
#include "keel/posix.h"

uint64_t keel_posix_now_ns(void)
{
	struct timespec ts;
	int rc = clock_gettime(CLOCK_MONOTONIC, &ts);

	KEEL_ASSERT(rc == 0);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void keel_posix_waiter_init(struct keel_posix_waiter *w, int fd, enum keel_wait_mode mode,
			    uint64_t spin_ns)
{
	int type = 0;
	socklen_t len = sizeof(type);

	KEEL_ASSERT(w != NULL);
	KEEL_ASSERT(mode == KEEL_WAIT_BUSY || mode == KEEL_WAIT_ADAPTIVE ||
		    mode == KEEL_WAIT_BLOCK);
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->wake_fd = -1;
	w->mode = mode;
	w->spin_ns = spin_ns;
	/* recv(MSG_PEEK) works on sockets only; pipes and eventfds fall back to ppoll. */
	w->fd_is_socket = fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
}

/* Measured on x86-64 (Linux 6, loopback UDP): clock_gettime 31 ns, recv(MSG_PEEK|MSG_DONTWAIT)
 * 177 ns, ppoll with zero timeout 232 ns. The spin has nothing else to do, so it checks the fd
 * on every iteration with the cheapest call; input is then seen within ~0.2 us. */
/* fd and the others, for ppoll; returns how many. */
static nfds_t pollfds(const struct keel_posix_waiter *w, struct pollfd *p)
{
	p[0] = (struct pollfd){.fd = w->fd, .events = POLLIN};
	for (uint32_t i = 0; i < w->more_count; i++)
		p[1 + i] = (struct pollfd){.fd = w->more_fds[i], .events = POLLIN};
	return 1 + w->more_count;
}

static int fd_readable_now(const struct keel_posix_waiter *w)
{
	if (w->tp != NULL && w->tp->ops->rx_ready != NULL)
		return w->tp->ops->rx_ready(w->tp);
	if (w->fd < 0)
		return 0;
	if (w->fd_is_socket && w->more_count == 0) {
		char byte;
		ssize_t n = recv(w->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);

		/* A pending socket error also counts as input, so the caller polls at once. The
		 * peek clears it (as any recv would): with IP_RECVERR the transport may then miss
		 * one error count, never a datagram. */
		return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
	}
	struct pollfd p[KEEL_POSIX_WAIT_FDS_MAX];
	struct timespec zero = {0, 0};

	return ppoll(p, pollfds(w, p), &zero, NULL) > 0;
}

void keel_posix_waiter_set_transport(struct keel_posix_waiter *w, struct keel_transport *tp)
{
	KEEL_ASSERT(w != NULL);
	KEEL_ASSERT(tp == NULL || tp->ops != NULL);
	w->tp = tp;
	/* A busy waiter never blocks, so it would never arm: arm once, which tells the transport
	 * that its caller arms before any block (a shared-memory receiver then stops asking for
	 * doorbells; the marks this sets come off at the next receive). */
	if (tp != NULL && w->mode == KEEL_WAIT_BUSY && tp->ops->arm_wait != NULL)
		(void)tp->ops->arm_wait(tp);
}

void keel_posix_waiter_set_spin_yield(struct keel_posix_waiter *w, bool yield)
{
	KEEL_ASSERT(w != NULL);
	w->spin_yield = yield;
}

void keel_posix_waiter_set_wake_fd(struct keel_posix_waiter *w, int fd)
{
	KEEL_ASSERT(w != NULL && fd >= -1);
	w->wake_fd = fd;
}

int keel_posix_waiter_add_fd(struct keel_posix_waiter *w, int fd)
{
	KEEL_ASSERT(w != NULL);
	if (fd < 0 || w->fd < 0)
		return -EINVAL;
	if (w->more_count >= KEEL_POSIX_WAIT_FDS_MAX - 1)
		return -ENOSPC;
	w->more_fds[w->more_count++] = fd;
	return 0;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Spin until `until_ns` or input. Returns 1 on input, 0 when the time ran out. The loop is
 * bounded by the clock: each iteration reads it. */
static int spin_until(struct keel_posix_waiter *w, uint64_t until_ns)
{
	for (;;) {
		if (fd_readable_now(w))
			return 1;
		if (keel_posix_now_ns() >= until_ns)
			return 0;
		if (w->spin_yield)
			(void)sched_yield(); /* the peer we wait for may need this CPU */
		else
			cpu_relax();
	}
}

static void block_until(struct keel_posix_waiter *w, uint64_t deadline_ns)
{
	uint64_t now_ns = keel_posix_now_ns();
	uint64_t left_ns;
	struct pollfd p[KEEL_POSIX_WAIT_FDS_MAX + 1];
	nfds_t n = pollfds(w, p);
	struct timespec ts;
	int rc;

	if (now_ns >= deadline_ns)
		return;
	if (w->tp != NULL && w->tp->ops->arm_wait != NULL && !w->tp->ops->arm_wait(w->tp)) {
		w->wakeups_input++; /* input came while arming: the caller polls at once */
		return;
	}
	if (w->wake_fd >= 0) /* blocking only: the spin never checks it */
		p[n++] = (struct pollfd){.fd = w->wake_fd, .events = POLLIN};
	left_ns = deadline_ns - now_ns;
	if (left_ns > KEEL_POSIX_BLOCK_NS_MAX)
		left_ns = KEEL_POSIX_BLOCK_NS_MAX;
	ts.tv_sec = (time_t)(left_ns / 1000000000ull);
	ts.tv_nsec = (long)(left_ns % 1000000000ull);
	w->blocks++;
	/* A negative fd is ignored by ppoll, so fd == -1 is a plain nanosecond sleep. */
	rc = ppoll(p, n, &ts, NULL);
	now_ns = keel_posix_now_ns();
	if (rc > 0) {
		w->wakeups_input++;
		if (w->wake_fd >= 0 && p[n - 1].revents != 0)
			w->wakeups_wake_fd++;
		return;
	}
	if (now_ns < deadline_ns) {
		/* EINTR, or the KEEL_POSIX_BLOCK_NS_MAX cap: returning early is allowed. */
		w->wakeups_early++;
		return;
	}
	if (now_ns > deadline_ns) {
		uint64_t late_ns = now_ns - deadline_ns;

		w->wakeups_late++;
		w->oversleep_ns_sum += late_ns;
		if (late_ns > w->oversleep_ns_max)
			w->oversleep_ns_max = late_ns;
	}
}

static uint64_t waiter_now_ns(void *ctx)
{
	(void)ctx;
	return keel_posix_now_ns();
}

static void waiter_wait(void *ctx, uint64_t deadline_ns)
{
	struct keel_posix_waiter *w = ctx;
	uint64_t now_ns, spin_end_ns;

	KEEL_ASSERT(w != NULL);
	w->waits++;
	/* No descriptor (a busy-polled DPDK port): the waiter cannot see input, only the caller's
	 * next poll can. Busy mode returns at once so the caller polls again; the other modes
	 * sleep to the deadline, which such a transport keeps short (its sleep interval). */
	if (w->fd < 0 && w->mode == KEEL_WAIT_BUSY) {
		w->spins++;
		return;
	}
	if (w->fd < 0 || w->mode == KEEL_WAIT_BLOCK ||
	    (w->mode == KEEL_WAIT_ADAPTIVE && w->spin_ns == 0)) {
		block_until(w, deadline_ns);
		return;
	}
	now_ns = keel_posix_now_ns();
	if (now_ns >= deadline_ns)
		return;
	spin_end_ns = deadline_ns;
	if (w->mode == KEEL_WAIT_ADAPTIVE && w->spin_ns < deadline_ns - now_ns)
		spin_end_ns = now_ns + w->spin_ns;
	if (spin_until(w, spin_end_ns)) {
		w->spins++;
		w->wakeups_input++;
		return;
	}
	if (spin_end_ns >= deadline_ns) {
		w->spins++;
		return;
	}
	block_until(w, deadline_ns);
}

struct keel_waiter keel_posix_waiter_get(struct keel_posix_waiter *w)
{
	struct keel_waiter out = {.now_ns = waiter_now_ns, .wait = waiter_wait, .ctx = w};

	KEEL_ASSERT(w != NULL);
	return out;
}

/* The ranks' share of CPUs: the affinity mask, which containers and taskset narrow, or the
 * launcher's where that is wider. Counting this process's mask alone took 2 ranks bound to one
 * core each for 2 ranks on 1 CPU: they blocked at every wait, 55-65 us per small AllReduce
 * instead of 1.4 (docs/perf-history.md). Falls back to the online count. */
long keel_posix_cpu_count(void)
{
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN), cpus = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		cpus = CPU_COUNT(&set);
	if (sched_getaffinity(getppid(), sizeof(set), &set) == 0 && CPU_COUNT(&set) > cpus)
		cpus = CPU_COUNT(&set);
	if (cpus <= 0)
		return online > 0 ? online : 1;
	return online > 0 && online < cpus ? online : cpus;
}

bool keel_posix_oversubscribed(uint32_t local_ranks)
{
	return (long)local_ranks > keel_posix_cpu_count();
}

int keel_posix_wait_mode_from_env(uint32_t local_ranks, enum keel_wait_mode *mode,
				  uint64_t *spin_ns, char *err, size_t err_len)
{
	unsigned m = KEEL_WAIT_ADAPTIVE;
	uint64_t us = KEEL_POSIX_SPIN_NS_DEFAULT / 1000;

	KEEL_ASSERT(mode != NULL && spin_ns != NULL);
	if (keel_env_enum("KEEL_WAIT", &m, err, err_len) < 0) /* names in enum order */
		return -EINVAL;
	int set = keel_env_uint("KEEL_SPIN_US", &us, err, err_len);
	if (set < 0)
		return -EINVAL;
	uint64_t spin = set == 0 && keel_posix_oversubscribed(local_ranks) ? 0 : us * 1000ull;
	*mode = (enum keel_wait_mode)m;
	*spin_ns = m == KEEL_WAIT_BUSY ? UINT64_MAX : m == KEEL_WAIT_BLOCK ? 0 : spin;
	return 0;
}

const char *keel_posix_wait_mode_name(enum keel_wait_mode mode)
{
	switch (mode) {
	case KEEL_WAIT_BUSY:
		return "busy";
	case KEEL_WAIT_ADAPTIVE:
		return "adaptive";
	case KEEL_WAIT_BLOCK:
		return "block";
	}
	return "?";
}

void keel_posix_timer_slack_min(void)
{
	(void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

int keel_posix_realtime(int priority)
{
	struct sched_param sp = {.sched_priority = priority};
	if (priority < 1 || priority > 99)
		return -EINVAL;
	return sched_setscheduler(0, SCHED_RR, &sp) == 0 ? 0 : -errno;
}
