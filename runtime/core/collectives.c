/* The collective engine: operations run one after another over the installed view, each as a
 * list of steps (coll_steps.c) through which two cursors move, send and receive, bounded by
 * the reliable window; every received fragment is reduced or copied at once and forwarded.
 * A result is reported only when every member has it, so a view change finds the running
 * collective either complete everywhere or nowhere: it then finishes, or restarts on the new
 * view from the caller's untouched input. Small AllReduces (keel_config.eager_result_bytes) are
 * reported as soon as this node has the result, and a copy is kept: a view change that finds
 * one at some members only brings it to the others in the view (membership.c), so it stands
 * at every member just the same. */
#include <string.h>

#include "assert_int.h"
#include "keel/device.h"
#include "keel/limits.h"
#include "node_int.h"
#include "reduce_int.h"

/* The edges an operation's state may take, one bit per target state:
 *   FREE -> QUEUED                       op_alloc: the caller started it
 *   QUEUED -> RUNNING                    op_begin: over the installed view
 *   RUNNING -> LOCAL_DONE                op_local_done: this node has the result
 *   RUNNING, LOCAL_DONE -> QUEUED        coll_on_install: restarted on the new view
 *   QUEUED, RUNNING, LOCAL_DONE -> DONE  op_finish: its result stands (RUNNING: the view
 *                                        brought it), or it failed
 *   DONE -> FREE                         keel_op_test_info: the caller took its status
 * Any other edge is an engine bug: a result reported twice, a released handle run again. */
static const uint8_t op_edges[OP_DONE + 1] = {
    [OP_FREE] = 1u << OP_QUEUED,
    [OP_QUEUED] = 1u << OP_RUNNING | 1u << OP_DONE,
    [OP_RUNNING] = 1u << OP_LOCAL_DONE | 1u << OP_QUEUED | 1u << OP_DONE,
    [OP_LOCAL_DONE] = 1u << OP_QUEUED | 1u << OP_DONE,
    [OP_DONE] = 1u << OP_FREE,
};
_Static_assert(OP_DONE < 8, "op_edges holds one bit per state");
_Static_assert(OP_FREE == 0, "op_alloc's memset leaves a slot FREE");

static void op_set_state(struct keel_op *op, enum op_state to)
{
	KEEL_ASSERT((unsigned)op->state <= OP_DONE && (unsigned)to <= OP_DONE);
	KEEL_ASSERT((op_edges[op->state] >> to) & 1u);
	op->state = to;
}

/* Step indices travel as 16 bits: the longest plan (ring AllReduce, 2 x (world - 1) steps;
 * the hierarchy's 2 x (local - 1) + 2 x (hosts - 1) is no longer) must fit. */
_Static_assert(2 * (KEEL_WORLD_MAX - 1) <= UINT16_MAX, "step numbers fit the wire's 16 bits");

static uint32_t wire_id(const struct keel_node *n, const struct keel_op *op)
{
	/* Only operations of this epoch that the caller started get a wire id. */
	KEEL_ASSERT_DEBUG(!seq_before(op->id, n->op_base));
	KEEL_ASSERT_DEBUG(seq_before(op->id, n->op_next_id));
	return op->id - n->op_base;
}

static uint32_t next_slot(const struct keel_node *n, uint32_t slot)
{
	KEEL_ASSERT_DEBUG(slot < n->ops_max);
	return slot + 1 == n->ops_max ? 0 : slot + 1;
}

static struct keel_op *frontier_op(struct keel_node *n)
{
	KEEL_ASSERT_DEBUG(n->ops_max > 0);
	/* Operations finish in order, so those in flight are op_run_id..op_next_id - 1, each in
	 * its own slot: never more than ops_max. */
	KEEL_ASSERT_DEBUG(n->op_next_id - n->op_run_id <= n->ops_max);
	KEEL_ASSERT_DEBUG(n->op_run_slot < n->ops_max);
	struct keel_op *op = &n->ops[n->op_run_slot];
	if (op->id != n->op_run_id || op->state == OP_FREE || op->state == OP_DONE)
		return NULL;
	return op;
}

static int32_t rank_of(const struct keel_node *n, int32_t pos)
{
	KEEL_ASSERT_DEBUG(pos >= -1 && (pos < 0 || (uint32_t)pos < n->view.count));
	int32_t rank = pos < 0 ? -1 : (int32_t)n->rank_at[pos];
	/* A step's peer is a member of the installed view. */
	KEEL_ASSERT_DEBUG(rank < 0 ||
			  ((uint32_t)rank < n->world && view_has(&n->view, (uint32_t)rank)));
	return rank;
}

/* The step in ranks rather than view positions. */
static void map_step(const struct keel_node *n, const struct keel_op *op, uint32_t t,
		     struct step *s)
{
	/* Positions are those of the view the operation began on: it must be the installed one
	 * (a view change sends it back to QUEUED before anything maps its steps again). */
	KEEL_ASSERT_DEBUG(op->state == OP_RUNNING && op->world == n->view.count);
	coll_step(op, t, s);
	s->send_peer = rank_of(n, s->send_peer);
	s->recv_peer = rank_of(n, s->recv_peer);
	KEEL_ASSERT_DEBUG(s->send_peer != (int32_t)n->self && s->recv_peer != (int32_t)n->self);
}

/* map_step, remembered: every poll asks for the send step, the receive step and the one
 * before the send step, and mapping one was a tenth of a small AllReduce's instructions.
 * Two entries by parity were not enough: recursive doubling's empty fold-in and fold-out
 * steps (0 and k + 1) are walked past on every poll and took the slots of the exchanges. */
static void op_step(const struct keel_node *n, struct keel_op *op, uint32_t t, struct step *s)
{
	uint32_t k = t & (STEP_MEMO - 1u);
	if (op->step_memo_t[k] == t + 1) {
		*s = op->step_memo[k];
#ifdef KEEL_DEBUG
		struct step fresh;
		map_step(n, op, t, &fresh);
		KEEL_ASSERT(memcmp(&fresh, s, sizeof(fresh)) == 0);
#endif
		return;
	}
	map_step(n, op, t, s);
	op->step_memo[k] = *s;
	op->step_memo_t[k] = t + 1;
}

static bool send_passed(const struct keel_op *op, uint32_t t, uint64_t end)
{
	KEEL_ASSERT_DEBUG(t < op->step_count);
	KEEL_ASSERT_DEBUG(end <= op->bytes);
	return op->send_step > t || (op->send_step == t && op->send_off >= end);
}

/* May step t send bytes [lo, hi) of the output? They hold what earlier steps received: ready
 * once every earlier receive is complete (and applied on the device) or, when step t - 1 receives a
 * region that contains them (the pipelined ring, recursive doubling, a slice cut into parts), as
 * soon as its receive has passed them. */
