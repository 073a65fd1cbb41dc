/* keel-bench's operations over groups, the calls (bench_coll.h): every one through
 * keel/group.h, run again after a view change as the API asks, and checked exactly against
 * the members each call reports; never a result taken for right that was not compared. */
#include "bench_coll.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel/posix.h"
#include "refcheck.h"

/* A view change under a call: every member hears KEEL_EVIEWCHANGED (a rank-indexed operation
 * whose group lost a member, a root that left, an in-place input already written) and runs it
 * again on the group's new membership. More than this many in a row: the job is failing. */
#define VIEW_CHANGE_RETRIES 3

/* Filling, poisoning and comparing work in pieces with a poll between them. */
#define CHECK_PIECE 16384u

/* Ping-pong's and the exchange's tags (any: the two halves never overlap). */
#define TAG_PINGPONG 1u
#define TAG_EXCHANGE 2u

static int wait_info(struct keel_boot *b, struct keel_req *req, struct keel_req_info *info,
		     uint32_t *members);

static int make_group_mem(struct keel_boot *b, void **mem)
{
	size_t len = keel_group_size(b->node);
	*mem = aligned_alloc(64, (len + 63) / 64 * 64); /* keel asks for 8-byte alignment */
	return *mem == NULL ? -ENOMEM : 0;
}

int bench_group_open(struct bench_group *g, struct keel_boot *b, uint32_t size, char *err,
		     size_t err_len)
{
	uint32_t n = b->launch.world_size, rank = b->launch.rank;
	size_t len = keel_group_size(b->node);
	if (size > 0 && (size > n || n % size != 0)) {
		snprintf(err, err_len, "--group %u does not divide the job's %u ranks into groups",
			 size, n);
		return -EINVAL;
	}
	int rc = make_group_mem(b, &g->world_mem);
	if (rc == 0)
		rc = keel_group_world(b->node, g->world_mem, len, &g->world);
	if (rc == 0 && size > 0)
		rc = make_group_mem(b, &g->split_mem);
	/* groups of `size` consecutive ranks, in rank order (the _start form: at 6a4a1f7 the
	 * blocking keel_group_split read its request before the start had set it: -EINVAL) */
	struct keel_req *req = NULL;
	if (rc == 0 && size > 0)
		rc = keel_group_split_start(g->world, rank / size, rank, g->split_mem, len,
					    &g->group, &req);
	if (rc == 0 && req != NULL)
		rc = wait_info(b, req, NULL, NULL);
	if (rc == 0 && size == 0)
		g->group = g->world;
	if (rc != 0) {
		snprintf(err, err_len, "making the %s: %s", size > 0 ? "groups" : "job's group",
			 keel_strerror(rc));
		return rc;
	}
	uint32_t pos;
	bench_group_now(g, &g->created, &pos);
	return 0;
}

/* Forget a group and give its memory back; one keel still holds (-EBUSY: a request of a
 * failed step not taken) stays allocated, as keel may still touch it. */
static void free_group(struct keel_group *gr, void *mem, const char *which)
{
	int rc = gr != NULL ? keel_group_free(gr) : 0;
	if (rc != 0)
		fprintf(stderr, "keel-bench: freeing the %s: %s (its memory kept)\n", which,
			keel_strerror(rc));
	else
		free(mem);
}

void bench_group_close(struct bench_group *g)
{
	if (g->group != g->world)
		free_group(g->group, g->split_mem, "split group");
	free_group(g->world, g->world_mem, "job's group");
	*g = (struct bench_group){0};
}

void bench_group_now(const struct bench_group *g, uint32_t *members, uint32_t *pos)
{
	static uint32_t ranks[KEEL_WORLD_MAX]; /* room for any group: never -ENOSPC */
	struct keel_group_info info = {0};
	int n = keel_group_info(g->group, &info, ranks, KEEL_WORLD_MAX);
	*members = n > 0 ? (uint32_t)n : 0;
	*pos = info.rank;
}

/* The call's setting from the group as it is now; the root asked for, or the last member's
 * place when the group shrank below it (every member computes the same). */
static void set_call(struct bench_group *g, size_t count, uint32_t root_asked)
{
	struct bench_coll_ctx *x = &g->x;
	bench_group_now(g, &x->members, &x->pos);
	x->member_count =
	    bench_coll_desc(x->coll)->split && g->created > 0 ? count / g->created : count;
	x->root = root_asked < x->members || x->members == 0 ? root_asked : x->members - 1;
}

