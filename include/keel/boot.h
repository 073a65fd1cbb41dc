/* The start-up library (libkeel_boot.a; pkg-config keel): start a node the way launchers start
 * processes. Rank and world from the launcher's environment (torchrun, Slurm, Open MPI,
 * keel-run or KEEL_PEERS: keel/launch.h), the transport the job asks for (KEEL_TRANSPORT=udp,
 * or dpdk / verbs when the program links those backends: pkg-config keel-dpdk, keel-verbs),
 * the rendezvous, the optional chaos decorator, the node itself and a POSIX waiter
 * (keel/posix.h). Unlike the runtime, this library allocates (once, at start), reads the clock
 * and blocks during the rendezvous, which is bounded by KEEL_RENDEZVOUS_TIMEOUT_MS.
 *
 *   struct keel_boot b;
 *   char err[256];
 *   if (keel_boot_start(&b, NULL, NULL, err, sizeof(err)) != 0) { puts(err); exit(1); }
 *   ... keel_allreduce_start(b.node, ...) then keel_boot_wait(&b, op, ...) ...
 *   keel_boot_stop(&b, 1000000000);   // linger up to 1 s for the last acks, then leave
 */
#ifndef KEEL_BOOT_H
#define KEEL_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "keel/env.h"
#include "keel/keel.h"
#include "keel/launch.h"
#include "keel/posix.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit status of a tool whose rank was left out of the job's view (KEEL_EEXCLUDED: it was
 * paused or cut off longer than the failure detector allows) and chose to leave rather than
 * rejoin: keel-run does not count it as a failure, and with --restart starts it again. */
#define KEEL_EXIT_EXCLUDED 75 /* EX_TEMPFAIL (sysexits.h): out for now, may come back */

/* How long the start waits for every rank (KEEL_RENDEZVOUS_TIMEOUT_MS): the rendezvous, and
 * the shared-memory, DPDK and verbs set-up after it. 30 s covers ranks a launcher starts a
 * few seconds apart on a loaded host, and still ends a job whose rank never came. */
#define KEEL_RENDEZVOUS_TIMEOUT_MS_DEFAULT 30000u

struct boot_trace;

struct keel_boot {
	struct keel_launch launch;
	struct keel_config cfg;
	struct keel_transport *udp, *chaos, *tp;
	struct keel_transport *shm;    /* this host's ranks (KEEL_TRANSPORT=auto or shm) */
	struct keel_transport *router; /* auto, with ranks on this host: shm first, then UDP */
	struct keel_node *node;
	struct keel_posix_waiter waiter;
	void *mem_udp, *mem_chaos, *mem_node, *mem_shm, *mem_router;
	size_t mem_node_len;
	/* After a UDP rendezvous (auto, udp, shm; NULL with dpdk and verbs): each rank's host
	 * (keel_launch.host_id) as the host's number, its lowest rank (world_size entries). */
	uint32_t *host_of;
	uint16_t host_port;    /* the UDP port of this host's first rank: names its region */
	uint16_t offers;       /* what this rank set up for its host's ranks (rendezvous.h) */
	uint16_t *peer_offers; /* each rank's, from the rendezvous (world_size entries) */
	/* cfg.mtu was chosen (KEEL_MTU, or the tool's tweak), not taken from the link: the
	 * rendezvous refuses a job where another rank cannot take datagrams that large */
	bool mtu_set;
	/* the window and burst keel_boot chose for cfg.mtu, which cfg keeps unless KEEL_WINDOW,
	 * KEEL_BURST or the tweak chose others (0: not over UDP) */
	uint32_t datagram_window, datagram_burst;
	/* The link's packet (UDP bytes) where datagrams longer go as pieces (KEEL_UDP_PIECES;
	 * keel_udp_config.piece_bytes); 0 when they are not cut */
	uint32_t piece_bytes;
	struct boot_trace *trace; /* KEEL_TRACE file and NVTX ranges; NULL when neither */
	/* KEEL_METRICS_ADDR: this rank's /metrics server, served from its waits (NULL when off) */
	struct keel_boot_metrics *metrics;
};

