/* The group operations' entry points (keel/group.h): argument checks, then a request in the
 * group's stream (group.c) that the engine runs (group_engine.c). */
#include <string.h>

#include "assert_int.h"
#include "group_int.h"

static bool spans_meet(const void *a, size_t alen, const void *b, size_t blen)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return alen != 0 && blen != 0 && x < y + blen && y < x + alen;
}

/* Common checks: the group, dtype, op (reductions), buffers present where there are bytes. */
static int args(const struct keel_group *g, struct keel_req **req, enum keel_dtype dt, int op,
		const void *send, size_t send_bytes, const void *recv, size_t recv_bytes)
{
	int rc = grp_check(g, req);
	if (rc != 0)
		return rc;
	if ((unsigned)dt >= KEEL_DTYPE_COUNT || (op >= 0 && op >= KEEL_REDOP_COUNT))
		return -EINVAL;
	if ((send == NULL && send_bytes != 0) || (recv == NULL && recv_bytes != 0))
		return -EINVAL;
	return 0;
}

static int start(struct keel_group *g, struct keel_req *r, struct keel_req **req)
{
	if (r == NULL)
		return -EBUSY;
	int rc = grp_dev_prepare(g, r);
	if (rc != 0) {
		grp_req_cancel(g, r);
		return rc;
	}
	*req = r;
	grp_advance(g);
	return 0;
}

/* The blocking forms: the start call must have returned (and set r) before r is read, so
 * it is never an argument beside r (C leaves their order open). */
/* A blocking form needs the node's waiter: checked before anything starts. */
static bool waits(const struct keel_group *g)
{
	return valid_size(g) != 0 && g->node->cfg.waiter.now_ns != NULL &&
	       g->node->cfg.waiter.wait != NULL;
}

static int wait_new(int rc, struct keel_req *r)
{
	return rc != 0 ? rc : keel_req_wait(r, NULL);
}

/* Is `send` this member's block of `recv` (in place) or clear of it? */
static bool in_place_or_apart(const void *send, size_t sbytes, const void *recv, size_t rbytes,
			      size_t own_off)
{
	return send == (const uint8_t *)recv + own_off || !spans_meet(send, sbytes, recv, rbytes);
}

int keel_group_allgather_start(struct keel_group *g, const void *send, void *recv, size_t count,
			       enum keel_dtype dtype, struct keel_req **req)
{
	size_t es = keel_dtype_size(dtype), w = valid_size(g);
	int rc = args(g, req, dtype, -1, send, count * es, recv, count * es * w);
	if (rc != 0)
		return rc;
	if (!in_place_or_apart(send, count * es, recv, count * es * w, count * es * g->self_pos))
		return -EINVAL;
	return start(g, grp_req_new(g, GK_ALLGATHER, send, recv, count, dtype, KEEL_SUM), req);
}

int keel_group_allgather(struct keel_group *g, const void *send, void *recv, size_t count,
			 enum keel_dtype dtype)
{
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_allgather_start(g, send, recv, count, dtype, &r);
	return wait_new(rc, r);
}

/* V forms: the regions each member's block takes must lie apart. */
static bool blocks_apart(const size_t *counts, const size_t *displs, uint32_t w)
{
	for (uint32_t i = 0; i < w; i++)
		for (uint32_t j = i + 1; j < w; j++)
			if (counts[i] != 0 && counts[j] != 0 && displs[i] < displs[j] + counts[j] &&
			    displs[j] < displs[i] + counts[i])
				return false;
	return true;
}

static size_t v_extent(const size_t *counts, const size_t *displs, uint32_t w)
{
	size_t end = 0;
	for (uint32_t i = 0; i < w; i++)
		if (counts[i] != 0 && (displs != NULL ? displs[i] : 0) + counts[i] > end)
			end = (displs != NULL ? displs[i] : 0) + counts[i];
	return end;
}

