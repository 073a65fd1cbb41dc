/* The group engine: each group's frontier collective runs through its steps (group_plan.c)
 * with a send and a receive cursor, as the world's AllReduce does (collectives.c), over the
 * same reliable streams; its result is reported once every member sent DONE for it. At a view
 * change every group whose streams were cut waits for every member's SYNC and then decides,
 * the same at each member, whether the frontier stands, runs again or fails (group_int.h). */
#include <string.h>

#include "assert_int.h"
#include "group_int.h"
#include "reduce_int.h"

static struct keel_req *frontier(struct keel_group *g)
{
	struct keel_req *r = &g->ops[g->run_slot];
	if (r->seq != g->run_seq || r->state == GS_FREE || r->state == GS_DONE)
		return NULL;
	return r;
}

/* What every member's data of an operation says of it, besides its kind: the element type,
 * the reduction, the root and the schedule. A receiver whose own differs fails the operation
 * with KEEL_EMISMATCH at once (the members' programs, or their configs, disagree). */
static uint32_t grp_shape(const struct keel_req *r)
{
	uint32_t root = r->root_rank == UINT32_MAX ? 0 : r->root_rank + 1;
	uint32_t v = 0; /* AllGatherV, ReduceScatterV: the blocks every member must agree on */
	if (r->counts != NULL && r->kind != GK_ALLTOALL) {
		uint64_t h = 1469598103934665603ull;
		for (uint32_t i = 0; i < r->w; i++)
			h = (h ^ r->counts[i] ^ (r->displs != NULL ? r->displs[i] << 32 : 0)) *
			    1099511628211ull;
		v = (uint32_t)(h >> 58); /* 6 bits: a mismatch goes unseen once in 64 */
	}
	return (uint32_t)r->dtype | (uint32_t)r->redop << 4 | root << 8 | (uint32_t)r->algo << 24 |
	       v << 26;
}

static uint64_t frag_bytes(const struct keel_node *n, const struct keel_req *r)
{
	uint64_t f = n->payload_max - GRP_P2P_SUBHDR_BYTES;
	return f - f % r->esize;
}

/* May step t send output bytes [lo, hi)? They are what earlier steps received: ready once
 * every earlier receive is complete, or step t - 1's receive covers them and has passed them. */
static bool out_ready(const struct keel_req *r, uint32_t t, uint64_t lo, uint64_t hi)
{
	if (r->recv_step >= t)
		return true;
	if (t == 0 || r->recv_step + 1 < t)
		return false;
	struct gstep p;
	grp_step(r, t - 1, &p);
	if (p.recv_pos < 0 || lo < p.recv_off || hi > p.recv_off + p.recv_len)
		return false;
	return r->recv_off >= hi - p.recv_off;
}

/* Receives write the output: in place, a write over the input forbids a restart. */
static void note_write(struct keel_req *r, const uint8_t *dst, uint64_t len)
{
	if (len != 0 && r->in != NULL && dst < r->in + r->in_bytes && r->in < dst + len)
		r->in_written = true;
}

static void apply(struct keel_req *r, const struct gstep *s, uint64_t off, const uint8_t *data,
		  uint64_t len)
{
	uint8_t *dst = r->out + s->recv_off + off;
	size_t cnt = (size_t)(len / r->esize);
	note_write(r, dst, len);
	if (s->action == GA_COPY || s->action == GA_LOCAL_COPY) {
		if (dst != data)
			memmove(dst, data, (size_t)len);
	} else {
		reduce_apply(dst, dst, data, cnt, r->dtype, r->redop);
	}
	if (s->final && r->redop == KEEL_AVG && r->kind != GK_BROADCAST)
		reduce_finish_avg(dst, cnt, r->dtype, r->w);
}

/* Move the receive cursor past steps with nothing to receive, applying local contributions
 * at their turn. */
static void skip_recv(struct keel_req *r)
{
	struct gstep s;
	while (r->recv_step < r->step_count) {
		grp_step(r, r->recv_step, &s);
		if (s.recv_pos >= 0 && r->recv_off < s.recv_len)
			return;
		if (s.action == GA_LOCAL_COPY || s.action == GA_LOCAL_REDUCE)
			apply(r, &s, 0, r->in + s.recv_off, s.recv_len);
		r->recv_step++;
		r->recv_off = 0;
	}
}

/* Our FAIL, then our DONE count, to `rank` where owed: false when its window is full (they
 * stay owed). A FAIL goes first: the DONE after it may count the failed collective. */
