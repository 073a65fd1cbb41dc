/* The node: configuration, carving caller memory, and the poll loop that drives the
 * reliable layer, the failure detector and the collectives. Never allocates, never reads a
 * clock, never blocks: time comes in as now_ns, waiting is the caller's. */
#include <string.h>

#include "assert_int.h"
#include "keel/device.h"
#include "keel/limits.h"
#include "node_int.h"

/* Receive bursts per poll at most: drains a backlog after a pause without starving sends. */
#define RX_ROUNDS_MAX 8u
/* Bytes of data one poll moves (received plus sent) before it returns to the caller for a
 * fresh clock. The node never reads the time itself, so a poll that reduced 16 MiB would beat
 * its heartbeats only at its end: peers would hear silence exactly when it works hardest. */
#define POLL_BUDGET_BYTES (1u << 20)

void keel_config_default(struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	memset(cfg, 0, sizeof(*cfg));
	cfg->rank = 0;
	cfg->world_size = 1;
	cfg->job_id = 0;
	cfg->mtu = KEEL_MTU_DEFAULT;
	cfg->window = KEEL_WINDOW_DEFAULT;
	cfg->burst = KEEL_BURST_DEFAULT;
	cfg->ops_max = KEEL_OPS_DEFAULT;
	cfg->heartbeat_ns = KEEL_HEARTBEAT_NS_DEFAULT;
	cfg->miss_limit = KEEL_MISS_LIMIT_DEFAULT;
	cfg->fd_fanout = KEEL_FD_FANOUT_DEFAULT;
	cfg->join_timeout_ns = KEEL_JOIN_TIMEOUT_NS_DEFAULT;
	cfg->rto_initial_ns = KEEL_RTO_INITIAL_NS_DEFAULT;
	cfg->rto_min_ns = KEEL_RTO_MIN_NS_DEFAULT;
	cfg->rto_max_ns = KEEL_RTO_MAX_NS_DEFAULT;
	cfg->ack_delay_ns = KEEL_ACK_DELAY_NS_DEFAULT;
	cfg->op_timeout_ns = KEEL_OP_TIMEOUT_NS_DEFAULT;
	cfg->entry_timeout_ns = KEEL_ENTRY_TIMEOUT_NS_DEFAULT;
	cfg->probes = KEEL_PROBES_DEFAULT;
	cfg->soft_retries = KEEL_SOFT_RETRIES_DEFAULT;
	cfg->algo = KEEL_ALGO_AUTO;
	cfg->rd_max_bytes = KEEL_RD_MAX_BYTES_DEFAULT;
	cfg->eager_result_bytes = KEEL_EAGER_RESULT_BYTES_DEFAULT;
	cfg->incarnation = 1;
	cfg->view_timeout_ns = KEEL_VIEW_TIMEOUT_NS_DEFAULT;
	cfg->compress = KEEL_COMPRESS_AUTO;
	cfg->compress_util_pct = KEEL_COMPRESS_UTIL_PCT_DEFAULT;
	KEEL_ASSERT(cfg->rank < cfg->world_size && cfg->incarnation != 0);
}

static bool is_pow2(uint32_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

static uint32_t effective_mtu(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	uint32_t mtu = cfg->mtu;
	if (cfg->transport != NULL && cfg->transport->mtu < mtu)
		mtu = cfg->transport->mtu;
	KEEL_ASSERT(mtu <= cfg->mtu);
	return mtu;
}

/* A device (optional) has every op; its chunk holds whole elements of any dtype. */
static bool device_valid(const struct keel_config *cfg)
{
	const struct keel_device *d = cfg->device;
	uint32_t chunk = cfg->device_chunk_bytes;
	if (chunk != 0 && (chunk < KEEL_DEVICE_CHUNK_MIN || chunk % 8 != 0))
		return false;
	if (d == NULL)
		return true;
	const struct keel_device_ops *o = d->ops;
	return o != NULL && o->copy != NULL && o->reduce != NULL && o->test != NULL &&
	       o->host_register != NULL && o->host_unregister != NULL && o->fini != NULL;
}

static bool config_valid(const struct keel_config *cfg)
{
	if (cfg == NULL || cfg->transport == NULL || cfg->transport->ops == NULL)
		return false;
	if (cfg->world_size == 0 || cfg->world_size > KEEL_WORLD_MAX ||
	    cfg->rank >= cfg->world_size)
		return false;
	if (cfg->transport->world_size != cfg->world_size || cfg->transport->rank != cfg->rank)
		return false;
	uint32_t mtu = effective_mtu(cfg);
	if (mtu < KEEL_MTU_MIN || mtu > KEEL_MTU_MAX)
		return false;
	if (!is_pow2(cfg->window) || cfg->window > KEEL_WINDOW_MAX)
		return false;
	if (cfg->burst == 0 || cfg->burst > KEEL_BURST_MAX)
		return false;
	if (cfg->ops_max == 0 || cfg->ops_max > KEEL_OPS_MAX)
		return false;
	if (cfg->heartbeat_ns == 0 || cfg->miss_limit == 0 || cfg->join_timeout_ns == 0)
		return false;
	if (cfg->rto_min_ns == 0 || cfg->rto_min_ns > cfg->rto_max_ns || cfg->entry_timeout_ns == 0)
		return false;
	if (cfg->probes > KEEL_PROBES_MAX)
		return false;
	if (cfg->rto_initial_ns < cfg->rto_min_ns || cfg->rto_initial_ns > cfg->rto_max_ns)
		return false;
	if (cfg->ack_delay_ns >= cfg->rto_min_ns)
		return false;
	if ((unsigned)cfg->algo > (unsigned)KEEL_ALGO_HIER || !coll_hier_config_valid(cfg))
		return false;
	if (cfg->incarnation == 0)
		return false;
	if ((unsigned)cfg->compress > (unsigned)KEEL_COMPRESS_F16 || cfg->compress_util_pct > 100)
		return false;
	if ((unsigned)cfg->mac > (unsigned)KEEL_MAC_CHACHA20POLY1305)
		return false;
	if (!device_valid(cfg))
		return false;
	/* a view travels in one control datagram */
	return mb_ctrl_size(cfg->world_size, 0) <= mtu;
}

/* The largest result a view carries: KEEL_EAGER_RESULT_MAX, or less where the view messages
 * would not fit the mtu. Every node takes one that large, whatever its own eager_result_bytes
 * (config_valid passed). */
static uint32_t result_cap(const struct keel_config *cfg)
{
	return mb_kept_cap(cfg->world_size, effective_mtu(cfg), KEEL_EAGER_RESULT_MAX);
}

/* One description of the storage layout, used both to size it and to carve it. */
struct layout {
	size_t node, rel_peers, rel_active, fd_peers, mb_peers, auth_peers, fd_lists, owners,
	    tx_slots, rx_slots, tx_buf, rx_buf, txq, txq_tag, ctrl, rxq, rx_burst, ops, op_bits,
	    views, msg, copy, kept, hier, cmp, total;
};

static size_t align_up(size_t v, size_t a)
{
	KEEL_ASSERT(a != 0 && (a & (a - 1)) == 0);
	size_t r = (v + a - 1) & ~(a - 1);
	KEEL_ASSERT(r >= v && r - v < a);
	return r;
}

/* Window buffers: one set per rank (self's unused, so indexes stay ranks), or a pool. */
static uint32_t stream_count(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg->world_size != 0 && cfg->world_size <= KEEL_WORLD_MAX);
	uint32_t streams = cfg->streams == 0 || cfg->streams >= cfg->world_size - 1
			       ? cfg->world_size
			       : cfg->streams;
	KEEL_ASSERT(streams >= 1 && streams <= cfg->world_size);
	return streams;
}

