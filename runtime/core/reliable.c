/* Reliable delivery over transports that lose, duplicate and reorder: a per-peer sliding
 * window with sequence numbers, cumulative + selective acks, a receive window advertised in
 * every header, and retransmission timed from measured RTT (RFC 6298 style, Karn's rule).
 * Delivery to the collectives is in order; data they cannot take yet stays in the window.
 * A transport that promises KEEL_CAP_RELIABLE loses nothing, but the receiving core may still
 * drop what it delivered (data of a view it has not installed yet, no buffer to hold it), so
 * the same timer and hole repair run there too. Sacks come only after such a drop; the timer
 * also fires for a receiver slow to poll, and then costs one duplicate that it drops. */
#include <string.h>

#include "assert_int.h"
#include "keel/device.h"
#include "keel/limits.h"
#include "node_int.h"

/* Exponential backoff stops doubling after this many tries (rto_max caps it anyway). */
#define BACKOFF_SHIFT_MAX 10u

_Static_assert(KEEL_WINDOW_MAX <= UINT16_MAX, "a window is advertised in the u16 wnd field");
_Static_assert(KEEL_WINDOW_MAX < (1u << 31), "seq differences within a window fit an int32");

static size_t stride(const struct keel_node *n)
{
	KEEL_ASSERT(n->mtu >= WIRE_HEADER_SIZE);
	size_t bytes = ((size_t)n->mtu + 63u) & ~(size_t)63u;
	KEEL_ASSERT(bytes >= n->mtu && bytes % 64u == 0);
	return bytes;
}

/* The window invariants of one peer, true between any two calls into this file: the send
 * window [snd_una, snd_nxt) is at most a window long and never passes the receiver's edge;
 * the receive side acknowledges at most a window past what it delivered. Differences are
 * taken in uint32 and compared as int32 (seq_before), so they survive wrapping. */
static void window_check(const struct keel_node *n, const struct rel_peer *p)
{
	(void)n; /* debug builds only: called on every ack and send */
	(void)p;
	KEEL_ASSERT_DEBUG(!seq_before(p->snd_nxt, p->snd_una) &&
			  p->snd_nxt - p->snd_una <= n->window);
	KEEL_ASSERT_DEBUG(!seq_before(p->snd_edge, p->snd_nxt));
	KEEL_ASSERT_DEBUG(!seq_before(p->rcv_ack, p->rcv_nxt) &&
			  p->rcv_ack - p->rcv_nxt <= n->window);
	KEEL_ASSERT_DEBUG(p->rx_held <= n->window);
	/* a peer without buffers (pooled streams) has nothing in flight and nothing held */
	KEEL_ASSERT_DEBUG(p->tx != NULL || (p->snd_una == p->snd_nxt && p->rx_held == 0));
}

/* The node's totals are the sums of the peers' (O(world): debug builds only). */
static void totals_check(const struct keel_node *n)
{
	KEEL_ASSERT(n->acks_owed <= n->world);
	KEEL_ASSERT(n->rx_held <= (uint64_t)n->world * n->window);
#ifdef KEEL_DEBUG
	uint64_t flight = 0, held = 0, borrowed = 0, device = 0;
	uint32_t owed = 0;
	for (uint32_t i = 0; i < n->world; i++) {
		const struct rel_peer *p = &n->rel_peers[i];
		flight += p->snd_nxt - p->snd_una;
		held += p->rx_held;
		owed += p->ack_pending;
		for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
			borrowed += p->tx[seq & (n->window - 1)].tail != NULL;
			device += p->tx[seq & (n->window - 1)].device;
		}
	}
	KEEL_ASSERT_DEBUG(device == n->tx_device);
	KEEL_ASSERT_DEBUG(flight == n->tx_flight);
	KEEL_ASSERT_DEBUG(borrowed == n->tx_borrowed);
	KEEL_ASSERT_DEBUG(held == n->rx_held);
	KEEL_ASSERT_DEBUG(owed == n->acks_owed);
#endif
}

/* ---- the active set: peers with anything in flight, owed or held ---- */

static bool peer_busy(const struct rel_peer *p)
{
	return p->snd_una != p->snd_nxt || p->ack_pending || p->rx_held != 0 || p->unsent;
}

static void active_mark(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT_DEBUG(peer < n->world && peer != n->self);
	n->rel_active[peer / 64] |= 1ull << (peer % 64);
}

/* A peer's retransmission (ack) deadline was set to `at`: rel_timers' (rel_send_acks') walk,
 * due at *walk, must not start later. The walks ran at every poll, a tenth of a 4-rank small
 * AllReduce's instructions. */
static void walk_by(uint64_t *walk, uint64_t at)
{
	if (at < *walk)
		*walk = at;
}

/* The transport refused some of the peer's slots: the timers' walk sends them next poll. */
static void mark_unsent(struct keel_node *n, struct rel_peer *p)
{
	p->unsent = true;
	n->rel_unsent = true;
	active_mark(n, (uint32_t)(p - n->rel_peers));
}

/* The next active peer at or after `from` (in rank order, so that scans visit peers in the
 * order a walk over the world would), or n->world when none. Idle peers met on the way are
 * dropped from the set when `prune` (the set is the node's scratch, not its state: a const
 * caller passes false). */
static uint32_t active_next(const struct keel_node *n, uint32_t from, bool prune)
{
	uint32_t words = (n->world + 63) / 64;
	for (uint32_t w = from / 64; w < words; w++) {
		uint64_t bits = n->rel_active[w];
		if (w == from / 64)
			bits &= ~0ull << (from % 64);
		while (bits != 0) {
			uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
			bits &= bits - 1;
			if (peer_busy(&n->rel_peers[i]))
				return i;
			if (prune)
				n->rel_active[w] &= ~(1ull << (i % 64));
		}
	}
	return n->world;
}

/* Every busy peer is in the set (O(world): debug builds only). */
static void active_check(const struct keel_node *n)
{
#ifdef KEEL_DEBUG
	for (uint32_t i = 0; i < n->world; i++)
		KEEL_ASSERT_DEBUG(!peer_busy(&n->rel_peers[i]) ||
				  (n->rel_active[i / 64] >> (i % 64) & 1u));
#else
	(void)n;
#endif
}

#define FOR_ACTIVE(n, i, prune)                                                                    \
	for (uint32_t i = active_next((n), 0, (prune)); i < (n)->world;                            \
	     i = active_next((n), i + 1, (prune)))

/* ---- window buffers lent from the pool (config streams) ---- */

static bool stream_idle(const struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world);
	const struct rel_peer *p = &n->rel_peers[peer];
	KEEL_ASSERT(p->rx_held <= n->window);
	return p->snd_una == p->snd_nxt && p->rx_held == 0;
}