static bool out_ready(const struct keel_node *n, struct keel_op *op, uint32_t t, uint64_t lo,
		      uint64_t hi)
{
	/* only a later step sends from the output */
	KEEL_ASSERT(t > 0 && t < op->step_count && lo < hi && hi <= op->bytes);
	/* On a device the bytes are ready once the device has applied them (coll_device.c). */
	uint32_t applied = coll_dev_applied_step(op);
	if (applied >= t)
		return true;
	if (applied + 1 < t)
		return false;
	struct step p;
	op_step(n, op, t - 1, &p);
	if (p.recv_peer < 0 || lo < p.recv_off || hi > p.recv_off + p.recv_len)
		return false;
	return coll_dev_applied_passed(op, t - 1, hi - p.recv_off);
}

static void skip_empty_recv(const struct keel_node *n, struct keel_op *op)
{
	struct step s;
	KEEL_ASSERT(op->recv_step <= op->step_count);
	/* Called on every poll and fragment: the step already found waiting for data is not
	 * mapped again (op_step was a tenth of a small AllReduce's instructions). */
	if (op->recv_off < op->recv_step_len) {
#ifdef KEEL_DEBUG
		op_step(n, op, op->recv_step, &s);
		KEEL_ASSERT(s.recv_peer >= 0 && s.recv_len == op->recv_step_len);
#endif
		return;
	}
	while (op->recv_step < op->step_count) {
		op_step(n, op, op->recv_step, &s);
		/* coll_deliver accepts a fragment only inside the step's region */
		KEEL_ASSERT(op->recv_off <= s.recv_len);
		if (s.recv_peer >= 0 && op->recv_off < s.recv_len) {
			op->recv_step_len = s.recv_len;
			return;
		}
		op->recv_step++;
		op->recv_off = 0;
	}
	op->recv_step_len = 0;
}

/* May step t's datagrams borrow the bytes they carry (rel_send_borrowed) instead of copying
 * them into the window? Where those bytes stay as they are until the operation ends: the
 * caller's input of an out-of-place AllReduce (keel never writes it), a ring's all-gather
 * (sums that are final, never written again) and what a broadcast passes on. And a host
 * ring's reduce-scatter: its partial sums are written once more, by the all-gather's copy of
 * the final sums, and coll_deliver copies in whatever still borrows them first
 * (rel_borrowed_copy_in_range; by then the next rank has used them, so usually nothing).
 * Recursive doubling and the hierarchy write their output at every step; compressed
 * fragments have their own buffers. On device buffers the stage's input copy is staged once
 * and never written again (a restart starts from it), and its mirror is the output, which
 * the device writes at its own pace: its partial sums are copied. */
static bool send_stable(const struct keel_op *op, uint32_t t, const struct step *s)
{
	if (op->enc_tx != WIRE_ENC_RAW)
		return false;
	if (op->kind == OPK_BROADCAST)
		return true;
	bool ring = op->algo == KEEL_ALGO_RING;
	/* Out of place, the input is never written, whatever the algorithm; a ring in place
	 * sends it from the restart copy (pump_sends), the input as it was. */
	if (!s->send_from_out)
		return op->in != op->out || (ring && op->has_copy);
	return ring && (t + 1 >= op->world || !op->dev.on);
}

/* Bytes send_stable lets a step borrow that the operation writes again: a host ring's partial
 * sums (its reduce-scatter after the first step), overwritten by the all-gather's final sums. */
static bool send_rewritten(const struct keel_op *op, uint32_t t, const struct step *s)
{
	return s->send_from_out && op->algo == KEEL_ALGO_RING && t + 1 < op->world;
}

/* Queue as many fragments as the window and the data dependencies allow. */
static void pump_sends(struct keel_node *n, struct keel_op *op)
{
	struct step s;
	skip_empty_recv(n, op); /* out_ready reads the receive cursor */
	while (op->send_step < op->step_count) {
		op_step(n, op, op->send_step, &s);
		if (s.send_peer < 0 || op->send_off >= s.send_len) {
			op->send_step++;
			op->send_off = 0;
			continue;
		}
		uint64_t len = s.send_len - op->send_off;
		if (len > op->frag_bytes && op->enc_tx == WIRE_ENC_RAW)
			len = op->frag_bytes; /* compressed, cmp_send sizes its fragment */
		KEEL_ASSERT(len > 0 && len % op->elem_size == 0);
		/* The fragment is read from inside the caller's buffer... */
		KEEL_ASSERT(s.send_off + op->send_off + len <= op->bytes);
		/* ...and only a later step sends from the output, so send_step - 1 is a step. */
		KEEL_ASSERT(!s.send_from_out || op->send_step > 0);
		/* Data this step sends from the output is what earlier steps received. */
		uint64_t lo = s.send_off + op->send_off;
		if (s.send_from_out && !out_ready(n, op, op->send_step, lo, lo + len))
			return;
		if (!s.send_from_out && !coll_dev_input_ready(op, lo, lo + len))
			return; /* not yet staged from the device */
		if (!rel_can_send(n, (uint32_t)s.send_peer) || n->budget_bytes == 0)
			return;
		struct wire_header h;
		node_header_init(n, &h, WIRE_DATA, (uint32_t)s.send_peer);
		h.op_id = wire_id(n, op);
		h.step = (uint16_t)op->send_step;
		h.offset = (uint32_t)op->send_off;
		h.total_len = (uint32_t)s.send_len;
		/* A ring in place overwrites its input as results come in; the restart copy
		 * keeps it as it was, so step 0's datagrams may borrow from there. */
		const uint8_t *in =
		    op->algo == KEEL_ALGO_RING && op->has_copy ? n->restart_copy : op->in;
		const uint8_t *src = (s.send_from_out ? op->out : in) + s.send_off + op->send_off;
		uint64_t wire = len;
		const uint8_t *dev_src =
		    op->dev.on ? coll_dev_direct_src(op, s.send_from_out) : NULL;
		if (dev_src != NULL) { /* the NIC reads it from device memory: nothing staged */
			/* In place, a step's data can come before the receiver may write that
			 * region (it sends from it first), and it must wait there: in host
			 * memory, where a window holds it, not in the receiver's device area,
			 * whose payloads are sent again rather than held. */
			bool host_landing = op->dev.d_in == op->dev.d_out;
			int rc = rel_send_device(n, (uint32_t)s.send_peer, &h,
						 dev_src + s.send_off + op->send_off, (uint32_t)len,
						 host_landing);
			KEEL_ASSERT(rc == 0);
		} else if (op->enc_tx != WIRE_ENC_RAW) {
			len = cmp_send(n, op, &s, (uint32_t)s.send_peer, &h, src, len);
			wire = h.payload_len;
		} else if (send_stable(op, op->send_step, &s) &&
			   (node_peer_caps(n, (uint32_t)s.send_peer) & KEEL_CAP_GATHER) != 0) {
			int rc = rel_send_borrowed(n, (uint32_t)s.send_peer, &h, src, (uint32_t)len,
						   send_rewritten(op, op->send_step, &s));
			KEEL_ASSERT(rc == 0);
		} else {
			int rc = rel_send(n, (uint32_t)s.send_peer, &h, src, (uint32_t)len);
			KEEL_ASSERT(rc == 0);
		}
		cmp_note_sent(n, (uint32_t)s.send_peer, op->id, len, wire);
		node_budget_spend(n, (uint32_t)wire);
		op->send_off += len;
		KEEL_ASSERT(op->send_off <= s.send_len);
		op->progress_ns = n->now_ns;
	}
}