static void layout_compute(const struct keel_config *cfg, struct layout *l)
{
	KEEL_ASSERT(cfg != NULL && l != NULL);
	size_t world = cfg->world_size, win = cfg->window, burst = cfg->burst;
	size_t streams = stream_count(cfg);
	size_t mtu = align_up(effective_mtu(cfg), 64);
	uint32_t kept = result_cap(cfg);
	size_t off = 0;
#define PLACE(field, bytes)                                                                        \
	do {                                                                                       \
		l->field = off;                                                                    \
		off = align_up(off + (bytes), 64);                                                 \
	} while (0)
	PLACE(node, sizeof(struct keel_node));
	/* each module's per-peer records in a carve-out of their own */
	PLACE(rel_peers, world * sizeof(struct rel_peer));
	PLACE(rel_active, (world + 63) / 64 * sizeof(uint64_t));
	PLACE(fd_peers, world * sizeof(struct fd_peer));
	PLACE(mb_peers, world * sizeof(struct mb_peer));
	PLACE(auth_peers, cfg->auth ? world * sizeof(struct auth_peer) : 0);
	PLACE(fd_lists, 2 * world * sizeof(uint32_t));
	PLACE(owners, streams * sizeof(uint32_t));
	PLACE(tx_slots, streams * win * sizeof(struct tx_slot));
	PLACE(rx_slots, streams * win * sizeof(struct rx_slot));
	PLACE(tx_buf, streams * win * mtu);
	PLACE(rx_buf, streams * win * mtu);
	PLACE(txq, burst * sizeof(struct keel_datagram));
	PLACE(txq_tag, burst * sizeof(uint32_t));
	PLACE(ctrl, burst * mb_ctrl_size(cfg->world_size, kept));
	PLACE(rxq, 2 * burst * sizeof(struct keel_datagram)); /* the queue, and its fresh state */
	PLACE(rx_burst, burst * mtu);
	PLACE(ops, cfg->ops_max * sizeof(struct keel_op));
	PLACE(op_bits, cfg->ops_max * (world / 8 + 1));
	/* five views (installed, accepted, best promised, proposed, scratch) + two rank maps */
	PLACE(views, 5 * mb_view_bytes(cfg->world_size, kept) + 2 * align_up(world * 4, 8) + 64);
	PLACE(msg, mb_ctrl_size(cfg->world_size, kept));
	PLACE(copy, cfg->restart_copy_bytes);
	PLACE(kept, 2 * (size_t)kept); /* the node's own, and the best a round heard of */
	PLACE(hier, coll_hier_bytes(cfg->world_size)); /* host map and per-view tables */
	PLACE(cmp,
	      cmp_bytes(cfg->world_size, (uint32_t)mtu)); /* link figures, a widened fragment */
#undef PLACE
	l->total = off + 64; /* slack to align the caller's base */
	/* each module's per-peer records in their own carve-out, in this order */
	KEEL_ASSERT(l->node < l->rel_peers && l->rel_peers < l->fd_peers &&
		    l->fd_peers < l->mb_peers && l->mb_peers < l->fd_lists &&
		    l->auth_peers <= l->fd_lists);
	KEEL_ASSERT(l->copy + cfg->restart_copy_bytes <= l->kept && l->kept + 2 * kept <= l->hier);
	KEEL_ASSERT(l->hier + coll_hier_bytes(cfg->world_size) <= l->cmp);
	KEEL_ASSERT(l->cmp + cmp_bytes(cfg->world_size, (uint32_t)mtu) + 64 <= l->total);
}

