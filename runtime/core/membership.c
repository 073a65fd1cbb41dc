/* Membership: views with epochs. The coordinator (lowest member it sees alive) changes the
 * view by one round of single-decree Paxos among the members of the current view: prepare and
 * promise, accept and accepted, by majorities, with ballots that order competing coordinators.
 * So two different views are never installed for the same epoch, a coordinator that dies
 * mid-change is replaced by the next one (which must adopt any value already accepted), and
 * a minority side of a split can never install anything. Messages are unreliable control
 * datagrams, resent by the coordinator until answered; nothing here allocates. */
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "node_int.h"

enum vmsg {
	VM_PREPARE = 1, /* coordinator -> members: promise me nothing below ballot */
	VM_PROMISE,	/* member -> coordinator: promised; here is what I accepted, if anything */
	VM_ACCEPT,	/* coordinator -> members: accept this view */
	VM_ACCEPTED,	/* member -> coordinator */
	VM_COMMIT,	/* anyone -> anyone: this view was decided, install it */
	VM_NACK,	/* member -> coordinator: I promised a higher ballot */
	VM_SUSPECT,	/* member -> coordinator: I suspect this member */
	VM_SOFT,	/* member -> coordinator: a collective stalled, restart it on a new epoch */
	VM_KIND_MAX = VM_SOFT,
};

/* Payload: u8 kind, u8 0, u16 0, u32 target epoch, u64 ballot (WIRE_VIEW_MIN bytes), then
 *   PROMISE  u64 accepted ballot, u32 collectives with results, u32 collectives started,
 *            u32 incarnation, then the value if accepted ballot, else optionally a kept
 *            result: u32 its collective + 1, u32 length, its bytes
 *   ACCEPT   value
 *   COMMIT   (the ballot field: the deciding ballot) acceptors, ceil(world / 8) bytes with
 *            bit r set for each member whose ACCEPTED the coordinator counted; value
 *   NACK     u64 promised ballot
 *   SUSPECT  u32 rank, u32 incarnation
 * A value: u32 epoch, u32 flags (bits 16.. joined count), u32 pending ops, u32 donor,
 * u32 frontier, u32 count, then count x (u16 rank, u32 incarnation), ranks ascending; with
 * flag VIEW_RESULT then u32 length and a result (of collective frontier - 1, for members that
 * lack it). */
#define OFF_KIND	  0u
#define OFF_TARGET	  4u
#define OFF_BALLOT	  8u
#define VALUE_HEADER	  24u
#define VALUE_ENTRY	  6u
#define PROMISE_EXTRA	  20u
#define KEPT_HEADER	  8u
#define VIEW_JOINED_SHIFT 16u
#define VIEW_RESULT	  1u /* a value flag: a result follows the entries */

_Static_assert(OFF_BALLOT + 8 == WIRE_VIEW_MIN, "view message header");
_Static_assert(VALUE_HEADER + PROMISE_EXTRA + WIRE_VIEW_MIN <= KEEL_VIEW_MSG_OVERHEAD,
	       "view overhead");

static size_t align8(size_t v)
{
	size_t r = (v + 7) & ~(size_t)7;
	KEEL_ASSERT(r >= v && r - v < 8);
	return r;
}

size_t mb_view_bytes(uint32_t world, uint32_t kept)
{
	KEEL_ASSERT(world != 0 && world <= KEEL_WORLD_MAX);
	return 2 * align8((size_t)world / 8 + 1) + align8((size_t)world * sizeof(uint32_t)) +
	       align8(kept);
}

/* Bytes of a COMMIT's acceptor set. */
static size_t acceptor_bytes(uint32_t world)
{
	return ((size_t)world + 7) / 8;
}

/* The largest view message, in a datagram: a COMMIT (acceptors, then a value whose result,
 * when it carries one, takes 4 + kept bytes); a PROMISE carries a value like it, or a kept
 * result in KEPT_HEADER + kept bytes after its fixed part, which is shorter. */
static size_t ctrl_need(uint32_t world, uint32_t kept)
{
	KEEL_ASSERT(world != 0 && world <= KEEL_WORLD_MAX);
	/* room for the MAC trailer, whether or not this node has a key */
	return WIRE_HEADER_SIZE + KEEL_VIEW_MSG_OVERHEAD + (size_t)world * VALUE_ENTRY +
	       acceptor_bytes(world) + KEEL_AUTH_TRAILER_BYTES +
	       (kept != 0 ? KEPT_HEADER + kept : 0);
}

uint32_t mb_ctrl_size(uint32_t world, uint32_t kept)
{
	size_t need = (ctrl_need(world, kept) + 63) & ~(size_t)63;
	KEEL_ASSERT(need <= UINT32_MAX);
	return need < CTRL_BUF_MIN ? CTRL_BUF_MIN : (uint32_t)need;
}

uint32_t mb_kept_cap(uint32_t world, uint32_t mtu, uint32_t want)
{
	KEEL_ASSERT(world != 0 && world <= KEEL_WORLD_MAX);
	size_t room = mtu & ~63u; /* mb_ctrl_size rounds up to 64 bytes */
	size_t base = ctrl_need(world, 0) + KEPT_HEADER;
	if (room <= base)
		return 0;
	size_t cap = room - base < want ? room - base : want;
	cap &= ~(size_t)7; /* whole elements of every type */
	KEEL_ASSERT(cap == 0 || mb_ctrl_size(world, (uint32_t)cap) <= mtu);
	return (uint32_t)cap;
}

static void view_carve(struct view *v, uint8_t **cursor, uint32_t world, uint32_t kept)
{
	KEEL_ASSERT(v != NULL && cursor != NULL && *cursor != NULL);
	KEEL_ASSERT(((uintptr_t)*cursor & 3u) == 0); /* inc[] is u32: keep it aligned */
	v->bits = *cursor;
	v->acceptors = *cursor + align8((size_t)world / 8 + 1);
	v->inc = (uint32_t *)(*cursor + 2 * align8((size_t)world / 8 + 1));
	v->result =
	    *cursor + 2 * align8((size_t)world / 8 + 1) + align8((size_t)world * sizeof(uint32_t));
	*cursor += mb_view_bytes(world, kept);
}

void mb_carve(struct keel_node *n, uint8_t **cursor)
{
	KEEL_ASSERT(n != NULL && cursor != NULL && *cursor != NULL);
	uint8_t *start = *cursor;
	struct view *views[] = {&n->view, &n->acc_value, &n->prop_best, &n->prop_value,
				&n->scratch_view};
	for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++)
		view_carve(views[i], cursor, n->world, n->result_cap);
	n->rank_at = (uint32_t *)*cursor;
	*cursor += align8((size_t)n->world * sizeof(uint32_t));
	n->pos_of = (uint32_t *)*cursor;
	*cursor += align8((size_t)n->world * sizeof(uint32_t));
	/* node.c's layout reserves exactly this (plus alignment slack) */
	KEEL_ASSERT((size_t)(*cursor - start) ==
		    5 * mb_view_bytes(n->world, n->result_cap) +
			2 * align8((size_t)n->world * sizeof(uint32_t)));
}

