/* The ibverbs RC transport (see include/keel/transport_verbs.h for the protocol). All state and
 * every slot live in the caller's memory, registered once; nothing is allocated after init and
 * nothing a peer sends (immediates, lengths, credits) is trusted before it is checked. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "keel/transport_verbs.h"
#include "verbs_int.h"

#define PAGE_BYTES	  4096u
#define CACHE_LINE_BYTES  64u
#define WC_BURST	  32u /* completions per ibv_poll_cq */
#define POLLS_PER_RECV	  4u  /* bounded work per recv_burst */
#define CHAIN_MAX	  64u /* work requests in one ibv_post_send chain */
#define ASYNC_CHECK_EVERY 64u /* recv_burst calls between two reads of the async fd */
#define MAILBOX_BYTES	  64u /* credit word written by the peer, own cache line */
#define CREDIT_SRC_BYTES  64u
#define IMM_SLOT_SHIFT	  20u
#define IMM_DEVICE	  (1u << 19) /* the payload went to the receiver's device area */
#define IMM_GEN_MASK	  0x7ffffu
/* A device message's host slot: the header, then the payload's length (little endian). */
#define DEV_TRAILER_BYTES 4u
#define RX_LEN_DEVICE	  (1u << 31) /* rx_len flag: the message's payload is in device slots */
/* The announcement of a device area, in the peer's mailbox line after the credit word: its
 * base (8 bytes) and rkey (4), then a magic word written by a later WRITE, so a reader that
 * sees the magic sees the rest (RC places one WRITE's data before the next one's). */
#define ANNOUNCE_OFF	   8u
#define ANNOUNCE_LEN	   12u
#define ANNOUNCE_MAGIC_OFF 20u
#define ANNOUNCE_MAGIC	   0x6b64724bu /* "Krdk" */
#define WRID_KIND_SHIFT	   62u
#define WRID_PEER_SHIFT	   32u
#define PSN_MASK	   0xffffffu
#define SLOT_BYTES_DEFAULT 65536u
/* Credits arrive by RDMA WRITE, which raises no completion at the writer: while a sender
 * waits for them, it asks to be polled again this soon instead of sleeping to its deadline. */
#define CREDIT_POLL_NS 50000ull
#define SGE_MAX	       2u /* a datagram's header and its tail */
/* A keepalive (see keepalive_scan) is never posted more often than this per peer. */
#define KEEPALIVE_MIN_NS 1000000ull

_Static_assert(KEEL_VERBS_SLOTS_MAX <= (1u << (32 - IMM_SLOT_SHIFT)), "slot fits the immediate");
_Static_assert(KEEL_WORLD_MAX < (1u << 30), "peer fits the work request id");

enum wrid_kind { WR_DATA = 0, WR_RECV = 1, WR_CREDIT = 2 };
enum peer_state { PEER_IDLE = 0, PEER_CONNECTED, PEER_FAILED };

struct vpeer {
	struct ibv_qp *qp;
	uint32_t state;
	uint32_t rkey;
	uint64_t raddr_slots;	/* the peer's slots for our messages */
	uint64_t raddr_mailbox; /* the peer's mailbox for our credits */
	uint32_t tx_seq;	/* messages posted to the peer */
	uint32_t tx_credit;	/* of which the peer consumed (its last mailbox value) */
	uint32_t tx_done;	/* of which the send WR completed: send slots free */
	uint32_t sq_posted, sq_done;
	uint32_t rx_seq;       /* messages received and validated */
	uint32_t rx_consumed;  /* of which delivered to the caller */
	uint32_t rx_credited;  /* consumed count last written to the peer's mailbox */
	uint64_t last_post_ns; /* time of the last WR posted to the peer */
	uint32_t rx_freed;     /* of the consumed, those whose slots are free again: the credit */
	uint32_t dev_rkey;     /* the peer's device area for our payloads (0: none announced) */
	uint64_t raddr_dev;
	bool announce_due; /* our device area is still to be announced to the peer */
	uint8_t *rx_slots, *tx_slots;
	volatile uint64_t *mailbox;
	uint64_t *credit_src;
	uint32_t *sq_mark; /* [sq_depth]: tx_seq after each send WR */
	uint32_t *rx_len;  /* [slot_count] */
	uint8_t *rx_hold;  /* [slot_count]: delivered with its payload in our device area and
			    * not released yet (keel_transport_ops.rx_release) */
};

/* Caller memory registered for sends from where payloads lie (keel_verbs_register). */
struct vregion {
	struct ibv_mr *mr; /* NULL: a free entry */
	uintptr_t lo, hi;
	bool dmabuf;
	uint32_t *mark; /* [world_size]: the peer's sq_posted after the last WR reading it */
};

struct verbs {
	struct keel_transport t;
	struct keel_verbs_config cfg;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *channel;
	struct ibv_cq *cq;
	struct vpeer *peers;
	uint8_t *region;
	size_t region_len, stride;
	uint32_t sq_depth, sig_interval, credit_batch, inline_max;
	int gid_index;
	uint8_t port, link_layer, active_mtu;
	uint16_t lid;
	union ibv_gid gid;
	bool down, armed;
	bool credit_wait;     /* a burst ended for want of credits: poll the mailboxes soon */
	uint64_t last_now_ns; /* time of the last send/recv call */
	uint64_t keepalive_ns, keepalive_next_ns; /* period of keepalive_scan, its next run */
	bool keepalive_due;			  /* a peer holds our messages: scan again */
	uint32_t rr, calls;
	char dev_name[KEEL_VERBS_DEV_NAME_LEN];
	struct ibv_wc wc[WC_BURST];
	struct ibv_send_wr swr[CHAIN_MAX];
	struct ibv_sge ssge[CHAIN_MAX][SGE_MAX];
	struct vregion regions[KEEL_VERBS_REGIONS_MAX];
	uint32_t region_count;
	struct ibv_mr *dev_mr;	     /* our device area, where peers write payloads (dma-buf) */
	uint8_t *dev_base;	     /* its device address */
	bool announce_due;	     /* some peer has not been told of it yet */
	uint8_t wr_dgram[CHAIN_MAX]; /* of each WR in v->swr: its datagram's place in the chain */
	struct ibv_recv_wr *rwr;     /* [slot_count] */
	struct ibv_sge *rsge;	     /* [slot_count] */
	struct keel_verbs_stats st;
};

struct layout {
	size_t peers, sq_mark, rx_len, rx_hold, marks, rwr, rsge, region, stride, total;
	uint32_t sq_depth;
};

static const struct keel_transport_ops verbs_ops;

static size_t align_to(size_t n, size_t a)
{
	return (n + a - 1) & ~(a - 1);
}