static void op_finish(struct keel_node *n, struct keel_op *op, int status)
{
	/* Operations end in order: only the frontier, which the caller started. */
	KEEL_ASSERT(op->id == n->op_run_id && op->id != n->op_next_id);
	KEEL_ASSERT(status <= 0);
	op_set_state(op, OP_DONE);
	/* The caller may write or free its buffers once told: nothing in flight may still
	 * point into them (usually nothing is left; a failure can leave some). */
	rel_borrowed_copy_in(n);
	coll_dev_stop(op, true); /* work it queued drains before keel_op_test reports it */
	cmp_finish(op, status);
	op->status = status;
	if (status == 0)
		n->ctr.ops_completed++;
	else
		n->ctr.ops_failed++;
	n->op_run_id++;
	n->op_run_slot = next_slot(n, n->op_run_slot);
	uint64_t took = n->now_ns > op->queued_ns ? n->now_ns - op->queued_ns : 0;
	if (status == 0 && op->kind == OPK_ALLREDUCE)
		metrics_observe(n, KEEL_HIST_ALLREDUCE + keel_size_class(op->bytes), took);
	struct keel_event ev = {.kind = KEEL_EV_COLL_END,
				.t_ns = op->queued_ns,
				.dur_ns = took,
				.bytes = op->bytes,
				.peer = op->kind == OPK_BROADCAST ? op->root : UINT32_MAX,
				.op = op->id,
				.algo = op->began ? (uint32_t)op->algo : (uint32_t)KEEL_ALGO_AUTO,
				.restarts = op->restarts,
				.status = status};
	node_event(n, &ev);
}

/* AUTO: recursive doubling for small messages (latency), the hierarchy for large ones when
 * the view suits it (the bytes crossing hosts shrink by the host's member count), else the
 * ring. HIER on a view that does not suit it runs as AUTO's flat choice. Every member sees
 * the same view and config, so every member chooses alike. */
static enum keel_algo choose_algo(struct keel_node *n, const struct keel_op *op)
{
	KEEL_ASSERT(op->kind == OPK_ALLREDUCE);
	enum keel_algo algo = n->cfg.algo;
	bool small = op->bytes <= n->cfg.rd_max_bytes || op->count < n->view.count;
	if (algo == KEEL_ALGO_HIER && !coll_hier_view_ok(n))
		algo = KEEL_ALGO_AUTO;
	else if (algo == KEEL_ALGO_AUTO && !small && coll_hier_view_ok(n))
		algo = KEEL_ALGO_HIER;
	if (algo == KEEL_ALGO_AUTO)
		algo = small ? KEEL_ALGO_RD : KEEL_ALGO_RING;
	/* config_valid saw to the range */
	KEEL_ASSERT(algo == KEEL_ALGO_RD || algo == KEEL_ALGO_RING || algo == KEEL_ALGO_HIER);
	return algo;
}

/* Set an operation running over the installed view: the first time, or again after a view
 * change (then from the caller's input, restored from the restart copy when in place).
 * Returns false when it cannot run (it was finished with an error). */
static bool op_begin(struct keel_node *n, struct keel_op *op)
{
	/* advance begins only a QUEUED operation, and only on a view this node is in. */
	KEEL_ASSERT(op->state == OP_QUEUED && n->member);
	if (op->kind == OPK_BROADCAST && !view_has(&n->view, op->root)) {
		/* The root left the view: its data is gone. Every member sees the same view, so
		 * every member fails this broadcast alike; the caller runs it again from a live
		 * root (a restart cannot: any other root would send different bytes). */
		op_finish(n, op, KEEL_EVIEWCHANGED);
		return false;
	}
	bool in_place = op->in == op->out && op->kind == OPK_ALLREDUCE && op->bytes != 0;
	if (!op->began) {
		op->began = true;
		op->start_ns = n->now_ns;
		if (in_place && op->bytes <= n->cfg.restart_copy_bytes) {
			memcpy(n->restart_copy, op->in, op->bytes);
			op->has_copy = true;
		}
	} else {
		op->restarts++;
		n->ctr.ops_restarted++;
		rel_borrowed_copy_in(n); /* the output is written again below and by the steps */
		if (in_place && !op->has_copy) {
			op_finish(n, op, KEEL_EVIEWCHANGED); /* its input is gone */
			return false;
		}
		if (in_place)
			memcpy(op->out, n->restart_copy, op->bytes);
	}
	op_set_state(op, OP_RUNNING);
	op->progress_ns = n->now_ns;
	/* The view its result will be computed over (a view change restarts it, or brings the
	 * result computed over this same view). */
	op->done_epoch = n->view.epoch;
	op->done_count = n->view.count;
	memcpy(op->done_bits, n->view.bits, n->world / 8 + 1);
	op->world = n->view.count;
	op->self_pos = n->pos_of[n->self];
	KEEL_ASSERT(op->self_pos < op->world);
	/* pump_sends cuts whole elements, at least one per fragment */
	KEEL_ASSERT(op->frag_bytes >= op->elem_size && op->frag_bytes % op->elem_size == 0);
	KEEL_ASSERT(!op->has_copy || op->bytes <= n->cfg.restart_copy_bytes);
	op->root_pos = op->kind == OPK_BROADCAST ? n->pos_of[op->root] : 0;
	KEEL_ASSERT(op->root_pos < op->world);
	op->algo = op->kind == OPK_ALLREDUCE ? choose_algo(n, op) : KEEL_ALGO_RING;
	if (op->algo == KEEL_ALGO_HIER)
		coll_hier_begin(n, op);
	op->step_count = coll_step_count(op);
	if (op->grad) /* the ring sends to the next position */
		cmp_begin(n, op, (uint32_t)rank_of(n, (int32_t)((op->self_pos + 1) % op->world)));
	op->send_step = op->recv_step = 0;
	op->send_off = op->recv_off = 0;
	op->recv_step_len = 0;
	memset(op->step_memo_t, 0, sizeof(op->step_memo_t));
	if (op->dev.on)
		coll_dev_begin(n, op); /* a view of one copies on the device */
	else if (op->world == 1 && op->bytes != 0 && op->in != op->out)
		memcpy(op->out, op->in, op->bytes);
	struct keel_event ev = {.kind = KEEL_EV_COLL_BEGIN,
				.bytes = op->bytes,
				.peer = op->kind == OPK_BROADCAST ? op->root : UINT32_MAX,
				.op = op->id,
				.algo = (uint32_t)op->algo,
				.restarts = op->restarts};
	node_event(n, &ev);
	return true;
}

/* May this result be reported before every member has it? An AllReduce on host buffers
 * small enough to keep, with peers, and only while no view change is being decided (this
 * node promised in a round: its promise said which results it holds, and the new view says
 * which stand). Every member of its view had started it, so none can be more than this one
 * collective behind the others. */
static bool may_keep(const struct keel_node *n, const struct keel_op *op)
{
	return op->kind == OPK_ALLREDUCE && !op->dev.on && !op->grad && op->bytes != 0 &&
	       op->bytes <= n->kept_cap && op->world > 1 && n->acc_promised == 0;
}