/* Start a rank. The KEEL_* environment variables (each optional: keel/env.h, whose one table
 * `keel-run --help-env` prints, docs/reference/env.md) set the node's config, the transport
 * (KEEL_TRANSPORT=auto, the default: shared memory to the ranks on this host and UDP to the
 * others, through the router of keel/transport_router.h, which falls back to UDP for a peer
 * whose shared memory fails), the rendezvous, chaos, the waiter, the trace (KEEL_TRACE, set
 * only when the program left cfg.on_event NULL) and /metrics (KEEL_METRICS_ADDR: served from
 * the same waits as the transport, without a thread; keel/metrics_http.h). Every variable of
 * the table is checked first: a bad value fails the start with its message (keel_env_check).
 * With a job key (KEEL_JOB_KEY_FILE or KEEL_JOB_KEY: keel/launch.h) the rendezvous proves it
 * and cfg.auth is set with it, so every datagram is authenticated (docs/guide/security.md); without
 * one, a job of more than one rank prints one line on stderr (once per process) saying so.
 * cfg.job_id is the launch's, as the rendezvous settled it (rank 0 picks one when no
 * KEEL_JOB_ID is given).
 * `tweak`, if not NULL, adjusts the config after the environment. Without any launcher
 * variables the tool runs as a single rank. Returns 0, or a negative error with a message
 * in err naming what was wrong. */
/* The shared-memory region and doorbell name of the ranks on one host, "/keel-JOB-PORT-FIRST"
 * (job id, the UDP port of the host's lowest rank, that rank: no two running jobs on a host
 * share it). The ranks remove it once all have mapped it, except with KEEL_PEERS (a restarted
 * rank must find it): keel-run removes it when the job ends (keel_shm_unlink). Under
 * KEEL_TRANSPORT=auto a region that cannot be made (e.g. a stale one of another size under the
 * same name) is said on stderr, and UDP carries all traffic. */
void keel_boot_shm_name(uint32_t job_id, uint16_t port, uint32_t first_rank, char *name,
			size_t name_len);

KEEL_MUST_USE int keel_boot_start(struct keel_boot *b,
				  void (*tweak)(struct keel_config *cfg, void *ctx), void *ctx,
				  char *err, size_t err_len);

/* Poll until `deadline_ns` (keel_posix_now_ns time), waiting with the waiter in between.
 * Returns keel_poll's error, if any. */
KEEL_MUST_USE int keel_boot_run_until(struct keel_boot *b, uint64_t deadline_ns);

/* Poll and wait until `op` ends; then like keel_op_test_info (info/members may be NULL). */
KEEL_MUST_USE int keel_boot_wait(struct keel_boot *b, struct keel_op *op, struct keel_op_info *info,
				 uint32_t *members, uint32_t members_cap);

/* One keel_poll now, without waiting: for loops that compute for a while between collectives
 * (a rank must poll at least every heartbeat interval, or its peers will suspect it). */
KEEL_MUST_USE int keel_boot_poll(struct keel_boot *b);

/* A loop of its own that calls keel_poll directly calls this once per pass: /metrics
 * (KEEL_METRICS_ADDR) is served from the waits, and a rank whose collectives end without
 * waiting (small results are reported at once) would otherwise answer no scrape. Costs a
 * counter; keel_boot_wait, keel_boot_poll and the blocking collectives do it themselves. */
void keel_boot_serve(struct keel_boot *b);

/* The ranks this node could join have all finished: at least one said it left (keel_leave)
 * and no other is alive. A restarted or excluded rank waiting for admission stops there. */
bool keel_boot_others_left(const struct keel_boot *b);

/* For a rank that is not a member yet (restarted with KEEL_REJOIN=1, or told KEEL_EEXCLUDED):
 * poll until a view admits it. Returns 0 once it is a member; KEEL_EENDED when the job is over
 * (every other rank left, or this process never heard any rank within max(1 s, 20 heartbeat
 * intervals): a restarted rank that comes after the end hears nobody); -ETIMEDOUT after
 * timeout_ns; or keel_poll's error. Live members answer a join within a few heartbeats; a rank
 * that heard members before (excluded while cut off) keeps trying until timeout_ns. */