static bool is_pow2(uint32_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

/* rdma-core returns +errno, -1 with errno, or NULL with errno: all become -errno here. */
static int neg_errno(int rc)
{
	if (rc > 0)
		return -rc;
	return errno > 0 ? -errno : -EIO;
}

static int null_errno(void)
{
	return errno > 0 ? -errno : -ENOMEM;
}

void keel_verbs_config_default(struct keel_verbs_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->world_size = 1;
	cfg->gid_index = -1;
	cfg->slot_bytes = SLOT_BYTES_DEFAULT;
	cfg->slot_count = KEEL_VERBS_SLOTS_DEFAULT;
	cfg->send_max_bytes = 1024;
	cfg->inline_bytes = 128;
	cfg->timeout = KEEL_VERBS_TIMEOUT_DEFAULT;
	cfg->retry_cnt = KEEL_VERBS_RETRY_DEFAULT;
	cfg->rnr_retry = 7;
	cfg->poll_mode = KEEL_VERBS_POLL_BUSY;
}

uint64_t keel_verbs_nic_detect_ns(const struct keel_verbs_config *cfg)
{
	KEEL_ASSERT(cfg != NULL && cfg->timeout < 32);
	return (uint64_t)(cfg->retry_cnt + 1u) * 4096ull * (1ull << cfg->timeout);
}

static bool config_ok(const struct keel_verbs_config *c)
{
	return c != NULL && c->world_size >= 1 && c->world_size <= KEEL_WORLD_MAX &&
	       c->rank < c->world_size && c->slot_bytes >= KEEL_MTU_MIN &&
	       c->slot_bytes <= (1u << 30) && c->slot_bytes % 8 == 0 && is_pow2(c->slot_count) &&
	       c->slot_count >= 2 && c->slot_count <= KEEL_VERBS_SLOTS_MAX &&
	       c->send_max_bytes <= c->slot_bytes && c->timeout >= 1 && c->timeout <= 31 &&
	       c->retry_cnt <= 7 && c->rnr_retry <= 7 &&
	       (c->poll_mode == KEEL_VERBS_POLL_BUSY || c->poll_mode == KEEL_VERBS_POLL_EVENT);
}

static void layout_of(const struct keel_verbs_config *c, struct layout *l)
{
	size_t w = c->world_size, s = c->slot_count;
	l->sq_depth = 2 * c->slot_count;
	size_t off = align_to(sizeof(struct verbs), CACHE_LINE_BYTES);
	l->peers = off;
	off = align_to(off + w * sizeof(struct vpeer), CACHE_LINE_BYTES);
	l->sq_mark = off;
	off = align_to(off + w * l->sq_depth * sizeof(uint32_t), CACHE_LINE_BYTES);
	l->rx_len = off;
	off = align_to(off + w * s * sizeof(uint32_t), CACHE_LINE_BYTES);
	l->rx_hold = off;
	off = align_to(off + w * s, CACHE_LINE_BYTES);
	l->marks = off;
	off = align_to(off + KEEL_VERBS_REGIONS_MAX * w * sizeof(uint32_t), CACHE_LINE_BYTES);
	l->rwr = off;
	off = align_to(off + s * sizeof(struct ibv_recv_wr), CACHE_LINE_BYTES);
	l->rsge = off;
	off = align_to(off + s * sizeof(struct ibv_sge), PAGE_BYTES);
	/* per sender: receive slots, send slots, mailbox, credit source */
	l->stride = align_to(2 * s * c->slot_bytes + MAILBOX_BYTES + CREDIT_SRC_BYTES, PAGE_BYTES);
	l->region = off;
	/* the caller's memory may start anywhere in a page */
	l->total = off + w * l->stride + PAGE_BYTES;
}

size_t keel_verbs_storage_size(const struct keel_verbs_config *cfg)
{
	if (!config_ok(cfg))
		return 0;
	struct layout l;
	layout_of(cfg, &l);
	return l.total;
}

/* Carve `mem` (its start aligned to a page so the region is page aligned too). */
static struct verbs *carve(void *mem, size_t mem_len, const struct keel_verbs_config *cfg)
{
	struct layout l;
	layout_of(cfg, &l);
	uint8_t *base = (uint8_t *)align_to((uintptr_t)mem, PAGE_BYTES);
	if (mem_len < l.total || (size_t)(base - (uint8_t *)mem) + l.total - PAGE_BYTES > mem_len)
		return NULL;
	memset(base, 0, l.total - PAGE_BYTES);
	struct verbs *v = (struct verbs *)base;
	v->cfg = *cfg;
	v->cfg.device = NULL; /* the caller's string need not outlive init */
	v->peers = (struct vpeer *)(base + l.peers);
	v->rwr = (struct ibv_recv_wr *)(base + l.rwr);
	v->rsge = (struct ibv_sge *)(base + l.rsge);
	v->region = base + l.region;
	v->stride = l.stride;
	v->region_len = cfg->world_size * l.stride;
	v->sq_depth = l.sq_depth;
	for (uint32_t i = 0; i < KEEL_VERBS_REGIONS_MAX; i++)
		v->regions[i].mark = (uint32_t *)(base + l.marks) + (size_t)i * cfg->world_size;
	v->sig_interval = cfg->slot_count / 2;
	v->credit_batch = cfg->slot_count / 4 != 0 ? cfg->slot_count / 4 : 1;
	/* one ACK timeout: a dead peer's QP always has a request in its retry window */
	v->keepalive_ns = 4096ull << cfg->timeout;
	if (v->keepalive_ns < KEEPALIVE_MIN_NS)
		v->keepalive_ns = KEEPALIVE_MIN_NS;
	size_t slots_len = (size_t)cfg->slot_count * cfg->slot_bytes;
	for (uint32_t p = 0; p < cfg->world_size; p++) {
		struct vpeer *q = &v->peers[p];
		uint8_t *area = v->region + p * l.stride;
		q->rx_slots = area;
		q->tx_slots = area + slots_len;
		q->mailbox = (volatile uint64_t *)(area + 2 * slots_len);
		q->credit_src = (uint64_t *)(area + 2 * slots_len + MAILBOX_BYTES);
		q->sq_mark = (uint32_t *)(base + l.sq_mark) + (size_t)p * l.sq_depth;
		q->rx_len = (uint32_t *)(base + l.rx_len) + (size_t)p * cfg->slot_count;
		q->rx_hold = base + l.rx_hold + (size_t)p * cfg->slot_count;
	}
	return v;
}

static int open_device(struct verbs *v, const char *name)
{
	int n = 0;
	struct ibv_device **list = keel_ibv_get_device_list(&n);
	if (list == NULL)
		return null_errno() == -ENOSYS ? -ENODEV : null_errno();
	int rc = -ENODEV;
	for (int i = 0; i < n && v->ctx == NULL; i++) {
		const char *dn = keel_ibv_get_device_name(list[i]);
		if (name != NULL && *name != '\0' && (dn == NULL || strcmp(dn, name) != 0))
			continue;
		v->ctx = keel_ibv_open_device(list[i]);
		if (v->ctx == NULL) {
			rc = null_errno();
			continue;
		}
		struct ibv_device_attr da;
		struct ibv_port_attr pa;
		bool found = false;
		if (keel_ibv_query_device(v->ctx, &da) == 0) {
			for (uint8_t p = 1; p <= da.phys_port_cnt && !found; p++) {
				if (v->cfg.port != 0 && p != v->cfg.port)
					continue;
				found = keel_ibv_query_port(v->ctx, p, &pa) == 0 &&
					pa.state == IBV_PORT_ACTIVE;
				if (found) {
					v->port = p;
					v->lid = pa.lid;
					v->link_layer = pa.link_layer;
					v->active_mtu = (uint8_t)pa.active_mtu;
				}
			}
		}
		if (!found) {
			keel_ibv_close_device(v->ctx);
			v->ctx = NULL;
			continue;
		}
		snprintf(v->dev_name, sizeof(v->dev_name), "%s", dn != NULL ? dn : "?");
		rc = 0;
	}
	keel_ibv_free_device_list(list);
	return rc;
}

static bool gid_is_v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static bool gid_is_zero(const union ibv_gid *g)
{
	static const uint8_t zero[16];
	return memcmp(g->raw, zero, sizeof(zero)) == 0;
}

/* RoCE: a RoCEv2 IPv4-mapped GID first (routable, and the one that works on rxe over lo),
 * then any RoCEv2 GID, then any GID. InfiniBand: index 0 (LID routing needs no GRH). */
static int choose_gid(struct verbs *v, int wanted)
{
	union ibv_gid g;
	uint32_t type;
	if (wanted >= 0) {
		int rc = keel_ibv_query_gid(v->ctx, v->port, wanted, &g, &type);
		if (rc != 0 || gid_is_zero(&g))
			return -ENOENT;
		v->gid = g;
		v->gid_index = wanted;
		return 0;
	}
	for (int pass = 0; pass < 3; pass++) {
		for (int i = 0; i < 256; i++) {
			int rc = keel_ibv_query_gid(v->ctx, v->port, i, &g, &type);
			if (rc == -EINVAL || rc == -ENOENT)
				break; /* past the table */
			if (rc != 0 || gid_is_zero(&g))
				continue;
			bool v2 = type == IBV_GID_TYPE_ROCE_V2;
			if ((pass == 0 && v2 && gid_is_v4_mapped(&g)) || (pass == 1 && v2) ||
			    pass == 2) {
				v->gid = g;
				v->gid_index = i;
				return 0;
			}
		}
	}
	if (v->link_layer != IBV_LINK_LAYER_ETHERNET) {
		v->gid_index = 0;
		return 0;
	}
	return -ENOENT;
}

static int create_qp(struct verbs *v, struct vpeer *q)
{
	struct ibv_qp_init_attr a;
	uint32_t inl = v->cfg.inline_bytes;
	for (int attempt = 0; attempt < 2; attempt++) {
		memset(&a, 0, sizeof(a));
		a.send_cq = v->cq;
		a.recv_cq = v->cq;
		a.qp_type = IBV_QPT_RC;
		a.sq_sig_all = 0;
		a.cap.max_send_wr = v->sq_depth;
		a.cap.max_recv_wr = v->cfg.slot_count;
		a.cap.max_send_sge = SGE_MAX;
		a.cap.max_recv_sge = 1;
		a.cap.max_inline_data = inl;
		q->qp = keel_ibv_create_qp(v->pd, &a);
		if (q->qp != NULL)
			break;
		if (inl == 0)
			return null_errno();
		inl = 0; /* a device without inline sends: copy into send slots instead */
	}
	if (q->qp == NULL)
		return null_errno();
	v->inline_max = a.cap.max_inline_data < inl ? a.cap.max_inline_data : inl;
	struct ibv_qp_attr m;
	memset(&m, 0, sizeof(m));
	m.qp_state = IBV_QPS_INIT;
	m.pkey_index = 0;
	m.port_num = v->port;
	m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	int rc = keel_ibv_modify_qp(
	    q->qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	return rc == 0 ? 0 : neg_errno(rc);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno > 0 ? -errno : -EIO;
	return 0;
}

static void release(struct verbs *v)
{
	if (v->dev_mr != NULL)
		(void)keel_ibv_dereg_mr(v->dev_mr);
	v->dev_mr = NULL;
	for (uint32_t i = 0; i < KEEL_VERBS_REGIONS_MAX; i++) {
		if (v->regions[i].mr != NULL)
			(void)keel_ibv_dereg_mr(v->regions[i].mr);
		v->regions[i].mr = NULL;
	}
	v->region_count = 0;
	for (uint32_t p = 0; v->peers != NULL && p < v->cfg.world_size; p++) {
		if (v->peers[p].qp != NULL)
			(void)keel_ibv_destroy_qp(v->peers[p].qp);
		v->peers[p].qp = NULL;
	}
	if (v->cq != NULL)
		(void)keel_ibv_destroy_cq(v->cq);
	if (v->channel != NULL)
		(void)keel_ibv_destroy_comp_channel(v->channel);
	if (v->mr != NULL)
		(void)keel_ibv_dereg_mr(v->mr);
	if (v->pd != NULL)
		(void)keel_ibv_dealloc_pd(v->pd);
	if (v->ctx != NULL)
		(void)keel_ibv_close_device(v->ctx);
	v->cq = NULL;
	v->channel = NULL;
	v->mr = NULL;
	v->pd = NULL;
	v->ctx = NULL;
}

static int make_resources(struct verbs *v)
{
	const struct keel_verbs_config *c = &v->cfg;
	v->pd = keel_ibv_alloc_pd(v->ctx);
	if (v->pd == NULL)
		return null_errno();
	v->mr = keel_ibv_reg_mr(v->pd, v->region, v->region_len,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (v->mr == NULL)
		return null_errno();
	if (c->poll_mode == KEEL_VERBS_POLL_EVENT) {
		v->channel = keel_ibv_create_comp_channel(v->ctx);
		if (v->channel == NULL)
			return null_errno();
		int rc = set_nonblock(v->channel->fd);
		if (rc != 0)
			return rc;
	}
	uint64_t cqe = c->cq_entries != 0
			   ? c->cq_entries
			   : (uint64_t)(c->world_size - 1) * (v->sq_depth + c->slot_count) + 16;
	struct ibv_device_attr da;
	if (keel_ibv_query_device(v->ctx, &da) == 0 && da.max_cqe > 0 && cqe > (uint64_t)da.max_cqe)
		cqe = (uint64_t)da.max_cqe;
	v->cq = keel_ibv_create_cq(v->ctx, (int)cqe, v->channel);
	if (v->cq == NULL)
		return null_errno();
	if (v->ctx->async_fd >= 0) {
		int rc = set_nonblock(v->ctx->async_fd);
		if (rc != 0)
			return rc;
	}
	for (uint32_t p = 0; p < c->world_size; p++) {
		if (p == c->rank)
			continue;
		int rc = create_qp(v, &v->peers[p]);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int keel_verbs_init(struct keel_transport **out, void *mem, size_t mem_len,
		    const struct keel_verbs_config *cfg)
{
	KEEL_ASSERT(out != NULL);
	*out = NULL;
	if (!config_ok(cfg) || mem == NULL)
		return -EINVAL;
	struct verbs *v = carve(mem, mem_len, cfg);
	if (v == NULL)
		return -ENOSPC;
	uint32_t mtu = cfg->slot_bytes < KEEL_MTU_MAX ? cfg->slot_bytes : KEEL_MTU_MAX;
	v->t = (struct keel_transport){.ops = &verbs_ops,
				       .state = v,
				       .caps = KEEL_CAP_RELIABLE | KEEL_CAP_ORDERED |
					       KEEL_CAP_RDMA_WRITE | KEEL_CAP_GATHER,
				       .mtu = mtu,
				       .rank = cfg->rank,
				       .world_size = cfg->world_size};
	int rc = open_device(v, cfg->device);
	if (rc != 0)
		goto fail;
	rc = choose_gid(v, cfg->gid_index);
	if (rc != 0)
		goto fail;
	rc = make_resources(v);
	if (rc != 0)
		goto fail;
	v->st.inline_max = v->inline_max;
	v->st.signal_interval = v->sig_interval;
	*out = &v->t;
	return 0;
fail:
	release(v);
	return rc;
}

static struct verbs *of(struct keel_transport *t)
{
	KEEL_ASSERT(t != NULL && t->ops == &verbs_ops);
	return t->state;
}

void keel_verbs_local_addr(struct keel_transport *t, struct keel_verbs_addr *out)
{
	struct verbs *v = of(t);
	memset(out, 0, sizeof(*out));
	memcpy(out->gid, v->gid.raw, 16);
	out->lid = v->lid;
	out->mtu = v->active_mtu;
	out->rkey = v->mr != NULL ? v->mr->rkey : 0;
	out->base = (uint64_t)(uintptr_t)v->region;
	out->stride = (uint32_t)v->stride;
	out->slot_bytes = v->cfg.slot_bytes;
	out->slot_count = v->cfg.slot_count;
}

uint32_t keel_verbs_local_qpn(struct keel_transport *t, uint32_t peer)
{
	struct verbs *v = of(t);
	if (peer >= v->cfg.world_size || v->peers[peer].qp == NULL)
		return 0;
	return v->peers[peer].qp->qp_num;
}

const char *keel_verbs_device_name(struct keel_transport *t)
{
	return of(t)->dev_name;
}

int keel_verbs_gid_index(struct keel_transport *t)
{
	return of(t)->gid_index;
}

bool keel_verbs_peer_failed(struct keel_transport *t, uint32_t peer)
{
	struct verbs *v = of(t);
	return peer < v->cfg.world_size && v->peers[peer].state == PEER_FAILED;
}

void keel_verbs_stats_get(struct keel_transport *t, struct keel_verbs_stats *out)
{
	*out = of(t)->st;
}

/* Both ends derive the starting PSN of each direction from the ranks: nothing to exchange. */
static uint32_t psn_of(uint32_t from, uint32_t to)
{
	uint32_t x = from * 0x9e3779b1u ^ (to + 0x7f4a7c15u) * 0x85ebca6bu;
	x ^= x >> 15;
	return x & PSN_MASK;
}

static uint64_t wrid(enum wrid_kind k, uint32_t peer, uint32_t low)
{
	return (uint64_t)k << WRID_KIND_SHIFT | (uint64_t)peer << WRID_PEER_SHIFT | low;
}

static void recv_wr_for(struct verbs *v, uint32_t peer, uint32_t slot, struct ibv_recv_wr *wr,
			struct ibv_sge *sge)
{
	struct vpeer *q = &v->peers[peer];
	sge->addr = (uint64_t)(uintptr_t)(q->rx_slots + (size_t)slot * v->cfg.slot_bytes);
	sge->length = v->cfg.slot_bytes;
	sge->lkey = v->mr->lkey;
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = wrid(WR_RECV, peer, slot);
	wr->sg_list = sge;
	wr->num_sge = 1;
}

static int modify_rtr_rts(struct verbs *v, uint32_t peer, const struct keel_verbs_addr *r,
			  uint32_t rqpn)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)(r->mtu < v->active_mtu ? r->mtu : v->active_mtu);
	a.dest_qp_num = rqpn;
	a.rq_psn = psn_of(peer, v->cfg.rank);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = r->lid;
	a.ah_attr.port_num = v->port;
	if (v->link_layer == IBV_LINK_LAYER_ETHERNET || !gid_is_zero(&v->gid)) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	struct ibv_qp *qp = v->peers[peer].qp;
	int rc = keel_ibv_modify_qp(qp, &a,
				    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					IBV_QP_MIN_RNR_TIMER);
	if (rc != 0)
		return neg_errno(rc);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = v->cfg.timeout;
	a.retry_cnt = v->cfg.retry_cnt;
	a.rnr_retry = v->cfg.rnr_retry;
	a.sq_psn = psn_of(v->cfg.rank, peer);
	a.max_rd_atomic = 1;
	rc = keel_ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	return rc == 0 ? 0 : neg_errno(rc);
}

int keel_verbs_connect(struct keel_transport *t, uint32_t peer, const struct keel_verbs_addr *r,
		       uint32_t remote_qpn)
{
	struct verbs *v = of(t);
	KEEL_ASSERT(r != NULL);
	if (peer >= v->cfg.world_size || peer == v->cfg.rank || remote_qpn == 0 ||
	    r->slot_bytes != v->cfg.slot_bytes || r->slot_count != v->cfg.slot_count ||
	    r->stride < 2ull * r->slot_count * r->slot_bytes + MAILBOX_BYTES ||
	    v->peers[peer].state != PEER_IDLE)
		return -EINVAL;
	struct vpeer *q = &v->peers[peer];
	int rc = modify_rtr_rts(v, peer, r, remote_qpn);
	if (rc != 0)
		return rc;
	uint32_t s = v->cfg.slot_count;
	for (uint32_t i = 0; i < s; i++) {
		recv_wr_for(v, peer, i, &v->rwr[i], &v->rsge[i]);
		v->rwr[i].next = i + 1 < s ? &v->rwr[i + 1] : NULL;
	}
	struct ibv_recv_wr *bad = NULL;
	rc = keel_ibv_post_recv(q->qp, v->rwr, &bad);
	if (rc != 0)
		return neg_errno(rc);
	/* our area at the peer is indexed by our rank */
	uint64_t area = r->base + (uint64_t)v->cfg.rank * r->stride;
	q->rkey = r->rkey;
	q->raddr_slots = area;
	q->raddr_mailbox = area + 2ull * s * r->slot_bytes;
	q->last_post_ns = v->last_now_ns;
	q->state = PEER_CONNECTED;
	if (v->dev_mr != NULL)
		q->announce_due = v->announce_due = true;
	return 0;
}

static void peer_fail(struct verbs *v, uint32_t peer)
{
	if (peer >= v->cfg.world_size || v->peers[peer].state == PEER_FAILED)
		return;
	v->peers[peer].state = PEER_FAILED;
	/* Into the error state: the NIC stops reading our memory for this peer (a registered
	 * region may then be let go) and the peer's QP fails too, so it fences us as well. */
	if (v->peers[peer].qp != NULL) {
		struct ibv_qp_attr m;
		memset(&m, 0, sizeof(m));
		m.qp_state = IBV_QPS_ERR;
		(void)keel_ibv_modify_qp(v->peers[peer].qp, &m, IBV_QP_STATE);
	}
	if (v->st.peers_failed++ == 0)
		v->st.first_fail_ns = v->last_now_ns;
}

static uint32_t poll_completions(struct verbs *v);

/* ---- send side ---- */

/* Read the peer's consumed count from our mailbox: untrusted, so it may only move forward and
 * never past what we sent. */
static void refresh_credit(struct verbs *v, struct vpeer *q)
{
	uint32_t seen = (uint32_t)__atomic_load_n(q->mailbox, __ATOMIC_ACQUIRE);
	uint32_t ahead = seen - q->tx_credit;
	if (ahead == 0)
		return;
	if (ahead > q->tx_seq - q->tx_credit) {
		v->st.rx_bad_credit++;
		return;
	}
	q->tx_credit = seen;
}

static bool next_signaled(struct verbs *v, struct vpeer *q)
{
	return q->sq_posted % v->sig_interval == v->sig_interval - 1;
}

/* Post a chain of `n` WRs carrying `dgrams` datagrams for one peer. Returns how many datagrams
 * were posted (all on success); on a bad_wr its datagram and the later ones are rolled back
 * from the peer's counters (a device payload's WRITE before it may have gone: the datagram is
 * sent again whole, into the same slots). */
static uint32_t post_chain(struct verbs *v, uint32_t peer, uint32_t n, uint32_t dgrams,
			   uint32_t tx_seq0, uint32_t sq0)
{
	struct vpeer *q = &v->peers[peer];
	if (n == 0)
		return 0;
	v->swr[n - 1].next = NULL;
	struct ibv_send_wr *bad = NULL;
	v->st.tx_posts++;
	int rc = keel_ibv_post_send(q->qp, v->swr, &bad);
	q->last_post_ns = v->last_now_ns;
	if (rc == 0)
		return dgrams;
	v->st.tx_bad_wr++;
	uint32_t ok = n;
	for (uint32_t i = 0; i < n; i++)
		if (&v->swr[i] == bad)
			ok = i;
	if (bad == NULL || ok == n)
		ok = 0; /* the provider did not say: assume nothing went */
	uint32_t sent = v->wr_dgram[ok];
	KEEL_ASSERT(sent < dgrams);
	q->tx_seq = tx_seq0 + sent;
	q->sq_posted = sq0 + ok;
	/* A QP that refuses work for any reason other than a full queue is broken. */
	int e = neg_errno(rc);
	if (e != -ENOMEM && e != -EAGAIN)
		peer_fail(v, peer);
	return sent;
}

/* The registered region holding all of [p, p + len), or NULL. */
static struct vregion *region_of(struct verbs *v, const uint8_t *p, uint32_t len)
{
	uintptr_t lo = (uintptr_t)p;
	for (uint32_t i = 0, seen = 0; seen < v->region_count; i++) {
		struct vregion *r = &v->regions[i];
		if (r->mr == NULL)
			continue;
		seen++;
		if (lo >= r->lo && lo <= r->hi && len <= r->hi - lo)
			return r;
	}
	return NULL;
}

static void add_sge(struct ibv_send_wr *wr, const void *p, uint32_t len, uint32_t lkey)
{
	if (len == 0)
		return;
	wr->sg_list[wr->num_sge++] =
	    (struct ibv_sge){.addr = (uint64_t)(uintptr_t)p, .length = len, .lkey = lkey};
}

/* A tail the core says is device memory is read by the NIC or not sent: a copy by the CPU
 * would fault (device_tail_ok said no, or the region went since it said yes). */
static bool device_tail_unread(struct verbs *v, const struct keel_datagram *d,
			       const struct vregion *zc)
{
	if ((d->flags & KEEL_DGRAM_DEVICE_TAIL) == 0 || (zc != NULL && zc->dmabuf))
		return false;
	v->st.tx_device_refused++;
	return true;
}

/* The peer's device area for our payloads, once its announcement arrived in our mailbox line
 * (untrusted: a base or rkey of 0 is none). */
static bool peer_device_area(struct vpeer *q)
{
	if (q->dev_rkey != 0)
		return true;
	const volatile uint8_t *line = (const volatile uint8_t *)q->mailbox;
	uint32_t magic =
	    __atomic_load_n((const uint32_t *)(line + ANNOUNCE_MAGIC_OFF), __ATOMIC_ACQUIRE);
	if (magic != ANNOUNCE_MAGIC)
		return false;
	uint64_t base;
	uint32_t rkey;
	memcpy(&base, (const uint8_t *)line + ANNOUNCE_OFF, 8);
	memcpy(&rkey, (const uint8_t *)line + ANNOUNCE_OFF + 8, 4);
	if (base == 0 || rkey == 0)
		return false;
	q->raddr_dev = base;
	q->dev_rkey = rkey;
	return true;
}

/* The WR that writes a device tail into our slot of the peer's device area (v->swr[i]); the
 * header's WRITE_WITH_IMM follows it on the same QP, so its completion at the peer comes after
 * the payload is placed. */
static void payload_write(struct verbs *v, uint32_t peer, const struct keel_datagram *d,
			  const struct vregion *zc, uint32_t slot, uint32_t i, uint8_t dgram)
{
	struct vpeer *q = &v->peers[peer];
	struct ibv_send_wr *wr = &v->swr[i];
	memset(wr, 0, sizeof(*wr));
	wr->sg_list = v->ssge[i];
	add_sge(wr, d->tail, d->tail_len, zc->mr->lkey);
	wr->opcode = IBV_WR_RDMA_WRITE;
	wr->wr.rdma.remote_addr =
	    q->raddr_dev + ((uint64_t)v->cfg.rank * v->cfg.slot_count + slot) * v->cfg.slot_bytes;
	wr->wr.rdma.rkey = q->dev_rkey;
	wr->wr_id = wrid(WR_DATA, peer, q->sq_posted);
	if (next_signaled(v, q))
		wr->send_flags = IBV_SEND_SIGNALED;
	if (i > 0)
		v->swr[i - 1].next = wr;
	v->wr_dgram[i] = dgram;
	q->sq_mark[q->sq_posted % v->sq_depth] = q->tx_seq; /* its slot is not done yet */
	q->sq_posted++;
	v->st.tx_device_writes++;
}

/* The pieces of the WR into the peer's host slot: inline, or the header copied into our send
 * slot followed by the payload (from where it lies when registered, else copied after it), or,
 * when the payload went to the peer's device area, the header and the payload's length. */
static void host_slot_sges(struct verbs *v, struct vpeer *q, const struct keel_datagram *d,
			   const struct vregion *zc, bool inl, bool to_dev, uint32_t slot,
			   struct ibv_send_wr *wr)
{
	uint32_t total = d->len + d->tail_len;
	if (inl) { /* the provider copies both pieces at post */
		add_sge(wr, d->buf, d->len, v->mr->lkey);
		add_sge(wr, d->tail, d->tail_len, v->mr->lkey);
	} else {
		uint8_t *dst = q->tx_slots + (size_t)slot * v->cfg.slot_bytes;
		memcpy(dst, d->buf, d->len);
		if (to_dev) {
			uint8_t *tr = dst + d->len;
			for (uint32_t b = 0; b < DEV_TRAILER_BYTES; b++)
				tr[b] = (uint8_t)(d->tail_len >> (8 * b));
			add_sge(wr, dst, d->len + DEV_TRAILER_BYTES, v->mr->lkey);
			v->st.tx_zero_copy++;
		} else if (zc != NULL) {
			add_sge(wr, dst, d->len, v->mr->lkey);
			add_sge(wr, d->tail, d->tail_len, zc->mr->lkey);
			v->st.tx_zero_copy++;
		} else {
			if (d->tail_len != 0)
				memcpy(dst + d->len, d->tail, d->tail_len);
			add_sge(wr, dst, total, v->mr->lkey);
		}
	}
}

/* Build the WRs for datagram d (one or two pieces) into v->swr[i] on. Returns how many (0 when
 * the peer has no room). The header always lands in a send slot (or inline); a tail is copied
 * after it, unless it lies in a registered region: then the WR gathers it from there, signaled,
 * so keel_verbs_unregister learns when the NIC is done reading. A device tail to a peer that
 * announced a device area goes there by its own WRITE (GPU to GPU), and the header, with the
 * payload's length after it, into the host slot by the WRITE_WITH_IMM that follows it. */
static uint32_t build_data_wr(struct verbs *v, uint32_t peer, const struct keel_datagram *d,
			      uint32_t i)
{
	struct vpeer *q = &v->peers[peer];
	uint32_t s = v->cfg.slot_count;
	if (q->tx_seq - q->tx_credit >= s)
		refresh_credit(v, q);
	if (q->tx_seq - q->tx_credit >= s) {
		v->st.tx_no_credit++;
		v->credit_wait = true;
		return 0;
	}
	uint32_t total = d->len + d->tail_len;
	bool small = total <= v->cfg.send_max_bytes;
	struct vregion *zc =
	    d->tail_len != 0 && v->region_count != 0 ? region_of(v, d->tail, d->tail_len) : NULL;
	/* Inline, the CPU copies the pieces at post: a few bytes of host memory, never a
	 * dma-buf's (device memory). */
	bool inl = small && total <= v->inline_max && (zc == NULL || !zc->dmabuf);
	if (inl)
		zc = NULL;
	if (device_tail_unread(v, d, zc))
		return 0;
	bool to_dev = !small && zc != NULL && zc->dmabuf &&
		      (d->flags & (KEEL_DGRAM_DEVICE_TAIL | KEEL_DGRAM_HOST_LANDING)) ==
			  KEEL_DGRAM_DEVICE_TAIL &&
		      d->len <= v->cfg.slot_bytes - DEV_TRAILER_BYTES && peer_device_area(q);
	uint32_t wrs = to_dev ? 2 : 1;
	if (i + wrs > CHAIN_MAX)
		return 0;
	if (q->sq_posted - q->sq_done + wrs > v->sq_depth ||
	    (!inl && q->tx_seq - q->tx_done >= s)) {
		v->st.tx_no_room++;
		return 0;
	}
	uint32_t slot = q->tx_seq % s, gen = (q->tx_seq / s) & IMM_GEN_MASK;
	uint8_t dgram = i > 0 ? (uint8_t)(v->wr_dgram[i - 1] + 1) : 0;
	struct ibv_send_wr *wr = &v->swr[i];
	memset(wr, 0, sizeof(*wr));
	wr->sg_list = v->ssge[i];
	if (to_dev) {
		payload_write(v, peer, d, zc, slot, i, dgram);
		wr = &v->swr[++i];
		memset(wr, 0, sizeof(*wr));
		wr->sg_list = v->ssge[i];
	}
	host_slot_sges(v, q, d, zc, inl, to_dev, slot, wr);
	wr->imm_data = htonl(slot << IMM_SLOT_SHIFT | gen | (to_dev ? IMM_DEVICE : 0));
	wr->send_flags = inl ? IBV_SEND_INLINE : 0;
	if (next_signaled(v, q) || zc != NULL)
		wr->send_flags |= IBV_SEND_SIGNALED;
	wr->wr_id = wrid(WR_DATA, peer, q->sq_posted);
	if (small) {
		wr->opcode = IBV_WR_SEND_WITH_IMM;
		v->st.tx_send++;
		v->st.tx_send_inline += inl;
	} else {
		wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr->wr.rdma.remote_addr = q->raddr_slots + (uint64_t)slot * v->cfg.slot_bytes;
		wr->wr.rdma.rkey = q->rkey;
		v->st.tx_write_imm++;
	}
	if (i > 0)
		v->swr[i - 1].next = wr;
	v->wr_dgram[i] = dgram;
	q->tx_seq++;
	q->sq_mark[q->sq_posted % v->sq_depth] = q->tx_seq;
	q->sq_posted++;
	if (zc != NULL)
		zc->mark[peer] = q->sq_posted;
	return wrs;
}

static int verbs_send_burst(struct keel_transport *t, uint64_t now_ns,
			    const struct keel_datagram *d, uint32_t count)
{
	struct verbs *v = of(t);
	v->last_now_ns = now_ns;
	v->credit_wait = false;
	if (v->down || v->ctx == NULL)
		return KEEL_ETRANSPORT;
	uint32_t i = 0;
	bool reaped = false;
	while (i < count) {
		uint32_t peer = d[i].peer;
		if (peer >= v->cfg.world_size || peer == v->cfg.rank ||
		    !keel_datagram_fits(&d[i], t->mtu) || d[i].len + d[i].tail_len == 0 ||
		    v->peers[peer].state == PEER_IDLE)
			return i == 0 ? -EINVAL : (int)i;
		struct vpeer *q = &v->peers[peer];
		if (q->state == PEER_FAILED) {
			v->st.tx_dropped_failed++; /* accepted: the peer falls silent */
			i++;
			continue;
		}
		uint32_t tx0 = q->tx_seq, sq0 = q->sq_posted, n = 0, nwr = 0, got = 0;
		while (i + n < count && nwr < CHAIN_MAX && d[i + n].peer == peer &&
		       keel_datagram_fits(&d[i + n], t->mtu) &&
		       d[i + n].len + d[i + n].tail_len != 0 &&
		       (got = build_data_wr(v, peer, &d[i + n], nwr)) != 0) {
			nwr += got;
			n++;
		}
		if (n == 0 && !reaped) {
			/* out of send slots or queue room: completions may be waiting */
			reaped = true;
			(void)poll_completions(v);
			continue;
		}
		uint32_t ok = post_chain(v, peer, nwr, n, tx0, sq0);
		i += ok;
		if (ok < n || n == 0)
			break; /* bad_wr, or this peer is out of room: the rest waits */
	}
	return (int)i;
}

/* Return credits: write our consumed count into the peer's mailbox (no receive consumed).
 * `keepalive` writes it even when unchanged: the peer reads the same value again (no-op), but
 * the WR needs an ACK, so a dead peer's QP retries it and fails. */
static void send_credit(struct verbs *v, uint32_t peer, bool keepalive)
{
	struct vpeer *q = &v->peers[peer];
	if (q->state != PEER_CONNECTED || (q->rx_freed == q->rx_credited && !keepalive) ||
	    q->sq_posted - q->sq_done >= v->sq_depth)
		return;
	*q->credit_src = q->rx_freed;
	struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)q->credit_src,
			      .length = sizeof(uint64_t),
			      .lkey = v->mr->lkey};
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wrid(WR_CREDIT, peer, q->sq_posted);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = v->inline_max >= sizeof(uint64_t) ? IBV_SEND_INLINE : 0;
	if (next_signaled(v, q))
		wr.send_flags |= IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = q->raddr_mailbox;
	wr.wr.rdma.rkey = q->rkey;
	int rc = keel_ibv_post_send(q->qp, &wr, &bad);
	q->last_post_ns = v->last_now_ns;
	if (rc != 0) {
		v->st.tx_bad_wr++;
		int e = neg_errno(rc);
		if (e != -ENOMEM && e != -EAGAIN)
			peer_fail(v, peer);
		return; /* retried on a later recv_burst */
	}
	q->sq_mark[q->sq_posted % v->sq_depth] = q->tx_seq;
	q->sq_posted++;
	if (keepalive)
		v->st.tx_keepalive_writes++;
	else
		v->st.tx_credit_writes++;
	q->rx_credited = q->rx_freed;
}

/* Tell the peer where its payloads for our device go: two WRITEs into its mailbox line, the
 * base and rkey, then the magic that makes them valid. Tried again later when the send queue
 * is full. */
static void announce(struct verbs *v, uint32_t peer)
{
	struct vpeer *q = &v->peers[peer];
	if (q->state != PEER_CONNECTED || q->sq_posted - q->sq_done + 2 > v->sq_depth)
		return;
	uint8_t *src = (uint8_t *)q->credit_src + ANNOUNCE_OFF; /* beside the credit word */
	uint64_t base = (uint64_t)(uintptr_t)v->dev_base;
	uint32_t rkey = v->dev_mr->rkey, magic = ANNOUNCE_MAGIC;
	memcpy(src, &base, 8);
	memcpy(src + 8, &rkey, 4);
	memcpy(src + ANNOUNCE_MAGIC_OFF - ANNOUNCE_OFF, &magic, 4);
	struct ibv_sge sge[2] = {
	    {.addr = (uint64_t)(uintptr_t)src, .length = ANNOUNCE_LEN, .lkey = v->mr->lkey},
	    {.addr = (uint64_t)(uintptr_t)(src + ANNOUNCE_MAGIC_OFF - ANNOUNCE_OFF),
	     .length = 4,
	     .lkey = v->mr->lkey}};
	struct ibv_send_wr wr[2], *bad = NULL;
	memset(wr, 0, sizeof(wr));
	for (uint32_t k = 0; k < 2; k++) {
		wr[k].wr_id = wrid(WR_CREDIT, peer, q->sq_posted + k);
		wr[k].sg_list = &sge[k];
		wr[k].num_sge = 1;
		wr[k].opcode = IBV_WR_RDMA_WRITE;
		wr[k].wr.rdma.rkey = q->rkey;
	}
	wr[0].next = &wr[1];
	wr[0].wr.rdma.remote_addr = q->raddr_mailbox + ANNOUNCE_OFF;
	wr[1].wr.rdma.remote_addr = q->raddr_mailbox + ANNOUNCE_MAGIC_OFF;
	/* signaled: the source bytes must stay until the NIC read them (they never change) */
	wr[1].send_flags = IBV_SEND_SIGNALED;
	int rc = keel_ibv_post_send(q->qp, wr, &bad);
	q->last_post_ns = v->last_now_ns;
	/* on a bad_wr, what went before it stays counted; both go again at the next try */
	uint32_t went = rc == 0 ? 2 : bad == &wr[1] ? 1 : 0;
	for (uint32_t k = 0; k < went; k++) {
		q->sq_mark[q->sq_posted % v->sq_depth] = q->tx_seq;
		q->sq_posted++;
	}
	if (rc != 0) {
		v->st.tx_bad_wr++;
		int e = neg_errno(rc);
		if (e != -ENOMEM && e != -EAGAIN)
			peer_fail(v, peer);
		return;
	}
	q->announce_due = false;
}

static void announce_all(struct verbs *v)
{
	bool due = false;
	for (uint32_t p = 0; p < v->cfg.world_size; p++) {
		if (v->peers[p].announce_due)
			announce(v, p);
		due = due || (v->peers[p].announce_due && v->peers[p].state == PEER_CONNECTED);
	}
	v->announce_due = due;
}

/* A peer that holds messages of ours unconsumed and to which we posted nothing for a while
 * (typically: out of credits) gives the NIC nothing to retry, so its death would go unseen
 * below the core. Such a peer gets a keepalive credit write keepalive_ns after our last post
 * to it: on a dead peer it ends in IBV_WC_RETRY_EXC_ERR within keel_verbs_nic_detect_ns. None
 * while posting goes on (those WRs are retried themselves) or once everything was consumed.
 * The scan runs only when the earliest such deadline is reached. */
static void keepalive_scan(struct verbs *v, uint64_t now_ns)
{
	if (now_ns < v->keepalive_next_ns)
		return;
	uint64_t next = UINT64_MAX;
	for (uint32_t p = 0; p < v->cfg.world_size; p++) {
		struct vpeer *q = &v->peers[p];
		if (q->state != PEER_CONNECTED)
			continue;
		refresh_credit(v, q);
		if (q->tx_seq == q->tx_credit)
			continue;
		if (now_ns - q->last_post_ns >= v->keepalive_ns)
			send_credit(v, p, true);
		uint64_t due = q->last_post_ns + v->keepalive_ns;
		next = due < next ? due : next;
	}
	v->keepalive_due = next != UINT64_MAX;
	/* Idle, a look a period from now finds a peer posted to since then before it is due; a
	 * peer whose send queue was full is tried again a period later, not on every call. */
	v->keepalive_next_ns =
	    next > now_ns && next != UINT64_MAX ? next : now_ns + v->keepalive_ns;
}

/* ---- receive side ---- */

/* A receive completion: the immediate must name exactly the slot and lap we expect next. */
static void on_recv(struct verbs *v, const struct ibv_wc *wc, uint32_t peer)
{
	struct vpeer *q = &v->peers[peer];
	if (q->state != PEER_CONNECTED)
		return;
	uint32_t s = v->cfg.slot_count;
	uint32_t want_slot = q->rx_seq % s, want_gen = (q->rx_seq / s) & IMM_GEN_MASK;
	uint32_t imm = ntohl(wc->imm_data);
	bool with_imm = (wc->wc_flags & IBV_WC_WITH_IMM) != 0;
	bool is_send = wc->opcode == IBV_WC_RECV;
	bool dev = (imm & IMM_DEVICE) != 0;
	/* a device payload comes only by WRITE, into an area we announced */
	if (!with_imm || imm >> IMM_SLOT_SHIFT != want_slot || (imm & IMM_GEN_MASK) != want_gen ||
	    (uint32_t)wc->wr_id != want_slot ||
	    (!is_send && wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM) ||
	    (dev && (is_send || v->dev_mr == NULL))) {
		v->st.rx_bad_imm++;
		peer_fail(v, peer); /* a peer that lies about slots cannot be read safely */
		return;
	}
	if (wc->byte_len == 0 || wc->byte_len > v->cfg.slot_bytes ||
	    (dev && wc->byte_len <= DEV_TRAILER_BYTES)) {
		v->st.rx_bad_len++;
		peer_fail(v, peer);
		return;
	}
	q->rx_len[want_slot] = wc->byte_len | (dev ? RX_LEN_DEVICE : 0);
	q->rx_seq++;
	if (is_send)
		v->st.rx_send++;
	else
		v->st.rx_write_imm++;
}

static void on_wc(struct verbs *v, const struct ibv_wc *wc)
{
	uint32_t kind = (uint32_t)(wc->wr_id >> WRID_KIND_SHIFT);
	uint32_t peer = (uint32_t)(wc->wr_id >> WRID_PEER_SHIFT) & ((1u << 30) - 1);
	if (peer >= v->cfg.world_size || peer == v->cfg.rank)
		return; /* not ours: cannot happen unless the provider is broken */
	if (wc->status != IBV_WC_SUCCESS) {
		v->st.wc_errors++;
		v->st.wc_retry_exc += wc->status == IBV_WC_RETRY_EXC_ERR;
		peer_fail(v, peer);
		return;
	}
	if (kind == WR_RECV) {
		on_recv(v, wc, peer);
		return;
	}
	struct vpeer *q = &v->peers[peer];
	uint32_t seq = (uint32_t)wc->wr_id;
	if (seq - q->sq_done < q->sq_posted - q->sq_done) {
		q->sq_done = seq + 1;
		q->tx_done = q->sq_mark[seq % v->sq_depth];
	}
}

static void check_async(struct verbs *v)
{
	struct ibv_async_event ev;
	for (uint32_t i = 0; i < 16 && keel_ibv_get_async_event(v->ctx, &ev) == 0; i++) {
		v->st.async_events++;
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			for (uint32_t p = 0; p < v->cfg.world_size; p++)
				if (v->peers[p].qp != NULL && v->peers[p].qp == ev.element.qp)
					peer_fail(v, p);
			break;
		case IBV_EVENT_PORT_ERR:
			if ((uint8_t)ev.element.port_num == v->port)
				v->down = true;
			break;
		case IBV_EVENT_DEVICE_FATAL:
		case IBV_EVENT_CQ_ERR:
			v->down = true;
			break;
		default:
			break;
		}
		keel_ibv_ack_async_event(&ev);
	}
}

