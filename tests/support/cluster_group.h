/* Test scaffolding for the group operations of keel/group.h over the in-process cluster
 * (cluster_int.h): each operation set up at every member of one or more groups with inputs
 * that name their sender and position, started, and its result checked bit for bit against
 * a reference computed here, with guard bytes around every buffer. Include cmocka.h first. */
#ifndef KEEL_TEST_CLUSTER_GROUP_H
#define KEEL_TEST_CLUSTER_GROUP_H

#include "cluster_int.h"
#include "guarded_mem.h"
#include "keel/device.h"
#include "refcheck.h"

#define GROUP_GUARD 64 /* bytes checked on each side of every buffer */

enum gop {
	GOP_ALLGATHER = 0,
	GOP_ALLGATHERV,
	GOP_REDUCE_SCATTER,
	GOP_REDUCE_SCATTERV,
	GOP_ALLREDUCE,
	GOP_BROADCAST,
	GOP_REDUCE,
	GOP_GATHER,
	GOP_SCATTER,
	GOP_ALLTOALL,
	GOP_ALLTOALLV,
	GOP_BARRIER,
	GOP_P2P_RING,  /* a batch: receive from the previous member, send to the next, twice */
	GOP_P2P_PAIRS, /* a batch: an AllToAllV written by hand with sends and receives */
	GOP_COUNT
};

static const char *const gop_names[GOP_COUNT] = {
    "allgather", "allgatherv", "reduce_scatter", "reduce_scatterv", "allreduce",
    "broadcast", "reduce",     "gather",	 "scatter",	    "alltoall",
    "alltoallv", "barrier",    "p2p_ring",	 "p2p_pairs",
};

static inline bool gop_is_reduction(enum gop op)
{
	return op == GOP_REDUCE_SCATTER || op == GOP_REDUCE_SCATTERV || op == GOP_ALLREDUCE ||
	       op == GOP_REDUCE;
}

static inline bool gop_is_rooted(enum gop op)
{
	return op == GOP_BROADCAST || op == GOP_REDUCE || op == GOP_GATHER || op == GOP_SCATTER;
}

/* Rank-indexed results (group.h): fail with KEEL_EVIEWCHANGED rather than shift. */
static inline bool gop_is_rank_indexed(enum gop op)
{
	return op == GOP_ALLGATHER || op == GOP_ALLGATHERV || op == GOP_REDUCE_SCATTER ||
	       op == GOP_REDUCE_SCATTERV || op == GOP_GATHER || op == GOP_SCATTER ||
	       op == GOP_ALLTOALL || op == GOP_ALLTOALLV;
}

/* In place as group.h defines it for the operation (AllToAll is never; the V forms of
 * ReduceScatter, Reduce, Gather and Scatter say nothing of it, so they are run out of place). */
static inline bool gop_has_in_place(enum gop op)
{
	return op == GOP_ALLGATHER || op == GOP_ALLGATHERV || op == GOP_REDUCE_SCATTER ||
	       op == GOP_ALLREDUCE;
}

static inline bool gop_is_p2p(enum gop op)
{
	return op == GOP_P2P_RING || op == GOP_P2P_PAIRS;
}

struct gop_spec {
	enum gop op;
	enum keel_dtype dt;
	enum keel_redop redop;
	size_t count; /* elements per member block (per message for p2p) */
	bool in_place;
	uint32_t root;	  /* a group rank; taken modulo each group's size */
	uint64_t salt;	  /* makes each run's bytes its own: a stale result cannot pass */
	bool null_others; /* rooted: members other than the root pass NULL where they may */
	bool check_algo;  /* keel_req_info.algo must be `algo` at every member */
	enum keel_group_algo algo;
};

/* A buffer with GROUP_GUARD bytes on either side; `data` is what the operation gets. */
struct gbuf {
	uint8_t *base, *pre; /* the allocation, and its image before the operation */
	uint8_t *data;
	size_t len;
};

/* One member's part in one run. */
struct gmember {
	struct keel_group *g; /* NULL: this rank takes no part */
	uint32_t n, me, root; /* group size, group rank and root at the start */
	uint32_t members[CLUSTER_MAX];
	struct gbuf a, b; /* a: a separate input (len 0: none); b: the result, or in place */
	const void *send;
	void *recv;
	size_t src_off; /* where this member's input lies in a (out of place) or b (in place) */
	bool src_in_b;
	size_t counts[CLUSTER_MAX], displs[CLUSTER_MAX]; /* V forms */
	size_t scounts[CLUSTER_MAX], sdispls[CLUSTER_MAX], rcounts[CLUSTER_MAX],
	    rdispls[CLUSTER_MAX];
	struct keel_p2p items[KEEL_P2P_BATCH_MAX];
	uint32_t item_count;
	struct keel_req *req;
};