KEEL_MUST_USE int keel_boot_wait_member(struct keel_boot *b, uint64_t timeout_ns);

/* Record an event of the program's own (KEEL_EV_CKPT_WRITE, KEEL_EV_CKPT_RESTORE) in the
 * trace, beside the node's: written to the KEEL_TRACE file and marked for NVTX when those are
 * on, else nothing. A checkpoint write's time also goes to keel_checkpoint_write_seconds
 * (keel_metrics_observe). t_ns is keel_posix_now_ns time. */
void keel_boot_note(struct keel_boot *b, const struct keel_event *ev);

/* Register a buffer that collectives read, reused by every one of them (a training loop's
 * gradient buffer, or the stage of keel_allreduce_device), so the network reads its bytes
 * where they lie instead of keel copying them. Under KEEL_TRANSPORT=verbs the NIC reads them
 * (keel_verbs_register: host memory; device memory: keel_boot_register_dmabuf); the other
 * transports copy anyway, and this returns 0 without doing anything. Register once, after
 * keel_boot_start; write the buffer only between collectives; unregister before freeing it.
 * Errors: -EINVAL (NULL, 0 bytes, overlaps a registered buffer), -ENOSPC (more than
 * KEEL_VERBS_REGIONS_MAX), or the NIC driver's -errno. */
KEEL_MUST_USE int keel_boot_register(struct keel_boot *b, const void *addr, size_t len);

/* The same for device memory exported as a dma-buf (keel_device_cuda_dmabuf gives fd and
 * offset): GPUDirect RDMA through ibv_reg_dmabuf_mr. Register the buffers of
 * keel_allreduce_device and the NIC reads what keel sends from device memory instead of keel
 * staging it (keel/device.h). -EOPNOTSUPP when the transport is not verbs, or the NIC's provider
 * cannot register dma-bufs (Soft-RoCE cannot): the device AllReduce then stages, as without it. */
KEEL_MUST_USE int keel_boot_register_dmabuf(struct keel_boot *b, const void *addr, size_t len,
					    int fd, uint64_t offset);

/* GPUDirect RDMA of what peers send: device memory (a dma-buf, as for
 * keel_boot_register_dmabuf) of at least keel_boot_device_area_bytes, where the NIC writes the
 * payloads peers send from their device memory, so the device reduces them there (keel/device.h,
 * keel_verbs_register_device_area). Register once, after keel_boot_start, on every rank that
 * runs keel_allreduce_device (a rank that registers one must run device AllReduces only:
 * a peer's device payload reaching an AllReduce on host buffers ends it with KEEL_EMISMATCH).
 * It stays registered until keel_boot_stop; free it after that. The area bytes are 0, and
 * registering gives -EOPNOTSUPP, when the transport is not verbs; -EOPNOTSUPP too when the NIC's
 * provider cannot register dma-bufs (Soft-RoCE cannot), or when the node's device can neither
 * order nor flush a NIC's writes into its memory (keel/device.h nic_writes_visible; CUDA:
 * keel_device_cuda_gdr_writes): payloads then land in host memory as before. -EINVAL (NULL, 0
 * bytes, fd < 0, shorter than the area bytes, not aligned to 64), -EEXIST (registered already), or
 * the NIC driver's -errno. */
size_t keel_boot_device_area_bytes(const struct keel_boot *b);
KEEL_MUST_USE int keel_boot_register_device_area(struct keel_boot *b, void *addr, size_t len,
						 int fd, uint64_t offset);

/* Let go of a buffer registered at addr: 0 (also when nothing was registered because the
 * transport copies), -EBUSY while the NIC may still read it (poll and retry), -ENOENT when
 * verbs has no buffer registered at addr. */
KEEL_MUST_USE int keel_boot_unregister(struct keel_boot *b, const void *addr);

/* Keep polling until everything this node sent is acknowledged (at most `linger_ns`), then
 * release everything. */
void keel_boot_stop(struct keel_boot *b, uint64_t linger_ns);

#ifdef __cplusplus
}
#endif

#endif