static uint32_t poll_completions(struct verbs *v)
{
	uint32_t total = 0;
	for (uint32_t round = 0; round < POLLS_PER_RECV; round++) {
		int n = keel_ibv_poll_cq(v->cq, (int)WC_BURST, v->wc);
		v->st.rx_polls++;
		if (n < 0) {
			v->down = true; /* the CQ itself failed */
			break;
		}
		for (int i = 0; i < n; i++)
			on_wc(v, &v->wc[i]);
		total += (uint32_t)n;
		if ((uint32_t)n < WC_BURST)
			break;
	}
	v->st.rx_wc += total;
	return total;
}

/* A device message: the header goes to the caller's buffer, and the payload is handed over
 * where the peer's WRITE put it, in our device area, its slot held until rx_release. false:
 * the peer lied about the length (it is failed). */
static bool deliver_device(struct verbs *v, uint32_t peer, uint32_t slot, uint32_t len,
			   struct keel_datagram *d)
{
	struct vpeer *q = &v->peers[peer];
	const uint8_t *host = q->rx_slots + (size_t)slot * v->cfg.slot_bytes;
	uint32_t hdr = len - DEV_TRAILER_BYTES, plen = 0;
	for (uint32_t b = 0; b < DEV_TRAILER_BYTES; b++)
		plen |= (uint32_t)host[hdr + b] << (8 * b);
	if (plen == 0 || plen > v->cfg.slot_bytes || plen > v->t.mtu - hdr) {
		v->st.rx_bad_len++;
		peer_fail(v, peer);
		return false;
	}
	memcpy(d->buf, host, hdr);
	d->len = hdr;
	d->tail = v->dev_base + ((size_t)peer * v->cfg.slot_count + slot) * v->cfg.slot_bytes;
	d->tail_len = plen;
	d->flags |= KEEL_DGRAM_DEVICE_TAIL;
	q->rx_hold[slot] = 1;
	v->st.rx_device++;
	return true;
}

