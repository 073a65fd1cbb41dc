/* Collective schedules as lists of steps, in view positions (0..world-1): ring AllReduce
 * (reduce-scatter + all-gather), recursive doubling (with the fold for non-power-of-two
 * worlds) and a pipelined ring broadcast; the hierarchical one (coll_hier.c) is built from the
 * ring and recursive doubling over parts of the buffer. Pure functions: the engine in
 * collectives.c moves the data and maps positions to ranks. */
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "node_int.h"

static uint32_t pow2_floor(uint32_t v)
{
	KEEL_ASSERT_DEBUG(v >= 1);
	uint32_t p = 1;
	while (p <= v / 2)
		p *= 2;
	KEEL_ASSERT_DEBUG(p <= v && v / 2 < p && (p & (p - 1)) == 0);
	return p;
}

static uint32_t log2_u32(uint32_t p)
{
	KEEL_ASSERT_DEBUG(p != 0 && (p & (p - 1)) == 0); /* exact: only powers of two */
	uint32_t k = 0;
	while ((1u << k) < p)
		k++;
	KEEL_ASSERT_DEBUG(k < 32 && (1u << k) == p);
	return k;
}

uint32_t coll_flat_steps(enum keel_algo algo, uint32_t world)
{
	KEEL_ASSERT(algo == KEEL_ALGO_RING || algo == KEEL_ALGO_RD); /* AUTO resolved by op_begin */
	KEEL_ASSERT(world <= KEEL_WORLD_MAX);
	if (world <= 1)
		return 0;
	if (algo == KEEL_ALGO_RING)
		return 2 * (world - 1);
	return log2_u32(pow2_floor(world)) + 2; /* fold-in, exchanges, fold-out */
}

void coll_part(uint64_t count, uint32_t w, uint32_t c, uint64_t *first, uint64_t *n)
{
	KEEL_ASSERT_DEBUG(w >= 1 && c < w);
	uint64_t base = count / w, extra = count % w;
	*first = c * base + (c < extra ? c : extra);
	*n = base + (c < extra ? 1 : 0);
	/* The parts tile [0, count): the first starts at 0, each ends where the next starts (the
	 * formula above), the last ends at count. */
	KEEL_ASSERT_DEBUG(c != 0 || *first == 0);
	KEEL_ASSERT_DEBUG(c + 1 != w || *first + *n == count);
}

/* Bytes of ring chunk c of w over elements [first, first + count), whole elements. */
static void chunk_bytes(const struct keel_op *op, uint32_t w, uint32_t c, uint64_t first,
			uint64_t count, uint64_t *off, uint64_t *len)
{
	KEEL_ASSERT_DEBUG(first + count <= op->count && op->bytes == op->count * op->elem_size);
	uint64_t start, n;
	coll_part(count, w, c, &start, &n);
	*off = (first + start) * op->elem_size;
	*len = n * op->elem_size;
	KEEL_ASSERT_DEBUG(*off + *len <= (first + count) * op->elem_size);
}

void coll_ring_part(const struct keel_op *op, uint32_t w, uint32_t r, uint32_t t, uint64_t first,
		    uint64_t count, struct step *s)
{
	KEEL_ASSERT_DEBUG(w >= 2 && r < w);
	KEEL_ASSERT_DEBUG(t < 2 * (w - 1));
	s->send_peer = (int32_t)((r + 1) % w);
	s->send_from_out = t > 0;
	chunk_bytes(op, w, (r + 2 * w - t) % w, first, count, &s->send_off, &s->send_len);
	s->recv_peer = (int32_t)((r + w - 1) % w);
	chunk_bytes(op, w, (r + 2 * w - t - 1) % w, first, count, &s->recv_off, &s->recv_len);
	s->action = t < w - 1 ? ACT_REDUCE_IN : ACT_COPY;
	s->final = t == w - 2;
	s->recv_after_send = false;
}

