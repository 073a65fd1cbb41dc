/* keel-train's 2-D mode: groups and collectives of one step (train_tp.h). It allocates only at
 * init, reads no clock but for its figures, and leaves every decision to the trainer. */
#include "train_tp.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "keel/errors.h"
#include "keel/posix.h"

static const char *const op_name[TP_OPS] = {"AllGather", "ReduceScatter", "DP AllReduce",
					    "assembly AllGather", "split"};

int train_tp_init(struct train_tp *p, struct keel_node *node, uint32_t size, uint32_t rank,
		  uint32_t cap, train_tp_wait_fn wait, void *ctx)
{
	memset(p, 0, sizeof(*p));
	if (size < 2 || size > TRAIN_TP_MAX || TRAIN_HIDDEN % size != 0 || cap == 0)
		return -EINVAL;
	*p = (struct train_tp){.size = size,
			       .index = rank % size,
			       .replica = rank / size,
			       .rank = rank,
			       .cap = cap,
			       .node = node,
			       .wait = wait,
			       .ctx = ctx,
			       .cur = TP_GENS,
			       .group_len = (keel_group_size(node) + 63) / 64 * 64};
	p->mem = aligned_alloc(64, TP_GENS * 3 * p->group_len);
	size_t glen = train_tp_gather_len(size, cap), slen = train_tp_scatter_len(size, cap),
	       len = train_tp_grad_len(size);
	p->block = calloc(glen, sizeof(double));
	p->gathered = calloc(size * glen, sizeof(double));
	p->scatter = calloc(size * slen, sizeof(double));
	p->mine = calloc(slen, sizeof(double));
	p->grad = calloc(len, sizeof(double));
	p->sum = calloc(len, sizeof(double));
	if (p->mem == NULL || p->block == NULL || p->gathered == NULL || p->scatter == NULL ||
	    p->mine == NULL || p->grad == NULL || p->sum == NULL) {
		train_tp_fini(p);
		return -ENOMEM;
	}
	return 0;
}

/* Free generation i's groups, children first. false: keel still owes a member a word for one
 * (poll, then again); the generation is kept. */
static bool gen_free(struct train_tp *p, uint32_t i)
{
	struct tp_gen *gen = &p->gen[i];
	for (uint32_t k = 3; k-- > 0;) {
		if (gen->g[k] != NULL && keel_group_free(gen->g[k]) != 0)
			return false;
		gen->g[k] = NULL;
	}
	gen->used = false;
	return true;
}

/* The current generation becomes a retired one. */
static void retire(struct train_tp *p)
{
	p->cur = TP_GENS;
	p->world = p->tp_group = p->dp_group = NULL;
	p->epoch = 0;
}

/* Free every generation but the current one (all: when `all`). */
static void free_gens(struct train_tp *p, bool all)
{
	for (uint32_t i = 0; i < TP_GENS; i++)
		if (p->gen[i].used && (all || i != p->cur) && !gen_free(p, i) && all)
			fprintf(stderr, "keel-train: rank %u: a group would not be freed\n",
				p->rank);
	if (all)
		retire(p);
}

void train_tp_fini(struct train_tp *p)
{
	if (p->mem != NULL)
		free_gens(p, true);
	free(p->mem);
	free(p->block);
	free(p->gathered);
	free(p->scatter);
	free(p->mine);
	free(p->grad);
	free(p->sum);
	p->mem = NULL;
	p->block = p->gathered = p->scatter = p->mine = p->grad = p->sum = NULL;
}

/* Wait for a started request (rc: what its start returned) and count it. A failure other than
 * the view change keel reports under a rank-indexed operation may leave the members' group
 * sequences out of step: the groups are made again before they are used. */
