/* The shared-memory transport: ranks on one host exchange datagrams through one region, with a
 * lock-free single-producer/single-consumer ring per (sender, receiver) direction.
 * Ordered, and lossless: caps KEEL_CAP_ORDERED, plus KEEL_CAP_RELIABLE unless cfg.reliable is
 * turned off. Intact (KEEL_CAP_INTACT): every datagram it delivers is marked KEEL_DGRAM_INTACT,
 * and the core sends and accepts them without its CRC32C. A caller that takes lent buffers
 * (KEEL_DGRAM_LEND) gets each record that does not wrap around its ring's end where it lies,
 * without a copy; the sender cannot write over it until the caller's next receive. It takes
 * datagrams in two pieces (KEEL_CAP_GATHER), so the core's payloads go from the caller's buffer
 * straight into the ring. Memory is
 * trusted as the process's own is (Open MPI's shared memory checks nothing either); the region is
 * the job user's alone (mode 0600), and with a job key every datagram still carries and is checked
 * by its MAC.
 *
 * The region: given by the caller (cfg.region, e.g. MAP_SHARED memory mapped before fork), or
 * opened by name (shm_open(cfg.name), created if absent, sized by keel_shm_region_size) and
 * mapped by every rank. Each rank owns its inbound rings: init empties them and bumps their
 * generation, so a restarted rank never reads records meant for its previous life. A sender
 * publishes with a compare-and-swap on (generation, tail): a publish racing a restart fails,
 * and the sender re-attaches to the new generation.
 *
 * Waking: every rank binds a Linux abstract-namespace datagram socket named after cfg.name and
 * its rank (the doorbell); wait_fd is that socket. A receiver that found a ring empty marks it
 * "sleeping"; a sender that publishes into a sleeping ring clears the mark and sends one byte
 * to the receiver's doorbell. Why a socket and not an eventfd or a futex: keel's waiter blocks
 * in ppoll on one descriptor (a futex cannot be polled), and another process cannot open an
 * eventfd without having it passed over a socket at start-up, again after every restart. A
 * doorbell's name survives restarts: the new process binds it again and senders need nothing.
 * A waiter that calls arm_wait before it blocks (keel_boot's does) changes when the marks are
 * set: from the first arm_wait on, recv_burst leaves rings unmarked and takes the marks off
 * after a wake-up, and arm_wait marks every inbound ring and looks at each again, so a spinning
 * receiver costs its senders no doorbell (a syscall each) and finds records through rx_ready, a
 * load per ring (measured: docs/perf-history.md, "shared memory without doorbells while spinning").
 *
 * Start-up order: every rank calls keel_shm_init (maps, resets its own inbound rings, binds its
 * doorbell); then every rank calls keel_shm_attach until it returns 0 (-EAGAIN while a peer has
 * not initialised its rings yet); only then does it send. A restarted rank does the same: its
 * peers are there already. fini unmaps, closes the doorbell, and does not unlink the name
 * (a restarted rank must find the same region): keel_shm_unlink at the end of the job does.
 *
 * Ops (see keel/transport.h): send_burst copies the valid prefix of d into the rings and stops
 * at the first datagram whose ring is full (tx_ring_full; the core retries later), returning
 * how many it took; a KEEL_DGRAM_CONTROL datagram for a full ring is dropped instead
 * (tx_control_dropped), so a stopped receiver never holds back traffic for the others. A ring
 * of at least (window + 2) x (mtu + 8) bytes never refuses reliable data: the core has at most
 * a window of it unacknowledged per peer (keel_boot sizes rings so). send_burst returns
 * -EINVAL when d[0] names a bad peer (itself, out of range) or is longer than mtu, and
 * KEEL_ETRANSPORT after fini. recv_burst takes records from the inbound rings, round-robin, into
 * the caller's buffers; one longer than its buffer's cap is dropped and counted (rx_truncated).
 * Until a caller arms, it leaves every ring it emptied marked sleeping; when it filled the caller's
 * array (records may be left that no doorbell announces) next_deadline_ns says "now" until the next
 * call. A dead peer simply stops producing: the failure detector notices its silence, as over UDP.
 */
#ifndef KEEL_TRANSPORT_SHM_H
#define KEEL_TRANSPORT_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_SHM_NAME_MAX	    64u
#define KEEL_SHM_RING_BYTES_DEFAULT (1u << 20)
#define KEEL_SHM_RING_BYTES_MAX	    (1u << 30)

