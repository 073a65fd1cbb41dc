/* The device side of an AllReduce on device buffers: the input is staged to host memory in
 * chunks, each received region is copied into the host mirror and reduced (or copied) into
 * device memory by one queued call, and forwarding waits until the device has finished the
 * bytes it reads. Device work may finish in any order; this file never queues two pieces that
 * touch the same bytes at once. Never blocks, never allocates: queues live in the op. */
#include <string.h>

#include "assert_int.h"
#include "keel/device.h"
#include "keel/limits.h"
#include "node_int.h"

#define QMASK (KEEL_DEVICE_INFLIGHT_MAX - 1u)
_Static_assert((KEEL_DEVICE_INFLIGHT_MAX & QMASK) == 0, "queue capacity is a power of two");

static uint32_t chunk_bytes(const struct keel_node *n, const struct keel_op *op)
{
	uint32_t c =
	    n->cfg.device_chunk_bytes != 0 ? n->cfg.device_chunk_bytes : KEEL_DEVICE_CHUNK_DEFAULT;
	KEEL_ASSERT(c >= KEEL_DEVICE_CHUNK_MIN && c % op->elem_size == 0);
	return c;
}

static const struct keel_device *device_of(const struct keel_node *n)
{
	KEEL_ASSERT(n->cfg.device != NULL && n->cfg.device->ops != NULL);
	return n->cfg.device;
}

uint32_t coll_dev_applied_step(const struct keel_op *op)
{
	const struct op_dev *d = &op->dev;
	if (!d->on)
		return op->recv_step;
	if (d->ap_head != d->ap_tail)
		return d->ap_q[d->ap_head & QMASK].step;
	return d->pend ? d->pend_step : op->recv_step;
}

bool coll_dev_applied_passed(const struct keel_op *op, uint32_t t, uint64_t end)
{
	const struct op_dev *d = &op->dev;
	KEEL_ASSERT_DEBUG(t < op->step_count && end <= op->bytes);
	uint32_t step = op->recv_step;
	uint64_t off = op->recv_off;
	if (d->on && d->ap_head != d->ap_tail) {
		step = d->ap_q[d->ap_head & QMASK].step;
		off = d->ap_q[d->ap_head & QMASK].lo;
	} else if (d->on && d->pend) {
		step = d->pend_step;
		off = d->pend_lo;
	}
	return step > t || (step == t && off >= end);
}

bool coll_dev_input_ready(const struct keel_op *op, uint64_t lo, uint64_t end)
{
	const struct op_dev *d = &op->dev;
	KEEL_ASSERT_DEBUG(lo <= end && end <= op->bytes);
	if (!d->on || d->direct_in)
		return true;
	/* a send from outside the staged bytes would read stale stage: never planned so */
	(void)lo;
	KEEL_ASSERT_DEBUG(lo >= d->stage_lo && end <= d->stage_hi);
	return d->in_ready >= end;
}

/* Out of place, the input bytes an attempt stages are those it sends, [lo, hi) over its
 * steps (a ring: its own chunk; recursive doubling: all of it). In place, all of it: the
 * reductions read the staged copy, since the output overwrites the input. */
static void plan_staging(struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	uint64_t lo = op->bytes, hi = 0;
	if (d->d_in == d->d_out) {
		lo = 0;
		hi = op->bytes;
	}
	for (uint32_t t = 0; t < op->step_count && !d->direct_in && d->d_in != d->d_out; t++) {
		struct step s;
		coll_step(op, t, &s);
		if (s.send_peer < 0 || s.send_from_out || s.send_len == 0)
			continue;
		lo = s.send_off < lo ? s.send_off : lo;
		hi = s.send_off + s.send_len > hi ? s.send_off + s.send_len : hi;
	}
	if (hi <= lo)
		lo = hi = 0; /* nothing to stage */
	if (lo != d->stage_lo || hi != d->stage_hi) {
		/* out of place: nothing staged before a begin, and a restart's drained first */
		KEEL_ASSERT(d->in_head == d->in_tail);
		d->staged = d->in_ready = lo; /* the last attempt's staging is no use */
	}
	d->stage_lo = lo;
	d->stage_hi = hi;
	KEEL_ASSERT(d->stage_lo <= d->in_ready && d->in_ready <= d->staged &&
		    d->staged <= d->stage_hi);
}

