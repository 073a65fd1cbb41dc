/* Group collectives on device buffers (keel_group_use_device): the input this member
 * contributes is copied to the group's stage, the operation runs there on the host, and the
 * result is copied back before the member says it has it. The staged input stays as it was
 * until the request ends: a restart runs from it. Copies go in chunks of device_chunk_bytes,
 * as many at once as the device takes. */
#include <string.h>

#include "assert_int.h"
#include "group_int.h"
#include "keel/device.h"

#define STAGE_ALIGN(x) (((x) + 63u) & ~(uint64_t)63u)

/* Bytes of input this member contributes and of output it receives. */
static void io_bytes(const struct keel_group *g, const struct keel_req *r, uint64_t *in,
		     uint64_t *out)
{
	uint64_t es = r->esize, w = g->size, n = r->count * es, total = 0, mine = 0, ext = 0;
	bool root = r->root_rank == g->node->self;
	switch (r->kind) {
	case GK_ALLGATHER:
		*in = r->counts != NULL ? r->counts[g->self_pos] * es : n;
		for (uint32_t i = 0; r->counts != NULL && i < w; i++)
			if (r->counts[i] != 0 && (r->displs[i] + r->counts[i]) * es > ext)
				ext = (r->displs[i] + r->counts[i]) * es;
		*out = r->counts != NULL ? ext : n * w;
		return;
	case GK_REDUCE_SCATTER:
		for (uint32_t i = 0; i < w; i++) {
			uint64_t c = r->counts != NULL ? r->counts[i] : r->count;
			total += c;
			mine = i == g->self_pos ? c : mine;
		}
		*in = total * es;
		*out = mine * es;
		return;
	case GK_ALLREDUCE:
		*in = *out = n;
		return;
	case GK_BROADCAST:
		*in = root ? n : 0;
		*out = root ? 0 : n;
		return;
	case GK_REDUCE:
	case GK_GATHER:
		*in = n;
		*out = root ? (r->kind == GK_GATHER ? n * w : n) : 0;
		return;
	case GK_SCATTER:
		*in = root ? n * w : 0;
		*out = n;
		return;
	case GK_ALLTOALL:
		*in = *out = 0;
		for (uint32_t i = 0; i < w; i++) {
			uint64_t se =
			    r->counts != NULL ? r->displs[i] + r->counts[i] : (i + 1) * r->count;
			uint64_t re =
			    r->rcounts != NULL ? r->rdispls[i] + r->rcounts[i] : (i + 1) * r->count;
			*in = se * es > *in ? se * es : *in;
			*out = re * es > *out ? re * es : *out;
		}
		return;
	default:
		*in = *out = 0;
	}
}

int grp_dev_prepare(struct keel_group *g, struct keel_req *r)
{
	io_bytes(g, r, &r->in_bytes, &r->out_bytes);
	if (g->stage == NULL || r->kind == GK_BARRIER || r->kind == GK_SPLIT)
		return 0;
	uint64_t need = STAGE_ALIGN(r->in_bytes) + STAGE_ALIGN(r->out_bytes);
	if (need > g->stage_bytes)
		return -ENOSPC;
	r->dev = true;
	r->d_in = r->in;
	r->d_out = r->out;
	r->in = g->stage;
	/* a broadcast's one buffer is the root's input and the others' output */
	r->out = r->kind == GK_BROADCAST ? g->stage : g->stage + STAGE_ALIGN(r->in_bytes);
	return 0;
}

/* Test every piece of work out; false (request finished) when one failed. */
static bool test_all(struct keel_group *g, struct keel_req *r)
{
	const struct keel_device *d = g->node->cfg.device;
	uint32_t kept = 0;
	bool failed = false;
	for (uint32_t i = 0; i < r->dev_nt; i++) {
		int rc = d->ops->test(d->state, r->dev_tickets[i]);
		if (rc == -EINPROGRESS)
			r->dev_tickets[kept++] = r->dev_tickets[i];
		else if (rc != 0)
			failed = true;
	}
	r->dev_nt = kept;
	return !failed;
}

/* The output's pieces copied back: its blocks for the V forms (bytes between them are the
 * caller's, as MPI allows: they are not written), else all of it. false past the last. */