/* A view's shape: its member count matches its bits (O(world): debug builds only). */
static void view_check(const struct keel_node *n, const struct view *v)
{
	KEEL_ASSERT(v->bits != NULL && v->inc != NULL && v->count <= n->world);
	KEEL_ASSERT(v->donor == UINT32_MAX || v->donor < n->world);
#ifdef KEEL_DEBUG
	uint32_t members = 0;
	for (uint32_t r = 0; r < n->world; r++)
		members += view_has(v, r);
	KEEL_ASSERT_DEBUG(members == v->count);
#endif
}

/* Paxos acceptor state: the accepted ballot never exceeds the promised one, and a value is
 * accepted only for the epoch after the installed one. */
static void acceptor_check(const struct keel_node *n)
{
	KEEL_ASSERT(n->acc_ballot <= n->acc_promised);
	KEEL_ASSERT(n->acc_ballot == 0 || n->acc_value.epoch == n->view.epoch + 1);
}

static void view_clear(struct view *v, uint32_t world)
{
	KEEL_ASSERT(v != NULL && v->bits != NULL && v->inc != NULL);
	KEEL_ASSERT(world != 0 && world <= KEEL_WORLD_MAX);
	v->epoch = v->count = v->flags = v->ops_resume = v->frontier = v->result_len = 0;
	v->donor = UINT32_MAX;
	v->ballot = 0;
	memset(v->bits, 0, world / 8 + 1);
	memset(v->acceptors, 0, world / 8 + 1);
	memset(v->inc, 0, (size_t)world * sizeof(uint32_t));
}

static void view_copy(struct view *dst, const struct view *src, uint32_t world)
{
	KEEL_ASSERT(dst != NULL && src != NULL && dst != src);
	KEEL_ASSERT(dst->bits != src->bits && dst->inc != src->inc && src->count <= world);
	uint8_t *bits = dst->bits, *acceptors = dst->acceptors, *result = dst->result;
	uint32_t *inc = dst->inc;
	*dst = *src;
	dst->bits = bits;
	dst->acceptors = acceptors;
	dst->inc = inc;
	dst->result = result;
	if (src->result_len != 0)
		memcpy(dst->result, src->result, src->result_len);
	memcpy(dst->bits, src->bits, world / 8 + 1);
	memcpy(dst->acceptors, src->acceptors, world / 8 + 1);
	memcpy(dst->inc, src->inc, (size_t)world * sizeof(uint32_t));
}

static void view_add(struct view *v, uint32_t rank, uint32_t inc)
{
	KEEL_ASSERT(v != NULL && rank < KEEL_WORLD_MAX);
	if (!view_has(v, rank))
		v->count++;
	v->bits[rank / 8] |= (uint8_t)(1u << (rank % 8));
	v->inc[rank] = inc;
	KEEL_ASSERT(view_has(v, rank) && v->count != 0 && v->count <= KEEL_WORLD_MAX);
}

static size_t value_encode(uint8_t *p, const struct view *v, uint32_t world)
{
	KEEL_ASSERT(p != NULL && v != NULL && v->count <= world);
	wire_put32(p, v->epoch);
	wire_put32(p + 4, (v->flags & ~VIEW_RESULT) | (v->result_len != 0 ? VIEW_RESULT : 0));
	wire_put32(p + 8, v->ops_resume);
	wire_put32(p + 12, v->donor);
	wire_put32(p + 16, v->frontier);
	wire_put32(p + 20, v->count);
	size_t off = VALUE_HEADER;
	for (uint32_t r = 0; r < world; r++) {
		if (!view_has(v, r))
			continue;
		wire_put16(p + off, (uint16_t)r);
		wire_put32(p + off + 2, v->inc[r]);
		off += VALUE_ENTRY;
	}
	KEEL_ASSERT(off == VALUE_HEADER + (size_t)v->count * VALUE_ENTRY);
	if (v->result_len == 0)
		return off;
	KEEL_ASSERT(v->frontier != 0);
	wire_put32(p + off, v->result_len);
	memcpy(p + off + 4, v->result, v->result_len);
	return off + 4 + v->result_len;
}

/* Decode and validate a value from the network: never trusted. */
static bool value_decode(const uint8_t *p, size_t len, struct view *v, uint32_t world,
			 uint32_t result_cap)
{
	KEEL_ASSERT(p != NULL && v != NULL && world != 0); /* the bytes themselves: checked below */
	if (len < VALUE_HEADER)
		return false;
	uint32_t count = wire_get32(p + 20), result_len = 0;
	size_t entries = VALUE_HEADER + (size_t)count * VALUE_ENTRY;
	if (count == 0 || count > world || len < entries)
		return false;
	if ((wire_get32(p + 4) & VIEW_RESULT) != 0) {
		result_len = len >= entries + 4 ? wire_get32(p + entries) : 0;
		/* a result is for collective frontier - 1: none without a frontier */
		if (result_len == 0 || result_len > result_cap || wire_get32(p + 16) == 0 ||
		    len < entries + 4 + result_len)
			return false;
	}
	view_clear(v, world);
	v->epoch = wire_get32(p);
	v->flags = wire_get32(p + 4);
	v->ops_resume = wire_get32(p + 8);
	v->donor = wire_get32(p + 12);
	v->frontier = wire_get32(p + 16);
	int64_t prev = -1;
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *e = p + VALUE_HEADER + (size_t)i * VALUE_ENTRY;
		uint32_t rank = wire_get16(e), inc = wire_get32(e + 2);
		if (rank >= world || (int64_t)rank <= prev || inc == 0)
			return false;
		prev = rank;
		view_add(v, rank, inc);
	}
	KEEL_ASSERT(v->count == count); /* ranks ascending: each one added once */
	v->result_len = result_len;
	memcpy(v->result, p + entries + 4, result_len);
	return v->epoch != 0 && (v->donor == UINT32_MAX || v->donor < world);
}

