/* libFuzzer entry point over the DPDK backend's frame checks (dpdk/frame.c; no DPDK needed):
 * any bytes as a received frame get a verdict, never a crash or a read past what the backend
 * hands in (the peeked headers and the payload are exactly sized heap copies). A frame that
 * passes is addressed to this port and its payload lies inside it; the IPv4 and UDP checksum
 * verdicts agree with a checksum written here apart from frame.c (RFC 1071) and, when DPDK's
 * headers are at hand (KEEL_HAVE_DPDK), with DPDK's own helpers, which the backend used before.
 * The first byte: bits 0-1, what the NIC said of the IPv4 checksum (enum dpdk_frame_hw; 3 as
 * 0); bits 2-3, of the UDP one; bit 4, verify UDP checksums in software; bit 5, address the
 * frame to this port; bit 6, stamp both checksums right, so the checks behind them are
 * reached. The rest is the frame, from its Ethernet header.
 * Built and run by `make fuzz` (mk/fuzz.mk); `make test` runs a smoke of it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#ifdef KEEL_HAVE_DPDK
#include <rte_ip.h>
#endif

#define ETH   14u
#define IPH   20u
#define UDPH  8u
#define FRAME KEEL_DPDK_FRAME_OVERHEAD

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct keel_dpdk_addr g_self = {
    .mac = {0x02, 0, 0, 0, 0, 0x01}, .ip = {10, 77, 1, 1}, .udp_port = 47100};

static void fail(const char *why, unsigned a)
{
	fprintf(stderr, "fuzz_dpdk_frame: %s (%u)\n", why, a);
	abort();
}

static uint32_t get16(const uint8_t *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

/* RFC 1071: the one's-complement of the one's-complement sum, in network order. */
static uint16_t inet_sum(const uint8_t *p, size_t len, uint32_t sum)
{
	for (size_t i = 0; i < len; i++)
		sum += (i & 1u) ? p[i] : (uint32_t)p[i] << 8;
	while (sum > 0xffffu)
		sum = (sum & 0xffffu) + (sum >> 16);
	return (uint16_t)sum;
}

/* The UDP checksum's sum as the backend defines it: a pseudo-header whose length is the IPv4
 * payload's, then the UDP header and len payload bytes. */
static uint16_t udp_sum(const uint8_t *f, const uint8_t *payload, uint32_t len)
{
	uint8_t pseudo[12] = {0};
	uint32_t l4 = (get16(f + ETH + 2) - IPH) & 0xffffu;
	memcpy(pseudo, f + ETH + 12, 8);
	pseudo[9] = f[ETH + 9];
	pseudo[10] = (uint8_t)(l4 >> 8), pseudo[11] = (uint8_t)l4;
	uint32_t s = inet_sum(pseudo, sizeof(pseudo), 0);
	s = inet_sum(f + ETH + IPH, UDPH, s);
	return inet_sum(payload, len, s);
}

static void put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v;
}

/* Address the frame to this port, or stamp its checksums, as the first byte asks. */
static void prepare(uint8_t *f, size_t len, uint8_t how)
{
	if (len < FRAME)
		return;
	if (how & 0x20u) {
		memcpy(f, g_self.mac, 6);
		memcpy(f + ETH + 16, g_self.ip, 4);
		put16(f + ETH + IPH + 2, g_self.udp_port);
	}
	if (!(how & 0x40u))
		return;
	put16(f + ETH + 10, 0);
	put16(f + ETH + 10, (uint16_t)~inet_sum(f + ETH, IPH, 0));
	uint32_t udp_len = get16(f + ETH + IPH + 4), n = udp_len >= UDPH ? udp_len - UDPH : 0;
	if (n > len - FRAME)
		n = (uint32_t)(len - FRAME);
	put16(f + ETH + IPH + 6, 0);
	uint16_t c = (uint16_t)~udp_sum(f, f + FRAME, n);
	put16(f + ETH + IPH + 6, c == 0 ? 0xffffu : c); /* 0 would mean "no checksum" */
}

