/* Heartbeats and the failure detector. Any datagram from a peer counts as a heartbeat. A
 * watched peer silent for miss_limit intervals — plus a margin for its measured delay and
 * jitter, so that miss_limit means that many beats lost — is probed directly a few times; it
 * is suspected only if it answers none (a lossy link alone cannot exclude it, as Lifeguard's
 * refutable suspicion for SWIM). Time this node itself was not listening (its own late polls:
 * scheduler, page faults, a paused host program) is not held against peers. */
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "node_int.h"

/* Ring monitoring at distances 1, 2, 4, ... 2^(k-1) positions along the view: k watchers per
 * member as with k neighbours, but a block of up to 2^(k-1) consecutive ranks dying together (a
 * whole server: its GPUs have consecutive ranks) still leaves each of them a live watcher. */
static bool at_watch_distance(uint32_t self, uint32_t peer, uint32_t world, uint32_t k, bool ahead)
{
	KEEL_ASSERT(world != 0 && self < world && peer < world);
	uint32_t dist = ahead ? (peer + world - self) % world : (self + world - peer) % world;
	if (dist == 0 || (dist & (dist - 1)) != 0)
		return false;
	return k >= 32 || dist < (1u << k);
}

uint64_t keel_detect_bound_ns(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	uint64_t hb = cfg->heartbeat_ns;
	return (uint64_t)(cfg->miss_limit + 1) * hb + (uint64_t)cfg->probes * (hb / 4);
}

/* After mb_init: a rank outside the first view (all of them, for a node that rejoins) starts
 * DEAD. A first state, not a change: nobody is told. */
void fd_init(struct keel_node *n, uint64_t now_ns)
{
	KEEL_ASSERT(n != NULL && n->fd_peers != NULL && n->self < n->world);
	KEEL_ASSERT(n->view.bits != NULL && n->cfg.heartbeat_ns != 0); /* mb_init ran */
	for (uint32_t i = 0; i < n->world; i++) {
		struct fd_peer *p = &n->fd_peers[i];
		p->state = i == n->self		   ? KEEL_PEER_SELF
			   : view_has(&n->view, i) ? KEEL_PEER_ALIVE
						   : KEEL_PEER_DEAD;
		p->last_heard_ns = now_ns;
		p->deaf_at_heard_ns = 0;
	}
	n->init_ns = now_ns;
	n->last_poll_ns = now_ns;
	n->fd_walk_at = 0;
	/* Ranks beat at phases spread over the interval: a job's ranks start together (a
	 * launcher, a rendezvous), and beating in step would send world x fan-out heartbeats in
	 * one burst every interval — an incast on the fabric, and in a simulation one network
	 * solve over all of them. */
	n->next_beat_ns = now_ns + n->cfg.heartbeat_ns * n->self / n->world;
	n->deaf_ns = 0;
	KEEL_ASSERT(n->next_beat_ns - now_ns < n->cfg.heartbeat_ns);
	KEEL_ASSERT(n->fd_peers[n->self].state == KEEL_PEER_SELF);
}

/* Who this node beats and watches, for the installed view. Small worlds: every rank beats
 * every rank (non-members too, so they learn the epoch and can ask to join) and watches the
 * members. Beyond the all-to-all limit each member beats k successors and watches k
 * predecessors in the view (at power-of-two distances, see at_watch_distance), so every member is
 * watched by up to k others and heartbeat cost is O(k*N); a node outside the view beats
 * everyone until admitted. */
