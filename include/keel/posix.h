/* POSIX glue of the start-up library (libkeel_boot.a): the monotonic clock and a keel_waiter
 * that spins, blocks in ppoll, or spins then blocks. The runtime itself never reads a clock or
 * waits: a program gives it these (or its own). */
#ifndef KEEL_POSIX_H
#define KEEL_POSIX_H

#include <stdbool.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/node.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t keel_posix_now_ns(void);

enum keel_wait_mode {
	KEEL_WAIT_BUSY = 0, /* spin until the deadline or input; lowest latency, burns a core */
	KEEL_WAIT_ADAPTIVE, /* spin up to spin_ns, then block in ppoll */
	KEEL_WAIT_BLOCK,    /* block in ppoll at once; best when ranks outnumber cores */
};

/* Default spin of the adaptive mode: long enough to catch a reply on loopback or a fast
 * NIC without a context switch, short enough not to matter when nothing comes. */
#define KEEL_POSIX_SPIN_NS_DEFAULT 50000ull /* whole microseconds: KEEL_SPIN_US */
/* Upper bound on KEEL_SPIN_US (10 s); longer spins are a configuration mistake. */
#define KEEL_POSIX_SPIN_US_MAX 10000000ull
/* One ppoll never blocks longer than this; the waiter may return early, and the caller
 * loops, so an infinite deadline (UINT64_MAX) costs one wakeup per second. */
#define KEEL_POSIX_BLOCK_NS_MAX 1000000000ull

#define KEEL_POSIX_WAIT_FDS_MAX 4u

struct keel_posix_waiter {
	int fd; /* waited for readability; -1 waits for the deadline only */
	/* More descriptors waited on beside fd (keel_posix_waiter_add_fd): a router's routes,
	 * each polled by the kernel directly (measured: waiting on an epoll descriptor over them
	 * instead delayed failover views by ~0.9 ms at the median; docs/perf-history.md). */
	int more_fds[KEEL_POSIX_WAIT_FDS_MAX - 1];
	uint32_t more_count;
	/* Waited for only while blocking (keel_posix_waiter_set_wake_fd), never checked by the
	 * spin: a descriptor its owner services after each wait, such as the /metrics endpoint
	 * (keel/metrics_http.h), costs a spinning wait nothing. -1: none. */
	int wake_fd;
	/* The transport behind fd (keel_posix_waiter_set_transport), or NULL: its rx_ready op
	 * replaces the descriptor checks of the spin, and its arm_wait op runs before each block.
	 */
	struct keel_transport *tp;
	enum keel_wait_mode mode;
	uint64_t spin_ns;	   /* adaptive mode: how long to spin before blocking */
	bool spin_yield;	   /* the spin gives the CPU up each turn (sched_yield) */
	int fd_is_socket;	   /* readability is checked with recv(MSG_PEEK) when set */
	uint64_t waits;		   /* calls to wait */
	uint64_t spins;		   /* waits that ended while spinning (input or deadline) */
	uint64_t blocks;	   /* ppoll calls that were allowed to block */
	uint64_t wakeups_input;	   /* waits ended by input on fd */
	uint64_t wakeups_early;	   /* ppoll returned with no input before the deadline (signal,
				    * timer rounding); the waiter returns early, as allowed */
	uint64_t wakeups_late;	   /* blocking waits that returned after the deadline */
	uint64_t wakeups_wake_fd;  /* blocking waits that found wake_fd readable */
	uint64_t oversleep_ns_max; /* worst lateness of a blocking wait past its deadline */
	uint64_t oversleep_ns_sum; /* total lateness, for an average over wakeups_late */
};

/* Set up `w` for `fd` (not owned: the waiter never closes it; -1 for none).
 * spin_ns is used by KEEL_WAIT_ADAPTIVE only. Counters start at 0. */
void keel_posix_waiter_init(struct keel_posix_waiter *w, int fd, enum keel_wait_mode mode,
			    uint64_t spin_ns);

/* Wait on `fd` too (after keel_posix_waiter_init, which has one). -ENOSPC past
 * KEEL_POSIX_WAIT_FDS_MAX descriptors in all, -EINVAL for a negative fd or a waiter without
 * one. */
KEEL_MUST_USE int keel_posix_waiter_add_fd(struct keel_posix_waiter *w, int fd);

