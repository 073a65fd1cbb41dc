/* Schedules of the group collectives as lists of steps at one member, in group positions
 * (0..w-1), like coll_steps.c's for the world's AllReduce. Pure functions of the request.
 *   AllGather: a ring (w-1 steps, each forwarding the block received the step before), or
 *     for small ones recursive doubling (a power of two from 8 members: log2 w steps, each
 *     swapping all blocks held with the partner) or direct (own block to every member).
 *   ReduceScatter: pairwise (step t: own input's block r+t to member r+t, member r-t's block
 *     r reduced in): each element is reduced at one member, in a fixed order.
 *   AllReduce: for small buffers recursive doubling (a power of two; partners reduce the same
 *     two values, so every member computes the same bits) or direct (every input to every
 *     member, reduced in rank order at each); else pairwise ReduceScatter then a ring
 *     AllGather of the reduced blocks.
 *   Broadcast: direct from the root when small, else a pipelined ring from the root.
 *   Reduce, Gather: direct to the root, in rank order. Scatter: direct from the root.
 *   AllToAll: pairwise. Barrier: no step (the DONE notices are the barrier). */
#include <string.h>

#include "assert_int.h"
#include "group_int.h"

bool grp_kind_indexed(enum gop_kind k)
{
	return k == GK_ALLGATHER || k == GK_REDUCE_SCATTER || k == GK_GATHER || k == GK_SCATTER ||
	       k == GK_ALLTOALL || k == GK_SPLIT;
}

/* Block i of a rank-indexed operation: element offset and count. */
static void block(const struct keel_req *r, const size_t *counts, const size_t *displs, uint32_t i,
		  uint64_t *off, uint64_t *n)
{
	if (counts != NULL) {
		*n = counts[i];
		if (displs != NULL) {
			*off = displs[i];
		} else {
			uint64_t o = 0;
			for (uint32_t j = 0; j < i; j++)
				o += counts[j];
			*off = o;
		}
	} else {
		*n = r->count;
		*off = (uint64_t)i * r->count;
	}
}

/* AllReduce's blocks: the buffer cut into w parts as evenly as possible. */
static void ar_block(const struct keel_req *r, uint32_t i, uint64_t *off, uint64_t *n)
{
	coll_part(r->count, r->w, i, off, n);
}

static void set_send(const struct keel_req *r, struct gstep *s, uint32_t pos, bool out,
		     uint64_t off, uint64_t n)
{
	s->send_pos = n == 0 ? -1 : (int32_t)pos;
	s->send_out = out;
	s->send_off = off * r->esize;
	s->send_len = n * r->esize;
}

static void set_recv(const struct keel_req *r, struct gstep *s, uint32_t pos, enum gstep_action a,
		     uint64_t off, uint64_t n)
{
	bool local = a == GA_LOCAL_COPY || a == GA_LOCAL_REDUCE;
	s->recv_pos = local || n == 0 ? -1 : (int32_t)pos;
	s->action = n == 0 ? GA_NONE : a;
	s->recv_off = off * r->esize;
	s->recv_len = n * r->esize;
}

static uint32_t log2_exact(uint32_t w)
{
	uint32_t k = 0;
	while ((1u << k) < w)
		k++;
	KEEL_ASSERT((1u << k) == w);
	return k;
}

/* Recursive doubling step t: swap with member me ^ 2^t. AllGather: the 2^t blocks each holds;
 * AllReduce: the whole buffer, reduced. */
static void rd_step(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	uint32_t me = r->me, partner = me ^ (1u << t), span = 1u << t;
	if (r->kind == GK_ALLREDUCE) {
		set_send(r, s, partner, t > 0 || r->in == r->out, 0, r->count);
		set_recv(r, s, partner, GA_REDUCE, 0, r->count);
		s->final = (2u << t) == r->w;
		s->recv_after_send = true;
		return;
	}
	uint32_t base = me & ~(span - 1), pbase = partner & ~(span - 1);
	set_send(r, s, partner, true, (uint64_t)base * r->count, (uint64_t)span * r->count);
	set_recv(r, s, partner, GA_COPY, (uint64_t)pbase * r->count, (uint64_t)span * r->count);
}

uint32_t grp_step_count(const struct keel_req *r)
{
	uint32_t w = r->w;
	if (w <= 1)
		return r->kind == GK_ALLREDUCE || r->kind == GK_REDUCE ? 1 : 0;
	switch (r->kind) {
	case GK_ALLGATHER:
	case GK_SPLIT:
		return r->algo == KEEL_GALGO_RD ? log2_exact(w) : w - 1;
	case GK_REDUCE_SCATTER:
	case GK_ALLTOALL:
		return w - 1;
	case GK_ALLREDUCE:
		if (r->algo == KEEL_GALGO_RD)
			return log2_exact(w);
		return r->algo == KEEL_GALGO_RING ? 2 * (w - 1) : w;
	case GK_BROADCAST:
		return w - 1;
	case GK_REDUCE:
	case GK_GATHER:
		return w;
	case GK_SCATTER:
		return w - 1;
	default:
		return 0;
	}
}

