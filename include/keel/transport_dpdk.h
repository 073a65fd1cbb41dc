/* The DPDK transport: keel datagrams as Ethernet/IPv4/UDP frames on one port owned by DPDK,
 * one RX/TX queue pair, burst RX/TX, no kernel on the path (on a real NIC). Written against the
 * generic ethdev API, so any poll-mode driver works (mlx5, i40e, ice, net_af_packet, net_memif,
 * net_ring). Unreliable and unordered (caps 0): the core's reliable layer runs on top.
 * This header includes no rte_ header: callers need not build against DPDK's headers.
 *
 * Ops (see keel/transport.h):
 * - send_burst builds each datagram straight into an mbuf (one copy; the caller's buffer is
 *   free on return) and queues it on its peer's bounded queue; control datagrams
 *   (KEEL_DGRAM_CONTROL: heartbeats, acks, leaves, views) go to a separate queue that is
 *   always transmitted first ("jump the queue"). It returns the prefix it accepted: a datagram
 *   whose peer queue is full, or for which no mbuf is left, ends the burst (this short count is
 *   the vtable's -EAGAIN: the core keeps reliable datagrams in its window and offers them
 *   again). Nothing accepted is dropped by keel; -EINVAL when d[0] names a bad peer or is
 *   longer than mtu.
 * - recv_burst first drains the TX queues into the NIC, then receives one rte_eth_rx_burst and
 *   copies each valid frame's UDP payload into the caller's buffers. Frames that are not
 *   IPv4/UDP to this rank's (MAC, IP, port), have bad IPv4 or UDP checksums, are truncated or
 *   come from an unknown (IP, port) are counted (keel_dpdk_stats) and dropped. The payload is
 *   not looked at: the core checks keel's header (magic, job, checksum) and counts its drops.
 * - next_deadline_ns: "now" while TX queues hold frames; in KEEL_DPDK_RX_SLEEP mode, the last
 *   poll time + sleep_ns (so a caller sleeping until the node's deadline polls the port at
 *   least that often); otherwise UINT64_MAX.
 * - wait_fd: the RX queue's interrupt event fd in KEEL_DPDK_RX_INTERRUPT mode when the driver
 *   supports RX interrupts (armed each time recv_burst finds nothing); -1 otherwise.
 * - fini stops and closes the port and frees every queued mbuf; safe after a failed init and
 *   twice. After fini, ops return KEEL_ETRANSPORT. The EAL itself stays up (it cannot be
 *   started twice in a process); keel_dpdk_eal_cleanup releases it at exit.
 *
 * Memory: state, the peer table and the per-peer queues live in the caller's memory
 * (keel_dpdk_storage_size). The mbuf pool and the descriptor rings are DPDK memory, created
 * once by keel_dpdk_init and sized from the config; nothing is allocated afterwards. */
#ifndef KEEL_TRANSPORT_DPDK_H
#define KEEL_TRANSPORT_DPDK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel/errors.h"
#include "keel/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of Ethernet + IPv4 + UDP headers in front of each keel datagram. */
#define KEEL_DPDK_FRAME_OVERHEAD 42u
/* Longest EAL argument string keel_dpdk_eal_init accepts, and most arguments in it. */
#define KEEL_DPDK_EAL_ARGS_LEN 2048u
#define KEEL_DPDK_EAL_ARGC_MAX 64u
/* keel_dpdk_config_default's longest time between two polls in KEEL_DPDK_RX_SLEEP mode. */
#define KEEL_DPDK_SLEEP_NS_DEFAULT 50000ull
/* The start-up library's UDP port for a rank on a DPDK port (KEEL_DPDK_UDP_PORT). */
#define KEEL_DPDK_UDP_PORT_DEFAULT 47100u
/* Loss above which a peer raises the warning counter: 0.1 % (DESIGN.md, "loss alarm"),
 * judged once a peer has at least KEEL_DPDK_LOSS_MIN_SAMPLES first-time data datagrams. */
#define KEEL_DPDK_LOSS_ALARM_PPM   1000u
#define KEEL_DPDK_LOSS_MIN_SAMPLES 1000u

enum keel_dpdk_rx_mode {
	KEEL_DPDK_RX_BUSY = 0,	/* the caller busy-polls (KEEL_WAIT=busy); no fd, no deadline */
	KEEL_DPDK_RX_SLEEP,	/* the caller sleeps at most sleep_ns between polls */
	KEEL_DPDK_RX_INTERRUPT, /* RX interrupt event fd; falls back to SLEEP if unsupported */
};

/* Where a rank's frames go: its port MAC, IPv4 address (network byte order, as in a frame)
 * and UDP port (host order). */
struct keel_dpdk_addr {
	uint8_t mac[6];
	uint16_t udp_port;
	uint8_t ip[4];
};

struct keel_dpdk_config {
	uint32_t rank;
	uint32_t world_size;
	uint16_t port_id;	    /* an ethdev port, see keel_dpdk_port_find */
	struct keel_dpdk_addr self; /* mac is ignored: the port's own MAC is used */
	uint32_t mtu;		    /* largest keel datagram; 0: the port's MTU minus IPv4+UDP */
	uint32_t burst;		    /* frames per rx/tx burst, 1..KEEL_BURST_MAX */
	uint32_t rx_desc, tx_desc;  /* descriptor ring sizes (the driver may round them) */
	uint32_t mbuf_count;	    /* mbufs in the pool: rings + queues + bursts must fit */
	uint32_t peer_queue_max;    /* frames queued per peer when the TX ring is full (pow2) */
	uint32_t ctrl_queue_max;    /* control frames queued ahead of data (power of two) */
	enum keel_dpdk_rx_mode rx_mode;
	uint64_t sleep_ns;     /* RX_SLEEP: longest time between two polls */
	bool verify_udp_cksum; /* verify UDP checksums in software when the port cannot */
};

