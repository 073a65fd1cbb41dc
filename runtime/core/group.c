/* Groups (keel/group.h): creation in caller memory, the node's list of them, splits, and the
 * API of their operations; the engine is group_engine.c, schedules group_plan.c, Send/Recv
 * group_p2p.c. */
#include <string.h>

#include "assert_int.h"
#include "group_int.h"

#define ALIGN8(x) (((x) + 7u) & ~(size_t)7u)

static uint64_t mix64(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	return h ^ (h >> 31);
}

size_t keel_group_size(const struct keel_node *node)
{
	if (node == NULL)
		return 0;
	size_t w = node->world, k = node->ops_max;
	return ALIGN8(sizeof(struct keel_group)) + 2 * ALIGN8(w * 4) + ALIGN8(w * 20) +
	       ALIGN8(w * sizeof(struct gpeer)) + 2 * ALIGN8(w * 8) +
	       2 * k * ALIGN8(sizeof(struct keel_req)) + ALIGN8(k * w * 4);
}

uint32_t grp_pos_of(const struct keel_group *g, uint32_t rank)
{
	for (uint32_t i = 0; i < g->size; i++)
		if (g->ranks[i] == rank)
			return i;
	return UINT32_MAX;
}

static uint8_t *take(uint8_t **cursor, size_t bytes)
{
	uint8_t *p = *cursor;
	*cursor += ALIGN8(bytes);
	return p;
}

/* Lay out a group of `count` members in `mem` and put it on the node's list. */
static int group_init(struct keel_node *n, void *mem, size_t len, const uint32_t *ranks,
		      uint32_t count, uint64_t id, struct keel_group **out)
{
	if (mem == NULL || ((uintptr_t)mem & 7u) != 0)
		return -EINVAL;
	if (len < keel_group_size(n))
		return -ENOSPC;
	memset(mem, 0, keel_group_size(n));
	uint8_t *cur = mem;
	struct keel_group *g = (struct keel_group *)take(&cur, sizeof(*g));
	size_t w = n->world, k = n->ops_max;
	g->ranks = (uint32_t *)take(&cur, w * 4);
	g->created = (uint32_t *)take(&cur, w * 4);
	g->scratch = (uint32_t *)take(&cur, w * 20); /* records, then a selection */
	g->peers = (struct gpeer *)take(&cur, w * sizeof(struct gpeer));
	g->rx_bytes = (uint64_t *)take(&cur, w * 8);
	g->tx_skip = (uint64_t *)take(&cur, w * 8);
	g->ops = (struct keel_req *)take(&cur, k * ALIGN8(sizeof(struct keel_req)));
	g->p2p = (struct keel_req *)take(&cur, k * ALIGN8(sizeof(struct keel_req)));
	g->op_members = (uint32_t *)take(&cur, k * w * 4);
	KEEL_ASSERT((size_t)(cur - (uint8_t *)mem) <= keel_group_size(n));
	g->magic = GRP_MAGIC;
	g->id = id;
	g->node = n;
	g->ops_max = (uint32_t)k;
	/* Members the view has lost since the list was agreed (a split decided after a view
	 * change) are not in it: the members that made it earlier dropped them at that change. */
	uint32_t kept = 0;
	for (uint32_t i = 0; i < count; i++)
		if (view_has(&n->view, ranks[i]))
			g->ranks[kept++] = ranks[i];
	g->size = g->created_size = kept;
	memcpy(g->created, g->ranks, kept * sizeof(uint32_t));
	g->self_pos = grp_pos_of(g, n->self);
	KEEL_ASSERT(g->self_pos != UINT32_MAX);
	g->member = true;
	g->epoch = n->view.epoch;
	for (uint32_t i = 0; i < k; i++) {
		g->ops[i].members = g->op_members + i * w;
		g->ops[i].g = g;
		g->p2p[i].g = g;
	}
	for (uint32_t i = 0; i < count; i++)
		g->peers[ranks[i]].inc = n->view.inc[ranks[i]];
	g->next = n->groups;
	n->groups = g;
	*out = g;
	return 0;
}

int keel_group_world(struct keel_node *node, void *mem, size_t len, struct keel_group **out)
{
	if (node == NULL || out == NULL)
		return -EINVAL;
	if (!node->member)
		return KEEL_EEXCLUDED;
	if (node->group_worlds_epoch != node->view.epoch) {
		node->group_worlds_epoch = node->view.epoch;
		node->group_worlds = 0;
	}
	uint64_t id = mix64(mix64(0x776f726c64ull, node->view.epoch), node->group_worlds);
	int rc = group_init(node, mem, len, node->rank_at, node->view.count, id, out);
	if (rc == 0)
		node->group_worlds++;
	return rc;
}

static bool valid(const struct keel_group *g)
{
	return g != NULL && g->magic == GRP_MAGIC;
}

