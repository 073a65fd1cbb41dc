/* The transport vtable: how the core moves framed datagrams without knowing the backend.
 * The core includes no backend header; backends (udp, shm, chaos, router, dpdk, verbs, sim) fill
 * this table.
 * No op ever blocks, allocates after init, or reads a clock: time arrives as now_ns. */
#ifndef KEEL_TRANSPORT_H
#define KEEL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a backend promises. The core adds what is missing (retransmission, ordering). */
enum keel_transport_caps {
	KEEL_CAP_RELIABLE = 1u << 0, /* no loss, no duplicates (the core still resends what its
				      * own receive path dropped) */
	KEEL_CAP_ORDERED = 1u << 1,  /* per-peer FIFO */
	KEEL_CAP_RDMA_WRITE = 1u << 2,
	KEEL_CAP_INTACT = 1u << 3, /* bytes arrive exactly as sent, through memory that only
				    * the job's user can write and no wire (shared memory): the
				    * core leaves out its CRC32C, and in a job with a key its
				    * MAC, on this transport's datagrams, and the backend marks
				    * each one it delivers KEEL_DGRAM_INTACT */
	KEEL_CAP_GATHER = 1u << 4, /* send_burst takes a datagram in two pieces (tail below):
				    * the core then sends payloads that stay put from where they
				    * lie, without copying them into its window first */
};

/* What the core tells a backend about a datagram it sends, so a backend never parses keel's
 * wire header: control traffic may jump ahead of bulk data, and a copy sent again stands for
 * one lost (backends that watch loss count it). */
enum keel_datagram_flags {
	KEEL_DGRAM_CONTROL = 1u << 0,	 /* heartbeat, ack, leave or view: small and urgent */
	KEEL_DGRAM_RETRANSMIT = 1u << 1, /* a reliable datagram sent again after a loss */
	/* recv: it came through memory that nothing but the job's ranks writes (shared
	 * memory), so the core accepts it without a CRC. The caller sets flags to 0 or
	 * KEEL_DGRAM_LEND before each recv_burst; only a backend that delivers through such
	 * memory sets this (a router passes on what its routes set).
	 * send: the core wrote it without a CRC (or MAC) because the way to the peer had
	 * KEEL_CAP_INTACT. A layer that would now put it on a way without that cap (a router
	 * that just fell back to a wire) refuses it as it would for a full way: it comes back
	 * from the core with its CRC. Backends ignore it. */
	KEEL_DGRAM_INTACT = 1u << 2,
	/* recv only, set by the caller: it takes lent buffers. A backend may then point buf into
	 * its own memory instead of copying the datagram (a shared-memory ring; cap is then not
	 * used). Those bytes stay unchanged until the caller's next recv_burst, rx_ready or
	 * arm_wait on the transport, which gives them back; the caller must be done with them
	 * by then. */
	KEEL_DGRAM_LEND = 1u << 3,
	/* send: the tail lies in device memory (GPUDirect RDMA), which nothing on the host may
	 * read: only a backend whose device_tail_ok said yes for it takes it, and its NIC reads
	 * it. A layer that would put it anywhere else (a router that fell back from verbs)
	 * refuses it as it would for a full way: the core then has the device copy it to the
	 * host and sends it whole, with its CRC. Set by the core only.
	 * recv: the payload was written into this rank's device memory by the NIC (a verbs
	 * device area, keel_verbs_register_device_area): buf/len hold the header alone, and
	 * tail/tail_len point at the payload there, which nothing on the host may read; the
	 * caller hands it back with rx_release. */
	KEEL_DGRAM_DEVICE_TAIL = 1u << 4,
	/* recv: the link checked every byte of it end to end (an RC queue pair's ICRC), so a
	 * datagram whose CRC covers its header alone (its payload came from the sender's device
	 * memory) is accepted, in a job without a key. Set by a backend whose device_tail_ok
	 * can say yes; a layer that may change bytes on the way (chaos) clears it. */
	KEEL_DGRAM_LINK_CHECKED = 1u << 5,
	/* send, with KEEL_DGRAM_DEVICE_TAIL: the NIC reads the payload from device memory but
	 * writes it into the receiver's host memory, not into a device area the receiver
	 * announced. The receiver may have to hold it for a while (an AllReduce in place: the
	 * next step's data can come before the receiver may write that region), and only a
	 * datagram in host memory can wait in its receive window. Set by the core only. */
	KEEL_DGRAM_HOST_LANDING = 1u << 6,
};

/* One datagram in a burst.
 * send: buf/len are the bytes to send to rank `peer`, followed by tail/tail_len (NULL and 0
 *       unless the way to the peer has KEEL_CAP_GATHER: the datagram is then buf[0..len)
 *       and tail[0..tail_len), len + tail_len bytes in all); flags say what they are (enum
 *       keel_datagram_flags); cap is ignored.
 * recv: the caller gives buf/cap, and flags 0 or KEEL_DGRAM_LEND; the backend sets len, the
 *       sender's rank in peer, and KEEL_DGRAM_INTACT in flags where it applies (it may leave
 *       flags as they were otherwise), and may point buf elsewhere (KEEL_DGRAM_LEND); with
 *       KEEL_DGRAM_DEVICE_TAIL, tail/tail_len too. */
struct keel_datagram {
	uint8_t *buf;
	uint32_t len;
	uint32_t cap;
	uint32_t peer;
	uint32_t flags;
	const uint8_t *tail; /* send; recv: set only with KEEL_DGRAM_DEVICE_TAIL */
	uint32_t tail_len;
};

struct keel_transport;