static bool send_done(struct keel_group *g, uint32_t rank)
{
	struct gpeer *p = &g->peers[rank];
	if (p->fail_owed) {
		struct grp_subhdr f = {.group = g->id, .seq = g->fail_seq, .msg = GMSG_FAIL};
		if (!grp_send(g->node, rank, &f, 0, 0, 0, NULL, 0, NULL, 0))
			return false;
		p->fail_owed = false;
	}
	struct grp_subhdr sh = {.group = g->id,
				.seq = g->local_done,
				.msg = GMSG_DONE,
				.kind = g->done_kind,
				.tag = g->done_shape};
	if (p->done_owed && !grp_send(g->node, rank, &sh, 0, 0, 0, NULL, 0, NULL, 0))
		return false;
	p->done_owed = false;
	return true;
}

/* This member found the frontier mismatched: it fails, and tells every member, which fail
 * it too (none could have reported it: it waits for our DONE). */
static void mismatch(struct keel_group *g, struct keel_req *r)
{
	g->node->ctr.drop_protocol++;
	g->fail_seq = r->seq + 1;
	for (uint32_t i = 0; i < g->size; i++)
		g->peers[g->ranks[i]].fail_owed = i != g->self_pos;
	grp_finish(g, r, KEEL_EMISMATCH);
}

/* A member failed this collective as mismatched (FAIL), or its DONE for it names another
 * collective (a root, type or kind that differs: where no data of its showed it, e.g. two
 * members that both think they are a Gather's root). */
static bool told_mismatch(struct keel_group *g, struct keel_req *r)
{
	for (uint32_t i = 0; i < g->size; i++) {
		const struct gpeer *p = &g->peers[g->ranks[i]];
		if (p->failed_at == r->seq + 1)
			return true;
		if (r->state != GS_QUEUED && i != g->self_pos && p->done == r->seq + 1 &&
		    (p->done_kind != r->kind || p->done_shape != grp_shape(r))) {
			mismatch(g, r);
			return false; /* finished by mismatch() */
		}
	}
	return false;
}

static void pump_sends(struct keel_group *g, struct keel_req *r)
{
	struct keel_node *n = g->node;
	struct gstep s;
	uint64_t frag = frag_bytes(n, r);
	while (r->send_step < r->step_count) {
		grp_step(r, r->send_step, &s);
		if (s.send_pos < 0 || r->send_off >= s.send_len) {
			r->send_step++;
			r->send_off = 0;
			continue;
		}
		uint32_t to = g->ranks[s.send_pos];
		uint64_t len = s.send_len - r->send_off;
		if (g->tx_skip[to] != 0) { /* resumed: it has these already */
			uint64_t skip = len < g->tx_skip[to] ? len : g->tx_skip[to];
			g->tx_skip[to] -= skip;
			r->send_off += skip;
			continue;
		}
		len = len > frag ? frag : len;
		uint64_t lo = s.send_off + r->send_off;
		if (s.send_out && !out_ready(r, r->send_step, lo, lo + len))
			return;
		if (n->budget_bytes == 0)
			return;
		/* the DONE of the operation before goes first: held behind this data (the peer
		 * has not finished that one), it would never arrive */
		if ((g->peers[to].done_owed || g->peers[to].fail_owed) && !send_done(g, to))
			return;
		struct grp_subhdr sh = {.group = g->id,
					.seq = r->seq,
					.msg = GMSG_DATA,
					.kind = (uint8_t)r->kind,
					.tag = grp_shape(r)};
		const uint8_t *src = (s.send_out ? r->out : r->in) + lo;
		if (!grp_send(n, to, &sh, (uint16_t)r->send_step, (uint32_t)r->send_off,
			      (uint32_t)s.send_len, NULL, 0, src, (uint32_t)len))
			return;
		node_budget_spend(n, (uint32_t)len);
		r->send_off += len;
		r->progress_ns = n->now_ns;
	}
}

static bool pow2(uint32_t w)
{
	return (w & (w - 1)) == 0;
}

