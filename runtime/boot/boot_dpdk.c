/* The start-up library's DPDK part: EAL, port, addresses, rendezvous of (MAC, IP, port) per
 * rank. Built only with the DPDK backend and archived with it (libkeel_dpdk.a): a program that
 * does not link DPDK does not carry it, and boot.c then says KEEL_TRANSPORT=dpdk is not linked
 * in. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot_dpdk.h"
#include "boot_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "keel/env.h"
#include "keel/transport_dpdk.h"
#include "rendezvous.h"

#define BLOB_KIND_DPDK 0x44u /* 'D': data = MAC (6 bytes) */

static struct keel_transport *dpdk_tp;
static void *dpdk_mem;

static int parse_mac(const char *s, uint8_t mac[6])
{
	unsigned v[6];
	char tail;

	if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		if (v[i] > 255)
			return -EINVAL;
		mac[i] = (uint8_t)v[i];
	}
	return 0;
}

/* Entry `rank` of KEEL_DPDK_PEERS ("mac@ip:port,..."). -ENOENT past the end. */
static int static_peer(const char *list, uint32_t rank, struct keel_dpdk_addr *a, char *err,
		       size_t err_len)
{
	char entry[96], ip[32];
	const char *p = list;
	unsigned port;

	for (uint32_t i = 0; i < rank && p != NULL; i++) {
		p = strchr(p, ',');
		p = p != NULL ? p + 1 : NULL;
	}
	if (p == NULL || *p == '\0')
		return -ENOENT;
	size_t n = strcspn(p, ",");
	if (n >= sizeof(entry))
		return keel_fail(err, err_len, -EINVAL, "KEEL_DPDK_PEERS entry %u too long", rank);
	memcpy(entry, p, n);
	entry[n] = '\0';
	char *at = strchr(entry, '@'), *colon = strrchr(entry, ':');
	if (at == NULL || colon == NULL || colon < at || (size_t)(colon - at) > sizeof(ip))
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_DPDK_PEERS entry %u '%s': expected mac@ip:port", rank,
				 entry);
	*at = '\0';
	*colon = '\0';
	snprintf(ip, sizeof(ip), "%s", at + 1);
	if (parse_mac(entry, a->mac) != 0 || inet_pton(AF_INET, ip, a->ip) != 1 ||
	    sscanf(colon + 1, "%u", &port) != 1 || port == 0 || port > 65535)
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_DPDK_PEERS entry %u: bad MAC, IPv4 address or port", rank);
	a->udp_port = (uint16_t)port;
	return 0;
}

static int env_rx_mode(struct keel_dpdk_config *c, char *err, size_t err_len)
{
	unsigned mode = c->rx_mode;
	uint64_t us = c->sleep_ns / 1000;

	if (keel_env_enum("KEEL_DPDK_RX", &mode, err, err_len) < 0 || /* names in enum order */
	    keel_env_uint("KEEL_DPDK_SLEEP_US", &us, err, err_len) < 0)
		return -EINVAL;
	c->rx_mode = (enum keel_dpdk_rx_mode)mode;
	c->sleep_ns = us * 1000u;
	/* A busy-polled port has no fd to wake a sleeping waiter: spin unless told otherwise. */
	if (c->rx_mode == KEEL_DPDK_RX_BUSY)
		setenv("KEEL_WAIT", "busy", 0);
	return 0;
}

/* This rank's IPv4 address and UDP port: KEEL_DPDK_IP / KEEL_DPDK_UDP_PORT, else its entry in
 * KEEL_DPDK_PEERS. */
static int env_self(const struct keel_launch *l, struct keel_dpdk_addr *self, char *err,
		    size_t err_len)
{
	const char *ip = NULL, *peers = NULL;
	uint64_t port = KEEL_DPDK_UDP_PORT_DEFAULT;
	int has_ip = keel_env_text("KEEL_DPDK_IP", &ip, err, err_len), has_port = 0, has_peers = 0;
	if (has_ip >= 0)
		has_port = keel_env_uint("KEEL_DPDK_UDP_PORT", &port, err, err_len);
	if (has_ip >= 0 && has_port >= 0)
		has_peers = keel_env_text("KEEL_DPDK_PEERS", &peers, err, err_len);
	if (has_ip < 0 || has_port < 0 || has_peers < 0)
		return -EINVAL;

	memset(self, 0, sizeof(*self));
	self->udp_port = KEEL_DPDK_UDP_PORT_DEFAULT;
	if (has_peers == 1) {
		int rc = static_peer(peers, l->rank, self, err, err_len);
		if (rc == -ENOENT)
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_DPDK_PEERS has no entry for rank %u", l->rank);
		if (rc != 0)
			return rc;
	}
	if (has_ip == 1 && inet_pton(AF_INET, ip, self->ip) != 1)
		return keel_fail(err, err_len, -EINVAL, "KEEL_DPDK_IP=%s: not an IPv4 address", ip);
	if (has_port == 1)
		self->udp_port = (uint16_t)port; /* 1..65535 */
	if (self->ip[0] == 0 && self->ip[1] == 0 && self->ip[2] == 0 && self->ip[3] == 0)
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_DPDK_IP is needed: the IPv4 address of this rank's frames");
	return 0;
}

