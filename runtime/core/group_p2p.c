/* Point-to-point Send/Recv inside a group, launched in batches. Messages between two members
 * are numbered per direction: the n-th send to a peer meets its n-th receive from us. A
 * receiver reads a message whole, in order, then says so (P2P_DONE, cumulative): the send
 * ends there. A view change cuts the streams: at the peer's SYNC (how much of our messages it
 * has read) each send goes on from there; an item whose peer left fails with KEEL_EPEERGONE. */
#include <string.h>

#include "assert_int.h"
#include "group_int.h"

static bool item_pending(const struct p2p_item *it)
{
	return it->status == 1;
}

bool grp_p2p_pending(const struct keel_group *g)
{
	for (uint32_t i = 0; i < g->ops_max; i++)
		if (g->p2p[i].state == GS_RUNNING)
			return true;
	return false;
}

static void batch_check_done(struct keel_group *g, struct keel_req *r)
{
	int status = 0;
	for (uint32_t i = 0; i < r->item_count; i++) {
		if (item_pending(&r->items[i]))
			return;
		if (r->items[i].status < 0 && status == 0)
			status = r->items[i].status;
	}
	grp_finish(g, r, status);
}

/* Send what the windows allow: for each peer, its next message in order. */
static void pump(struct keel_group *g, struct keel_req *r)
{
	struct keel_node *n = g->node;
	uint64_t frag = n->payload_max - GRP_P2P_SUBHDR_BYTES;
	for (uint32_t i = 0; i < r->item_count; i++) {
		struct p2p_item *it = &r->items[i];
		struct gpeer *p = &g->peers[it->peer_rank];
		if (it->p.kind != KEEL_P2P_SEND || !item_pending(it) || g->syncing)
			continue;
		while (p->p2p_sent == it->seq && seq_before(it->seq, p->p2p_rtr) &&
		       n->budget_bytes != 0) {
			uint64_t len = it->p.bytes - it->off;
			len = len > frag ? frag : len;
			struct grp_subhdr sh = {
			    .group = g->id, .seq = it->seq, .msg = GMSG_P2P, .tag = it->p.tag};
			if (!grp_send(n, it->peer_rank, &sh, 0, (uint32_t)it->off,
				      (uint32_t)it->p.bytes, NULL, 0,
				      (const uint8_t *)it->p.buf + it->off, (uint32_t)len))
				break;
			node_budget_spend(n, (uint32_t)len);
			it->off += len;
			r->progress_ns = n->now_ns;
			if (it->off == it->p.bytes)
				p->p2p_sent++;
		}
	}
}

void grp_p2p_progress(struct keel_group *g)
{
	struct keel_node *n = g->node;
	for (uint32_t b = 0; b < g->ops_max; b++) {
		struct keel_req *r = &g->p2p[b];
		if (r->state != GS_RUNNING)
			continue;
		if (n->fatal != 0 || n->noquorum || !g->member) {
			int why = n->fatal != 0 ? n->fatal
				  : n->noquorum ? KEEL_ENOQUORUM
						: KEEL_EEXCLUDED;
			for (uint32_t i = 0; i < r->item_count; i++)
				if (item_pending(&r->items[i]))
					r->items[i].status = why;
		} else if (n->now_ns - r->start_ns >= n->op_bound_ns) {
			for (uint32_t i = 0; i < r->item_count; i++)
				if (item_pending(&r->items[i]))
					r->items[i].status = -ETIMEDOUT;
		} else {
			pump(g, r);
		}
		batch_check_done(g, r);
	}
}

/* The pending receive that message `seq` from `peer` meets, if posted. */
static struct p2p_item *find_recv(struct keel_group *g, uint32_t peer, uint32_t seq,
				  struct keel_req **batch)
{
	for (uint32_t b = 0; b < g->ops_max; b++) {
		struct keel_req *r = &g->p2p[b];
		for (uint32_t i = 0; r->state == GS_RUNNING && i < r->item_count; i++) {
			struct p2p_item *it = &r->items[i];
			if (it->p.kind == KEEL_P2P_RECV && it->peer_rank == peer &&
			    it->seq == seq && item_pending(it)) {
				*batch = r;
				return it;
			}
		}
	}
	return NULL;
}