/* The schedule, alike at every member: the same kind, size, group size and config. */
static enum keel_group_algo choose_algo(const struct keel_node *n, const struct keel_req *r,
					uint32_t w)
{
	uint64_t bytes = r->count * r->esize;
	bool v = r->counts != NULL;
	if (r->kind == GK_ALLGATHER || r->kind == GK_SPLIT)
		bytes *= w;
	bool large = w > 2 && bytes > n->cfg.rd_max_bytes;
	switch (r->kind) {
	case GK_ALLREDUCE:
		if (large || (r->in == r->out && w > 1 && !pow2(w)))
			return KEEL_GALGO_RING; /* direct would overwrite the input it still sends
						 */
		return pow2(w) && w > 1 && (w >= 8 || r->in == r->out) ? KEEL_GALGO_RD
								       : KEEL_GALGO_DIRECT;
	case GK_ALLGATHER:
	case GK_SPLIT:
		if (large || (v && w > 2 && bytes > n->cfg.rd_max_bytes))
			return KEEL_GALGO_RING;
		return !v && pow2(w) && w >= 8 ? KEEL_GALGO_RD : KEEL_GALGO_DIRECT;
	case GK_BROADCAST:
		return large ? KEEL_GALGO_RING : KEEL_GALGO_DIRECT;
	default:
		return KEEL_GALGO_DIRECT;
	}
}

/* Run `r` over the group's members now. false: it cannot (finished with an error). */
static bool op_begin(struct keel_group *g, struct keel_req *r)
{
	struct keel_node *n = g->node;
	if (r->root_rank != UINT32_MAX) {
		r->root_pos = grp_pos_of(g, r->root_rank);
		if (r->root_pos == UINT32_MAX) {
			grp_finish(g, r, KEEL_EVIEWCHANGED); /* the root's data is gone */
			return false;
		}
	}
	if (grp_kind_indexed(r->kind) && r->w != g->size) {
		grp_finish(g, r, KEEL_EVIEWCHANGED); /* its blocks were laid out for r->w */
		return false;
	}
	if (r->epoch != 0)
		r->restarts++;
	r->w = g->size;
	r->me = g->self_pos;
	r->epoch = n->epoch;
	grp_plan_begin(r, choose_algo(n, r, r->w));
	r->step_count = grp_step_count(r);
	r->send_step = r->recv_step = 0;
	r->send_off = r->recv_off = 0;
	r->progress_ns = n->now_ns;
	r->done_epoch = n->epoch;
	r->done_count = r->w;
	memcpy(r->members, g->ranks, r->w * sizeof(uint32_t));
	for (uint32_t i = 0; i < r->w; i++)
		g->rx_bytes[g->ranks[i]] = g->tx_skip[g->ranks[i]] = 0;
	r->state = GS_RUNNING;
	return true;
}

static void local_done(struct keel_group *g, struct keel_req *r)
{
	r->state = GS_LOCAL_DONE;
	g->local_done = r->seq + 1;
	g->done_kind = (uint8_t)r->kind;
	g->done_shape = grp_shape(r);
	for (uint32_t i = 0; i < g->size; i++)
		if (i != g->self_pos)
			g->peers[g->ranks[i]].done_owed = true;
}

static bool everyone_done(const struct keel_group *g, const struct keel_req *r)
{
	for (uint32_t i = 0; i < g->size; i++)
		if (i != g->self_pos && seq_before(g->peers[g->ranks[i]].done, r->seq + 1))
			return false;
	return true;
}

/* Our SYNC to member `rank`: where our frontier is, what we hold of it and of its data. */
/* The frontier began over other members than the group has now (a view took some). */
static bool began_stale(const struct keel_group *g, const struct keel_req *r)
{
	return r != NULL && r->state != GS_QUEUED && r->w != g->size;
}

/* May the frontier go on over the group's members now? Not once in place it wrote over its
 * input; not a rank-indexed one, or one whose root left, that began over other members. A
 * request not begun yet was made for the members now. */
static bool may_go_on(const struct keel_group *g, const struct keel_req *r)
{
	if (r == NULL || r->state == GS_QUEUED)
		return true;
	bool root_gone = r->root_rank != UINT32_MAX && grp_pos_of(g, r->root_rank) == UINT32_MAX;
	return !r->in_written && !(began_stale(g, r) && (grp_kind_indexed(r->kind) || root_gone));
}