struct grun {
	struct gop_spec s;
	uint32_t world;
	struct gmember m[CLUSTER_MAX]; /* indexed by job rank */
};

static inline uint64_t grun_mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x9E3779B97F4A7C15ull;
	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return x ^ (x >> 32);
}

/* Bytes that name their writer (job rank), the run and their position. */
static inline void grun_pattern(uint8_t *p, size_t len, uint32_t who, uint64_t salt)
{
	uint64_t s = grun_mix(salt * 131 + who + 1);
	for (size_t i = 0; i < len; i++) {
		if (i % 8 == 0)
			s = grun_mix(s + i);
		p[i] = (uint8_t)(s >> (8 * (i % 8)));
	}
}

static inline void gbuf_alloc(struct gbuf *b, size_t len, uint32_t who, uint64_t salt)
{
	b->len = len;
	b->base = malloc(len + 2 * GROUP_GUARD);
	b->pre = malloc(len + 2 * GROUP_GUARD);
	assert_non_null(b->base);
	assert_non_null(b->pre);
	b->data = b->base + GROUP_GUARD;
	/* guards and unwritten parts hold bytes no operation would produce: a "sentinel" that
	 * names the owner, distinct from every input */
	grun_pattern(b->base, len + 2 * GROUP_GUARD, who + 1000, salt ^ 0x5A5A);
}

static inline void gbuf_free(struct gbuf *b)
{
	free(b->base);
	free(b->pre);
	memset(b, 0, sizeof(*b));
}

/* Blocks of the V forms: some smaller, some larger, some empty, never all alike. */
static inline size_t grun_vcount(size_t count, uint32_t i)
{
	return i % 3 == 1 ? count / 2 : count + i;
}

/* AllToAllV: elements group rank i sends group rank j. */
static inline size_t grun_a2av(size_t count, uint32_t i, uint32_t j)
{
	switch ((i + 2 * j) % 3) {
	case 0:
		return count;
	case 1:
		return count / 2;
	default:
		return count + 1 + (i + j) % 2;
	}
}

/* Blocks laid out back to front with an element's gap between them (the gaps must stay as
 * they were); returns the span in elements. */
static inline size_t grun_layout_reversed(const size_t *counts, size_t *displs, uint32_t n)
{
	size_t at = 1;
	for (uint32_t i = n; i-- > 0;) {
		displs[i] = at;
		at += counts[i] + 1;
	}
	return at;
}

static inline size_t grun_layout_forward(const size_t *counts, size_t *displs, uint32_t n)
{
	size_t at = 0;
	for (uint32_t i = 0; i < n; i++) {
		displs[i] = at;
		at += counts[i] + 2;
	}
	return at;
}

/* This member's input: `len` bytes of its pattern, or refcheck's exact values for a
 * reduction (element i of job rank `job`: what the reference recomputes). */
static inline void grun_input(struct gbuf *b, size_t off, size_t elems, uint32_t job,
			      const struct gop_spec *s)
{
	size_t es = keel_dtype_size(s->dt);
	if (gop_is_reduction(s->op))
		keel_check_fill(b->data + off, 0, elems, job, s->dt, s->redop);
	else
		grun_pattern(b->data + off, elems * es, job, s->salt);
}

/* The gathering forms: AllGather(V), Gather, Broadcast. */
static inline void grun_setup_gather(struct gmember *m, uint32_t job, const struct gop_spec *s)
{
	size_t es = keel_dtype_size(s->dt), c = s->count, n = m->n, mine = c, span = n * c;
	bool root = m->me == m->root;
	if (s->op == GOP_ALLGATHERV) {
		for (uint32_t i = 0; i < m->n; i++)
			m->counts[i] = grun_vcount(c, i);
		span = grun_layout_reversed(m->counts, m->displs, m->n);
		mine = m->counts[m->me];
	}
	if (s->op == GOP_BROADCAST) {
		gbuf_alloc(&m->b, c * es, job, s->salt);
		if (root)
			grun_input(&m->b, 0, c, job, s);
		m->src_in_b = true;
		m->recv = m->b.data;
		return;
	}
	bool want_recv = s->op != GOP_GATHER || root || !s->null_others;
	gbuf_alloc(&m->b, want_recv ? span * es : 0, job, s->salt);
	m->recv = want_recv ? m->b.data : NULL;
	if (s->in_place && gop_has_in_place(s->op)) {
		m->src_in_b = true;
		m->src_off = (s->op == GOP_ALLGATHERV ? m->displs[m->me] : m->me * c) * es;
		grun_input(&m->b, m->src_off, mine, job, s);
		m->send = m->b.data + m->src_off;
		return;
	}
	gbuf_alloc(&m->a, mine * es, job, s->salt);
	grun_input(&m->a, 0, mine, job, s);
	m->send = m->a.data;
}