uint32_t keel_view_mtu_min(uint32_t world_size)
{
	if (world_size == 0 || world_size > KEEL_WORLD_MAX)
		return 0;
	uint32_t need = mb_ctrl_size(world_size, 0);
	return need < KEEL_MTU_MIN ? KEEL_MTU_MIN : need;
}

size_t keel_storage_size(const struct keel_config *cfg)
{
	if (!config_valid(cfg))
		return 0;
	struct layout l;
	layout_compute(cfg, &l);
	KEEL_ASSERT(l.total > sizeof(struct keel_node));
	return l.total;
}

/* What every receive queue entry holds before a recv_burst: a buffer of its own, and a
 * request for lent bytes. A backend may lend its own bytes (shared memory): every datagram
 * of the burst is handled, or copied into a window, before the next recv_burst. */
static void rxq_fresh_fill(struct keel_node *n)
{
	size_t stride = align_up(n->mtu, 64);
	KEEL_ASSERT(n->burst != 0 && n->burst <= KEEL_BURST_MAX);
	for (uint32_t i = 0; i < n->burst; i++)
		n->rxq_fresh[i] = (struct keel_datagram){.buf = n->rx_burst_buf + i * stride,
							 .cap = n->mtu,
							 .len = 0,
							 .peer = UINT32_MAX,
							 .flags = KEEL_DGRAM_LEND};
}

static void carve(struct keel_node *n, uint8_t *base, const struct layout *l)
{
	uint32_t world = n->world;
	KEEL_ASSERT(((uintptr_t)base & 63u) == 0 && (uint8_t *)n == base + l->node);
	n->rel_peers = (struct rel_peer *)(base + l->rel_peers);
	n->rel_active = (uint64_t *)(base + l->rel_active);
	n->fd_peers = (struct fd_peer *)(base + l->fd_peers);
	n->mb_peers = (struct mb_peer *)(base + l->mb_peers);
	/* no module's records overlap another's */
	KEEL_ASSERT((uint8_t *)(n->rel_peers + world) <= (uint8_t *)n->fd_peers);
	KEEL_ASSERT((uint8_t *)(n->fd_peers + world) <= (uint8_t *)n->mb_peers);
	KEEL_ASSERT((uint8_t *)(n->mb_peers + world) <= base + l->auth_peers);
	n->auth_peers = n->auth ? (struct auth_peer *)(base + l->auth_peers) : NULL;
	KEEL_ASSERT(!n->auth || (uint8_t *)(n->auth_peers + world) <= base + l->fd_lists);
	n->watch_list = (uint32_t *)(base + l->fd_lists);
	n->beat_list = n->watch_list + world;
	n->streams = stream_count(&n->cfg);
	n->stream_pool = n->streams < world;
	n->stream_owner = (uint32_t *)(base + l->owners);
	n->stream_tx = (struct tx_slot *)(base + l->tx_slots);
	n->stream_rx = (struct rx_slot *)(base + l->rx_slots);
	n->stream_tx_buf = base + l->tx_buf;
	n->stream_rx_buf = base + l->rx_buf;
	KEEL_ASSERT(n->streams >= 1 && n->streams <= world);
	for (uint32_t s = 0; s < n->streams; s++)
		n->stream_owner[s] = n->stream_pool ? UINT32_MAX : s;
	n->txq = (struct keel_datagram *)(base + l->txq);
	n->txq_tag = (uint32_t *)(base + l->txq_tag);
	n->ctrl_buf = base + l->ctrl;
	n->rxq = (struct keel_datagram *)(base + l->rxq);
	n->rxq_fresh = n->rxq + n->burst;
	n->rx_burst_buf = base + l->rx_burst;
	rxq_fresh_fill(n);
	n->ops = (struct keel_op *)(base + l->ops);
	for (uint32_t i = 0; i < n->ops_max; i++)
		n->ops[i].done_bits = base + l->op_bits + (size_t)i * (world / 8 + 1);
	uint8_t *cursor = base + l->views;
	mb_carve(n, &cursor);
	KEEL_ASSERT(cursor <= base + l->msg);
	n->msg_buf = base + l->msg;
	n->restart_copy = base + l->copy;
	n->kept = base + l->kept;
	n->prop_kept = n->kept + n->result_cap;
	coll_hier_carve(n, base + l->hier, &n->cfg);
	cmp_carve(n, base + l->cmp);
}