/* Slots consumed and not held are free: the credit returned to the peer moves up to the first
 * held one. */
static void free_slots(struct verbs *v, struct vpeer *q)
{
	uint32_t s = v->cfg.slot_count;
	while (q->rx_freed != q->rx_consumed && q->rx_hold[q->rx_freed % s] == 0)
		q->rx_freed++;
}

static void maybe_credit(struct verbs *v, uint32_t peer)
{
	struct vpeer *q = &v->peers[peer];
	if (q->rx_freed - q->rx_credited >= v->credit_batch ||
	    (q->rx_freed != q->rx_credited && q->rx_freed == q->rx_seq))
		send_credit(v, peer, false);
}

/* Copy ready slots of one peer out, repost their receives in one chain, return credits. */
static uint32_t deliver_peer(struct verbs *v, uint32_t peer, struct keel_datagram *d, uint32_t room)
{
	struct vpeer *q = &v->peers[peer];
	uint32_t s = v->cfg.slot_count, n = 0, out = 0;
	while (q->state == PEER_CONNECTED && q->rx_consumed != q->rx_seq && out < room && n < s) {
		uint32_t slot = q->rx_consumed % s, len = q->rx_len[slot];
		if ((len & RX_LEN_DEVICE) != 0) {
			len &= ~RX_LEN_DEVICE;
			if (len - DEV_TRAILER_BYTES > d[out].cap) {
				v->st.rx_bad_len++; /* dropped: its slot is free at once */
			} else if (deliver_device(v, peer, slot, len, &d[out])) {
				d[out].peer = peer;
				d[out].flags |= KEEL_DGRAM_LINK_CHECKED;
				out++;
			} else {
				break; /* failed */
			}
		} else if (len <= d[out].cap) {
			memcpy(d[out].buf, q->rx_slots + (size_t)slot * v->cfg.slot_bytes, len);
			d[out].len = len;
			d[out].peer = peer;
			/* an RC QP delivers only what passed the ICRC, end to end */
			d[out].flags |= KEEL_DGRAM_LINK_CHECKED;
			out++;
		} else {
			v->st.rx_bad_len++; /* longer than the caller's buffer: dropped, counted */
		}
		recv_wr_for(v, peer, slot, &v->rwr[n], &v->rsge[n]);
		if (n > 0)
			v->rwr[n - 1].next = &v->rwr[n];
		n++;
		q->rx_consumed++;
	}
	if (n > 0) {
		struct ibv_recv_wr *bad = NULL;
		if (keel_ibv_post_recv(q->qp, v->rwr, &bad) != 0)
			peer_fail(v, peer);
	}
	free_slots(v, q);
	maybe_credit(v, peer);
	v->st.rx_delivered += out;
	return out;
}