static bool out_region(const struct keel_req *r, uint32_t i, uint64_t *off, uint64_t *len)
{
	const size_t *c = r->kind == GK_ALLTOALL ? r->rcounts : r->counts;
	const size_t *d = r->kind == GK_ALLTOALL ? r->rdispls : r->displs;
	bool v = c != NULL && d != NULL && (r->kind == GK_ALLGATHER || r->kind == GK_ALLTOALL);
	if (!v) {
		*off = 0;
		*len = r->out_bytes;
		return i == 0;
	}
	if (i >= r->w)
		return false;
	*off = d[i] * r->esize;
	*len = c[i] * r->esize;
	return true;
}

/* Queue copies of [dev_queued, bytes) and test; true once all are done. */
static bool pump(struct keel_group *g, struct keel_req *r, uint8_t *dst, const uint8_t *src,
		 uint64_t bytes, enum keel_copy_dir dir)
{
	const struct keel_device *d = g->node->cfg.device;
	uint64_t chunk = g->node->cfg.device_chunk_bytes;
	chunk = chunk != 0 ? chunk : KEEL_DEVICE_CHUNK_DEFAULT;
	while (r->dev_queued < bytes && r->dev_nt < KEEL_DEVICE_INFLIGHT_MAX) {
		uint64_t len = bytes - r->dev_queued;
		len = len > chunk ? chunk : len;
		uint32_t t;
		int rc = d->ops->copy(d->state, dst + r->dev_queued, src + r->dev_queued,
				      (size_t)len, dir, &t);
		if (rc == -EAGAIN)
			break;
		if (rc != 0) {
			grp_finish(g, r, KEEL_EDEVICE);
			return false;
		}
		r->dev_tickets[r->dev_nt++] = t;
		r->dev_queued += len;
		r->progress_ns = g->node->now_ns;
	}
	if (!test_all(g, r)) {
		grp_finish(g, r, KEEL_EDEVICE);
		return false;
	}
	return r->dev_queued == bytes && r->dev_nt == 0;
}

bool grp_dev_stage_in(struct keel_group *g, struct keel_req *r)
{
	if (!r->dev || r->dev_phase >= 2)
		return true;
	if (r->dev_phase == 0) {
		r->dev_phase = 1;
		r->dev_queued = 0;
	}
	if (!pump(g, r, r->in == r->out ? r->out : (uint8_t *)r->in, r->d_in, r->in_bytes,
		  KEEL_COPY_D2H))
		return false;
	r->dev_phase = 2;
	return true;
}

bool grp_dev_copy_out(struct keel_group *g, struct keel_req *r)
{
	if (!r->dev || r->dev_phase == 4)
		return true;
	if (r->dev_phase == 2) {
		r->dev_phase = 3;
		r->dev_queued = 0;
		r->dev_region = 0;
	}
	uint64_t off, len;
	while (out_region(r, r->dev_region, &off, &len)) {
		if (!pump(g, r, r->d_out + off, r->out + off, len, KEEL_COPY_H2D))
			return false; /* (pump leaves the finished region's count at len) */
		r->dev_region++;
		r->dev_queued = 0;
	}
	r->dev_phase = 4;
	return true;
}

bool grp_dev_drain(struct keel_group *g, struct keel_req *r)
{
	if (!r->dev)
		return true;
	if (r->dev_nt != 0 && test_all(g, r) && r->dev_nt != 0)
		return false; /* (a failed device does no more work: nothing to wait for) */
	r->dev_nt = 0;
	if (r->dev_phase >= 3)
		r->dev_phase = 2; /* a restart copies its new result out again */
	return true;
}

int keel_group_use_device(struct keel_group *g, void *stage, size_t stage_bytes)
{
	if (valid_size(g) == 0)
		return -EINVAL;
	if (stage != NULL && (g->node->cfg.device == NULL || ((uintptr_t)stage & 63u) != 0))
		return -EINVAL;
	if (g->run_seq != g->next_seq)
		return -EBUSY;
	g->stage = stage;
	g->stage_bytes = stage != NULL ? stage_bytes : 0;
	return 0;
}
