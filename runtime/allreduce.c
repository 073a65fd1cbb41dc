/* AllReduce: ring (reduce-scatter + all-gather, streamed fragment by fragment so every
 * received piece is forwarded at once) and recursive doubling (with the usual fold for
 * non-power-of-two worlds). Both are written as a list of steps; one engine moves two
 * cursors (send, receive) through the steps, bounded by the reliable window. */
#include <string.h>

#include "assert_int.h"
#include "node_int.h"
#include "reduce_int.h"

static uint32_t pow2_floor(uint32_t v)
{
	uint32_t p = 1;
	while (p <= v / 2)
		p *= 2;
	return p;
}

static uint32_t log2_u32(uint32_t p)
{
	uint32_t k = 0;
	while ((1u << k) < p)
		k++;
	return k;
}

static uint32_t step_count(enum keel_algo algo, uint32_t world)
{
	if (world <= 1)
		return 0;
	if (algo == KEEL_ALGO_RING)
		return 2 * (world - 1);
	return log2_u32(pow2_floor(world)) + 2; /* fold-in, exchanges, fold-out */
}

/* Bytes of ring chunk c: the count split as evenly as possible, whole elements. */
static void chunk_bytes(const struct keel_op *op, uint32_t c, uint64_t *off, uint64_t *len)
{
	uint64_t base = op->count / op->world, extra = op->count % op->world;
	uint64_t start = c * base + (c < extra ? c : extra);
	*off = start * op->elem_size;
	*len = (base + (c < extra ? 1 : 0)) * op->elem_size;
}

static void ring_step(const struct keel_op *op, uint32_t r, uint32_t t, struct step *s)
{
	uint32_t w = op->world;
	s->send_peer = (int32_t)((r + 1) % w);
	s->send_from_out = t > 0;
	chunk_bytes(op, (r + 2 * w - t) % w, &s->send_off, &s->send_len);
	s->recv_peer = (int32_t)((r + w - 1) % w);
	chunk_bytes(op, (r + 2 * w - t - 1) % w, &s->recv_off, &s->recv_len);
	s->action = t < w - 1 ? ACT_REDUCE_IN : ACT_COPY;
	s->final = t == w - 2;
	s->recv_after_send = false;
}