/* The reductions: ReduceScatter(V), AllReduce, Reduce. */
static inline void grun_setup_reduce(struct gmember *m, uint32_t job, const struct gop_spec *s)
{
	size_t es = keel_dtype_size(s->dt), c = s->count, total = c, mine = c, off = 0;
	if (s->op == GOP_REDUCE_SCATTER) {
		total = m->n * c;
		off = m->me * c;
	} else if (s->op == GOP_REDUCE_SCATTERV) {
		total = 0;
		for (uint32_t i = 0; i < m->n; i++) {
			m->counts[i] = grun_vcount(c, i);
			if (i < m->me)
				off += m->counts[i];
			total += m->counts[i];
		}
		mine = m->counts[m->me];
	}
	if (s->in_place && gop_has_in_place(s->op)) {
		gbuf_alloc(&m->b, total * es, job, s->salt);
		grun_input(&m->b, 0, total, job, s);
		m->src_in_b = true;
		m->send = m->b.data;
		m->recv = m->b.data + (s->op == GOP_ALLREDUCE ? 0 : off * es);
		return;
	}
	gbuf_alloc(&m->a, total * es, job, s->salt);
	grun_input(&m->a, 0, total, job, s);
	m->send = m->a.data;
	bool want_recv = s->op != GOP_REDUCE || m->me == m->root || !s->null_others;
	gbuf_alloc(&m->b, want_recv ? mine * es : 0, job, s->salt);
	m->recv = want_recv ? m->b.data : NULL;
}

/* Scatter and AllToAll(V), and the point-to-point batches. */
static inline void grun_setup_exchange(struct gmember *m, uint32_t job, const struct gop_spec *s)
{
	size_t es = keel_dtype_size(s->dt), c = s->count, n = m->n;
	if (s->op == GOP_SCATTER) {
		bool want_send = m->me == m->root || !s->null_others;
		gbuf_alloc(&m->a, want_send ? n * c * es : 0, job, s->salt);
		grun_input(&m->a, 0, want_send ? n * c : 0, job, s);
		m->send = want_send ? m->a.data : NULL;
		gbuf_alloc(&m->b, c * es, job, s->salt);
		m->recv = m->b.data;
		return;
	}
	if (s->op == GOP_ALLTOALL) {
		gbuf_alloc(&m->a, n * c * es, job, s->salt);
		grun_input(&m->a, 0, n * c, job, s);
		gbuf_alloc(&m->b, n * c * es, job, s->salt);
		m->send = m->a.data;
		m->recv = m->b.data;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		m->scounts[i] = grun_a2av(c, m->me, i);
		m->rcounts[i] = grun_a2av(c, i, m->me);
	}
	size_t sspan = grun_layout_reversed(m->scounts, m->sdispls, m->n);
	size_t rspan = grun_layout_forward(m->rcounts, m->rdispls, m->n);
	gbuf_alloc(&m->a, sspan * es, job, s->salt);
	grun_input(&m->a, 0, sspan, job, s);
	gbuf_alloc(&m->b, rspan * es, job, s->salt);
	m->send = m->a.data;
	m->recv = m->b.data;
}

/* The batches. Receives come first in each batch: issued one by one in that order, every
 * member would wait in its first receive for a peer waiting in its own (a deadlock). */