int keel_init(struct keel_node **out, void *mem, size_t mem_len, const struct keel_config *cfg,
	      uint64_t now_ns)
{
	if (out == NULL || mem == NULL || !config_valid(cfg))
		return -EINVAL;
	struct layout l;
	layout_compute(cfg, &l);
	if (mem_len < l.total)
		return -ENOSPC;
	uint8_t *base = (uint8_t *)align_up((size_t)mem, 64);
	KEEL_ASSERT(base + (l.total - 64) <= (uint8_t *)mem + mem_len); /* the slack covers it */
	memset(base, 0, l.total - 64);
	struct keel_node *n = (struct keel_node *)(base + l.node);
	n->cfg = *cfg;
	if (n->cfg.view_timeout_ns == 0) /* auto: as long as the detector gives a silent peer */
		n->cfg.view_timeout_ns = (uint64_t)cfg->miss_limit * cfg->heartbeat_ns;
	n->cfg.op_timeout_ns = keel_op_timeout_ns(cfg); /* 0: derived from the detector */
	if (n->cfg.compress_util_pct == 0)
		n->cfg.compress_util_pct = KEEL_COMPRESS_UTIL_PCT_DEFAULT;
	n->op_bound_ns = keel_op_bound_ns(&n->cfg); /* asked on every poll: the config is fixed */
	n->tp = cfg->transport;
	n->self = cfg->rank;
	n->world = cfg->world_size;

	n->mtu = effective_mtu(cfg);
	n->window = cfg->window;
	n->burst = cfg->burst;
	n->ops_max = cfg->ops_max;
	n->result_cap = result_cap(cfg);
	/* what this node reports early and keeps */
	n->kept_cap =
	    cfg->eager_result_bytes < n->result_cap ? cfg->eager_result_bytes & ~7u : n->result_cap;
	n->ctrl_size = mb_ctrl_size(n->world, n->result_cap);
	n->now_ns = now_ns;
	n->rewritten_lo = UINTPTR_MAX; /* nothing borrowed: an empty range */
	n->auth = cfg->auth;
	n->payload_max = n->mtu - WIRE_HEADER_SIZE - (n->auth ? KEEL_AUTH_TRAILER_BYTES : 0);
	if (n->auth) {
		int rc = auth_init(&n->auth_ctx, cfg);
		if (rc != 0) {
			memset(base, 0, sizeof(*n)); /* no key material left behind */
			return rc;
		}
	}
	carve(n, base, &l);
	for (uint32_t i = 0; i < n->world; i++)
		rel_peer_init(n, i);
	mb_init(n); /* the first view, which fd_init reads: peers outside it start DEAD */
	fd_init(n, now_ns);
	fd_on_view(n);
	KEEL_ASSERT(n->member == !cfg->rejoin && n->epoch == n->view.epoch);
	KEEL_ASSERT(n->tx_flight == 0 && n->rx_held == 0 && n->acks_owed == 0);
	*out = n;
	return 0;
}

void keel_fini(struct keel_node *node)
{
	if (node == NULL)
		return;
	node->tp = NULL;
}

void node_header_init(const struct keel_node *n, struct wire_header *h, enum wire_type type,
		      uint32_t dst)
{
	KEEL_ASSERT_DEBUG(n != NULL && h != NULL);
	KEEL_ASSERT_DEBUG(dst < n->world && dst != n->self && n->world <= UINT16_MAX);
	memset(h, 0, sizeof(*h));
	h->magic = WIRE_MAGIC;
	h->version = WIRE_VERSION;
	h->type = (uint8_t)type;
	h->job_id = n->cfg.job_id;
	h->epoch = n->epoch;
	h->src = (uint16_t)n->self;
	h->dst = (uint16_t)dst;
	h->flags = n->auth ? WIRE_FLAG_AUTH : 0;
}

/* Control datagrams use the small per-poll buffers; every one is queued at once, so a full
 * queue (flushed here) is the only way they run out. */
void node_send_ctrl(struct keel_node *n, uint32_t peer, enum wire_type type, uint32_t op_id,
		    const void *payload, uint32_t len)
{
	KEEL_ASSERT(WIRE_HEADER_SIZE + len + KEEL_AUTH_TRAILER_BYTES <= n->ctrl_size);
	KEEL_ASSERT(peer < n->world && peer != n->self && (payload != NULL || len == 0));
	KEEL_ASSERT(type != WIRE_DATA); /* data goes through the window (rel_send) */
	if (n->txq_count == n->burst)
		node_txq_flush(n);
	KEEL_ASSERT(n->ctrl_used < n->burst);
	uint8_t *buf = n->ctrl_buf + (size_t)(n->ctrl_used++) * n->ctrl_size;
	struct wire_header h;
	node_header_init(n, &h, type, peer);
	h.op_id = op_id;
	h.payload_len = len;
	/* Memory: no CRC, as for data (send_commit) and for a key's control datagrams
	 * (seal_all); add_crcs adds it where the way became a wire before the flush. */
	if (!n->auth && node_peer_intact(n, peer))
		h.flags |= WIRE_FLAG_NO_CRC;
	rel_ack_fields(n, peer, &h);
	if (len != 0)
		memcpy(buf + WIRE_HEADER_SIZE, payload, len);
	wire_encode(buf, &h);
	node_txq_push(n, peer, buf, WIRE_HEADER_SIZE + len, NULL, 0, 0, KEEL_DGRAM_CONTROL);
	KEEL_ASSERT(n->ctrl_used <= n->txq_count); /* its buffer is queued until the flush */
}

void node_budget_spend(struct keel_node *n, uint32_t bytes)
{
	KEEL_ASSERT(n->budget_bytes <= POLL_BUDGET_BYTES);
	n->budget_bytes = bytes >= n->budget_bytes ? 0 : n->budget_bytes - bytes;
}

void node_txq_push(struct keel_node *n, uint32_t peer, uint8_t *buf, uint32_t len,
		   const uint8_t *tail, uint32_t tail_len, uint32_t seq, uint32_t flags)
{
	KEEL_ASSERT_DEBUG(peer < n->world && peer != n->self);
	KEEL_ASSERT_DEBUG(buf != NULL && len >= WIRE_HEADER_SIZE && len + tail_len <= n->mtu);
	KEEL_ASSERT_DEBUG((tail == NULL) == (tail_len == 0));
	if (n->txq_count == n->burst)
		node_txq_flush(n);
	KEEL_ASSERT_DEBUG(n->txq_count < n->burst);
	struct keel_datagram *d = &n->txq[n->txq_count];
	d->buf = buf;
	d->len = len;
	d->cap = len;
	d->peer = peer;
	d->flags = flags;
	d->tail = tail;
	d->tail_len = tail_len;
	n->txq_tag[n->txq_count] = seq;
	n->txq_count++;
}