static int finish(struct train_tp *p, enum train_tp_op op, int rc, struct keel_req *req,
		  size_t bytes, uint32_t members)
{
	uint64_t t0 = keel_posix_now_ns();
	struct keel_req_info info = {0};
	if (rc == 0)
		rc = p->wait(p->ctx, req, &info);
	/* a rank-indexed result is over the members it names: never fewer than asked for */
	if (rc == 0 && members != 0 && info.member_count != members)
		rc = KEEL_EVIEWCHANGED;
	p->stats.count[op]++;
	p->stats.ns[op] += keel_posix_now_ns() - t0;
	p->stats.bytes[op] += bytes;
	if (rc != 0) {
		p->stats.failed[op]++;
		if (rc != KEEL_EVIEWCHANGED)
			p->epoch = 0;
	}
	return rc;
}

static int split(struct train_tp *p, struct keel_group *world, uint32_t color, uint8_t *mem,
		 struct keel_group **out)
{
	struct keel_req *req = NULL;
	int rc = keel_group_split_start(world, color, p->rank, mem, p->group_len, out, &req);
	rc = finish(p, TP_SPLIT, rc, req, 0, 0);
	if (rc != 0)
		*out = NULL;
	return rc;
}

/* A generation whose memory is free, freeing retired ones if none is (after a run of view
 * changes with no settled round between: the late-notice risk above, taken over failing). */
static uint32_t gen_take(struct train_tp *p)
{
	for (uint32_t pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < TP_GENS; i++)
			if (!p->gen[i].used)
				return i;
		free_gens(p, false);
	}
	return TP_GENS;
}

int train_tp_regroup(struct train_tp *p, uint32_t epoch)
{
	retire(p);
	p->stats.regroups++;
	uint32_t i = gen_take(p);
	if (i == TP_GENS)
		return -ENOSPC;
	struct tp_gen *gen = &p->gen[i];
	uint8_t *mem = p->mem + (size_t)i * 3 * p->group_len;
	gen->used = true;
	int rc = keel_group_world(p->node, mem, p->group_len, &gen->g[0]);
	if (rc != 0)
		gen->g[0] = NULL;
	/* key = job rank: a whole replica's members are in shard order */
	if (rc == 0)
		rc = split(p, gen->g[0], p->replica, mem + p->group_len, &gen->g[1]);
	if (rc == 0)
		rc = split(p, gen->g[0], p->index, mem + 2 * p->group_len, &gen->g[2]);
	if (rc != 0) /* retired as it is: members that made a group may still speak to it */
		return rc;
	p->cur = i;
	p->world = gen->g[0];
	p->tp_group = gen->g[1];
	p->dp_group = gen->g[2];
	p->epoch = epoch;
	return 0;
}

void train_tp_settle(struct train_tp *p)
{
	free_gens(p, false);
}

bool train_tp_replica_whole(const struct train_tp *p)
{
	struct keel_group_info gi;
	return p->tp_group != NULL && keel_group_info(p->tp_group, &gi, NULL, 0) >= 0 &&
	       gi.self_member && gi.size == p->size && gi.rank == p->index;
}

/* Forward AllGather, the output layer, backward ReduceScatter, this shard's gradient. */
static int replica_part(struct train_tp *p, const float *w, const struct train_tp_batch *b,
			bool synced)
{
	uint32_t glen = train_tp_gather_len(p->size, p->cap),
		 slen = train_tp_scatter_len(p->size, p->cap);
	train_tp_hidden(w, b, p->block);
	p->block[glen - 1] = synced ? 1 : 0; /* whether this member's shard is current */
	struct keel_req *req = NULL;
	int rc =
	    keel_group_allgather_start(p->tp_group, p->block, p->gathered, glen, KEEL_F64, &req);
	rc = finish(p, TP_GATHER, rc, req, glen * sizeof(double), p->size);
	if (rc != 0)
		return rc;
	/* every member sees the same flags: all go on, or none does */
	for (uint32_t m = 0; m < p->size; m++)
		if (p->gathered[(size_t)m * glen + glen - 1] < 0.5)
			return -EAGAIN;
	train_tp_output(w, b, p->gathered, p->scatter);
	rc = keel_group_reduce_scatter_start(p->tp_group, p->scatter, p->mine, slen, KEEL_F64,
					     KEEL_SUM, &req);
	rc = finish(p, TP_SCATTER, rc, req, (size_t)p->size * slen * sizeof(double), p->size);
	if (rc != 0)
		return rc;
	train_tp_backward(b, p->block, p->mine, p->grad);
	return 0;
}