static void send_msg(struct keel_node *n, uint32_t peer, enum vmsg kind, uint32_t target,
		     uint64_t ballot, const uint8_t *extra, size_t extra_len)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT(kind >= VM_PREPARE && kind <= VM_KIND_MAX && (extra != NULL || extra_len == 0));
	uint8_t *p = n->msg_buf;
	memset(p, 0, WIRE_VIEW_MIN);
	p[OFF_KIND] = (uint8_t)kind;
	wire_put32(p + OFF_TARGET, target);
	wire_put64(p + OFF_BALLOT, ballot);
	KEEL_ASSERT(WIRE_VIEW_MIN + extra_len + WIRE_HEADER_SIZE + KEEL_AUTH_TRAILER_BYTES <=
		    n->ctrl_size);
	if (extra_len != 0)
		memmove(p + WIRE_VIEW_MIN, extra, extra_len);
	node_send_ctrl(n, peer, WIRE_VIEW, n->ops_done_local, p,
		       (uint32_t)(WIRE_VIEW_MIN + extra_len));
}

/* Values go after the message header inside msg_buf itself. */
static void send_value(struct keel_node *n, uint32_t peer, enum vmsg kind, uint32_t target,
		       uint64_t ballot, const struct view *v)
{
	KEEL_ASSERT(kind == VM_ACCEPT);
	KEEL_ASSERT(v->epoch == target && v->epoch != 0); /* only ever the view the target names */
	uint8_t *p = n->msg_buf + WIRE_VIEW_MIN;
	size_t len = value_encode(p, v, n->world);
	send_msg(n, peer, kind, target, ballot, p, len);
}

/* A decided view with its proof: the deciding ballot and who accepted it. */
static void send_commit(struct keel_node *n, uint32_t peer, const struct view *v)
{
	KEEL_ASSERT(v->epoch != 0 && (v->ballot != 0 || v->epoch == 1));
	uint8_t *p = n->msg_buf + WIRE_VIEW_MIN;
	size_t abytes = acceptor_bytes(n->world);
	memcpy(p, v->acceptors, abytes);
	size_t len = abytes + value_encode(p + abytes, v, n->world);
	send_msg(n, peer, VM_COMMIT, v->epoch, v->ballot, p, len);
}

static void rebuild_positions(struct keel_node *n)
{
	KEEL_ASSERT(n->rank_at != NULL && n->pos_of != NULL);
	uint32_t pos = 0;
	for (uint32_t r = 0; r < n->world; r++) {
		n->pos_of[r] = UINT32_MAX;
		if (view_has(&n->view, r))
			n->rank_at[pos] = r, n->pos_of[r] = pos++;
	}
	KEEL_ASSERT(pos == n->view.count);
}

void mb_init(struct keel_node *n)
{
	KEEL_ASSERT(n != NULL && n->mb_peers != NULL && n->self < n->world);
	KEEL_ASSERT(n->cfg.incarnation != 0);
	n->incarnation = n->cfg.incarnation;
	struct view *v = &n->view;
	view_clear(v, n->world);
	view_clear(&n->acc_value, n->world);
	if (!n->cfg.rejoin) {
		v->epoch = 1;
		for (uint32_t r = 0; r < n->world; r++)
			view_add(v, r, r == n->self ? n->incarnation : 0);
	}
	n->epoch = v->epoch;
	n->member = !n->cfg.rejoin;
	n->donor = UINT32_MAX;
	mb_touch(n);
	rebuild_positions(n);
	/* a first job starts with every rank; a restarted one with no view at all */
	KEEL_ASSERT(n->cfg.rejoin ? v->epoch == 0 && v->count == 0 : v->count == n->world);
	KEEL_ASSERT(n->epoch == v->epoch && n->acc_ballot == 0 && n->acc_promised == 0);
}

static bool is_member(const struct keel_node *n, uint32_t rank)
{
	KEEL_ASSERT(rank < n->world);
	return view_has(&n->view, rank);
}

bool mb_is_coordinator(const struct keel_node *n)
{
	KEEL_ASSERT(n != NULL && n->self < n->world);
	if (!n->member || n->noquorum)
		return false;
	KEEL_ASSERT(is_member(n, n->self));
	for (uint32_t r = 0; r < n->self; r++)
		if (is_member(n, r) && fd_is_alive(n, r))
			return false;
	return true;
}

static uint32_t coordinator(const struct keel_node *n)
{
	KEEL_ASSERT(n->member && is_member(n, n->self)); /* the lowest live member: self at most */
	for (uint32_t r = 0; r < n->world; r++)
		if (is_member(n, r) && (r == n->self || fd_is_alive(n, r)))
			return r;
	return n->self;
}

/* ---- installing a view ---- */

static void reset_peer_for_view(struct keel_node *n, uint32_t r, bool member_now)
{
	KEEL_ASSERT(r < n->world && r != n->self);
	KEEL_ASSERT(member_now == is_member(n, r)); /* the new view is installed already */
	struct mb_peer *p = &n->mb_peers[r];
	rel_peer_reset(n, r);
	p->ops_done = p->ops_started = 0;
	p->suspect_report = false;
	p->pr_promised = p->pr_accepted = false;
	fd_peer_for_view(n, r, member_now); /* its state, and the caller hears of it */
}

static void install(struct keel_node *n, const struct view *v)
{
	KEEL_ASSERT(v != &n->view && v->epoch != 0);
	view_check(n, v);
	/* Epochs only grow: a view installed for epoch e is never replaced by another one for e
	 * (nor by an older one). Callers decided it, or checked a commit's epoch against ours. */
	KEEL_ASSERT(seq_before(n->view.epoch, v->epoch));
	bool was_member = n->member;
	uint32_t old_epoch = n->view.epoch;
	bool self_in = view_has(v, n->self) && v->inc[n->self] == n->incarnation;
	/* Left out after being a member: the others went on without this node (it was paused or
	 * cut off and suspected). Its collectives are not theirs any more; it asks to be admitted
	 * again like a restarted rank, and its application must fetch state. */
	bool excluded = was_member && !self_in;
	view_copy(&n->view, v, n->world);
	n->epoch = v->epoch;
	rebuild_positions(n);
	n->member = self_in;
	n->joined_last = self_in && !was_member;
	n->noquorum = false;
	n->donor = v->donor;
	n->joined_count = v->flags >> VIEW_JOINED_SHIFT;
	n->acc_promised = n->acc_ballot = 0;
	n->prop_phase = PROP_IDLE;
	n->soft_fault = false;
	mb_touch(n);
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self)
			reset_peer_for_view(n, r, view_has(v, r));
	KEEL_ASSERT(n->epoch == v->epoch && n->view.count == v->count);
	KEEL_ASSERT(!excluded || !n->member);
	KEEL_ASSERT(!n->member || n->pos_of[n->self] < n->view.count);
	fd_on_view(n);
	if (excluded) {
		n->ctr.self_exclusions++;
		n->excluded_unseen = true;
		fd_beat_all(n); /* ask to be admitted now, not at the next interval */
	}
	coll_on_install(n, was_member && v->epoch == old_epoch + 1, excluded);
	if (old_epoch != 0)
		n->ctr.view_changes++;
	metrics_on_view(n, v->count);
	if (n->cfg.on_view != NULL) {
		struct keel_view kv;
		int rc = keel_view_get(n, &kv, NULL, 0);
		KEEL_ASSERT(rc == 0);
		n->cfg.on_view(n->cfg.on_view_ctx, &kv, n->rank_at, n->now_ns);
	}
}