/* Deliver ready slots, peers in round-robin order so no peer starves the others. */
static uint32_t deliver_all(struct verbs *v, struct keel_datagram *d, uint32_t count_max)
{
	uint32_t out = 0, w = v->cfg.world_size;
	for (uint32_t k = 0; k < w && out < count_max; k++) {
		uint32_t p = (v->rr + k) % w;
		if (p != v->cfg.rank)
			out += deliver_peer(v, p, d + out, count_max - out);
	}
	v->rr = (v->rr + 1) % w;
	return out;
}

static void drain_channel(struct verbs *v)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	unsigned got = 0;
	while (got < 64 && keel_ibv_get_cq_event(v->channel, &cq, &cq_ctx) == 0)
		got++;
	if (got > 0) {
		keel_ibv_ack_cq_events(v->cq, got);
		v->armed = false;
	}
}

static int verbs_recv_burst(struct keel_transport *t, uint64_t now_ns, struct keel_datagram *d,
			    uint32_t count_max)
{
	struct verbs *v = of(t);
	v->last_now_ns = now_ns;
	if (v->ctx == NULL)
		return KEEL_ETRANSPORT;
	if (v->calls++ % ASYNC_CHECK_EVERY == 0)
		check_async(v);
	if (v->down)
		return KEEL_ETRANSPORT;
	if (v->channel != NULL)
		drain_channel(v);
	if (v->announce_due)
		announce_all(v);
	uint32_t polled = poll_completions(v);
	uint32_t out = deliver_all(v, d, count_max);
	keepalive_scan(v, now_ns);
	if (v->channel != NULL && polled == 0 && out == 0 && !v->armed) {
		/* Arm, then look once more: a completion that raced the arming raised no event,
		 * so what this poll finds is delivered now, not left for a sleeper to miss. */
		if (keel_ibv_req_notify_cq(v->cq, 0) == 0)
			v->armed = true;
		if (poll_completions(v) > 0)
			out = deliver_all(v, d, count_max);
	}
	return v->down ? KEEL_ETRANSPORT : (int)out;
}