const uint8_t *coll_dev_direct_src(const struct keel_op *op, bool from_out)
{
	const struct op_dev *d = &op->dev;
	if (!d->on || !(from_out ? d->direct_out : d->direct_in))
		return NULL;
	return from_out ? d->d_out : d->d_in;
}

/* Is [p, p + len) inside the `bytes` at base? Returns its offset there, or UINT64_MAX. */
static uint64_t offset_in(const uint8_t *base, uint64_t bytes, const uint8_t *p, uint32_t len)
{
	uintptr_t lo = (uintptr_t)base, at = (uintptr_t)p;
	return at >= lo && at - lo <= bytes && len <= bytes - (at - lo) ? at - lo : UINT64_MAX;
}

/* An input's home is its staged copy; an output's, its mirror. Two operations may share a
 * buffer: the caller writes it only once both were handed back, so either home's copy of
 * those bytes is the same. */
uint8_t *coll_dev_home(struct keel_node *n, const uint8_t *p, uint32_t len)
{
	for (uint32_t i = 0; i < n->ops_max; i++) {
		struct keel_op *op = &n->ops[i];
		const struct op_dev *d = &op->dev;
		if (op->state == OP_FREE || !d->on)
			continue;
		uint64_t at =
		    d->direct_in_used ? offset_in(d->d_in, op->bytes, p, len) : UINT64_MAX;
		if (at != UINT64_MAX)
			return (uint8_t *)(uintptr_t)op->in + at;
		at = d->direct_out_used ? offset_in(d->d_out, op->bytes, p, len) : UINT64_MAX;
		if (at != UINT64_MAX)
			return op->out + at;
	}
	return NULL;
}

void coll_dev_release_nic(struct keel_node *n, const struct keel_op *op)
{
	const struct op_dev *d = &op->dev;
	if (n->tx_device == 0)
		return;
	if (d->direct_in_used)
		rel_device_copy_in_range(n, d->d_in, op->bytes);
	if (d->direct_out_used)
		rel_device_copy_in_range(n, d->d_out, op->bytes);
}

bool coll_dev_nic_done(const struct keel_node *n, const struct keel_op *op)
{
	const struct op_dev *d = &op->dev;
	if ((!d->direct_in_used && !d->direct_out_used) ||
	    (n->tx_device == 0 && n->copyin_busy == 0))
		return true;
	/* the stage: the input's staged copy, then the output's mirror */
	return !rel_device_tails_in(n, d->d_in, op->bytes) &&
	       !rel_device_tails_in(n, d->d_out, op->bytes) &&
	       !rel_device_copies_into(n, op->in, 2 * op->bytes);
}

/* May the NIC on the way to every other member read [p, p + bytes) of device memory? */
static bool members_take_device(struct keel_node *n, const void *p, uint64_t bytes)
{
	for (uint32_t r = 0; r < n->world; r++)
		if (r != n->self && view_has(&n->view, r) && !node_peer_device_tail(n, r, p, bytes))
			return false;
	return true;
}

bool coll_dev_idle(const struct keel_op *op)
{
	const struct op_dev *d = &op->dev;
	return !d->on ||
	       (d->ap_head == d->ap_tail && d->in_head == d->in_tail && !d->pend && !d->solo_copy);
}

static bool overlaps(uint64_t a_lo, uint64_t a_hi, uint64_t b_lo, uint64_t b_hi)
{
	return a_lo < b_hi && b_lo < a_hi;
}

/* Does queued work not yet finished touch buffer bytes [lo, hi)? */
static bool busy_bytes(const struct op_dev *d, uint64_t lo, uint64_t hi)
{
	KEEL_ASSERT_DEBUG(d->ap_tail - d->ap_head <= KEEL_DEVICE_INFLIGHT_MAX);
	for (uint32_t i = d->ap_head; i != d->ap_tail; i++) {
		const struct dev_item *it = &d->ap_q[i & QMASK];
		if (!it->done && overlaps(lo, hi, it->at, it->at + (it->hi - it->lo)))
			return true;
	}
	return false;
}