/* A free stream, or one whose peer has nothing in flight or held; UINT32_MAX if none. */
static uint32_t stream_find(const struct keel_node *n)
{
	/* with a stream per rank every peer keeps its buffers: nobody looks for one */
	KEEL_ASSERT(n->stream_pool && n->streams < n->world);
	uint32_t idle = UINT32_MAX;
	for (uint32_t s = 0; s < n->streams; s++) {
		uint32_t owner = n->stream_owner[s];
		if (owner == UINT32_MAX)
			return s;
		KEEL_ASSERT(owner < n->world && owner != n->self);
		if (idle == UINT32_MAX && stream_idle(n, owner))
			idle = s;
	}
	return idle;
}

static void stream_detach(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(n->stream_pool && peer < n->world);
	struct rel_peer *p = &n->rel_peers[peer];
	uint32_t owned = 0;
	for (uint32_t s = 0; s < n->streams; s++)
		if (n->stream_owner[s] == peer) {
			n->stream_owner[s] = UINT32_MAX;
			owned++;
		}
	KEEL_ASSERT(owned <= 1 && (owned == 1) == (p->tx != NULL));
	p->tx = NULL;
	p->rx = NULL;
	p->tx_buf = p->rx_buf = NULL;
}

/* Give `peer` window buffers if it has none; false when every stream is busy. */
static bool stream_attach(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	if (p->tx != NULL)
		return true;
	KEEL_ASSERT(stream_idle(n, peer)); /* nothing was in flight or held without buffers */
	uint32_t s = stream_find(n);
	if (s == UINT32_MAX)
		return false;
	KEEL_ASSERT(s < n->streams);
	if (n->stream_owner[s] != UINT32_MAX) {
		/* lent back only by a peer with nothing in flight or held: no data is lost */
		KEEL_ASSERT(stream_idle(n, n->stream_owner[s]));
		stream_detach(n, n->stream_owner[s]);
	}
	n->stream_owner[s] = peer;
	p->tx = n->stream_tx + (size_t)s * n->window;
	p->rx = n->stream_rx + (size_t)s * n->window;
	p->tx_buf = n->stream_tx_buf + (size_t)s * n->window * stride(n);
	p->rx_buf = n->stream_rx_buf + (size_t)s * n->window * stride(n);
	memset(p->tx, 0, (size_t)n->window * sizeof(*p->tx));
	memset(p->rx, 0, (size_t)n->window * sizeof(*p->rx));
	return true;
}

/* Whether receive slot `seq` holds a datagram (a peer without buffers holds none). */
static bool rx_used(const struct rel_peer *p, uint32_t seq, uint32_t window)
{
	KEEL_ASSERT_DEBUG(p != NULL && window != 0 && (window & (window - 1)) == 0);
	return p->rx != NULL && p->rx[seq & (window - 1)].used;
}

void rel_peer_init(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world);
	struct rel_peer *p = &n->rel_peers[peer];
	if (!n->stream_pool) { /* a stream per rank, for good */
		p->tx = n->stream_tx + (size_t)peer * n->window;
		p->rx = n->stream_rx + (size_t)peer * n->window;
		p->tx_buf = n->stream_tx_buf + (size_t)peer * n->window * stride(n);
		p->rx_buf = n->stream_rx_buf + (size_t)peer * n->window * stride(n);
	}
	p->rto_ns = n->cfg.rto_initial_ns;
	rel_peer_reset(n, peer);
	KEEL_ASSERT(p->rto_ns >= n->cfg.rto_min_ns && p->rto_ns <= n->cfg.rto_max_ns);
	KEEL_ASSERT(n->stream_pool || p->tx != NULL);
}

bool rel_can_send(const struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	const struct rel_peer *p = &n->rel_peers[peer];
	window_check(n, p);
	return p->snd_nxt - p->snd_una < n->window && seq_before(p->snd_nxt, p->snd_edge) &&
	       (p->tx != NULL || stream_find(n) != UINT32_MAX);
}

static void set_ack_pending(struct keel_node *n, struct rel_peer *p, bool pending)
{
	if (p->ack_pending == pending)
		return;
	p->ack_pending = pending;
	if (pending)
		active_mark(n, (uint32_t)(p - n->rel_peers));
	KEEL_ASSERT(pending || n->acks_owed > 0);
	n->acks_owed = pending ? n->acks_owed + 1 : n->acks_owed - 1;
	KEEL_ASSERT(n->acks_owed < n->world); /* never to self */
}

void rel_ack_soon(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	set_ack_pending(n, p, true);
	p->ack_due_ns = n->now_ns;
	walk_by(&n->rel_ack_at, p->ack_due_ns);
	KEEL_ASSERT(p->ack_pending && n->acks_owed > 0);
}

void rel_ack_owed_now(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	if (p->ack_pending && p->ack_due_ns > n->now_ns) {
		p->ack_due_ns = n->now_ns;
		walk_by(&n->rel_ack_at, p->ack_due_ns);
	}
}

void rel_ack_fields(struct keel_node *n, uint32_t peer, struct wire_header *h)
{
	KEEL_ASSERT_DEBUG(peer < n->world && peer != n->self && h != NULL);
	struct rel_peer *p = &n->rel_peers[peer];
	window_check(n, p); /* so the advertised window below is 0..window */
	uint32_t sack = 0;
	/* A slot is used only while it holds a datagram, and none past rcv_high: with nothing
	 * stored past rcv_ack + 1, as always over an ordered transport, skip the scan (every
	 * header is built here; the scan was 5 % of a 4-rank small AllReduce). */
	bool past_hole = p->rx_held != 0 && seq_before(p->rcv_ack + 1u, p->rcv_high);
	if (!past_hole) /* kept near rcv_ack, so that sequence numbers never wrap past it */
		p->rcv_high = p->rcv_ack + 1u;
	for (uint32_t i = 0; past_hole && i < 32u && i + 1u < n->window; i++) {
		uint32_t seq = p->rcv_ack + 1u + i;
		if (seq - p->rcv_nxt >= n->window || !seq_before(seq, p->rcv_high))
			break;
		if (rx_used(p, seq, n->window))
			sack |= 1u << i;
	}
	h->ack = p->rcv_ack;
	h->sack = sack;
	h->wnd = (uint16_t)(p->rcv_nxt + n->window - p->rcv_ack);
	set_ack_pending(n, p, false);
	p->rcv_unacked = 0;
	p->ack_due_ns = UINT64_MAX;
	KEEL_ASSERT_DEBUG(h->wnd <= n->window);
}