static bool sync_send(struct keel_group *g, uint32_t rank)
{
	const struct gpeer *p = &g->peers[rank];
	struct keel_req *r = frontier(g);
	bool has = r != NULL && r->state == GS_LOCAL_DONE && r->kind != GK_BARRIER;
	bool began = r != NULL && r->state != GS_QUEUED;
	uint32_t result_epoch = has ? r->epoch : 0; /* a barrier's local end is no result */
	uint8_t can = (uint8_t)((may_go_on(g, r) ? 1u : 0u) | (began_stale(g, r) ? 2u : 0u));
	uint64_t rx = began ? g->rx_bytes[rank] : 0;
	uint32_t bits = (g->node->world + 7) / 8;
	uint8_t body[GRP_SYNC_BYTES + KEEL_WORLD_MAX / 8];
	memset(body + GRP_SYNC_BYTES, 0, bits);
	for (uint32_t i = 0; g->member && i < g->size; i++)
		body[GRP_SYNC_BYTES + g->ranks[i] / 8] |= (uint8_t)(1u << (g->ranks[i] % 8));
	memcpy(body, &g->run_seq, 4);
	memcpy(body + 4, &result_epoch, 4);
	body[8] = can;
	memcpy(body + 9, &p->p2p_read, 4);
	memcpy(body + 13, &p->p2p_read_off, 8);
	memcpy(body + 21, &rx, 8);
	for (uint32_t i = 0; i < GRP_HISTORY; i++) {
		int32_t st = g->ended[(g->run_seq - GRP_HISTORY + i) % GRP_HISTORY];
		memcpy(body + 29 + 4 * i, &st, 4);
	}
	struct grp_subhdr sh = {.group = g->id, .msg = GMSG_SYNC};
	return grp_send(g->node, rank, &sh, 0, 0, GRP_SYNC_BYTES + bits, body,
			GRP_SYNC_BYTES + bits, NULL, 0);
}

/* A counter message to `rank` (P2P_DONE, P2P_RTR): false when its window is full. */
static bool send_count(struct keel_group *g, uint32_t rank, enum grp_msg msg, uint32_t count,
		       uint16_t aux)
{
	struct grp_subhdr sh = {.group = g->id, .seq = count, .msg = (uint8_t)msg, .aux = aux};
	return grp_send(g->node, rank, &sh, 0, 0, 0, NULL, 0, NULL, 0);
}

/* Control messages owed to the members: SYNC, DONE, P2P_DONE, P2P_RTR (each cumulative: the
 * latest says all). */
static void send_owed(struct keel_group *g)
{
	for (uint32_t i = 0; i < g->size; i++) {
		uint32_t rank = g->ranks[i];
		struct gpeer *p = &g->peers[rank];
		if (i == g->self_pos)
			continue;
		if (p->sync_owed && sync_send(g, rank))
			p->sync_owed = false;
		if ((p->done_owed || p->fail_owed) && !g->syncing)
			send_done(g, rank);
		if (p->p2p_done_owed &&
		    send_count(g, rank, GMSG_P2P_DONE, p->p2p_read, p->refused_last ? 1 : 0))
			p->p2p_done_owed = false;
		if (p->rtr_owed && !g->syncing &&
		    send_count(g, rank, GMSG_P2P_RTR, p->p2p_rx_posted, 0))
			p->rtr_owed = false;
	}
	for (uint32_t i = 0; i < g->created_size; i++) {
		struct gpeer *p = &g->peers[g->created[i]];
		if (p->out_owed && sync_send(g, g->created[i]))
			p->out_owed = false;
	}
}

/* Every member holds the frontier's result: it is reported (over the members it ran on). */
static void stands(struct keel_group *g, struct keel_req *r)
{
	for (uint32_t i = 0; i < g->size; i++)
		if (i != g->self_pos && g->peers[g->ranks[i]].done == r->seq)
			g->peers[g->ranks[i]].done = r->seq + 1;
	grp_finish(g, r, 0);
}

/* A view change took no member of the running frontier: it goes on where it was. Each
 * member keeps what it received; sends start over, skipping the bytes each member said it
 * has (tx_skip), so nothing is applied twice — in place too. */
static void resume(struct keel_group *g, struct keel_req *r)
{
	r->epoch = g->node->epoch; /* the attempt every member of it now shares */
	r->send_step = 0;
	r->send_off = 0;
	r->progress_ns = g->node->now_ns;
	if (r->state == GS_LOCAL_DONE)
		r->state = GS_RUNNING; /* its sends may still be missing somewhere */
}

/* Every member's SYNC came: decide the frontier alike everywhere, from what they all said.
 * A member that ended it already (in an earlier view's decision) gives its outcome. It stands
 * when every member holds its result from the same attempt. Else, when the view took none of
 * its members, it resumes. Else, when some member began it over the old members and it may
 * not go on over the new ones (rank-indexed, its root left, its input written in place), it
 * fails at every member — also at one that made its request only after the change; else it
 * runs again from the inputs over the survivors. */