struct keel_transport_ops {
	const char *name;
	/* Hand up to `count` datagrams to the network. Never blocks.
	 * Returns how many were accepted, in order (0..count), or a negative error
	 * (-EINVAL for a bad peer, KEEL_ETRANSPORT for a fatal backend error).
	 * Buffers stay the caller's: the backend has copied or sent them on return (one
	 * exception: a tail inside memory the program registered with a backend for that, such
	 * as keel_verbs_register, may be read by the NIC until its work completes).
	 * A datagram not accepted was not sent; the caller may retry it later. */
	int (*send_burst)(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
			  uint32_t count);
	/* Receive up to `count_max` datagrams into the caller's buffers. Never blocks.
	 * Returns how many were filled (0 when nothing is waiting) or a negative error.
	 * A datagram longer than its buffer's cap is dropped and counted by the backend,
	 * or, where the backend cannot tell, delivered truncated (the wire check drops it). */
	int (*recv_burst)(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			  uint32_t count_max);
	/* Earliest time the backend needs to be called again even if nothing arrives
	 * (a delayed datagram to release), or UINT64_MAX. May be NULL. */
	uint64_t (*next_deadline_ns)(struct keel_transport *t);
	/* A file descriptor that becomes readable when recv_burst has work, or -1 when the
	 * backend can only be polled. Used by the caller's wait loop. May be NULL. */
	int (*wait_fd)(struct keel_transport *t);
	/* Release OS resources (sockets, ports). Safe after a failed init and twice. May be NULL.
	 */
	void (*fini)(struct keel_transport *t);
	/* false once the backend knows it can no longer reach `peer` (a verbs QP in error, a
	 * DPDK port down): the router (keel/transport_router.h) then sends that peer's traffic
	 * on another transport. Cheap and never blocks: called per burst. May be NULL (always
	 * true). */
	bool (*peer_ok)(struct keel_transport *t, uint32_t peer);
	/* For a spinning waiter: true when recv_burst would find work now. Cheaper than a poll of
	 * wait_fd where the backend can look at memory (shared-memory rings); never blocks. May be
	 * NULL (the waiter then polls wait_fd). */
	bool (*rx_ready)(struct keel_transport *t);
	/* For a waiter about to block on wait_fd: make sure that input arriving from now on makes
	 * wait_fd readable. Returns false when it saw input already waiting (do not block; call
	 * recv_burst); true does not promise there is none (a descriptor may be readable). Never
	 * blocks. A backend with this op may skip that work on every receive (a shared-memory
	 * sender rings no doorbell for a receiver that is spinning), so once a caller has called
	 * it, it must call it before every later block on wait_fd. May be NULL: wait_fd is then
	 * always armed. */
	bool (*arm_wait)(struct keel_transport *t);
	/* The caps of the way datagrams to `peer` go now: a router answers for the route the
	 * peer is on (KEEL_CAP_INTACT and KEEL_CAP_GATHER on shared memory). The core asks it
	 * before it writes a datagram without a CRC or with a tail, and again before each send
	 * of such a datagram, adding the CRC or copying the tail in when the answer changed:
	 * a route that changes between two sends costs nothing but that. Never blocks. May be
	 * NULL: t->caps answers for every peer. */
	uint32_t (*peer_caps)(struct keel_transport *t, uint32_t peer);
	/* May a datagram to `peer` now carry a tail from device memory [addr, addr + len)
	 * (KEEL_DGRAM_DEVICE_TAIL)? Yes only where the NIC reads those bytes itself (they lie in
	 * one dma-buf registration, keel_verbs_register_dmabuf) and the link checks every byte
	 * end to end, since the core, which cannot read them, sends their datagram with a CRC
	 * over its header alone. A router answers for the route the peer is on. Never blocks;
	 * asked per datagram. May be NULL: never. */
	bool (*device_tail_ok)(struct keel_transport *t, uint32_t peer, const void *addr,
			       size_t len);
	/* Give back a payload that recv_burst handed over in device memory (KEEL_DGRAM_DEVICE_TAIL
	 * on a received datagram: tail, from `peer`), once nothing reads it anymore: the device
	 * work that used it finished, or the core dropped it. Until then the slot is the
	 * caller's and the sender's credits stop at it. Never blocks. May be NULL where
	 * recv_burst never hands over device payloads. */
	void (*rx_release)(struct keel_transport *t, uint32_t peer, const void *tail);
};

/* A transport instance. Backends embed or point to their private state;
 * the caller owns the memory (sized by the backend's *_storage_size). */
struct keel_transport {
	const struct keel_transport_ops *ops;
	void *state;
	uint32_t caps; /* enum keel_transport_caps */
	uint32_t mtu;  /* largest datagram (keel header included) the backend carries */
	uint32_t rank; /* this end's rank */
	uint32_t world_size;
};

/* Is d, as handed to send_burst, a whole datagram of at most `mtu` bytes: its pieces given
 * where they have bytes, and the two together within the mtu? What every backend checks
 * before it copies or sends one. */
static inline bool keel_datagram_fits(const struct keel_datagram *d, uint32_t mtu)
{
	return d->tail_len <= mtu && d->len <= mtu - d->tail_len &&
	       (d->buf != NULL || d->len == 0) && (d->tail != NULL || d->tail_len == 0);
}

/* The caps of the way to `peer` now: the transport's peer_caps, else its caps. What the core
 * asks before leaving out a CRC or sending a tail, and what a router or decorator asks of the
 * transport beneath it. */
static inline uint32_t keel_transport_peer_caps(struct keel_transport *t, uint32_t peer)
{
	return t->ops->peer_caps != NULL ? t->ops->peer_caps(t, peer) : t->caps;
}

#ifdef __cplusplus
}
#endif

#endif