/* An ack is owed. In-order data may wait ack_delay_ns for traffic to carry it (the next
 * collective step usually does) or until a quarter window piles up; anything that tells the
 * sender about a hole, a duplicate or a reopened window goes out at this poll's end. */
static void ack_owed(struct keel_node *n, struct rel_peer *p, bool urgent)
{
	KEEL_ASSERT_DEBUG(p != n->rel_peers + n->self);
	set_ack_pending(n, p, true);
	p->rcv_unacked++;
	uint64_t due =
	    urgent || p->rcv_unacked >= n->window / 4 ? n->now_ns : n->now_ns + n->cfg.ack_delay_ns;
	if (due < p->ack_due_ns)
		p->ack_due_ns = due;
	walk_by(&n->rel_ack_at, p->ack_due_ns);
	KEEL_ASSERT_DEBUG(p->ack_pending && p->ack_due_ns <= n->now_ns + n->cfg.ack_delay_ns);
}

static uint8_t *tx_bytes(struct keel_node *n, struct rel_peer *p, uint32_t seq)
{
	KEEL_ASSERT_DEBUG(p->tx_buf != NULL);
	/* only a seq inside the send window has bytes */
	KEEL_ASSERT_DEBUG(seq - p->snd_una < p->snd_nxt - p->snd_una);
	return p->tx_buf + (size_t)(seq & (n->window - 1)) * stride(n);
}

static uint64_t backoff_rto(const struct keel_node *n, const struct rel_peer *p, uint32_t tries)
{
	KEEL_ASSERT_DEBUG(p->rto_ns >= n->cfg.rto_min_ns && p->rto_ns <= n->cfg.rto_max_ns);
	uint32_t shift = tries > 1 ? tries - 1 : 0;
	if (shift > BACKOFF_SHIFT_MAX)
		shift = BACKOFF_SHIFT_MAX;
	uint64_t rto = p->rto_ns << shift;
	rto = rto > n->cfg.rto_max_ns ? n->cfg.rto_max_ns : rto;
	KEEL_ASSERT_DEBUG(rto >= p->rto_ns || rto == n->cfg.rto_max_ns);
	return rto;
}

/* One borrowed payload fewer; with no rewritten one left, none lies anywhere a write could
 * reach. */
static void borrow_end(struct keel_node *n, struct tx_slot *s)
{
	KEEL_ASSERT(s->tail != NULL && n->tx_borrowed > 0);
	s->tail = NULL;
	n->tx_borrowed--;
	if (s->device) {
		KEEL_ASSERT(n->tx_device > 0 && !s->rewritten);
		s->device = 0;
		n->tx_device--;
	}
	if (s->rewritten) {
		KEEL_ASSERT(n->tx_rewritten > 0);
		s->rewritten = 0;
		if (--n->tx_rewritten == 0) {
			n->rewritten_lo = UINTPTR_MAX;
			n->rewritten_hi = 0;
		}
	}
}

/* Bring a borrowed payload into the slot's own buffer, after its header. */
static void copy_in(struct keel_node *n, struct rel_peer *p, uint32_t seq)
{
	struct tx_slot *s = &p->tx[seq & (n->window - 1)];
	KEEL_ASSERT(s->tail != NULL && s->len > WIRE_HEADER_SIZE && n->tx_borrowed > 0);
	KEEL_ASSERT(!s->device); /* the CPU never reads device memory: device_copy_in does */
	memcpy(tx_bytes(n, p, seq) + WIRE_HEADER_SIZE, s->tail, s->len - WIRE_HEADER_SIZE);
	borrow_end(n, s);
}

/* Forget the device copy running for this slot: it lands in its bounce buffer, unused. */
static void device_copy_orphan(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	for (uint32_t i = 0; i < KEEL_DEVICE_COPYIN_MAX; i++)
		if (n->copyin[i].busy && n->copyin[i].peer == peer && n->copyin[i].seq == seq)
			n->copyin[i].peer = UINT32_MAX;
}

/* A device payload whose way lost the NIC that read it (a router fell back from verbs to a
 * wire): the device copies it to its home in the stage (the slot may be released and its
 * buffer lent to another peer while the copy runs), and rel_device_copies puts it in the
 * slot; it then goes whole, with a CRC over all of it. Meanwhile it waits unsent. */
static void device_copy_start(struct keel_node *n, uint32_t peer, uint32_t seq);

static void device_copy_in(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	struct rel_peer *p = &n->rel_peers[peer];
	struct tx_slot *s = &p->tx[seq & (n->window - 1)];
	KEEL_ASSERT(s->device && s->tail != NULL && n->cfg.device != NULL);
	s->sent_ns = 0; /* not sent: tried again at the next poll */
	mark_unsent(n, p);
	device_copy_start(n, peer, seq);
}

/* Queue the device's copy of the slot's payload to its home (once); rel_device_copies takes
 * it into the slot when done. */
static void device_copy_start(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	struct rel_peer *p = &n->rel_peers[peer];
	struct tx_slot *s = &p->tx[seq & (n->window - 1)];
	if (s->dev_copy)
		return;
	const struct keel_device *dev = n->cfg.device;
	uint32_t len = s->len - WIRE_HEADER_SIZE;
	uint8_t *home = coll_dev_home(n, s->tail, len);
	KEEL_ASSERT(home != NULL); /* its operation has not been handed back: it waits for this */
	for (uint32_t i = 0; i < KEEL_DEVICE_COPYIN_MAX; i++) {
		struct dev_copyin *c = &n->copyin[i];
		if (c->busy)
			continue;
		uint32_t ticket = 0;
		int rc = dev->ops->copy(dev->state, home, s->tail, len, KEEL_COPY_D2H, &ticket);
		if (rc != 0) /* full (-EAGAIN) or failing: tried again at the next transmit */
			return;
		*c = (struct dev_copyin){
		    .home = home, .peer = peer, .seq = seq, .ticket = ticket, .busy = true};
		n->copyin_busy++;
		s->dev_copy = 1;
		return;
	}
}

void rel_device_copies(struct keel_node *n)
{
	const struct keel_device *dev = n->cfg.device;
	KEEL_ASSERT(dev != NULL && n->copyin_busy <= KEEL_DEVICE_COPYIN_MAX);
	for (uint32_t i = 0; i < KEEL_DEVICE_COPYIN_MAX; i++) {
		struct dev_copyin *c = &n->copyin[i];
		if (!c->busy)
			continue;
		int rc = dev->ops->test(dev->state, c->ticket);
		if (rc == -EINPROGRESS)
			continue;
		c->busy = false;
		n->copyin_busy--;
		if (c->peer == UINT32_MAX)
			continue; /* its slot went meanwhile */
		struct rel_peer *p = &n->rel_peers[c->peer];
		struct tx_slot *s = &p->tx[c->seq & (n->window - 1)];
		/* slot_release orphans the copy of a slot that goes: this one is in flight */
		KEEL_ASSERT(p->tx != NULL && s->dev_copy && s->device);
		s->dev_copy = 0;
		if (rc != 0)
			continue; /* the device failed it: its next transmit asks again */
		uint8_t *buf = tx_bytes(n, p, c->seq);
		memcpy(buf + WIRE_HEADER_SIZE, c->home, s->len - WIRE_HEADER_SIZE);
		wire_crc_whole(buf);
		borrow_end(n, s);
		n->ctr.device_copy_ins++;
		mark_unsent(n, p); /* it goes whole at the next look at the window */
	}
}