static void decide(struct keel_group *g)
{
	struct keel_req *r = frontier(g);
	uint32_t f = g->run_seq;
	bool began = r != NULL && r->state != GS_QUEUED, stale = began_stale(g, r);
	bool all_have = r != NULL && r->state == GS_LOCAL_DONE, can = may_go_on(g, r);
	int32_t ended = 1; /* 1: no member ended it */
	for (uint32_t i = 0; i < g->size; i++) {
		if (i == g->self_pos)
			continue;
		uint32_t rank = g->ranks[i];
		struct gpeer *p = &g->peers[rank];
		const struct grp_sync *s = &p->sync;
		bool same = s->frontier == f;
		bool has = same && began && s->result_epoch != 0 && s->result_epoch == r->epoch;
		/* what its SYNC says, or more: a DONE it sent after deciding may be in already */
		uint32_t done = s->frontier + (began && !stale && has ? 1u : 0u);
		if (seq_before(p->done, done)) {
			p->done = done;
			p->done_kind = began ? (uint8_t)r->kind : 0; /* (its SYNC matched ours) */
			p->done_shape = began ? grp_shape(r) : 0;
		}
		g->tx_skip[rank] = same ? s->rx_bytes : 0;
		if (seq_before(f, s->frontier)) { /* it ended ours: how? */
			uint32_t back = s->frontier - f;
			int32_t st =
			    back <= GRP_HISTORY ? s->ended[GRP_HISTORY - back] : KEEL_EVIEWCHANGED;
			ended = ended == 1 || st != 0 ? st : ended;
			continue;
		}
		all_have = all_have && has;
		can = can && (!same || (s->can_restart & 1u) != 0);
		stale = stale || (same && (s->can_restart & 2u) != 0);
	}
	g->syncing = false;
	if (r == NULL)
		return;
	if (ended != 1 && (ended != 0 || r->state == GS_LOCAL_DONE))
		grp_finish(g, r, ended); /* a success means every member had it, this one too */
	else if (all_have)
		stands(g, r);
	else if (stale && !can)
		grp_finish(g, r, KEEL_EVIEWCHANGED);
	else if (!began)
		return; /* it begins over the members now */
	else if (!stale)
		resume(g, r);
	else {
		g->local_done = f;
		r->state = GS_QUEUED; /* runs again from the inputs over the survivors */
	}
}

static bool all_synced(const struct keel_group *g)
{
	for (uint32_t i = 0; i < g->size; i++)
		if (i != g->self_pos && !g->peers[g->ranks[i]].synced)
			return false;
	return true;
}

/* The frontier's next move; false when it waits. */
static bool advance(struct keel_group *g, struct keel_req *r)
{
	struct keel_node *n = g->node;
	if (n->fatal != 0 || n->noquorum || !g->member) {
		grp_finish(g, r,
			   n->fatal != 0 ? n->fatal
			   : n->noquorum ? KEEL_ENOQUORUM
					 : KEEL_EEXCLUDED);
		return true;
	}
	if (n->now_ns - r->start_ns >= n->op_bound_ns) {
		grp_finish(g, r, -ETIMEDOUT);
		return true;
	}
	if (told_mismatch(g, r)) {
		grp_finish(g, r, KEEL_EMISMATCH); /* a member found it mismatched */
		return true;
	}
	if (r->state == GS_DONE)
		return true; /* told_mismatch found it so itself */
	if (r->state == GS_QUEUED) {
		if (!n->member)
			return false;
		if (!grp_dev_drain(g, r) || !grp_dev_stage_in(g, r))
			return r->state == GS_DONE; /* the device works, or failed */
		if (!op_begin(g, r))
			return true;
	}
	if (r->state == GS_RUNNING) {
		pump_sends(g, r);
		skip_recv(r);
		if (r->send_step < r->step_count || r->recv_step < r->step_count) {
			if (n->now_ns - r->progress_ns < n->cfg.entry_timeout_ns)
				return false;
			grp_finish(g, r, -ETIMEDOUT); /* a member never came */
			return true;
		}
		if (!grp_dev_copy_out(g, r))
			return r->state == GS_DONE;
		local_done(g, r);
	}
	if (!everyone_done(g, r))
		return false;
	grp_finish(g, r, 0);
	return true;
}