static inline void grun_setup_p2p(struct gmember *m, uint32_t job, const struct gop_spec *s)
{
	size_t es = keel_dtype_size(s->dt), c = s->count;
	uint32_t n = m->n, me = m->me, k = 0;
	if (s->op == GOP_P2P_PAIRS) {
		grun_setup_exchange(m, job, s);
		for (uint32_t i = 0; i < n; i++)
			if (i != me)
				m->items[k++] = (struct keel_p2p){
				    KEEL_P2P_RECV, i, m->b.data + m->rdispls[i] * es,
				    m->rcounts[i] * es, 100 + i * 64 + me};
		for (uint32_t j = n; j-- > 0;)
			if (j != me)
				m->items[k++] = (struct keel_p2p){
				    KEEL_P2P_SEND, j, m->a.data + m->sdispls[j] * es,
				    m->scounts[j] * es, 100 + me * 64 + j};
		m->item_count = k;
		return;
	}
	size_t s1 = c * es, s2 = (c / 2 + 1) * es;
	uint32_t prev = (me + n - 1) % n, next = (me + 1) % n,
		 tag = (uint32_t)(s->salt & 0xffff) * 2;
	gbuf_alloc(&m->a, s1 + s2, job, s->salt);
	grun_pattern(m->a.data, s1 + s2, job, s->salt);
	gbuf_alloc(&m->b, s1 + s2, job, s->salt);
	m->items[0] = (struct keel_p2p){KEEL_P2P_RECV, prev, m->b.data, s1, tag};
	m->items[1] = (struct keel_p2p){KEEL_P2P_RECV, prev, m->b.data + s1, s2, tag + 1};
	m->items[2] = (struct keel_p2p){KEEL_P2P_SEND, next, m->a.data, s1, tag};
	m->items[3] = (struct keel_p2p){KEEL_P2P_SEND, next, m->a.data + s1, s2, tag + 1};
	m->item_count = 4;
}

static inline void grun_setup_member(struct gmember *m, struct keel_group *g, uint32_t job,
				     const struct gop_spec *s)
{
	struct keel_group_info gi;
	memset(m, 0, sizeof(*m));
	m->g = g;
	int cnt = keel_group_info(g, &gi, m->members, CLUSTER_MAX);
	assert_true(cnt > 0);
	assert_int_equal((uint32_t)cnt, gi.size);
	assert_int_equal(m->members[gi.rank], job);
	m->n = gi.size;
	m->me = gi.rank;
	m->root = s->root % m->n;
	switch (s->op) {
	case GOP_ALLGATHER:
	case GOP_ALLGATHERV:
	case GOP_GATHER:
	case GOP_BROADCAST:
		grun_setup_gather(m, job, s);
		break;
	case GOP_REDUCE_SCATTER:
	case GOP_REDUCE_SCATTERV:
	case GOP_ALLREDUCE:
	case GOP_REDUCE:
		grun_setup_reduce(m, job, s);
		break;
	case GOP_SCATTER:
	case GOP_ALLTOALL:
	case GOP_ALLTOALLV:
		grun_setup_exchange(m, job, s);
		break;
	case GOP_P2P_RING:
	case GOP_P2P_PAIRS:
		grun_setup_p2p(m, job, s);
		break;
	default: /* the barrier moves no data */
		gbuf_alloc(&m->a, 0, job, s->salt);
		gbuf_alloc(&m->b, 0, job, s->salt);
		break;
	}
	if (m->a.base == NULL)
		gbuf_alloc(&m->a, 0, job, s->salt);
	memcpy(m->a.pre, m->a.base, m->a.len + 2 * GROUP_GUARD);
	memcpy(m->b.pre, m->b.base, m->b.len + 2 * GROUP_GUARD);
}

/* Set up `s` at every rank r with groups[r] != NULL that is not paused (a dead process takes
 * part in nothing); each in its own group: several groups may run at once. */
static inline void grun_setup(struct grun *run, const struct cluster *c,
			      struct keel_group *const *groups, const struct gop_spec *s)
{
	memset(run, 0, sizeof(*run));
	run->s = *s;
	run->world = c->world;
	for (uint32_t r = 0; r < c->world; r++)
		if (groups[r] != NULL && !c->paused[r])
			grun_setup_member(&run->m[r], groups[r], r, s);
}