/* A slot leaves the window (acknowledged, or its stream reset): it borrows nothing more, and
 * the transport queue (node.c) no longer sends it. A copy still queued since this poll began
 * (sent again, then acknowledged) would go out at the flush from a buffer that may have been
 * written for a later seq meanwhile (or lent to another peer): with the header of one
 * datagram and the borrowed payload of another, its CRC computed over the pair. */
static void slot_release(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	struct tx_slot *s = &n->rel_peers[peer].tx[seq & (n->window - 1)];
	if (s->queued) {
		node_txq_drop(n, peer, seq);
		s->queued = 0;
	}
	if (s->dev_copy) {
		device_copy_orphan(n, peer, seq);
		s->dev_copy = 0;
	}
	if (s->tail != NULL)
		borrow_end(n, s);
}

/* Copy in the borrowed payloads that share a byte with [a, b). Bounded by the peers that have
 * anything in flight (the active set), each by its window; nothing at all in the usual case,
 * where every borrowed datagram was acknowledged before the bytes are needed again. */
static void copy_in_where(struct keel_node *n, uintptr_t a, uintptr_t b)
{
	for (uint32_t peer = active_next(n, 0, false); n->tx_borrowed > 0 && peer < n->world;
	     peer = active_next(n, peer + 1, false)) {
		struct rel_peer *p = &n->rel_peers[peer];
		for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
			const struct tx_slot *s = &p->tx[seq & (n->window - 1)];
			uintptr_t t = (uintptr_t)s->tail;
			if (s->tail != NULL && !s->device && t < b &&
			    a < t + (s->len - WIRE_HEADER_SIZE))
				copy_in(n, p, seq);
		}
	}
}

bool rel_device_copies_into(const struct keel_node *n, const uint8_t *lo, uint64_t len)
{
	uintptr_t a = (uintptr_t)lo, b = a + (uintptr_t)len;
	for (uint32_t i = 0; i < KEEL_DEVICE_COPYIN_MAX; i++) {
		uintptr_t h = (uintptr_t)n->copyin[i].home;
		if (n->copyin[i].busy && h >= a && h < b)
			return true;
	}
	return false;
}

/* Does the slot's payload lie in device memory and share a byte with [a, b)? */
static bool device_tail_in(const struct tx_slot *s, uintptr_t a, uintptr_t b)
{
	uintptr_t t = (uintptr_t)s->tail;
	return s->device && t < b && a < t + (s->len - WIRE_HEADER_SIZE);
}

/* Is a datagram in flight borrowing device bytes in [lo, lo + len)? With `copier` (the same
 * node, writable), the device also copies each such payload to the host. */
static bool device_tails(const struct keel_node *n, const uint8_t *lo, uint64_t len,
			 struct keel_node *copier)
{
	uintptr_t a = (uintptr_t)lo, b = a + (uintptr_t)len;
	bool any = false;
	for (uint32_t peer = active_next(n, 0, false); n->tx_device != 0 && peer < n->world;
	     peer = active_next(n, peer + 1, false)) {
		const struct rel_peer *p = &n->rel_peers[peer];
		for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
			if (!device_tail_in(&p->tx[seq & (n->window - 1)], a, b))
				continue;
			if (copier == NULL)
				return true;
			device_copy_start(copier, peer, seq);
			any = true;
		}
	}
	return any;
}

bool rel_device_tails_in(const struct keel_node *n, const uint8_t *lo, uint64_t len)
{
	return device_tails(n, lo, len, NULL);
}

void rel_device_copy_in_range(struct keel_node *n, const uint8_t *lo, uint64_t len)
{
	(void)device_tails(n, lo, len, n);
}

void rel_borrowed_copy_in(struct keel_node *n)
{
	copy_in_where(n, 0, UINTPTR_MAX);
	/* every borrowed slot is in flight to an active peer; device ones stay borrowed */
	KEEL_ASSERT(n->tx_borrowed == n->tx_device);
}

/* Only payloads marked rewritten can lie where the operation writes: the others never do. A
 * range that misses all of those needs no scan; a scan of a 256-slot window for each datagram
 * a ring's all-gather received was 3.5-5 % of a 1 MiB AllReduce over UDP. */
void rel_borrowed_copy_in_range(struct keel_node *n, const uint8_t *lo, uint64_t len)
{
	KEEL_ASSERT(lo != NULL && len != 0);
	uintptr_t a = (uintptr_t)lo, b = a + (uintptr_t)len;
	if (n->tx_rewritten != 0 && a < n->rewritten_hi && n->rewritten_lo < b)
		copy_in_where(n, a, b);
}

/* How long an ack may take: the retransmission timer's estimate (RFC 6298), without its
 * rto_min_ns floor. The reorder timer and the tail probe wait at least this long. */
static uint64_t ack_wait_ns(const struct rel_peer *p)
{
	return p->srtt_ns + 4 * p->rttvar_ns;
}

/* When a tail probe to `peer` is due (keel_config.tail_probe; UINT64_MAX: none): with data
 * out and no ack moving the window or new data sent for max(2 srtt, srtt + 4 rttvar) plus
 * the receiver's ack delay, once per such silence, and only over a transport that may lose
 * datagrams (over a reliable one the silence is a slow receiver). Not when the
 * retransmission timer would come first. */
static uint64_t probe_due(struct keel_node *n, uint32_t peer, const struct rel_peer *p)
{
	if (!n->cfg.tail_probe || p->probed || p->srtt_ns == 0 || p->snd_una == p->snd_nxt ||
	    (keel_transport_peer_caps(n->tp, peer) & KEEL_CAP_RELIABLE) != 0)
		return UINT64_MAX;
	uint64_t two = 2 * p->srtt_ns, est = ack_wait_ns(p);
	uint64_t pto = (two > est ? two : est) + n->cfg.ack_delay_ns;
	return pto < p->rto_ns ? p->probe_base_ns + pto : UINT64_MAX;
}