int keel_group_allgatherv_start(struct keel_group *g, const void *send, void *recv,
				const size_t *counts, const size_t *displs, enum keel_dtype dtype,
				struct keel_req **req)
{
	int rc = grp_check(g, req);
	if (rc != 0)
		return rc;
	if (counts == NULL || displs == NULL || !blocks_apart(counts, displs, g->size))
		return -EINVAL;
	size_t es = keel_dtype_size(dtype), mine = counts[g->self_pos] * es;
	size_t total = v_extent(counts, displs, g->size) * es;
	rc = args(g, req, dtype, -1, send, mine, recv, total);
	if (rc != 0)
		return rc;
	if (!in_place_or_apart(send, mine, recv, total, displs[g->self_pos] * es))
		return -EINVAL;
	struct keel_req *r = grp_req_new(g, GK_ALLGATHER, send, recv, 0, dtype, KEEL_SUM);
	if (r != NULL) {
		r->counts = counts;
		r->displs = displs;
	}
	return start(g, r, req);
}

static int rs_start(struct keel_group *g, const void *send, void *recv, size_t count,
		    const size_t *counts, enum keel_dtype dtype, enum keel_redop op,
		    struct keel_req **req)
{
	int rc = grp_check(g, req);
	if (rc != 0)
		return rc;
	size_t es = keel_dtype_size(dtype), total = 0, off = 0, mine = count;
	for (uint32_t i = 0; i < g->size; i++) {
		size_t c = counts != NULL ? counts[i] : count;
		if (i == g->self_pos) {
			off = total;
			mine = c;
		}
		total += c;
	}
	rc = args(g, req, dtype, (int)op, send, total * es, recv, mine * es);
	if (rc != 0)
		return rc;
	if (recv != (const uint8_t *)send + off * es &&
	    spans_meet(send, total * es, recv, mine * es))
		return -EINVAL;
	struct keel_req *r = grp_req_new(g, GK_REDUCE_SCATTER, send, recv, count, dtype, op);
	if (r != NULL)
		r->counts = counts;
	return start(g, r, req);
}

int keel_group_reduce_scatter_start(struct keel_group *g, const void *send, void *recv,
				    size_t count, enum keel_dtype dtype, enum keel_redop op,
				    struct keel_req **req)
{
	return rs_start(g, send, recv, count, NULL, dtype, op, req);
}

int keel_group_reduce_scatter(struct keel_group *g, const void *send, void *recv, size_t count,
			      enum keel_dtype dtype, enum keel_redop op)
{
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = rs_start(g, send, recv, count, NULL, dtype, op, &r);
	return wait_new(rc, r);
}

int keel_group_reduce_scatterv_start(struct keel_group *g, const void *send, void *recv,
				     const size_t *counts, enum keel_dtype dtype,
				     enum keel_redop op, struct keel_req **req)
{
	if (counts == NULL)
		return -EINVAL;
	return rs_start(g, send, recv, 0, counts, dtype, op, req);
}

int keel_group_allreduce_start(struct keel_group *g, const void *send, void *recv, size_t count,
			       enum keel_dtype dtype, enum keel_redop op, struct keel_req **req)
{
	size_t bytes = count * keel_dtype_size(dtype);
	int rc = args(g, req, dtype, (int)op, send, bytes, recv, bytes);
	if (rc != 0)
		return rc;
	if (send != recv && spans_meet(send, bytes, recv, bytes))
		return -EINVAL;
	return start(g, grp_req_new(g, GK_ALLREDUCE, send, recv, count, dtype, op), req);
}

int keel_group_allreduce(struct keel_group *g, const void *send, void *recv, size_t count,
			 enum keel_dtype dtype, enum keel_redop op)
{
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_allreduce_start(g, send, recv, count, dtype, op, &r);
	return wait_new(rc, r);
}

/* Rooted operations: the root is a group rank now, kept as a job rank. */
static int rooted(struct keel_group *g, enum gop_kind kind, const void *send, void *recv,
		  size_t count, enum keel_dtype dt, enum keel_redop op, uint32_t root,
		  struct keel_req **req)
{
	if (root >= g->size)
		return -EINVAL;
	struct keel_req *r = grp_req_new(g, kind, send, recv, count, dt, op);
	if (r != NULL)
		r->root_rank = g->ranks[root];
	return start(g, r, req);
}