void grp_advance(struct keel_group *g)
{
	send_owed(g);
	if (g->syncing && all_synced(g))
		decide(g);
	struct keel_req *f = frontier(g);
	if (g->syncing && f != NULL && g->node->now_ns - f->start_ns >= g->node->op_bound_ns)
		grp_finish(g, f, -ETIMEDOUT); /* a SYNC that never came: the bound holds */
	for (uint32_t guard = 0; !g->syncing && guard < g->ops_max; guard++) {
		struct keel_req *r = frontier(g);
		if (r == NULL || !advance(g, r))
			break;
	}
	grp_p2p_progress(g);
	send_owed(g);
}

void grp_progress_all(struct keel_node *n)
{
	for (struct keel_group *g = n->groups; g != NULL; g = g->next)
		grp_advance(g);
}

uint64_t grp_next_deadline_all(const struct keel_node *n)
{
	uint64_t dl = UINT64_MAX;
	for (struct keel_group *g = n->groups; g != NULL; g = g->next) {
		struct keel_req *r = frontier(g);
		if (r != NULL && r->state != GS_QUEUED) {
			uint64_t a = r->progress_ns + n->cfg.entry_timeout_ns;
			uint64_t b = r->start_ns + n->op_bound_ns;
			dl = a < dl ? a : dl;
			dl = b < dl ? b : dl;
		}
		for (uint32_t i = 0; i < g->ops_max; i++)
			if (g->p2p[i].state == GS_RUNNING &&
			    g->p2p[i].start_ns + n->op_bound_ns < dl)
				dl = g->p2p[i].start_ns + n->op_bound_ns;
	}
	return dl;
}

bool grp_idle_all(const struct keel_node *n)
{
	for (const struct keel_group *g = n->groups; g != NULL; g = g->next) {
		if (g->run_seq != g->next_seq || grp_p2p_pending(g))
			return false;
		for (uint32_t i = 0; i < g->size; i++) {
			const struct gpeer *p = &g->peers[g->ranks[i]];
			if (p->done_owed || p->sync_owed || p->p2p_done_owed || p->rtr_owed ||
			    p->fail_owed)
				return false;
		}
	}
	return true;
}

/* Is the process the view has as `rank` the one the group was made with? A group made
 * before this node heard a peer's incarnation (0) takes the first one a view gives it. */
static bool same_life(struct keel_group *g, uint32_t rank)
{
	uint32_t inc = g->node->view.inc[rank];
	if (g->peers[rank].inc == 0)
		g->peers[rank].inc = inc;
	return inc == g->peers[rank].inc;
}

/* The group's members after a view: the old ones still in it, in the same life. */
static void follow_view(struct keel_group *g)
{
	struct keel_node *n = g->node;
	uint32_t kept = 0;
	for (uint32_t i = 0; i < g->size; i++) {
		uint32_t rank = g->ranks[i];
		if (view_has(&n->view, rank) && same_life(g, rank))
			g->ranks[kept++] = rank;
	}
	g->size = kept;
	g->self_pos = grp_pos_of(g, n->self);
	g->member = n->member && g->self_pos != UINT32_MAX;
	g->epoch = n->view.epoch;
}

/* A rank the group dropped that is in the view again in the same life (left out while
 * paused, then let back in) may have missed the view that dropped it: our SYNC tells it it
 * is out. */
static void mark_out_owed(struct keel_group *g)
{
	struct keel_node *n = g->node;
	for (uint32_t i = 0; g->member && i < g->created_size; i++) {
		uint32_t rank = g->created[i];
		g->peers[rank].out_owed = rank != n->self && grp_pos_of(g, rank) == UINT32_MAX &&
					  view_has(&n->view, rank) && same_life(g, rank);
	}
}

void grp_on_install_all(struct keel_node *n)
{
	for (struct keel_group *g = n->groups; g != NULL; g = g->next) {
		if (!g->member)
			continue;
		follow_view(g);
		g->syncing = g->member;
		for (uint32_t i = 0; i < g->size; i++) {
			struct gpeer *p = &g->peers[g->ranks[i]];
			p->synced = false;
			p->sync_owed = g->member && i != g->self_pos;
			p->done_owed = false;
			/* DONEs of the old epoch count no more: each had reported what we did */
			p->done = g->run_seq;
			p->rtr_owed = p->p2p_rx_posted != 0; /* ours may have been cut off */
		}
		mark_out_owed(g);
		grp_p2p_on_view(g);
		grp_advance(g);
	}
}

static struct keel_group *group_by_id(struct keel_node *n, uint64_t id)
{
	for (struct keel_group *g = n->groups; g != NULL; g = g->next)
		if (g->id == id)
			return g;
	return NULL;
}

