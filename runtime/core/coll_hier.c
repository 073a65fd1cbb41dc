/* The hierarchical AllReduce (KEEL_ALGO_HIER): the view's shape by host, and its schedule as
 * one list of steps for the engine (collectives.c) — a ring reduce-scatter inside each host, an
 * AllReduce of each member's slice across hosts, a ring all-gather inside each host. Pure
 * schedule functions plus one O(view) pass per view; never allocates: the tables are carved
 * from the node's storage. */
#include <string.h>

#include "assert_int.h"
#include "keel/limits.h"
#include "node_int.h"

/* host_of, hier_pos, and hier_tmp (two tables), world entries each. */
size_t coll_hier_bytes(uint32_t world)
{
	KEEL_ASSERT(world >= 1 && world <= KEEL_WORLD_MAX);
	return (size_t)world * 4 * sizeof(uint32_t);
}

bool coll_hier_config_valid(const struct keel_config *cfg)
{
	KEEL_ASSERT(cfg != NULL && cfg->world_size <= KEEL_WORLD_MAX);
	if (cfg->host_of == NULL)
		return true;
	for (uint32_t r = 0; r < cfg->world_size; r++)
		if (cfg->host_of[r] >= cfg->world_size)
			return false;
	return true;
}

void coll_hier_carve(struct keel_node *n, uint8_t *mem, const struct keel_config *cfg)
{
	KEEL_ASSERT(n != NULL && mem != NULL && ((uintptr_t)mem & 3u) == 0);
	KEEL_ASSERT(cfg->world_size == n->world && coll_hier_config_valid(cfg));
	uint32_t *t = (uint32_t *)(void *)mem;
	n->host_of = t;
	n->hier_pos = t + n->world;
	n->hier_tmp = t + 2 * (size_t)n->world;
	for (uint32_t r = 0; r < n->world; r++)
		n->host_of[r] = cfg->host_of != NULL ? cfg->host_of[r] : r;
	n->cfg.host_of = n->host_of; /* the caller's array need not outlive keel_init */
	n->hier_valid = false;
}

/* Group the installed view's members by host: hosts numbered in the order of their first
 * member's position, members of a host in position order. Every member computes this from the
 * same view and the same host_of, so every member builds the same schedule. */
static void shape_compute(struct keel_node *n)
{
	uint32_t count = n->view.count;
	uint32_t *index_of = n->hier_tmp;	 /* host number -> host index */
	uint32_t *fill = n->hier_tmp + n->world; /* members met so far, by host index */
	KEEL_ASSERT(count >= 1 && count <= n->world);
	n->hier_valid = true;
	n->hier_epoch = n->view.epoch;
	n->hier_ok = false;
	for (uint32_t p = 0; p < count; p++)
		index_of[n->host_of[n->rank_at[p]]] = UINT32_MAX;
	uint32_t hosts = 0;
	for (uint32_t p = 0; p < count; p++) {
		uint32_t h = n->host_of[n->rank_at[p]];
		if (index_of[h] == UINT32_MAX) {
			index_of[h] = hosts;
			fill[hosts++] = 0;
		}
		fill[index_of[h]]++;
	}
	uint32_t local = fill[0];
	if (hosts < 2 || local < 2)
		return;
	for (uint32_t i = 0; i < hosts; i++)
		if (fill[i] != local)
			return; /* uneven: the operation runs flat */
	KEEL_ASSERT(hosts * local == count);
	memset(fill, 0, hosts * sizeof(uint32_t));
	for (uint32_t p = 0; p < count; p++) {
		uint32_t hi = index_of[n->host_of[n->rank_at[p]]], j = fill[hi]++;
		n->hier_pos[hi * local + j] = p;
		if (n->rank_at[p] == n->self) {
			n->hier_host_self = hi;
			n->hier_local_self = j;
		}
	}
	n->hier_hosts = hosts;
	n->hier_local = local;
	n->hier_ok = true;
	KEEL_ASSERT(n->hier_pos[n->hier_host_self * local + n->hier_local_self] ==
		    n->pos_of[n->self]);
}