/* AllGather / split step t: ring or direct. */
static void allgather_step(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	uint32_t w = r->w, me = r->me;
	uint64_t off, n;
	if (r->algo == KEEL_GALGO_RD) {
		rd_step(r, t, s);
		return;
	}
	if (r->algo == KEEL_GALGO_RING) {
		uint32_t sb = (me + w - t) % w, rb = (me + w - t - 1) % w;
		block(r, r->counts, r->displs, sb, &off, &n);
		if (t == 0) /* own block, from the input: nothing to wait for */
			set_send(r, s, (me + 1) % w, false, 0, n);
		else
			set_send(r, s, (me + 1) % w, true, off, n);
		block(r, r->counts, r->displs, rb, &off, &n);
		set_recv(r, s, (me + w - 1) % w, GA_COPY, off, n);
		return;
	}
	uint32_t to = (me + t + 1) % w, from = (me + w - t - 1) % w;
	block(r, r->counts, r->displs, me, &off, &n);
	set_send(r, s, to, false, 0, n); /* own block, from the input */
	block(r, r->counts, r->displs, from, &off, &n);
	set_recv(r, s, from, GA_COPY, off, n);
}

/* Pairwise ReduceScatter step t (also AllReduce's first half): the input's block me+t+1 to
 * its owner, the block of member me-t-1 for us reduced into the output. */
static void rs_step(const struct keel_req *r, uint32_t t, struct gstep *s, bool allreduce)
{
	uint32_t w = r->w, me = r->me, to = (me + t + 1) % w, from = (me + w - t - 1) % w;
	uint64_t off, n, roff, rn;
	if (allreduce) {
		ar_block(r, to, &off, &n);
		ar_block(r, me, &roff, &rn);
		set_send(r, s, to, false, off, n);
		set_recv(r, s, from, GA_REDUCE, roff, rn); /* block me of the output */
	} else {
		block(r, r->counts, NULL, to, &off, &n);
		set_send(r, s, to, false, off, n);
		block(r, r->counts, NULL, me, &roff, &rn);
		set_recv(r, s, from, GA_REDUCE, 0, rn); /* out holds block me only */
	}
	s->final = t + 2 == w;
}

/* Contributions in rank order (direct AllReduce at every member, Reduce at the root): step j
 * is member j's, applied to the output in turn; step 0 copies, later ones reduce. */
static void ordered_recv(const struct keel_req *r, uint32_t j, struct gstep *s)
{
	bool own = j == r->me;
	enum gstep_action a =
	    j == 0 ? (own ? GA_LOCAL_COPY : GA_COPY) : (own ? GA_LOCAL_REDUCE : GA_REDUCE);
	set_recv(r, s, j, a, 0, r->count);
	s->final = j + 1 == r->w;
}

/* Reduce's root: step 0 its own input (in place, it is already the output), then the others'
 * in rank order. Only the root computes: its order need not match anyone's. */
static void reduce_root_recv(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	if (t == 0) {
		set_recv(r, s, r->me, GA_LOCAL_COPY, 0, r->count);
	} else {
		uint32_t j = t - 1 < r->me ? t - 1 : t;
		set_recv(r, s, j, GA_REDUCE, 0, r->count);
	}
	s->final = t + 1 == r->w;
}

static void allreduce_step(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	uint32_t w = r->w, me = r->me;
	if (w <= 1) {
		set_recv(r, s, 0, GA_LOCAL_COPY, 0, r->count);
		s->final = true;
		return;
	}
	if (r->algo == KEEL_GALGO_RD) {
		rd_step(r, t, s);
		return;
	}
	if (r->algo == KEEL_GALGO_DIRECT) {
		if (t != me)
			set_send(r, s, t, false, 0, r->count);
		ordered_recv(r, t, s);
		return;
	}
	if (t < w - 1) {
		rs_step(r, t, s, true);
		return;
	}
	/* ring AllGather of the reduced blocks: block me first, each forwarded a step later */
	uint32_t u = t - (w - 1);
	uint64_t off, n;
	ar_block(r, (me + w - u) % w, &off, &n);
	set_send(r, s, (me + 1) % w, true, off, n);
	ar_block(r, (me + w - u - 1) % w, &off, &n);
	set_recv(r, s, (me + w - 1) % w, GA_COPY, off, n);
}