/* ---- the coordinator's round ---- */

/* This node holds a result it reported early in this epoch (collectives.c keeps it). */
static bool kept_now(const struct keel_node *n)
{
	KEEL_ASSERT(n->kept_done == 0 || (n->kept_len != 0 && n->kept_len <= n->kept_cap));
	return n->kept_done != 0 && n->kept_epoch == n->view.epoch;
}

/* A member that promised keeps the result of collective done - 1: the newest one is what the
 * value carries (any two kept for one collective are the same bytes). */
static void note_kept(struct keel_node *n, uint32_t done, const uint8_t *bytes, uint32_t len)
{
	KEEL_ASSERT(done != 0 && len != 0 && len <= n->result_cap);
	if (done <= n->prop_kept_done)
		return;
	n->prop_kept_done = done;
	n->prop_kept_len = len;
	memcpy(n->prop_kept, bytes, len);
}

static void start_prepare(struct keel_node *n)
{
	KEEL_ASSERT(n->member && !n->noquorum);
	acceptor_check(n);
	for (uint32_t r = 0; r < n->world; r++) {
		/* reports are renewed while they hold; this round does not wait for the reported */
		n->mb_peers[r].pr_reported = n->mb_peers[r].suspect_report;
		n->mb_peers[r].suspect_report = false;
	}
	mb_touch(n);
	n->prop_round++;
	n->prop_ballot = ((uint64_t)n->prop_round << 16) | n->self;
	struct keel_event ev = {
	    .kind = KEEL_EV_VIEW_ROUND, .peer = UINT32_MAX, .op = n->prop_round};
	node_event(n, &ev);
	/* the low bits name the coordinator: no other one can use this ballot (the round came
	 * partly from a NACK, so its size is a peer's claim and is not asserted) */
	KEEL_ASSERT((n->prop_ballot & 0xffffu) == n->self);
	n->prop_phase = PROP_PREPARE;
	n->prop_started_ns = n->prop_sent_ns = n->now_ns;
	n->prop_best_ballot = 0;
	n->prop_kept_done = n->prop_kept_len = 0;
	n->ctr.view_proposals++;
	for (uint32_t r = 0; r < n->world; r++)
		n->mb_peers[r].pr_promised = n->mb_peers[r].pr_accepted = false;
	/* this node is an acceptor too */
	if (n->prop_ballot > n->acc_promised) {
		n->acc_promised = n->prop_ballot;
		struct mb_peer *me = &n->mb_peers[n->self];
		me->pr_promised = true;
		me->pr_done = coll_done_count(n);
		me->pr_ops_pending = coll_pending(n);
		if (kept_now(n))
			note_kept(n, n->kept_done, n->kept, n->kept_len);
		if (n->acc_ballot != 0) {
			view_copy(&n->prop_best, &n->acc_value, n->world);
			n->prop_best_ballot = n->acc_ballot;
		}
	}
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && is_member(n, r))
			send_msg(n, r, VM_PREPARE, n->view.epoch + 1, n->prop_ballot, NULL, 0);
	acceptor_check(n);
}

static bool recently_heard(const struct keel_node *n, uint32_t r)
{
	KEEL_ASSERT(r < n->world && r != n->self);
	uint64_t window = (uint64_t)n->cfg.miss_limit * n->cfg.heartbeat_ns;
	return n->mb_peers[r].inc != 0 && n->now_ns - fd_peer_of(n, r)->last_heard_ns <= window;
}

/* A peer that asks to be admitted (its heartbeats say so, lately): not a member, or a
 * member's new incarnation. */
static bool is_joiner(const struct keel_node *n, uint32_t r)
{
	KEEL_ASSERT(r < n->world);
	const struct mb_peer *p = &n->mb_peers[r];
	/* gone: it said it leaves for good (an excluded rank whose program chose to exit) */
	if (r == n->self || !p->joining || fd_peer_of(n, r)->gone || !recently_heard(n, r))
		return false;
	if (!is_member(n, r))
		return true;
	return n->view.inc[r] != 0 && p->inc > n->view.inc[r];
}

/* The value this coordinator proposes when no member had accepted one: the members that
 * answered, plus the peers asking to join. */
static void build_value(struct keel_node *n)
{
	KEEL_ASSERT(n->prop_phase == PROP_PREPARE &&
		    n->prop_best_ballot == 0); /* nothing to adopt */
	struct view *v = &n->prop_value;
	view_clear(v, n->world);
	v->epoch = n->view.epoch + 1;
	v->frontier = UINT32_MAX;
	uint32_t joined = 0, pending = 0;
	for (uint32_t r = 0; r < n->world; r++) {
		const struct mb_peer *p = &n->mb_peers[r];
		if (is_member(n, r) && p->pr_promised && !(r != n->self && is_joiner(n, r))) {
			uint32_t inc = r == n->self ? n->incarnation : n->view.inc[r];
			view_add(v, r, inc != 0 ? inc : p->inc);
			/* complete everywhere: what the member with the fewest results has */
			if (p->pr_done < v->frontier)
				v->frontier = p->pr_done;
			if (p->pr_ops_pending > pending)
				pending = p->pr_ops_pending;
			if (v->donor == UINT32_MAX)
				v->donor = r;
		} else if (is_joiner(n, r) && joined < (1u << 15)) {
			view_add(v, r, p->inc);
			joined++;
		}
	}
	if (v->frontier == UINT32_MAX)
		v->frontier = 0;
	/* A result some member reported early stands: the members without it take it from the
	 * view. (Every member had started that collective, so none is further behind.) */
	if (n->prop_kept_done > v->frontier) {
		v->frontier = n->prop_kept_done;
		v->result_len = n->prop_kept_len;
		memcpy(v->result, n->prop_kept, n->prop_kept_len);
	}
	v->ops_resume = pending > v->frontier ? pending - v->frontier : 0;
	v->flags = joined << VIEW_JOINED_SHIFT;
	KEEL_ASSERT(v->epoch == n->view.epoch + 1 && joined <= v->count);
	view_check(n, v);
}

/* Members that still vote: a member that left cleanly never will, and leaving out a member
 * that is really gone keeps every majority intersecting every other. */