void fd_on_view(struct keel_node *n)
{
	/* a member is in its own view (the converse fails for a left-out old incarnation) */
	KEEL_ASSERT(!n->member || view_has(&n->view, n->self));
	KEEL_ASSERT(n->view.count <= n->world);
	bool all = n->world <= KEEL_FD_ALL_TO_ALL_MAX || !n->member;
	uint32_t count = n->view.count, k = n->cfg.fd_fanout == 0 ? 1 : n->cfg.fd_fanout;
	if (count > 0 && k > count - 1)
		k = count - 1;
	uint32_t me = n->member ? n->pos_of[n->self] : 0;
	KEEL_ASSERT(!n->member || me < count);
	n->watch_count = n->beat_count = 0;
	n->fd_walk_at = 0; /* other peers watched, some afresh */
	for (uint32_t i = 0; i < n->world; i++) {
		struct fd_peer *p = &n->fd_peers[i];
		if (i == n->self)
			continue;
		bool member = view_has(&n->view, i);
		uint32_t pos = member ? n->pos_of[i] : 0;
		p->beat_to = all || (member && at_watch_distance(me, pos, count, k, true));
		bool was_watched = p->watched;
		p->watched = n->member && member &&
			     (n->world <= KEEL_FD_ALL_TO_ALL_MAX ||
			      at_watch_distance(me, pos, count, k, false));
		if (p->watched && !was_watched) {
			/* a new ring neighbour only starts beating to us now: its silence so far
			 * was by design, not a sign of failure */
			p->last_heard_ns = n->now_ns;
			p->deaf_at_heard_ns = n->deaf_ns;
		}
		/* polls walk these lists, not the world: O(k) per poll under ring monitoring */
		if (p->watched)
			n->watch_list[n->watch_count++] = i;
		if (p->beat_to)
			n->beat_list[n->beat_count++] = i;
	}
	KEEL_ASSERT(n->watch_count < n->world && n->beat_count < n->world);
	KEEL_ASSERT(!n->fd_peers[n->self].watched && !n->fd_peers[n->self].beat_to);
}

/* The edges a peer's state may take. SELF is never entered nor left; DEAD (left, or outside
 * the view) is left only by a view that has the peer as a member, straight to ALIVE. */
static bool transition_allowed(enum keel_peer_state from, enum keel_peer_state to)
{
	KEEL_ASSERT(from <= KEEL_PEER_SELF && to <= KEEL_PEER_SELF);
	switch (from) {
	case KEEL_PEER_ALIVE:
		return to == KEEL_PEER_SUSPECTED || to == KEEL_PEER_DEAD;
	case KEEL_PEER_SUSPECTED:
		return to == KEEL_PEER_ALIVE || to == KEEL_PEER_DEAD;
	case KEEL_PEER_DEAD:
		return to == KEEL_PEER_ALIVE;
	case KEEL_PEER_SELF:
		return false;
	}
	return false;
}

/* The one place a peer's state changes, and the one place the caller hears of it. */
static void set_state(struct keel_node *n, uint32_t peer, enum keel_peer_state st)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT(transition_allowed(n->fd_peers[peer].state, st));
	n->fd_peers[peer].state = st;
	n->fd_walk_at = 0; /* an ALIVE peer is watched again */
	mb_touch(n);
	if (n->cfg.on_peer != NULL)
		n->cfg.on_peer(n->cfg.on_peer_ctx, peer, st, n->now_ns);
}

void fd_peer_for_view(struct keel_node *n, uint32_t peer, bool member)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT(member == view_has(&n->view, peer)); /* called once the view is installed */
	struct fd_peer *p = &n->fd_peers[peer];
	p->left = false;
	if (!member) {
		if (p->state != KEEL_PEER_DEAD)
			set_state(n, peer, KEEL_PEER_DEAD);
		return;
	}
	if (p->state != KEEL_PEER_ALIVE) {
		/* a member of the decided view answered its coordinator: listen to it afresh */
		p->last_heard_ns = n->now_ns;
		p->deaf_at_heard_ns = n->deaf_ns;
		set_state(n, peer, KEEL_PEER_ALIVE);
	}
	KEEL_ASSERT(p->state == (member ? KEEL_PEER_ALIVE : KEEL_PEER_DEAD));
}

void fd_new_life(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT(mb_peer_of(n, peer)->inc != 0); /* membership recorded the new life first */
	n->fd_peers[peer].gone = false;
}

void fd_heard(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self); /* the decoder checked the source */
	struct fd_peer *p = &n->fd_peers[peer];
	KEEL_ASSERT(n->deaf_ns >= p->deaf_at_heard_ns); /* deaf time only accumulates */
	p->last_heard_ns = n->now_ns;
	p->deaf_at_heard_ns = n->deaf_ns;
	if (p->probe_ns != 0) { /* it answered a probe (or spoke anyway): no suspicion */
		p->probe_ns = 0;
		n->ctr.probes_refuted++;
	}
	if (p->state == KEEL_PEER_SUSPECTED && view_has(&n->view, peer)) {
		/* It spoke again in the same incarnation: the suspicion was false. */
		n->ctr.false_suspicions++;
		set_state(n, peer, KEEL_PEER_ALIVE);
	}
	KEEL_ASSERT(p->probe_ns == 0 && p->last_heard_ns == n->now_ns);
}