/* Did the device queue the work? -EAGAIN: not now (full); another error: it is unusable. */
static bool accepted(struct op_dev *d, int rc)
{
	if (rc != 0 && rc != -EAGAIN)
		d->fault = KEEL_EDEVICE;
	return rc == 0;
}

/* The reduction of received bytes b into the output at `at` for step s: with the input (out
 * of place in device memory, in place its staged copy) or the output itself, mirrored to the
 * host where `mirror` is not NULL, divided at the last step of an average. */
static struct keel_device_reduce reduce_of(const struct keel_op *op, const struct step *s,
					   uint64_t at, uint64_t len, const void *b, void *mirror)
{
	const struct op_dev *d = &op->dev;
	const uint8_t *in = d->d_in == d->d_out ? op->in : d->d_in;
	return (struct keel_device_reduce){
	    .dst = d->d_out + at,
	    .a = s->action == ACT_REDUCE_IN ? (const void *)(in + at) : d->d_out + at,
	    .b = b,
	    .mirror = mirror,
	    .count = len / op->elem_size,
	    .dtype = op->dtype,
	    .op = op->redop,
	    .divisor = s->final && op->redop == KEEL_AVG ? op->world : 0};
}

/* Queue the gathered bytes as one copy or reduction. false: not now (the input they reduce
 * with is not staged yet, or the device is full); they stay gathered. */
static bool flush(struct keel_node *n, struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->on && d->pend && d->pend_hi > d->pend_lo);
	if (d->ap_tail - d->ap_head == KEEL_DEVICE_INFLIGHT_MAX || d->fault != 0)
		return false;
	struct step s;
	coll_step(op, d->pend_step, &s);
	KEEL_ASSERT(s.action != ACT_NONE && d->pend_hi <= s.recv_len);
	uint64_t at = s.recv_off + d->pend_lo, len = d->pend_hi - d->pend_lo;
	/* a copy still bringing some of these bytes to the mirror (coll_dev_take_device) */
	if (busy_bytes(d, at, at + len))
		return false;
	/* out of place the kernel reads the input in device memory; in place, its staged copy */
	bool in_place = d->d_in == d->d_out;
	if (s.action == ACT_REDUCE_IN && in_place && !coll_dev_input_ready(op, at, at + len))
		return false;
	/* a ring's partial sums, written again by its all-gather: not while a NIC reads them */
	if (d->direct_out && n->tx_device != 0 && rel_device_tails_in(n, d->d_out + at, len))
		return false;
	const struct keel_device *dev = device_of(n);
	uint32_t ticket = 0;
	int rc;
	if (s.action == ACT_COPY) {
		rc = dev->ops->copy(dev->state, d->d_out + at, op->out + at, len, KEEL_COPY_H2D,
				    &ticket);
	} else {
		/* sums the NIC forwards from d_out need no copy on the host */
		struct keel_device_reduce r =
		    reduce_of(op, &s, at, len, op->out + at, d->direct_out ? NULL : op->out + at);
		rc = dev->ops->reduce(dev->state, &r, &ticket);
	}
	if (!accepted(d, rc))
		return false;
	d->ap_q[d->ap_tail++ & QMASK] = (struct dev_item){
	    .ticket = ticket, .step = d->pend_step, .lo = d->pend_lo, .hi = d->pend_hi, .at = at};
	d->pend = false;
	return true;
}

bool coll_dev_can_take(struct keel_node *n, struct keel_op *op, uint32_t t, const struct step *s,
		       uint64_t off, uint64_t len)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->on && len > 0 && off + len <= s->recv_len);
	/* Gathered bytes of another step are queued first: one call covers one step's region. */
	if (d->pend && (d->pend_step != t || d->pend_hi != off) && !flush(n, op))
		return false;
	return !busy_bytes(d, s->recv_off + off, s->recv_off + off + len);
}