/* Lower the peer's timer to its tail probe, if one is due earlier. */
static void probe_arm(struct keel_node *n, uint32_t peer, struct rel_peer *p)
{
	uint64_t due = probe_due(n, peer, p);
	if (due < p->rtx_deadline_ns)
		p->rtx_deadline_ns = due;
}

/* New data went, or an ack moved the window: the silence a tail probe waits for starts now. */
static void probe_restart(struct keel_node *n, uint32_t peer, struct rel_peer *p)
{
	p->probe_base_ns = n->now_ns;
	p->probed = false;
	probe_arm(n, peer, p);
}

static void transmit(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	KEEL_ASSERT_DEBUG(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	KEEL_ASSERT_DEBUG(p->tx != NULL && seq - p->snd_una < p->snd_nxt - p->snd_una);
	struct tx_slot *s = &p->tx[seq & (n->window - 1)];
	/* A device payload goes only while the NIC on the way reads it; else the device copies
	 * it to the host first. */
	if (s->device && !node_peer_device_tail(n, peer, s->tail, s->len - WIRE_HEADER_SIZE)) {
		device_copy_in(n, peer, seq);
		return;
	}
	s->sent_ns = n->now_ns;
	s->tries++;
	KEEL_ASSERT_DEBUG(s->tries != 0 && s->len >= WIRE_HEADER_SIZE && s->len <= n->mtu);
	s->fast_done = 0;
	uint64_t due = n->now_ns + backoff_rto(n, p, s->tries);
	if (due < p->rtx_deadline_ns)
		p->rtx_deadline_ns = due;
	if (s->tries == 1)
		probe_restart(n, peer, p);
	walk_by(&n->rel_timer_at, p->rtx_deadline_ns);
	/* A borrowed payload goes as the datagram's tail while the way to the peer takes two
	 * pieces; after a route change it is copied in once and goes whole from then on. With a
	 * key every copy sent again is sealed (seal_all, node.c), which takes it whole. */
	if (s->tail != NULL && !s->device &&
	    ((node_peer_caps(n, peer) & KEEL_CAP_GATHER) == 0 || (n->auth && s->tries > 1)))
		copy_in(n, p, seq);
	uint32_t tail_len = s->tail != NULL ? s->len - WIRE_HEADER_SIZE : 0;
	/* a slot the transport refused was never sent (rel_txq_refused took its try back) */
	node_txq_push(n, peer, tx_bytes(n, p, seq), s->len - tail_len, s->tail, tail_len, seq,
		      (s->tries > 1 ? KEEL_DGRAM_RETRANSMIT : 0) |
			  (s->device ? KEEL_DGRAM_DEVICE_TAIL : 0) |
			  (s->device && s->host_landing ? KEEL_DGRAM_HOST_LANDING : 0));
	s->queued = 1; /* after the push: a full queue is flushed before it takes this one */
}

uint8_t *rel_send_slot(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	if (!rel_can_send(n, peer) || !stream_attach(n, peer))
		return NULL;
	struct rel_peer *p = &n->rel_peers[peer];
	KEEL_ASSERT(p->tx != NULL && seq_before(p->snd_nxt, p->snd_edge));
	/* the buffer of the seq about to be sent (tx_bytes takes only seqs already sent) */
	KEEL_ASSERT_DEBUG(p->tx_buf != NULL);
	return p->tx_buf + (size_t)(p->snd_nxt & (n->window - 1)) * stride(n) + WIRE_HEADER_SIZE;
}

static void send_commit(struct keel_node *n, uint32_t peer, struct wire_header *h, uint32_t len,
			const uint8_t *tail, bool rewritten, bool device, bool host_landing)
{
	KEEL_ASSERT(!device || (tail != NULL && !rewritten && !n->auth));
	KEEL_ASSERT(device || !host_landing);
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT(len <= n->payload_max); /* room for the MAC trailer too */
	KEEL_ASSERT(h != NULL);
	struct rel_peer *p = &n->rel_peers[peer];
	/* rel_send_slot gave this seq's buffer: the window has room and a stream is attached */
	KEEL_ASSERT(p->tx != NULL && seq_before(p->snd_nxt, p->snd_edge));
	uint32_t seq = p->snd_nxt++;
	n->tx_flight++;
	active_mark(n, peer);
	uint8_t *buf = tx_bytes(n, p, seq);
	h->seq = seq;
	h->payload_len = len;
	/* Memory: no CRC pass here nor at the peer. A borrowed payload is not in the window to
	 * be checked here: add_crcs (node.c) covers it as it leaves, where the way is a wire. */
	if (device) /* the CPU cannot read it: the link checks it end to end */
		h->flags |= WIRE_FLAG_HEADER_CRC;
	else if (tail != NULL || node_peer_intact(n, peer))
		h->flags |= WIRE_FLAG_NO_CRC;
	rel_ack_fields(n, peer, h);
	wire_encode(buf, h);
	struct tx_slot *s = &p->tx[seq & (n->window - 1)];
	memset(s, 0, sizeof(*s));
	s->len = WIRE_HEADER_SIZE + len;
	s->tail = tail;
	if (tail != NULL)
		n->tx_borrowed++;
	if (device) {
		s->device = 1;
		s->host_landing = host_landing;
		n->tx_device++;
		n->ctr.device_direct_frags++;
	}
	if (tail != NULL && rewritten) {
		uintptr_t lo = (uintptr_t)tail, hi = lo + len;
		s->rewritten = 1;
		n->tx_rewritten++;
		n->rewritten_lo = lo < n->rewritten_lo ? lo : n->rewritten_lo;
		n->rewritten_hi = hi > n->rewritten_hi ? hi : n->rewritten_hi;
	}
	n->ctr.data_sent++;
	p->data_sent++;
	transmit(n, peer, seq);
	window_check(n, p);
}

void rel_send_commit(struct keel_node *n, uint32_t peer, struct wire_header *h, uint32_t len)
{
	send_commit(n, peer, h, len, NULL, false, false, false);
}

int rel_send_borrowed(struct keel_node *n, uint32_t peer, struct wire_header *h,
		      const uint8_t *payload, uint32_t len, bool rewritten)
{
	KEEL_ASSERT(h != NULL && payload != NULL && len != 0);
	/* pump_sends asked just now: no second route lookup on this path outside debug */
	KEEL_ASSERT_DEBUG((node_peer_caps(n, peer) & KEEL_CAP_GATHER) != 0);
	if (rel_send_slot(n, peer) == NULL)
		return -EAGAIN;
	send_commit(n, peer, h, len, payload, rewritten, false, false);
	return 0;
}

int rel_send_device(struct keel_node *n, uint32_t peer, struct wire_header *h,
		    const uint8_t *payload, uint32_t len, bool host_landing)
{
	KEEL_ASSERT(h != NULL && payload != NULL && len != 0);
	/* The way was asked at the operation's begin; if it changed since, transmit has the
	 * device copy the payload to the host. */
	if (rel_send_slot(n, peer) == NULL)
		return -EAGAIN;
	send_commit(n, peer, h, len, payload, false, true, host_landing);
	return 0;
}

int rel_send(struct keel_node *n, uint32_t peer, struct wire_header *h, const void *payload,
	     uint32_t len)
{
	KEEL_ASSERT(h != NULL && (payload != NULL || len == 0));
	uint8_t *dst = rel_send_slot(n, peer);
	if (dst == NULL)
		return -EAGAIN;
	if (len != 0)
		memcpy(dst, payload, len);
	rel_send_commit(n, peer, h, len);
	return 0;
}

/* The transport refused a queued datagram: it was never sent, so it is not a retransmission. */
void rel_txq_refused(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	/* a slot acknowledged meanwhile, or whose stream a view reset, took its queue entries
	 * with it (slot_release) */
	KEEL_ASSERT_DEBUG(!seq_before(seq, p->snd_una) && seq_before(seq, p->snd_nxt));
	KEEL_ASSERT(p->tx != NULL);
	struct tx_slot *s = &p->tx[seq & (n->window - 1)];
	s->queued = 0;
	s->sent_ns = 0;
	if (s->tries > 0)
		s->tries--;
	mark_unsent(n, p);
}

void rel_txq_sent(struct keel_node *n, uint32_t peer, uint32_t seq)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	/* a slot that left the window took its queue entries with it (slot_release) */
	KEEL_ASSERT_DEBUG(!seq_before(seq, p->snd_una) && seq_before(seq, p->snd_nxt));
	p->tx[seq & (n->window - 1)].queued = 0;
}