static int peers_static(const struct keel_launch *l, const char *list, char *err, size_t err_len)
{
	for (uint32_t r = 0; r < l->world_size; r++) {
		struct keel_dpdk_addr a;
		int rc = static_peer(list, r, &a, err, err_len);
		if (rc == -ENOENT)
			return keel_fail(err, err_len, -EINVAL,
					 "KEEL_DPDK_PEERS has %u entries, world size is %u", r,
					 l->world_size);
		if (rc == 0)
			rc = keel_dpdk_set_peer(dpdk_tp, r, &a);
		if (rc != 0)
			return keel_fail(err, err_len, rc, "KEEL_DPDK_PEERS entry %u rejected", r);
	}
	return 0;
}

/* Rank 0's TCP rendezvous (or KEEL_PEERS, which then lacks MACs): each rank's IPv4 address and
 * UDP port as its address, its port's MAC as its blob. */
static int peers_rendezvous(struct keel_launch *l, uint64_t timeout_ns, char *err, size_t err_len)
{
	struct keel_dpdk_addr self;
	struct sockaddr_in sin;
	struct keel_rendezvous_blob mine = {.kind = BLOB_KIND_DPDK, .len = 6};

	keel_dpdk_local_addr(dpdk_tp, &self);
	memcpy(mine.data, self.mac, 6);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(self.udp_port);
	memcpy(&sin.sin_addr, self.ip, 4);
	struct sockaddr_storage *peers = calloc(l->world_size, sizeof(*peers));
	struct keel_rendezvous_blob *blobs = calloc(l->world_size, sizeof(*blobs));
	int rc = peers == NULL || blobs == NULL ? -ENOMEM : 0;
	if (rc == 0)
		rc = keel_rendezvous_blob(l, (struct sockaddr *)&sin, sizeof(sin), &mine, peers,
					  blobs, timeout_ns, err, err_len);
	for (uint32_t r = 0; rc == 0 && r < l->world_size; r++) {
		const struct sockaddr_in *p = (const struct sockaddr_in *)&peers[r];
		struct keel_dpdk_addr a;
		if (p->sin_family != AF_INET || blobs[r].kind != BLOB_KIND_DPDK ||
		    blobs[r].len != 6) {
			rc = keel_fail(
			    err, err_len, KEEL_ERENDEZVOUS,
			    "rank %u did not announce a DPDK port (MAC); with KEEL_PEERS, "
			    "set KEEL_DPDK_PEERS=mac@ip:port,...",
			    r);
			break;
		}
		memcpy(a.mac, blobs[r].data, 6);
		memcpy(a.ip, &p->sin_addr, 4);
		a.udp_port = ntohs(p->sin_port);
		rc = keel_dpdk_set_peer(dpdk_tp, r, &a);
		if (rc != 0)
			keel_fail(err, err_len, rc, "rank %u: DPDK address rejected", r);
	}
	free(peers);
	free(blobs);
	return rc;
}

static int port_start(const struct keel_launch *l, struct keel_dpdk_config *c, char *err,
		      size_t err_len)
{
	const char *name = NULL;
	int rc = keel_env_text("KEEL_DPDK_PORT", &name, err, err_len);
	if (rc < 0)
		return rc;
	rc = keel_dpdk_port_find(name, &c->port_id);
	if (rc != 0)
		return keel_fail(err, err_len, rc,
				 "DPDK port %s not found (check the --vdev or PCI device in "
				 "KEEL_DPDK_ARGS, and that the NIC is bound to a DPDK driver)",
				 name != NULL && *name ? name : "(first)");
	size_t sz = keel_dpdk_storage_size(c);
	dpdk_mem = sz != 0 ? calloc(1, sz) : NULL;
	rc = dpdk_mem == NULL ? -EINVAL : keel_dpdk_init(&dpdk_tp, dpdk_mem, sz, c);
	if (rc != 0)
		return keel_fail(err, err_len, rc, "DPDK transport on port %u (rank %u): %s",
				 c->port_id, l->rank, keel_strerror(rc));
	return 0;
}

