/* The DPDK transport: keel datagrams in Ethernet/IPv4/UDP frames on one ethdev port, one RX/TX
 * queue pair, bursts both ways, bounded per-peer queues when the TX ring is full.
 * It never allocates after init (the mbuf pool is created once), never blocks, never reads a
 * clock, and never trusts a frame: every header is checked and every rejection counted. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include "assert_int.h"
#include "frame.h"
#include "keel/limits.h"
#include "keel/transport_dpdk.h"

#define CACHE_LINE_BYTES 64u
#define IP_UDP_BYTES	 28u
#define ETH_BYTES	 14u
#define HASH_SLOTS_MIN	 16u
#define HASH_EMPTY	 0u
/* What recv reads of each frame before deciding: Ethernet, IPv4 without options, UDP. */
#define PEEK_BYTES    KEEL_DPDK_FRAME_OVERHEAD
#define MEMPOOL_CACHE 64u
/* Loss is re-judged every this many first-time datagrams (and at every retransmission). */
#define LOSS_CHECK_EVERY 256u

_Static_assert(KEEL_DPDK_FRAME_OVERHEAD == ETH_BYTES + IP_UDP_BYTES, "frame layout");
_Static_assert(KEEL_WORLD_MAX < UINT16_MAX, "a hash slot holds rank + 1 in 16 bits");

/* A bounded FIFO of mbufs; free-running indexes, power-of-two capacity. */
struct mq {
	struct rte_mbuf **slot;
	uint32_t head, tail, mask;
};

struct peer {
	struct keel_dpdk_addr addr;
	bool set;
	bool alarm;
	uint64_t data_sent, retransmits;
};

struct dpdk {
	struct keel_transport t;
	uint16_t port_id;
	bool port_open, closed;
	bool tx_cksum_hw, rx_cksum_hw;
	bool intr_armed;
	bool verify_udp;
	uint16_t ip_id;
	uint32_t burst, rr, hash_mask;
	uint32_t data_queued; /* frames in all peer queues */
	int intr_fd;
	uint64_t last_now_ns, sleep_ns;
	struct rte_mempool *pool;
	struct keel_dpdk_addr self;
	struct peer *peers;   /* [world_size] */
	struct mq *pq;	      /* [world_size] */
	struct mq cq;	      /* control frames, sent before any data */
	uint16_t *hash;	      /* rank + 1 or HASH_EMPTY, keyed on (IP, port); linear probing */
	struct rte_mbuf **rx; /* [burst] */
	struct keel_dpdk_stats stats;
};

struct layout {
	size_t peers, pq, pq_slots, cq_slots, hash, rx, total;
	uint32_t hash_slots;
};

static const struct keel_transport_ops dpdk_ops;