struct keel_shm_config {
	uint32_t rank;
	uint32_t world_size;
	/* The job's name on this host: "/name" for shm_open, and the doorbells' prefix. The
	 * same for every rank of the job, different for every job (e.g. from the job id). */
	const char *name;
	uint32_t mtu;	     /* largest datagram, KEEL_MTU_MIN..KEEL_MTU_MAX */
	uint32_t ring_bytes; /* per direction: a power of two, >= 2 x (mtu + 8), <= _MAX */
	/* Report KEEL_CAP_RELIABLE (the rings lose nothing). The core keeps its retransmission
	 * timer either way: its own receive path may drop a datagram the rings delivered (data
	 * of a view it has not installed yet, around a restarted rank), and that one must come
	 * again. keel_shm_config_default turns it on; off leaves caps KEEL_CAP_ORDERED. */
	bool reliable;
	/* Copy a run of small datagrams (up to 4 KiB each) for one receiver into the ring in one
	 * piece, gathered first in this rank's private memory (64 KiB more of
	 * keel_shm_storage_size): many small copies into lines the receiver last read stall the
	 * sender on each one (docs/perf-history.md). keel_shm_config_default turns it on. */
	bool stage_runs;
	/* Optional: the region, already shared between the ranks (keel_shm_region_size bytes,
	 * 64-byte aligned, zeroed before the first rank initialises). NULL: map cfg.name. */
	void *region;
	size_t region_len;
};

/* Fill defaults: rank 0 of 1, no name, mtu KEEL_MTU_MAX, KEEL_SHM_RING_BYTES_DEFAULT,
 * reliable on, stage_runs on. */
void keel_shm_config_default(struct keel_shm_config *cfg);

/* Bytes of the shared region for this world and ring size; 0 if the config is invalid. */
size_t keel_shm_region_size(const struct keel_shm_config *cfg);

/* Caller memory for this rank's private state (not the region); 0 if the config is invalid. */
size_t keel_shm_storage_size(const struct keel_shm_config *cfg);

/* Map the region (or use cfg.region), reset this rank's inbound rings, bind the doorbell.
 * Errors: -EINVAL (bad config: world, rank, mtu, ring_bytes not a power of two or too small,
 * a name that is empty, lacks its leading '/' or is too long, a region too small), -ENOSPC
 * (mem NULL or too small), -EADDRINUSE (this rank's doorbell is bound by a live process: the
 * same rank runs twice), -EACCES (the named region belongs to another user, or its group or
 * others may open it: its rings are trusted without CRC or MAC, so only this user may write
 * them), or shm_open/ftruncate/mmap/socket's -errno. On error nothing is left
 * open or mapped and *out is NULL. */
KEEL_MUST_USE int keel_shm_init(struct keel_transport **out, void *mem, size_t mem_len,
				const struct keel_shm_config *cfg);

/* 0 once every peer has initialised its inbound rings (in this or an earlier life), -EAGAIN
 * before (call again later), KEEL_ETRANSPORT after fini. Never blocks. */
KEEL_MUST_USE int keel_shm_attach(struct keel_transport *t);

/* Remove the name (the region lives on while mapped). -errno of shm_unlink, e.g. -ENOENT. */
KEEL_MUST_USE int keel_shm_unlink(const char *name);

struct keel_shm_stats {
	uint64_t rx_datagrams, tx_datagrams;
	uint64_t rx_truncated;	     /* longer than the buffer given: dropped */
	uint64_t rx_bad_records;     /* a record header another process corrupted: ring emptied */
	uint64_t tx_ring_full;	     /* bursts cut short by a full ring */
	uint64_t tx_control_dropped; /* control datagrams for a full ring: dropped */
	uint64_t tx_reattach;	     /* a receiver restarted: its new rings were taken up */
	uint64_t doorbells_sent;     /* wake-ups sent to a sleeping receiver */
	uint64_t doorbells_drained;  /* wake-ups read from this rank's doorbell */
	uint64_t tx_staged_runs;     /* runs of small records copied into a ring in one piece */
};
void keel_shm_stats_get(struct keel_transport *t, struct keel_shm_stats *out);

#ifdef __cplusplus
}
#endif

#endif