static uint32_t voters(const struct keel_node *n)
{
	uint32_t left = 0;
	for (uint32_t r = 0; r < n->world; r++)
		if (fd_peer_of(n, r)->left && is_member(n, r))
			left++;
	/* self never leaves itself: at least one vote while a member */
	KEEL_ASSERT(left <= n->view.count && (!n->member || left < n->view.count));
	return n->view.count - left;
}

/* A member whose rank came back as a newer incarnation: that process is gone for good, and
 * with it whatever it promised or accepted. */
static bool proven_dead(const struct keel_node *n, uint32_t r)
{
	KEEL_ASSERT(r < n->world);
	return r != n->self && is_member(n, r) && n->view.inc[r] != 0 &&
	       n->mb_peers[r].inc > n->view.inc[r];
}

/* Enough answers to decide: a majority of the voters; or, when restarted members hold fewer
 * than a majority of the votes, every other voter — every majority then contains one of them,
 * so whatever any majority ever accepted is among the answers (and the value adopted), yet
 * the cluster is not stuck because lost votes can never come back. */
static bool enough(const struct keel_node *n, bool accepted)
{
	KEEL_ASSERT(n->member && n->prop_phase == (accepted ? PROP_ACCEPT : PROP_PREPARE));
	uint32_t votes = voters(n), got = 0, dead = 0, missing = 0;
	for (uint32_t r = 0; r < n->world; r++) {
		const struct mb_peer *p = &n->mb_peers[r];
		if (!is_member(n, r) || fd_peer_of(n, r)->left)
			continue;
		bool yes = accepted ? p->pr_accepted : p->pr_promised;
		got += yes;
		dead += !yes && proven_dead(n, r);
		missing += !yes && !proven_dead(n, r);
	}
	KEEL_ASSERT(got + dead + missing == votes); /* each voter counted once */
	if (got * 2 > votes)
		return true;
	return got > 0 && missing == 0 && dead < votes / 2 + 1;
}

static void start_accept(struct keel_node *n)
{
	KEEL_ASSERT(n->prop_phase == PROP_PREPARE && n->member);
	/* a value to adopt was accepted for our next epoch, below our ballot or at most equal */
	KEEL_ASSERT(n->prop_best_ballot == 0 || n->prop_best.epoch == n->view.epoch + 1);
	if (n->prop_best_ballot != 0) {
		view_copy(&n->prop_value, &n->prop_best, n->world); /* Paxos: adopt it */
	} else {
		/* Even a false alarm (everybody answered) ends in a new epoch: the members have
		 * promised, and hold back results until a view says which stand. */
		build_value(n);
	}
	n->prop_phase = PROP_ACCEPT;
	n->prop_sent_ns = n->now_ns;
	if (n->prop_ballot >= n->acc_promised) {
		n->acc_promised = n->acc_ballot = n->prop_ballot;
		view_copy(&n->acc_value, &n->prop_value, n->world);
		n->mb_peers[n->self].pr_accepted = true;
	}
	KEEL_ASSERT(n->prop_value.epoch == n->view.epoch + 1);
	acceptor_check(n);
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && is_member(n, r))
			send_value(n, r, VM_ACCEPT, n->prop_value.epoch, n->prop_ballot,
				   &n->prop_value);
}

static void decide(struct keel_node *n)
{
	KEEL_ASSERT(n->prop_phase == PROP_ACCEPT && n->prop_value.epoch == n->view.epoch + 1);
	KEEL_ASSERT(n->member && n->prop_value.count <= n->world);
	/* Everyone of the old view and of the new hears the decision; stragglers catch up from
	 * heartbeats later. */
	struct view *v = &n->scratch_view;
	view_copy(v, &n->prop_value, n->world);
	v->ballot = n->prop_ballot;
	for (uint32_t r = 0; r < n->world; r++)
		if (n->mb_peers[r].pr_accepted)
			v->acceptors[r / 8] |= (uint8_t)(1u << (r % 8));
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && (is_member(n, r) || view_has(v, r)))
			send_commit(n, r, v);
	install(n, &n->scratch_view);
	KEEL_ASSERT(n->prop_phase == PROP_IDLE && n->view.epoch == n->scratch_view.epoch);
}

static void prepare_check(struct keel_node *n)
{
	KEEL_ASSERT(n->prop_phase == PROP_PREPARE);
	if (!enough(n, false))
		return;
	bool waiting = false;
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && is_member(n, r) && !n->mb_peers[r].pr_promised &&
		    fd_is_alive(n, r) && !n->mb_peers[r].pr_reported &&
		    !n->mb_peers[r].suspect_report)
			waiting = true;
	KEEL_ASSERT(n->member && n->view.count != 0);
	if (!waiting || n->now_ns - n->prop_started_ns >= n->cfg.view_timeout_ns)
		start_accept(n);
}

static void accept_check(struct keel_node *n)
{
	KEEL_ASSERT(n->prop_phase == PROP_ACCEPT);
	acceptor_check(n);
	if (enough(n, true))
		decide(n);
}

/* Resend what is unanswered once a heartbeat interval; start over with a higher ballot when
 * a round stalls for view_timeout_ns. */
static void proposer_tick(struct keel_node *n)
{
	KEEL_ASSERT(n->member && n->prop_phase != PROP_IDLE);
	KEEL_ASSERT(n->now_ns >= n->prop_sent_ns); /* set from now_ns, which never goes back */
	if (n->now_ns - n->prop_started_ns >= 2 * n->cfg.view_timeout_ns) {
		start_prepare(n);
		return;
	}
	if (n->prop_phase == PROP_PREPARE)
		prepare_check(n);
	else
		accept_check(n);
	if (n->prop_phase == PROP_IDLE || n->now_ns - n->prop_sent_ns < n->cfg.heartbeat_ns)
		return;
	n->prop_sent_ns = n->now_ns;
	for (uint32_t r = 0; r < n->world; r++) {
		const struct mb_peer *p = &n->mb_peers[r];
		if (r == n->self || !is_member(n, r))
			continue;
		if (n->prop_phase == PROP_PREPARE && !p->pr_promised)
			send_msg(n, r, VM_PREPARE, n->view.epoch + 1, n->prop_ballot, NULL, 0);
		else if (n->prop_phase == PROP_ACCEPT && !p->pr_accepted)
			send_value(n, r, VM_ACCEPT, n->prop_value.epoch, n->prop_ballot,
				   &n->prop_value);
	}
}

static bool change_needed(const struct keel_node *n)
{
	KEEL_ASSERT(n->member && n->view.count != 0);
	if (n->soft_fault)
		return true;
	for (uint32_t r = 0; r < n->world; r++) {
		const struct mb_peer *p = &n->mb_peers[r];
		if (r == n->self)
			continue;
		if (is_member(n, r) && (!fd_is_alive(n, r) || p->suspect_report))
			return true;
		if (is_joiner(n, r))
			return true;
	}
	return false;
}