static size_t align_up(size_t n)
{
	return (n + CACHE_LINE_BYTES - 1) & ~(size_t)(CACHE_LINE_BYTES - 1);
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static bool is_pow2(uint32_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

/* ---- EAL and ports ------------------------------------------------------------------- */

static bool eal_started;

static int fail_msg(char *err, size_t err_len, int rc, const char *what, const char *detail)
{
	if (err != NULL && err_len > 0)
		snprintf(err, err_len, "%s%s%s", what, detail[0] ? ": " : "", detail);
	return rc;
}

int keel_dpdk_eal_init(const char *args, char *err, size_t err_len)
{
	/* rte_eal_init may keep pointers into argv (device arguments): static storage. */
	static char buf[KEEL_DPDK_EAL_ARGS_LEN];
	static char prog[] = "keel";
	static char *argv[KEEL_DPDK_EAL_ARGC_MAX + 2];
	int argc = 0;

	if (eal_started)
		return fail_msg(err, err_len, -EALREADY, "DPDK EAL already started", "");
	if (args == NULL || strlen(args) >= sizeof(buf))
		return fail_msg(err, err_len, -EINVAL, "DPDK EAL arguments missing or too long",
				"");
	memcpy(buf, args, strlen(args) + 1);
	argv[argc++] = prog;
	for (char *p = buf; *p != '\0';) {
		while (*p == ' ' || *p == '\t' || *p == '\n')
			*p++ = '\0';
		if (*p == '\0')
			break;
		if (argc > (int)KEEL_DPDK_EAL_ARGC_MAX)
			return fail_msg(err, err_len, -EINVAL, "too many DPDK EAL arguments", "");
		argv[argc++] = p;
		while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\n')
			p++;
	}
	argv[argc] = NULL;
	if (rte_eal_init(argc, argv) < 0) {
		int e = rte_errno;

		return fail_msg(err, err_len, e > 0 ? -e : -EIO, "rte_eal_init failed",
				rte_strerror(e));
	}
	eal_started = true;
	return 0;
}

void keel_dpdk_eal_cleanup(void)
{
	if (!eal_started)
		return;
	(void)rte_eal_cleanup();
	eal_started = false;
}

int keel_dpdk_port_find(const char *name, uint16_t *port_id)
{
	uint16_t id;

	KEEL_ASSERT(port_id != NULL);
	if (!eal_started)
		return -ENODEV;
	if (name != NULL && name[0] != '\0')
		return rte_eth_dev_get_port_by_name(name, port_id) == 0 ? 0 : -ENODEV;
	RTE_ETH_FOREACH_DEV(id)
	{
		*port_id = id;
		return 0;
	}
	return -ENODEV;
}

/* ---- config and memory ------------------------------------------------------------- */

void keel_dpdk_config_default(struct keel_dpdk_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->world_size = 1;
	cfg->burst = KEEL_BURST_DEFAULT;
	cfg->rx_desc = 1024;
	cfg->tx_desc = 1024;
	cfg->mbuf_count = 4095;
	cfg->peer_queue_max = 256;
	cfg->ctrl_queue_max = 256;
	cfg->rx_mode = KEEL_DPDK_RX_BUSY;
	cfg->sleep_ns = KEEL_DPDK_SLEEP_NS_DEFAULT;
	cfg->verify_udp_cksum = true;
}

static bool config_valid(const struct keel_dpdk_config *cfg)
{
	return cfg != NULL && cfg->world_size >= 1 && cfg->world_size <= KEEL_WORLD_MAX &&
	       cfg->rank < cfg->world_size && (cfg->mtu == 0 || cfg->mtu >= KEEL_MTU_MIN) &&
	       cfg->mtu <= KEEL_MTU_MAX && cfg->burst >= 1 && cfg->burst <= KEEL_BURST_MAX &&
	       cfg->rx_desc >= 1 && cfg->rx_desc <= UINT16_MAX && cfg->tx_desc >= 1 &&
	       cfg->tx_desc <= UINT16_MAX && is_pow2(cfg->peer_queue_max) &&
	       is_pow2(cfg->ctrl_queue_max) &&
	       cfg->mbuf_count >= cfg->rx_desc + cfg->tx_desc + 2 * cfg->burst &&
	       cfg->rx_mode <= KEEL_DPDK_RX_INTERRUPT &&
	       (cfg->rx_mode != KEEL_DPDK_RX_SLEEP || cfg->sleep_ns > 0) && cfg->self.udp_port != 0;
}

static void layout_compute(const struct keel_dpdk_config *cfg, struct layout *l)
{
	uint32_t slots = HASH_SLOTS_MIN;
	size_t w = cfg->world_size;

	while (slots < 2 * cfg->world_size)
		slots *= 2;
	l->hash_slots = slots;
	l->peers = align_up(sizeof(struct dpdk));
	l->pq = l->peers + align_up(w * sizeof(struct peer));
	l->pq_slots = l->pq + align_up(w * sizeof(struct mq));
	l->cq_slots = l->pq_slots + align_up(w * cfg->peer_queue_max * sizeof(struct rte_mbuf *));
	l->hash = l->cq_slots + align_up(cfg->ctrl_queue_max * sizeof(struct rte_mbuf *));
	l->rx = l->hash + align_up(slots * sizeof(uint16_t));
	l->total = l->rx + align_up(cfg->burst * sizeof(struct rte_mbuf *));
}

size_t keel_dpdk_storage_size(const struct keel_dpdk_config *cfg)
{
	struct layout l;

	if (!config_valid(cfg))
		return 0;
	layout_compute(cfg, &l);
	return l.total + CACHE_LINE_BYTES - 1;
}

static struct dpdk *dpdk_of(struct keel_transport *t)
{
	KEEL_ASSERT(t != NULL && t->ops == &dpdk_ops && t->state != NULL);
	return t->state;
}

/* ---- peers -------------------------------------------------------------------------- */

static uint32_t key_hash(const uint8_t ip[4], uint16_t port)
{
	uint64_t x = ((uint64_t)ip[0] << 40 | (uint64_t)ip[1] << 32 | (uint64_t)ip[2] << 24 |
		      (uint64_t)ip[3] << 16 | port);

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return (uint32_t)(x ^ (x >> 31));
}

static bool key_equal(const struct keel_dpdk_addr *a, const uint8_t ip[4], uint16_t port)
{
	return a->udp_port == port && memcmp(a->ip, ip, 4) == 0;
}

/* Rank whose (IP, port) this is, or -1. The table is at most half full. */
static int peer_lookup(const struct dpdk *p, const uint8_t ip[4], uint16_t port)
{
	uint32_t s = key_hash(ip, port) & p->hash_mask;

	for (uint32_t probes = 0; probes <= p->hash_mask; probes++) {
		uint16_t e = p->hash[s];

		if (e == HASH_EMPTY)
			return -1;
		if (key_equal(&p->peers[e - 1].addr, ip, port))
			return e - 1;
		s = (s + 1) & p->hash_mask;
	}
	return -1;
}

static void hash_insert(struct dpdk *p, uint32_t rank)
{
	const struct keel_dpdk_addr *a = &p->peers[rank].addr;
	uint32_t s = key_hash(a->ip, a->udp_port) & p->hash_mask;

	for (uint32_t probes = 0; probes <= p->hash_mask; probes++) {
		if (p->hash[s] == HASH_EMPTY) {
			p->hash[s] = (uint16_t)(rank + 1);
			return;
		}
		s = (s + 1) & p->hash_mask;
	}
	KEEL_ASSERT(!"peer hash full"); /* impossible: slots >= 2 * world_size */
}

int keel_dpdk_set_peer(struct keel_transport *t, uint32_t peer, const struct keel_dpdk_addr *addr)
{
	struct dpdk *p = dpdk_of(t);
	static const uint8_t zero_ip[4];

	if (peer >= t->world_size || addr == NULL || addr->udp_port == 0 ||
	    memcmp(addr->ip, zero_ip, 4) == 0)
		return -EINVAL;
	if (!p->peers[peer].set) {
		p->peers[peer].addr = *addr;
		p->peers[peer].set = true;
		hash_insert(p, peer);
		return 0;
	}
	/* A peer moved: rebuild the table (rare; no tombstones to age). */
	p->peers[peer].addr = *addr;
	memset(p->hash, 0, (size_t)(p->hash_mask + 1) * sizeof(*p->hash));
	for (uint32_t r = 0; r < t->world_size; r++)
		if (p->peers[r].set)
			hash_insert(p, r);
	return 0;
}

void keel_dpdk_local_addr(struct keel_transport *t, struct keel_dpdk_addr *out)
{
	KEEL_ASSERT(out != NULL);
	*out = dpdk_of(t)->self;
}

void keel_dpdk_stats_get(struct keel_transport *t, struct keel_dpdk_stats *out)
{
	KEEL_ASSERT(out != NULL);
	*out = dpdk_of(t)->stats;
}

int keel_dpdk_loss_get(struct keel_transport *t, uint32_t peer, struct keel_dpdk_loss *out)
{
	struct dpdk *p = dpdk_of(t);
	const struct peer *e;

	KEEL_ASSERT(out != NULL);
	if (peer >= t->world_size)
		return -EINVAL;
	e = &p->peers[peer];
	out->data_sent = e->data_sent;
	out->retransmits = e->retransmits;
	out->loss_ppm =
	    e->data_sent == 0
		? 0
		: (uint32_t)min_u32(UINT32_MAX / 2,
				    (uint32_t)(e->retransmits * 1000000u / e->data_sent));
	out->alarm = e->alarm;
	return 0;
}

/* Judge a peer's loss; the warning counter counts each rise above the alarm threshold. */
static void loss_judge(struct dpdk *p, struct peer *e)
{
	bool above;

	if (e->data_sent < KEEL_DPDK_LOSS_MIN_SAMPLES)
		return;
	above = e->retransmits * 1000000u > (uint64_t)KEEL_DPDK_LOSS_ALARM_PPM * e->data_sent;
	if (above && !e->alarm)
		p->stats.loss_warnings++;
	e->alarm = above;
}

/* ---- port set-up ---------------------------------------------------------------------- */

static int port_configure(struct dpdk *p, const struct keel_dpdk_config *cfg, uint32_t *port_mtu)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	uint16_t mtu_now = RTE_ETHER_MTU;
	uint64_t tx_ck = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
	uint64_t rx_ck = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
	int rc = rte_eth_dev_info_get(p->port_id, &info);

	if (rc != 0)
		return rc;
	(void)rte_eth_dev_get_mtu(p->port_id, &mtu_now);
	*port_mtu = cfg->mtu != 0 ? cfg->mtu + IP_UDP_BYTES : mtu_now;
	if (*port_mtu > info.max_mtu || *port_mtu < info.min_mtu ||
	    *port_mtu < KEEL_MTU_MIN + IP_UDP_BYTES)
		return -EINVAL;
	memset(&conf, 0, sizeof(conf));
	conf.rxmode.mtu = *port_mtu;
	p->tx_cksum_hw = (info.tx_offload_capa & tx_ck) == tx_ck;
	p->rx_cksum_hw = (info.rx_offload_capa & rx_ck) == rx_ck;
	if (p->tx_cksum_hw)
		conf.txmode.offloads |= tx_ck;
	if (p->rx_cksum_hw)
		conf.rxmode.offloads |= rx_ck;
	conf.intr_conf.rxq = cfg->rx_mode == KEEL_DPDK_RX_INTERRUPT;
	rc = rte_eth_dev_configure(p->port_id, 1, 1, &conf);
	if (rc != 0 && conf.intr_conf.rxq) {
		conf.intr_conf.rxq = 0; /* the driver has no RX interrupts: sleep instead */
		p->stats.rx_mode = KEEL_DPDK_RX_SLEEP;
		rc = rte_eth_dev_configure(p->port_id, 1, 1, &conf);
	}
	return rc;
}

static int port_queues(struct dpdk *p, const struct keel_dpdk_config *cfg, uint32_t port_mtu)
{
	uint16_t nb_rx = (uint16_t)cfg->rx_desc, nb_tx = (uint16_t)cfg->tx_desc;
	char name[RTE_MEMPOOL_NAMESIZE];
	/* One frame per mbuf: headroom + Ethernet (with a VLAN tag's room) + the IPv4 packet. */
	uint32_t room = RTE_PKTMBUF_HEADROOM + ETH_BYTES + 4 + port_mtu;
	int socket = rte_eth_dev_socket_id(p->port_id);
	int rc = rte_eth_dev_adjust_nb_rx_tx_desc(p->port_id, &nb_rx, &nb_tx);

	if (rc != 0)
		return rc;
	if (room < RTE_MBUF_DEFAULT_BUF_SIZE)
		room = RTE_MBUF_DEFAULT_BUF_SIZE;
	if (room > UINT16_MAX)
		return -EINVAL;
	if (socket < 0)
		socket = (int)rte_socket_id();
	snprintf(name, sizeof(name), "keel_dpdk_%u", p->port_id);
	p->pool = rte_pktmbuf_pool_create(name, cfg->mbuf_count, MEMPOOL_CACHE, 0, (uint16_t)room,
					  socket);
	if (p->pool == NULL)
		return rte_errno > 0 ? -rte_errno : -ENOMEM;
	rc = rte_eth_rx_queue_setup(p->port_id, 0, nb_rx, (unsigned)socket, NULL, p->pool);
	if (rc == 0)
		rc = rte_eth_tx_queue_setup(p->port_id, 0, nb_tx, (unsigned)socket, NULL);
	return rc;
}

/* RX interrupts, where the driver has them: an event fd the caller's waiter can sleep on. */
static void port_interrupts(struct dpdk *p)
{
	int fd;

	if (p->stats.rx_mode != KEEL_DPDK_RX_INTERRUPT)
		return;
	fd = rte_eth_dev_rx_intr_ctl_q_get_fd(p->port_id, 0);
	if (fd < 0 || rte_eth_dev_rx_intr_enable(p->port_id, 0) != 0) {
		p->stats.rx_mode = KEEL_DPDK_RX_SLEEP;
		return;
	}
	(void)rte_eth_dev_rx_intr_disable(p->port_id, 0);
	p->intr_fd = fd;
}

static int port_start(struct dpdk *p, const struct keel_dpdk_config *cfg)
{
	struct rte_ether_addr mac;
	uint32_t port_mtu = 0;
	int rc = port_configure(p, cfg, &port_mtu);

	if (rc == 0)
		rc = port_queues(p, cfg, port_mtu);
	if (rc == 0)
		rc = rte_eth_dev_start(p->port_id);
	if (rc != 0)
		return rc;
	p->port_open = true;
	port_interrupts(p);
	rc = rte_eth_macaddr_get(p->port_id, &mac);
	if (rc != 0)
		return rc;
	memcpy(p->self.mac, mac.addr_bytes, 6);
	p->stats.port_mtu = port_mtu;
	p->t.mtu = min_u32(port_mtu - IP_UDP_BYTES, KEEL_MTU_MAX);
	return 0;
}

static void carve(struct dpdk *p, uint8_t *base, const struct layout *l,
		  const struct keel_dpdk_config *cfg)
{
	struct rte_mbuf **pq_slots = (struct rte_mbuf **)(base + l->pq_slots);

	p->peers = (struct peer *)(base + l->peers);
	p->pq = (struct mq *)(base + l->pq);
	for (uint32_t r = 0; r < cfg->world_size; r++) {
		p->pq[r].slot = pq_slots + (size_t)r * cfg->peer_queue_max;
		p->pq[r].mask = cfg->peer_queue_max - 1;
	}
	p->cq.slot = (struct rte_mbuf **)(base + l->cq_slots);
	p->cq.mask = cfg->ctrl_queue_max - 1;
	p->hash = (uint16_t *)(base + l->hash);
	p->hash_mask = l->hash_slots - 1;
	p->rx = (struct rte_mbuf **)(base + l->rx);
}

int keel_dpdk_init(struct keel_transport **out, void *mem, size_t mem_len,
		   const struct keel_dpdk_config *cfg)
{
	struct layout l;
	struct dpdk *p;
	uint8_t *base;
	int rc;

	KEEL_ASSERT(out != NULL);
	*out = NULL;
	if (!config_valid(cfg))
		return -EINVAL;
	if (mem == NULL || mem_len < keel_dpdk_storage_size(cfg))
		return -ENOSPC;
	if (!eal_started || !rte_eth_dev_is_valid_port(cfg->port_id))
		return -ENODEV;
	layout_compute(cfg, &l);
	base = (uint8_t *)align_up((uintptr_t)mem);
	memset(base, 0, l.total);
	p = (struct dpdk *)base;
	carve(p, base, &l, cfg);
	p->port_id = cfg->port_id;
	p->burst = cfg->burst;
	p->verify_udp = cfg->verify_udp_cksum;
	p->sleep_ns = cfg->sleep_ns;
	p->intr_fd = -1;
	p->self = cfg->self;
	p->stats.rx_mode = cfg->rx_mode;
	p->t = (struct keel_transport){
	    .ops = &dpdk_ops,
	    .state = p,
	    .caps = 0,
	    .rank = cfg->rank,
	    .world_size = cfg->world_size,
	};
	rc = port_start(p, cfg);
	if (rc != 0) {
		dpdk_ops.fini(&p->t);
		return rc < 0 ? rc : -rc;
	}
	if (cfg->mtu != 0 && cfg->mtu < p->t.mtu)
		p->t.mtu = cfg->mtu;
	*out = &p->t;
	return 0;
}

/* ---- transmit ---------------------------------------------------------------------------- */

/* Ethernet/IPv4/UDP around the datagram, written once into a fresh mbuf. */
static struct rte_mbuf *frame_build(struct dpdk *p, const struct keel_datagram *g)
{
	const struct keel_dpdk_addr *dst = &p->peers[g->peer].addr;
	struct rte_mbuf *m = rte_pktmbuf_alloc(p->pool);
	struct rte_ether_hdr *eth;
	struct rte_ipv4_hdr *ip;
	struct rte_udp_hdr *udp;
	char *data;

	if (m == NULL)
		return NULL;
	data = rte_pktmbuf_append(m, (uint16_t)(KEEL_DPDK_FRAME_OVERHEAD + g->len));
	KEEL_ASSERT(data != NULL); /* the pool's data room holds a frame of mtu bytes */
	eth = (struct rte_ether_hdr *)data;
	ip = (struct rte_ipv4_hdr *)(data + ETH_BYTES);
	udp = (struct rte_udp_hdr *)(data + ETH_BYTES + 20);
	memcpy(eth->dst_addr.addr_bytes, dst->mac, 6);
	memcpy(eth->src_addr.addr_bytes, p->self.mac, 6);
	eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->type_of_service = 0;
	ip->total_length = rte_cpu_to_be_16((uint16_t)(IP_UDP_BYTES + g->len));
	ip->packet_id = rte_cpu_to_be_16(p->ip_id++);
	ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->hdr_checksum = 0;
	memcpy(&ip->src_addr, p->self.ip, 4);
	memcpy(&ip->dst_addr, dst->ip, 4);
	udp->src_port = rte_cpu_to_be_16(p->self.udp_port);
	udp->dst_port = rte_cpu_to_be_16(dst->udp_port);
	udp->dgram_len = rte_cpu_to_be_16((uint16_t)(8 + g->len));
	udp->dgram_cksum = 0;
	if (g->len > 0)
		memcpy(udp + 1, g->buf, g->len);
	if (p->tx_cksum_hw) {
		m->l2_len = ETH_BYTES;
		m->l3_len = 20;
		m->ol_flags |=
		    RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
		udp->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
		p->stats.tx_cksum_offload++;
	} else {
		ip->hdr_checksum = rte_ipv4_cksum(ip);
		udp->dgram_cksum = rte_ipv4_udptcp_cksum(ip, udp);
	}
	return m;
}

/* Hand queued frames to the NIC in order. Returns false when the TX ring filled first. */
static bool mq_drain(struct dpdk *p, struct mq *q, bool is_data)
{
	/* Bounded: each pass sends at least one frame or returns. */
	while (q->tail != q->head) {
		uint32_t idx = q->head & q->mask;
		uint32_t n = min_u32(min_u32(q->tail - q->head, q->mask + 1 - idx), p->burst);
		uint16_t sent = rte_eth_tx_burst(p->port_id, 0, &q->slot[idx], (uint16_t)n);

		p->stats.tx_bursts++;
		p->stats.tx_frames += sent;
		q->head += sent;
		if (is_data)
			p->data_queued -= sent;
		if (sent < n) {
			p->stats.tx_ring_full++;
			return false;
		}
	}
	return true;
}

/* Control frames first, then the peers' queues round-robin from where the last flush stopped,
 * so a peer with a deep queue cannot starve the others. */
static void tx_flush(struct dpdk *p)
{
	uint32_t world = p->t.world_size;

	if (!mq_drain(p, &p->cq, false))
		return;
	for (uint32_t i = 0; i < world && p->data_queued > 0; i++) {
		uint32_t r = (p->rr + i) % world;

		if (!mq_drain(p, &p->pq[r], true)) {
			p->rr = r;
			return;
		}
	}
	p->rr = (p->rr + 1) % world;
}

static bool is_control(const struct keel_datagram *g)
{
	return (g->flags & KEEL_DGRAM_CONTROL) != 0;
}

/* A reliable datagram sent again stands for one lost: the core resends only what was not
 * acknowledged in time. */
static void loss_count(struct dpdk *p, const struct keel_datagram *g)
{
	struct peer *e = &p->peers[g->peer];

	if ((g->flags & KEEL_DGRAM_RETRANSMIT) != 0) {
		e->retransmits++;
		loss_judge(p, e);
	} else if (++e->data_sent % LOSS_CHECK_EVERY == 0) {
		loss_judge(p, e);
	}
}

static int dpdk_send_burst(struct keel_transport *t, uint64_t now_ns, const struct keel_datagram *d,
			   uint32_t count)
{
	struct dpdk *p = dpdk_of(t);
	uint32_t i;

	KEEL_ASSERT(d != NULL || count == 0);
	KEEL_ASSERT(count <= INT32_MAX);
	p->last_now_ns = now_ns;
	if (p->closed)
		return KEEL_ETRANSPORT;
	for (i = 0; i < count; i++) {
		const struct keel_datagram *g = &d[i];
		bool ctrl;
		struct mq *q;
		struct rte_mbuf *m;

		if (g->peer >= t->world_size || !p->peers[g->peer].set || g->len > t->mtu ||
		    (g->buf == NULL && g->len > 0))
			break;
		ctrl = is_control(g);
		q = ctrl ? &p->cq : &p->pq[g->peer];
		if (q->tail - q->head > q->mask)
			tx_flush(p); /* make room if the NIC takes some */
		if (q->tail - q->head > q->mask)
			break;
		m = frame_build(p, g);
		if (m == NULL) {
			p->stats.tx_no_mbuf++;
			break;
		}
		q->slot[q->tail & q->mask] = m;
		q->tail++;
		p->stats.tx_datagrams++;
		if (!ctrl) {
			p->data_queued++;
			if (q->tail - q->head > p->stats.tx_queued_max)
				p->stats.tx_queued_max = q->tail - q->head;
			loss_count(p, g);
		}
	}
	p->stats.tx_refused += count - i;
	tx_flush(p);
	if (i == 0 && count > 0 &&
	    (d[0].peer >= t->world_size || !p->peers[d[0].peer].set || d[0].len > t->mtu ||
	     (d[0].buf == NULL && d[0].len > 0)))
		return -EINVAL;
	return (int)i;
}

/* ---- receive ---------------------------------------------------------------------------- */

/* What the NIC said of a checksum: its receive offload flags, when it checks them. */
static enum dpdk_frame_hw hw_said(const struct dpdk *p, uint64_t flags, uint64_t good, uint64_t bad)
{
	if (!p->rx_cksum_hw)
		return DPDK_FRAME_HW_UNKNOWN;
	return flags == good  ? DPDK_FRAME_HW_GOOD
	       : flags == bad ? DPDK_FRAME_HW_BAD
			      : DPDK_FRAME_HW_UNKNOWN;
}

static void count_drop(struct dpdk *p, enum dpdk_frame_verdict v)
{
	switch (v) {
	case DPDK_FRAME_TRUNCATED:
		p->stats.rx_truncated++;
		break;
	case DPDK_FRAME_BAD_ETHERTYPE:
		p->stats.rx_bad_ethertype++;
		break;
	case DPDK_FRAME_NOT_FOR_US:
		p->stats.rx_not_for_us++;
		break;
	case DPDK_FRAME_BAD_IP:
		p->stats.rx_bad_ip++;
		break;
	case DPDK_FRAME_BAD_CKSUM:
		p->stats.rx_bad_cksum++;
		break;
	case DPDK_FRAME_OK:
		KEEL_ASSERT(!"a frame that passed counted as dropped");
		break;
	}
}

/* Check the headers of frame m (peeked into hdr; frame.c reads them). Returns the sender's
 * rank and the keel payload length, or -1 after counting why the frame was dropped. */
static int frame_check(struct dpdk *p, const struct rte_mbuf *m, const uint8_t *hdr,
		       uint32_t *payload_len)
{
	enum dpdk_frame_hw ip_hw = hw_said(p, m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK,
					   RTE_MBUF_F_RX_IP_CKSUM_GOOD, RTE_MBUF_F_RX_IP_CKSUM_BAD);
	struct dpdk_frame_from from;
	enum dpdk_frame_verdict v =
	    dpdk_frame_check(hdr, rte_pktmbuf_pkt_len(m), &p->self, ip_hw, &from);
	int rank;

	if (v != DPDK_FRAME_OK)
		return count_drop(p, v), -1;
	rank = peer_lookup(p, from.ip, from.udp_port);
	if (rank < 0)
		return p->stats.rx_unknown_source++, -1;
	*payload_len = from.payload_len;
	return rank;
}

/* Validate m and copy its payload into g. True when g now holds a datagram. */
static bool frame_deliver(struct dpdk *p, const struct rte_mbuf *m, struct keel_datagram *g)
{
	uint8_t hdr[PEEK_BYTES];
	const uint8_t *h, *src;
	uint32_t len = 0;
	int rank;

	memset(hdr, 0, sizeof(hdr));
	h = rte_pktmbuf_read(m, 0, min_u32(rte_pktmbuf_pkt_len(m), PEEK_BYTES), hdr);
	if (h == NULL)
		return p->stats.rx_truncated++, false;
	if (h != hdr && rte_pktmbuf_pkt_len(m) < PEEK_BYTES) {
		memcpy(hdr, h, rte_pktmbuf_pkt_len(m)); /* short frame: zero the rest */
		h = hdr;
	}
	p->stats.rx_frames++;
	rank = frame_check(p, m, h, &len);
	if (rank < 0)
		return false;
	if (len > g->cap)
		return p->stats.rx_too_long++, false;
	src = rte_pktmbuf_read(m, KEEL_DPDK_FRAME_OVERHEAD, len, g->buf);
	if (src == NULL)
		return p->stats.rx_truncated++, false;
	if (src != g->buf)
		memcpy(g->buf, src, len);
	if (!dpdk_frame_udp_ok(h, g->buf, len,
			       hw_said(p, m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK,
				       RTE_MBUF_F_RX_L4_CKSUM_GOOD, RTE_MBUF_F_RX_L4_CKSUM_BAD),
			       p->verify_udp))
		return p->stats.rx_bad_cksum++, false;
	g->len = len;
	g->peer = (uint32_t)rank;
	return true;
}

/* Interrupt mode: after a sleep on the event fd, consume the event and go back to polling. */
static void intr_rearm_off(struct dpdk *p)
{
	struct pollfd pf = {.fd = p->intr_fd, .events = POLLIN};
	uint64_t junk;

	if (!p->intr_armed)
		return;
	if (poll(&pf, 1, 0) == 1 && read(p->intr_fd, &junk, sizeof(junk)) < 0)
		junk = 0; /* nothing to consume after all */
	(void)rte_eth_dev_rx_intr_disable(p->port_id, 0);
	p->intr_armed = false;
}

static uint16_t rx_poll(struct dpdk *p, uint32_t n)
{
	uint16_t got = rte_eth_rx_burst(p->port_id, 0, p->rx, (uint16_t)n);

	p->stats.rx_bursts++;
	if (got != 0 || p->stats.rx_mode != KEEL_DPDK_RX_INTERRUPT)
		return got;
	/* Nothing waiting: arm the interrupt, then look once more so a frame that arrived in
	 * between is not left until the next one wakes us. */
	if (rte_eth_dev_rx_intr_enable(p->port_id, 0) == 0)
		p->intr_armed = true;
	got = rte_eth_rx_burst(p->port_id, 0, p->rx, (uint16_t)n);
	if (got != 0)
		intr_rearm_off(p);
	return got;
}

static int dpdk_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			   uint32_t count_max)
{
	struct dpdk *p = dpdk_of(t);
	uint32_t n = min_u32(count_max, p->burst), kept = 0;
	uint16_t got;

	KEEL_ASSERT(d != NULL || count_max == 0);
	p->last_now_ns = now_ns;
	if (p->closed)
		return KEEL_ETRANSPORT;
	if (p->data_queued != 0 || p->cq.tail != p->cq.head)
		tx_flush(p);
	if (n == 0)
		return 0;
	intr_rearm_off(p);
	got = rx_poll(p, n);
	for (uint16_t i = 0; i < got; i++) {
		struct keel_datagram *g = &d[kept];

		if (frame_deliver(p, p->rx[i], g))
			kept++;
		rte_pktmbuf_free(p->rx[i]);
	}
	p->stats.rx_datagrams += kept;
	return (int)kept;
}