/* A clean exit: no suspicion, no false-suspicion count; a late datagram from it changes
 * nothing (fd_heard revives only suspected peers). In our epoch its count of reported
 * collectives tells which results are complete everywhere, and it stops counting towards
 * majorities: it will never vote again. */
void fd_on_leave(struct keel_node *n, uint32_t peer, uint32_t epoch, uint32_t reported)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct fd_peer *p = &n->fd_peers[peer];
	/* Kept whatever our view: a restarted node waiting for admission learns from it that the
	 * members it would join are gone (the job ended), instead of waiting for nobody. */
	p->gone = true;
	if (p->state == KEEL_PEER_DEAD)
		return;
	if (epoch == n->epoch && view_has(&n->view, peer)) {
		p->left = true;
		p->left_reported = reported;
	}
	set_state(n, peer, KEEL_PEER_DEAD);
	KEEL_ASSERT(p->gone && p->state == KEEL_PEER_DEAD);
}

void fd_suspect(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	/* callers suspect only a peer they see alive (ALIVE -> SUSPECTED is the one edge) */
	KEEL_ASSERT(n->fd_peers[peer].state == KEEL_PEER_ALIVE);
	n->fd_peers[peer].probe_ns = 0;
	n->fd_peers[peer].suspicions++;
	n->ctr.suspicions++;
	uint64_t heard = n->fd_peers[peer].last_heard_ns;
	metrics_on_suspect(n, peer, n->now_ns > heard ? n->now_ns - heard : 0);
	set_state(n, peer, KEEL_PEER_SUSPECTED);
	KEEL_ASSERT(n->fd_peers[peer].probe_ns == 0);
}

void fd_on_heartbeat(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		     const uint8_t *payload)
{
	KEEL_ASSERT(peer < n->world && peer != n->self && payload != NULL);
	/* the decoder let through only a heartbeat of exactly this size */
	KEEL_ASSERT(h->type == WIRE_HEARTBEAT && h->payload_len == WIRE_HEARTBEAT_SIZE);
	struct fd_peer *p = &n->fd_peers[peer];
	struct wire_heartbeat hb;
	wire_heartbeat_decode(payload, &hb);
	if (hb.incarnation < mb_peer_of(n, peer)->inc)
		return; /* a late datagram from a previous life of that rank */
	n->ctr.heartbeats_received++;
	p->hb_echo_ns = hb.send_ns;
	p->hb_echo_recv_ns = n->now_ns;
	/* echo_ns is our own clock, echoed back; held time is the peer's, a duration. */
	if (hb.echo_ns != 0 && hb.echo_ns <= n->now_ns &&
	    n->now_ns - hb.echo_ns >= hb.echo_held_ns) {
		uint64_t rtt = n->now_ns - hb.echo_ns - hb.echo_held_ns;
		KEEL_ASSERT(rtt <= n->now_ns); /* the checks above keep it from wrapping */
		p->rtt_ns_last = rtt;
		p->rtt_samples++;
		metrics_observe(n, KEEL_HIST_HEARTBEAT_RTT, rtt);
		/* Smoothed like RFC 6298's SRTT and RTTVAR. Not fed to the retransmission timer:
		 * a heartbeat measures the path alone, while an ack also waits for the peer's next
		 * poll. They size the silence margin (suspect_at). */
		if (p->hb_srtt_ns == 0) {
			p->hb_srtt_ns = rtt;
			p->hb_rttvar_ns = rtt / 2;
		} else {
			uint64_t err =
			    rtt > p->hb_srtt_ns ? rtt - p->hb_srtt_ns : p->hb_srtt_ns - rtt;
			p->hb_rttvar_ns = (3 * p->hb_rttvar_ns + err) / 4;
			p->hb_srtt_ns = (7 * p->hb_srtt_ns + rtt) / 8;
		}
		n->fd_walk_at = 0; /* a smaller margin brings its deadline forward */
	}
	if (hb.flags & WIRE_HB_PROBE)
		fd_beat_one(n, peer, 0); /* it has not heard from us lately: answer now */
	/* A member's new incarnation is a join request, not a sign of life of the old one. */
	if (mb_on_heartbeat(n, peer, &hb, h->epoch))
		fd_heard(n, peer);
}

/* A poll later than one interval means this node was not listening: count the excess as deaf
 * time, which suspicion does not count as a peer's silence. */