int keel_group_broadcast_start(struct keel_group *g, uint32_t root, void *buf, size_t bytes,
			       struct keel_req **req)
{
	int rc = args(g, req, KEEL_U8, -1, buf, bytes, buf, bytes);
	return rc != 0 ? rc
		       : rooted(g, GK_BROADCAST, buf, buf, bytes, KEEL_U8, KEEL_SUM, root, req);
}

int keel_group_broadcast(struct keel_group *g, uint32_t root, void *buf, size_t bytes)
{
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_broadcast_start(g, root, buf, bytes, &r);
	return wait_new(rc, r);
}

int keel_group_reduce_start(struct keel_group *g, const void *send, void *recv, size_t count,
			    enum keel_dtype dtype, enum keel_redop op, uint32_t root,
			    struct keel_req **req)
{
	size_t bytes = count * keel_dtype_size(dtype);
	bool at_root = valid_size(g) != 0 && root == g->self_pos;
	int rc =
	    args(g, req, dtype, (int)op, send, bytes, at_root ? recv : NULL, at_root ? bytes : 0);
	if (rc != 0)
		return rc;
	if (at_root && send != recv && spans_meet(send, bytes, recv, bytes))
		return -EINVAL;
	return rooted(g, GK_REDUCE, send, recv, count, dtype, op, root, req);
}

int keel_group_gather_start(struct keel_group *g, const void *send, void *recv, size_t count,
			    enum keel_dtype dtype, uint32_t root, struct keel_req **req)
{
	size_t bytes = count * keel_dtype_size(dtype), w = valid_size(g);
	bool at_root = w != 0 && root == g->self_pos;
	int rc =
	    args(g, req, dtype, -1, send, bytes, at_root ? recv : NULL, at_root ? bytes * w : 0);
	if (rc != 0)
		return rc;
	if (at_root && !in_place_or_apart(send, bytes, recv, bytes * w, bytes * g->self_pos))
		return -EINVAL;
	return rooted(g, GK_GATHER, send, recv, count, dtype, KEEL_SUM, root, req);
}

int keel_group_scatter_start(struct keel_group *g, const void *send, void *recv, size_t count,
			     enum keel_dtype dtype, uint32_t root, struct keel_req **req)
{
	size_t bytes = count * keel_dtype_size(dtype), w = valid_size(g);
	bool at_root = w != 0 && root == g->self_pos;
	int rc =
	    args(g, req, dtype, -1, at_root ? send : NULL, at_root ? bytes * w : 0, recv, bytes);
	if (rc != 0)
		return rc;
	if (at_root && !in_place_or_apart(recv, bytes, send, bytes * w, bytes * g->self_pos))
		return -EINVAL;
	return rooted(g, GK_SCATTER, send, recv, count, dtype, KEEL_SUM, root, req);
}

int keel_group_alltoall_start(struct keel_group *g, const void *send, void *recv, size_t count,
			      enum keel_dtype dtype, struct keel_req **req)
{
	size_t bytes = count * keel_dtype_size(dtype) * valid_size(g);
	int rc = args(g, req, dtype, -1, send, bytes, recv, bytes);
	if (rc != 0)
		return rc;
	if (spans_meet(send, bytes, recv, bytes))
		return -EINVAL;
	return start(g, grp_req_new(g, GK_ALLTOALL, send, recv, count, dtype, KEEL_SUM), req);
}

int keel_group_alltoall(struct keel_group *g, const void *send, void *recv, size_t count,
			enum keel_dtype dtype)
{
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_alltoall_start(g, send, recv, count, dtype, &r);
	return wait_new(rc, r);
}

int keel_group_alltoallv_start(struct keel_group *g, const void *send, const size_t *send_counts,
			       const size_t *send_displs, void *recv, const size_t *recv_counts,
			       const size_t *recv_displs, enum keel_dtype dtype,
			       struct keel_req **req)
{
	int rc = grp_check(g, req);
	if (rc != 0)
		return rc;
	if (send_counts == NULL || send_displs == NULL || recv_counts == NULL ||
	    recv_displs == NULL || !blocks_apart(recv_counts, recv_displs, g->size))
		return -EINVAL;
	size_t es = keel_dtype_size(dtype);
	size_t sb = v_extent(send_counts, send_displs, g->size) * es;
	size_t rb = v_extent(recv_counts, recv_displs, g->size) * es;
	rc = args(g, req, dtype, -1, send, sb, recv, rb);
	if (rc != 0)
		return rc;
	if (spans_meet(send, sb, recv, rb))
		return -EINVAL;
	struct keel_req *r = grp_req_new(g, GK_ALLTOALL, send, recv, 0, dtype, KEEL_SUM);
	if (r != NULL) {
		r->counts = send_counts;
		r->displs = send_displs;
		r->rcounts = recv_counts;
		r->rdispls = recv_displs;
	}
	return start(g, r, req);
}

