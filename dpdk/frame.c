/* Checks of a received Ethernet/IPv4/UDP frame on plain bytes (frame.h). Fields are read byte
 * by byte in network order, so no alignment or host order is assumed; the Internet checksum is
 * summed as DPDK's rte_raw_cksum sums it (16-bit words in host order, an odd last byte padded
 * with zero), which makes the verdicts the same as the backend's were with DPDK's helpers. */
#include <string.h>

#include "assert_int.h"
#include "frame.h"

#define ETH_BYTES	14u
#define IP_BYTES	20u
#define UDP_BYTES	8u
#define ETHERTYPE_IPV4	0x0800u
#define IPV4_VHL	0x45u /* version 4, a 20-byte header: no options */
#define IPV4_DF		0x4000u
#define IPPROTO_UDP_NUM 17u

/* Offsets in the frame. */
#define OFF_ETHERTYPE 12u
#define OFF_IP	      ETH_BYTES
#define OFF_IP_LEN    (OFF_IP + 2u)
#define OFF_IP_FRAG   (OFF_IP + 6u)
#define OFF_IP_PROTO  (OFF_IP + 9u)
#define OFF_IP_SRC    (OFF_IP + 12u)
#define OFF_IP_DST    (OFF_IP + 16u)
#define OFF_UDP	      (ETH_BYTES + IP_BYTES)
#define OFF_UDP_DST   (OFF_UDP + 2u)
#define OFF_UDP_LEN   (OFF_UDP + 4u)
#define OFF_UDP_CKSUM (OFF_UDP + 6u)

_Static_assert(OFF_UDP + UDP_BYTES == KEEL_DPDK_FRAME_OVERHEAD, "frame layout");

static uint32_t be16(const uint8_t *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

/* One's-complement sum of len bytes as 16-bit words in host order, not folded: a sum's byte
 * order only swaps its two bytes, and the checks compare with all ones. Like rte_raw_cksum,
 * an odd last byte is padded with zero after it. */
static uint64_t sum16(uint64_t sum, const uint8_t *p, size_t len)
{
	size_t i = 0;
	for (; i + 1 < len; i += 2) {
		uint16_t w;
		memcpy(&w, p + i, 2);
		sum += w;
	}
	if (i < len) {
		uint16_t w = 0;
		memcpy(&w, p + i, 1);
		sum += w;
	}
	return sum;
}

static uint32_t fold(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffffu) + (sum >> 16);
	return (uint32_t)sum;
}

/* The header checksum field included, a correct header sums to all ones. */
static bool ip_cksum_ok(const uint8_t *hdr, enum dpdk_frame_hw hw)
{
	if (hw != DPDK_FRAME_HW_UNKNOWN)
		return hw == DPDK_FRAME_HW_GOOD;
	return fold(sum16(0, hdr + OFF_IP, IP_BYTES)) == 0xffffu;
}

enum dpdk_frame_verdict dpdk_frame_check(const uint8_t *hdr, uint32_t frame_len,
					 const struct keel_dpdk_addr *self,
					 enum dpdk_frame_hw ip_hw, struct dpdk_frame_from *from)
{
	KEEL_ASSERT_DEBUG(hdr != NULL && self != NULL && from != NULL);
	if (frame_len < ETH_BYTES)
		return DPDK_FRAME_TRUNCATED;
	if (be16(hdr + OFF_ETHERTYPE) != ETHERTYPE_IPV4)
		return DPDK_FRAME_BAD_ETHERTYPE;
	if (frame_len < KEEL_DPDK_FRAME_OVERHEAD)
		return DPDK_FRAME_TRUNCATED;
	uint32_t ip_len = be16(hdr + OFF_IP_LEN);
	/* TCP, ICMP...: on a port the kernel shares (af_packet) that is someone else's traffic. */
	if (hdr[OFF_IP_PROTO] != IPPROTO_UDP_NUM)
		return DPDK_FRAME_NOT_FOR_US;
	if (hdr[OFF_IP] != IPV4_VHL || (be16(hdr + OFF_IP_FRAG) & ~IPV4_DF) != 0 ||
	    ip_len < IP_BYTES + UDP_BYTES)
		return DPDK_FRAME_BAD_IP;
	if (frame_len < ETH_BYTES + ip_len)
		return DPDK_FRAME_TRUNCATED;
	if (!ip_cksum_ok(hdr, ip_hw))
		return DPDK_FRAME_BAD_CKSUM;
	if (memcmp(hdr, self->mac, 6) != 0 || memcmp(hdr + OFF_IP_DST, self->ip, 4) != 0 ||
	    be16(hdr + OFF_UDP_DST) != self->udp_port)
		return DPDK_FRAME_NOT_FOR_US;
	uint32_t udp_len = be16(hdr + OFF_UDP_LEN);
	if (udp_len < UDP_BYTES || udp_len > ip_len - IP_BYTES)
		return DPDK_FRAME_BAD_IP;
	memcpy(from->ip, hdr + OFF_IP_SRC, 4);
	from->udp_port = (uint16_t)be16(hdr + OFF_UDP);
	from->payload_len = udp_len - UDP_BYTES;
	KEEL_ASSERT_DEBUG(KEEL_DPDK_FRAME_OVERHEAD + from->payload_len <= frame_len);
	return DPDK_FRAME_OK;
}

bool dpdk_frame_udp_ok(const uint8_t *hdr, const uint8_t *payload, uint32_t len,
		       enum dpdk_frame_hw l4_hw, bool verify)
{
	KEEL_ASSERT_DEBUG(hdr != NULL && (payload != NULL || len == 0));
	if (be16(hdr + OFF_UDP_CKSUM) == 0)
		return true; /* IPv4 UDP without a checksum */
	if (l4_hw != DPDK_FRAME_HW_UNKNOWN)
		return l4_hw == DPDK_FRAME_HW_GOOD;
	if (!verify)
		return true;
	/* Pseudo-header: addresses, protocol, and the IP payload length (as DPDK computes it,
	 * from the IPv4 total length), then the UDP header and the payload. */
	uint8_t pseudo[12];
	uint32_t l4_len = be16(hdr + OFF_IP_LEN) - IP_BYTES;
	memcpy(pseudo, hdr + OFF_IP_SRC, 8);
	pseudo[8] = 0;
	pseudo[9] = hdr[OFF_IP_PROTO];
	pseudo[10] = (uint8_t)(l4_len >> 8);
	pseudo[11] = (uint8_t)l4_len;
	uint64_t sum = sum16(0, pseudo, sizeof(pseudo));
	sum = sum16(sum, hdr + OFF_UDP, UDP_BYTES);
	return fold(sum16(sum, payload, len)) == 0xffffu;
}