/* ---- each poll ---- */

static void check_quorum(struct keel_node *n)
{
	KEEL_ASSERT(n->member);
	uint32_t alive = 0, dead = 0, votes = voters(n);
	for (uint32_t r = 0; r < n->world; r++) {
		if (is_member(n, r) && (r == n->self || fd_is_alive(n, r)))
			alive++;
		dead += proven_dead(n, r);
	}
	/* a member that left is DEAD (fd_on_leave): the live ones all vote, self among them */
	KEEL_ASSERT(alive >= 1 && alive <= votes);
	/* Lost: no majority alive, unless the rest are restarted members few enough to decide
	 * without them (see enough()). */
	bool lost = alive * 2 <= votes && !(alive + dead == votes && dead < votes / 2 + 1);
	if (lost && !n->noquorum)
		n->ctr.noquorum_entries++;
	n->noquorum = lost;
}

/* A member that is not the coordinator tells it what it sees, once an interval. */
static void report_to_coordinator(struct keel_node *n)
{
	KEEL_ASSERT(n->member && !n->noquorum);
	if (n->now_ns - n->report_ns < n->cfg.heartbeat_ns)
		return;
	uint32_t c = coordinator(n);
	if (c == n->self)
		return;
	KEEL_ASSERT(c < n->self && is_member(n, c)); /* a live member below us */
	bool sent = false;
	for (uint32_t r = 0; r < n->world; r++) {
		if (r == n->self || !is_member(n, r) || fd_is_alive(n, r))
			continue;
		uint8_t extra[8];
		wire_put32(extra, r);
		wire_put32(extra + 4, n->view.inc[r]);
		send_msg(n, c, VM_SUSPECT, n->view.epoch, 0, extra, sizeof(extra));
		sent = true;
	}
	if (n->soft_fault) {
		send_msg(n, c, VM_SOFT, n->view.epoch, 0, NULL, 0);
		sent = true;
	}
	if (sent)
		n->report_ns = n->now_ns;
}

static uint32_t members_down(const struct keel_node *n)
{
	KEEL_ASSERT(n->member);
	uint32_t down = 0;
	for (uint32_t r = 0; r < n->world; r++)
		down += r != n->self && is_member(n, r) && !fd_is_alive(n, r);
	KEEL_ASSERT(down < n->view.count); /* self is a member and not down */
	return down;
}

void mb_poll(struct keel_node *n)
{
	KEEL_ASSERT(n != NULL && n->epoch == n->view.epoch);
	acceptor_check(n);
	if (!n->member)
		return; /* joining: heartbeats ask for admission, a commit brings it */
	KEEL_ASSERT(is_member(n, n->self) && n->view.inc[n->self] == n->incarnation);
	if (n->mb_dirty) {
		/* Time alone only ends a joiner's request (its heartbeats stop): it never makes a
		 * change needed, so these stand until an input changes. */
		n->mb_dirty = false;
		check_quorum(n);
		n->mb_coordinator = mb_is_coordinator(n);
		n->mb_change = change_needed(n);
		n->mb_down = members_down(n);
	}
	if (n->noquorum) {
		n->prop_phase = PROP_IDLE;
		return;
	}
	if (!n->mb_coordinator) {
		n->prop_phase = PROP_IDLE;
		if (n->mb_down != 0 || n->soft_fault)
			report_to_coordinator(n);
		return;
	}
	if (n->prop_phase == PROP_IDLE && n->mb_change)
		start_prepare(n);
	if (n->prop_phase != PROP_IDLE)
		proposer_tick(n);
	acceptor_check(n);
}

uint64_t mb_next_deadline(const struct keel_node *n)
{
	KEEL_ASSERT(n != NULL);
	if (n->prop_phase == PROP_IDLE)
		return UINT64_MAX;
	KEEL_ASSERT(n->member); /* a round ends (IDLE) when a view leaves this node out */
	/* the next of: a resend, giving up on slow members, starting over — never a time
	 * already passed (the round then waits on answers, not on the clock) */
	uint64_t when[3] = {n->prop_sent_ns + n->cfg.heartbeat_ns,
			    n->prop_started_ns + n->cfg.view_timeout_ns,
			    n->prop_started_ns + 2 * n->cfg.view_timeout_ns};
	uint64_t dl = UINT64_MAX;
	for (int i = 0; i < 3; i++)
		if (when[i] > n->now_ns && when[i] < dl)
			dl = when[i];
	return dl;
}

void mb_request_bump(struct keel_node *n)
{
	KEEL_ASSERT(n != NULL);
	n->soft_fault = true;
	mb_touch(n);
	KEEL_ASSERT(n->soft_fault && n->mb_dirty);
}

/* ---- heartbeats ---- */

bool mb_on_heartbeat(struct keel_node *n, uint32_t peer, const struct wire_heartbeat *hb,
		     uint32_t epoch)
{
	KEEL_ASSERT(peer < n->world && peer != n->self && hb != NULL);
	struct mb_peer *p = &n->mb_peers[peer];
	/* fd_on_heartbeat dropped beats from an older life of the rank */
	KEEL_ASSERT(hb->incarnation >= p->inc);
	if (epoch == n->epoch && seq_before(p->ops_started, hb->ops_started))
		p->ops_started = hb->ops_started;
	bool same_life = true;
	bool joining = (hb->flags & WIRE_HB_JOINING) != 0;
	bool new_life = hb->incarnation > p->inc;
	/* A heartbeat this life sent before it installed a later view, arriving late (datagrams
	 * reorder): what it says about joining is out of date — an excluded node's request to
	 * be admitted must not be undone by a beat from before it knew. */
	if (!new_life && p->inc != 0 && seq_before(epoch, p->hb_epoch))
		joining = p->joining;
	if (new_life || joining != p->joining || joining)
		mb_touch(n); /* a new life, or a request to join (renewed: see is_joiner) */
	if (new_life) {
		p->inc = hb->incarnation;
		fd_new_life(n, peer); /* a leave was its old life's */
	}
	if (new_life || !seq_before(epoch, p->hb_epoch))
		p->hb_epoch = epoch;
	p->joining = joining;
	if (is_member(n, peer)) {
		if (n->view.inc[peer] == 0 && !p->joining) {
			n->view.inc[peer] =
			    hb->incarnation; /* first view: learnt at first contact */
			mb_touch(n);
		}
		if (n->view.inc[peer] != 0 && hb->incarnation > n->view.inc[peer]) {
			same_life = false;
			if (fd_is_alive(n, peer))
				fd_suspect(n, peer); /* it restarted: its old life is over */
		}
	}
	/* It is behind: send it the current view (once an interval). */
	if (n->member && seq_before(epoch, n->epoch) &&
	    n->now_ns - p->catchup_ns >= n->cfg.heartbeat_ns) {
		p->catchup_ns = n->now_ns;
		send_commit(n, peer, &n->view);
	}
	/* We are behind (back from a pause, say): beat to it at once, so its catch-up above
	 * brings the view now rather than at our next interval. */
	if (seq_before(n->epoch, epoch) && n->now_ns - p->catchup_ns >= n->cfg.heartbeat_ns) {
		p->catchup_ns = n->now_ns;
		fd_beat_one(n, peer, 0);
	}
	KEEL_ASSERT(p->inc == hb->incarnation);
	return same_life;
}