bool coll_hier_view_ok(struct keel_node *n)
{
	KEEL_ASSERT(n != NULL && n->member);
	if (!n->hier_valid || n->hier_epoch != n->view.epoch)
		shape_compute(n);
	KEEL_ASSERT(!n->hier_ok || n->hier_hosts * n->hier_local == n->view.count);
	return n->hier_ok;
}

void coll_hier_begin(const struct keel_node *n, struct keel_op *op)
{
	KEEL_ASSERT(n->hier_valid && n->hier_ok && n->hier_epoch == n->view.epoch);
	KEEL_ASSERT(op->kind == OPK_ALLREDUCE && op->world == n->view.count);
	op->hosts = n->hier_hosts;
	op->local = n->hier_local;
	op->host_idx = n->hier_host_self;
	op->local_idx = n->hier_local_self;
	op->hier_pos = n->hier_pos;
	/* Across hosts, the slice is picked by size as AUTO picks for a whole buffer. Every
	 * member must choose alike (step numbers must agree): from count, not its own slice. */
	uint64_t slice_count = op->count / op->local;
	bool small = slice_count * op->elem_size <= n->cfg.rd_max_bytes || slice_count < op->hosts;
	op->inter = small ? KEEL_ALGO_RD : KEEL_ALGO_RING;
}

uint32_t coll_hier_step_count(const struct keel_op *op)
{
	KEEL_ASSERT(op->algo == KEEL_ALGO_HIER && op->hosts >= 2 && op->local >= 2);
	KEEL_ASSERT(op->hosts * op->local == op->world);
	return 2 * (op->local - 1) + coll_flat_steps(op->inter, op->hosts);
}

static int32_t pos_at(const struct keel_op *op, uint32_t host, int32_t local)
{
	KEEL_ASSERT_DEBUG(host < op->hosts && local < (int32_t)op->local);
	return local < 0 ? -1 : (int32_t)op->hier_pos[host * op->local + (uint32_t)local];
}

/* Steps 0..L-2: ring reduce-scatter of the whole buffer among the host's L members, which
 * leaves member j the host's sum of part (j + 1) % L, its slice. Then the slice's AllReduce
 * among the members with the same local index on every host, a ring or recursive doubling
 * over the slice whose input is already in the output. Last, L-1 steps of the ring's
 * all-gather inside the host. Everything a step touches outside its own host is the slice. */
void coll_hier_step(const struct keel_op *op, uint32_t t, struct step *s)
{
	uint32_t L = op->local, H = op->hosts, li = op->local_idx, hi = op->host_idx;
	uint32_t a = L - 1, b = coll_flat_steps(op->inter, H);
	KEEL_ASSERT_DEBUG(t < 2 * a + b && li < L && hi < H);
	if (t < a || t >= a + b) {
		coll_ring_part(op, L, li, t < a ? t : t - b, 0, op->count, s);
		s->final = false; /* a host's sum: the result only once the slices crossed hosts */
		s->send_peer = pos_at(op, hi, s->send_peer);
		s->recv_peer = pos_at(op, hi, s->recv_peer);
		return;
	}
	uint64_t first, count;
	coll_part(op->count, L, (li + 1) % L, &first, &count);
	if (op->inter == KEEL_ALGO_RING) {
		coll_ring_part(op, H, hi, t - a, first, count, s);
		s->send_from_out = true; /* the ring's step 0 sends the host's sum, not the input */
		if (s->action == ACT_REDUCE_IN)
			s->action = ACT_REDUCE_OUT;
	} else {
		coll_rd_part(op, H, hi, t - a, first, count, true, s);
	}
	KEEL_ASSERT_DEBUG(s->action != ACT_REDUCE_IN); /* the input was reduced into out */
	/* Peers are hosts here: the member with this local index on that host. */
	s->send_peer = s->send_peer < 0 ? -1 : pos_at(op, (uint32_t)s->send_peer, (int32_t)li);
	s->recv_peer = s->recv_peer < 0 ? -1 : pos_at(op, (uint32_t)s->recv_peer, (int32_t)li);
}
