/* The ibverbs transport: one RC queue pair per peer over rdma-core (InfiniBand or RoCE; tested
 * on the kernel's Soft-RoCE). Reliable and ordered (KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED).
 * This header includes no ibv_ header: callers need not build against rdma-core.
 *
 * Wire: each peer owns `slot_count` receive slots of `slot_bytes` at every other rank, inside
 * the one memory registration over the caller's storage. Message n to a peer uses slot
 * n % slot_count: datagrams up to send_max_bytes go by SEND (inline when they fit the QP's
 * inline size) into the receive buffer posted for that slot, larger ones by RDMA WRITE with
 * immediate straight into the slot. The immediate names the slot and its lap (generation);
 * the receiver checks both against what it expects next, and treats a forged or stale one
 * as a broken peer (never trusted, never delivered). A writer never has more than slot_count
 * messages unconsumed at a peer: the reader returns credits by an RDMA WRITE of its consumed
 * count into the writer's mailbox word, so credits need no receive buffer.
 *
 * Keepalive: a peer that died holding slot_count of our messages leaves nothing outstanding at
 * the NIC (no credit, no post), so the NIC would never notice. Once per ACK timeout (at least
 * 1 ms), a peer that holds messages of ours unconsumed and was posted nothing during that time
 * gets its credit word rewritten (an idempotent RDMA WRITE, no receive consumed): a dead peer's
 * QP then fails with IBV_WC_RETRY_EXC_ERR within keel_verbs_nic_detect_ns of it.
 *
 * Ops (see keel/transport.h):
 * - send_burst takes datagrams in one or two pieces (KEEL_CAP_GATHER). It copies each into a
 *   registered send slot (or inlines it), except a tail lying wholly inside memory the caller
 *   registered with keel_verbs_register or keel_verbs_register_dmabuf: the work request gathers
 *   that tail from where it lies (the NIC reads it; from GPU memory that is GPUDirect RDMA), and
 *   only the header is copied. It chains the
 *   work requests per peer into one ibv_post_send, signals one in sig_interval. It returns the
 *   prefix it accepted: a peer out of credits, send-queue room or send slots ends the burst
 *   (the core offers the rest again). A datagram to a failed peer is accepted and dropped
 *   (the peer falls silent: the failure detector suspects it). -EINVAL when d[0] names a bad
 *   peer or is longer than mtu; on a bad_wr in a chain, the datagrams from it on are not
 *   accepted.
 * - recv_burst polls the completion queue in bursts, validates every receive, copies ready
 *   slots into the caller's buffers in per-peer order, reposts their receives and returns
 *   credits. A QP in error, a failed completion (retry exceeded, flush...) or a QP async event
 *   marks its peer failed: nothing more is delivered from it. Port down or a fatal device
 *   event return KEEL_ETRANSPORT (the transport is down).
 * - wait_fd: the completion channel's fd in KEEL_VERBS_POLL_EVENT mode (re-armed whenever
 *   recv_burst finds the queue empty), -1 in busy mode.
 * - fini destroys QPs, CQ, channel, MR, PD and closes the device; safe after a failed init
 *   and twice.
 *
 * Memory: state, per-peer tables and every slot live in the caller's memory
 * (keel_verbs_storage_size); one MR covers the slot area. ibv_* init calls may allocate
 * inside rdma-core, at init only, and so may keel_verbs_register* (once, at start-up, like
 * init); the regions' table is in the caller's memory too. */
#ifndef KEEL_TRANSPORT_VERBS_H
#define KEEL_TRANSPORT_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most slots per peer: the immediate carries the slot index in 12 bits. */
#define KEEL_VERBS_SLOTS_MAX 4096u
/* keel_verbs_config_default's: receive slots per peer, and the queue pair's local ACK timeout
 * (4.096 us x 2^14, about 67 ms) and retry count (not 7: rxe reads 7 as "retry forever"). */
#define KEEL_VERBS_SLOTS_DEFAULT   32u
#define KEEL_VERBS_TIMEOUT_DEFAULT 14u
#define KEEL_VERBS_RETRY_DEFAULT   6u
/* Longest device name kept. */
#define KEEL_VERBS_DEV_NAME_LEN 64u

enum keel_verbs_poll_mode {
	KEEL_VERBS_POLL_BUSY = 0, /* the caller spins on recv_burst (one core per rank) */
	KEEL_VERBS_POLL_EVENT,	  /* completion channel: wait_fd wakes the caller */
};

struct keel_verbs_config {
	uint32_t rank;
	uint32_t world_size;
	const char *device;	 /* e.g. "mlx5_0", "rxe0"; NULL or "": first device with an
				    active port */
	uint8_t port;		 /* 0: the first active port */
	int gid_index;		 /* -1: automatic (RoCEv2, IPv4-mapped first) */
	uint32_t slot_bytes;	 /* largest datagram; also the transport's mtu (capped at
				    65507, the core's largest) */
	uint32_t slot_count;	 /* slots per peer, a power of two, 2..KEEL_VERBS_SLOTS_MAX */
	uint32_t send_max_bytes; /* datagrams up to this go by SEND, larger by WRITE_WITH_IMM */
	uint32_t inline_bytes;	 /* inline size asked of the QP (the device may give less) */
	uint32_t cq_entries;	 /* 0: sized from world and slots */
	uint8_t timeout;	 /* local ACK timeout: 4.096 us * 2^timeout (1..31) */
	uint8_t retry_cnt;	 /* transport retries before IBV_WC_RETRY_EXC_ERR (0..7; rxe
				    retries forever at 7) */
	uint8_t rnr_retry;	 /* receiver-not-ready retries (7: forever; credits avoid RNR) */
	enum keel_verbs_poll_mode poll_mode;
};