static bool freed_here(const struct keel_node *n, uint64_t id)
{
	for (uint32_t i = 0; i < KEEL_GROUPS_FREED_KEPT; i++)
		if (n->groups_freed[i] == id && id != 0)
			return true;
	return false;
}

/* A member's SYNC lists its members: a rank it dropped is dropped here too (this node
 * skipped the view that left it out), and when this node is not among them, it is out. */
static void sync_members(struct keel_group *g, const uint8_t *bits)
{
	struct keel_node *n = g->node;
	if (((bits[n->self / 8] >> (n->self % 8)) & 1u) == 0) {
		g->member = false; /* its operations end with KEEL_EEXCLUDED */
		g->syncing = false;
		return;
	}
	uint32_t kept = 0;
	for (uint32_t i = 0; i < g->size; i++)
		if ((bits[g->ranks[i] / 8] >> (g->ranks[i] % 8)) & 1u)
			g->ranks[kept++] = g->ranks[i];
	if (kept == g->size)
		return;
	g->size = kept;
	g->self_pos = grp_pos_of(g, n->self);
	grp_p2p_on_view(g);
}

static void on_sync(struct keel_group *g, uint32_t peer, const uint8_t *b)
{
	struct gpeer *p = &g->peers[peer];
	memcpy(&p->sync.frontier, b, 4);
	memcpy(&p->sync.result_epoch, b + 4, 4);
	p->sync.can_restart = b[8];
	memcpy(&p->sync.p2p_read, b + 9, 4);
	memcpy(&p->sync.p2p_off, b + 13, 8);
	memcpy(&p->sync.rx_bytes, b + 21, 8);
	memcpy(p->sync.ended, b + 29, sizeof(p->sync.ended));
	p->synced = true;
	grp_p2p_on_sync(g, peer, &p->sync);
	sync_members(g, b + GRP_SYNC_BYTES);
}

/* A member's SYNC; one that came while this member was not syncing saw a view change this
 * one did not wait on (it made the group before this view, this member after): answer it. */
static void take_sync(struct keel_group *g, uint32_t peer, const uint8_t *b)
{
	if (!g->syncing) {
		g->syncing = true;
		for (uint32_t i = 0; i < g->size; i++)
			g->peers[g->ranks[i]].sync_owed = i != g->self_pos;
	}
	on_sync(g, peer, b);
}

/* A SYNC for a group not made here yet: kept (false: no room, hold it in the window). */
static bool keep_early_sync(struct keel_node *n, uint64_t id, uint32_t peer, const uint8_t *b,
			    uint32_t len)
{
	for (uint32_t i = 0; i < KEEL_GROUP_EARLY_SYNCS; i++) {
		struct grp_early_sync *e = &n->early_syncs[i];
		if (e->group != 0 && e->epoch == n->epoch)
			continue;
		e->group = id;
		e->epoch = n->epoch;
		e->peer = peer;
		memcpy(e->body, b, len);
		return true;
	}
	return false;
}

void grp_take_early_syncs(struct keel_group *g)
{
	struct keel_node *n = g->node;
	for (uint32_t i = 0; i < KEEL_GROUP_EARLY_SYNCS; i++) {
		struct grp_early_sync *e = &n->early_syncs[i];
		if (e->group != g->id)
			continue;
		if (e->epoch == n->epoch && grp_pos_of(g, e->peer) != UINT32_MAX)
			take_sync(g, e->peer, e->body);
		e->group = 0;
	}
}