static void rooted_step(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	uint32_t w = r->w, me = r->me, root = r->root_pos;
	uint64_t bytes_as_elems = r->count; /* broadcast: esize 1 */
	uint64_t off, n;
	switch (r->kind) {
	case GK_BROADCAST:
		if (r->algo ==
		    KEEL_GALGO_RING) { /* the member d places after the root hears at d-1 */
			uint32_t d = (me + w - root) % w;
			if (t == d && d + 1 < w)
				set_send(r, s, (me + 1) % w, true, 0, bytes_as_elems);
			if (d >= 1 && t == d - 1)
				set_recv(r, s, (me + w - 1) % w, GA_COPY, 0, bytes_as_elems);
		} else if (me == root) {
			set_send(r, s, (root + t + 1) % w, true, 0, bytes_as_elems);
		} else if (t == 0) {
			set_recv(r, s, root, GA_COPY, 0, bytes_as_elems);
		}
		return;
	case GK_REDUCE:
		if (me == root) /* its own first (in place it is the output), the others in order */
			reduce_root_recv(r, t, s);
		else if (t == 0)
			set_send(r, s, root, false, 0, r->count);
		return;
	case GK_GATHER:
		if (me == root && t != root) {
			block(r, NULL, NULL, t, &off, &n);
			set_recv(r, s, t, GA_COPY, off, n);
		} else if (me != root && t == 0) {
			set_send(r, s, root, false, 0, r->count);
		}
		return;
	case GK_SCATTER:
		if (me == root) {
			uint32_t to = (root + t + 1) % w;
			block(r, NULL, NULL, to, &off, &n);
			set_send(r, s, to, false, off, n);
		} else if (t == 0) {
			set_recv(r, s, root, GA_COPY, 0, r->count);
		}
		return;
	default:
		KEEL_ASSERT(false);
	}
}

static void alltoall_step(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	uint32_t w = r->w, me = r->me, to = (me + t + 1) % w, from = (me + w - t - 1) % w;
	uint64_t off, n;
	block(r, r->counts, r->displs, to, &off, &n);
	set_send(r, s, to, false, off, n);
	block(r, r->rcounts, r->rdispls, from, &off, &n);
	set_recv(r, s, from, GA_COPY, off, n);
}

void grp_step(const struct keel_req *r, uint32_t t, struct gstep *s)
{
	KEEL_ASSERT(t < r->step_count);
	memset(s, 0, sizeof(*s));
	s->send_pos = -1;
	s->recv_pos = -1;
	switch (r->kind) {
	case GK_ALLGATHER:
	case GK_SPLIT:
		allgather_step(r, t, s);
		break;
	case GK_REDUCE_SCATTER:
		rs_step(r, t, s, false);
		break;
	case GK_ALLREDUCE:
		allreduce_step(r, t, s);
		break;
	case GK_BROADCAST:
	case GK_REDUCE:
	case GK_GATHER:
	case GK_SCATTER:
		rooted_step(r, t, s);
		break;
	case GK_ALLTOALL:
		alltoall_step(r, t, s);
		break;
	default:
		KEEL_ASSERT(false);
	}
	KEEL_ASSERT(s->send_pos != (int32_t)r->me && s->recv_pos != (int32_t)r->me);
}

/* At a begin: this member's own block goes into the output, where the schedule does not
 * bring it (rank-indexed operations; out of place). */
void grp_plan_begin(struct keel_req *r, enum keel_group_algo algo)
{
	r->algo = algo;
	uint64_t off, n, roff;
	const uint8_t *src = r->in;
	uint8_t *dst = NULL;
	switch (r->kind) {
	case GK_ALLGATHER:
	case GK_SPLIT:
		block(r, r->counts, r->displs, r->me, &off, &n);
		dst = r->out + off * r->esize;
		break;
	case GK_REDUCE_SCATTER:
		block(r, r->counts, NULL, r->me, &off, &n);
		src = r->in + off * r->esize;
		dst = r->out;
		break;
	case GK_ALLREDUCE:
		if (algo == KEEL_GALGO_DIRECT)
			return; /* the first contribution is copied at its turn */
		if (algo == KEEL_GALGO_RD) {
			off = 0; /* each step reduces into the output: it starts as the input */
			n = r->count;
		} else {
			ar_block(r, r->me, &off, &n);
		}
		src = r->in + off * r->esize;
		dst = r->out + off * r->esize;
		break;
	case GK_GATHER:
		if (r->me != r->root_pos)
			return;
		block(r, NULL, NULL, r->me, &off, &n);
		dst = r->out + off * r->esize;
		break;
	case GK_SCATTER:
		if (r->me != r->root_pos)
			return;
		block(r, NULL, NULL, r->me, &off, &n);
		src = r->in + off * r->esize;
		dst = r->out;
		break;
	case GK_ALLTOALL:
		block(r, r->counts, r->displs, r->me, &off, &n);
		src = r->in + off * r->esize;
		block(r, r->rcounts, r->rdispls, r->me, &roff, &n);
		dst = r->out + roff * r->esize;
		break;
	default:
		return;
	}
	if (n != 0 && dst != src)
		memmove(dst, src, (size_t)(n * r->esize));
}