/* Wait for a request as keel_boot_wait does for a job-wide one, and say what it ran over. */
static int wait_info(struct keel_boot *b, struct keel_req *req, struct keel_req_info *info,
		     uint32_t *members)
{
	if (b == NULL)
		return keel_req_wait(req, info);
	for (;;) { /* every operation ends within keel_op_bound_ns */
		uint64_t next;
		keel_boot_serve(b);
		int prc = keel_poll(b->node, keel_posix_now_ns(), &next);
		int rc = keel_req_test_info(req, info, members, KEEL_WORLD_MAX);
		if (rc != -EINPROGRESS)
			return rc;
		if (prc == 0 || prc == KEEL_ENOQUORUM)
			b->cfg.waiter.wait(b->cfg.waiter.ctx, next);
	}
}

/* One step of sendrecv between group ranks 0 and 1: a ping-pong's ping (step 0) or pong (1),
 * or the exchange (half 1: both ways in one batch). 0 when this member has no part. */
static int sendrecv_step(struct bench_group *g, const struct bench_coll_bufs *l, int half, int step,
			 struct keel_req **req)
{
	const struct bench_coll_ctx *x = &g->x;
	uint32_t peer = 1 - x->pos;
	size_t bytes = x->member_count * keel_dtype_size(x->dtype);
	struct keel_p2p send = {KEEL_P2P_SEND, peer, l->send, bytes, TAG_PINGPONG};
	struct keel_p2p recv = {KEEL_P2P_RECV, peer, l->recv, bytes, TAG_PINGPONG};
	*req = NULL;
	if (x->pos > 1 || x->members < 2)
		return 0;
	if (half == 1) {
		send.tag = recv.tag = TAG_EXCHANGE;
		struct keel_p2p both[2] = {send, recv};
		return keel_group_p2p_start(g->group, both, 2, req);
	}
	bool sends = (x->pos == 0) == (step == 0); /* rank 0 pings, rank 1 answers */
	return keel_group_p2p_start(g->group, sends ? &send : &recv, 1, req);
}

static int coll_start(struct bench_group *g, const struct bench_coll_bufs *l, struct keel_req **req)
{
	const struct bench_coll_ctx *x = &g->x;
	struct keel_group *gr = g->group;
	size_t c = x->member_count;
	switch (x->coll) {
	case BENCH_ALLREDUCE:
		return keel_group_allreduce_start(gr, l->send, l->recv, c, x->dtype, x->op, req);
	case BENCH_ALL_GATHER:
		return keel_group_allgather_start(gr, l->send, l->recv, c, x->dtype, req);
	case BENCH_REDUCE_SCATTER:
		return keel_group_reduce_scatter_start(gr, l->send, l->recv, c, x->dtype, x->op,
						       req);
	case BENCH_ALLTOALL:
		return keel_group_alltoall_start(gr, l->send, l->recv, c, x->dtype, req);
	case BENCH_REDUCE:
		return keel_group_reduce_start(gr, l->send, l->recv, c, x->dtype, x->op, x->root,
					       req);
	case BENCH_BROADCAST:
		return keel_group_broadcast_start(gr, x->root, l->recv,
						  c * keel_dtype_size(x->dtype), req);
	case BENCH_BARRIER:
		return keel_group_barrier_start(gr, req);
	default:
		return -EINVAL; /* sendrecv: sendrecv_step */
	}
}