/* End blocking waits when `fd` is readable too (-1: none; not owned). Spins do not check it:
 * a caller that looks at it after every wait sees it by the end of the spin (KEEL_WAIT_ADAPTIVE)
 * or by the wait's deadline (KEEL_WAIT_BUSY, which never blocks). Measured here: one more
 * descriptor in the spin's ppoll costs ~170 ns a check (docs/perf-history.md). */
void keel_posix_waiter_set_wake_fd(struct keel_posix_waiter *w, int fd);

/* Wait for `tp` (not owned; NULL: none), whose wait_fd (or a router's route descriptors) the
 * waiter was given: a spin asks tp's rx_ready, when it has one, instead of polling descriptors
 * (a shared-memory ring is a load, not a syscall), and a block first calls tp's arm_wait, when it
 * has one, returning at once if input is already there (keel/transport.h). A busy waiter, which
 * never blocks, arms tp once here so that tp knows its caller arms before blocking. */
void keel_posix_waiter_set_transport(struct keel_posix_waiter *w, struct keel_transport *tp);

/* Yield the CPU (sched_yield) on every turn of the spin instead of pausing: for ranks that
 * outnumber their host's CPUs, whose spin would otherwise keep the peer it waits for off the
 * CPU. Off after keel_posix_waiter_init. */
void keel_posix_waiter_set_spin_yield(struct keel_posix_waiter *w, bool yield);

/* Do `local_ranks` ranks on this host outnumber the CPUs they share (keel_posix_cpu_count())?
 * The count is the launch's (struct keel_launch.local_world_size: LOCAL_WORLD_SIZE, Open
 * MPI's or Slurm's own variable, or the whole job when none is set). */
bool keel_posix_oversubscribed(uint32_t local_ranks);

/* The keel_waiter view of `w`, for keel_config.waiter. `w` must outlive its use.
 * wait(ctx, deadline_ns) returns when deadline_ns (keel_posix_now_ns time) has passed or the fd
 * is readable, whichever comes first; it may return early (a signal, or after
 * KEEL_POSIX_BLOCK_NS_MAX of blocking). It never reads from the fd. */
struct keel_waiter keel_posix_waiter_get(struct keel_posix_waiter *w);

/* Choose the wait mode from the environment (keel/env.h):
 *   KEEL_WAIT=busy|adaptive|block   (case-sensitive; unset or empty: adaptive)
 *   KEEL_SPIN_US=N                  (spin of the adaptive mode, 0..KEEL_POSIX_SPIN_US_MAX)
 * Without KEEL_SPIN_US the adaptive spin is KEEL_POSIX_SPIN_NS_DEFAULT unless `local_ranks`
 * ranks on this host outnumber its CPUs (keel_posix_oversubscribed), else 0: spinning ranks
 * on shared cores steal each other's time (keel_boot then makes it a short yielding spin).
 * *spin_ns is 0 for block and UINT64_MAX for busy.
 * Errors: -EINVAL for an unknown KEEL_WAIT or a bad KEEL_SPIN_US, with the message in err
 * (outputs are then untouched). */
KEEL_MUST_USE int keel_posix_wait_mode_from_env(uint32_t local_ranks, enum keel_wait_mode *mode,
						uint64_t *spin_ns, char *err, size_t err_len);

/* "busy", "adaptive" or "block" ("?" for anything else). */
const char *keel_posix_wait_mode_name(enum keel_wait_mode mode);

/* Ask for 1 ns timer slack (prctl PR_SET_TIMERSLACK) so the kernel does not defer sub-ms
 * ppoll timeouts by its default 50 us. Best effort: failure changes nothing else. */
void keel_posix_timer_slack_min(void);

/* Put this process in the SCHED_RR real-time class at `priority` (1..99): when a rank shares
 * its cores with other busy work, a heartbeat due now is sent now, not after the other work's
 * time slice. Ranks sleep between events, so this costs the other work little; a rank that
 * computes for long at this class can delay others on its core. Returns 0 or -errno (-EPERM
 * without CAP_SYS_NICE). */
KEEL_MUST_USE int keel_posix_realtime(int priority);

/* CPUs this host's ranks share: this process's affinity mask, or its parent's (the launcher:
 * keel-run, orted, slurmstepd) where that is wider, at most the online count; at least 1. A
 * launcher that binds each rank to its own cores (mpirun --bind-to core, srun --cpu-bind)
 * narrows each rank's mask, not the share of them all; a container's cpuset narrows both. */
long keel_posix_cpu_count(void);

#ifdef __cplusplus
}
#endif

#endif