static inline int grun_start(struct grun *run, uint32_t r)
{
	struct gmember *m = &run->m[r];
	const struct gop_spec *s = &run->s;
	struct keel_group *g = m->g;
	switch (s->op) {
	case GOP_ALLGATHER:
		return keel_group_allgather_start(g, m->send, m->recv, s->count, s->dt, &m->req);
	case GOP_ALLGATHERV:
		return keel_group_allgatherv_start(g, m->send, m->recv, m->counts, m->displs, s->dt,
						   &m->req);
	case GOP_REDUCE_SCATTER:
		return keel_group_reduce_scatter_start(g, m->send, m->recv, s->count, s->dt,
						       s->redop, &m->req);
	case GOP_REDUCE_SCATTERV:
		return keel_group_reduce_scatterv_start(g, m->send, m->recv, m->counts, s->dt,
							s->redop, &m->req);
	case GOP_ALLREDUCE:
		return keel_group_allreduce_start(g, m->send, m->recv, s->count, s->dt, s->redop,
						  &m->req);
	case GOP_BROADCAST:
		return keel_group_broadcast_start(g, m->root, m->recv,
						  s->count * keel_dtype_size(s->dt), &m->req);
	case GOP_REDUCE:
		return keel_group_reduce_start(g, m->send, m->recv, s->count, s->dt, s->redop,
					       m->root, &m->req);
	case GOP_GATHER:
		return keel_group_gather_start(g, m->send, m->recv, s->count, s->dt, m->root,
					       &m->req);
	case GOP_SCATTER:
		return keel_group_scatter_start(g, m->send, m->recv, s->count, s->dt, m->root,
						&m->req);
	case GOP_ALLTOALL:
		return keel_group_alltoall_start(g, m->send, m->recv, s->count, s->dt, &m->req);
	case GOP_ALLTOALLV:
		return keel_group_alltoallv_start(g, m->send, m->scounts, m->sdispls, m->recv,
						  m->rcounts, m->rdispls, s->dt, &m->req);
	case GOP_BARRIER:
		return keel_group_barrier_start(g, &m->req);
	default:
		return keel_group_p2p_start(g, m->items, m->item_count, &m->req);
	}
}

/* The blocking form where group.h has one, else *_start and keel_req_wait. */
static inline int grun_call_blocking(struct grun *run, uint32_t r)
{
	struct gmember *m = &run->m[r];
	const struct gop_spec *s = &run->s;
	struct keel_group *g = m->g;
	switch (s->op) {
	case GOP_ALLGATHER:
		return keel_group_allgather(g, m->send, m->recv, s->count, s->dt);
	case GOP_REDUCE_SCATTER:
		return keel_group_reduce_scatter(g, m->send, m->recv, s->count, s->dt, s->redop);
	case GOP_ALLREDUCE:
		return keel_group_allreduce(g, m->send, m->recv, s->count, s->dt, s->redop);
	case GOP_BROADCAST:
		return keel_group_broadcast(g, m->root, m->recv, s->count * keel_dtype_size(s->dt));
	case GOP_ALLTOALL:
		return keel_group_alltoall(g, m->send, m->recv, s->count, s->dt);
	case GOP_BARRIER:
		return keel_group_barrier(g);
	default: {
		int rc = grun_start(run, r);
		if (rc != 0)
			return rc;
		struct keel_req *req = m->req;
		m->req = NULL;
		return keel_req_wait(req, NULL);
	}
	}
}

static inline void grun_free(struct grun *run)
{
	for (uint32_t r = 0; r < CLUSTER_MAX; r++) {
		gbuf_free(&run->m[r].a);
		gbuf_free(&run->m[r].b);
	}
}

/* Where member (job rank) k's input was, in its image from before the operation. */
static inline const uint8_t *grun_src_pre(const struct grun *run, uint32_t k)
{
	const struct gmember *m = &run->m[k];
	return (m->src_in_b ? m->b.pre : m->a.pre) + GROUP_GUARD + m->src_off;
}

/* The reduction over job ranks ran[0..ran_count) of elements [0, total), as refcheck
 * defines it (the caller frees it). */
static inline uint8_t *grun_reference(const struct gop_spec *s, size_t total, const uint32_t *ran,
				      uint32_t ran_count)
{
	uint8_t *ref = malloc(total * keel_dtype_size(s->dt) + 1);
	assert_non_null(ref);
	if (total > 0)
		keel_check_reference_members(ref, 0, total, ran, ran_count, s->dt, s->redop);
	return ref;
}

/* What member r's result buffer (b, guards included) must hold once the operation completed
 * over job ranks ran[0..ran_count); care[i] 0 where any byte is allowed (the other blocks of
 * an in-place ReduceScatter). */
static inline void grun_expect_reduce(const struct grun *run, uint32_t r, const uint32_t *ran,
				      uint32_t ran_count, uint8_t *exp, uint8_t *care)
{
	const struct gmember *m = &run->m[r];
	const struct gop_spec *s = &run->s;
	size_t es = keel_dtype_size(s->dt), c = s->count, total = c, off = 0, mine = c;
	if (s->op == GOP_REDUCE && m->members[m->root] != r)
		return; /* written at the root only */
	if (s->op == GOP_REDUCE_SCATTER) {
		total = m->n * c;
		off = m->me * c;
	} else if (s->op == GOP_REDUCE_SCATTERV) {
		total = 0;
		for (uint32_t i = 0; i < m->n; i++) {
			off += i < m->me ? m->counts[i] : 0;
			total += m->counts[i];
		}
		mine = m->counts[m->me];
	}
	uint8_t *ref = grun_reference(s, total, ran, ran_count);
	/* where recv was in b (not m->recv: on device buffers it points at the device) */
	size_t at = s->in_place && s->op == GOP_REDUCE_SCATTER ? off * es : 0;
	if (s->in_place && s->op == GOP_REDUCE_SCATTER)
		memset(care + GROUP_GUARD, 0, m->b.len);
	memcpy(exp + GROUP_GUARD + at, ref + off * es, mine * es);
	memset(care + GROUP_GUARD + at, 1, mine * es);
	free(ref);
}