#ifdef KEEL_HAVE_DPDK
/* DPDK's helpers on the same bytes, as the backend called them before frame.c. */
static void against_dpdk(const uint8_t *f, const uint8_t *payload, uint32_t len, bool ip_ok,
			 bool udp_ok)
{
	const struct rte_ipv4_hdr *ip = (const struct rte_ipv4_hdr *)(f + ETH);
	if ((rte_ipv4_cksum(ip) == 0) != ip_ok)
		fail("the IPv4 checksum verdict differs from DPDK's", ip_ok);
	uint32_t sum = rte_ipv4_phdr_cksum(ip, 0);
	sum += rte_raw_cksum(f + ETH + IPH, UDPH);
	sum += rte_raw_cksum(payload, len);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	if ((sum == 0xffff || get16(f + ETH + IPH + 6) == 0) != udp_ok)
		fail("the UDP checksum verdict differs from DPDK's", udp_ok);
}
#endif

/* A frame that passed: for us, its payload inside it, and its checksums as computed here. */
static void check_passed(const uint8_t *f, size_t len, const struct dpdk_frame_from *from,
			 uint8_t how)
{
	if (FRAME + (size_t)from->payload_len > len || memcmp(f, g_self.mac, 6) != 0 ||
	    memcmp(f + ETH + 16, g_self.ip, 4) != 0 || get16(f + ETH + IPH + 2) != g_self.udp_port)
		fail("passed a frame not for us, or past its end", from->payload_len);
	if (memcmp(from->ip, f + ETH + 12, 4) != 0 || from->udp_port != get16(f + ETH + IPH))
		fail("named another sender than the frame's", from->udp_port);
	bool ip_ok = inet_sum(f + ETH, IPH, 0) == 0xffffu;
	if ((how & 3u) != DPDK_FRAME_HW_BAD && (how & 3u) != DPDK_FRAME_HW_GOOD && !ip_ok)
		fail("passed a frame with a wrong IPv4 checksum", 0);
	uint8_t *payload = malloc(from->payload_len ? from->payload_len : 1);
	if (payload == NULL)
		abort();
	memcpy(payload, f + FRAME, from->payload_len);
	enum dpdk_frame_hw l4 = (enum dpdk_frame_hw)(((how >> 2) & 3u) % 3u);
	bool udp_ok = dpdk_frame_udp_ok(f, payload, from->payload_len, l4, how & 0x10u);
	bool want =
	    get16(f + ETH + IPH + 6) == 0 || udp_sum(f, payload, from->payload_len) == 0xffffu;
	if (l4 == DPDK_FRAME_HW_UNKNOWN && (how & 0x10u) && udp_ok != want)
		fail("a UDP checksum verdict differs from RFC 1071's", udp_ok);
#ifdef KEEL_HAVE_DPDK
	if (l4 == DPDK_FRAME_HW_UNKNOWN && (how & 0x10u))
		against_dpdk(f, payload, from->payload_len, ip_ok, udp_ok);
#endif
	free(payload);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t how = data[0];
	size_t len = size - 1;
	uint8_t *f = malloc(len ? len : 1);
	if (f == NULL)
		return 0;
	memcpy(f, data + 1, len);
	prepare(f, len, how);
	/* what the backend peeks: at most the headers, exactly sized */
	size_t peek = len < FRAME ? len : FRAME;
	uint8_t *hdr = malloc(peek ? peek : 1);
	if (hdr == NULL)
		abort();
	memcpy(hdr, f, peek);
	struct dpdk_frame_from from;
	enum dpdk_frame_hw ip_hw = (enum dpdk_frame_hw)((how & 3u) % 3u);
	enum dpdk_frame_verdict v = dpdk_frame_check(hdr, (uint32_t)len, &g_self, ip_hw, &from);
	if ((unsigned)v > DPDK_FRAME_BAD_CKSUM)
		fail("a verdict of no kind", v);
	if (v == DPDK_FRAME_OK)
		check_passed(f, len, &from, how);
	if (v == DPDK_FRAME_BAD_CKSUM && ip_hw == DPDK_FRAME_HW_UNKNOWN &&
	    inet_sum(f + ETH, IPH, 0) == 0xffffu)
		fail("refused a frame whose IPv4 checksum is right", 0);
	free(hdr);
	free(f);
	return 0;
}
