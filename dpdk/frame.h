/* The DPDK backend's checks of a received frame (Ethernet II, IPv4 without options, UDP) on
 * plain bytes: no mbuf, no EAL, no rte_ header, so the fuzz target builds them without DPDK.
 * transport_dpdk.c hands in what it peeked of each frame and what the NIC said of its
 * checksums, counts the verdict, and looks the sender up. */
#ifndef KEEL_DPDK_FRAME_H
#define KEEL_DPDK_FRAME_H

#include <stdbool.h>
#include <stdint.h>

#include "keel/transport_dpdk.h"

/* Why a frame is dropped; each is one of struct keel_dpdk_stats' counters. */
enum dpdk_frame_verdict {
	DPDK_FRAME_OK = 0,
	DPDK_FRAME_TRUNCATED,	  /* rx_truncated */
	DPDK_FRAME_BAD_ETHERTYPE, /* rx_bad_ethertype */
	DPDK_FRAME_NOT_FOR_US,	  /* rx_not_for_us: another protocol, address or port */
	DPDK_FRAME_BAD_IP,	  /* rx_bad_ip: version, options, fragments, lengths */
	DPDK_FRAME_BAD_CKSUM,	  /* rx_bad_cksum */
};

/* What the NIC said of a checksum (receive offload), if it checked it. */
enum dpdk_frame_hw { DPDK_FRAME_HW_UNKNOWN = 0, DPDK_FRAME_HW_GOOD, DPDK_FRAME_HW_BAD };

/* Who sent a frame that passed, and how much keel datagram it carries. */
struct dpdk_frame_from {
	uint8_t ip[4];
	uint16_t udp_port;
	uint32_t payload_len; /* bytes after the UDP header */
};

/* Check the headers of a frame of frame_len bytes, for `self`. hdr holds its first
 * min(frame_len, KEEL_DPDK_FRAME_OVERHEAD) bytes; nothing past them is read. ip_hw: the NIC's
 * word on the IPv4 header checksum. On DPDK_FRAME_OK, *from is filled and
 * KEEL_DPDK_FRAME_OVERHEAD + from->payload_len <= frame_len. */
enum dpdk_frame_verdict dpdk_frame_check(const uint8_t *hdr, uint32_t frame_len,
					 const struct keel_dpdk_addr *self,
					 enum dpdk_frame_hw ip_hw, struct dpdk_frame_from *from);

/* The UDP checksum of a frame dpdk_frame_check passed: hdr its headers, payload its
 * payload_len bytes. A zero checksum field means none was sent; l4_hw the NIC's word; without
 * `verify` an unchecked one is taken on trust. */
bool dpdk_frame_udp_ok(const uint8_t *hdr, const uint8_t *payload, uint32_t len,
		       enum dpdk_frame_hw l4_hw, bool verify);

#endif