/* Steps acks_ride looks through for the members a collective sends to: recursive doubling
 * has log2(world) of them; a ring sends to one member at every step, its first. */
#define RIDE_STEPS_MAX 16u

static bool listed(const int32_t *list, uint32_t count, uint32_t peer)
{
	for (uint32_t i = 0; i < count; i++)
		if (list[i] == (int32_t)peer)
			return true;
	return false;
}

/* Up to `max` distinct members the running `op` (the next one of its shape, as a training step
 * calls them) sends data to, in step order, into to[]: the first from anywhere in its plan,
 * the others from its first RIDE_STEPS_MAX steps. Returns how many. */
static uint32_t send_peers(const struct keel_node *n, struct keel_op *op, int32_t *to, uint32_t max)
{
	KEEL_ASSERT(op->state == OP_RUNNING && max <= RIDE_STEPS_MAX);
	uint32_t count = 0;
	for (uint32_t t = 0; t < op->step_count && count < max; t++) {
		if (count > 0 && t >= RIDE_STEPS_MAX)
			break;
		struct step s;
		op_step(n, op, t, &s);
		if (s.send_peer >= 0 && !listed(to, count, (uint32_t)s.send_peer))
			to[count++] = s.send_peer;
	}
	return count;
}

/* This node has the result. Kept (may_keep): a copy for members that lack it, reported now.
 * Else every member is told at once (an ack carries the count), and it waits for theirs. */
static bool op_local_done(struct keel_node *n, struct keel_op *op)
{
	bool keep = may_keep(n, op);
	/* whose data will carry our acks: the first member the next collective sends to, and
	 * with acks_ride the others too (listed now: only a running operation maps its steps) */
	int32_t rides[RIDE_STEPS_MAX];
	uint32_t ride_count =
	    keep ? send_peers(n, op, rides, n->cfg.acks_ride ? RIDE_STEPS_MAX : 1) : 0;
	op_set_state(op, OP_LOCAL_DONE);
	KEEL_ASSERT(op->send_step == op->step_count && op->recv_step == op->step_count);
	/* Collectives of this epoch that this node has the result of all come before it. */
	KEEL_ASSERT(n->ops_done_local <= wire_id(n, op));
	/* the result's view is the one it began on, and includes this node */
	KEEL_ASSERT(op->done_epoch == n->view.epoch && view_has(&n->view, n->self));
	n->ops_done_local = wire_id(n, op) + 1;
	if (keep) {
		memcpy(n->kept, op->out, (size_t)op->bytes);
		n->kept_len = (uint32_t)op->bytes;
		n->kept_epoch = n->view.epoch;
		n->kept_done = n->ops_done_local;
		/* The members hear the count on our next datagram to them. Acks we owe go now,
		 * except to the member the next collective (this call again, as a training step
		 * makes it) sends to first, whose data carries it: left to the ack timer, they
		 * would wake ranks that wait for a core (4 ranks on 2 cores over shared memory, 1
		 * KiB: 1.5-2x slower), and sent to every member, they cost a send per collective
		 * (2 ranks over UDP, 4 B: 10.8 us against 6.6). With acks_ride (ranks with cores
		 * to spare) the members it sends to later wait for its data too. */
		for (uint32_t r = 0; r < n->world; r++)
			if (r != n->self && view_has(&n->view, r) && !listed(rides, ride_count, r))
				rel_ack_owed_now(n, r);
		return true;
	}
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && view_has(&n->view, r))
			rel_ack_soon(n, r);
	return false;
}

/* Every member has the result — unless a view change is being decided (this node promised
 * in a round): then the result waits for the new view, which says whether it stands. */
static bool everyone_done(const struct keel_node *n, const struct keel_op *op)
{
	KEEL_ASSERT(op->state == OP_LOCAL_DONE);
	/* A view change either finished it or sent it back to QUEUED. */
	KEEL_ASSERT(op->done_epoch == n->view.epoch && n->ops_done_local == wire_id(n, op) + 1);
	uint32_t need = wire_id(n, op) + 1;
	/* A member that left had reported it: then every member had it. */
	for (uint32_t r = 0; r < n->world; r++)
		if (fd_peer_of(n, r)->left && !seq_before(fd_peer_of(n, r)->left_reported, need))
			return true;
	if (n->acc_promised != 0)
		return false;
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && view_has(&n->view, r) &&
		    seq_before(mb_peer_of(n, r)->ops_done, need))
			return false;
	return true;
}

/* Has `peer`'s program started collective `id` (its heartbeats say how many it started in
 * this epoch) or finished it (every header says how many it finished)? Beyond the all-to-all
 * limit only watched ring neighbours beat to us; of another peer we know only what it
 * finished, so it counts as not started: waiting for a program is not a fault. */
static bool peer_entered(const struct keel_node *n, int32_t peer, uint32_t id)
{
	KEEL_ASSERT(peer >= 0 && (uint32_t)peer < n->world);
	KEEL_ASSERT((uint32_t)peer != n->self);
	const struct mb_peer *p = mb_peer_of(n, (uint32_t)peer);
	return seq_before(id, p->ops_done) ||
	       (fd_peer_of(n, (uint32_t)peer)->watched && seq_before(id, p->ops_started));
}

/* Have the peers this collective waits for now — the one its receive step expects data from,
 * the one its send step sends to (a full window: the receiver holds what it cannot use yet)
 * — started it? */
static bool waited_peers_entered(const struct keel_node *n, struct keel_op *op)
{
	KEEL_ASSERT(op->state == OP_RUNNING);
	KEEL_ASSERT(op->recv_step <= op->step_count && op->send_step <= op->step_count);
	uint32_t id = wire_id(n, op);
	struct step s;
	if (op->recv_step < op->step_count) {
		op_step(n, op, op->recv_step, &s);
		if (s.recv_peer >= 0 && !peer_entered(n, s.recv_peer, id))
			return false;
	}
	if (op->send_step < op->step_count) {
		op_step(n, op, op->send_step, &s);
		if (s.send_peer >= 0 && !peer_entered(n, s.send_peer, id))
			return false;
	}
	return true;
}

/* No progress for op_timeout_ns though the peers it waits for are in it, without a view
 * change: a soft fault (lost data, a bug). Ask for a new epoch (the same members) to restart
 * it, soft_retries times; then give up. A peer that has not started it is not a fault — its
 * program is busy — and is waited for entry_timeout_ns. */
static bool op_stalled(struct keel_node *n, struct keel_op *op)
{
	KEEL_ASSERT(op->state == OP_RUNNING);
	KEEL_ASSERT(n->now_ns >= op->progress_ns); /* the clock never goes back */
	uint64_t idle = n->now_ns - op->progress_ns;
	if (idle < n->cfg.op_timeout_ns)
		return false;
	if (!waited_peers_entered(n, op)) {
		op->entry_wait = true;
		if (idle < n->cfg.entry_timeout_ns)
			return false;
		op_finish(n, op, -ETIMEDOUT);
		return true;
	}
	if (op->entry_wait) { /* the last member just came: the stall clock starts now */
		op->entry_wait = false;
		op->progress_ns = n->now_ns;
		return false;
	}
	if (++op->stalls > n->cfg.soft_retries) {
		op_finish(n, op, -ETIMEDOUT);
		return true;
	}
	mb_request_bump(n);
	op->progress_ns = n->now_ns;
	return false;
}