/* Whether any peer has received slots not yet handed to the caller (a send-side reap or a
 * full burst can leave some). */
static bool rx_pending(const struct verbs *v)
{
	for (uint32_t p = 0; p < v->cfg.world_size; p++)
		if (v->peers[p].state == PEER_CONNECTED &&
		    v->peers[p].rx_consumed != v->peers[p].rx_seq)
			return true;
	return false;
}

/* "Now" while a sleeper would miss something: received slots waiting, or (event mode) a
 * channel not armed since its last event, which would let the caller sleep through every later
 * completion. recv_burst re-arms it once it finds the queue empty. */
static uint64_t verbs_next_deadline_ns(struct keel_transport *t)
{
	struct verbs *v = of(t);
	if (rx_pending(v) || (v->channel != NULL && !v->armed && !v->down))
		return v->last_now_ns;
	uint64_t dl = v->credit_wait ? v->last_now_ns + CREDIT_POLL_NS : UINT64_MAX;
	if (v->keepalive_due && v->keepalive_next_ns < dl)
		dl = v->keepalive_next_ns;
	return dl;
}

static int verbs_wait_fd(struct keel_transport *t)
{
	struct verbs *v = of(t);
	return v->channel != NULL ? v->channel->fd : -1;
}

static void verbs_fini(struct keel_transport *t)
{
	if (t == NULL || t->state == NULL)
		return;
	release(of(t));
}