void coll_rd_part(const struct keel_op *op, uint32_t w, uint32_t r, uint32_t t, uint64_t first,
		  uint64_t count, bool in_out, struct step *s)
{
	uint32_t p2 = pow2_floor(w), rem = w - p2, k = log2_u32(p2);
	KEEL_ASSERT_DEBUG(w >= 2 && r < w);
	KEEL_ASSERT_DEBUG(t <= k + 1); /* fold-in, k exchanges, fold-out */
	enum step_action reduce = in_out ? ACT_REDUCE_OUT : ACT_REDUCE_IN;
	if (t == 0) { /* fold-in: ranks beyond the power of two hand their input to r - p2 */
		if (r >= p2) {
			s->send_peer = (int32_t)(r - p2);
			s->send_from_out = in_out;
		} else if (r < rem) {
			s->recv_peer = (int32_t)(r + p2);
			s->action = reduce;
			s->final = k == 0;
		}
	} else if (t <= k) {
		if (r >= p2)
			return;
		uint32_t partner = r ^ (1u << (t - 1));
		s->send_peer = s->recv_peer = (int32_t)partner;
		s->send_from_out = in_out || r < rem || t > 1;
		s->action = s->send_from_out ? ACT_REDUCE_OUT : ACT_REDUCE_IN;
		s->final = t == k;
		s->recv_after_send = s->send_from_out || op->in == op->out;
	} else { /* fold-out: results go back to the ranks that folded in */
		if (r < rem) {
			s->send_peer = (int32_t)(r + p2);
			s->send_from_out = true;
		} else if (r >= p2) {
			s->recv_peer = (int32_t)(r - p2);
			s->action = ACT_COPY;
		}
	}
	uint64_t off = first * op->elem_size, len = count * op->elem_size;
	KEEL_ASSERT_DEBUG(first + count <= op->count);
	s->send_off = s->send_peer >= 0 ? off : 0;
	s->send_len = s->send_peer >= 0 ? len : 0;
	s->recv_off = s->recv_peer >= 0 ? off : 0;
	s->recv_len = s->recv_peer >= 0 ? len : 0;
	/* Partners lie inside the world; an exchange partner is inside the power of two. */
	KEEL_ASSERT_DEBUG(s->send_peer < (int32_t)w && s->recv_peer < (int32_t)w);
	KEEL_ASSERT_DEBUG(t == 0 || t > k || s->send_peer < 0 || (uint32_t)s->send_peer < p2);
}

/* Broadcast down a ring from the root: the rank d places after it receives at step d - 1
 * and forwards at step d, fragment by fragment as the data comes in. */
static void bcast_step(const struct keel_op *op, uint32_t r, uint32_t t, struct step *s)
{
	uint32_t w = op->world, d = (r + w - op->root_pos) % w;
	/* op_begin fails a broadcast whose root left the view, so the root has a position */
	KEEL_ASSERT_DEBUG(w >= 2 && r < w && op->root_pos < w);
	KEEL_ASSERT_DEBUG(t < w - 1);
	if (t == d && d + 1 < w) {
		s->send_peer = (int32_t)((r + 1) % w);
		s->send_from_out = d > 0;
		s->send_len = op->bytes;
	}
	if (d >= 1 && t == d - 1) {
		s->recv_peer = (int32_t)((r + w - 1) % w);
		s->action = ACT_COPY;
		s->recv_len = op->bytes;
	}
}

uint32_t coll_step_count(const struct keel_op *op)
{
	KEEL_ASSERT(op != NULL && (op->kind == OPK_ALLREDUCE || op->kind == OPK_BROADCAST));
	KEEL_ASSERT(op->world >= 1 && op->world <= KEEL_WORLD_MAX);
	if (op->world <= 1)
		return 0;
	if (op->kind == OPK_BROADCAST)
		return op->world - 1;
	if (op->algo == KEEL_ALGO_HIER)
		return coll_hier_step_count(op);
	return coll_flat_steps(op->algo, op->world);
}

void coll_step(const struct keel_op *op, uint32_t t, struct step *s)
{
	KEEL_ASSERT_DEBUG(op != NULL && s != NULL);
	KEEL_ASSERT_DEBUG(t < op->step_count); /* the step index lies inside the plan */
	memset(s, 0, sizeof(*s));
	s->send_peer = -1;
	s->recv_peer = -1;
	if (op->kind == OPK_BROADCAST)
		bcast_step(op, op->self_pos, t, s);
	else if (op->algo == KEEL_ALGO_RING)
		coll_ring_part(op, op->world, op->self_pos, t, 0, op->count, s);
	else if (op->algo == KEEL_ALGO_RD)
		coll_rd_part(op, op->world, op->self_pos, t, 0, op->count, false, s);
	else
		coll_hier_step(op, t, s);
	/* Both regions lie inside the buffer; nothing is sent to or received from oneself. */
	KEEL_ASSERT_DEBUG(s->send_off + s->send_len <= op->bytes &&
			  s->recv_off + s->recv_len <= op->bytes);
	KEEL_ASSERT_DEBUG(s->send_peer != (int32_t)op->self_pos &&
			  s->recv_peer != (int32_t)op->self_pos);
	/* Something arrives exactly when there is something to do with it. */
	KEEL_ASSERT_DEBUG((s->recv_peer >= 0) == (s->action != ACT_NONE));
}