/* One step of the frontier operation's life; false when it is waiting for something. */
static bool advance(struct keel_node *n, struct keel_op *op)
{
	KEEL_ASSERT(op == frontier_op(n));
	KEEL_ASSERT(op->state == OP_QUEUED || op->state == OP_RUNNING ||
		    op->state == OP_LOCAL_DONE);
	if (n->fatal != 0 || n->noquorum) {
		op_finish(n, op, n->fatal != 0 ? n->fatal : KEEL_ENOQUORUM);
		return true;
	}
	if (op->began && n->now_ns - op->start_ns >= n->op_bound_ns) {
		op_finish(n, op, -ETIMEDOUT);
		return true;
	}
	if (op->dev.on && coll_dev_progress(n, op))
		op->progress_ns = n->now_ns;
	if (op->dev.fault != 0) {
		op_finish(n, op, op->dev.fault);
		return true;
	}
	if (op->state == OP_QUEUED) {
		if (!coll_dev_idle(op) || !coll_dev_nic_done(n, op))
			return false; /* the last view's device work and reads drain before a
				       * restart writes the output and its mirror again */
		if (!n->member && n->now_ns - op->queued_ns >= n->op_bound_ns) {
			op_finish(n, op, -ETIMEDOUT); /* never admitted: nobody to run it with */
			return true;
		}
		if (!n->member)
			return false; /* admitted at the next view change */
		if (!op_begin(n, op))
			return true;
	}
	if (op->state == OP_RUNNING) {
		pump_sends(n, op);
		skip_empty_recv(n, op);
		if (op->send_step < op->step_count || op->recv_step < op->step_count ||
		    !coll_dev_idle(op))
			return op_stalled(n, op);
		if (op_local_done(n, op)) {
			op_finish(n, op, 0);
			return true;
		}
	}
	KEEL_ASSERT(op->state == OP_LOCAL_DONE);
	if (!everyone_done(n, op))
		return false;
	op_finish(n, op, 0);
	return true;
}

void coll_progress(struct keel_node *n)
{
	KEEL_ASSERT(n != NULL && n->ops_max > 0);
	uint32_t run_id = n->op_run_id;
	for (uint32_t guard = 0; guard < n->ops_max; guard++) {
		struct keel_op *op = frontier_op(n);
		if (op == NULL || !advance(n, op))
			break;
	}
	/* The frontier only moves forward, and never past the operations started. */
	KEEL_ASSERT(n->op_run_id - run_id <= n->op_next_id - run_id);
	grp_progress_all(n);
}

uint64_t coll_next_deadline(const struct keel_node *n)
{
	KEEL_ASSERT(n != NULL && n->ops_max > 0);
	/* A device says nothing when it finishes: while any operation has device work queued
	 * (the frontier, or finished ones draining), poll again now. A node without a device
	 * never has any: its polls skip the scan. */
	for (uint32_t i = 0; n->cfg.device != NULL && i < n->ops_max; i++)
		if (n->ops[i].state != OP_FREE && !coll_dev_idle(&n->ops[i]))
			return n->now_ns;
	const struct keel_op *op = &n->ops[n->op_run_slot];
	if (op->id == n->op_run_id && op->state == OP_QUEUED && !n->member)
		return op->queued_ns + n->op_bound_ns;
	if (op->id != n->op_run_id || (op->state != OP_RUNNING && op->state != OP_LOCAL_DONE))
		return UINT64_MAX;
	KEEL_ASSERT(op->began); /* RUNNING and LOCAL_DONE come after op_begin */
	uint64_t stall = op->progress_ns + n->cfg.op_timeout_ns;
	if (op->entry_wait) /* heartbeats wake us when a member enters */
		stall = op->progress_ns + n->cfg.entry_timeout_ns;
	uint64_t bound = op->start_ns + n->op_bound_ns;
	return stall < bound ? stall : bound;
}

uint32_t coll_done_count(const struct keel_node *n)
{
	const struct keel_op *op = &n->ops[n->op_run_slot];
	bool has = op->id == n->op_run_id && op->state == OP_LOCAL_DONE;
	KEEL_ASSERT(!seq_before(n->op_run_id, n->op_base));
	uint32_t done = n->op_run_id - n->op_base + (has ? 1u : 0u);
	KEEL_ASSERT(done <= coll_pending(n)); /* a result only for a collective started */
	return done;
}

uint32_t coll_pending(const struct keel_node *n)
{
	/* op_base <= op_run_id <= op_next_id, in sequence space */
	KEEL_ASSERT(n->op_run_id - n->op_base <= n->op_next_id - n->op_base);
	KEEL_ASSERT(n->op_next_id - n->op_run_id <= n->ops_max);
	return n->op_next_id - n->op_base;
}

/* The view brought the result of `op`, which some members reported early: it stands here too,
 * computed over the view `op` began on. A call that cannot take it (on device buffers, of
 * another length: the members called differently) fails as a restart would have. */
static void op_adopt(struct keel_node *n, struct keel_op *op, const uint8_t *result, uint32_t len)
{
	KEEL_ASSERT(op->state == OP_RUNNING && op->done_epoch == n->epoch - 1);
	if (op->kind != OPK_ALLREDUCE || op->dev.on || op->bytes != len ||
	    (op->grad && op->enc_tx != WIRE_ENC_RAW)) {
		op_finish(n, op, KEEL_EVIEWCHANGED);
		return;
	}
	rel_borrowed_copy_in(n); /* datagrams in flight may still borrow from the output */
	memcpy(op->out, result, len);
	n->ctr.ops_adopted++;
	op_finish(n, op, 0);
}

/* A view was installed (n->view). Its frontier (meaningful when this node was a member of the
 * previous epoch, `same_line`) counts the previous epoch's collectives that stand: those this
 * node holds finish now; one it still runs finishes with the result the view carries; the one
 * after restarts on the new view. */