/* With a key, a way that is a wire promises nothing the core may use: every datagram on it is
 * sealed whole (no CRC left out, no tail). A way through memory only the job's ranks can write
 * (KEEL_CAP_INTACT: shared memory, whose region only the job's user may open) needs no MAC,
 * as it needs no CRC: the key keeps out whoever can reach the job's ports (docs/guide/security.md),
 * and nobody else reaches those rings. */
uint32_t node_peer_caps(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT_DEBUG(peer < n->world && peer != n->self);
	uint32_t caps = keel_transport_peer_caps(n->tp, peer);
	return !n->auth || (caps & KEEL_CAP_INTACT) != 0 ? caps : 0u;
}

bool node_peer_intact(struct keel_node *n, uint32_t peer)
{
	return (node_peer_caps(n, peer) & KEEL_CAP_INTACT) != 0;
}

bool node_peer_device_tail(struct keel_node *n, uint32_t peer, const void *addr, uint64_t len)
{
	KEEL_ASSERT_DEBUG(peer < n->world && peer != n->self);
	struct keel_transport *t = n->tp;
	return !n->auth && t->ops->device_tail_ok != NULL && len != 0 &&
	       t->ops->device_tail_ok(t, peer, addr, (size_t)len);
}

/* A datagram written without a CRC (its way was memory, or its payload is a borrowed tail)
 * gets its CRC as it leaves on a way that is not memory (the router fell back from shared
 * memory since, or the way takes tails but is a wire): the receiver would drop it otherwise.
 * So does every copy sent again: whatever lost the first (a receiver behind a layer
 * that did not pass KEEL_DGRAM_INTACT on, say) cannot then lose them all. */
static void add_crcs(struct keel_node *n)
{
	KEEL_ASSERT(!n->auth && n->txq_count <= n->burst);
	for (uint32_t i = 0; i < n->txq_count; i++) {
		struct keel_datagram *d = &n->txq[i];
		if (!wire_crc_left_out(d->buf))
			continue;
		if ((d->flags & KEEL_DGRAM_RETRANSMIT) != 0 || !node_peer_intact(n, d->peer))
			wire_add_crc(d->buf, d->tail);
		else /* written for memory: a router that falls back to a wire refuses it */
			d->flags |= KEEL_DGRAM_INTACT;
	}
}

/* The MAC goes on as a datagram leaves, not when it is written: a copy sent again gets a new
 * counter, so the receiver's replay window never refuses a retransmission. A datagram whose
 * way is memory (node_peer_caps) leaves unsealed, as without a key, marked KEEL_DGRAM_INTACT;
 * so does one with a tail (written while its way was memory: it cannot be sealed in two
 * pieces). A router whose route for the peer became a wire since refuses such a datagram,
 * and the copy sent again goes whole and sealed (transmit, reliable.c); a layer that did not
 * would reach a receiver that drops it. Every copy sent again is sealed: whatever lost the
 * first (a layer that did not pass KEEL_DGRAM_INTACT on) cannot then lose them all. */
static void seal_all(struct keel_node *n)
{
	KEEL_ASSERT(n->auth && n->txq_count <= n->burst);
	for (uint32_t i = 0; i < n->txq_count; i++) {
		struct keel_datagram *d = &n->txq[i];
		bool again = (d->flags & KEEL_DGRAM_RETRANSMIT) != 0;
		KEEL_ASSERT(!again || d->tail == NULL); /* transmit copied it in */
		if (d->tail != NULL || (!again && node_peer_intact(n, d->peer))) {
			/* Written for memory (a tail only ever is, with a key): a router that
			 * fell back to a wire since refuses it, and it comes back sealed whole. */
			wire_set_sealed(d->buf, false);
			d->flags |= KEEL_DGRAM_INTACT;
			continue;
		}
		wire_set_sealed(d->buf, true);
		KEEL_ASSERT_DEBUG(d->len + KEEL_AUTH_TRAILER_BYTES <= n->mtu);
		auth_seal(&n->auth_ctx, d->buf, (uint32_t)d->len);
		d->len += KEEL_AUTH_TRAILER_BYTES;
		d->cap = d->len;
	}
}

void node_txq_drop(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	KEEL_ASSERT(seq != 0 && n->txq_count <= n->burst);
	uint32_t w = 0;
	for (uint32_t i = 0; i < n->txq_count; i++) {
		if (n->txq_tag[i] == seq && n->txq[i].peer == peer)
			continue;
		n->txq[w] = n->txq[i];
		n->txq_tag[w++] = n->txq_tag[i];
	}
	KEEL_ASSERT(w < n->txq_count && n->ctrl_used <= w); /* it was there; control stays */
	n->txq_count = w;
}

/* A queued datagram the transport did not take: a reliable one stays in its window and is
 * sent again next poll; a control one (heartbeat, ack) is simply lost. */
static void txq_refused(struct keel_node *n, uint32_t i)
{
	n->ctr.tx_blocked++;
	if (n->txq_tag[i] != 0)
		rel_txq_refused(n, n->txq[i].peer, n->txq_tag[i]);
}