int keel_group_free(struct keel_group *group)
{
	if (!valid(group))
		return -EINVAL;
	if (group->run_seq != group->next_seq || grp_p2p_pending(group))
		return -EBUSY;
	for (uint32_t i = 0; i < group->ops_max; i++)
		if (group->ops[i].state != GS_FREE || group->p2p[i].state != GS_FREE)
			return -EBUSY; /* a result not taken yet */
	for (uint32_t i = 0; i < group->created_size; i++) {
		const struct gpeer *p = &group->peers[group->created[i]];
		if (p->done_owed || p->sync_owed || p->p2p_done_owed || p->out_owed ||
		    p->rtr_owed || p->fail_owed)
			return -EBUSY; /* a member still waits for our word: poll, then again */
	}
	struct keel_node *n = group->node;
	n->groups_freed[n->groups_freed_next++ % KEEL_GROUPS_FREED_KEPT] = group->id;
	struct keel_group **link = &group->node->groups;
	while (*link != NULL && *link != group)
		link = &(*link)->next;
	if (*link == group)
		*link = group->next;
	group->magic = 0;
	return 0;
}

int keel_group_info(const struct keel_group *group, struct keel_group_info *info, uint32_t *ranks,
		    uint32_t ranks_cap)
{
	if (!valid(group))
		return -EINVAL;
	if (ranks != NULL && ranks_cap < group->size)
		return -ENOSPC;
	if (info != NULL) {
		info->id = group->id;
		info->size = group->size;
		info->rank = group->member ? group->self_pos : UINT32_MAX;
		info->created_size = group->created_size;
		info->epoch = group->epoch;
		info->self_member = group->member;
	}
	if (ranks != NULL)
		memcpy(ranks, group->ranks, group->size * sizeof(uint32_t));
	return (int)group->size;
}

uint32_t keel_group_rank_to_job(const struct keel_group *group, uint32_t group_rank)
{
	if (!valid(group) || group_rank >= group->size)
		return UINT32_MAX;
	return group->ranks[group_rank];
}

/* ---- requests ---- */

/* A split completed: the member builds its new group from every member's record (color,
 * key, list hash, rank), ordered by key, then parent position. */
static int split_build(struct keel_group *g, struct keel_req *r)
{
	const uint32_t *rec = g->scratch, *mine = r->split_rec;
	for (uint32_t i = 0; i < r->w; i++)
		if (rec[4 * i + 2] != mine[2])
			return KEEL_EMISMATCH; /* from_ranks: the members' lists differ */
	*r->split_out = NULL;
	if (mine[0] == KEEL_COLOR_NONE)
		return 0;
	uint32_t *sel = g->scratch + 4 * (size_t)g->node->world, count = 0;
	for (uint32_t i = 0; i < r->w; i++) {
		if (rec[4 * i] != mine[0])
			continue;
		uint32_t j = count++;
		while (j > 0 && rec[4 * sel[j - 1] + 1] > rec[4 * i + 1]) {
			sel[j] = sel[j - 1];
			j--;
		}
		sel[j] = i;
	}
	for (uint32_t j = 0; j < count; j++)
		sel[j] = rec[4 * sel[j] + 3];
	uint64_t id = mix64(mix64(g->id, r->seq), mine[0]);
	return group_init(g->node, r->split_mem, r->split_len, sel, count, id, r->split_out);
}

void grp_finish(struct keel_group *g, struct keel_req *r, int status)
{
	struct keel_node *n = g->node;
	if (status == 0 && r->kind == GK_SPLIT)
		status = split_build(g, r);
	r->state = GS_DONE;
	r->status = status;
	if (status == 0)
		n->ctr.ops_completed++;
	else
		n->ctr.ops_failed++;
	if (r->kind == GK_P2P)
		return;
	KEEL_ASSERT(r->seq == g->run_seq);
	g->run_seq++;
	g->run_slot = g->run_slot + 1 == g->ops_max ? 0 : g->run_slot + 1;
	if (seq_before(g->local_done, g->run_seq))
		g->local_done = g->run_seq;
}

bool grp_send(struct keel_node *n, uint32_t peer, const struct grp_subhdr *sh, uint16_t step,
	      uint32_t offset, uint32_t total, const void *body, uint32_t blen, const void *data,
	      uint32_t dlen)
{
	uint8_t *buf = rel_send_slot(n, peer);
	if (buf == NULL)
		return false;
	uint32_t hdr = grp_subhdr_len(sh->msg);
	memcpy(buf, &sh->group, 8);
	memcpy(buf + 8, &sh->seq, 4);
	buf[12] = sh->msg;
	buf[13] = sh->kind;
	memcpy(buf + 14, &sh->aux, 2);
	if (hdr > GRP_SUBHDR_BYTES)
		memcpy(buf + 16, &sh->tag, 4);
	if (blen != 0)
		memcpy(buf + hdr, body, blen);
	if (dlen != 0)
		memcpy(buf + hdr + blen, data, dlen);
	struct wire_header h;
	node_header_init(n, &h, WIRE_DATA, peer);
	h.flags |= WIRE_FLAG_GROUP;
	h.op_id = n->ops_done_local; /* what every header says: world collectives finished */
	h.step = step;
	h.offset = offset;
	h.total_len = total + hdr;
	rel_send_commit(n, peer, &h, hdr + blen + dlen);
	return true;
}