void coll_on_install(struct keel_node *n, bool same_line, bool excluded)
{
	KEEL_ASSERT(n != NULL);
	KEEL_ASSERT(!excluded || !n->member); /* left out: membership.c cleared n->member */
	uint32_t frontier = n->view.frontier;
	for (uint32_t guard = 0; guard < n->ops_max; guard++) {
		struct keel_op *op = frontier_op(n);
		if (op == NULL || op->state != OP_LOCAL_DONE || !same_line ||
		    !seq_before(wire_id(n, op), frontier))
			break;
		op_finish(n, op, 0); /* its result stands: computed over op->done_* */
	}
	struct keel_op *last = frontier_op(n);
	if (same_line && !excluded && n->view.result_len != 0 && last != NULL &&
	    last->state == OP_RUNNING && wire_id(n, last) + 1 == frontier)
		op_adopt(n, last, n->view.result, n->view.result_len);
	/* Left out: the members restart these without us, or already finished them; the
	 * caller's sequence of collectives no longer matches theirs. */
	for (uint32_t guard = 0; excluded && guard < n->ops_max; guard++) {
		struct keel_op *op = frontier_op(n);
		if (op == NULL)
			break;
		op_finish(n, op, KEEL_EEXCLUDED);
		n->excluded_unseen = false; /* the caller hears it from this op */
	}
	struct keel_op *op = frontier_op(n);
	KEEL_ASSERT(!excluded || op == NULL); /* at most ops_max were pending: all failed */
	if (op != NULL && (op->state == OP_RUNNING || op->state == OP_LOCAL_DONE)) {
		op_set_state(op, OP_QUEUED); /* begins again on the new view */
		coll_dev_stop(op, false);
	}
	KEEL_ASSERT(op == NULL || op->state == OP_QUEUED);
	n->op_base = n->op_run_id;
	n->ops_done_local = 0;
	n->hier_valid = false; /* the hosts' shape is the new view's, computed when needed */
	/* Groups first: until every member's SYNC came, none of their data may go out on the
	 * new streams (a receiver still waiting for SYNCs would hold it, and the SYNC behind). */
	grp_on_install_all(n);
	coll_progress(n);
}

static void apply(const struct keel_op *op, const struct step *s, uint64_t off, const uint8_t *data,
		  uint64_t len)
{
	KEEL_ASSERT(s->action != ACT_NONE && len % op->elem_size == 0);
	/* Reduced or copied bytes stay inside the step's region, which lies inside the buffer. */
	KEEL_ASSERT(off + len <= s->recv_len && s->recv_off + s->recv_len <= op->bytes);
	uint8_t *dst = op->out + s->recv_off + off;
	size_t cnt = (size_t)(len / op->elem_size);
	if (s->action == ACT_COPY)
		memcpy(dst, data, (size_t)len);
	else if (s->action == ACT_REDUCE_IN)
		reduce_apply(dst, op->in + s->recv_off + off, data, cnt, op->dtype, op->redop);
	else
		reduce_apply(dst, dst, data, cnt, op->dtype, op->redop);
	if (s->final && op->redop == KEEL_AVG && s->action != ACT_COPY)
		reduce_finish_avg(dst, cnt, op->dtype, op->world);
	if (s->final && s->action != ACT_COPY)
		cmp_round_final(op, dst, s->recv_off + off, cnt);
}

/* Reduce or copy an accepted fragment's payload into the output: on the host, or queued on
 * the device (where the payload may lie already). false: the device still works on those
 * bytes; later. */
static bool take(struct keel_node *n, struct keel_op *op, const struct step *s, uint32_t peer,
		 const uint8_t *payload, uint32_t len)
{
	if (op->dev.on && n->rx_device) {
		if (!coll_dev_take_device(n, op, op->recv_step, s, op->recv_off, payload, len,
					  peer))
			return false;
		n->rx_device_kept = true; /* its device work gives it back */
		return true;
	}
	if (op->dev.on) {
		if (!coll_dev_can_take(n, op, op->recv_step, s, op->recv_off, len))
			return false;
		coll_dev_take(n, op, op->recv_step, s, op->recv_off, payload, len);
		return true;
	}
	/* a ring's all-gather writes final sums over the partial sums it sent: copy in any
	 * datagram still borrowing them (no other step writes bytes it sent) */
	if (n->tx_borrowed != 0 && s->action == ACT_COPY && op->algo == KEEL_ALGO_RING)
		rel_borrowed_copy_in_range(n, op->out + s->recv_off + op->recv_off, len);
	apply(op, s, op->recv_off, payload, len);
	return true;
}

bool coll_deliver(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		  const uint8_t *payload)
{
	KEEL_ASSERT(h != NULL && payload != NULL);
	KEEL_ASSERT(peer < n->world && peer != n->self); /* wire_decode checked the source */
	if ((h->flags & WIRE_FLAG_GROUP) != 0)
		return grp_deliver(n, peer, h, payload);
	uint32_t local = n->op_base + h->op_id;
	if (seq_before(local, n->op_run_id)) {
		n->ctr.drop_stale++; /* an operation that already ended here */
		return true;
	}
	struct keel_op *op = frontier_op(n);
	if (op == NULL || op->id != local || op->state != OP_RUNNING)
		return false; /* a later operation: keep it until we get there */
	skip_empty_recv(n, op);
	if (h->step > op->recv_step)
		return false;
	if (op->recv_step == op->step_count) {
		/* Every step has its data; a fragment for a step past the plan is garbage (it
		 * must not reach op_step, which maps only steps of the plan). */
		n->ctr.drop_protocol++;
		return true;
	}
	struct step s;
	op_step(n, op, op->recv_step, &s);
	if (h->step == op->recv_step && s.recv_peer == (int32_t)peer &&
	    h->total_len != s.recv_len) {
		/* The right peer, step and epoch, another size: its program started a different
		 * collective here. Waiting cannot fix that; say so now. */
		n->ctr.drop_protocol++;
		op_finish(n, op, KEEL_EMISMATCH);
		return true;
	}
	uint32_t len; /* the f32 bytes a compressed fragment stands for */
	int enc = cmp_logical_len(h, &len);
	if (enc > 0 && !op->grad && h->step == op->recv_step && s.recv_peer == (int32_t)peer) {
		/* Compressed data only comes from a gradient AllReduce: this member runs a plain
		 * one at this place of the sequence. */
		n->ctr.drop_protocol++;
		op_finish(n, op, KEEL_EMISMATCH);
		return true;
	}
	if (enc < 0 || (enc > 0 && !op->grad) || h->step < op->recv_step ||
	    s.recv_peer != (int32_t)peer || h->total_len != s.recv_len ||
	    h->offset != op->recv_off || len % op->elem_size != 0 ||
	    (uint64_t)h->offset + len > s.recv_len) {
		n->ctr.drop_protocol++; /* well formed, but not what this operation expects */
		return true;
	}
	if (n->rx_device && (enc != 0 || !op->dev.on)) {
		/* A payload the NIC wrote into device memory (GPUDirect RDMA): only a device
		 * AllReduce reads it, with the device. A member's AllReduce on host buffers
		 * here is another collective than the sender's. */
		n->ctr.drop_protocol++;
		if (!op->dev.on)
			op_finish(n, op, KEEL_EMISMATCH);
		return true;
	}
	if (s.recv_after_send && !send_passed(op, op->recv_step, op->recv_off + len))
		return false;
	if (enc > 0)
		payload = cmp_widen(n, h, payload);
	if (!take(n, op, &s, peer, payload, len))
		return false; /* the device still works on these bytes: later */
	op->recv_off += len;
	KEEL_ASSERT(op->recv_off <= s.recv_len); /* checked above, before anything was applied */
	op->progress_ns = n->now_ns;
	skip_empty_recv(n, op);
	return true;
}

/* ---- the API ---- */

static bool overlap(const uint8_t *a, const uint8_t *b, uint64_t len)
{
	KEEL_ASSERT(a != NULL && b != NULL && len != 0);
	return a != b && a < b + len && b < a + len;
}