void fd_poll_start(struct keel_node *n)
{
	/* keel_poll never moves the clock back */
	KEEL_ASSERT(n->now_ns >= n->last_poll_ns);
	uint64_t gap = n->now_ns - n->last_poll_ns;
	uint64_t deaf_before = n->deaf_ns;
	if (gap > n->cfg.heartbeat_ns) {
		n->deaf_ns += gap - n->cfg.heartbeat_ns;
		/* Wakeups a few microseconds late are routine; a pause worth reporting costs at
		 * least a whole interval of listening. */
		if (gap >= 2 * n->cfg.heartbeat_ns)
			n->ctr.local_pauses++;
	}
	n->last_poll_ns = n->now_ns;
	KEEL_ASSERT(n->deaf_ns >= deaf_before && n->deaf_ns - deaf_before <= gap);
}

void fd_beat_one(struct keel_node *n, uint32_t peer, uint32_t flags)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT((flags & ~(uint32_t)WIRE_HB_PROBE) == 0);
	struct fd_peer *p = &n->fd_peers[peer];
	KEEL_ASSERT(p->hb_echo_ns == 0 || p->hb_echo_recv_ns <= n->now_ns);
	struct wire_heartbeat hb = {
	    .send_ns = n->now_ns,
	    .echo_ns = p->hb_echo_ns,
	    .echo_held_ns = p->hb_echo_ns != 0 ? n->now_ns - p->hb_echo_recv_ns : 0,
	    .incarnation = n->incarnation,
	    .flags =
		flags | (n->member ? 0 : WIRE_HB_JOINING) | (n->noquorum ? WIRE_HB_NOQUORUM : 0),
	    .ops_started = n->op_next_id - n->op_base,
	};
	uint8_t payload[WIRE_HEARTBEAT_SIZE];
	wire_heartbeat_encode(payload, &hb);
	node_send_ctrl(n, peer, WIRE_HEARTBEAT, n->ops_done_local, payload, WIRE_HEARTBEAT_SIZE);
	p->hb_echo_ns = 0; /* echo each heartbeat once: one RTT sample per round trip */
	n->ctr.heartbeats_sent++;
}

void fd_beat_all(struct keel_node *n)
{
	KEEL_ASSERT(n->beat_count < n->world);
	for (uint32_t b = 0; b < n->beat_count; b++) {
		KEEL_ASSERT(n->fd_peers[n->beat_list[b]].beat_to);
		fd_beat_one(n, n->beat_list[b], 0);
	}
}

void fd_beat(struct keel_node *n)
{
	KEEL_ASSERT(n->cfg.heartbeat_ns != 0);
	if (n->now_ns < n->next_beat_ns)
		return;
	fd_beat_all(n);
	n->next_beat_ns += n->cfg.heartbeat_ns;
	if (n->next_beat_ns <= n->now_ns)
		n->next_beat_ns = n->now_ns + n->cfg.heartbeat_ns;
	KEEL_ASSERT(n->next_beat_ns > n->now_ns &&
		    n->next_beat_ns - n->now_ns <= n->cfg.heartbeat_ns);
}

/* Slack after miss_limit silent intervals: the last beat heard may have come early and the
 * next one, sent on time, arrive late. A quarter interval for the sender's own timing (its
 * poll is late by its wakeup latency), the measured one-way delay and four times its
 * variation; at most one interval, so detection stays within miss_limit + 1 intervals. */
static uint64_t silence_margin(const struct keel_node *n, const struct fd_peer *p)
{
	KEEL_ASSERT(p != NULL && p != n->fd_peers + n->self);
	uint64_t hb = n->cfg.heartbeat_ns;
	uint64_t m = hb / 4 + p->hb_srtt_ns / 2 + 4 * p->hb_rttvar_ns;
	m = m < hb ? m : hb;
	KEEL_ASSERT(m <= hb);
	return m;
}

/* When a watched peer's listened-to silence reaches miss_limit intervals and the margin — but
 * never within join_timeout_ns of init: ranks start a few ms apart and fault in their arenas
 * at once, so the first moments of a job are the noisiest (a peer that dies then is found at
 * the end of the grace). */