/* Defaults: first active device and port, automatic GID, 64 KiB slots, 32 per peer, SEND up
 * to 1024 bytes, 128 inline bytes, timeout 14 (67 ms) and retry_cnt 6 (not 7: Soft-RoCE treats
 * 7 as infinite), so the NIC gives up on a dead peer after about 7 x 67 ms = 0.47 s at the
 * earliest (IB's exponential backoff can stretch it to seconds), 0.54 s after the last post
 * when a keepalive was needed; keel's heartbeats (miss_limit x heartbeat) should win. Busy
 * poll. */
void keel_verbs_config_default(struct keel_verbs_config *cfg);

/* Bound on the NIC's own detection of a dead peer, in ns: (retry_cnt + 1) x 4.096 us x
 * 2^timeout (the lower bound; hardware may back off beyond it). */
uint64_t keel_verbs_nic_detect_ns(const struct keel_verbs_config *cfg);

/* Caller memory for the transport, slots included; 0 if the config is invalid. */
size_t keel_verbs_storage_size(const struct keel_verbs_config *cfg);

/* Open the device, choose port and GID, allocate the PD, register `mem` once, create the
 * CQ (and completion channel) and one RC QP per peer (in INIT). Peers are connected with
 * keel_verbs_connect after the exchange of keel_verbs_addr records.
 * Errors: -EINVAL (bad config), -ENOSPC (mem too small), -ENODEV (no such device, or no
 * active port), -ENOENT (no usable GID at gid_index), -ENOMEM or the library's -errno from
 * the ibv_* call that failed. On error everything made is released and *out is NULL. */
KEEL_MUST_USE int keel_verbs_init(struct keel_transport **out, void *mem, size_t mem_len,
				  const struct keel_verbs_config *cfg);

/* What a peer needs to reach this rank (exchanged at rendezvous); the QPN per peer travels
 * separately (keel_verbs_local_qpn). Integers in host order. */
struct keel_verbs_addr {
	uint8_t gid[16];
	uint16_t lid;
	uint8_t mtu; /* enum ibv_mtu of the port */
	uint8_t reserved;
	uint32_t rkey;	     /* of the region holding this rank's slots */
	uint64_t base;	     /* address of the slot area for sender 0 */
	uint32_t stride;     /* bytes between two senders' areas */
	uint32_t slot_bytes; /* must equal the peer's */
	uint32_t slot_count; /* must equal the peer's */
};

void keel_verbs_local_addr(struct keel_transport *t, struct keel_verbs_addr *out);

/* The QP number this rank uses towards `peer` (0 for itself or out of range). */
uint32_t keel_verbs_local_qpn(struct keel_transport *t, uint32_t peer);

/* Connect the QP towards `peer` (RTR, then RTS) with its address and its QPN towards us,
 * and post its receives. Errors: -EINVAL (peer out of range or self, slot layout differs,
 * QPN 0, already connected), or the -errno of ibv_modify_qp / ibv_post_recv. */
KEEL_MUST_USE int keel_verbs_connect(struct keel_transport *t, uint32_t peer,
				     const struct keel_verbs_addr *remote, uint32_t remote_qpn);

/* Most regions registered at once (keel_verbs_register*). */
#define KEEL_VERBS_REGIONS_MAX 8u

/* Register caller memory [addr, addr + len) with the NIC, read only, so that datagram tails
 * lying in it are sent from where they lie instead of copied into a send slot (keel's core
 * hands out such tails for payloads that stay put: an AllReduce's input out of place, its
 * final sums, a broadcast's buffer). Host memory: a datagram small enough to inline is
 * copied by the CPU at post (device memory goes through keel_verbs_register_dmabuf, never
 * inlined). Registration pins the pages: do it once, at
 * start, for buffers reused by every collective (the gradient buffer).
 * While registered, the NIC may read those bytes after send_burst returned, until the work
 * request completes: write them only between collectives, as the API asks of any input. After
 * a collective that failed, a send to a peer still being retried may read them for up to
 * keel_verbs_nic_detect_ns; such a datagram belongs to a collective no member uses anymore.
 * Errors: -EINVAL (not a verbs transport, NULL, 0 bytes, overlaps a registered region),
 * -ENOSPC (KEEL_VERBS_REGIONS_MAX already), or the -errno of ibv_reg_mr. */
KEEL_MUST_USE int keel_verbs_register(struct keel_transport *t, const void *addr, size_t len);