/* Do [a, a + alen) and [b, b + blen) share a byte? */
static bool spans_meet(const void *a, size_t alen, const void *b, size_t blen)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return x < y + blen && y < x + alen;
}

/* The view left this node out and no collective has said so yet: say it once, here. */
static bool excluded_unseen(struct keel_node *n)
{
	bool was = n->excluded_unseen;
	KEEL_ASSERT(!was || n->ctr.self_exclusions != 0); /* set only when a view left us out */
	n->excluded_unseen = false;
	return was;
}

static struct keel_op *op_alloc(struct keel_node *n)
{
	struct keel_op *op = &n->ops[n->op_next_slot];
	if (op->state != OP_FREE)
		return NULL;
	n->op_next_slot = next_slot(n, n->op_next_slot);
	/* A free slot: the frontier's slot is not it, so fewer than ops_max are in flight. */
	KEEL_ASSERT(n->op_next_id - n->op_run_id < n->ops_max);
	uint8_t *bits = op->done_bits;
	KEEL_ASSERT(bits != NULL); /* carved by keel_init */
	memset(op, 0, OP_CLEARED_BYTES);
	op->done_bits = bits;
	op->id = n->op_next_id++;
	op_set_state(op, OP_QUEUED);
	op->queued_ns = n->now_ns;
	return op;
}

/* An AllReduce's arguments, host or device: 0 or the error keel_allreduce_start names. */
static int allreduce_args(const struct keel_node *node, const void *send, const void *recv,
			  size_t count, enum keel_dtype dtype, enum keel_redop redop,
			  struct keel_op **handle)
{
	if (node == NULL || handle == NULL || (unsigned)dtype >= KEEL_DTYPE_COUNT ||
	    (unsigned)redop >= KEEL_REDOP_COUNT)
		return -EINVAL;
	if (count != 0 && (send == NULL || recv == NULL))
		return -EINVAL;
	uint64_t esize = keel_dtype_size(dtype);
	if (count > UINT64_MAX / esize)
		return -EINVAL;
	uint64_t bytes = (uint64_t)count * esize;
	if (count != 0 && overlap(send, recv, bytes))
		return -EINVAL;
	/* Offsets travel as 32 bits: a step's message (a ring chunk, or the whole buffer for
	 * recursive doubling) must stay below 4 GiB, in the smallest view it could run on. The
	 * hierarchy's messages are parts of half the buffer at most (2 members a host or more),
	 * and so are those of its flat fallback above rd_max_bytes (the ring). */
	bool ring = node->cfg.algo == KEEL_ALGO_RING ||
		    (node->cfg.algo != KEEL_ALGO_RD && bytes > node->cfg.rd_max_bytes);
	uint64_t step_bytes = ring ? bytes / 2 + esize : bytes;
	if (step_bytes > UINT32_MAX)
		return -EMSGSIZE;
	return 0;
}

/* Queue a checked AllReduce over host buffers `in` and `out` (for a device one, its stage). */
static int allreduce_queue(struct keel_node *node, const void *send, void *recv, size_t count,
			   enum keel_dtype dtype, enum keel_redop redop, struct keel_op **handle)
{
	KEEL_ASSERT(allreduce_args(node, send, recv, count, dtype, redop, handle) == 0);
	uint64_t esize = keel_dtype_size(dtype);
	if (excluded_unseen(node))
		return KEEL_EEXCLUDED;
	struct keel_op *op = op_alloc(node);
	if (op == NULL)
		return -EBUSY;
	op->kind = OPK_ALLREDUCE;
	op->dtype = dtype;
	op->redop = redop;
	op->elem_size = (uint32_t)esize;
	op->frag_bytes = node->payload_max / esize * esize;
	KEEL_ASSERT(esize == 1 || esize == 2 || esize == 4 || esize == 8); /* dtype checked */
	KEEL_ASSERT(op->frag_bytes >= esize); /* KEEL_MTU_MIN leaves room for a fragment */
	op->in = send;
	op->out = recv;
	op->count = count;
	op->bytes = (uint64_t)count * esize;
	*handle = op;
	return 0;
}

int keel_allreduce_start(struct keel_node *node, const void *send, void *recv, size_t count,
			 enum keel_dtype dtype, enum keel_redop redop, struct keel_op **handle)
{
	int rc = allreduce_args(node, send, recv, count, dtype, redop, handle);
	if (rc == 0)
		rc = allreduce_queue(node, send, recv, count, dtype, redop, handle);
	if (rc == 0)
		coll_progress(node);
	return rc;
}

int keel_allreduce_device_start(struct keel_node *node, const void *send, void *recv, size_t count,
				enum keel_dtype dtype, enum keel_redop redop, void *stage,
				size_t stage_bytes, struct keel_op **handle)
{
	int rc = allreduce_args(node, send, recv, count, dtype, redop, handle);
	if (rc != 0)
		return rc;
	uint64_t bytes = (uint64_t)count * keel_dtype_size(dtype);
	rc = coll_dev_check_args(node, send, recv, bytes, (uint32_t)keel_dtype_size(dtype), stage,
				 stage_bytes);
	if (rc != 0)
		return rc;
	uint8_t *st = stage;
	/* The engine runs on the stage (input copy, output mirror); the device holds the rest. */
	rc = allreduce_queue(node, count != 0 ? st : NULL, count != 0 ? st + bytes : NULL, count,
			     dtype, redop, handle);
	if (rc != 0)
		return rc;
	struct op_dev *d = &(*handle)->dev;
	d->on = count != 0;
	d->d_in = send;
	d->d_out = recv;
	d->direct_in = d->direct_out = d->direct_in_used = d->direct_out_used = false;
	/* in place all of the input is staged, from now; out of place what is sent, from begin */
	d->stage_lo = d->staged = d->in_ready = 0;
	d->stage_hi = send == recv ? bytes : 0;
	if (node->member)
		coll_dev_plan(node, *handle, node->view.count);
	coll_progress(node);
	return 0;
}

size_t keel_grad_feedback_len(size_t count)
{
	return count <= SIZE_MAX / 2 ? 2 * count : 0;
}

int keel_allreduce_grad_start(struct keel_node *node, const float *send, float *recv, size_t count,
			      enum keel_redop redop, float *feedback, struct keel_op **handle)
{
	if (redop != KEEL_SUM && redop != KEEL_AVG)
		return -EINVAL;
	int rc = allreduce_args(node, send, recv, count, KEEL_F32, redop, handle);
	if (rc != 0)
		return rc;
	if (count == 0)
		feedback = NULL; /* nothing to feed back */
	else if (feedback != NULL &&
		 (count > SIZE_MAX / 8 || spans_meet(feedback, 8 * count, send, 4 * count) ||
		  spans_meet(feedback, 8 * count, recv, 4 * count)))
		return -EINVAL;
	rc = allreduce_queue(node, send, recv, count, KEEL_F32, redop, handle);
	if (rc != 0)
		return rc;
	(*handle)->grad = true;
	(*handle)->fb = feedback;
	coll_progress(node);
	return 0;
}