static bool excluded(const struct keel_group *g)
{
	return !g->member || !g->node->member;
}

int grp_check(const struct keel_group *g, struct keel_req **req)
{
	if (!valid(g) || req == NULL)
		return -EINVAL;
	if (excluded(g))
		return KEEL_EEXCLUDED;
	return 0;
}

struct keel_req *grp_req_new(struct keel_group *g, enum gop_kind kind, const void *send, void *recv,
			     size_t count, enum keel_dtype dt, enum keel_redop op)
{
	struct keel_req *r = &g->ops[g->next_slot];
	if (r->state != GS_FREE)
		return NULL;
	g->next_slot = g->next_slot + 1 == g->ops_max ? 0 : g->next_slot + 1;
	uint32_t *members = r->members;
	memset(r, 0, offsetof(struct keel_req, items));
	r->members = members;
	r->g = g;
	r->kind = kind;
	r->seq = g->next_seq++;
	r->state = GS_QUEUED;
	r->start_ns = g->node->now_ns;
	r->progress_ns = r->start_ns;
	r->w = g->size;
	r->root_rank = UINT32_MAX;
	r->in = send;
	r->out = recv;
	r->count = count;
	r->dtype = dt;
	r->redop = op;
	r->esize = (uint32_t)keel_dtype_size(dt);
	return r;
}

void grp_req_cancel(struct keel_group *g, struct keel_req *r)
{
	KEEL_ASSERT(r->seq + 1 == g->next_seq && r->state == GS_QUEUED);
	r->state = GS_FREE;
	g->next_seq--;
	g->next_slot = (uint32_t)(r - g->ops);
}

int grp_split_start(struct keel_group *parent, uint32_t color, uint32_t key, uint32_t list_hash,
		    void *mem, size_t len, struct keel_group **out, struct keel_req **req)
{
	int rc = grp_check(parent, req);
	if (rc != 0 || out == NULL)
		return rc != 0 ? rc : -EINVAL;
	if (color != KEEL_COLOR_NONE && (mem == NULL || ((uintptr_t)mem & 7u) != 0))
		return -EINVAL;
	if (color != KEEL_COLOR_NONE && len < keel_group_size(parent->node))
		return -ENOSPC;
	for (uint32_t i = 0; i < parent->ops_max; i++)
		if (parent->ops[i].kind == GK_SPLIT && parent->ops[i].state != GS_FREE &&
		    parent->ops[i].state != GS_DONE)
			return -EBUSY; /* one split at a time: they share the scratch */
	struct keel_req *r =
	    grp_req_new(parent, GK_SPLIT, NULL, parent->scratch, 4, KEEL_I32, KEEL_SUM);
	if (r == NULL)
		return -EBUSY;
	r->in_bytes = 16;
	r->split_rec[0] = color;
	r->split_rec[1] = key;
	r->split_rec[2] = list_hash;
	r->split_rec[3] = parent->node->self;
	r->in = (const uint8_t *)r->split_rec;
	r->split_mem = mem;
	r->split_len = len;
	r->split_out = out;
	*req = r;
	grp_advance(parent);
	return 0;
}

int keel_req_test_info(struct keel_req *req, struct keel_req_info *info, uint32_t *members,
		       uint32_t members_cap)
{
	if (req == NULL || req->g == NULL || !valid(req->g))
		return -EINVAL;
	if (req->state == GS_FREE)
		return -EINVAL; /* released already */
	if (req->state != GS_DONE)
		return -EINPROGRESS;
	if (req->status == 0 && members != NULL && members_cap < req->done_count)
		return -ENOSPC;
	if (info != NULL) {
		info->epoch = req->done_epoch;
		info->member_count = req->done_count;
		info->restarts = req->restarts;
		info->algo = req->algo;
	}
	if (members != NULL && req->status == 0 && req->kind != GK_P2P)
		memcpy(members, req->members, req->done_count * sizeof(uint32_t));
	req->state = GS_FREE;
	return req->status;
}

int keel_req_test(struct keel_req *req)
{
	return keel_req_test_info(req, NULL, NULL, 0);
}

int keel_req_wait(struct keel_req *req, struct keel_req_info *info)
{
	if (req == NULL || req->g == NULL || !valid(req->g))
		return -EINVAL;
	struct keel_node *node = req->g->node;
	const struct keel_waiter *w = &node->cfg.waiter;
	if (w->now_ns == NULL || w->wait == NULL)
		return -EINVAL;
	for (;;) {
		uint64_t deadline;
		int prc = keel_poll(node, w->now_ns(w->ctx), &deadline);
		int rc = keel_req_test_info(req, info, NULL, 0);
		if (rc != -EINPROGRESS)
			return rc;
		if (prc != 0 && prc != KEEL_ENOQUORUM)
			continue;
		w->wait(w->ctx, deadline);
	}
}