bool grp_p2p_deliver(struct keel_group *g, uint32_t peer, const struct wire_header *h,
		     const struct grp_subhdr *sh, const uint8_t *data, uint32_t len)
{
	struct keel_node *n = g->node;
	struct gpeer *p = &g->peers[peer];
	if (seq_before(sh->seq, p->p2p_read)) {
		n->ctr.drop_stale++; /* read already (sent again after a view change) */
		return true;
	}
	struct keel_req *r = NULL;
	struct p2p_item *it = find_recv(g, peer, sh->seq, &r);
	if (it == NULL || g->syncing)
		return false; /* its receive is not posted yet */
	uint64_t total = h->total_len - GRP_P2P_SUBHDR_BYTES;
	if (sh->tag != it->p.tag || total != it->p.bytes) {
		n->ctr.drop_protocol++;
		it->status = KEEL_EMISMATCH; /* the programs disagree: say so, read no more */
		p->p2p_read++;
		p->p2p_read_off = 0;
		p->p2p_done_owed = true;
		p->refused_last = true; /* the sender hears it: KEEL_EMISMATCH there too */
		batch_check_done(g, r);
		return true;
	}
	if (h->offset < it->off) {
		n->ctr.drop_stale++; /* resent after a view change: we have these bytes */
		return true;
	}
	if (h->offset != it->off || h->offset + len > it->p.bytes) {
		n->ctr.drop_protocol++;
		return true;
	}
	memcpy((uint8_t *)it->p.buf + it->off, data, len);
	it->off += len;
	p->p2p_read_off = it->off;
	r->progress_ns = n->now_ns;
	if (it->off == it->p.bytes) {
		it->status = 0;
		p->p2p_read++;
		p->p2p_read_off = 0;
		p->p2p_done_owed = true;
		p->refused_last = false;
		batch_check_done(g, r);
	}
	return true;
}

void grp_p2p_on_done(struct keel_group *g, uint32_t peer, uint32_t read, bool refused)
{
	struct gpeer *p = &g->peers[peer];
	if (seq_before(p->p2p_acked, read))
		p->p2p_acked = read;
	for (uint32_t b = 0; b < g->ops_max; b++) {
		struct keel_req *r = &g->p2p[b];
		if (r->state != GS_RUNNING)
			continue;
		for (uint32_t i = 0; i < r->item_count; i++) {
			struct p2p_item *it = &r->items[i];
			if (it->p.kind == KEEL_P2P_SEND && it->peer_rank == peer &&
			    item_pending(it) && seq_before(it->seq, read))
				it->status = refused && it->seq + 1 == read ? KEEL_EMISMATCH : 0;
		}
		batch_check_done(g, r);
	}
}

void grp_p2p_on_view(struct keel_group *g)
{
	for (uint32_t b = 0; b < g->ops_max; b++) {
		struct keel_req *r = &g->p2p[b];
		for (uint32_t i = 0; r->state == GS_RUNNING && i < r->item_count; i++) {
			struct p2p_item *it = &r->items[i];
			if (!item_pending(it))
				continue;
			if (!g->member)
				it->status = KEEL_EEXCLUDED;
			else if (grp_pos_of(g, it->peer_rank) == UINT32_MAX)
				it->status = KEEL_EPEERGONE;
		}
		if (r->state == GS_RUNNING)
			batch_check_done(g, r);
	}
}

/* The peer's SYNC says how much of our messages it read: sends go on from there. */
void grp_p2p_on_sync(struct keel_group *g, uint32_t peer, const struct grp_sync *s)
{
	struct gpeer *p = &g->peers[peer];
	grp_p2p_on_done(g, peer, s->p2p_read, false);
	p->p2p_sent = s->p2p_read;
	for (uint32_t b = 0; b < g->ops_max; b++) {
		struct keel_req *r = &g->p2p[b];
		for (uint32_t i = 0; r->state == GS_RUNNING && i < r->item_count; i++) {
			struct p2p_item *it = &r->items[i];
			if (it->p.kind == KEEL_P2P_SEND && it->peer_rank == peer &&
			    item_pending(it))
				it->off = it->seq == s->p2p_read ? s->p2p_off : 0;
		}
	}
}

int grp_p2p_launch(struct keel_group *g, const struct keel_p2p *items, uint32_t count,
		   struct keel_req **req)
{
	struct keel_req *r = NULL;
	for (uint32_t b = 0; b < g->ops_max && r == NULL; b++)
		if (g->p2p[b].state == GS_FREE)
			r = &g->p2p[b];
	if (r == NULL)
		return -EBUSY;
	memset(r, 0, offsetof(struct keel_req, items));
	r->g = g;
	r->kind = GK_P2P;
	r->state = GS_RUNNING;
	r->start_ns = r->progress_ns = g->node->now_ns;
	r->done_epoch = g->node->view.epoch;
	r->item_count = count;
	for (uint32_t i = 0; i < count; i++) {
		struct p2p_item *it = &r->items[i];
		it->p = items[i];
		it->peer_rank = g->ranks[items[i].peer];
		it->off = 0;
		it->status = 1;
		struct gpeer *p = &g->peers[it->peer_rank];
		it->seq = items[i].kind == KEEL_P2P_SEND ? p->p2p_tx++ : p->p2p_rx_posted++;
		p->rtr_owed = p->rtr_owed || items[i].kind == KEEL_P2P_RECV;
	}
	*req = r;
	grp_advance(g);
	return 0;
}