static inline void grun_expect_move(const struct grun *run, uint32_t r, uint8_t *exp)
{
	const struct gmember *m = &run->m[r];
	const struct gop_spec *s = &run->s;
	size_t es = keel_dtype_size(s->dt), c = s->count;
	uint8_t *e = exp + GROUP_GUARD;
	uint32_t root_job = m->members[m->root];
	for (uint32_t i = 0; i < m->n; i++) {
		uint32_t k = m->members[i];
		const struct gmember *o = &run->m[k];
		switch (s->op) {
		case GOP_ALLGATHER:
			memcpy(e + i * c * es, grun_src_pre(run, k), c * es);
			break;
		case GOP_ALLGATHERV:
			memcpy(e + m->displs[i] * es, grun_src_pre(run, k), m->counts[i] * es);
			break;
		case GOP_GATHER:
			if (r == root_job)
				memcpy(e + i * c * es, grun_src_pre(run, k), c * es);
			break;
		case GOP_ALLTOALL:
			memcpy(e + i * c * es, o->a.pre + GROUP_GUARD + m->me * c * es, c * es);
			break;
		case GOP_ALLTOALLV:
		case GOP_P2P_PAIRS:
			if (s->op == GOP_P2P_PAIRS && i == m->me)
				break; /* nothing sent to itself */
			memcpy(e + m->rdispls[i] * es,
			       o->a.pre + GROUP_GUARD + o->sdispls[m->me] * es, m->rcounts[i] * es);
			break;
		default:
			break;
		}
	}
	if (s->op == GOP_BROADCAST)
		memcpy(e, grun_src_pre(run, root_job), c * es);
	else if (s->op == GOP_SCATTER)
		memcpy(e, run->m[root_job].a.pre + GROUP_GUARD + m->me * c * es, c * es);
	else if (s->op == GOP_P2P_RING)
		memcpy(e, run->m[m->members[(m->me + m->n - 1) % m->n]].a.pre + GROUP_GUARD,
		       m->b.len);
}

static inline size_t grun_first_diff(const uint8_t *got, const uint8_t *exp, const uint8_t *care,
				     size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((care == NULL || care[i]) && got[i] != exp[i])
			return i;
	return SIZE_MAX;
}

static inline void grun_describe(const struct grun *run, uint32_t r)
{
	const struct gmember *m = &run->m[r];
	const struct gop_spec *s = &run->s;
	print_error("%s, world %u, group of %u [", gop_names[s->op], run->world, m->n);
	for (uint32_t i = 0; i < m->n; i++)
		print_error("%s%u", i > 0 ? " " : "", m->members[i]);
	print_error("], %s", keel_dtype_name(s->dt));
	if (gop_is_reduction(s->op))
		print_error(" %s", keel_redop_name(s->redop));
	print_error(", count %zu, %s", s->count, s->in_place ? "in place" : "out of place");
	if (gop_is_rooted(s->op))
		print_error(", root %u%s", m->root, s->null_others ? " (others pass NULL)" : "");
	print_error(", salt %" PRIu64 ": job rank %u (group rank %u): ", s->salt, r, m->me);
}

/* Member r's buffers after the operation completed (0) over job ranks ran[0..ran_count):
 * the result exact, bit for bit, and nothing else written (guards, gaps, an input out of
 * place, a buffer the operation does not write at this member). Prints what differs;
 * returns true when all is right. */