void mb_heard_done(struct keel_node *n, uint32_t peer, uint32_t done)
{
	KEEL_ASSERT(peer < n->world && peer != n->self);
	KEEL_ASSERT(n->member && is_member(n, peer)); /* node.c passes this epoch's members */
	struct mb_peer *p = &n->mb_peers[peer];
	if (seq_before(p->ops_done, done))
		p->ops_done = done;
}

/* ---- messages ---- */

static void on_prepare(struct keel_node *n, uint32_t peer, uint32_t target, uint64_t ballot)
{
	KEEL_ASSERT(n->member && target == n->view.epoch + 1); /* on_round_msg checked it */
	acceptor_check(n);
	if (ballot > n->acc_promised) {
		n->acc_promised = ballot;
		acceptor_check(n); /* a promise only grows, so the accepted ballot stays below */
		uint8_t *extra = n->msg_buf + WIRE_VIEW_MIN;
		wire_put64(extra, n->acc_ballot);
		wire_put32(extra + 8, coll_done_count(n));
		wire_put32(extra + 12, coll_pending(n));
		/* Beyond the all-to-all limit the coordinator hears heartbeats from its ring
		 * neighbours only: the promise is where it learns every voter's incarnation. */
		wire_put32(extra + 16, n->incarnation);
		size_t len = PROMISE_EXTRA;
		if (n->acc_ballot != 0) /* the coordinator adopts it: what we keep is moot */
			len += value_encode(extra + PROMISE_EXTRA, &n->acc_value, n->world);
		else if (kept_now(n)) {
			wire_put32(extra + len, n->kept_done);
			wire_put32(extra + len + 4, n->kept_len);
			memcpy(extra + len + KEPT_HEADER, n->kept, n->kept_len);
			len += KEPT_HEADER + n->kept_len;
		}
		send_msg(n, peer, VM_PROMISE, target, ballot, extra, len);
	} else {
		uint8_t extra[8];
		wire_put64(extra, n->acc_promised);
		send_msg(n, peer, VM_NACK, target, ballot, extra, sizeof(extra));
	}
}

static void on_promise(struct keel_node *n, uint32_t peer, uint64_t ballot, const uint8_t *x,
		       size_t len)
{
	KEEL_ASSERT(n->member && peer < n->world && peer != n->self);
	if (n->prop_phase != PROP_PREPARE || ballot != n->prop_ballot || len < PROMISE_EXTRA) {
		n->ctr.drop_view += len < PROMISE_EXTRA;
		return;
	}
	/* A member promises in the life the view knows (or in some life, if the view learnt none
	 * yet); checked before anything of the promise is used. */
	uint32_t inc = wire_get32(x + 16);
	if (inc == 0 || (n->view.inc[peer] != 0 && inc != n->view.inc[peer])) {
		n->ctr.drop_view++;
		return;
	}
	uint64_t acc_ballot = wire_get64(x);
	if (acc_ballot != 0) {
		if (!value_decode(x + PROMISE_EXTRA, len - PROMISE_EXTRA, &n->scratch_view,
				  n->world, n->result_cap) ||
		    n->scratch_view.epoch != n->view.epoch + 1) {
			n->ctr.drop_view++;
			return;
		}
		if (acc_ballot > n->prop_best_ballot) {
			view_copy(&n->prop_best, &n->scratch_view, n->world);
			n->prop_best_ballot = acc_ballot;
		}
		KEEL_ASSERT(n->prop_best_ballot != 0 && n->prop_best.epoch == n->view.epoch + 1);
	} else if (len > PROMISE_EXTRA) {
		const uint8_t *k = x + PROMISE_EXTRA;
		uint32_t done = len >= PROMISE_EXTRA + KEPT_HEADER ? wire_get32(k) : 0;
		uint32_t kept_len = len >= PROMISE_EXTRA + KEPT_HEADER ? wire_get32(k + 4) : 0;
		if (done == 0 || kept_len == 0 || kept_len > n->result_cap ||
		    len != PROMISE_EXTRA + KEPT_HEADER + (size_t)kept_len) {
			n->ctr.drop_view++;
			return;
		}
		note_kept(n, done, k + KEPT_HEADER, kept_len);
	}
	struct mb_peer *p = &n->mb_peers[peer];
	if (n->view.inc[peer] == 0 || inc > p->inc)
		mb_touch(n); /* what proven_dead() and is_joiner() read */
	if (n->view.inc[peer] == 0)
		n->view.inc[peer] = inc;
	if (inc > p->inc) {
		p->inc = inc;
		fd_new_life(n, peer);
	}
	p->pr_promised = true;
	KEEL_ASSERT(p->inc != 0 && n->view.inc[peer] != 0);
	p->pr_done = wire_get32(x + 8);
	p->pr_ops_pending = wire_get32(x + 12);
	prepare_check(n);
}

static void on_accept(struct keel_node *n, uint32_t peer, uint32_t target, uint64_t ballot,
		      const uint8_t *x, size_t len)
{
	if (ballot < n->acc_promised) {
		uint8_t extra[8];
		wire_put64(extra, n->acc_promised);
		send_msg(n, peer, VM_NACK, target, ballot, extra, sizeof(extra));
		return;
	}
	if (!value_decode(x, len, &n->scratch_view, n->world, n->result_cap) ||
	    n->scratch_view.epoch != target) {
		n->ctr.drop_view++;
		return;
	}
	/* accepted: the promise never goes down, the value is for our next epoch */
	KEEL_ASSERT(ballot >= n->acc_promised && target == n->view.epoch + 1);
	n->acc_promised = n->acc_ballot = ballot;
	view_copy(&n->acc_value, &n->scratch_view, n->world);
	acceptor_check(n);
	send_msg(n, peer, VM_ACCEPTED, target, ballot, NULL, 0);
}