int keel_boot_dpdk_start(struct keel_launch *l, uint32_t mtu, uint32_t burst,
			 uint64_t rendezvous_timeout_ns, struct keel_transport **out, char *err,
			 size_t err_len)
{
	const char *args = NULL, *list = NULL;
	struct keel_dpdk_config c;

	*out = NULL;
	if (keel_env_text("KEEL_DPDK_PEERS", &list, err, err_len) < 0 ||
	    keel_env_text("KEEL_DPDK_ARGS", &args, err, err_len) < 0)
		return -EINVAL;
	if (args == NULL)
		return keel_fail(err, err_len, -EINVAL,
				 "KEEL_DPDK_ARGS is needed: the DPDK EAL arguments, e.g. "
				 "\"-l 0 -a 0000:3b:00.0\" or \"--no-huge --no-pci "
				 "--vdev=net_af_packet0,iface=eth1\"");
	keel_dpdk_config_default(&c);
	c.rank = l->rank;
	c.world_size = l->world_size;
	c.mtu = mtu;
	c.burst = burst;
	int rc = env_rx_mode(&c, err, err_len);
	if (rc == 0)
		rc = env_self(l, &c.self, err, err_len);
	if (rc == 0)
		rc = keel_dpdk_eal_init(args, err, err_len);
	if (rc == 0)
		rc = port_start(l, &c, err, err_len);
	if (rc == 0)
		rc = list != NULL ? peers_static(l, list, err, err_len)
				  : peers_rendezvous(l, rendezvous_timeout_ns, err, err_len);
	if (rc != 0) {
		keel_boot_dpdk_stop();
		return rc;
	}
	*out = dpdk_tp;
	return 0;
}

static void print_stats(void)
{
	struct keel_dpdk_stats s;
	uint64_t lost = 0, sent = 0;

	keel_dpdk_stats_get(dpdk_tp, &s);
	for (uint32_t r = 0; r < dpdk_tp->world_size; r++) {
		struct keel_dpdk_loss loss;
		if (keel_dpdk_loss_get(dpdk_tp, r, &loss) == 0) {
			lost += loss.retransmits;
			sent += loss.data_sent;
		}
	}
	fprintf(stderr,
		"keel-dpdk: rank %u rx_frames %llu rx_datagrams %llu tx_frames %llu "
		"tx_datagrams %llu bad_ethertype %llu truncated %llu bad_ip %llu bad_cksum %llu "
		"not_for_us %llu unknown_source %llu "
		"tx_refused %llu tx_ring_full %llu queued_max %llu retransmits %llu data_sent "
		"%llu loss_warnings %llu rx_mode %u port_mtu %u mtu %u\n",
		dpdk_tp->rank, (unsigned long long)s.rx_frames, (unsigned long long)s.rx_datagrams,
		(unsigned long long)s.tx_frames, (unsigned long long)s.tx_datagrams,
		(unsigned long long)s.rx_bad_ethertype, (unsigned long long)s.rx_truncated,
		(unsigned long long)s.rx_bad_ip, (unsigned long long)s.rx_bad_cksum,
		(unsigned long long)s.rx_not_for_us, (unsigned long long)s.rx_unknown_source,
		(unsigned long long)s.tx_refused, (unsigned long long)s.tx_ring_full,
		(unsigned long long)s.tx_queued_max, (unsigned long long)lost,
		(unsigned long long)sent, (unsigned long long)s.loss_warnings, s.rx_mode,
		s.port_mtu, dpdk_tp->mtu);
}

void keel_boot_dpdk_stop(void)
{
	bool stats = false;

	if (dpdk_tp != NULL) {
		/* a bad value failed keel_boot_start (keel_env_check) */
		if (keel_env_bool("KEEL_DPDK_STATS", &stats, NULL, 0) == 1 && stats)
			print_stats();
		dpdk_tp->ops->fini(dpdk_tp);
	}
	dpdk_tp = NULL;
	free(dpdk_mem);
	dpdk_mem = NULL;
	keel_dpdk_eal_cleanup();
}