static void rel_rtt_sample(struct keel_node *n, uint32_t peer, uint64_t rtt_ns)
{
	KEEL_ASSERT(peer < n->world && rtt_ns != 0);
	struct rel_peer *p = &n->rel_peers[peer];
	if (p->srtt_ns == 0) {
		p->srtt_ns = rtt_ns;
		p->rttvar_ns = rtt_ns / 2;
	} else {
		uint64_t err = rtt_ns > p->srtt_ns ? rtt_ns - p->srtt_ns : p->srtt_ns - rtt_ns;
		p->rttvar_ns = (3 * p->rttvar_ns + err) / 4;
		p->srtt_ns = (7 * p->srtt_ns + rtt_ns) / 8;
	}
	uint64_t rto = ack_wait_ns(p);
	if (rto < n->cfg.rto_min_ns)
		rto = n->cfg.rto_min_ns;
	if (rto > n->cfg.rto_max_ns)
		rto = n->cfg.rto_max_ns;
	p->rto_ns = rto;
	KEEL_ASSERT(p->rto_ns >= n->cfg.rto_min_ns && p->rto_ns <= n->cfg.rto_max_ns);
}

/* A hole below the highest selectively acked seq is resent before its timer when it has been
 * out for longer than a round trip plus a quarter (RACK's reordering window, RFC 8985): a later
 * datagram got through, and this one had time to. Counting later datagrams instead (TCP's
 * three dupacks) resends whatever a jittery path merely reordered. A hole not out that long
 * yet arms the peer's timer for the moment it will have been (RACK's reorder timer): at the
 * end of a step no later ack may come to look again, and the retransmission timer (1 ms at
 * least) would hold the step that long. rel_timers looks again then. On a reliable, ordered
 * transport a hole is a datagram the receiving core dropped; sacks never come otherwise, so
 * this costs nothing while nothing is dropped. */
static void fast_retransmit(struct keel_node *n, uint32_t peer, uint32_t highest)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	uint32_t mask = n->window - 1;
	/* `highest` was selectively acked, so it lies in the send window */
	KEEL_ASSERT(p->tx != NULL && highest - p->snd_una < p->snd_nxt - p->snd_una);
	if (p->srtt_ns == 0)
		return; /* no round trip measured yet: leave it to the timer */
	uint64_t reo_wnd = p->srtt_ns + p->srtt_ns / 4, wait = ack_wait_ns(p);
	for (uint32_t seq = p->snd_una; seq_before(seq, highest); seq++) {
		struct tx_slot *s = &p->tx[seq & mask];
		if (s->sacked || s->fast_done || s->sent_ns == 0)
			continue;
		if (n->now_ns - s->sent_ns < reo_wnd) {
			/* the timer waits as long as an ack may take (ack_wait_ns): on a path
			 * whose round trips vary (a large datagram behind small ones) a hole may
			 * still be on its way */
			uint64_t due = s->sent_ns + (reo_wnd > wait ? reo_wnd : wait);
			if (due < p->rtx_deadline_ns)
				p->rtx_deadline_ns = due;
			walk_by(&n->rel_timer_at, due);
			continue;
		}
		transmit(n, peer, seq);
		s->fast_done = 1;
		p->retransmits++;
		n->ctr.retransmits++;
		n->ctr.fast_retransmits++;
	}
}

void rel_on_ack(struct keel_node *n, uint32_t peer, uint32_t ack, uint32_t sack, uint16_t wnd)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	uint32_t mask = n->window - 1;
	/* An ack for something never sent is a peer's bug or an old incarnation: ignore it. */
	if (seq_before(p->snd_nxt, ack) || seq_before(ack, p->snd_una - n->window))
		return;
	uint32_t edge = ack + wnd;
	if (seq_before(p->snd_edge, edge))
		p->snd_edge = edge;
	/* One sample per ack, from the newest first-time datagram it covers (Karn's rule): an
	 * older one may have waited for an ack that was lost, not for the path. */
	uint64_t sample = 0;
	uint32_t una_before = p->snd_una;
	while (seq_before(p->snd_una, ack)) {
		/* the ack was checked against snd_nxt: every seq it covers was in flight */
		KEEL_ASSERT(p->tx != NULL && n->tx_flight > 0 && p->snd_una != p->snd_nxt);
		struct tx_slot *s = &p->tx[p->snd_una & mask];
		if (s->tries == 1 && !s->no_sample && s->sent_ns != 0)
			sample = n->now_ns - s->sent_ns;
		slot_release(n, peer, p->snd_una);
		p->snd_una++;
		n->tx_flight--;
	}
	if (sample != 0)
		rel_rtt_sample(n, peer, sample);
	/* The timer measures silence, as TCP's does (RFC 6298, 5.3): an ack that moves the window
	 * restarts it for what is still out. A window's tail waits for the receiver to work
	 * through its head; that wait is progress, not loss. */
	if (p->snd_una != una_before && p->snd_una != p->snd_nxt) {
		p->rtx_base_ns = n->now_ns;
		p->rtx_deadline_ns = n->now_ns + p->rto_ns; /* the scan then finds the exact one */
		probe_restart(n, peer, p);
		walk_by(&n->rel_timer_at, p->rtx_deadline_ns);
	}
	uint32_t highest = 0;
	bool any = false;
	for (uint32_t i = 0; i < 32u && sack != 0; i++) {
		if ((sack & (1u << i)) == 0)
			continue;
		uint32_t seq = ack + 1u + i;
		if (seq_before(seq, p->snd_una) || !seq_before(seq, p->snd_nxt))
			continue;
		p->tx[seq & mask].sacked = 1;
		highest = seq;
		any = true;
	}
	p->sack_any = any;
	p->sack_high = highest;
	if (any)
		fast_retransmit(n, peer, highest);
	window_check(n, p);
}