int train_tp_step(struct train_tp *p, const float *w, const struct train_tp_batch *b, bool synced,
		  bool in_plan)
{
	uint32_t len = train_tp_grad_len(p->size);
	/* Groups marked out of step (epoch 0) still run: their other members run this step too,
	 * and the trainer makes them again after its next collective. */
	if (p->dp_group == NULL) {
		p->part_rc = -ENOTCONN;
		return -ENOTCONN;
	}
	p->part_rc =
	    in_plan && train_tp_replica_whole(p) ? replica_part(p, w, b, synced) : -ENODATA;
	if (p->part_rc != 0)
		memset(p->grad, 0, len * sizeof(double)); /* in the sum, but adds nothing */
	/* Out of place: a member's death makes keel run it again from the untouched input. */
	struct keel_req *req = NULL;
	int rc =
	    keel_group_allreduce_start(p->dp_group, p->grad, p->sum, len, KEEL_F64, KEEL_SUM, &req);
	return finish(p, TP_DP, rc, req, len * sizeof(double), 0);
}

double train_tp_sum(const struct train_tp *p, uint32_t what)
{
	return p->sum[TRAIN_HIDDEN / p->size * (TRAIN_IN + 1) + what];
}

void train_tp_drop(struct train_tp *p)
{
	free_gens(p, true);
}

int train_tp_assemble(struct train_tp *p, float *w)
{
	static float send[TRAIN_HIDDEN * (TRAIN_IN + 1)], recv[TRAIN_HIDDEN * (TRAIN_IN + 1)];
	if (!train_tp_replica_whole(p))
		return -ENODATA;
	uint32_t per = TRAIN_HIDDEN / p->size * (TRAIN_IN + 1); /* a shard's W1 rows and b1 */
	struct train_span sp[3];
	train_tp_spans(p->size, p->index, sp);
	memcpy(send, w + sp[0].off, sp[0].len * sizeof(float));
	memcpy(send + sp[0].len, w + sp[1].off, sp[1].len * sizeof(float));
	struct keel_req *req = NULL;
	int rc = keel_group_allgather_start(p->tp_group, send, recv, per, KEEL_F32, &req);
	rc = finish(p, TP_ASSEMBLE, rc, req, per * sizeof(float), p->size);
	for (uint32_t m = 0; rc == 0 && m < p->size; m++) {
		train_tp_spans(p->size, m, sp);
		memcpy(w + sp[0].off, recv + (size_t)m * per, sp[0].len * sizeof(float));
		memcpy(w + sp[1].off, recv + (size_t)m * per + sp[0].len,
		       sp[1].len * sizeof(float));
	}
	return rc;
}

void train_tp_print(const struct train_tp *p, FILE *f)
{
	fprintf(
	    f, "rank %u: shard %u of replica %u (%u units of %u); groups made %" PRIu64 " times",
	    p->rank, p->index, p->replica, TRAIN_HIDDEN / p->size, TRAIN_HIDDEN, p->stats.regroups);
	for (uint32_t op = 0; op < TP_OPS; op++) {
		const struct train_tp_stats *s = &p->stats;
		if (s->count[op] == 0)
			continue;
		fprintf(f, "; %s %" PRIu64 " (%" PRIu64 " failed, %.1f us each, %.0f B in)",
			op_name[op], s->count[op], s->failed[op],
			(double)s->ns[op] / 1e3 / (double)s->count[op],
			(double)s->bytes[op] / (double)s->count[op]);
	}
	fprintf(f, "\n");
}