/* The transport stopped at txq[from]: the way to its peer is full (a shared-memory ring, a
 * NIC queue). Set aside every queued datagram for that peer (its order is kept) and close the
 * gap, so that the others' traffic, heartbeats first of all, is not held behind it. Returns
 * the new queue length. */
static uint32_t txq_set_aside(struct keel_node *n, uint32_t from, uint32_t count)
{
	uint32_t blocked = n->txq[from].peer, w = from;
	for (uint32_t j = from; j < count; j++) {
		if (n->txq[j].peer == blocked) {
			txq_refused(n, j);
			continue;
		}
		n->txq[w] = n->txq[j];
		n->txq_tag[w++] = n->txq_tag[j];
	}
	KEEL_ASSERT(w < count); /* txq[from] at least was set aside */
	return w;
}

/* Hand the queue to the transport, in as many calls as it takes peers whose way is full: each
 * call either takes the rest or stops at a peer, which is then set aside. A call after a set
 * aside that takes nothing means the transport as a whole is full (a UDP socket buffer): the
 * rest waits for the next poll rather than costing a call per peer. */
void node_txq_flush(struct keel_node *n)
{
	uint32_t count = n->txq_count, done = 0;
	bool retry = false;
	KEEL_ASSERT(count <= n->burst && n->ctrl_used <= count);
	if (n->auth)
		seal_all(n);
	else
		add_crcs(n);
	while (done < count && n->fatal == 0) { /* bounded: each pass shrinks count - done */
		int sent = n->tp->ops->send_burst(n->tp, n->now_ns, n->txq + done, count - done);
		if (sent < 0) {
			if (sent != -EINVAL)
				n->fatal = KEEL_ETRANSPORT;
			break;
		}
		KEEL_ASSERT((uint32_t)sent <= count - done);
		n->ctr.tx_datagrams += (uint64_t)sent;
		for (uint32_t i = done; i < done + (uint32_t)sent; i++) {
			n->ctr.tx_bytes += n->txq[i].len + n->txq[i].tail_len;
			if (n->txq_tag[i] != 0)
				rel_txq_sent(n, n->txq[i].peer, n->txq_tag[i]);
		}
		done += (uint32_t)sent;
		if (done == count || (sent == 0 && retry))
			break;
		count = txq_set_aside(n, done, count);
		retry = true;
	}
	for (uint32_t i = done; i < count; i++) /* a fatal or -EINVAL answer: the rest */
		txq_refused(n, i);
	n->txq_count = 0;
	n->ctrl_used = 0;
}

static void count_drop(struct keel_node *n, enum wire_verdict v)
{
	uint64_t *c[WIRE_VERDICT_COUNT] = {
	    [WIRE_BAD_TRUNCATED] = &n->ctr.drop_truncated,
	    [WIRE_BAD_MAGIC] = &n->ctr.drop_magic,
	    [WIRE_BAD_VERSION] = &n->ctr.drop_version,
	    [WIRE_BAD_TYPE] = &n->ctr.drop_type,
	    [WIRE_BAD_LENGTH] = &n->ctr.drop_length,
	    [WIRE_BAD_CRC] = &n->ctr.drop_crc,
	    [WIRE_BAD_JOB] = &n->ctr.drop_job,
	    [WIRE_BAD_EPOCH] = &n->ctr.drop_epoch,
	    [WIRE_BAD_SOURCE] = &n->ctr.drop_source,
	    [WIRE_BAD_DESTINATION] = &n->ctr.drop_destination,
	    [WIRE_BAD_AUTH] = &n->ctr.drop_auth,
	    [WIRE_BAD_REPLAY] = &n->ctr.drop_replay,
	};
	KEEL_ASSERT(v > WIRE_OK && v < WIRE_VERDICT_COUNT && c[v] != NULL);
	(*c[v])++;
}

/* A payload the transport handed over in device memory goes back to it, unless a device work
 * item now holds it (coll_dev_take_device). */
static void handle_device_payload(struct keel_node *n, const struct keel_datagram *d);

void node_handle_datagram(struct keel_node *n, const struct keel_datagram *d)
{
	KEEL_ASSERT_DEBUG(n != NULL && d != NULL && d->buf != NULL);
	if ((d->flags & KEEL_DGRAM_DEVICE_TAIL) != 0 && !n->rx_device) {
		handle_device_payload(n, d);
		return;
	}
	struct wire_expect exp = {
	    .job_id = n->cfg.job_id,
	    .epoch = n->epoch,
	    .self = n->self,
	    .world_size = n->world,
	    .transport_src = d->peer,
	    .auth = n->auth ? &n->auth_ctx : NULL,
	    .intact = (d->flags & KEEL_DGRAM_INTACT) != 0,
	    .link_checked = (d->flags & KEEL_DGRAM_LINK_CHECKED) != 0,
	    .detached = n->rx_device ? d->tail_len : 0,
	};
	struct wire_header h;
	enum wire_verdict v = wire_decode(d->buf, d->len, &exp, &h);
	/* a datagram through memory carries no counter: only the job's ranks write there */
	if (v == WIRE_OK && n->auth && (h.flags & WIRE_FLAG_AUTH) != 0 &&
	    !auth_replay_accept(&n->auth_peers[h.src], h.auth_inc, h.auth_counter))
		v = WIRE_BAD_REPLAY;
	if (v != WIRE_OK) {
		count_drop(n, v);
		return;
	}
	n->ctr.rx_datagrams++;
	n->ctr.rx_bytes += d->len;
	/* what the decoder guarantees; everything else in h is still the peer's claim */
	KEEL_ASSERT_DEBUG(h.src < n->world && h.src != n->self && h.dst == n->self);
	if (h.type != WIRE_HEARTBEAT)
		fd_heard(n, h.src);
	const uint8_t *payload = n->rx_device ? d->tail : d->buf + WIRE_HEADER_SIZE;
	if (h.epoch == n->epoch && n->member && h.type != WIRE_LEAVE) {
		/* Acks and finished-collective counts belong to this epoch's streams. Every
		 * header's op_id says how many collectives its sender finished (DATA: it is on
		 * that one, so it finished the ones before). */
		KEEL_ASSERT_DEBUG(view_has(&n->view, n->self));
		rel_on_ack(n, h.src, h.ack, h.sack, h.wnd);
		if (view_has(&n->view, h.src))
			mb_heard_done(n, h.src, h.op_id);
	}
	switch ((enum wire_type)h.type) {
	case WIRE_HEARTBEAT:
		fd_on_heartbeat(n, h.src, &h, payload);
		break;
	case WIRE_VIEW:
		mb_on_view_msg(n, h.src, &h, payload);
		break;
	case WIRE_ACK:
		break;
	case WIRE_DATA:
		rel_on_data(n, h.src, &h, payload);
		break;
	case WIRE_LEAVE:
		fd_on_leave(n, h.src, h.epoch, h.op_id);
		break;
	}
}