/* One call, started and waited for (b NULL: keel_req_wait, as the timed loops do). */
static int call(struct bench_group *g, const struct bench_coll_bufs *l, int half,
		struct keel_boot *b, struct keel_req_info *info, uint32_t *members)
{
	struct keel_req *req;
	if (g->x.coll != BENCH_SENDRECV) {
		int rc = coll_start(g, l, &req);
		return rc != 0 ? rc : wait_info(b, req, info, members);
	}
	for (int step = 0; step < (half == 0 ? 2 : 1); step++) {
		int rc = sendrecv_step(g, l, half, step, &req);
		if (rc == 0 && req != NULL)
			rc = wait_info(b, req, info, members);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int bench_coll_run(struct bench_group *g, int half, void *in, void *out, size_t count)
{
	uint32_t root_asked = g->x.root;
	struct bench_coll_bufs l;
	int rc = KEEL_EVIEWCHANGED;
	if (g->x.coll == BENCH_SENDRECV && g->pair_broken)
		return 0; /* its peer left: nothing more to time in this row */
	for (int t = 0; t <= VIEW_CHANGE_RETRIES && rc == KEEL_EVIEWCHANGED; t++) {
		set_call(g, count, root_asked);
		bench_coll_layout(&g->x, half, in, out, &l);
		rc = call(g, &l, half, NULL, NULL, NULL);
	}
	g->x.root = root_asked;
	if (rc == KEEL_EPEERGONE) { /* the error the API promises; the rest of the row idles */
		g->pair_broken = true;
		g->peer_gone++;
		rc = 0;
	}
	return rc;
}

static int poll_piece(struct keel_boot *b)
{
	return keel_boot_poll(b) != 0 ? KEEL_ETRANSPORT : 0;
}

/* Poison what the call will write, then write this member's input. */
static int prepare(struct bench_group *g, struct keel_boot *b, const struct bench_coll_bufs *l)
{
	size_t es = keel_dtype_size(g->x.dtype);
	for (size_t i = 0; i < l->result; i += CHECK_PIECE) {
		size_t end = i + CHECK_PIECE < l->result ? i + CHECK_PIECE : l->result;
		memset((uint8_t *)l->recv + i * es, BENCH_POISON, (end - i) * es);
		if (poll_piece(b) != 0)
			return KEEL_ETRANSPORT;
	}
	for (size_t i = 0; i < l->fill; i += CHECK_PIECE) {
		bench_coll_fill_input(&g->x, l, i, i + CHECK_PIECE, b->launch.rank);
		if (poll_piece(b) != 0)
			return KEEL_ETRANSPORT;
	}
	return 0;
}

/* After the call: the members it reports, and this member's place among them. */
static int settle(struct bench_group *g, struct keel_boot *b, const struct keel_req_info *info,
		  const uint32_t *members)
{
	struct bench_coll_ctx *x = &g->x;
	if (x->coll == BENCH_SENDRECV || x->coll == BENCH_BARRIER)
		return 0; /* the pair's peer was taken before the call; a barrier has no data */
	x->members = info->member_count;
	for (uint32_t k = 0; k < x->members; k++)
		if (members[k] == b->launch.rank) {
			x->pos = k;
			return 0;
		}
	fprintf(stderr, "keel-bench: rank %u: a %s reports %u members without this rank\n",
		b->launch.rank, bench_coll_desc(x->coll)->name, x->members);
	return -EPROTO;
}

static int compare(struct bench_group *g, struct keel_boot *b, const struct bench_coll_bufs *l,
		   void *ref, const uint32_t *members, uint32_t peer_rank, size_t *wrong)
{
	for (size_t i = 0; i < l->result; i += CHECK_PIECE) {
		size_t end = i + CHECK_PIECE < l->result ? i + CHECK_PIECE : l->result;
		const void *want = bench_coll_expect(&g->x, ref, i, end, members, peer_rank);
		*wrong += keel_check_wrong(l->recv, want, i, end, g->x.dtype);
		if (poll_piece(b) != 0)
			return KEEL_ETRANSPORT;
	}
	return 0;
}

int bench_coll_check(struct bench_group *g, struct keel_boot *b, int half, void *in, void *out,
		     void *ref, size_t count, struct bench_coll_verdict *v)
{
	static uint32_t members[KEEL_WORLD_MAX];
	uint32_t root_asked = g->x.root, peer_rank = UINT32_MAX;
	struct keel_req_info info = {0};
	struct bench_coll_bufs l;
	*v = (struct bench_coll_verdict){0};
	if (g->x.coll == BENCH_SENDRECV && g->pair_broken)
		return 0;
	int rc = KEEL_EVIEWCHANGED;
	for (int t = 0; t <= VIEW_CHANGE_RETRIES && rc == KEEL_EVIEWCHANGED; t++) {
		set_call(g, count, root_asked);
		bench_coll_layout(&g->x, half, in, out, &l);
		rc = prepare(g, b, &l);
		if (g->x.coll == BENCH_SENDRECV && g->x.pos < 2 && g->x.members >= 2)
			peer_rank = keel_group_rank_to_job(g->group, 1 - g->x.pos);
		if (rc == 0)
			rc = call(g, &l, half, b, &info, members);
	}
	if (rc == 0)
		rc = settle(g, b, &info, members);
	if (rc == 0) {
		bench_coll_layout(&g->x, half, in, out, &l); /* over the members it reports */
		v->smaller = g->x.members < g->created;
		rc = compare(g, b, &l, ref, members, peer_rank, &v->wrong);
	}
	g->x.root = root_asked;
	if (rc == KEEL_EPEERGONE) {
		g->pair_broken = true;
		v->peer_gone = true;
		rc = 0;
	}
	return rc;
}