static inline bool grun_check(const struct grun *run, uint32_t r, const uint32_t *ran,
			      uint32_t ran_count)
{
	const struct gmember *m = &run->m[r];
	size_t alen = m->a.len + 2 * GROUP_GUARD, blen = m->b.len + 2 * GROUP_GUARD;
	size_t at = grun_first_diff(m->a.base, m->a.pre, NULL, alen);
	if (at != SIZE_MAX) {
		grun_describe(run, r);
		print_error("its input changed at byte %zd of %zu\n", (ssize_t)at - GROUP_GUARD,
			    m->a.len);
		return false;
	}
	uint8_t *exp = malloc(blen), *care = malloc(blen);
	assert_non_null(exp);
	assert_non_null(care);
	memcpy(exp, m->b.pre, blen);
	memset(care, 1, blen);
	if (gop_is_reduction(run->s.op))
		grun_expect_reduce(run, r, ran, ran_count, exp, care);
	else
		grun_expect_move(run, r, exp);
	at = grun_first_diff(m->b.base, exp, care, blen);
	if (at != SIZE_MAX) {
		size_t es = keel_dtype_size(run->s.dt), off = at - GROUP_GUARD;
		grun_describe(run, r);
		print_error("result wrong at byte %zd of %zu (element %zd): got %02x, want %02x "
			    "(was %02x)%s\n",
			    (ssize_t)at - GROUP_GUARD, m->b.len, (ssize_t)off / (ssize_t)es,
			    m->b.base[at], exp[at], m->b.pre[at],
			    at < GROUP_GUARD || at >= GROUP_GUARD + m->b.len ? " in a guard" : "");
	}
	free(exp);
	free(care);
	return at == SIZE_MAX;
}

/* Whether two members' lists of job ranks are the same. */
static inline bool grun_same_members(const uint32_t *a, const uint32_t *b, uint32_t n)
{
	return memcmp(a, b, n * sizeof(*a)) == 0;
}

/* ---- device buffers (keel_group_use_device) ----
 * A member's buffers moved to device memory of its node's device (a CPU stand-in: memory that
 * faults when the CPU touches it), guards included, and its stage registered; after the
 * operation the device's bytes come back into the host buffers, which grun_check reads as
 * before. Send/Recv stay on host memory (group.h): a batch keeps its host buffers. */
struct gdev {
	struct guarded_mem mem;
	size_t b_at; /* where b's image starts in the device region */
	uint8_t *stage;
	size_t stage_bytes;
	const struct keel_device *dev;
	bool moved; /* the operation's buffers are on the device (not a batch's) */
};

static inline size_t gdev_round64(size_t x)
{
	return (x + 63) & ~(size_t)63;
}

/* Where host pointer p of member m lies on the device (NULL stays NULL). */
static inline void *gdev_at(const struct gmember *m, const struct gdev *d, const void *p)
{
	const uint8_t *q = p;
	if (q == NULL)
		return NULL;
	if (q >= m->a.base && q <= m->a.base + m->a.len + 2 * GROUP_GUARD)
		return d->mem.view + (q - m->a.base);
	return d->mem.view + d->b_at + (q - m->b.base);
}

/* Move member r's buffers to its device and point the group at a stage; the operation's
 * pointers follow. 0, or what keel_group_use_device said. */
static inline int gdev_attach(struct grun *run, uint32_t r, struct gdev *d,
			      const struct keel_device *dev)
{
	struct gmember *m = &run->m[r];
	memset(d, 0, sizeof(*d));
	d->dev = dev;
	size_t alen = m->a.len + 2 * GROUP_GUARD, blen = m->b.len + 2 * GROUP_GUARD;
	d->b_at = gdev_round64(alen);
	assert_int_equal(guarded_mem_map(&d->mem, dev, d->b_at + blen), 0);
	memcpy(d->mem.work, m->a.base, alen);
	memcpy(d->mem.work + d->b_at, m->b.base, blen);
	/* what the operation stages: its input and its output, each rounded to 64 bytes */
	d->stage_bytes = gdev_round64(m->a.len + m->b.len) + gdev_round64(m->b.len) + 128;
	d->stage = aligned_alloc(64, d->stage_bytes);
	assert_non_null(d->stage);
	assert_int_equal(dev->ops->host_register(dev->state, d->stage, d->stage_bytes), 0);
	d->moved = !gop_is_p2p(run->s.op);
	if (d->moved) {
		m->send = gdev_at(m, d, m->send);
		m->recv = gdev_at(m, d, m->recv);
	}
	return keel_group_use_device(m->g, d->stage, d->stage_bytes);
}

/* The device's bytes back into member r's host buffers, the group back on host buffers, the
 * device memory and stage released. */