/* ---- memory the NIC reads tails from ---- */

static bool region_overlaps(const struct verbs *v, uintptr_t lo, uintptr_t hi)
{
	for (uint32_t i = 0; i < KEEL_VERBS_REGIONS_MAX; i++)
		if (v->regions[i].mr != NULL && lo < v->regions[i].hi && v->regions[i].lo < hi)
			return true;
	return false;
}

/* Checks and a free entry for [addr, addr + len); NULL with *rc set when there is none. */
static struct vregion *region_slot(struct verbs *v, const void *addr, size_t len, int *rc)
{
	uintptr_t lo = (uintptr_t)addr;
	*rc = -EINVAL;
	if (v->pd == NULL || addr == NULL || len == 0 || len > UINTPTR_MAX - lo ||
	    region_overlaps(v, lo, lo + len))
		return NULL;
	*rc = -ENOSPC;
	for (uint32_t i = 0; i < KEEL_VERBS_REGIONS_MAX; i++)
		if (v->regions[i].mr == NULL)
			return &v->regions[i];
	return NULL;
}

static int region_add(struct verbs *v, struct vregion *r, struct ibv_mr *mr, const void *addr,
		      size_t len, bool dmabuf)
{
	if (mr == NULL)
		return null_errno();
	r->mr = mr;
	r->lo = (uintptr_t)addr;
	r->hi = (uintptr_t)addr + len;
	r->dmabuf = dmabuf;
	for (uint32_t p = 0; p < v->cfg.world_size; p++)
		r->mark[p] = v->peers[p].sq_done; /* nothing posted reads it yet */
	v->region_count++;
	return 0;
}