static void handle_device_payload(struct keel_node *n, const struct keel_datagram *d)
{
	KEEL_ASSERT(d->tail != NULL && d->tail_len != 0 && n->tp->ops->rx_release != NULL);
	n->rx_device = true;
	n->rx_device_kept = false;
	node_handle_datagram(n, d);
	n->rx_device = false;
	if (!n->rx_device_kept)
		node_rx_release(n, d->peer, d->tail);
	n->rx_device_kept = false;
}

void node_rx_release(struct keel_node *n, uint32_t peer, const uint8_t *payload)
{
	n->tp->ops->rx_release(n->tp, peer, payload);
}

/* Receive one burst; returns how many datagrams came in. */
static uint32_t receive_burst(struct keel_node *n)
{
	KEEL_ASSERT(n->burst != 0 && n->burst <= KEEL_BURST_MAX);
	/* A backend may have moved buffers between entries or pointed them into its own
	 * memory: start each burst from the fresh state, in one block copy (a field-by-field
	 * loop cost a tenth of a small AllReduce's instructions). */
	memcpy(n->rxq, n->rxq_fresh, n->burst * sizeof(*n->rxq));
	int got = n->tp->ops->recv_burst(n->tp, n->now_ns, n->rxq, n->burst);
	if (got < 0) {
		if (got != -EAGAIN && got != -EINTR)
			n->fatal = KEEL_ETRANSPORT;
		return 0;
	}
	KEEL_ASSERT((uint32_t)got <= n->burst);
	n->nic_writes_flushed = false; /* this burst's device payloads: coll_dev_take_device */
	for (int i = 0; i < got; i++) {
		node_handle_datagram(n, &n->rxq[i]);
		node_budget_spend(n, n->rxq[i].len);
	}
	return (uint32_t)got;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	uint64_t m = a < b ? a : b;
	KEEL_ASSERT(m <= a && m <= b);
	return m;
}

int keel_poll(struct keel_node *node, uint64_t now_ns, uint64_t *next_deadline_ns)
{
	KEEL_ASSERT(node != NULL && node->tp != NULL && next_deadline_ns != NULL);
	struct keel_node *n = node;
	if (now_ns > n->now_ns)
		n->now_ns = now_ns;
	fd_poll_start(n);
	n->budget_bytes = POLL_BUDGET_BYTES;
	rel_redeliver(n);
	coll_progress(n);
	/* A collective started since the last poll queued its first data: it leaves now, not
	 * after a receive that has nothing yet (its peers wait for exactly this). */
	if (n->txq_count != 0)
		node_txq_flush(n);
	for (uint32_t round = 0; round < RX_ROUNDS_MAX && n->fatal == 0; round++) {
		uint32_t got = receive_burst(n);
		rel_redeliver(n);
		coll_progress(n);
		if (got < n->burst || n->budget_bytes == 0)
			break;
		/* A long backlog: tell senders what arrived now so their windows keep moving. */
		rel_send_acks(n);
		node_txq_flush(n);
	}
	/* Acks first: a result reached just now (op_local_done) is what the members wait for. */
	rel_send_acks(n);
	node_txq_flush(n);
	if (n->copyin_busy != 0)
		rel_device_copies(n); /* a payload the device copied to the host goes now */
	rel_timers(n);
	fd_beat(n);
	fd_check(n);
	mb_poll(n);
	coll_progress(n);
	/* This poll's sends may let in what the collectives refused before them: a step that
	 * receives where it sends takes its data only once it has sent. Left held, it waited
	 * for the next datagram to wake this node. Each step taken may send the next: until
	 * nothing held is taken (at most once per datagram held). */
	while (n->rx_held != 0) {
		uint64_t held = n->rx_held;
		rel_redeliver(n);
		if (n->rx_held == held)
			break;
		coll_progress(n);
	}
	rel_send_acks(n); /* results announced just now */
	node_txq_flush(n);

	uint64_t dl = fd_next_deadline(n);
	dl = min_u64(dl, rel_next_deadline(n));
	dl = min_u64(dl, coll_next_deadline(n));
	dl = min_u64(dl, grp_next_deadline_all(n));
	dl = min_u64(dl, mb_next_deadline(n));
	if (n->tp->ops->next_deadline_ns != NULL)
		dl = min_u64(dl, n->tp->ops->next_deadline_ns(n->tp));
	if (n->budget_bytes == 0)
		dl = n->now_ns; /* work left over: come back at once, with a fresh clock */
	*next_deadline_ns = dl < n->now_ns ? n->now_ns : dl;
	KEEL_ASSERT(*next_deadline_ns >= n->now_ns && n->txq_count == 0);
	KEEL_ASSERT(n->epoch == n->view.epoch);
	if (n->fatal != 0)
		return n->fatal;
	return n->noquorum ? KEEL_ENOQUORUM : 0;
}