int keel_group_barrier_start(struct keel_group *g, struct keel_req **req)
{
	int rc = grp_check(g, req);
	return rc != 0
		   ? rc
		   : start(g, grp_req_new(g, GK_BARRIER, NULL, NULL, 0, KEEL_U8, KEEL_SUM), req);
}

int keel_group_barrier(struct keel_group *g)
{
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_barrier_start(g, &r);
	return wait_new(rc, r);
}

/* ---- splits ---- */

int keel_group_split_start(struct keel_group *parent, uint32_t color, uint32_t key, void *mem,
			   size_t len, struct keel_group **out, struct keel_req **req)
{
	return grp_split_start(parent, color, key, 0, mem, len, out, req);
}

int keel_group_split(struct keel_group *parent, uint32_t color, uint32_t key, void *mem, size_t len,
		     struct keel_group **out)
{
	struct keel_req *r = NULL;
	if (!waits(parent))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = grp_split_start(parent, color, key, 0, mem, len, out, &r);
	return wait_new(rc, r);
}

int keel_group_from_ranks(struct keel_group *parent, const uint32_t *ranks, uint32_t count,
			  void *mem, size_t len, struct keel_group **out)
{
	if (valid_size(parent) == 0 || ranks == NULL || count == 0)
		return -EINVAL;
	uint32_t hash = 2166136261u, key = KEEL_COLOR_NONE;
	for (uint32_t i = 0; i < count; i++) {
		if (grp_pos_of(parent, ranks[i]) == UINT32_MAX)
			return -EINVAL; /* not a member of the parent */
		for (uint32_t j = 0; j < i; j++)
			if (ranks[j] == ranks[i])
				return -EINVAL; /* listed twice */
		hash = (hash ^ ranks[i]) * 16777619u;
		if (ranks[i] == parent->node->self)
			key = i;
	}
	hash |= 1u; /* never 0, which means "no list" */
	uint32_t color = key == KEEL_COLOR_NONE ? KEEL_COLOR_NONE : 0;
	struct keel_req *r = NULL;
	if (!waits(parent))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = grp_split_start(parent, color, key, hash, mem, len, out, &r);
	return wait_new(rc, r);
}

/* ---- point to point ---- */

int keel_group_p2p_start(struct keel_group *g, const struct keel_p2p *items, uint32_t count,
			 struct keel_req **req)
{
	int rc = grp_check(g, req);
	if (rc != 0)
		return rc;
	if (items == NULL || count == 0 || count > KEEL_P2P_BATCH_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if ((unsigned)items[i].kind > KEEL_P2P_RECV || items[i].peer >= g->size ||
		    items[i].peer == g->self_pos || (items[i].buf == NULL && items[i].bytes != 0) ||
		    items[i].bytes > UINT32_MAX)
			return -EINVAL;
	return grp_p2p_launch(g, items, count, req);
}

int keel_group_send(struct keel_group *g, uint32_t peer, const void *buf, size_t bytes,
		    uint32_t tag)
{
	struct keel_p2p it = {KEEL_P2P_SEND, peer, (void *)(uintptr_t)buf, bytes, tag};
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_p2p_start(g, &it, 1, &r);
	return wait_new(rc, r);
}

int keel_group_recv(struct keel_group *g, uint32_t peer, void *buf, size_t bytes, uint32_t tag)
{
	struct keel_p2p it = {KEEL_P2P_RECV, peer, buf, bytes, tag};
	struct keel_req *r = NULL;
	if (!waits(g))
		return -EINVAL; /* refused before it takes a place in the stream */
	int rc = keel_group_p2p_start(g, &it, 1, &r);
	return wait_new(rc, r);
}