int keel_broadcast_start(struct keel_node *node, uint32_t root, void *buf, size_t bytes,
			 struct keel_op **handle)
{
	if (node == NULL || handle == NULL || root >= node->world || (bytes != 0 && buf == NULL))
		return -EINVAL;
	if (node->member && !view_has(&node->view, root))
		return -EINVAL;
	if (bytes > UINT32_MAX)
		return -EMSGSIZE;
	if (excluded_unseen(node))
		return KEEL_EEXCLUDED;
	struct keel_op *op = op_alloc(node);
	if (op == NULL)
		return -EBUSY;
	op->kind = OPK_BROADCAST;
	op->root = root;
	op->dtype = KEEL_U8;
	op->elem_size = 1;
	op->frag_bytes = node->payload_max;
	KEEL_ASSERT(op->frag_bytes > 0 && op->state == OP_QUEUED);
	KEEL_ASSERT(!node->member || node->pos_of[root] < node->view.count);
	op->in = buf;
	op->out = buf;
	op->count = bytes;
	op->bytes = bytes;
	*handle = op;
	coll_progress(node);
	return 0;
}

/* Detection: miss_limit intervals of silence, a margin of at most one interval for the
 * peer's delay and jitter, then the probes a quarter interval apart. A view change: a
 * member's report to the coordinator (once an interval), a round that waits view_timeout for
 * slow members, and one retry after it. */
uint64_t keel_recovery_bound_ns(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	uint64_t hb = cfg->heartbeat_ns;
	uint64_t view =
	    cfg->view_timeout_ns != 0 ? cfg->view_timeout_ns : (uint64_t)cfg->miss_limit * hb;
	return keel_detect_bound_ns(cfg) + hb + 2 * view;
}

uint64_t keel_op_timeout_ns(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	if (cfg->op_timeout_ns != 0)
		return cfg->op_timeout_ns;
	return 2 * cfg->rto_max_ns + 2 * keel_recovery_bound_ns(cfg);
}

/* The wait for members to start it, then soft-fault rounds (a stall, then a view change),
 * and one more recovery for a failure the detector finds instead. */
uint64_t keel_op_bound_ns(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL);
	uint64_t recovery = keel_recovery_bound_ns(cfg);
	uint64_t round = keel_op_timeout_ns(cfg) + recovery;
	return cfg->entry_timeout_ns + (uint64_t)(cfg->soft_retries + 1) * round + recovery;
}

int keel_op_test_info(struct keel_node *node, struct keel_op *handle, struct keel_op_info *info,
		      uint32_t *members, uint32_t members_cap)
{
	if (node == NULL || handle < node->ops || handle >= node->ops + node->ops_max ||
	    handle->state == OP_FREE)
		return -EINVAL;
	if (handle->state != OP_DONE)
		return -EINPROGRESS;
	if (!coll_dev_idle(handle) && !coll_dev_drain(node, handle))
		return -EINPROGRESS; /* the device still writes the caller's buffers */
	if (!coll_dev_nic_done(node, handle)) {
		/* A NIC may still read its device buffers. A failed operation's datagrams may
		 * never be acknowledged (a peer that left it takes them for a later operation and
		 * cannot hold a device payload): the device copies them to the host instead. */
		if (handle->status != 0)
			coll_dev_release_nic(node, handle);
		return -EINPROGRESS;
	}
	/* A result (status 0) was computed over a view: op_local_done recorded it. */
	KEEL_ASSERT_DEBUG(handle->status <= 0);
	KEEL_ASSERT_DEBUG(handle->status != 0 ||
			  (handle->done_count >= 1 && handle->done_count <= node->world));
	if (handle->status == 0 && members != NULL) {
		if (members_cap < handle->done_count)
			return -ENOSPC;
		uint32_t k = 0;
		for (uint32_t r = 0; r < node->world; r++)
			if ((handle->done_bits[r / 8] >> (r % 8)) & 1u)
				members[k++] = r;
		KEEL_ASSERT_DEBUG(k == handle->done_count);
	}
	if (info != NULL) {
		info->epoch = handle->done_epoch;
		info->member_count = handle->done_count;
		info->restarts = handle->restarts;
		info->algo = handle->algo;
		info->bytes_saved = handle->cmp_saved;
	}
	int status = handle->status;
	op_set_state(handle, OP_FREE);
	return status;
}

int keel_op_test(struct keel_node *node, struct keel_op *handle)
{
	return keel_op_test_info(node, handle, NULL, NULL, 0);
}

static bool has_waiter(const struct keel_node *node)
{
	return node != NULL && node->cfg.waiter.now_ns != NULL && node->cfg.waiter.wait != NULL;
}

/* Poll and wait until `op` ends; every op ends within keel_op_bound_ns. */
static int wait_op(struct keel_node *node, struct keel_op *op)
{
	KEEL_ASSERT(has_waiter(node));
	KEEL_ASSERT(op >= node->ops && op < node->ops + node->ops_max);
	const struct keel_waiter *w = &node->cfg.waiter;
	for (;;) {
		uint64_t deadline;
		int prc = keel_poll(node, w->now_ns(w->ctx), &deadline);
		int rc = keel_op_test(node, op);
		if (rc != -EINPROGRESS)
			return rc;
		if (prc != 0 && prc != KEEL_ENOQUORUM)
			continue; /* the op fails with the transport error on the next poll */
		w->wait(w->ctx, deadline);
	}
}

int keel_allreduce_device(struct keel_node *node, const void *send, void *recv, size_t count,
			  enum keel_dtype dtype, enum keel_redop redop, void *stage,
			  size_t stage_bytes)
{
	if (!has_waiter(node))
		return -EINVAL;
	struct keel_op *op;
	int rc = keel_allreduce_device_start(node, send, recv, count, dtype, redop, stage,
					     stage_bytes, &op);
	KEEL_ASSERT(rc <= 0);
	return rc != 0 ? rc : wait_op(node, op);
}

int keel_allreduce(struct keel_node *node, const void *send, void *recv, size_t count,
		   enum keel_dtype dtype, enum keel_redop redop)
{
	if (!has_waiter(node))
		return -EINVAL;
	struct keel_op *op;
	int rc = keel_allreduce_start(node, send, recv, count, dtype, redop, &op);
	KEEL_ASSERT(rc <= 0);
	return rc != 0 ? rc : wait_op(node, op);
}

int keel_allreduce_grad(struct keel_node *node, const float *send, float *recv, size_t count,
			enum keel_redop redop, float *feedback)
{
	if (!has_waiter(node))
		return -EINVAL;
	struct keel_op *op;
	int rc = keel_allreduce_grad_start(node, send, recv, count, redop, feedback, &op);
	KEEL_ASSERT(rc <= 0);
	return rc != 0 ? rc : wait_op(node, op);
}

int keel_broadcast(struct keel_node *node, uint32_t root, void *buf, size_t bytes)
{
	if (!has_waiter(node))
		return -EINVAL;
	struct keel_op *op;
	int rc = keel_broadcast_start(node, root, buf, bytes, &op);
	KEEL_ASSERT(rc <= 0);
	return rc != 0 ? rc : wait_op(node, op);
}