static uint64_t dpdk_next_deadline_ns(struct keel_transport *t)
{
	struct dpdk *p = dpdk_of(t);

	if (p->closed)
		return UINT64_MAX;
	if (p->data_queued != 0 || p->cq.tail != p->cq.head)
		return p->last_now_ns; /* frames wait for the TX ring: come back at once */
	if (p->stats.rx_mode == KEEL_DPDK_RX_SLEEP)
		return p->last_now_ns + p->sleep_ns;
	return UINT64_MAX;
}

static int dpdk_wait_fd(struct keel_transport *t)
{
	struct dpdk *p = dpdk_of(t);

	return p->closed || p->stats.rx_mode != KEEL_DPDK_RX_INTERRUPT ? -1 : p->intr_fd;
}

static void mq_free(struct mq *q)
{
	/* Bounded by the queue's capacity. */
	while (q->head != q->tail) {
		rte_pktmbuf_free(q->slot[q->head & q->mask]);
		q->head++;
	}
}

static void dpdk_fini(struct keel_transport *t)
{
	struct dpdk *p;

	if (t == NULL)
		return; /* a failed init leaves *out NULL */
	p = dpdk_of(t);
	if (p->closed)
		return;
	p->closed = true;
	if (p->port_open) {
		(void)rte_eth_dev_stop(p->port_id);
		(void)rte_eth_dev_close(p->port_id);
		p->port_open = false;
	}
	mq_free(&p->cq);
	for (uint32_t r = 0; r < t->world_size; r++)
		mq_free(&p->pq[r]);
	p->data_queued = 0;
	if (p->pool != NULL)
		rte_mempool_free(p->pool);
	p->pool = NULL;
	p->intr_fd = -1;
}

static const struct keel_transport_ops dpdk_ops = {
    .name = "dpdk",
    .send_burst = dpdk_send_burst,
    .recv_burst = dpdk_recv_burst,
    .next_deadline_ns = dpdk_next_deadline_ns,
    .wait_fd = dpdk_wait_fd,
    .fini = dpdk_fini,
};