/* The same for device memory exported as a dma-buf (GPUDirect RDMA through
 * ibv_reg_dmabuf_mr): `fd` and `offset` as keel_device_cuda_dmabuf gives them for [addr,
 * addr + len), addr being the device address tails name. -EOPNOTSUPP when the NIC's provider
 * or rdma-core cannot register dma-bufs (Soft-RoCE cannot): the caller then stages through
 * host memory, as keel does when nothing is registered. Other errors as keel_verbs_register.
 * keel keeps no reference to fd: the caller may close it once this returned. */
KEEL_MUST_USE int keel_verbs_register_dmabuf(struct keel_transport *t, const void *addr, size_t len,
					     int fd, uint64_t offset);

/* GPUDirect RDMA of what peers send: bytes of device memory, exported as a dma-buf (fd and
 * offset as keel_device_cuda_dmabuf gives them for [addr, addr + len)), where the NIC writes
 * the payloads peers send from their device memory (datagrams with KEEL_DGRAM_DEVICE_TAIL,
 * but not KEEL_DGRAM_HOST_LANDING) instead of into this rank's host slots: each sender gets
 * slot_count slots of slot_bytes at addr + (sender x slot_count + slot) x slot_bytes, so len must
 * be at least keel_verbs_device_area_bytes. Once registered, it is announced to each connected peer
 * (two RDMA WRITEs into its mailbox line; a peer connected later is told at connect); from then on
 * a peer writes such a payload there, and the header, with the payload's length, into the
 * host slot. recv_burst then delivers the header in the caller's buffer, and the payload by
 * pointer: tail and tail_len, with KEEL_DGRAM_DEVICE_TAIL in flags. The payload's slot stays
 * the caller's until it gives it back with the transport's rx_release (its device work done):
 * until then the peer's credits stop there. Registered for the transport's life (fini lets
 * it go). Errors: -EINVAL (not a verbs transport, NULL, fd < 0, too short, addr not aligned
 * to 64), -EEXIST (already registered), -EOPNOTSUPP (the provider cannot register dma-bufs:
 * payloads land in host memory as before), or the -errno of ibv_reg_dmabuf_mr. */
size_t keel_verbs_device_area_bytes(struct keel_transport *t);
KEEL_MUST_USE int keel_verbs_register_device_area(struct keel_transport *t, void *addr, size_t len,
						  int fd, uint64_t offset);

/* Let go of the region registered at addr. -EBUSY while a work request that reads it has not
 * completed on a QP still working (poll the node and retry; a peer that failed holds nothing:
 * its QP is in the error state); -ENOENT when no region starts at addr; -EINVAL when t is not
 * a verbs transport. Regions still registered are let go by fini. */
KEEL_MUST_USE int keel_verbs_unregister(struct keel_transport *t, const void *addr);

/* The device and GID index in use, for logs. */
const char *keel_verbs_device_name(struct keel_transport *t);
int keel_verbs_gid_index(struct keel_transport *t);

/* Whether `peer`'s QP failed (error completion, QP event, forged immediate). */
bool keel_verbs_peer_failed(struct keel_transport *t, uint32_t peer);

struct keel_verbs_stats {
	uint64_t tx_send, tx_send_inline, tx_write_imm, tx_credit_writes, tx_posts;
	uint64_t tx_zero_copy;	    /* datagrams whose tail the NIC read from a registered region */
	uint64_t tx_device_writes;  /* of which GPU to GPU: into the peer's device area */
	uint64_t tx_device_refused; /* device tails (KEEL_DGRAM_DEVICE_TAIL) outside any dma-buf
				     * registration: refused, never copied by the CPU */
	uint64_t tx_keepalive_writes; /* credit words rewritten to a peer holding our messages */
	uint64_t tx_dropped_failed;   /* accepted for a failed peer and dropped */
	uint64_t tx_no_credit;	      /* bursts ended: peer had no free slot */
	uint64_t tx_no_room;	      /* bursts ended: send queue or send slots full */
	uint64_t tx_bad_wr;	      /* ibv_post_send failures (bad_wr reported) */
	uint64_t rx_send, rx_write_imm, rx_delivered, rx_polls, rx_wc;
	uint64_t rx_device;	 /* delivered with the payload in our device area */
	uint64_t rx_released;	 /* of rx_device, given back by rx_release */
	uint64_t rx_bad_release; /* rx_release of a payload not held: the caller's bug */
	uint64_t rx_bad_imm;	 /* forged or stale immediates, out-of-range slots */
	uint64_t rx_bad_len;	 /* receives longer than a slot or than the caller's buffer */
	uint64_t rx_bad_credit;	 /* mailbox values that went backwards or past what was sent */
	uint64_t wc_errors;	 /* completions with a status other than success */
	uint64_t wc_retry_exc;	 /* of which IBV_WC_RETRY_EXC_ERR */
	uint64_t async_events;
	uint64_t peers_failed;
	uint64_t first_fail_ns; /* the caller's now_ns when a peer first failed (0: none yet) */
	uint32_t inline_max;	/* inline bytes the QPs got */
	uint32_t signal_interval;
};
void keel_verbs_stats_get(struct keel_transport *t, struct keel_verbs_stats *out);

#ifdef __cplusplus
}
#endif

#endif