/* Register [addr, addr + len) for the NIC to read: host memory (fd < 0, ibv_reg_mr), or a
 * dma-buf (fd, offset) whose iova is the device address, so work requests name its bytes as
 * the caller does. */
static int region_register(struct keel_transport *t, const void *addr, size_t len, int fd,
			   uint64_t offset)
{
	if (t == NULL || t->ops != &verbs_ops)
		return -EINVAL;
	struct verbs *v = of(t);
	int rc;
	struct vregion *r = region_slot(v, addr, len, &rc);
	if (r == NULL)
		return rc;
	/* the NIC only reads it: no access flag beyond local read, which every MR has */
	struct ibv_mr *mr =
	    fd < 0 ? keel_ibv_reg_mr(v->pd, (void *)(uintptr_t)addr, len, 0)
		   : keel_ibv_reg_dmabuf_mr(v->pd, offset, len, (uint64_t)(uintptr_t)addr, fd, 0);
	if (mr == NULL && fd >= 0 &&
	    (errno == EOPNOTSUPP || errno == ENOSYS || errno == EPROTONOSUPPORT))
		return -EOPNOTSUPP;
	return region_add(v, r, mr, addr, len, fd >= 0);
}

int keel_verbs_register(struct keel_transport *t, const void *addr, size_t len)
{
	return region_register(t, addr, len, -1, 0);
}

int keel_verbs_register_dmabuf(struct keel_transport *t, const void *addr, size_t len, int fd,
			       uint64_t offset)
{
	return fd < 0 ? -EINVAL : region_register(t, addr, len, fd, offset);
}

/* May the NIC still read region r for `peer`: a WR gathering from it posted and not
 * completed, on a QP not in error? */
static bool region_busy_for(const struct verbs *v, const struct vregion *r, uint32_t peer)
{
	const struct vpeer *q = &v->peers[peer];
	uint32_t ahead = r->mark[peer] - q->sq_done;
	return q->state == PEER_CONNECTED && ahead != 0 && ahead <= q->sq_posted - q->sq_done;
}

int keel_verbs_unregister(struct keel_transport *t, const void *addr)
{
	if (t == NULL || t->ops != &verbs_ops)
		return -EINVAL;
	struct verbs *v = of(t);
	struct vregion *r = NULL;
	for (uint32_t i = 0; i < KEEL_VERBS_REGIONS_MAX && r == NULL; i++)
		if (v->regions[i].mr != NULL && v->regions[i].lo == (uintptr_t)addr)
			r = &v->regions[i];
	if (r == NULL)
		return -ENOENT;
	if (v->ctx != NULL && !v->down)
		(void)poll_completions(v); /* the receives they bring wait in their slots */
	for (uint32_t p = 0; p < v->cfg.world_size && v->ctx != NULL && !v->down; p++)
		if (p != v->cfg.rank && region_busy_for(v, r, p))
			return -EBUSY;
	int rc = keel_ibv_dereg_mr(r->mr);
	r->mr = NULL;
	v->region_count--;
	return rc == 0 ? 0 : neg_errno(rc);
}

/* A QP in error (peer_fail) or a device gone: the router sends this peer's traffic on
 * another transport. */
static bool verbs_peer_ok(struct keel_transport *t, uint32_t peer)
{
	struct verbs *v = of(t);
	return !v->down && v->ctx != NULL && !keel_verbs_peer_failed(t, peer);
}

/* The NIC reads a tail of device memory where it lies in one dma-buf registration, on a
 * connected RC QP, whose ICRC covers every byte end to end. */
static bool verbs_device_tail_ok(struct keel_transport *t, uint32_t peer, const void *addr,
				 size_t len)
{
	struct verbs *v = of(t);
	if (v->down || v->ctx == NULL || peer >= v->cfg.world_size || peer == v->cfg.rank ||
	    v->peers[peer].state != PEER_CONNECTED || len == 0 || len > UINT32_MAX ||
	    v->region_count == 0)
		return false;
	const struct vregion *r = region_of(v, addr, (uint32_t)len);
	return r != NULL && r->dmabuf;
}

/* ---- our device area, where peers write payloads ---- */

size_t keel_verbs_device_area_bytes(struct keel_transport *t)
{
	struct verbs *v = of(t);
	return (size_t)v->cfg.world_size * v->cfg.slot_count * v->cfg.slot_bytes;
}

int keel_verbs_register_device_area(struct keel_transport *t, void *addr, size_t len, int fd,
				    uint64_t offset)
{
	if (t == NULL || t->ops != &verbs_ops)
		return -EINVAL;
	struct verbs *v = of(t);
	if (v->pd == NULL || addr == NULL || fd < 0 || len < keel_verbs_device_area_bytes(t) ||
	    (uintptr_t)addr % CACHE_LINE_BYTES != 0)
		return -EINVAL;
	if (v->dev_mr != NULL)
		return -EEXIST;
	struct ibv_mr *mr =
	    keel_ibv_reg_dmabuf_mr(v->pd, offset, len, (uint64_t)(uintptr_t)addr, fd,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (mr == NULL)
		return errno == EOPNOTSUPP || errno == ENOSYS || errno == EPROTONOSUPPORT
			   ? -EOPNOTSUPP
			   : null_errno();
	v->dev_mr = mr;
	v->dev_base = addr;
	for (uint32_t p = 0; p < v->cfg.world_size; p++)
		if (v->peers[p].state == PEER_CONNECTED)
			v->peers[p].announce_due = v->announce_due = true;
	if (v->announce_due && v->ctx != NULL && !v->down)
		announce_all(v);
	return 0;
}

/* The core is done with a payload delivered in our device area: its slot is free, and the
 * peer gets its credit back once every slot before it is free too. */
static void verbs_rx_release(struct keel_transport *t, uint32_t peer, const void *tail)
{
	struct verbs *v = of(t);
	uint32_t s = v->cfg.slot_count;
	size_t area = (size_t)s * v->cfg.slot_bytes;
	uintptr_t lo = (uintptr_t)v->dev_base + (size_t)peer * area, at = (uintptr_t)tail;
	if (v->dev_mr == NULL || peer >= v->cfg.world_size || at < lo || at - lo >= area ||
	    (at - lo) % v->cfg.slot_bytes != 0) {
		v->st.rx_bad_release++; /* not a payload we handed out: the caller's bug */
		return;
	}
	struct vpeer *q = &v->peers[peer];
	uint32_t slot = (uint32_t)((at - lo) / v->cfg.slot_bytes);
	if (q->rx_hold[slot] == 0) {
		v->st.rx_bad_release++;
		return;
	}
	q->rx_hold[slot] = 0;
	v->st.rx_released++;
	free_slots(v, q);
	if (!v->down && v->ctx != NULL)
		maybe_credit(v, peer);
}

static const struct keel_transport_ops verbs_ops = {
    .name = "verbs",
    .send_burst = verbs_send_burst,
    .recv_burst = verbs_recv_burst,
    .next_deadline_ns = verbs_next_deadline_ns,
    .wait_fd = verbs_wait_fd,
    .fini = verbs_fini,
    .peer_ok = verbs_peer_ok,
    .device_tail_ok = verbs_device_tail_ok,
    .rx_release = verbs_rx_release,
};