/* Store a datagram in its receive slot (copying the payload out of the burst buffer). */
static void rx_store(struct keel_node *n, struct rel_peer *p, const struct wire_header *h,
		     const uint8_t *payload)
{
	KEEL_ASSERT(p->rx != NULL && p->rx_buf != NULL && p != n->rel_peers + n->self);
	/* rel_on_data let in only a new seq inside the receive window */
	KEEL_ASSERT(h->seq - p->rcv_nxt < n->window && p->rx_held < n->window);
	uint32_t idx = h->seq & (n->window - 1);
	KEEL_ASSERT(!p->rx[idx].used);
	p->rx[idx].h = *h;
	p->rx[idx].used = 1;
	if (seq_before(p->rcv_high, h->seq + 1u))
		p->rcv_high = h->seq + 1u;
	p->rx_held++;
	n->rx_held++;
	active_mark(n, (uint32_t)(p - n->rel_peers));
	KEEL_ASSERT(!n->rx_device); /* never held here: rel_on_data */
	memcpy(p->rx_buf + (size_t)idx * stride(n), payload, h->payload_len);
	while (p->rcv_ack - p->rcv_nxt < n->window && p->rx[p->rcv_ack & (n->window - 1)].used)
		p->rcv_ack++;
	window_check(n, p);
}

/* Hand a stored datagram (its payload in the window) to the collectives; also while the
 * handling of a datagram whose payload lies in device memory delivers the ones after it. */
static bool deliver_stored(struct keel_node *n, uint32_t peer, const struct wire_header *h,
			   const uint8_t *buf)
{
	bool was = n->rx_device;
	n->rx_device = false;
	bool taken = coll_deliver(n, peer, h, buf);
	n->rx_device = was;
	return taken;
}

/* Deliver stored datagrams from rcv_nxt on, as far as the collectives take them. */
static void deliver_run(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct rel_peer *p = &n->rel_peers[peer];
	uint32_t mask = n->window - 1;
	for (uint32_t i = 0; i < n->window && p->rx != NULL; i++) {
		struct rx_slot *s = &p->rx[p->rcv_nxt & mask];
		if (!s->used)
			return;
		if (!deliver_stored(n, peer, &s->h,
				    p->rx_buf + (size_t)(p->rcv_nxt & mask) * stride(n)))
			return;
		bool was_full = p->rcv_ack - p->rcv_nxt >= n->window;
		/* a held in-order datagram was acknowledged when stored */
		KEEL_ASSERT(seq_before(p->rcv_nxt, p->rcv_ack) && p->rx_held > 0 && n->rx_held > 0);
		s->used = 0;
		p->rx_held--;
		n->rx_held--;
		p->rcv_nxt++;
		n->ctr.data_delivered++;
		ack_owed(n, p, was_full); /* a sender stalled on our window hears at once */
	}
}

void rel_on_data(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		 const uint8_t *payload)
{
	KEEL_ASSERT(peer < n->world && peer != n->self && h != NULL);
	struct rel_peer *p = &n->rel_peers[peer];
	uint32_t seq = h->seq;
	if (seq_before(seq, p->rcv_nxt)) {
		n->ctr.drop_duplicate++;
		ack_owed(n, p, true); /* our ack was lost or late: the sender is resending */
		return;
	}
	if (seq - p->rcv_nxt >= n->window) {
		n->ctr.drop_window++;
		ack_owed(n, p, true);
		return;
	}
	if (rx_used(p, seq, n->window)) {
		n->ctr.drop_duplicate++;
		ack_owed(n, p, true);
		return;
	}
	ack_owed(n, p, seq != p->rcv_ack); /* out of order: the sack tells of the hole */
	if (seq == p->rcv_nxt && coll_deliver(n, peer, h, payload)) {
		p->rcv_nxt++;
		n->ctr.data_delivered++;
		if (seq_before(p->rcv_ack, p->rcv_nxt))
			p->rcv_ack = p->rcv_nxt;
		while (p->rcv_ack - p->rcv_nxt < n->window && rx_used(p, p->rcv_ack, n->window))
			p->rcv_ack++;
		deliver_run(n, peer);
		window_check(n, p);
		return;
	}
	if (n->rx_device) {
		/* Held in the window, it would keep its slot in the transport's device area, and
		 * the peer's credits stop at the oldest slot held: heartbeats and views too. Not
		 * acknowledged: the sender's timer brings it back. */
		n->ctr.drop_device_later++;
		return;
	}
	if (!stream_attach(n, peer)) {
		n->ctr.drop_no_stream++; /* not acknowledged: the sender's timer brings it back */
		return;
	}
	rx_store(n, p, h, payload);
}

void rel_redeliver(struct keel_node *n)
{
	KEEL_ASSERT_DEBUG(n != NULL && n->rel_peers != NULL);
	totals_check(n);
	active_check(n);
	if (n->rx_held == 0)
		return;
	FOR_ACTIVE(n, i, true)
	if (rx_used(&n->rel_peers[i], n->rel_peers[i].rcv_nxt, n->window))
		deliver_run(n, i);
}

/* The tail probe: the newest datagram out and not selectively acked goes again (unless it
 * went just now: a hole's fast retransmission). If it was lost, this repairs it; if an
 * earlier one was, the probe's ack reveals that hole. */
static void tail_probe(struct keel_node *n, uint32_t peer)
{
	struct rel_peer *p = &n->rel_peers[peer];
	uint32_t mask = n->window - 1;
	KEEL_ASSERT(p->tx != NULL && p->snd_una != p->snd_nxt && !p->probed);
	p->probed = true;
	for (uint32_t seq = p->snd_nxt - 1u; !seq_before(seq, p->snd_una); seq--) {
		const struct tx_slot *s = &p->tx[seq & mask];
		if (s->sacked || s->sent_ns == 0)
			continue;
		if (s->sent_ns == n->now_ns)
			return;
		transmit(n, peer, seq);
		p->retransmits++;
		n->ctr.retransmits++;
		n->ctr.tail_probes++;
		return;
	}
}