void coll_dev_take(struct keel_node *n, struct keel_op *op, uint32_t t, const struct step *s,
		   uint64_t off, const uint8_t *data, uint64_t len)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->on && s->action != ACT_NONE);
	/* coll_dev_can_take queued any other step's bytes */
	KEEL_ASSERT(!d->pend || (d->pend_step == t && d->pend_hi == off));
	memcpy(op->out + s->recv_off + off, data, (size_t)len);
	if (!d->pend) {
		d->pend = true;
		d->pend_step = t;
		d->pend_lo = off;
	}
	d->pend_hi = off + len;
	if (d->pend_hi - d->pend_lo >= chunk_bytes(n, op))
		(void)flush(n, op); /* large enough: start the device on it now */
}

/* On some GPUs what a NIC wrote is not yet visible to kernels when its completion arrives: the
 * first device call of a burst that reads such a payload asks the device to flush (a stale or
 * duplicate payload needs none: it is never read). A failure faults this operation. */
static bool nic_writes_visible(struct keel_node *n, struct op_dev *d)
{
	const struct keel_device *dev = device_of(n);
	if (n->nic_writes_flushed || dev->ops->nic_writes_visible == NULL)
		return true;
	n->ctr.device_nic_flushes++;
	if (dev->ops->nic_writes_visible(dev->state) != 0) {
		d->fault = KEEL_EDEVICE;
		return false;
	}
	n->nic_writes_flushed = true;
	return true;
}

/* A received fragment whose payload the NIC wrote into device memory (GPUDirect RDMA): one
 * device call reads it there, and its item holds it until popped, when it goes back to the
 * transport. A copy the host forwards from the mirror goes to the mirror first, then joins
 * the gathered bytes like a fragment received on the host (flush waits for that copy). */
bool coll_dev_take_device(struct keel_node *n, struct keel_op *op, uint32_t t, const struct step *s,
			  uint64_t off, const uint8_t *data, uint64_t len, uint32_t peer)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->on && s->action != ACT_NONE && len > 0 && off + len <= s->recv_len);
	/* bytes gathered on the host go first, in their own call */
	if (d->pend && !flush(n, op))
		return false;
	uint64_t at = s->recv_off + off;
	if (d->ap_tail - d->ap_head == KEEL_DEVICE_INFLIGHT_MAX || d->fault != 0 ||
	    busy_bytes(d, at, at + len))
		return false;
	bool in_place = d->d_in == d->d_out;
	if (s->action == ACT_REDUCE_IN && in_place && !coll_dev_input_ready(op, at, at + len))
		return false;
	if (d->direct_out && n->tx_device != 0 && rel_device_tails_in(n, d->d_out + at, len))
		return false;
	if (!nic_writes_visible(n, d))
		return false;
	/* the host forwards from the mirror unless the NIC reads the sums in device memory */
	uint8_t *mirror = d->direct_out ? NULL : op->out + at;
	const struct keel_device *dev = device_of(n);
	uint32_t ticket = 0;
	int rc;
	if (s->action == ACT_COPY) {
		rc = mirror == NULL
			 ? dev->ops->copy(dev->state, d->d_out + at, data, len, KEEL_COPY_D2D,
					  &ticket)
			 : dev->ops->copy(dev->state, mirror, data, len, KEEL_COPY_D2H, &ticket);
	} else {
		struct keel_device_reduce r = reduce_of(op, s, at, len, data, mirror);
		rc = dev->ops->reduce(dev->state, &r, &ticket);
	}
	if (!accepted(d, rc))
		return false;
	d->ap_q[d->ap_tail++ & QMASK] = (struct dev_item){.ticket = ticket,
							  .step = t,
							  .lo = off,
							  .hi = off + len,
							  .at = at,
							  .held = data,
							  .held_peer = peer};
	if (s->action == ACT_COPY && mirror != NULL) {
		/* the mirror gets the bytes; d_out gets them from there once that copy is done */
		d->pend = true;
		d->pend_step = t;
		d->pend_lo = off;
		d->pend_hi = off + len;
	}
	n->ctr.device_rx_frags++;
	return true;
}

/* Test the unfinished items of a queue; pop finished ones from its head. Returns how many
 * finished; `popped_hi` gets the end of the last one popped (staging: the ready prefix). */