static uint64_t suspect_at(const struct keel_node *n, const struct fd_peer *p)
{
	KEEL_ASSERT_DEBUG(p->watched && n->deaf_ns >= p->deaf_at_heard_ns);
	uint64_t deaf = n->deaf_ns - p->deaf_at_heard_ns;
	uint64_t at = p->last_heard_ns + deaf + (uint64_t)n->cfg.miss_limit * n->cfg.heartbeat_ns +
		      silence_margin(n, p);
	if (n->cfg.rejoin)
		return at; /* a restarted node joins an established view: no start-up noise */
	uint64_t grace_end = n->init_ns + n->cfg.join_timeout_ns;
	at = at > grace_end ? at : grace_end;
	KEEL_ASSERT_DEBUG(at > p->last_heard_ns); /* miss_limit and heartbeat_ns are not 0 */
	return at;
}

static uint64_t probe_gap(const struct keel_node *n)
{
	KEEL_ASSERT(n->cfg.heartbeat_ns != 0);
	uint64_t gap = n->cfg.heartbeat_ns / 4;
	gap = gap != 0 ? gap : 1;
	KEEL_ASSERT(gap <= n->cfg.heartbeat_ns);
	return gap;
}

/* When the next probe goes out or, after the last, when the peer is suspected; in listened
 * time like suspect_at (a pause of this node does not use the peer's chances up). */
static uint64_t probe_next_at(const struct keel_node *n, const struct fd_peer *p)
{
	KEEL_ASSERT(p->probe_ns != 0 && p->probe_sent_ns >= p->probe_ns); /* probing */
	KEEL_ASSERT(n->deaf_ns >= p->probe_deaf_ns);
	return p->probe_sent_ns + (n->deaf_ns - p->probe_deaf_ns) + probe_gap(n);
}

static void probe(struct keel_node *n, uint32_t peer)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	struct fd_peer *p = &n->fd_peers[peer];
	KEEL_ASSERT(p->watched && p->state == KEEL_PEER_ALIVE && p->probes_sent < n->cfg.probes);
	if (p->probe_ns == 0)
		p->probe_ns = n->now_ns;
	p->probe_sent_ns = n->now_ns;
	p->probe_deaf_ns = n->deaf_ns;
	p->probes_sent++;
	n->ctr.probes_sent++;
	fd_beat_one(n, peer, WIRE_HB_PROBE);
	KEEL_ASSERT(p->probe_ns != 0 && p->probes_sent <= n->cfg.probes);
}

/* When fd_check must act on a watched ALIVE peer next: probe it, or suspect it. */
static uint64_t peer_due_at(const struct keel_node *n, const struct fd_peer *p)
{
	return p->probe_ns != 0 ? probe_next_at(n, p) : suspect_at(n, p);
}

/* Past its silence deadline a peer is probed `probes` times, a quarter interval apart; any
 * datagram from it ends that (fd_heard). No answer to the last: suspected. The walk over the
 * watched peers happens only when one is due (fd_walk_at): hearing from a peer moves its
 * deadline later, so between walks no deadline comes earlier than the earliest one found (the
 * walk was 1/8 of an 8-rank small AllReduce's instructions, at every poll). */
void fd_check(struct keel_node *n)
{
	KEEL_ASSERT(n->watch_count < n->world);
	if (n->now_ns < n->fd_walk_at)
		return;
	uint64_t next = UINT64_MAX;
	for (uint32_t w = 0; w < n->watch_count; w++) {
		uint32_t i = n->watch_list[w];
		KEEL_ASSERT(i < n->world && i != n->self);
		struct fd_peer *p = &n->fd_peers[i];
		if (p->state != KEEL_PEER_ALIVE)
			continue;
		uint64_t at = peer_due_at(n, p);
		if (n->now_ns >= at) {
			bool last =
			    p->probe_ns != 0 ? p->probes_sent >= n->cfg.probes : n->cfg.probes == 0;
			if (last) {
				fd_suspect(n, i);
				continue;
			}
			if (p->probe_ns == 0)
				p->probes_sent = 0;
			probe(n, i);
			at = peer_due_at(n, p);
			KEEL_ASSERT(at > n->now_ns); /* the next probe or the suspicion */
		}
		next = at < next ? at : next;
	}
	n->fd_walk_at = next; /* suspecting someone (set_state) changed no list */
}

uint64_t fd_next_deadline(const struct keel_node *n)
{
	/* fd_check ran this poll: fd_walk_at is the earliest watched deadline (or 0, after a
	 * change since: poll again at once) */
	return n->fd_walk_at < n->next_beat_ns ? n->fd_walk_at : n->next_beat_ns;
}