/* Send what the transport refused earlier and resend what timed out. When the timer fires,
 * only the oldest datagram and the holes the receiver's sacks revealed go out again; the rest
 * of the window gets a fresh timer. Resending a whole window because the receiver was slow
 * (descheduled, busy reducing) would double the traffic exactly when it is least welcome.
 * A reliable transport gets the same timer: the network lost nothing, but the receiving core
 * may have dropped a datagram it could take later (a view change reaching it after the data
 * of the new view), and never hearing of it again would hold the collective for its whole
 * op timeout. Acked in time, nothing fires; the per-peer deadline is all the bookkeeping. */
void rel_timers(struct keel_node *n)
{
	uint32_t mask = n->window - 1;
	totals_check(n);
	if (n->tx_flight == 0) {
		n->rel_unsent = false; /* nothing in flight, nothing refused (a reset left it) */
		return; /* nothing out: no timer runs (rel_next_deadline looks at data in flight) */
	}
	if (!n->rel_unsent && n->now_ns < n->rel_timer_at)
		return;
	/* the walk finds the next deadline; what it cannot send marks itself unsent again */
	n->rel_timer_at = UINT64_MAX;
	n->rel_unsent = false;
	FOR_ACTIVE(n, i, true)
	{
		struct rel_peer *p = &n->rel_peers[i];
		if (p->snd_una == p->snd_nxt) {
			p->rtx_deadline_ns = UINT64_MAX;
			continue;
		}
		KEEL_ASSERT_DEBUG(i != n->self && p->tx != NULL); /* nothing is ever sent to self */
		if (!p->unsent && n->now_ns < p->rtx_deadline_ns) {
			walk_by(&n->rel_timer_at, p->rtx_deadline_ns);
			continue;
		}
		p->unsent = false;
		p->rtx_deadline_ns = UINT64_MAX;
		if (p->sack_any) /* holes the last sack revealed, out long enough now */
			fast_retransmit(n, i, p->sack_high);
		if (n->now_ns >= probe_due(n, i, p))
			tail_probe(n, i);
		bool head_sent = false;
		for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
			struct tx_slot *s = &p->tx[seq & mask];
			if (s->sacked)
				continue;
			uint64_t base = s->sent_ns > p->rtx_base_ns ? s->sent_ns : p->rtx_base_ns;
			uint64_t due = base + backoff_rto(n, p, s->tries);
			if (s->sent_ns != 0 && n->now_ns < due) {
				if (due < p->rtx_deadline_ns)
					p->rtx_deadline_ns = due;
				continue;
			}
			bool hole = p->sack_any && seq_before(seq, p->sack_high);
			if (s->sent_ns != 0 && head_sent && !hole) {
				s->sent_ns =
				    n->now_ns; /* wait one more timeout for the head's answer */
				s->no_sample = 1;
				due = n->now_ns + backoff_rto(n, p, s->tries);
				if (due < p->rtx_deadline_ns)
					p->rtx_deadline_ns = due;
				continue;
			}
			if (s->sent_ns != 0) {
				p->retransmits++;
				n->ctr.retransmits++;
				head_sent = true;
			}
			transmit(n, i, seq);
		}
		probe_arm(n, i, p);
		walk_by(&n->rel_timer_at, p->rtx_deadline_ns);
	}
}

void rel_send_acks(struct keel_node *n)
{
	KEEL_ASSERT_DEBUG(n->acks_owed < n->world);
	KEEL_ASSERT_DEBUG(!n->rel_peers[n->self].ack_pending);
	if (n->acks_owed == 0 || n->now_ns < n->rel_ack_at)
		return;
	n->rel_ack_at = UINT64_MAX; /* the walk finds the next */
	FOR_ACTIVE(n, i, true)
	{
		struct rel_peer *p = &n->rel_peers[i];
		if (!p->ack_pending)
			continue;
		if (n->now_ns < p->ack_due_ns) {
			walk_by(&n->rel_ack_at, p->ack_due_ns);
			continue;
		}
		node_send_ctrl(n, i, WIRE_ACK, n->ops_done_local, NULL, 0);
		n->ctr.acks_sent++;
	}
}

uint64_t rel_next_deadline(const struct keel_node *n)
{
	uint64_t dl = UINT64_MAX;
	KEEL_ASSERT(n->tx_flight <= (uint64_t)n->world * n->window);
	totals_check(n);
	if (n->copyin_busy != 0) /* a device says nothing when it finishes */
		return n->now_ns;
	if (n->tx_flight == 0 && n->acks_owed == 0)
		return dl;
	if (n->tx_flight != 0 && n->rel_unsent) /* refused: try again shortly, not in a busy loop */
		return n->now_ns + n->cfg.ack_delay_ns;
	/* no later than any peer's deadline (the walks keep them so; one may come early) */
	if (n->tx_flight != 0)
		dl = n->rel_timer_at;
	if (n->acks_owed != 0 && n->rel_ack_at < dl)
		dl = n->rel_ack_at;
	return dl;
}

void rel_peer_reset(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world);
	struct rel_peer *p = &n->rel_peers[peer];
	window_check(n, p);
	/* before the slots go: what they borrowed is counted */
	for (uint32_t seq = p->snd_una; p->tx != NULL && seq != p->snd_nxt; seq++)
		slot_release(n, peer, seq);
	if (n->stream_pool) {
		stream_detach(n, peer); /* the next datagram in flight takes a fresh one */
	} else {
		memset(p->tx, 0, (size_t)n->window * sizeof(*p->tx));
		memset(p->rx, 0, (size_t)n->window * sizeof(*p->rx));
	}
	KEEL_ASSERT(n->tx_flight >= p->snd_nxt - p->snd_una && n->rx_held >= p->rx_held);
	n->tx_flight -= p->snd_nxt - p->snd_una;
	n->rx_held -= p->rx_held;
	p->rx_held = 0;
	p->snd_una = p->snd_nxt = 1;
	p->snd_edge = 1 + n->window;
	p->rcv_nxt = p->rcv_ack = p->rcv_high = 1;
	p->rtx_deadline_ns = p->ack_due_ns = UINT64_MAX;
	p->unsent = p->sack_any = p->probed = false;
	p->probe_base_ns = 0;
	set_ack_pending(n, p, false);
	p->rcv_unacked = 0;
	KEEL_ASSERT(p->tx == NULL || !n->stream_pool);
	window_check(n, p);
}