/* Defaults: port 0, world of 1, mtu 0 (from the port), burst 32, 1024 RX/TX descriptors,
 * 4095 mbufs, 256 frames per peer queue, 256 control frames, RX_BUSY, sleep_ns 50 us, UDP
 * checksum verification on. `self` (IP and UDP port) must be set by the caller. */
void keel_dpdk_config_default(struct keel_dpdk_config *cfg);

/* Start DPDK's EAL from one argument string split on blanks, e.g.
 * "--no-huge --no-pci --file-prefix r0 --vdev=net_af_packet0,iface=veth0" (a program name is
 * added in front). Once per process: a second call returns -EALREADY. The string is copied
 * into static storage the EAL may keep pointers to. May allocate inside DPDK (init only).
 * Errors: -EINVAL (NULL, too long, too many arguments), -EALREADY, or -rte_errno from
 * rte_eal_init. A message is written to err (may be NULL). */
KEEL_MUST_USE int keel_dpdk_eal_init(const char *args, char *err, size_t err_len);

/* Release the EAL (rte_eal_cleanup) after every transport was finished. Safe if never
 * started. */
void keel_dpdk_eal_cleanup(void);

/* The ethdev port named `name` (e.g. "net_af_packet0", or a PCI address), or with name NULL
 * or "" the first available port. Errors: -ENODEV. */
KEEL_MUST_USE int keel_dpdk_port_find(const char *name, uint16_t *port_id);

/* Caller memory for the transport; 0 if the config is invalid. */
size_t keel_dpdk_storage_size(const struct keel_dpdk_config *cfg);

/* Configure and start the port (one RX/TX queue pair, checksum offloads where offered), create
 * its mbuf pool, carve state from `mem`. Peers are set afterwards (keel_dpdk_set_peer).
 * Errors: -EINVAL (bad config; an mtu larger than the port carries), -ENOSPC (mem too small),
 * -ENODEV (no such port), -ENOMEM (DPDK memory for the pool or rings), or the driver's
 * -errno. On error the port is closed again and *out is NULL. */
KEEL_MUST_USE int keel_dpdk_init(struct keel_transport **out, void *mem, size_t mem_len,
				 const struct keel_dpdk_config *cfg);

/* This end's address, with the port's MAC filled in. */
void keel_dpdk_local_addr(struct keel_transport *t, struct keel_dpdk_addr *out);

/* Where rank `peer` receives; may be called again to move it. Frames from an (IP, port) that
 * is no peer's are dropped. Errors: -EINVAL (peer out of range, port 0, IP 0). */
KEEL_MUST_USE int keel_dpdk_set_peer(struct keel_transport *t, uint32_t peer,
				     const struct keel_dpdk_addr *addr);

struct keel_dpdk_stats {
	uint64_t rx_frames, rx_datagrams, tx_frames, tx_datagrams;
	uint64_t rx_bursts, tx_bursts;
	uint64_t rx_bad_ethertype;  /* not IPv4 (ARP, IPv6, LLDP...) */
	uint64_t rx_truncated;	    /* shorter than its Ethernet/IPv4/UDP headers say */
	uint64_t rx_bad_ip;	    /* IPv4 version/IHL/length wrong, fragments */
	uint64_t rx_bad_cksum;	    /* IPv4 header or UDP checksum wrong */
	uint64_t rx_not_for_us;	    /* not UDP, or MAC, IP or UDP port not this rank's */
	uint64_t rx_unknown_source; /* (IP, port) that is no peer's */
	uint64_t rx_too_long;	    /* longer than the caller's buffer */
	uint64_t tx_queued_max;	    /* deepest any peer queue has been */
	uint64_t tx_refused;	    /* datagrams refused (peer queue full or no mbuf) */
	uint64_t tx_no_mbuf;	    /* of which: the pool was empty */
	uint64_t tx_ring_full;	    /* tx_burst calls that left frames queued */
	uint64_t tx_cksum_offload;  /* frames whose checksums the port computed */
	uint64_t loss_warnings;	    /* times a peer's loss rose above KEEL_DPDK_LOSS_ALARM_PPM */
	uint32_t rx_mode;	    /* effective enum keel_dpdk_rx_mode after fallbacks */
	uint32_t port_mtu;	    /* the port's MTU (IPv4 packet size) */
};
void keel_dpdk_stats_get(struct keel_transport *t, struct keel_dpdk_stats *out);

/* Loss towards one peer, seen from the reliable layer's retransmissions (frames whose keel
 * header has the retransmit flag) against first-time data datagrams. */
struct keel_dpdk_loss {
	uint64_t data_sent;   /* first-time reliable datagrams */
	uint64_t retransmits; /* copies sent again: each stands for one datagram lost */
	uint32_t loss_ppm;    /* retransmits per million first-time datagrams */
	bool alarm;	      /* above KEEL_DPDK_LOSS_ALARM_PPM (with enough samples) */
};
/* -EINVAL if peer >= world_size. */
KEEL_MUST_USE int keel_dpdk_loss_get(struct keel_transport *t, uint32_t peer,
				     struct keel_dpdk_loss *out);

#ifdef __cplusplus
}
#endif

#endif