static inline void gdev_detach(struct grun *run, uint32_t r, struct gdev *d)
{
	struct gmember *m = &run->m[r];
	if (d->moved) {
		memcpy(m->a.base, d->mem.work, m->a.len + 2 * GROUP_GUARD);
		memcpy(m->b.base, d->mem.work + d->b_at, m->b.len + 2 * GROUP_GUARD);
	}
	assert_int_equal(keel_group_use_device(m->g, NULL, 0), 0);
	assert_int_equal(d->dev->ops->host_unregister(d->dev->state, d->stage), 0);
	assert_int_equal(guarded_mem_unmap(&d->mem), 0);
	free(d->stage);
}

/* Run `s` at every rank with a group, wait (rounds_max rounds), and check each member: ended
 * with 0, over its group's members at the start, the result exact. Returns the number of
 * members that failed (each printed). */
static inline uint32_t grun_run_on(struct cluster *c, struct keel_group *const *groups,
				   const struct gop_spec *s, uint32_t rounds_max,
				   const struct keel_device *const *devs)
{
	static struct grun run;
	static struct gdev dv[CLUSTER_MAX];
	static uint32_t ran[CLUSTER_MAX][CLUSTER_MAX];
	struct keel_req *reqs[CLUSTER_MAX] = {NULL};
	struct keel_req_info info[CLUSTER_MAX];
	int rc[CLUSTER_MAX];
	bool started[CLUSTER_MAX] = {false};
	uint32_t bad = 0;
	grun_setup(&run, c, groups, s);
	for (uint32_t r = 0; r < c->world; r++) {
		if (run.m[r].g == NULL)
			continue;
		int st = devs != NULL ? gdev_attach(&run, r, &dv[r], devs[r]) : 0;
		st = st != 0 ? st : grun_start(&run, r);
		if (st != 0) {
			grun_describe(&run, r);
			print_error("start returned %d (%s)\n", st, keel_strerror(st));
			bad++;
			continue;
		}
		started[r] = true;
		reqs[r] = run.m[r].req;
	}
	(void)cluster_wait_reqs_info(c, reqs, rc, info, ran, NULL, rounds_max);
	for (uint32_t r = 0; r < c->world; r++) {
		struct gmember *m = &run.m[r];
		if (devs != NULL && m->g != NULL && reqs[r] == NULL)
			gdev_detach(&run, r, &dv[r]);
		if (!started[r])
			continue;
		if (reqs[r] != NULL) {
			grun_describe(&run, r);
			print_error("not ended after %u rounds\n", rounds_max);
			bad++;
		} else if (rc[r] != 0 || (!gop_is_p2p(s->op) && /* a batch names no members */
					  (info[r].member_count != m->n ||
					   !grun_same_members(ran[r], m->members, m->n)))) {
			grun_describe(&run, r);
			print_error("ended %d (%s) over %u members\n", rc[r], keel_strerror(rc[r]),
				    rc[r] == 0 ? info[r].member_count : 0);
			bad++;
		} else if (s->check_algo && info[r].algo != s->algo) {
			grun_describe(&run, r);
			print_error("ran algorithm %d, want %d\n", info[r].algo, s->algo);
			bad++;
		} else {
			bad += !grun_check(&run, r, gop_is_p2p(s->op) ? m->members : ran[r],
					   gop_is_p2p(s->op) ? m->n : info[r].member_count);
		}
	}
	bool pending = false;
	for (uint32_t r = 0; r < c->world; r++)
		pending |= reqs[r] != NULL;
	if (!pending) /* else keel may still write them: left allocated, the test has failed */
		grun_free(&run);
	return bad;
}

static inline uint32_t grun_run(struct cluster *c, struct keel_group *const *groups,
				const struct gop_spec *s, uint32_t rounds_max)
{
	return grun_run_on(c, groups, s, rounds_max, NULL);
}

/* ---- groups in caller memory: one per rank, the job's world group ---- */
struct groups {
	struct keel_group *g[CLUSTER_MAX];
	void *mem[CLUSTER_MAX];
	size_t len;
};

static void *group_mem(const struct cluster *c, uint32_t r, size_t *len)
{
	*len = keel_group_size(c->node[r]);
	assert_true(*len > 0);
	void *mem = aligned_alloc(64, (*len + 63) & ~(size_t)63);
	assert_non_null(mem);
	return mem;
}

static void groups_world(struct cluster *c, struct groups *gs)
{
	memset(gs, 0, sizeof(*gs));
	for (uint32_t r = 0; r < c->world; r++) {
		gs->mem[r] = group_mem(c, r, &gs->len);
		assert_int_equal(keel_group_world(c->node[r], gs->mem[r], gs->len, &gs->g[r]), 0);
		assert_non_null(gs->g[r]);
	}
}

#endif