static uint32_t test_queue(struct keel_node *n, struct op_dev *d, struct dev_item *q,
			   uint32_t *head, uint32_t tail, uint64_t *popped_hi)
{
	const struct keel_device *dev = device_of(n);
	/* in order: nothing after the first unfinished piece has finished either */
	bool ordered = dev->ops->ordered != NULL && dev->ops->ordered(dev->state);
	uint32_t finished = 0;
	KEEL_ASSERT(tail - *head <= KEEL_DEVICE_INFLIGHT_MAX);
	for (uint32_t i = *head; i != tail; i++) {
		struct dev_item *it = &q[i & QMASK];
		if (it->done)
			continue;
		int rc = dev->ops->test(dev->state, it->ticket);
		if (rc == -EINPROGRESS && ordered)
			break;
		if (rc == -EINPROGRESS)
			continue;
		it->done = true; /* released by the device either way */
		finished++;
		if (rc != 0)
			d->fault = KEEL_EDEVICE;
	}
	while (*head != tail && q[*head & QMASK].done) {
		struct dev_item *it = &q[(*head)++ & QMASK];
		*popped_hi = it->hi;
		/* popped in order: the other item reading the same payload finished too */
		if (it->held != NULL)
			node_rx_release(n, it->held_peer, it->held);
		it->held = NULL;
	}
	return finished;
}

/* Queue the next chunks of the input's copy to the stage, as far as the queue allows. */
static bool stage_input(struct keel_node *n, struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	const struct keel_device *dev = device_of(n);
	bool moved = false;
	if (op->state == OP_RUNNING && op->world == 1)
		return false; /* a view of one copies device to device: nothing to stage */
	/* Before its begin an attempt knows what it stages only in place (all of it). */
	if (op->state != OP_RUNNING && d->d_in != d->d_out)
		return false;
	for (uint32_t guard = 0; guard < KEEL_DEVICE_INFLIGHT_MAX && d->staged < d->stage_hi;
	     guard++) {
		if (d->in_tail - d->in_head == KEEL_DEVICE_INFLIGHT_MAX || d->fault != 0)
			break;
		uint64_t len = d->stage_hi - d->staged;
		if (len > chunk_bytes(n, op))
			len = chunk_bytes(n, op);
		uint32_t ticket = 0;
		int rc = dev->ops->copy(dev->state, (void *)(op->in + d->staged),
					d->d_in + d->staged, len, KEEL_COPY_D2H, &ticket);
		if (!accepted(d, rc))
			break;
		d->in_q[d->in_tail++ & QMASK] = (struct dev_item){
		    .ticket = ticket, .lo = d->staged, .hi = d->staged + len, .at = d->staged};
		d->staged += len;
		moved = true;
	}
	KEEL_ASSERT(d->in_ready <= d->staged && d->staged <= d->stage_hi);
	return moved;
}

/* A view of one: the result is the input, copied device to device. */
static void solo_copy(struct keel_node *n, struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->solo_copy && op->world == 1);
	if (d->ap_tail - d->ap_head == KEEL_DEVICE_INFLIGHT_MAX || d->fault != 0)
		return;
	const struct keel_device *dev = device_of(n);
	uint32_t ticket = 0;
	int rc = dev->ops->copy(dev->state, d->d_out, d->d_in, op->bytes, KEEL_COPY_D2D, &ticket);
	if (rc == -EAGAIN)
		return;
	d->solo_copy = false;
	if (rc != 0) {
		d->fault = KEEL_EDEVICE;
		return;
	}
	d->ap_q[d->ap_tail++ & QMASK] =
	    (struct dev_item){.ticket = ticket, .lo = 0, .hi = op->bytes, .at = 0};
}

bool coll_dev_progress(struct keel_node *n, struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->on);
	uint64_t ready = d->in_ready, unused = 0;
	uint32_t done = test_queue(n, d, d->in_q, &d->in_head, d->in_tail, &ready);
	KEEL_ASSERT(ready >= d->in_ready); /* chunks are popped in order: the prefix grows */
	d->in_ready = ready;
	done += test_queue(n, d, d->ap_q, &d->ap_head, d->ap_tail, &unused);
	bool moved = stage_input(n, op);
	if (d->solo_copy)
		solo_copy(n, op);
	if (d->pend && (op->state == OP_RUNNING) && flush(n, op))
		moved = true;
	return done != 0 || moved;
}