static void rd_step(const struct keel_op *op, uint32_t r, uint32_t t, struct step *s)
{
	uint32_t w = op->world, p2 = pow2_floor(w), rem = w - p2, k = log2_u32(p2);
	if (t == 0) { /* fold-in: ranks beyond the power of two hand their input to r - p2 */
		if (r >= p2) {
			s->send_peer = (int32_t)(r - p2);
		} else if (r < rem) {
			s->recv_peer = (int32_t)(r + p2);
			s->action = ACT_REDUCE_IN;
			s->final = k == 0;
		}
	} else if (t <= k) {
		if (r >= p2)
			return;
		uint32_t partner = r ^ (1u << (t - 1));
		s->send_peer = s->recv_peer = (int32_t)partner;
		s->send_from_out = r < rem || t > 1;
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
	s->send_len = s->send_peer >= 0 ? op->bytes : 0;
	s->recv_len = s->recv_peer >= 0 ? op->bytes : 0;
}

static void op_step(const struct keel_node *n, const struct keel_op *op, uint32_t t, struct step *s)
{
	memset(s, 0, sizeof(*s));
	s->send_peer = -1;
	s->recv_peer = -1;
	if (op->algo == KEEL_ALGO_RING)
		ring_step(op, n->self, t, s);
	else
		rd_step(op, n->self, t, s);
}

static struct keel_op *running_op(struct keel_node *n)
{
	struct keel_op *op = &n->ops[n->op_run_id % n->ops_max];
	return op->state == OP_RUNNING && op->id == n->op_run_id ? op : NULL;
}

/* Has the receive cursor passed byte `end` of step t? */
static bool recv_passed(const struct keel_op *op, uint32_t t, uint64_t end)
{
	return op->recv_step > t || (op->recv_step == t && op->recv_off >= end);
}

static bool send_passed(const struct keel_op *op, uint32_t t, uint64_t end)
{
	return op->send_step > t || (op->send_step == t && op->send_off >= end);
}

static void skip_empty_recv(const struct keel_node *n, struct keel_op *op)
{
	struct step s;
	while (op->recv_step < op->step_count) {
		op_step(n, op, op->recv_step, &s);
		if (s.recv_peer >= 0 && op->recv_off < s.recv_len)
			return;
		op->recv_step++;
		op->recv_off = 0;
	}
}

/* Queue as many fragments as the window and the data dependencies allow. */
static void pump_sends(struct keel_node *n, struct keel_op *op)
{
	struct step s;
	while (op->send_step < op->step_count) {
		op_step(n, op, op->send_step, &s);
		if (s.send_peer < 0 || op->send_off >= s.send_len) {
			op->send_step++;
			op->send_off = 0;
			continue;
		}
		uint64_t len = s.send_len - op->send_off;
		if (len > op->frag_bytes)
			len = op->frag_bytes;
		/* Data this step sends from the output is what the previous step received. */
		if (s.send_from_out && !recv_passed(op, op->send_step - 1, op->send_off + len))
			return;
		if (!rel_can_send(n, (uint32_t)s.send_peer) || n->budget_bytes == 0)
			return;
		struct wire_header h;
		node_header_init(n, &h, WIRE_DATA, (uint32_t)s.send_peer);
		h.op_id = op->id;
		h.step = (uint16_t)op->send_step;
		h.offset = (uint32_t)op->send_off;
		h.total_len = (uint32_t)s.send_len;
		const uint8_t *src =
		    (s.send_from_out ? op->out : op->in) + s.send_off + op->send_off;
		int rc = rel_send(n, (uint32_t)s.send_peer, &h, src, (uint32_t)len);
		KEEL_ASSERT(rc == 0);
		node_budget_spend(n, (uint32_t)len);
		op->send_off += len;
		op->progress_ns = n->now_ns;
	}
}

static void op_finish(struct keel_node *n, struct keel_op *op, int status)
{
	op->state = OP_DONE;
	op->status = status;
	if (status == 0)
		n->ctr.ops_completed++;
	else
		n->ctr.ops_failed++;
	n->op_run_id++;
}

/* A peer this operation may still depend on is gone: suspected, or left before completing
 * it. (Until membership views exist, every member counts: the ring depends on all of them.) */
static bool needed_peer_lost(const struct keel_node *n, const struct keel_op *op)
{
	for (uint32_t i = 0; i < n->world; i++) {
		const struct peer *p = &n->peers[i];
		if (i == n->self || p->state == KEEL_PEER_ALIVE)
			continue;
		if (p->state != KEEL_PEER_DEAD || seq_before(p->left_after_ops, op->id + 1))
			return true;
	}
	return false;
}

static void op_begin(struct keel_node *n, struct keel_op *op)
{
	op->state = OP_RUNNING;
	op->progress_ns = n->now_ns;
	if (op->world == 1 && op->bytes != 0 && op->in != op->out)
		memcpy(op->out, op->in, op->bytes);
}

void coll_progress(struct keel_node *n)
{
	for (uint32_t guard = 0; guard < n->ops_max; guard++) {
		struct keel_op *op = &n->ops[n->op_run_id % n->ops_max];
		if (op->id != n->op_run_id || op->state == OP_FREE || op->state == OP_DONE)
			return;
		if (op->state == OP_QUEUED)
			op_begin(n, op);
		if (n->fatal != 0) {
			op_finish(n, op, n->fatal);
			continue;
		}
		pump_sends(n, op);
		skip_empty_recv(n, op);
		if (op->send_step >= op->step_count && op->recv_step >= op->step_count) {
			op_finish(n, op, 0);
			continue;
		}
		if (needed_peer_lost(n, op)) {
			op_finish(n, op, KEEL_EPEERDEAD);
			continue;
		}
		if (n->now_ns - op->progress_ns >= n->cfg.op_timeout_ns) {
			op_finish(n, op, -ETIMEDOUT);
			continue;
		}
		return;
	}
}

uint64_t coll_next_deadline(const struct keel_node *n)
{
	const struct keel_op *op = &n->ops[n->op_run_id % n->ops_max];
	if (op->id != n->op_run_id || op->state != OP_RUNNING)
		return UINT64_MAX;
	return op->progress_ns + n->cfg.op_timeout_ns;
}

static void apply(const struct keel_op *op, const struct step *s, uint64_t off, const uint8_t *data,
		  uint64_t len)
{
	uint8_t *dst = op->out + s->recv_off + off;
	size_t cnt = (size_t)(len / op->elem_size);
	if (s->action == ACT_COPY)
		memcpy(dst, data, (size_t)len);
	else if (s->action == ACT_REDUCE_IN)
		reduce_apply(dst, op->in + s->recv_off + off, data, cnt, op->dtype, op->redop);
	else
		reduce_apply(dst, dst, data, cnt, op->dtype, op->redop);
	if (s->final && op->redop == KEEL_AVG && s->action != ACT_COPY)
		reduce_finish_avg(dst, cnt, op->dtype, op->world);
}

bool coll_deliver(struct keel_node *n, uint32_t peer, const struct wire_header *h,
		  const uint8_t *payload)
{
	if (seq_before(h->op_id, n->op_run_id)) {
		n->ctr.drop_stale++; /* an operation that already ended here */
		return true;
	}
	struct keel_op *op = running_op(n);
	if (op == NULL || op->id != h->op_id)
		return false; /* a later operation: keep it until we get there */
	skip_empty_recv(n, op);
	if (h->step > op->recv_step)
		return false;
	struct step s;
	op_step(n, op, op->recv_step, &s);
	if (h->step < op->recv_step || s.recv_peer != (int32_t)peer || h->total_len != s.recv_len ||
	    h->offset != op->recv_off || h->payload_len % op->elem_size != 0 ||
	    (uint64_t)h->offset + h->payload_len > s.recv_len) {
		n->ctr.drop_protocol++; /* well formed, but not what this operation expects */
		return true;
	}
	if (s.recv_after_send && !send_passed(op, op->recv_step, op->recv_off + h->payload_len))
		return false;
	apply(op, &s, op->recv_off, payload, h->payload_len);
	op->recv_off += h->payload_len;
	op->progress_ns = n->now_ns;
	skip_empty_recv(n, op);
	return true;
}

static bool overlap(const uint8_t *a, const uint8_t *b, uint64_t len)
{
	return a != b && a < b + len && b < a + len;
}

int keel_allreduce_start(struct keel_node *node, const void *send, void *recv, size_t count,
			 enum keel_dtype dtype, enum keel_redop redop, struct keel_op **handle)
{
	if (node == NULL || handle == NULL || (unsigned)dtype >= KEEL_DTYPE_COUNT ||
	    (unsigned)redop >= KEEL_REDOP_COUNT)
		return -EINVAL;
	if (count != 0 && (send == NULL || recv == NULL))
		return -EINVAL;
	uint64_t esize = keel_dtype_size(dtype);
	if (count > UINT64_MAX / esize)
		return -EINVAL;
	uint64_t bytes = (uint64_t)count * esize;
	if (count != 0 && overlap(send, recv, bytes))
		return -EINVAL;
	enum keel_algo algo = node->cfg.algo;
	if (algo == KEEL_ALGO_AUTO)
		algo = bytes <= node->cfg.rd_max_bytes || count < node->world ? KEEL_ALGO_RD
									      : KEEL_ALGO_RING;
	/* Offsets travel as 32 bits: a step's message (a ring chunk, or the whole buffer for
	 * recursive doubling) must stay below 4 GiB. */
	uint64_t step_bytes = algo == KEEL_ALGO_RING ? bytes / node->world + esize : bytes;
	if (step_bytes > UINT32_MAX)
		return -EMSGSIZE;
	struct keel_op *op = &node->ops[node->op_next_id % node->ops_max];
	if (op->state != OP_FREE)
		return -EBUSY;
	memset(op, 0, sizeof(*op));
	op->id = node->op_next_id++;
	op->algo = algo;
	op->dtype = dtype;
	op->redop = redop;
	op->elem_size = (uint32_t)esize;
	op->frag_bytes = (uint32_t)((node->mtu - WIRE_HEADER_SIZE) / esize * esize);
	op->world = node->world;
	op->step_count = step_count(algo, node->world);
	op->in = send;
	op->out = recv;
	op->count = count;
	op->bytes = bytes;
	op->state = OP_QUEUED;
	*handle = op;
	coll_progress(node);
	return 0;
}

int keel_op_test(struct keel_node *node, struct keel_op *handle)
{
	if (node == NULL || handle < node->ops || handle >= node->ops + node->ops_max ||
	    handle->state == OP_FREE)
		return -EINVAL;
	if (handle->state != OP_DONE)
		return -EINPROGRESS;
	int status = handle->status;
	handle->state = OP_FREE;
	return status;
}

int keel_allreduce(struct keel_node *node, const void *send, void *recv, size_t count,
		   enum keel_dtype dtype, enum keel_redop redop)
{
	if (node == NULL || node->cfg.waiter.now_ns == NULL || node->cfg.waiter.wait == NULL)
		return -EINVAL;
	struct keel_op *op;
	int rc = keel_allreduce_start(node, send, recv, count, dtype, redop, &op);
	if (rc != 0)
		return rc;
	const struct keel_waiter *w = &node->cfg.waiter;
	for (;;) { /* ends: every running op finishes or times out after op_timeout_ns */
		uint64_t deadline;
		int prc = keel_poll(node, w->now_ns(w->ctx), &deadline);
		rc = keel_op_test(node, op);
		if (rc != -EINPROGRESS)
			return rc;
		if (prc != 0)
			continue; /* the op fails with the transport error on the next poll */
		w->wait(w->ctx, deadline);
	}
}