int keel_view_get(const struct keel_node *node, struct keel_view *view, uint32_t *members,
		  uint32_t members_cap)
{
	if (node == NULL || view == NULL)
		return -EINVAL;
	const struct view *v = &node->view;
	KEEL_ASSERT(v->count <= node->world && (!node->member || v->count != 0));
	KEEL_ASSERT(v->epoch == node->epoch);
	view->epoch = v->epoch;
	view->member_count = v->count;
	view->world_size = node->world;
	view->self = node->self;
	view->self_member = node->member && !node->noquorum;
	view->self_joined = node->joined_last;
	view->joined_count = node->joined_count;
	view->donor = node->donor;
	view->ops_resume = v->ops_resume;
	if (members == NULL)
		return 0;
	if (members_cap < v->count)
		return -ENOSPC;
	memcpy(members, node->rank_at, (size_t)v->count * sizeof(uint32_t));
	return (int)v->count;
}

int keel_peer_get(const struct keel_node *node, uint32_t peer, struct keel_peer_info *info)
{
	if (node == NULL || info == NULL || peer >= node->world)
		return -EINVAL;
	const struct fd_peer *f = fd_peer_of(node, peer);
	const struct rel_peer *r = rel_peer_of(node, peer);
	memset(info, 0, sizeof(*info));
	info->state = peer == node->self ? KEEL_PEER_SELF : f->state;
	info->member = view_has(&node->view, peer);
	info->incarnation = peer == node->self ? node->incarnation : mb_peer_of(node, peer)->inc;
	info->last_heard_ns = f->last_heard_ns;
	info->rtt_ns = f->hb_srtt_ns;
	info->rto_ns = r->rto_ns;
	info->rtt_ns_last = f->rtt_ns_last;
	info->data_sent = r->data_sent;
	info->rtt_samples = f->rtt_samples;
	info->retransmits = r->retransmits;
	info->suspicions = f->suspicions;
	info->left = peer != node->self && f->gone;
	KEEL_ASSERT(info->state <= KEEL_PEER_SELF &&
		    (peer == node->self) == (info->state == KEEL_PEER_SELF));
	return 0;
}

bool keel_peer_is_alive(const struct keel_node *node, uint32_t peer)
{
	if (node == NULL || peer >= node->world)
		return false;
	KEEL_ASSERT(node->self < node->world);
	return peer == node->self || fd_is_alive(node, peer);
}

void keel_counters_get(const struct keel_node *node, struct keel_counters *out)
{
	KEEL_ASSERT(node != NULL && out != NULL);
	*out = node->ctr;
}

/* How many of this epoch's collectives this node knows every member of its view has: the
 * members that stay read a LEAVE's count as "every member had these" (everyone_done). Its own
 * reports are not that: one reported early (eager_result_bytes) may be missing at a member
 * still waiting for the data, so the count is the least of what the members said they
 * finished, and of its own reports. Too low only makes the others wait for their acks or for
 * the view change its leave brings. */
static uint32_t results_everyone_has(const struct keel_node *n)
{
	uint32_t least = n->op_run_id - n->op_base;
	for (uint32_t r = 0; r < n->world; r++) {
		if (r == n->self || !view_has(&n->view, r) || fd_peer_of(n, r)->left)
			continue;
		uint32_t done = mb_peer_of(n, r)->ops_done;
		if (seq_before(done, least))
			least = done;
	}
	return least;
}

bool keel_is_idle(const struct keel_node *node)
{
	KEEL_ASSERT(node != NULL);
	if (node->op_run_id != node->op_next_id || !grp_idle_all(node))
		return false;
	/* A result reported early (eager) may still be missing at a member, or not even started
	 * there: leaving now would hand that member a view change in the middle of it. */
	if (node->member && results_everyone_has(node) != node->op_run_id - node->op_base)
		return false;
	for (uint32_t i = 0; i < node->world; i++) {
		const struct rel_peer *p = rel_peer_of(node, i);
		KEEL_ASSERT(!seq_before(p->snd_nxt, p->snd_una));
		if (p->snd_una != p->snd_nxt)
			return false;
	}
	return true;
}

int keel_leave(struct keel_node *node, uint64_t now_ns)
{
	KEEL_ASSERT(node != NULL && node->tp != NULL);
	struct keel_node *n = node;
	if (now_ns > n->now_ns)
		n->now_ns = now_ns;
	/* Every rank, once: members; restarted ranks asking to join; and ranks the view left out
	 * that may still run — a paused one reads this when it resumes, and need not wait to be
	 * admitted by nobody. O(world) datagrams, at exit only. */
	uint32_t everyone = results_everyone_has(n);
	for (uint32_t i = 0; i < n->world; i++)
		if (i != n->self)
			node_send_ctrl(n, i, WIRE_LEAVE, everyone, NULL, 0);
	node_txq_flush(n);
	KEEL_ASSERT(n->txq_count == 0 && n->ctrl_used == 0);
	return n->fatal;
}