void coll_dev_begin(struct keel_node *n, struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	KEEL_ASSERT(d->on && d->ap_head == d->ap_tail); /* the last attempt's work drained */
	/* forget the bytes of the last view's attempt */
	d->pend = false;
	d->solo_copy = op->world == 1 && op->bytes != 0 && d->d_in != d->d_out;
	coll_dev_plan(n, op, op->world);
	plan_staging(op);
	/* A ring forwards each sum once, and its all-gather writes the partial ones again only
	 * after the next member used them (flush waits if not); recursive doubling and the
	 * hierarchy rewrite theirs at every step, and forward from the mirror. */
	d->direct_out = op->world > 1 && op->algo == KEEL_ALGO_RING &&
			members_take_device(n, d->d_out, op->bytes);
	d->direct_out_used = d->direct_out_used || d->direct_out;
}

void coll_dev_plan(struct keel_node *n, struct keel_op *op, uint32_t world)
{
	struct op_dev *d = &op->dev;
	/* Out of place the input is never written, so datagrams may read it where it lies until
	 * acknowledged; in place it is the output, and a restart needs the staged copy. */
	d->direct_in =
	    world > 1 && d->d_in != d->d_out && members_take_device(n, d->d_in, op->bytes);
	d->direct_in_used = d->direct_in_used || d->direct_in;
}

void coll_dev_stop(struct keel_op *op, bool finished)
{
	struct op_dev *d = &op->dev;
	if (!d->on)
		return;
	d->pend = false; /* bytes gathered for the view it ran on */
	d->solo_copy = false;
	if (finished)
		d->staged = d->in_ready = d->stage_hi; /* queue no more input */
}

bool coll_dev_drain(struct keel_node *n, struct keel_op *op)
{
	struct op_dev *d = &op->dev;
	uint64_t unused = 0;
	KEEL_ASSERT(op->state == OP_DONE && !d->pend && !d->solo_copy);
	(void)test_queue(n, d, d->in_q, &d->in_head, d->in_tail, &unused);
	(void)test_queue(n, d, d->ap_q, &d->ap_head, d->ap_tail, &unused);
	return coll_dev_idle(op);
}

static bool ranges_overlap(const void *a, uint64_t a_len, const void *b, uint64_t b_len)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return x < y + b_len && y < x + a_len;
}

int coll_dev_check_args(const struct keel_node *n, const void *send, const void *recv,
			uint64_t bytes, uint32_t elem_size, const void *stage, size_t stage_bytes)
{
	KEEL_ASSERT(n != NULL && (elem_size & (elem_size - 1)) == 0);
	if (n->cfg.device == NULL)
		return -EINVAL;
	if (bytes == 0)
		return 0;
	if (stage == NULL || stage_bytes / 2 < bytes)
		return -EINVAL;
	/* A GPU loads whole aligned elements; the engine's regions are whole elements. */
	if (((uintptr_t)send | (uintptr_t)recv | (uintptr_t)stage) % elem_size != 0)
		return -EINVAL;
	/* Device and host memory are one address space under CUDA's unified addressing, and are
	 * with the CPU stand-in: a stage inside a device buffer is a caller's mistake either way.
	 */
	if (ranges_overlap(stage, 2 * bytes, send, bytes) ||
	    ranges_overlap(stage, 2 * bytes, recv, bytes))
		return -EINVAL;
	return 0;
}

bool keel_device_takes_nic_writes(const struct keel_device *dev)
{
	return dev != NULL && dev->ops != NULL &&
	       (dev->ops->nic_writes_visible == NULL ||
		dev->ops->nic_writes_visible(dev->state) != -EOPNOTSUPP);
}

size_t keel_allreduce_device_stage_bytes(size_t count, enum keel_dtype dtype)
{
	if ((unsigned)dtype >= KEEL_DTYPE_COUNT)
		return 0;
	size_t es = keel_dtype_size(dtype);
	if (count == 0 || count > SIZE_MAX / 2 / es)
		return 0;
	return 2 * count * es;
}