/* Whether a decoded COMMIT's proof holds, as far as this node can tell. A forger who cannot
 * seal datagrams is stopped before this (auth); here the rules catch what is inconsistent
 * with what this node saw itself: a decision needs a ballot (only the first view had none),
 * comes from that ballot's coordinator or a member of the view it decided, names acceptors
 * that were members of the view it replaces (when that is ours), and never claims an
 * acceptance of ours we did not give. */
static bool commit_proven(const struct keel_node *n, uint32_t peer, const struct view *v)
{
	KEEL_ASSERT(peer < n->world && v->epoch != 0);
	if (v->ballot == 0)
		return v->epoch == 1;
	uint32_t coordinator_rank = (uint32_t)(v->ballot & 0xffffu), acceptors = 0;
	if (peer != coordinator_rank && !view_has(v, peer))
		return false;
	bool next = v->epoch == n->view.epoch + 1 && n->member;
	for (uint32_t r = 0; r < n->world; r++) {
		if ((v->acceptors[r / 8] & (1u << (r % 8))) == 0)
			continue;
		acceptors++;
		if (next && !is_member(n, r))
			return false;
	}
	if (acceptors == 0)
		return false;
	bool claims_me = (v->acceptors[n->self / 8] & (1u << (n->self % 8))) != 0;
	if (!next || !claims_me || n->acc_ballot > v->ballot)
		return true; /* a later ballot we accepted carries the same value (Paxos) */
	if (n->acc_ballot < v->ballot)
		return false; /* we never accepted this ballot */
	/* the same ballot: the value we accepted, member for member */
	const struct view *a = &n->acc_value;
	if (a->count != v->count || memcmp(a->bits, v->bits, n->world / 8 + 1) != 0)
		return false;
	for (uint32_t r = 0; r < n->world; r++)
		if (view_has(v, r) && a->inc[r] != v->inc[r])
			return false;
	return true;
}

static void on_commit(struct keel_node *n, uint32_t peer, uint32_t target, uint64_t ballot,
		      const uint8_t *x, size_t len)
{
	KEEL_ASSERT(x != NULL && n->epoch == n->view.epoch);
	if (!seq_before(n->view.epoch, target))
		return; /* known already */
	size_t abytes = acceptor_bytes(n->world);
	struct view *v = &n->scratch_view;
	if (len < abytes || !value_decode(x + abytes, len - abytes, v, n->world, n->result_cap) ||
	    v->epoch != target) {
		n->ctr.drop_view++;
		return;
	}
	v->ballot = ballot;
	memcpy(v->acceptors, x, abytes);
	/* bits past the world: a malformed set */
	if (n->world % 8 != 0 && (x[abytes - 1] >> (n->world % 8)) != 0) {
		n->ctr.drop_view++;
		return;
	}
	if (!commit_proven(n, peer, v)) {
		n->ctr.drop_view++;
		return;
	}
	install(n, v);
	KEEL_ASSERT(n->view.epoch == target && n->epoch == target);
}

/* Messages for the round on epoch view.epoch + 1, from members of our view. */
static void on_round_msg(struct keel_node *n, uint32_t peer, enum vmsg kind, uint32_t target,
			 uint64_t ballot, const uint8_t *x, size_t len)
{
	KEEL_ASSERT(peer < n->world && peer != n->self && x != NULL);
	KEEL_ASSERT(kind != VM_COMMIT && kind != VM_SUSPECT && kind != VM_SOFT);
	if (!n->member || !is_member(n, peer)) {
		n->ctr.drop_view++;
		return;
	}
	if (seq_before(target, n->view.epoch + 1)) {
		/* a coordinator behind us: bring it up to date */
		if (kind == VM_PREPARE || kind == VM_ACCEPT)
			send_commit(n, peer, &n->view);
		return;
	}
	if (target != n->view.epoch + 1)
		return; /* we are behind: a heartbeat's catch-up will come */
	switch (kind) {
	case VM_PREPARE:
		on_prepare(n, peer, target, ballot);
		break;
	case VM_PROMISE:
		on_promise(n, peer, ballot, x, len);
		break;
	case VM_ACCEPT:
		on_accept(n, peer, target, ballot, x, len);
		break;
	case VM_ACCEPTED:
		if (n->prop_phase == PROP_ACCEPT && ballot == n->prop_ballot) {
			n->mb_peers[peer].pr_accepted = true;
			accept_check(n);
		}
		break;
	case VM_NACK:
		if (len >= 8 && n->prop_phase != PROP_IDLE && ballot == n->prop_ballot) {
			uint64_t promised_round = wire_get64(x) >> 16;
			/* A round no coordinator can outbid is no real promise (rounds grow by one
			 * a try): it would wrap ours to 0 and stall every round after. */
			if (promised_round >= UINT32_MAX) {
				n->ctr.drop_view++;
				break;
			}
			if ((uint32_t)promised_round >= n->prop_round)
				n->prop_round =
				    (uint32_t)promised_round; /* the next try outbids it */
			n->prop_started_ns = n->now_ns - 2 * n->cfg.view_timeout_ns;
		}
		break;
	default:
		break;
	}
}

void mb_on_view_msg(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		    const uint8_t *payload)
{
	KEEL_ASSERT(peer < n->world && peer != n->self && payload != NULL);
	/* the decoder let through only view messages at least this long */
	KEEL_ASSERT(h->type == WIRE_VIEW && h->payload_len >= WIRE_VIEW_MIN);
	size_t len = h->payload_len;
	enum vmsg kind = (enum vmsg)payload[OFF_KIND];
	uint32_t target = wire_get32(payload + OFF_TARGET);
	uint64_t ballot = wire_get64(payload + OFF_BALLOT);
	const uint8_t *x = payload + WIRE_VIEW_MIN;
	size_t xlen = len - WIRE_VIEW_MIN;
	if (kind < VM_PREPARE || kind > VM_KIND_MAX || payload[1] != 0 || payload[2] != 0 ||
	    payload[3] != 0) {
		n->ctr.drop_view++;
		return;
	}
	if (kind == VM_COMMIT) {
		on_commit(n, peer, target, ballot, x, xlen);
		return;
	}
	if (kind == VM_SUSPECT || kind == VM_SOFT) {
		if (!mb_is_coordinator(n) || !is_member(n, peer) || target != n->view.epoch)
			return;
		if (kind == VM_SOFT) {
			n->soft_fault = true;
			mb_touch(n);
		} else if (xlen >= 8 && wire_get32(x) < n->world && is_member(n, wire_get32(x))) {
			n->mb_peers[wire_get32(x)].suspect_report = true;
			mb_touch(n);
		} else {
			n->ctr.drop_view++;
		}
		return;
	}
	on_round_msg(n, peer, kind, target, ballot, x, xlen);
}