/* A DATA fragment for the frontier collective. false: not yet (hold it). */
static bool on_data(struct keel_group *g, uint32_t peer, const struct wire_header *h,
		    const struct grp_subhdr *sh, const uint8_t *data, uint32_t len)
{
	struct keel_node *n = g->node;
	if (seq_before(sh->seq, g->run_seq)) {
		n->ctr.drop_stale++;
		return true;
	}
	struct keel_req *r = frontier(g);
	if (g->syncing || r == NULL || r->seq != sh->seq || r->state != GS_RUNNING)
		return false;
	skip_recv(r);
	if (r->recv_step == r->step_count) {
		n->ctr.drop_protocol++;
		return true;
	}
	struct gstep s;
	grp_step(r, r->recv_step, &s);
	uint32_t pos = grp_pos_of(g, peer);
	bool same_op = sh->kind == r->kind && sh->tag == grp_shape(r);
	if (same_op && (pos == UINT32_MAX || (int32_t)pos != s.recv_pos))
		return false; /* a later step's: wait for ours */
	if (!same_op || h->total_len - GRP_P2P_SUBHDR_BYTES != s.recv_len) {
		mismatch(g, r); /* another operation, type, root or size: the programs disagree */
		return true;
	}
	if (h->offset != r->recv_off || len % r->esize != 0 || r->recv_off + len > s.recv_len) {
		n->ctr.drop_protocol++;
		return true;
	}
	if (s.recv_after_send && (r->send_step < r->recv_step || (r->send_step == r->recv_step &&
								  r->send_off < r->recv_off + len)))
		return false; /* these bytes still go out from here first */
	apply(r, &s, r->recv_off, data, len);
	g->rx_bytes[peer] += len;
	r->recv_off += len;
	r->progress_ns = n->now_ns;
	skip_recv(r);
	return true; /* the poll's progress step sends what this made ready */
}

static bool decode_subhdr(const struct wire_header *h, const uint8_t *payload,
			  struct grp_subhdr *sh)
{
	if (h->payload_len < GRP_SUBHDR_BYTES || h->total_len < GRP_SUBHDR_BYTES)
		return false;
	memcpy(&sh->group, payload, 8);
	memcpy(&sh->seq, payload + 8, 4);
	sh->msg = payload[12];
	sh->kind = payload[13];
	memcpy(&sh->aux, payload + 14, 2);
	sh->tag = 0;
	if (grp_subhdr_len(sh->msg) > GRP_SUBHDR_BYTES) {
		if (h->payload_len < GRP_P2P_SUBHDR_BYTES || h->total_len < GRP_P2P_SUBHDR_BYTES)
			return false;
		memcpy(&sh->tag, payload + 16, 4);
	}
	return sh->msg >= GMSG_DATA && sh->msg <= GMSG_P2P_RTR;
}

bool grp_deliver(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		 const uint8_t *payload)
{
	struct grp_subhdr sh;
	if (!decode_subhdr(h, payload, &sh)) {
		n->ctr.drop_protocol++;
		return true;
	}
	struct keel_group *g = group_by_id(n, sh.group);
	if (g == NULL && sh.msg == GMSG_SYNC && !freed_here(n, sh.group) &&
	    h->payload_len == GRP_SUBHDR_BYTES + GRP_SYNC_BYTES + (n->world + 7) / 8 &&
	    keep_early_sync(n, sh.group, peer, payload + GRP_SUBHDR_BYTES,
			    h->payload_len - GRP_SUBHDR_BYTES))
		return true;
	if (g == NULL) /* not created here yet (it waits), or gone (a late message) */
		return sh.msg == GMSG_DONE || sh.msg == GMSG_FAIL || sh.msg == GMSG_P2P_DONE ||
		       sh.msg == GMSG_P2P_RTR || freed_here(n, sh.group);
	if (!g->member)
		return true; /* this node is out of it: nothing for it any more */
	uint32_t pos = grp_pos_of(g, peer);
	if (pos == UINT32_MAX) {
		n->ctr.drop_protocol++; /* not a member (any more) */
		return true;
	}
	uint32_t hdr = grp_subhdr_len(sh.msg);
	const uint8_t *data = payload + hdr;
	uint32_t len = h->payload_len - hdr;
	switch (sh.msg) {
	case GMSG_DATA:
		return on_data(g, peer, h, &sh, data, len);
	case GMSG_DONE:
		if (seq_before(g->peers[peer].done, sh.seq)) {
			g->peers[peer].done = sh.seq;
			g->peers[peer].done_kind = sh.kind;
			g->peers[peer].done_shape = sh.tag;
		}
		return true;
	case GMSG_FAIL:
		g->peers[peer].failed_at = sh.seq;
		return true;
	case GMSG_SYNC:
		if (len != GRP_SYNC_BYTES + (n->world + 7) / 8) {
			n->ctr.drop_protocol++;
			return true;
		}
		take_sync(g, peer, data);
		return true;
	case GMSG_P2P_DONE:
		grp_p2p_on_done(g, peer, sh.seq, sh.aux == 1);
		return true;
	case GMSG_P2P_RTR:
		if (seq_before(g->peers[peer].p2p_rtr, sh.seq))
			g->peers[peer].p2p_rtr = sh.seq;
		return true;
	default:
		return grp_p2p_deliver(g, peer, h, &sh, data, len);
	}
}
